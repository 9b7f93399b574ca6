//! The target: the system under test as scenarios see it. A scenario acts (create, exec, stop,
//! start, delete), observes (sandbox phases, Kubernetes objects) and breaks things (faults)
//! only through this trait, so one scenario runs unchanged against the emulated cluster, kind,
//! k3d or an existing cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use semver::Version;
use serde::{Deserialize, Serialize};

use crate::error::{Cause, chain};
use crate::phase::Phase;
use crate::timeline::{LogExcerpt, ObjectState, Recorder};
use crate::topology::Topology;

/// What a target can do beyond the basics; scenarios that need more are skipped, with a reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    /// `--restart-policy` on create (OpenShell 0.1.x; docs/upstream-facts.md F9.1).
    RestartPolicy,
    /// A main command given at create time becomes the canonical main process.
    MainCommand,
    GatewayStop,
    GatewayRestart,
    SandboxPodReplace,
    SupervisorKill,
    MainProcessKill,
    /// Make the sandbox's gateway credentials or CA wrong, for permanent bootstrap errors.
    BootstrapCredentialFault,
}

impl Capability {
    /// The fault this capability injects reaches every sandbox the gateway serves, not just
    /// the case's own.
    pub(crate) fn affects_shared_gateway(self) -> bool {
        matches!(self, Self::GatewayStop | Self::GatewayRestart)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::RestartPolicy => "restart-policy",
            Self::MainCommand => "main-command",
            Self::GatewayStop => crate::timeline::GATEWAY_STOP_KIND,
            Self::GatewayRestart => crate::timeline::GATEWAY_RESTART_KIND,
            Self::SandboxPodReplace => "sandbox-pod-replace",
            Self::SupervisorKill => "supervisor-kill",
            Self::MainProcessKill => "main-process-kill",
            Self::BootstrapCredentialFault => "bootstrap-credential-fault",
        }
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Describes a target before and after provisioning: labels for reports, and what it supports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetInfo {
    /// `emulated`, `kind`, `k3d`, `existing`, or a test double's name.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub defects: Vec<String>,
    /// The OpenShell version under test, when known; gates topologies and capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openshell: Option<Version>,
    /// Versions of the parts under test (openshell, agent-sandbox, chart), for reports.
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
    #[serde(default)]
    pub capabilities: BTreeSet<Capability>,
}

impl TargetInfo {
    /// Why this target cannot run a case on `topology` needing `requires`, if it cannot.
    pub fn skip_reason(&self, topology: &Topology, requires: &[Capability]) -> Option<String> {
        if let Some(v) = &self.openshell
            && !topology.supports(v)
        {
            return Some(format!(
                "topology {} needs OpenShell {} or newer; the target runs {v}",
                topology.name, topology.min_openshell
            ));
        }
        let missing: Vec<&str> = requires
            .iter()
            .filter(|c| !self.capabilities.contains(c))
            .map(|c| c.name())
            .collect();
        if missing.is_empty() {
            None
        } else {
            Some(format!(
                "{} lacks {}{}",
                self.label(),
                missing.join(", "),
                self.openshell
                    .as_ref()
                    .map(|v| format!(" (OpenShell {v})"))
                    .unwrap_or_default()
            ))
        }
    }

    pub fn label(&self) -> String {
        match &self.model {
            Some(m) => format!("target {} (model {m})", self.kind),
            None => format!("target {}", self.kind),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    Never,
    OnFailure,
    Always,
}

/// What to create. Sandboxes are persistent (a workspace PVC) on Kubernetes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SandboxSpec {
    pub name: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The canonical main process; None keeps the image's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
}

/// The Kubernetes name of a sandbox's resources (the Agent Sandbox `Sandbox` and its pod) in
/// OpenShell's shared workspace mode: `<workspace>--<name>` (docs/upstream-facts.md F3.2; pod
/// name = resource name, F4.11). Every path that finds a sandbox's objects uses this one
/// rule, so the emulated and real targets and the scenarios cannot drift apart.
pub fn sandbox_resource_name(workspace: &str, name: &str) -> String {
    format!("{workspace}--{name}")
}

/// The workspace PVC of a sandbox, `workspace-<resource name>`: the claim template is named
/// `workspace` and Agent Sandbox suffixes the resource name (docs/upstream-facts.md F3.2,
/// F4.10).
pub fn workspace_pvc_name(resource_name: &str) -> String {
    format!("workspace-{resource_name}")
}

/// The gateway's view of a sandbox (`openshell sandbox get`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SandboxView {
    pub name: String,
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The gateway's resource version of its record (`metadata.resource_version`, bumped on
    /// every write; docs/upstream-facts.md F6.8), where the target reports one. An answer with
    /// the version it had before a gateway fault is the stored record, not a report made after
    /// the fault ([`crate::timeline::STORED_BEFORE_FAULT_REASON`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

impl SandboxView {
    /// The timeline state of a sandbox whose gateway cannot be reached: phase `Unknown`, and a
    /// `Ready` condition of status `Unknown` that says why (see
    /// [`crate::timeline::ObjectState::unobserved`]). Checks that need a phase at an instant
    /// are not satisfied by it.
    pub fn unreachable_state(name: &str, detail: &str) -> ObjectState {
        let mut s = ObjectState::new(crate::timeline::GATEWAY_SANDBOX_KIND, None, name);
        s.phase = Some(Phase::Unknown.name().to_string());
        s.conditions.push(crate::timeline::ConditionState {
            type_: crate::timeline::READY_CONDITION.into(),
            status: "Unknown".into(),
            reason: Some(crate::timeline::GATEWAY_UNREACHABLE_REASON.into()),
            message: Some(detail.to_string()),
        });
        s
    }

