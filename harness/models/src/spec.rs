//! The OpenShell models and their defect switches, as data: which model, which defects, which
//! Agent Sandbox version, and the [`Behaviour`] (rules) and [`Timings`] (constants) they imply.
//! A model is a release of `fixtures/releases/` ([`conformance_core::release`]): its behaviour
//! flags are the rules, and a defect switch breaks one of them on top ([`Defect::apply`]). The
//! gateway, the supervisors and the driver read only [`Behaviour`] and [`Timings`], never the
//! model name, so every rule lives in exactly one place: the release's file, read by
//! [`Selection::behaviour`]. A new rule is a field of [`Behaviour`] and the code that follows it.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use conformance_core::release::{Release, Releases};
use conformance_core::target::Capability;
use semver::Version;
use serde::Deserialize;

use conformance_kube_models::agent_sandbox::AgentSandboxVersion;

/// A model of OpenShell on Kubernetes: one release of `fixtures/releases/`.
#[derive(Clone, Copy)]
pub struct Model(&'static ModelInfo);

/// One entry of [`MODELS`], for `list` and error messages: a release and the rules read from it.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub name: &'static str,
    pub description: &'static str,
    /// The OpenShell version the model stands for (None: the contract, every topology).
    pub openshell: Option<String>,
    pub release: &'static Release,
    /// The release's rules, before any defect switch.
    behaviour: Behaviour,
    /// The Agent Sandbox release the controller runs unless told otherwise.
    agent_sandbox: AgentSandboxVersion,
    /// The releases `--agent-sandbox` may pick (empty: not selectable).
    selectable: Vec<AgentSandboxVersion>,
}

/// Every model: the releases compiled in from `fixtures/releases/`, in file name order.
pub static MODELS: LazyLock<Vec<ModelInfo>> = LazyLock::new(|| {
    ModelInfo::all_of(Releases::builtin())
        .unwrap_or_else(|e| panic!("a shipped release does not fit the models: {e}"))
});

/// A release whose data the models cannot follow (a rule or Agent Sandbox release they lack).
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("fixtures/releases/{release}.yaml: field `behaviour`: {source}")]
    Behaviour {
        release: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("fixtures/releases/{release}.yaml: field `{field}`: `{version}` is not a modeled Agent Sandbox release ({valid})", valid = AgentSandboxVersion::ALL.map(AgentSandboxVersion::name).join(", "))]
    AgentSandbox {
        release: String,
        field: &'static str,
        version: String,
    },
}

impl ModelInfo {
    /// Reads a release's rules and Agent Sandbox releases.
    pub fn from_release(release: &'static Release) -> Result<Self, ReleaseError> {
        let behaviour = serde_json::from_value(release.behaviour.clone()).map_err(|source| {
            ReleaseError::Behaviour {
                release: release.name.clone(),
                source,
            }
        })?;
        let version = |field: &'static str, v: &str| {
            AgentSandboxVersion::parse(v).ok_or_else(|| ReleaseError::AgentSandbox {
                release: release.name.clone(),
                field,
                version: v.to_string(),
            })
        };
        Ok(Self {
            name: &release.name,
            description: &release.description,
            openshell: release.openshell.as_ref().map(Version::to_string),
            release,
            behaviour,
            agent_sandbox: version("agent_sandbox.default", &release.agent_sandbox.default)?,
            selectable: release
                .agent_sandbox
                .selectable
                .iter()
                .map(|v| version("agent_sandbox.selectable", v))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The models of every release in `releases`.
    pub fn all_of(releases: &'static Releases) -> Result<Vec<Self>, ReleaseError> {
        releases.all().map(Self::from_release).collect()
    }
}

impl Model {
    /// The model of a compiled-in release, by name.
    pub fn find(name: &str) -> Option<Self> {
        MODELS.iter().find(|m| m.name == name).map(Self)
    }

    /// The model of a compiled-in release the caller knows is shipped (tests, benches).
    ///
    /// # Panics
    /// If no release of that name is compiled in.
    pub fn named(name: &str) -> Self {
        Self::find(name).unwrap_or_else(|| panic!("no release named {name} in fixtures/releases"))
    }

    /// The model of a release from elsewhere (a test's folder).
    pub fn of(info: &'static ModelInfo) -> Self {
        Self(info)
    }

    pub fn info(self) -> &'static ModelInfo {
        self.0
    }

    pub fn name(self) -> &'static str {
        self.0.name
    }

    pub fn release(self) -> &'static Release {
        self.0.release
    }

    pub fn openshell(self) -> Option<Version> {
        self.0.release.openshell.clone()
    }

    /// What the emulated target offers with this model.
    pub fn capabilities(self) -> BTreeSet<Capability> {
        self.0.release.capabilities.clone()
    }
}

impl PartialEq for Model {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Model {}

impl PartialOrd for Model {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Model {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name().cmp(other.name())
    }
}

impl std::hash::Hash for Model {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Model({})", self.name())
    }
}

