//! The last line of defence after the engine's own restore: a guard that restores on drop and
//! panic, and the wait for Ctrl-C/SIGTERM after which the run restores and exits.

use std::sync::Arc;

use super::injector::FaultInjector;

/// Restores on drop (including unwinding from a panic): the last line of defence after the
/// engine's own restore. On a multi-thread runtime it blocks until restored; elsewhere it
/// spawns the restore and the journal covers a process that exits first.
pub(crate) struct RestoreGuard {
    injector: Arc<FaultInjector>,
}

impl RestoreGuard {
    pub(crate) fn new(injector: Arc<FaultInjector>) -> Self {
        Self { injector }
    }
}

impl Drop for RestoreGuard {
    fn drop(&mut self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::error!(
                "restore guard dropped outside a runtime; run `openshell-conformance restore`"
            );
            return;
        };
        let inj = self.injector.clone();
        let work = async move {
            let errors = inj.restore_all().await;
            for e in errors {
                tracing::error!(error = %e, "restore on drop failed; the journal keeps it");
            }
        };
        if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            tokio::task::block_in_place(|| handle.block_on(work));
        } else {
            handle.spawn(work);
        }
    }
}

#[cfg(test)]
/// Waits for Ctrl-C or SIGTERM, restores every active fault, and returns the signal's name so
/// the caller can exit (130 / 143).
pub(crate) async fn restore_on_signal(injector: Arc<FaultInjector>) -> &'static str {
    let name = wait_for_signal().await;
    tracing::warn!(signal = name, "restoring active faults before exiting");
    for e in injector.restore_all().await {
        tracing::error!(error = %e, "restore after {name} failed; the journal keeps it");
    }
    name
}

/// Waits for Ctrl-C or SIGTERM and returns its name.
#[cfg(unix)]
pub(crate) async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

/// Waits for Ctrl-C and returns its name.
#[cfg(not(unix))]
pub(crate) async fn wait_for_signal() -> &'static str {
    let _ = tokio::signal::ctrl_c().await;
    "SIGINT"
}
