//! The gateway's RPC surface as in-process types: gRPC status codes and messages as upstream
//! writes them (docs/upstream-facts.md F1.9-F1.12), the client calls and the supervisor calls
//! (F7.1).

use std::time::Duration;

use kube_emulator::sync::watch;

/// The bootstrap RPC's path (F2.4, F12.7).
pub(crate) const ISSUE_SANDBOX_TOKEN_PATH: &str = "/openshell.v1.OpenShell/IssueSandboxToken";

/// A gRPC status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Status {
    pub code: &'static str,
    pub message: String,
}

impl Status {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
    pub(crate) fn failed_precondition(m: impl Into<String>) -> Self {
        Self::new("FailedPrecondition", m)
    }
    pub fn not_found(m: impl Into<String>) -> Self {
        Self::new("NotFound", m)
    }
    pub(crate) fn unavailable(m: impl Into<String>) -> Self {
        Self::new("Unavailable", m)
    }
    pub fn unauthenticated(m: impl Into<String>) -> Self {
        Self::new("Unauthenticated", m)
    }

    /// `grpc_retry` retries these (F2.2, lib.rs L2035-2052); the rest fail at once.
    pub(crate) fn retryable(&self) -> bool {
        matches!(
            self.code,
            "Unavailable"
                | "DeadlineExceeded"
                | "ResourceExhausted"
                | "Aborted"
                | "Internal"
                | "Unknown"
        )
    }
}

/// The certificate the gateway presents to one sandbox (Fault::BootstrapCredentials `certificate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerCert {
    /// Signed by the CA in `openshell-client-tls`.
    Trusted,
    /// Signed by an unknown issuer: a validating client must refuse it.
    UnknownIssuer,
}

/// `GetSandboxConfig`'s answer: the policy plus what the supervisor must do before launching.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SandboxConfig {
    pub sandbox_id: String,
    pub policy_version: u64,
    /// The main process command (`OPENSHELL_MAIN_PROCESS_SPEC`; None: idle).
    pub command: Option<Vec<String>>,
    /// The workspace must be re-initialised (defect `workspace-pvc-replaced…`).
    pub reset_workspace: bool,
    /// The main process already ran to completion: do not launch it again (R7).
    pub main_completed: bool,
}

/// `ConnectSupervisor`'s request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConnectRequest {
    pub sandbox_id: String,
    pub token: String,
    pub pod_uid: String,
    /// The running main generation, if any.
    pub main_instance: Option<u64>,
    /// This supervisor process did not launch that generation: it re-attaches after a restart.
    pub reattach: bool,
    pub policy_version: u64,
}

/// An accepted session. Dropping it ends the session on the gateway side; `alive` turns false
/// (or closes) when the gateway goes away.
pub(crate) struct Session {
    pub id: u64,
    pub heartbeat: Duration,
    pub alive: watch::Receiver<bool>,
    /// Relaunch the main process now (defect `completed-workload-replayed`).
    pub relaunch_main: bool,
    pub(crate) _guard: watch::Sender<()>,
}

/// `ReportMainProcessExit`'s acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExitAck {
    /// Terminal: Completed or Error.
    Terminal,
    /// Relaunch after this back-off (restart policy).
    RestartAfter(Duration),
    /// Ignored (stopping, stale instance, already terminal).
    Ignored,
}