/// A defect switch on the `contract` model; each breaks exactly one rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Defect {
    BootstrapGivesUpAfterRetryWindow,
    SidecarGivesUpAfter120s,
    WorkloadStartsBeforePolicy,
    PermanentErrorsRetriedForever,
    TlsValidationSkipped,
    WorkspacePvcReplacedOnPodReplacement,
    GatewayRestartMarksError,
    GatewayRestartStartsStoppedSandboxes,
    CompletedWorkloadReplayed,
    NoRecoveryFromError,
    RestartPolicyIgnoredOnGatewayRestart,
    GateAndPvcLeakedOnFailure,
    SupervisorReattachRefused,
    FailureCauseNotReported,
    RetriesGiveUpAfter15m,
    WorkspaceEmptiedOnGatewayRestart,
    ReadyBeforeShellUsable,
    BackoffUncapped,
    StopNeverCompletes,
    BackoffOvershootsCap,
    StartHangs,
    AttachGivesUpAfter15m,
    ReadyAgainBeforeShellUsable,
    ExitAcrossGatewayRestartFlapsError,
}

#[derive(Clone, Copy, Debug)]
pub struct DefectInfo {
    pub defect: Defect,
    pub name: &'static str,
    pub description: &'static str,
    /// The requirement (suites/REQUIREMENTS.md) the defect breaks.
    pub requirement: &'static str,
}

pub const DEFECTS: &[DefectInfo] = &[
    DefectInfo {
        defect: Defect::BootstrapGivesUpAfterRetryWindow,
        name: "bootstrap-gives-up-after-retry-window",
        description: "bootstrap stops after 5 policy-fetch attempts (1/2/4/4 s) and the supervisor exits 1",
        requirement: "R1",
    },
    DefectInfo {
        defect: Defect::SidecarGivesUpAfter120s,
        name: "sidecar-gives-up-after-120s",
        description: "the sidecar process supervisor stops waiting for the control socket after 120 s",
        requirement: "R2",
    },
    DefectInfo {
        defect: Defect::WorkloadStartsBeforePolicy,
        name: "workload-starts-before-policy",
        description: "the main command starts before the token exchange and policy fetch succeed",
        requirement: "R3",
    },
    DefectInfo {
        defect: Defect::PermanentErrorsRetriedForever,
        name: "permanent-errors-retried-forever",
        description: "Unauthenticated and certificate errors are retried like outages, forever",
        requirement: "R4",
    },
    DefectInfo {
        defect: Defect::TlsValidationSkipped,
        name: "tls-validation-skipped",
        description: "the supervisor accepts a gateway certificate it cannot verify",
        requirement: "R4",
    },
    DefectInfo {
        defect: Defect::WorkspacePvcReplacedOnPodReplacement,
        name: "workspace-pvc-replaced-on-pod-replacement",
        description: "a replacement sandbox pod starts on a fresh, empty workspace",
        requirement: "R6",
    },
    DefectInfo {
        defect: Defect::GatewayRestartMarksError,
        name: "gateway-restart-marks-error",
        description: "the startup sweep marks running sandboxes Error/StartFailed",
        requirement: "R9",
    },
    DefectInfo {
        defect: Defect::GatewayRestartStartsStoppedSandboxes,
        name: "gateway-restart-starts-stopped-sandboxes",
        description: "the startup sweep starts sandboxes the user stopped",
        requirement: "R7",
    },
    DefectInfo {
        defect: Defect::CompletedWorkloadReplayed,
        name: "completed-workload-replayed",
        description: "a completed main command runs again after a gateway or supervisor restart",
        requirement: "R7",
    },
    DefectInfo {
        defect: Defect::NoRecoveryFromError,
        name: "no-recovery-from-error",
        description: "stop and start refuse a sandbox in Error (delete is the only exit)",
        requirement: "R8",
    },
    DefectInfo {
        defect: Defect::RestartPolicyIgnoredOnGatewayRestart,
        name: "restart-policy-ignored-on-gateway-restart",
        description: "an exit reported across a gateway restart is terminal whatever the restart policy",
        requirement: "R10",
    },
    DefectInfo {
        defect: Defect::GateAndPvcLeakedOnFailure,
        name: "gate-and-pvc-leaked-on-failure",
        description: "deleting a failed sandbox orphans its gated workload pod and workspace PVC",
        requirement: "R13",
    },
    DefectInfo {
        defect: Defect::SupervisorReattachRefused,
        name: "supervisor-reattach-refused",
        description: "the gateway refuses a restarted supervisor's re-attach with the same policy",
        requirement: "R12",
    },
    DefectInfo {
        defect: Defect::FailureCauseNotReported,
        name: "failure-cause-not-reported",
        description: "failures show Error with no reason, no message and no cause in the logs",
        requirement: "R14",
    },
    DefectInfo {
        defect: Defect::RetriesGiveUpAfter15m,
        name: "retries-give-up-after-15m",
        description: "bootstrap, the boundary's attach and the supervisor session stop retrying after 15 minutes without the gateway, and the supervisor exits",
        requirement: "R1",
    },
    DefectInfo {
        defect: Defect::WorkspaceEmptiedOnGatewayRestart,
        name: "workspace-emptied-on-gateway-restart",
        description: "every file of the workspace is truncated to 0 bytes when the supervisor's session comes back after the gateway was away",
        requirement: "R6",
    },
    DefectInfo {
        defect: Defect::ReadyBeforeShellUsable,
        name: "ready-before-shell-usable",
        description: "the gateway reports Ready 20 s before the sandbox's shell runs a command",
        requirement: "R11",
    },
    DefectInfo {
        defect: Defect::BackoffUncapped,
        name: "backoff-uncapped",
        description: "the supervisor's retry back-off (bootstrap, attach, session) doubles without a cap",
        requirement: "R5",
    },
    DefectInfo {
        defect: Defect::StopNeverCompletes,
        name: "stop-never-completes",
        description: "a stop of a Ready sandbox never completes: the gateway skips the Suspended patch, so the stop times out into Error/StopFailed",
        requirement: "R7",
    },
    DefectInfo {
        defect: Defect::BackoffOvershootsCap,
        name: "backoff-overshoots-cap",
        description: "every back-off sleep of the supervisor that reaches its cap (bootstrap, attach, session) sleeps 2 s longer than the cap",
        requirement: "R5",
    },
    DefectInfo {
        defect: Defect::StartHangs,
        name: "start-hangs",
        description: "a start of a stopped sandbox hangs: the gateway writes Starting but never resumes the sandbox, and reports no cause",
        requirement: "R14",
    },
    DefectInfo {
        defect: Defect::AttachGivesUpAfter15m,
        name: "attach-gives-up-after-15m",
        description: "a boundary apart from the sandbox pod stops attaching a replaced workload pod after 15 minutes without the gateway, and exits",
        requirement: "R1",
    },
    DefectInfo {
        defect: Defect::ReadyAgainBeforeShellUsable,
        name: "ready-again-before-shell-usable",
        description: "each time the sandbox turns Ready again (a recovery, a restart, a start; not at creation), the gateway reports Ready 20 s before its shell runs a command",
        requirement: "R11",
    },
    DefectInfo {
        defect: Defect::ExitAcrossGatewayRestartFlapsError,
        name: "exit-across-gateway-restart-flaps-error",
        description: "a main-process exit reported across a gateway restart first flaps the sandbox through Error/StartFailed and back, then the restart policy applies",
        requirement: "R9",
    },
];

