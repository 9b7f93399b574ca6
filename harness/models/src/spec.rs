//! The OpenShell models and their defect switches, as data: which model, which defects, which
//! Agent Sandbox version, and the [`Behaviour`] (rules) and [`Timings`] (constants) they imply.
//! The gateway, the supervisors and the driver read only [`Behaviour`] and [`Timings`], never
//! the model name, so every rule lives in exactly one place: [`Selection::behaviour`].

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use semver::Version;

use crate::agent_sandbox::AgentSandboxVersion;

/// A model of OpenShell on Kubernetes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Model {
    /// What the acceptance criteria demand (issue 4).
    Contract,
    /// Upstream v0.0.111 as read from its source (docs/upstream-facts.md).
    OpenShell0_0_111,
    /// 0.1.6 as the field reports describe it (reported, not read from source).
    OpenShell0_1_6Reported,
}

/// One entry of [`MODELS`], for `list` and error messages.
#[derive(Clone, Copy, Debug)]
pub struct ModelInfo {
    pub model: Model,
    pub name: &'static str,
    pub description: &'static str,
    /// The OpenShell version the model stands for (None: the contract, every topology).
    pub openshell: Option<&'static str>,
}

pub const MODELS: &[ModelInfo] = &[
    ModelInfo {
        model: Model::Contract,
        name: "contract",
        description: "the behaviour the acceptance criteria demand (R1-R14); defect switches apply here",
        openshell: None,
    },
    ModelInfo {
        model: Model::OpenShell0_0_111,
        name: "openshell-0.0.111",
        description: "upstream v0.0.111 as read from source (combined and sidecar; Agent Sandbox v0.5.0, v0.5.1 or v0.5.4)",
        openshell: Some("0.0.111"),
    },
    ModelInfo {
        model: Model::OpenShell0_1_6Reported,
        name: "openshell-0.1.6-reported",
        description: "0.1.6 as the field reports describe it, on all four topologies (reported, not read from source)",
        openshell: Some("0.1.6"),
    },
];

impl Model {
    pub fn info(self) -> &'static ModelInfo {
        MODELS
            .iter()
            .find(|m| m.model == self)
            .expect("every model is listed")
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    pub fn openshell(self) -> Option<Version> {
        self.info().openshell.and_then(|v| Version::parse(v).ok())
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
}

/// The Agent Sandbox release a selection runs unless told otherwise: the newest modeled one
/// (docs/upstream-facts.md F2.10: from v0.5.1 a failed pod is terminal, sticky Error).
pub(crate) const DEFAULT_AGENT_SANDBOX: AgentSandboxVersion = AgentSandboxVersion::V0_5_4;

/// A usage error in a model selection; the message names the valid choices.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error("unknown model '{0}'; valid models: {valid}", valid = MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", "))]
    UnknownModel(String),
    #[error("unknown defect '{0}'; valid defects: {valid}", valid = DEFECTS.iter().map(|d| d.name).collect::<Vec<_>>().join(", "))]
    UnknownDefect(String),
    #[error("defect switches apply only to the contract model, not to {0}")]
    DefectOnUpstreamModel(String),
    #[error("unknown Agent Sandbox version '{0}'; valid: {valid}", valid = AgentSandboxVersion::ALL.map(AgentSandboxVersion::name).join(", "))]
    UnknownAgentSandbox(String),
    #[error("the Agent Sandbox version is selectable only on openshell-0.0.111, not on {0}")]
    AgentSandboxOnOtherModel(String),
}

/// What the emulated target runs: a model, its defects, the Agent Sandbox version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    pub model: Model,
    pub defects: BTreeSet<Defect>,
    pub agent_sandbox: AgentSandboxVersion,
}

impl Default for Selection {
    fn default() -> Self {
        Self::contract()
    }
}

impl Selection {
    pub fn contract() -> Self {
        Self {
            model: Model::Contract,
            defects: BTreeSet::new(),
            agent_sandbox: DEFAULT_AGENT_SANDBOX,
        }
    }

