//! What the shell cannot do by itself and asks its host for: the clock, signalling a process,
//! a `/proc` view. The emulated cluster (and the programs it runs) supply these.

use std::sync::Arc;

use crate::error::KillError;
use crate::fs::Volume;

/// Side effects the shell cannot do by itself, supplied by the emulated cluster.
pub trait ShellHooks: Send + Sync {
    /// Seconds since the Unix epoch on the emulated cluster's clock (for `date +%s`).
    fn now_unix(&self) -> u64;
    /// `kill [-SIGNAL] PID`: signal is the name without "SIG" ("TERM" default, "KILL",
    /// "INT"..., numeric signals mapped to names; signal 0 is passed as "0"). An error is
    /// printed to stderr and `kill` exits 1.
    fn kill(&self, pid: &str, signal: &str) -> Result<(), KillError>;
    /// The hooks of an exec into `container`, when they depend on the container (its PID
    /// namespace); None: these hooks serve every container of the pod.
    fn for_container(&self, _container: &str) -> Option<Arc<dyn ShellHooks>> {
        None
    }
    /// `/proc` as the exec sees it (a read-only snapshot taken when the exec starts), or None
    /// for no `/proc` at all.
    fn procfs(&self) -> Option<Volume> {
        None
    }
}

/// Hooks for tests and for containers with nothing to signal: clock at a fixed epoch plus
/// tokio elapsed time since creation; kill always fails with "kill: (PID) - No such process".
pub struct DefaultHooks {
    epoch_unix: u64,
    start: tokio::time::Instant,
}

impl DefaultHooks {
    pub fn new(epoch_unix: u64) -> Self {
        DefaultHooks {
            epoch_unix,
            start: tokio::time::Instant::now(),
        }
    }
}

impl ShellHooks for DefaultHooks {
    fn now_unix(&self) -> u64 {
        self.epoch_unix
            .saturating_add(self.start.elapsed().as_secs())
    }

    fn kill(&self, pid: &str, _signal: &str) -> Result<(), KillError> {
        Err(KillError::NoSuchProcess {
            pid: pid.to_string(),
        })
    }
}