impl Defect {
    pub fn info(self) -> &'static DefectInfo {
        DEFECTS
            .iter()
            .find(|d| d.defect == self)
            .expect("every defect is listed")
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Breaks this defect's rule of `b` (the contract's rules; each line names the requirement).
    fn apply(self, b: &mut Behaviour) {
        match self {
            // R1/R5: bootstrap gives up after grpc_retry's 5 attempts (F2.1).
            Self::BootstrapGivesUpAfterRetryWindow => b.bootstrap_retry_forever = false,
            // R2: SIDECAR_READY_TIMEOUT_SECS (F2.5).
            Self::SidecarGivesUpAfter120s => b.sidecar_gives_up = true,
            // R3.
            Self::WorkloadStartsBeforePolicy => b.workload_before_policy = true,
            // R4: both kinds of permanent error are retried.
            Self::PermanentErrorsRetriedForever => {
                b.permanent_errors_fail_fast = false;
                b.tls_error_permanent = false;
            }
            Self::TlsValidationSkipped => b.tls_validation = false,
            // R6.
            Self::WorkspacePvcReplacedOnPodReplacement => {
                b.fresh_workspace_on_pod_replacement = true;
            }
            // R9.
            Self::GatewayRestartMarksError => b.restart_marks_start_failed = true,
            // R7.
            Self::GatewayRestartStartsStoppedSandboxes => b.restart_starts_stopped = true,
            Self::CompletedWorkloadReplayed => b.replay_completed = true,
            // R8.
            Self::NoRecoveryFromError => b.stop_from_error = false,
            // R10.
            Self::RestartPolicyIgnoredOnGatewayRestart => {
                b.restart_policy_across_gateway_restart = false;
            }
            // R13.
            Self::GateAndPvcLeakedOnFailure => b.leak_gate_and_pvc = true,
            // R12.
            Self::SupervisorReattachRefused => b.reattach_refused = true,
            // R14.
            Self::FailureCauseNotReported => b.diagnostics = Diagnostics::Hidden,
            // R1/R5: "forever", broken only past the catalog's shorter outages.
            Self::RetriesGiveUpAfter15m => b.retries_give_up = true,
            // R6: the workspace survives a gateway restart too.
            Self::WorkspaceEmptiedOnGatewayRestart => b.workspace_emptied_on_reconnect = true,
            // R11: provisioning is complete only once the sandbox can be used.
            Self::ReadyBeforeShellUsable => b.shell_lags_ready = true,
            // R5: the back-off's cap (F2.1, F2.7).
            Self::BackoffUncapped => b.backoff_uncapped = true,
            // R7: an explicit stop ends in Stopped (F1.9, F3.7).
            Self::StopNeverCompletes => b.stop_skips_suspend = true,
            // R5: a sleep at its cap stays within it (F2.11).
            Self::BackoffOvershootsCap => b.backoff_overshoots_cap = true,
            // R14: a start ends Ready or terminal with its cause (F1.10).
            Self::StartHangs => b.start_hangs = true,
            // R1: "forever" for the attach alone, which only a boundary apart from the sandbox
            // pod does (the gated topologies, reported: #3144).
            Self::AttachGivesUpAfter15m => b.attach_gives_up = true,
            // R11: every Ready means usable, not only the first.
            Self::ReadyAgainBeforeShellUsable => b.shell_lags_ready_again = true,
            // R9: a gateway restart never makes a sandbox terminal, whatever else happens then.
            Self::ExitAcrossGatewayRestartFlapsError => b.exit_across_restart_flaps_error = true,
        }
    }
}

