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
