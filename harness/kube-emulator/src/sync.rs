//! Synchronisation with a deterministic wake-up order.
//!
//! `tokio::sync::watch` parks each waiting receiver on one of eight internal `Notify`s chosen
//! by the runtime's random number generator (seeded from the OS, not settable on stable tokio),
//! so when a value changes, the receivers waiting on it wake in an order that differs from run
//! to run. In paused time that order decides which controller writes first, and so the uids,
//! resourceVersions and even the states on a timeline. [`watch`] keeps tokio's channel for the
//! value and wakes every waiter through one `Notify`, in the order they started waiting.

pub mod watch {
    use std::ops::Deref;
    use std::sync::Arc;
    use tokio::sync::Notify;
    use tokio::sync::watch as tw;

    pub use tw::Ref;
    pub use tw::error::{RecvError, SendError};

    /// A watch channel whose receivers wake in the order they began to wait.
    #[allow(clippy::disallowed_methods)] // the one place tokio's channel is wrapped
    pub fn channel<T>(init: T) -> (Sender<T>, Receiver<T>) {
        let (tx, rx) = tw::channel(init);
        let notify = Arc::new(Notify::new());
        (
            Sender {
                inner: Some(tx),
                notify: notify.clone(),
            },
            Receiver { inner: rx, notify },
        )
    }

    #[derive(Debug)]
    pub struct Sender<T> {
        // `None` only while dropping, so receivers woken by the drop see the channel closed.
        inner: Option<tw::Sender<T>>,
        notify: Arc<Notify>,
    }

    #[derive(Debug)]
    pub struct Receiver<T> {
        inner: tw::Receiver<T>,
        notify: Arc<Notify>,
    }

    impl<T> Clone for Sender<T> {
        fn clone(&self) -> Self {
            Self {
                inner: self.inner.clone(),
                notify: self.notify.clone(),
            }
        }
    }

    impl<T> Clone for Receiver<T> {
        fn clone(&self) -> Self {
            Self {
                inner: self.inner.clone(),
                notify: self.notify.clone(),
            }
        }
    }

    impl<T> Drop for Sender<T> {
        fn drop(&mut self) {
            drop(self.inner.take());
            self.notify.notify_waiters();
        }
    }

    impl<T> Sender<T> {
        fn tx(&self) -> &tw::Sender<T> {
            self.inner
                .as_ref()
                .expect("a sender has its channel until dropped")
        }

        fn woke<R>(&self, r: R) -> R {
            self.notify.notify_waiters();
            r
        }

        pub fn send(&self, value: T) -> Result<(), SendError<T>> {
            let r = self.tx().send(value);
            self.woke(r)
        }

        pub fn send_replace(&self, value: T) -> T {
            let r = self.tx().send_replace(value);
            self.woke(r)
        }

        pub fn send_modify(&self, modify: impl FnOnce(&mut T)) {
            self.tx().send_modify(modify);
            self.woke(())
        }

        pub fn send_if_modified(&self, modify: impl FnOnce(&mut T) -> bool) -> bool {
            let changed = self.tx().send_if_modified(modify);
            if changed {
                self.notify.notify_waiters();
            }
            changed
        }

        pub fn borrow(&self) -> Ref<'_, T> {
            self.tx().borrow()
        }

        pub fn subscribe(&self) -> Receiver<T> {
            Receiver {
                inner: self.tx().subscribe(),
                notify: self.notify.clone(),
            }
        }
    }

    impl<T> Receiver<T> {
        pub fn borrow(&self) -> Ref<'_, T> {
            self.inner.borrow()
        }

        pub fn borrow_and_update(&mut self) -> Ref<'_, T> {
            self.inner.borrow_and_update()
        }

        pub fn has_changed(&self) -> Result<bool, RecvError> {
            self.inner.has_changed()
        }

        /// Waits for a value not yet seen and marks it seen; an error once every sender is gone.
        /// Cancel-safe, like tokio's.
        pub async fn changed(&mut self) -> Result<(), RecvError> {
            loop {
                let notified = self.notify.notified();
                let mut notified = std::pin::pin!(notified);
                // Registered before the check, so a send between the check and the await wakes us.
                notified.as_mut().enable();
                if self.inner.has_changed()? {
                    self.inner.borrow_and_update();
                    return Ok(());
                }
                notified.await;
            }
        }

        /// Waits until the value satisfies `f` (the current value included) and returns it.
        pub async fn wait_for(
            &mut self,
            mut f: impl FnMut(&T) -> bool,
        ) -> Result<Ref<'_, T>, RecvError> {
            loop {
                let notified = self.notify.notified();
                let mut notified = std::pin::pin!(notified);
                notified.as_mut().enable();
                let open = self.inner.has_changed();
                if f(self.inner.borrow_and_update().deref()) {
                    return Ok(self.inner.borrow());
                }
                open?;
                notified.await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::watch;
    use std::sync::{Arc, Mutex};

    /// Spawns `n` tasks that each wait for one change, in order, and returns the order they woke.
    async fn wake_order(n: usize) -> Vec<usize> {
        let (tx, rx) = watch::channel(0u32);
        let woke = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..n {
            let (mut rx, woke) = (rx.clone(), woke.clone());
            tasks.push(tokio::spawn(async move {
                rx.changed().await.unwrap();
                woke.lock().unwrap().push(i);
            }));
            // Let the task start waiting before the next one does.
            tokio::task::yield_now().await;
        }
        tx.send_replace(1);
        for t in tasks {
            t.await.unwrap();
        }
        Arc::try_unwrap(woke).unwrap().into_inner().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn receivers_wake_in_the_order_they_began_to_wait_every_time() {
        for _ in 0..20 {
            assert_eq!(wake_order(16).await, (0..16).collect::<Vec<_>>());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_receiver_learns_that_the_last_sender_is_gone() {
        let (tx, mut rx) = watch::channel(());
        let second = tx.clone();
        let waiting = tokio::spawn(async move { rx.changed().await });
        tokio::task::yield_now().await;
        drop(tx);
        drop(second);
        assert!(waiting.await.unwrap().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn wait_for_returns_at_once_when_the_value_already_holds_and_later_when_it_comes() {
        let (tx, mut rx) = watch::channel(1u32);
        assert_eq!(*rx.wait_for(|v| *v == 1).await.unwrap(), 1);
        let mut rx2 = tx.subscribe();
        let later = tokio::spawn(async move { *rx2.wait_for(|v| *v == 3).await.unwrap() });
        tx.send_replace(2);
        tokio::task::yield_now().await;
        tx.send_modify(|v| *v = 3);
        assert_eq!(later.await.unwrap(), 3);
    }
}