/// A usage error in a model selection; the message names the valid choices.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error("unknown model '{name}'; valid models: {valid}")]
    UnknownModel { name: String, valid: String },
    #[error("unknown defect '{0}'; valid defects: {valid}", valid = DEFECTS.iter().map(|d| d.name).collect::<Vec<_>>().join(", "))]
    UnknownDefect(String),
    #[error("defect switches apply only to {allowed}, not to {model}")]
    DefectOnUpstreamModel { model: String, allowed: String },
    #[error("unknown Agent Sandbox version '{version}'; valid: {valid}")]
    UnknownAgentSandbox { version: String, valid: String },
    #[error("the Agent Sandbox version is selectable only on {allowed}, not on {model}")]
    AgentSandboxOnOtherModel { model: String, allowed: String },
}

/// What the emulated target runs: a model, its defects, the Agent Sandbox version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    pub model: Model,
    pub defects: BTreeSet<Defect>,
    /// The Agent Sandbox release the controller runs (docs/upstream-facts.md F2.10 version table).
    pub agent_sandbox: AgentSandboxVersion,
}

impl Default for Selection {
    fn default() -> Self {
        Self::contract()
    }
}

/// The names of the models whose data allows something, as the error messages list them
/// ("the contract model", "openshell-0.0.111").
fn models_that(models: &[ModelInfo], allows: impl Fn(&ModelInfo) -> bool) -> String {
    let names: Vec<String> = models
        .iter()
        .filter(|m| allows(m))
        .map(|m| {
            if m.name == "contract" {
                "the contract model".to_string()
            } else {
                m.name.to_string()
            }
        })
        .collect();
    names.join(" or ")
}

impl Selection {
    /// The contract model, no defects.
    pub fn contract() -> Self {
        Self::model(Model::named("contract"))
    }

    pub fn model(model: Model) -> Self {
        Self {
            model,
            defects: BTreeSet::new(),
            agent_sandbox: model.0.agent_sandbox,
        }
    }

    pub fn with_defect(mut self, d: Defect) -> Self {
        self.defects.insert(d);
        self
    }

    /// Parses `--model NAME [--defect D]... [--agent-sandbox V]`.
    pub fn parse(
        model: &str,
        defects: &[String],
        agent_sandbox: Option<&str>,
    ) -> Result<Self, SelectionError> {
        Self::parse_among(&MODELS, model, defects, agent_sandbox)
    }