    /// As a timeline object of kind [`crate::timeline::GATEWAY_SANDBOX_KIND`].
    pub fn to_state(&self) -> ObjectState {
        let mut s = ObjectState::new(crate::timeline::GATEWAY_SANDBOX_KIND, None, &self.name);
        s.resource_version = self.resource_version.clone();
        s.phase = Some(self.phase.name().to_string());
        if self.reason.is_some() || self.message.is_some() {
            s.conditions.push(crate::timeline::ConditionState {
                type_: crate::timeline::READY_CONDITION.into(),
                status: if self.phase == Phase::Ready {
                    "True"
                } else {
                    "False"
                }
                .into(),
                reason: self.reason.clone(),
                message: self.message.clone(),
            });
        }
        if let Some(code) = self.exit_code {
            s.containers.push(crate::timeline::ContainerState {
                name: "main".into(),
                state: "terminated".into(),
                reason: None,
                exit_code: Some(code),
                // The gateway's view says nothing of restarts here (the poller records
                // `restart_count` where the CLI prints it).
                restart_count: None,
            });
        }
        s
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecResult {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// A fault the harness can inject. `inject` returns once the fault is in effect; `restore`
/// returns once the system is back as the harness found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "kebab-case")]
pub enum Fault {
    /// Scale the gateway to zero and wait for its pods to be gone; restore scales it back.
    GatewayStop,
    /// Delete the gateway pod; restore waits for the replacement to be ready.
    GatewayRestart,
    /// Delete the sandbox pod so a replacement boots (and bootstraps again).
    SandboxPodReplace { sandbox: String },
    /// Kill the supervisor where the topology runs it (container or pod).
    SupervisorKill { sandbox: String },
    /// Kill the sandbox's main process.
    MainProcessKill { sandbox: String },
    /// Give the sandbox credentials the gateway rejects or a gateway certificate the sandbox
    /// must reject (`what`); restore puts the right ones back.
    BootstrapCredentials {
        sandbox: String,
        what: BootstrapMaterial,
    },
}

/// Which part of a sandbox's bootstrap material a [`Fault::BootstrapCredentials`] breaks. Its
/// [`name`](Self::name) is what keys, case labels and messages say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BootstrapMaterial {
    /// The sandbox's credentials: the gateway rejects them (Unauthenticated).
    Credentials,
    /// The gateway's certificate as the sandbox checks it: the sandbox cannot verify it.
    Certificate,
}

impl BootstrapMaterial {
    pub const ALL: [Self; 2] = [Self::Credentials, Self::Certificate];

    pub fn name(self) -> &'static str {
        match self {
            Self::Credentials => "credentials",
            Self::Certificate => "certificate",
        }
    }

    /// The material a [`name`](Self::name) names.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl std::fmt::Display for BootstrapMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Fault {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::GatewayStop => crate::timeline::GATEWAY_STOP_KIND,
            Self::GatewayRestart => crate::timeline::GATEWAY_RESTART_KIND,
            Self::SandboxPodReplace { .. } => "sandbox-pod-replace",
            Self::SupervisorKill { .. } => "supervisor-kill",
            Self::MainProcessKill { .. } => "main-process-kill",
            Self::BootstrapCredentials { .. } => "bootstrap-credentials",
        }
    }

    pub fn subject(&self) -> Option<&str> {
        match self {
            Self::GatewayStop | Self::GatewayRestart => None,
            Self::SandboxPodReplace { sandbox }
            | Self::SupervisorKill { sandbox }
            | Self::MainProcessKill { sandbox }
            | Self::BootstrapCredentials { sandbox, .. } => Some(sandbox),
        }
    }