    pub fn model(model: Model) -> Self {
        Self {
            model,
            ..Self::contract()
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
        let m = MODELS
            .iter()
            .find(|m| m.name == model)
            .ok_or_else(|| SelectionError::UnknownModel(model.to_string()))?
            .model;
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
        if !set.is_empty() && m != Model::Contract {
            return Err(SelectionError::DefectOnUpstreamModel(model.to_string()));
        }
        let agent_sandbox = match agent_sandbox {
            None => DEFAULT_AGENT_SANDBOX,
            Some(v) if m != Model::OpenShell0_0_111 => {
                return Err(SelectionError::AgentSandboxOnOtherModel(format!(
                    "{model} (asked for {v})"
                )));
            }
            Some(v) => AgentSandboxVersion::parse(v)
                .ok_or_else(|| SelectionError::UnknownAgentSandbox(v.to_string()))?,
        };
        Ok(Self {
            model: m,
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

    /// The rules of this selection. Each line cites where the rule comes from.
    pub fn behaviour(&self) -> Behaviour {
        let contract = self.model == Model::Contract;
        let upstream = self.model == Model::OpenShell0_0_111;
        let reported = self.model == Model::OpenShell0_1_6Reported;
        let d = |x| self.has(x);
        Behaviour {
            // F2.1 grpc_retry: 5 attempts; contract (R1/R5): bounded attempts, capped backoff, forever.
            bootstrap_retry_forever: contract && !d(Defect::BootstrapGivesUpAfterRetryWindow),
            // F2.5 SIDECAR_READY_TIMEOUT_SECS; contract (R2): waits as long as bootstrap takes.
            sidecar_gives_up: !contract || d(Defect::SidecarGivesUpAfter120s),
            // F2.8: load_policy before the main process (all models); defect R3.
            workload_before_policy: d(Defect::WorkloadStartsBeforePolicy),
            // F2.2: non-retryable gRPC codes fail at once; TLS errors carry no status (retried).
            permanent_errors_fail_fast: !d(Defect::PermanentErrorsRetriedForever),
            // contract (R4): a certificate error is permanent; upstream retries it (no gRPC status, F2.2).
            tls_error_permanent: contract && !d(Defect::PermanentErrorsRetriedForever),
            tls_validation: !d(Defect::TlsValidationSkipped),
            // F3.6 the PVC survives pod replacement; defect R6.
            fresh_workspace_on_pod_replacement: d(Defect::WorkspacePvcReplacedOnPodReplacement),
            // F1.15 Kubernetes gateway restart does not touch pods; field report bug 3 (0.1.6): StartFailed.
            restart_marks_start_failed: reported || d(Defect::GatewayRestartMarksError),
            // F1.15 recover_persisted_lifecycle_transitions leaves Stopped alone; defect R7.
            restart_starts_stopped: d(Defect::GatewayRestartStartsStoppedSandboxes),
            // F1.2 (0.0.111): any main exit → Error/MainProcessExited; #2884 adds Completed (contract, 0.1.x).
            completed_phase: !upstream,
            // R7: completion is remembered across restarts; defect replays it.
            replay_completed: d(Defect::CompletedWorkloadReplayed),
            // F1.9, F1.10 stop needs Ready, start needs Stopped (0.0.111); field report: start
            // refused from Error (0.1.6); contract (R8): stop from Error, then start.
            stop_from_error: contract && !d(Defect::NoRecoveryFromError),
            // F9.1 restart policy (0.1.x branch); 0.0.111 has none.
            restart_policy: !upstream,
            // field report bug 3: `--restart-policy always` not consulted on the gateway-restart path.
            restart_policy_across_gateway_restart: contract
                && !d(Defect::RestartPolicyIgnoredOnGatewayRestart),
            // field report bug 2: the gated workload pod and PVC left behind (0.1.6); contract R13.
            leak_gate_and_pvc: reported || d(Defect::GateAndPvcLeakedOnFailure),
            // field report bug 2 / #3396: boundary refuses re-attach (0.1.6); contract R12.
            reattach_refused: reported || d(Defect::SupervisorReattachRefused),
            // field report bug 2: ConfigurationPending until 300 s when the boundary cannot attach (0.1.6).
            boundary_cannot_attach: reported,
            // contract R12 and 0.1.x (#3144 rotates the session on restart): the supervisor restarts
            // in place; 0.0.111: it is PID 1 of its container (F2.9), so its death ends the container.
            supervisor_restarts_in_place: !upstream,
            // contract R14: the cause is in the Ready reason/message and the logs; upstream logs
            // it but shows the Agent Sandbox reason (PodFailed, F2.10); the defect hides both.
            diagnostics: if d(Defect::FailureCauseNotReported) {
                Diagnostics::Hidden
            } else if contract {
                Diagnostics::Named
            } else {
                Diagnostics::Generic
            },
            // F2.10 version table.
            agent_sandbox: self.agent_sandbox,
        }
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

/// The rules the gateway, driver and supervisors follow (see [`Selection::behaviour`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Behaviour {
    pub bootstrap_retry_forever: bool,
    pub sidecar_gives_up: bool,
    pub workload_before_policy: bool,
    pub permanent_errors_fail_fast: bool,
    pub tls_error_permanent: bool,
    pub tls_validation: bool,
    pub fresh_workspace_on_pod_replacement: bool,
    pub restart_marks_start_failed: bool,
    pub restart_starts_stopped: bool,
    pub completed_phase: bool,
    pub replay_completed: bool,
    pub stop_from_error: bool,
    pub restart_policy: bool,
    pub restart_policy_across_gateway_restart: bool,
    pub leak_gate_and_pvc: bool,
    pub reattach_refused: bool,
    pub boundary_cannot_attach: bool,
    pub supervisor_restarts_in_place: bool,
    pub diagnostics: Diagnostics,
    pub agent_sandbox: AgentSandboxVersion,
}

/// How a failure is made diagnosable (R14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
        assert!(matches!(e, SelectionError::DefectOnUpstreamModel(_)));
        let e = Selection::parse("nope", &[], None).unwrap_err().to_string();
        assert!(
            e.contains("contract, openshell-0.0.111, openshell-0.1.6-reported"),
            "{e}"
        );
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

    fn diff(a: &Behaviour, b: &Behaviour) -> usize {
        let fa = format!("{a:?}");
        let fb = format!("{b:?}");
        fa.split(", ")
            .zip(fb.split(", "))
            .filter(|(x, y)| x != y)
            .count()
    }
}