    /// [`Selection::parse`] among `models` (the compiled-in ones, or a test's).
    pub fn parse_among(
        models: &'static [ModelInfo],
        model: &str,
        defects: &[String],
        agent_sandbox: Option<&str>,
    ) -> Result<Self, SelectionError> {
        let info = models.iter().find(|m| m.name == model).ok_or_else(|| {
            SelectionError::UnknownModel {
                name: model.to_string(),
                valid: models.iter().map(|m| m.name).collect::<Vec<_>>().join(", "),
            }
        })?;
        let mut set = BTreeSet::new();
        for d in defects.iter().flat_map(|d| d.split(',')).map(str::trim) {
            if d.is_empty() {
                continue;
            }
            let info = DEFECTS
                .iter()
                .find(|i| i.name == d)
                .ok_or_else(|| SelectionError::UnknownDefect(d.to_string()))?;
            set.insert(info.defect);
        }
        if !set.is_empty() && !info.release.defect_switches {
            return Err(SelectionError::DefectOnUpstreamModel {
                model: model.to_string(),
                allowed: models_that(models, |m| m.release.defect_switches),
            });
        }
        let agent_sandbox = match agent_sandbox {
            None => info.agent_sandbox,
            Some(v) if info.selectable.is_empty() => {
                return Err(SelectionError::AgentSandboxOnOtherModel {
                    model: format!("{model} (asked for {v})"),
                    allowed: models_that(models, |m| !m.selectable.is_empty()),
                });
            }
            Some(v) => AgentSandboxVersion::parse(v)
                .filter(|v| info.selectable.contains(v))
                .ok_or_else(|| SelectionError::UnknownAgentSandbox {
                    version: v.to_string(),
                    valid: info
                        .selectable
                        .iter()
                        .map(|v| v.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?,
        };
        Ok(Self {
            model: Model(info),
            defects: set,
            agent_sandbox,
        })
    }

    pub fn has(&self, d: Defect) -> bool {
        self.defects.contains(&d)
    }

    pub(crate) fn defect_names(&self) -> Vec<String> {
        self.defects.iter().map(|d| d.name().to_string()).collect()
    }

    /// The rules of this selection: the release's flags, each defect switch breaking its rule.
    pub fn behaviour(&self) -> Behaviour {
        let mut b = self.model.0.behaviour;
        for d in &self.defects {
            d.apply(&mut b);
        }
        b
    }
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.model.name())?;
        for d in &self.defects {
            write!(f, "+{}", d.name())?;
        }
        Ok(())
    }
}

/// The rules the gateway, driver and supervisors follow (see [`Selection::behaviour`]), as a
/// release's `behaviour` flags name them; each flag's upstream fact is cited in the release files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Behaviour {
    /// Bootstrap retries with a capped backoff for as long as it takes (R1/R5), not grpc_retry's
    /// 5 attempts (F2.1).
    pub bootstrap_retry_forever: bool,
    /// The sidecar's process side gives up after SIDECAR_READY_TIMEOUT_SECS (F2.5).
    pub sidecar_gives_up: bool,
    /// Bootstrap, the boundary's attach and the supervisor session stop retrying after
    /// [`Timings::retries_give_up_after`] without the gateway, and the supervisor exits.
    pub retries_give_up: bool,
    /// As [`Behaviour::retries_give_up`], for the boundary's attach of a gated workload pod
    /// alone.
    pub attach_gives_up: bool,
    /// The supervisor's retry back-off doubles without a cap (R5; upstream caps it, F2.1, F2.7).
    pub backoff_uncapped: bool,
    /// A back-off sleep that reaches its cap sleeps [`Timings::cap_overshoot`] longer (R5;
    /// upstream's `min(…, cap)` never does, F2.1, F2.7).
    pub backoff_overshoots_cap: bool,
    /// The main command starts before the token exchange and policy fetch (F2.8 says after).
    pub workload_before_policy: bool,
    /// Non-retryable gRPC codes fail bootstrap at once (F2.2).
    pub permanent_errors_fail_fast: bool,
    /// A certificate error is permanent (R4); upstream retries it (no gRPC status, F2.2).
    pub tls_error_permanent: bool,
    pub tls_validation: bool,
    /// A replacement pod starts on a fresh workspace (F3.6: the PVC survives).
    pub fresh_workspace_on_pod_replacement: bool,
    /// Every workspace file is truncated to 0 bytes when a supervisor's session is established
    /// again after the gateway was away (F3.6: nothing on the gateway's side touches the PVC).
    pub workspace_emptied_on_reconnect: bool,
    /// A gateway restart marks running sandboxes StartFailed (field report bug 3).
    pub restart_marks_start_failed: bool,
    /// A gateway restart starts sandboxes the user stopped (F1.15: it leaves them alone).
    pub restart_starts_stopped: bool,
    /// A main process that exits 0 is Completed (#2884), not Error/MainProcessExited (F1.2).
    pub completed_phase: bool,
    /// A completed main command runs again after a restart.
    pub replay_completed: bool,
    /// Stop works from Error, then start (R8; F1.9, F1.10 refuse).
    pub stop_from_error: bool,
    /// A stop of a Ready sandbox skips the Suspended patch (F3.7 patches it), so it never
    /// completes and times out into Error/StopFailed.
    pub stop_skips_suspend: bool,
    /// A start of a Stopped sandbox writes Starting and never calls the driver's start, so the
    /// sandbox stays Starting with no cause (F1.10 starts it; Starting is held, F1.6).
    pub start_hangs: bool,
    /// `--restart-policy` exists (F9.1).
    pub restart_policy: bool,
    /// The restart policy is consulted for an exit reported across a gateway restart.
    pub restart_policy_across_gateway_restart: bool,
    /// An exit of the main process reported across a gateway restart first turns the sandbox
    /// Error/StartFailed and back (the 0.1.6 startup sweep's StartFailed, field report bug 3,
    /// met on the exit's path), before the restart policy is consulted.
    pub exit_across_restart_flaps_error: bool,
    /// Deleting a failed sandbox leaves its gated workload pod and PVC (field report bug 2).
    pub leak_gate_and_pvc: bool,
    /// The gateway refuses a restarted supervisor's re-attach (field report bug 2, #3396).
    pub reattach_refused: bool,
    /// ConfigurationPending until 300 s when the boundary cannot attach (field report bug 2).
    pub boundary_cannot_attach: bool,
    /// A killed supervisor restarts in its container; else it is PID 1 and ends it (F2.9).
    pub supervisor_restarts_in_place: bool,
    /// A supervisor in the workload container sent SIGTERM (its pod deleted) forwards it to the
    /// main process and reports that exit, so a pod deleted by anything but the user's stop or
    /// delete makes the sandbox Error/MainProcessExited (F1.19).
    pub main_exit_reported_on_shutdown: bool,
    /// Exec is refused for [`Timings::shell_lag_after_ready`] after a supervisor session made
    /// the sandbox Ready (F1.7 writes Ready on the session's connect; F1.12 lets exec through
    /// once Ready).
    pub shell_lags_ready: bool,
    /// Exec is refused for [`Timings::shell_lag_after_ready`] after each turn to Ready but the
    /// sandbox's first: after a recovery, a restart or a start (R11 holds for every Ready).
    pub shell_lags_ready_again: bool,
    pub diagnostics: Diagnostics,
}