    pub fn capability(&self) -> Capability {
        match self {
            Self::GatewayStop => Capability::GatewayStop,
            Self::GatewayRestart => Capability::GatewayRestart,
            Self::SandboxPodReplace { .. } => Capability::SandboxPodReplace,
            Self::SupervisorKill { .. } => Capability::SupervisorKill,
            Self::MainProcessKill { .. } => Capability::MainProcessKill,
            Self::BootstrapCredentials { .. } => Capability::BootstrapCredentialFault,
        }
    }
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum TargetError {
    /// The system under test refused the request (for example `FailedPrecondition`). This is
    /// product behaviour, recorded on the timeline and judged by checks.
    #[error("{code}: {message}")]
    Refused { code: String, message: String },
    /// The target cannot do this at all; the case is skipped with this reason.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The harness could not carry the request out (tool missing, cluster unreachable). The
    /// message says what was being done; `source`, when present, why it failed.
    #[error("{message}")]
    Infra {
        message: String,
        #[source]
        source: Option<Cause>,
    },
}

impl TargetError {
    pub fn refused(code: &str, message: impl Into<String>) -> Self {
        Self::Refused {
            code: code.to_string(),
            message: message.into(),
        }
    }

    crate::error::error_constructors!(Infra, infra, infra_from, "infrastructure failure");

    /// A command's error met inside a target call (a journal write, a cluster that could not be
    /// reached): the call's infrastructure failure, with the same message and cause. Explicit at
    /// each call site rather than a `From`, so that only the direction target → command
    /// converts silently.
    pub fn infra_of(e: crate::error::Error) -> Self {
        match e {
            crate::error::Error::Infra { message, source }
            | crate::error::Error::Usage { message, source } => Self::Infra { message, source },
            config @ crate::error::Error::Config { .. } => Self::infra(config.to_string()),
        }
    }
}

/// Errors are equal when they say the same thing at every level of their chain: causes are
/// opaque, so their messages are what can be compared.
impl PartialEq for TargetError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (
                Self::Refused { code, message },
                Self::Refused {
                    code: c,
                    message: m,
                },
            ) => code == c && message == m,
            (Self::Unsupported(a), Self::Unsupported(b)) => a == b,
            (Self::Infra { .. }, Self::Infra { .. }) => chain(self) == chain(other),
            _ => false,
        }
    }
}

impl Eq for TargetError {}

/// A target failure carried into a command's error: infrastructure failures keep their message
/// and cause; refusals and unsupported requests become infrastructure errors of their own
/// (outside a case nothing judges them).
impl From<TargetError> for crate::error::Error {
    fn from(e: TargetError) -> Self {
        match e {
            TargetError::Infra { message, source } => Self::Infra { message, source },
            other => Self::infra(other.to_string()),
        }
    }
}

pub type TargetResult<T> = Result<T, TargetError>;

/// Aborts the observer tasks when dropped, so observation ends with the case on every path.
#[derive(Default)]
pub struct Observers {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Observers {
    pub fn push(&mut self, task: tokio::task::JoinHandle<()>) {
        self.tasks.push(task);
    }
}

impl Drop for Observers {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The system under test, provisioned for one topology.
#[async_trait]
pub trait Target: Send + Sync {
    fn info(&self) -> TargetInfo;

    /// Installs what the topology needs (controller, chart, values) and waits until ready.
    async fn install(&self, topology: &Topology) -> TargetResult<()>;

    /// Starts feeding the recorder with every object state the target can see: sandbox
    /// resources, pods, PVCs, events, the gateway workload and the gateway's sandbox phases.
    async fn observe(&self, rec: Recorder) -> TargetResult<Observers>;

    /// The current state of everything observed, once; recorded at the end of a case so the
    /// timeline ends on fresh states even if a watch lags.
    async fn snapshot(&self) -> TargetResult<Vec<ObjectState>>;

    async fn create_sandbox(&self, spec: &SandboxSpec) -> TargetResult<SandboxView>;
    /// None when the gateway does not know the sandbox.
    async fn get_sandbox(&self, name: &str) -> TargetResult<Option<SandboxView>>;
    /// Runs a command in the sandbox through OpenShell (`openshell sandbox exec`).
    async fn exec(&self, sandbox: &str, argv: &[String]) -> TargetResult<ExecResult>;
    /// Runs a command in the sandbox's workload container through the Kubernetes API
    /// (`kubectl exec`), bypassing the gateway, so a scenario can look inside while the gateway
    /// is down (for example to see whether a workload started before bootstrap finished).
    async fn probe_exec(&self, sandbox: &str, argv: &[String]) -> TargetResult<ExecResult>;
    /// Reads a file of the sandbox's workspace volume without going through the sandbox (a
    /// reader pod mounting the PVC on a real cluster), so the harness can count main-process
    /// starts even while the sandbox is stopped, failed or completed. `path` is relative to the
    /// workspace root (`/sandbox` inside the sandbox). None when the file does not exist.
    async fn read_workspace(&self, sandbox: &str, path: &str) -> TargetResult<Option<String>>;
    /// Reports the main-process starts of `sandbox` now ([`crate::timeline::MAIN_PROCESS_STARTS_KEY`]),
    /// for targets that learn them only when asked; the scenario calls it before it counts
    /// starts. `marks` is the workspace file where the workload marks each start, the only view
    /// of starts some targets have. Targets that report starts as they happen (the emulated
    /// one) do nothing.
    async fn sample_main_process_starts(&self, sandbox: &str, marks: &str) -> TargetResult<()> {
        let _ = (sandbox, marks);
        Ok(())
    }
    async fn stop_sandbox(&self, name: &str) -> TargetResult<()>;
    async fn start_sandbox(&self, name: &str) -> TargetResult<()>;
    async fn delete_sandbox(&self, name: &str) -> TargetResult<()>;