/// How a failure is made diagnosable (R14).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Diagnostics {
    /// Ready reason/message and the pod logs name the cause.
    Named,
    /// The logs name the cause; the status carries the backend's generic reason.
    Generic,
    /// Neither does (defect `failure-cause-not-reported`).
    Hidden,
}

/// Every constant the models use, in one place (docs/upstream-facts.md F2.1-F2.7, F7.4, F9.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timings {
    /// `grpc_retry` attempts (F2.1).
    pub policy_fetch_attempts: u32,
    /// Sleep after attempt n = min(2^(n-1), cap) (F2.1: 1, 2, 4, 4 s).
    pub policy_fetch_backoff_initial: Duration,
    pub policy_fetch_backoff_cap: Duration,
    /// Contract: the cap of the unbounded bootstrap backoff (R5).
    pub contract_bootstrap_backoff_cap: Duration,
    /// Per-attempt gRPC connect timeout (F2.3, grpc_client.rs L139).
    pub connect_timeout: Duration,
    /// SIDECAR_READY_TIMEOUT_SECS (F2.5).
    pub sidecar_ready_timeout: Duration,
    /// The process supervisor polls the control socket this often (F2.5).
    pub sidecar_poll: Duration,
    /// With [`Behaviour::retries_give_up`] or [`Behaviour::attach_gives_up`]: how long retries
    /// last without the gateway.
    pub retries_give_up_after: Duration,
    /// Session reconnect backoff 1 s doubling to 30 s (F2.7).
    pub session_backoff_initial: Duration,
    pub session_backoff_cap: Duration,
    /// Gateway heartbeat (F2.7).
    pub heartbeat: Duration,
    /// ReportMainProcessExit retry 250 ms → 2 s (F2.7).
    pub exit_report_initial: Duration,
    pub exit_report_cap: Duration,
    /// Restart policy backoff 10 s → 5 min (F9.1).
    pub restart_backoff_initial: Duration,
    pub restart_backoff_cap: Duration,
    /// Stop polls 250 ms → 2 s until Suspended=True, deadline grace + 30 s (F3.7).
    pub stop_poll_initial: Duration,
    pub stop_poll_cap: Duration,
    pub stop_deadline: Duration,
    /// Contract: a killed supervisor process is restarted in its container after this delay.
    pub supervisor_restart_delay: Duration,
    /// The gateway's reconcile pass runs at least this often (besides on every change).
    pub reconcile_tick: Duration,
    /// CLI provisioning idle timeout (F6.3).
    pub provision_timeout: Duration,
    /// With [`Behaviour::shell_lags_ready`] or [`Behaviour::shell_lags_ready_again`]: how long
    /// exec is refused after Ready.
    pub shell_lag_after_ready: Duration,
    /// With [`Behaviour::backoff_overshoots_cap`]: how much longer than its cap a sleep at the
    /// cap lasts.
    pub cap_overshoot: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            policy_fetch_attempts: 5,
            policy_fetch_backoff_initial: Duration::from_secs(1),
            policy_fetch_backoff_cap: Duration::from_secs(4),
            contract_bootstrap_backoff_cap: Duration::from_secs(8),
            connect_timeout: Duration::from_secs(10),
            sidecar_ready_timeout: Duration::from_secs(120),
            sidecar_poll: Duration::from_millis(100),
            retries_give_up_after: Duration::from_secs(15 * 60),
            session_backoff_initial: Duration::from_secs(1),
            session_backoff_cap: Duration::from_secs(30),
            heartbeat: Duration::from_secs(15),
            exit_report_initial: Duration::from_millis(250),
            exit_report_cap: Duration::from_secs(2),
            restart_backoff_initial: Duration::from_secs(10),
            restart_backoff_cap: Duration::from_secs(300),
            stop_poll_initial: Duration::from_millis(250),
            stop_poll_cap: Duration::from_secs(2),
            stop_deadline: Duration::from_secs(60),
            supervisor_restart_delay: Duration::from_secs(1),
            reconcile_tick: Duration::from_secs(5),
            provision_timeout: Duration::from_secs(300),
            shell_lag_after_ready: Duration::from_secs(20),
            cap_overshoot: Duration::from_secs(2),
        }
    }
}