    async fn inject(&self, fault: &Fault) -> TargetResult<()>;
    async fn restore(&self, fault: &Fault) -> TargetResult<()>;

    /// Checks that a restore took effect (the gateway's replicas back and ready, a replaced pod
    /// replaced, credentials back), without waiting: the engine calls it after every restore, and
    /// an error makes the case an infrastructure error naming the restore, so a fault the harness
    /// left in place is never judged as the product's doing. Targets with nothing to check
    /// return Ok.
    async fn verify_restored(&self, fault: &Fault) -> TargetResult<()> {
        let _ = fault;
        Ok(())
    }

    /// Checks, while the observers still run, that they missed nothing the target's own record
    /// says happened (on real targets: every phase commit the gateway logged for the case's
    /// sandboxes is on the timeline). An error names what was missed: the case is then an
    /// infrastructure error whatever its checks say, since they judged an incomplete timeline.
    /// Targets whose observers see every write (the emulated one) return Ok.
    async fn verify_observation(&self) -> TargetResult<()> {
        Ok(())
    }

    /// The log of `sandbox`'s supervisor, each line prefixed with the container runtime's
    /// RFC 3339 timestamp (`kubectl logs --timestamps`), from where the topology puts it
    /// ([`crate::effect::SandboxLayout::supervisor_log`]); R5's checks read its attempts
    /// ([`crate::retries`]). Where the topology's supervisor serves every sandbox, its whole log
    /// (its lines say which sandbox they are for). None when this target cannot read it.
    async fn supervisor_log(&self, sandbox: &str) -> TargetResult<Option<Vec<String>>> {
        let _ = sandbox;
        Ok(None)
    }

    /// The container logs of the sandbox's pods (current and previous), for diagnosing a failed
    /// case. Targets that cannot read logs return none.
    async fn logs(&self, sandbox: &str) -> TargetResult<Vec<LogExcerpt>> {
        let _ = sandbox;
        Ok(Vec::new())
    }

    /// Removes what the case left behind (sandboxes, releases), unless told to keep it.
    async fn teardown(&self) -> TargetResult<()>;
}

/// The line a scenario's workload appends to its marks file each time it starts.
pub const START_MARK: &str = "start";

/// Starts counted in a marks file: one [`START_MARK`] line per start; no file is 0 starts.
pub fn count_start_marks(content: Option<&str>) -> u64 {
    content.map_or(0, |c| {
        c.lines().filter(|l| l.trim() == START_MARK).count() as u64
    })
}

/// Makes a provisioned target for a topology: a fresh emulated cluster per case, or a shared
/// real cluster.
#[async_trait]
pub trait TargetFactory: Send + Sync {
    /// What the target will be, before anything is provisioned (for skip decisions).
    fn info(&self) -> TargetInfo;

    /// Brings up (or connects to) the cluster for one case.
    async fn provision(&self, topology: &Topology, rec: &Recorder)
    -> TargetResult<Arc<dyn Target>>;

    /// Removes what the cases of `topology` shared (an installation made once for them), after
    /// its last case of the run, whatever that case's outcome, and after an interrupted run.
    /// Factories whose cases share nothing do nothing.
    async fn release(&self, topology: &Topology) -> TargetResult<()> {
        let _ = topology;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_resource_is_named_workspace_double_dash_name_and_its_pvc_workspace_dash_that() {
        let r = sandbox_resource_name("default", "demo");
        assert_eq!(r, "default--demo");
        assert_eq!(workspace_pvc_name(&r), "workspace-default--demo");
    }

    #[test]
    fn a_bootstrap_material_is_named_and_parsed_back_by_the_same_word() {
        for m in BootstrapMaterial::ALL {
            assert_eq!(BootstrapMaterial::parse(m.name()), Some(m));
            assert_eq!(
                serde_json::to_value(m).unwrap(),
                serde_json::json!(m.name())
            );
        }
        assert_eq!(BootstrapMaterial::Credentials.name(), "credentials");
        assert_eq!(BootstrapMaterial::Certificate.name(), "certificate");
        assert_eq!(BootstrapMaterial::parse("token"), None);
    }
}