/// Doubling backoff from `initial`, capped: the n-th sleep (n from 1).
pub fn backoff(initial: Duration, cap: Duration, n: u32) -> Duration {
    let factor = 1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX);
    initial.saturating_mul(factor).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_retry_sleeps_1_2_4_4() {
        let t = Timings::default();
        let s: Vec<u64> = (1..t.policy_fetch_attempts)
            .map(|n| {
                backoff(
                    t.policy_fetch_backoff_initial,
                    t.policy_fetch_backoff_cap,
                    n,
                )
                .as_secs()
            })
            .collect();
        assert_eq!(s, vec![1, 2, 4, 4]);
    }

    #[test]
    fn defects_only_on_the_contract_and_errors_name_the_choices() {
        let e = Selection::parse(
            "openshell-0.0.111",
            &["tls-validation-skipped".into()],
            None,
        )
        .unwrap_err();
        assert!(matches!(e, SelectionError::DefectOnUpstreamModel { .. }));
        assert_eq!(
            e.to_string(),
            "defect switches apply only to the contract model, not to openshell-0.0.111"
        );
        let e = Selection::parse("openshell-0.1.6-reported", &[], Some("v0.5.0"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("the Agent Sandbox version is selectable only on ")
                && e.contains("openshell-0.0.111")
                && e.ends_with(", not on openshell-0.1.6-reported (asked for v0.5.0)"),
            "{e}"
        );
        let e = Selection::parse("nope", &[], None).unwrap_err().to_string();
        let every = MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ");
        assert!(e.contains(&every), "{e}");
        let e = Selection::parse("contract", &["nope".into()], None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no-recovery-from-error"), "{e}");
        let s = Selection::parse("openshell-0.0.111", &[], Some("v0.5.0")).unwrap();
        assert_eq!(s.agent_sandbox, AgentSandboxVersion::V0_5_0);
        let s = Selection::parse("openshell-0.0.111", &[], Some("v0.5.1")).unwrap();
        assert_eq!(s.agent_sandbox, AgentSandboxVersion::V0_5_1);
        let s = Selection::parse("openshell-0.0.111", &[], None).unwrap();
        assert_eq!(s.agent_sandbox, AgentSandboxVersion::V0_5_4);
        let e = Selection::parse("openshell-0.0.111", &[], Some("v0.6.0"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("valid: v0.5.0, v0.5.1, v0.5.4"), "{e}");
        assert!(Selection::parse("contract", &[], Some("v0.5.0")).is_err());
    }

    #[test]
    fn the_target_reports_the_agent_sandbox_release_its_controller_runs() {
        use conformance_core::target::TargetFactory;
        for (asked, runs) in [
            (None, "v0.5.4"),
            (Some("v0.5.0"), "v0.5.0"),
            (Some("v0.5.1"), "v0.5.1"),
            (Some("0.5.1"), "v0.5.1"),
            (Some("v0.5.1+"), "v0.5.4"),
            (Some("v0.5.4"), "v0.5.4"),
        ] {
            let sel = Selection::parse("openshell-0.0.111", &[], asked).unwrap();
            assert_eq!(sel.agent_sandbox.name(), runs, "{asked:?}");
            let info = crate::target::EmulatedFactory::new(sel).info();
            assert_eq!(info.versions["agent-sandbox"], runs, "{asked:?}");
        }
    }

    #[test]
    fn each_defect_changes_exactly_one_rule_of_the_contract() {
        let base = Selection::contract().behaviour();
        for info in DEFECTS {
            let b = Selection::contract().with_defect(info.defect).behaviour();
            let diffs = diff(&base, &b);
            // permanent-errors-retried-forever covers both kinds of permanent error.
            let allowed = if info.defect == Defect::PermanentErrorsRetriedForever {
                2
            } else {
                1
            };
            assert!(
                (1..=allowed).contains(&diffs),
                "{} changes {diffs} rules",
                info.name
            );
        }
    }

    /// The rules as the code wrote them before they were data (from the model's identity), so
    /// the release files are checked to say the same for every model and defect switch.
    fn rules_by_identity(model: Model, d: impl Fn(Defect) -> bool) -> Behaviour {
        let contract = model.name() == "contract";
        let upstream = model.name() == "openshell-0.0.111";
        let reported = model.name() == "openshell-0.1.6-reported";
        Behaviour {
            bootstrap_retry_forever: contract && !d(Defect::BootstrapGivesUpAfterRetryWindow),
            sidecar_gives_up: !contract || d(Defect::SidecarGivesUpAfter120s),
            retries_give_up: d(Defect::RetriesGiveUpAfter15m),
            attach_gives_up: d(Defect::AttachGivesUpAfter15m),
            backoff_uncapped: d(Defect::BackoffUncapped),
            backoff_overshoots_cap: d(Defect::BackoffOvershootsCap),
            workload_before_policy: d(Defect::WorkloadStartsBeforePolicy),
            permanent_errors_fail_fast: !d(Defect::PermanentErrorsRetriedForever),
            tls_error_permanent: contract && !d(Defect::PermanentErrorsRetriedForever),
            tls_validation: !d(Defect::TlsValidationSkipped),
            fresh_workspace_on_pod_replacement: d(Defect::WorkspacePvcReplacedOnPodReplacement),
            workspace_emptied_on_reconnect: d(Defect::WorkspaceEmptiedOnGatewayRestart),
            restart_marks_start_failed: reported || d(Defect::GatewayRestartMarksError),
            restart_starts_stopped: d(Defect::GatewayRestartStartsStoppedSandboxes),
            completed_phase: !upstream,
            replay_completed: d(Defect::CompletedWorkloadReplayed),
            stop_from_error: contract && !d(Defect::NoRecoveryFromError),
            stop_skips_suspend: d(Defect::StopNeverCompletes),
            start_hangs: d(Defect::StartHangs),
            restart_policy: !upstream,
            restart_policy_across_gateway_restart: contract
                && !d(Defect::RestartPolicyIgnoredOnGatewayRestart),
            exit_across_restart_flaps_error: d(Defect::ExitAcrossGatewayRestartFlapsError),
            leak_gate_and_pvc: reported || d(Defect::GateAndPvcLeakedOnFailure),
            reattach_refused: reported || d(Defect::SupervisorReattachRefused),
            boundary_cannot_attach: reported,
            supervisor_restarts_in_place: !upstream,
            main_exit_reported_on_shutdown: upstream,
            shell_lags_ready: d(Defect::ReadyBeforeShellUsable),
            shell_lags_ready_again: d(Defect::ReadyAgainBeforeShellUsable),
            diagnostics: if d(Defect::FailureCauseNotReported) {
                Diagnostics::Hidden
            } else if contract {
                Diagnostics::Named
            } else {
                Diagnostics::Generic
            },
        }
    }

    #[test]
    fn the_release_files_give_each_shipped_model_and_defect_the_rules_the_code_gave() {
        // The releases the rules were pinned for; a release added later has no such history.
        const PINNED: [&str; 3] = ["contract", "openshell-0.0.111", "openshell-0.1.6-reported"];
        for name in PINNED {
            let info = MODELS
                .iter()
                .find(|m| m.name == name)
                .unwrap_or_else(|| panic!("release {name} is gone"));
            let model = Model::of(info);
            let sel = Selection::model(model);
            assert_eq!(
                sel.behaviour(),
                rules_by_identity(model, |_| false),
                "{}",
                info.name
            );
            for d in DEFECTS {
                let sel = Selection::model(model).with_defect(d.defect);
                assert_eq!(
                    sel.behaviour(),
                    rules_by_identity(model, |x| x == d.defect),
                    "{} + {}",
                    info.name,
                    d.name
                );
            }
            use conformance_core::target::TargetFactory;
            let caps = crate::target::EmulatedFactory::new(Selection::model(model))
                .info()
                .capabilities;
            assert_eq!(
                caps.contains(&Capability::RestartPolicy),
                info.name != "openshell-0.0.111",
                "{}",
                info.name
            );
            assert_eq!(
                caps.len(),
                if info.name == "openshell-0.0.111" {
                    7
                } else {
                    8
                }
            );
        }
    }

    #[test]
    fn a_release_with_an_unknown_rule_or_agent_sandbox_is_refused_naming_the_field() {
        let mut r = Releases::builtin().get("contract").unwrap().clone();
        r.behaviour["no_such_rule"] = true.into();
        let e = ModelInfo::from_release(Box::leak(Box::new(r))).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "fixtures/releases/contract.yaml: field `behaviour`: unknown field `no_such_rule`"
            ),
            "{e}"
        );
        let mut r = Releases::builtin().get("contract").unwrap().clone();
        r.agent_sandbox.default = "v9".into();
        let e = ModelInfo::from_release(Box::leak(Box::new(r))).unwrap_err();
        assert!(
            e.to_string()
                .contains("field `agent_sandbox.default`: `v9`"),
            "{e}"
        );
    }

    fn diff(a: &Behaviour, b: &Behaviour) -> usize {
        let fa = format!("{a:?}");
        let fb = format!("{b:?}");
        fa.split(", ")
            .zip(fb.split(", "))
            .filter(|(x, y)| x != y)
            .count()
    }
}
