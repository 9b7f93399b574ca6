//! The gateway's rules over one sandbox record, free of I/O so they can be tested alone. Every
//! rule cites its source (an item of docs/upstream-facts.md); which variant applies comes from
//! [`Behaviour`].

use super::phase::{Snapshot, derive_phase, sticky};
use super::rpc::{ConnectRequest, ExitAck, Status};
use super::store::SandboxRecord;
use crate::spec::{Behaviour, Diagnostics, Timings, backoff};
use conformance_core::phase::Phase;
use conformance_core::target::RestartPolicy;

#[derive(Clone, Debug)]
pub(crate) struct Rules {
    pub b: Behaviour,
    pub t: Timings,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Proceed,
    Idempotent,
    Refuse(String),
}

/// Why a session was refused, and what it does to the record.
#[derive(Clone, Debug)]
pub(crate) struct Refusal {
    pub status: Status,
    /// Ready reason and message to record (None: the phase stays).
    pub error: Option<(String, String)>,
    pub pending: Option<(String, String)>,
}

fn set(rec: &mut SandboxRecord, phase: Phase, reason: &str, message: &str) {
    rec.phase = phase;
    rec.reason = Some(reason.to_string()).filter(|s| !s.is_empty());
    rec.message = Some(message.to_string()).filter(|s| !s.is_empty());
}

impl Rules {
    /// Error with a cause, unless the cause is hidden (defect `failure-cause-not-reported`).
    pub(crate) fn set_error(&self, rec: &mut SandboxRecord, reason: &str, message: &str) {
        if self.b.diagnostics == Diagnostics::Hidden {
            set(rec, Phase::Error, "", "");
        } else {
            set(rec, Phase::Error, reason, message);
        }
    }

    /// F1.9 Stop: Stopped is idempotent; only Ready/Stopping are accepted (0.0.111, 0.1.6).
    /// Contract (R8): also from Error, Completed, Restarting and Provisioning, so a sandbox in
    /// bootstrap Error can be stopped and started again.
    pub(crate) fn stop_allowed(&self, phase: &Phase) -> Verdict {
        match phase {
            Phase::Stopped => Verdict::Idempotent,
            Phase::Ready | Phase::Stopping => Verdict::Proceed,
            Phase::Error | Phase::Completed | Phase::Restarting | Phase::Provisioning
                if self.b.stop_from_error =>
            {
                Verdict::Proceed
            }
            p => Verdict::Refuse(format!(
                "sandbox must be Ready to stop (current phase: {})",
                p.name()
            )),
        }
    }

    /// F1.10 Start: Ready is idempotent; only Stopped/Starting are accepted.
    pub(crate) fn start_allowed(&self, phase: &Phase) -> Verdict {
        match phase {
            Phase::Ready => Verdict::Idempotent,
            Phase::Stopped | Phase::Starting => Verdict::Proceed,
            p => Verdict::Refuse(format!(
                "sandbox must be Stopped to start (current phase: {})",
                p.name()
            )),
        }
    }

    /// F1.9: write Stopping (a pending restart is cancelled, F9.1).
    pub(crate) fn begin_stop(&self, rec: &mut SandboxRecord) {
        set(rec, Phase::Stopping, "Stopping", "");
        rec.exit_code = None;
        rec.boundary_attached = false;
    }

    pub(crate) fn finish_stop(&self, rec: &mut SandboxRecord) {
        if rec.phase == Phase::Stopping {
            set(rec, Phase::Stopped, "Stopped", "");
        }
    }

    /// F1.10: write Starting; the next supervisor session makes it Ready.
    pub(crate) fn begin_start(&self, rec: &mut SandboxRecord) {
        set(rec, Phase::Starting, "Starting", "");
        rec.starts += 1;
        rec.exit_code = None;
        rec.main_instance = None;
        rec.boundary_attached = false;
    }

    /// A supervisor bootstraps from `pod_uid`; true when its workspace must be reset (defect
    /// `workspace-pvc-replaced-on-pod-replacement`; F3.6 says the PVC survives replacement).
    pub(crate) fn note_bootstrap_pod(&self, rec: &mut SandboxRecord, pod_uid: &str) -> bool {
        let replaced = rec.last_pod_uid.as_deref().is_some_and(|u| u != pod_uid);
        rec.last_pod_uid = Some(pod_uid.to_string());
        self.b.fresh_workspace_on_pod_replacement && replaced
    }

    /// The 0.1.x boundary attaches once its bootstrap material is ready; 0.1.6 cannot (field
    /// report bug 2: `ConfigurationPending` until the 300 s timeout).
    pub(crate) fn attach_boundary(&self, rec: &mut SandboxRecord) -> Result<(), Status> {
        if self.b.boundary_cannot_attach {
            if matches!(rec.phase, Phase::Provisioning | Phase::Starting) {
                set(
                    rec,
                    rec.phase.clone(),
                    "ConfigurationPending",
                    "waiting for the supervisor boundary to attach",
                );
            }
            return Err(Status::failed_precondition(
                "boundary attach failed: bootstrap material not ready (ConfigurationPending)",
            ));
        }
        rec.boundary_attached = true;
        Ok(())
    }

    /// Whether a session is accepted (F1.7 "supervisor session: accepted"); the 0.1.6 boundary
    /// cannot attach on the gated topologies and refuses re-attach after a supervisor restart
    /// (field report bug 2).
    pub(crate) fn accept_session(
        &self,
        rec: &SandboxRecord,
        req: &ConnectRequest,
    ) -> Result<(), Box<Refusal>> {
        if self.b.reattach_refused && req.reattach && !sticky(&rec.phase) {
            let msg = format!(
                "supervisor re-attach refused: main process instance {} is bound to a previous supervisor session",
                req.main_instance.unwrap_or_default()
            );
            return Err(Box::new(Refusal {
                status: Status::failed_precondition(msg.clone()),
                error: Some(("SupervisorReattachRefused".into(), msg)),
                pending: None,
            }));
        }
        Ok(())
    }

    pub(crate) fn refuse_session(&self, rec: &mut SandboxRecord, r: &Refusal) {
        if let Some((reason, msg)) = &r.error {
            self.set_error(rec, reason, msg);
        } else if let Some((reason, msg)) = &r.pending
            && matches!(rec.phase, Phase::Provisioning | Phase::Starting)
        {
            set(rec, rec.phase.clone(), reason, msg);
        }
    }

    /// F1.7 `set_supervisor_session_state`: connect → Ready, except in Deleting, Error,
    /// Stopping, Stopped (and Completed, R7). Returns whether to relaunch a completed main
    /// (defect `completed-workload-replayed`).
    pub(crate) fn session_connected(&self, rec: &mut SandboxRecord, req: &ConnectRequest) -> bool {
        if rec.replay_pending && rec.phase == Phase::Completed {
            rec.replay_pending = false;
            set(rec, Phase::Ready, "DependenciesReady", "");
            rec.exit_code = None;
            return true;
        }
        match rec.phase {
            Phase::Provisioning | Phase::Starting | Phase::Ready | Phase::Unknown => {
                set(rec, Phase::Ready, "DependenciesReady", "");
                rec.main_instance = req.main_instance;
            }
            _ => {}
        }
        false
    }

    /// F1.7: disconnect → Provisioning, only from Ready.
    pub(crate) fn session_disconnected(&self, rec: &mut SandboxRecord) {
        if rec.phase == Phase::Ready {
            set(
                rec,
                Phase::Provisioning,
                "DependenciesNotReady",
                "supervisor session disconnected",
            );
        }
    }

    /// F1.2 `main_process_exited` and, beyond 0.0.111, the restart policy (F9.1) and Completed
    /// (#2884).
    pub(crate) fn main_exited(
        &self,
        rec: &mut SandboxRecord,
        instance: u64,
        code: i32,
        across_gateway_restart: bool,
    ) -> ExitAck {
        if matches!(
            rec.phase,
            Phase::Deleting | Phase::Stopping | Phase::Stopped
        ) || sticky(&rec.phase)
            || rec.main_instance.is_some_and(|i| i != instance)
        {
            return ExitAck::Ignored;
        }
        rec.exit_code = Some(code);
        let msg = format!("main process exited with code {code}");
        if !self.b.restart_policy {
            // F1.2: any exit, 0 included, is Error/MainProcessExited at 0.0.111.
            self.set_error(rec, "MainProcessExited", &msg);
            return ExitAck::Terminal;
        }
        let wants_restart = match rec.restart_policy.unwrap_or(RestartPolicy::Never) {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => code != 0,
            RestartPolicy::Never => false,
        };
        if wants_restart && across_gateway_restart && !self.b.restart_policy_across_gateway_restart
        {
            // Field report bug 3: the policy is not consulted for an exit reported across a
            // gateway restart.
            self.set_error(
                rec,
                "MainProcessExited",
                &format!("{msg}; restart policy not applied after gateway restart"),
            );
            return ExitAck::Terminal;
        }
        if wants_restart {
            rec.restart_count += 1;
            let delay = backoff(
                self.t.restart_backoff_initial,
                self.t.restart_backoff_cap,
                rec.restart_count,
            );
            set(
                rec,
                Phase::Restarting,
                "Restarting",
                &format!(
                    "{msg}; restarting in {}s (restart {})",
                    delay.as_secs(),
                    rec.restart_count
                ),
            );
            return ExitAck::RestartAfter(delay);
        }
        if code == 0 && self.b.completed_phase {
            set(rec, Phase::Completed, "MainProcessCompleted", &msg);
        } else {
            self.set_error(rec, "MainProcessExited", &msg);
        }
        ExitAck::Terminal
    }

    /// A relaunched main process (restart policy) makes the sandbox Ready again.
    pub(crate) fn main_started(&self, rec: &mut SandboxRecord, instance: u64, connected: bool) {
        rec.main_instance = Some(instance);
        if rec.phase == Phase::Restarting {
            rec.exit_code = None;
            if connected {
                set(rec, Phase::Ready, "DependenciesReady", "");
            } else {
                set(
                    rec,
                    Phase::Provisioning,
                    "SupervisorNotConnected",
                    "supervisor session not connected",
                );
            }
        }
    }

    /// F1.6 `apply_driver_snapshot` with `ComposedPhase` (F1.5): Error (and Completed) are sticky,
    /// Stopping/Stopped/Starting are held, the backend alone never makes a sandbox Ready.
    /// `gate_pending`: the 0.1.x topologies still wait for the boundary (field report).
    pub(crate) fn apply_snapshot(
        &self,
        rec: &mut SandboxRecord,
        snap: &Snapshot,
        connected: bool,
        gate_pending: bool,
    ) {
        if sticky(&rec.phase)
            || matches!(
                rec.phase,
                Phase::Deleting | Phase::Stopped | Phase::Restarting
            )
        {
            return;
        }
        if rec.phase == Phase::Stopping {
            if snap.suspended {
                self.finish_stop(rec);
            }
            return;
        }
        let (p, reason, message) = derive_phase(snap);
        let reason = reason.unwrap_or_default();
        if rec.phase == Phase::Starting && (!snap.fresh || reason == "SandboxSuspended") {
            // Held until the controller has seen the resume (F1.6 "Starting is held"; #2932).
            return;
        }
        let message = message.unwrap_or_default();
        match p {
            Phase::Deleting => set(rec, Phase::Deleting, "Deleting", ""),
            Phase::Error => {
                if self.b.diagnostics == Diagnostics::Named
                    && rec.reason.as_deref() == Some("BootstrapFailed")
                {
                    // Already named by the supervisor's event.
                    rec.phase = Phase::Error;
                } else {
                    self.set_error(rec, &reason, &message);
                }
            }
            Phase::Ready if connected && rec.phase != Phase::Ready => {
                set(rec, Phase::Ready, "DependenciesReady", "");
            }
            Phase::Ready if connected => {}
            Phase::Ready | Phase::Provisioning if rec.phase == Phase::Starting => {}
            Phase::Ready => {
                if gate_pending {
                    set(
                        rec,
                        Phase::Provisioning,
                        "ConfigurationPending",
                        "waiting for the supervisor boundary to attach",
                    );
                } else {
                    set(
                        rec,
                        Phase::Provisioning,
                        "SupervisorNotConnected",
                        "supervisor session not connected",
                    );
                }
            }
            Phase::Provisioning => {
                if gate_pending {
                    set(
                        rec,
                        Phase::Provisioning,
                        "ConfigurationPending",
                        "waiting for the supervisor boundary to attach",
                    );
                } else if rec.phase != Phase::Ready || !connected {
                    set(rec, Phase::Provisioning, &reason, &message);
                }
            }
            Phase::Stopped if rec.phase != Phase::Starting => {
                set(rec, Phase::Stopped, "Stopped", "")
            }
            _ => {}
        }
    }

    /// A supervisor's `BootstrapFailed` event (contract, R4/R14): Error naming the cause.
    pub(crate) fn bootstrap_failed(&self, rec: &mut SandboxRecord, message: &str) {
        if self.b.diagnostics != Diagnostics::Named {
            return;
        }
        let replace = matches!(
            rec.phase,
            Phase::Provisioning | Phase::Starting | Phase::Ready | Phase::Unknown
        ) || (rec.phase == Phase::Error
            && rec.reason.as_deref() == Some("PodFailed"));
        if replace {
            self.set_error(rec, "BootstrapFailed", message);
        }
    }

    /// The startup sweep for one record (F1.15); returns what the driver must do.
    pub(crate) fn on_startup(&self, rec: &mut SandboxRecord) -> StartupAction {
        match rec.phase {
            // recover_persisted_lifecycle_transitions (F1.15).
            Phase::Stopping => StartupAction::Stop,
            Phase::Starting => StartupAction::Start,
            Phase::Stopped if self.b.restart_starts_stopped => {
                set(rec, Phase::Starting, "Starting", "");
                rec.starts += 1;
                StartupAction::Start
            }
            Phase::Provisioning | Phase::Ready | Phase::Unknown | Phase::Restarting
                if self.b.restart_marks_start_failed =>
            {
                // Field report bug 3 (0.1.6): `StartFailed` on the Kubernetes path.
                self.set_error(
                    rec,
                    "StartFailed",
                    "Failed to start sandbox during gateway startup: supervisor session was lost with the previous gateway",
                );
                StartupAction::None
            }
            Phase::Completed if self.b.replay_completed => {
                rec.replay_pending = true;
                StartupAction::None
            }
            _ => StartupAction::None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StartupAction {
    None,
    Stop,
    Start,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Defect, Model, Selection};
    use serde_json::json;

    fn rules(sel: Selection) -> Rules {
        Rules {
            b: sel.behaviour(),
            t: Timings::default(),
        }
    }

    fn rec(phase: Phase) -> SandboxRecord {
        SandboxRecord {
            name: "demo".into(),
            phase,
            ..Default::default()
        }
    }

    fn ready_cr() -> Snapshot {
        Snapshot::from_cr(&json!({"spec": {"operatingMode": "Running"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady"}]}}))
    }

    #[test]
    fn upstream_refuses_stop_and_start_from_error_and_the_contract_recovers() {
        let up = rules(Selection::model(Model::named("openshell-0.0.111")));
        assert_eq!(
            up.stop_allowed(&Phase::Error),
            Verdict::Refuse("sandbox must be Ready to stop (current phase: Error)".into())
        );
        assert_eq!(
            up.start_allowed(&Phase::Error),
            Verdict::Refuse("sandbox must be Stopped to start (current phase: Error)".into())
        );
        let c = rules(Selection::contract());
        assert_eq!(c.stop_allowed(&Phase::Error), Verdict::Proceed);
        let d = rules(Selection::contract().with_defect(Defect::NoRecoveryFromError));
        assert!(matches!(d.stop_allowed(&Phase::Error), Verdict::Refuse(_)));
    }

    #[test]
    fn a_gateway_restart_goes_through_supervisor_not_connected_back_to_ready() {
        let c = rules(Selection::contract());
        let mut r = rec(Phase::Ready);
        assert_eq!(c.on_startup(&mut r), StartupAction::None);
        c.apply_snapshot(&mut r, &ready_cr(), false, false);
        assert_eq!(r.phase, Phase::Provisioning);
        assert_eq!(r.reason.as_deref(), Some("SupervisorNotConnected"));
        c.apply_snapshot(&mut r, &ready_cr(), true, false);
        assert_eq!(r.phase, Phase::Ready);
        let bad = rules(Selection::contract().with_defect(Defect::GatewayRestartMarksError));
        let mut r = rec(Phase::Ready);
        bad.on_startup(&mut r);
        assert_eq!(
            (&r.phase, r.reason.as_deref()),
            (&Phase::Error, Some("StartFailed"))
        );
        bad.apply_snapshot(&mut r, &ready_cr(), true, false);
        assert_eq!(r.phase, Phase::Error, "Error is sticky");
    }

    #[test]
    fn exits_follow_the_model() {
        let up = rules(Selection::model(Model::named("openshell-0.0.111")));
        let mut r = rec(Phase::Ready);
        assert_eq!(up.main_exited(&mut r, 1, 0, false), ExitAck::Terminal);
        assert_eq!(
            (&r.phase, r.reason.as_deref()),
            (&Phase::Error, Some("MainProcessExited"))
        );
        let c = rules(Selection::contract());
        let mut r = rec(Phase::Ready);
        c.main_exited(&mut r, 1, 0, false);
        assert_eq!(r.phase, Phase::Completed);
        let mut r = rec(Phase::Ready);
        r.restart_policy = Some(RestartPolicy::Always);
        assert!(matches!(
            c.main_exited(&mut r, 1, 137, true),
            ExitAck::RestartAfter(_)
        ));
        assert_eq!(r.phase, Phase::Restarting);
        let d =
            rules(Selection::contract().with_defect(Defect::RestartPolicyIgnoredOnGatewayRestart));
        let mut r = rec(Phase::Ready);
        r.restart_policy = Some(RestartPolicy::Always);
        assert_eq!(d.main_exited(&mut r, 1, 137, true), ExitAck::Terminal);
        assert_eq!(r.phase, Phase::Error);
        let mut r = rec(Phase::Ready);
        r.restart_policy = Some(RestartPolicy::Always);
        assert!(matches!(
            d.main_exited(&mut r, 1, 137, false),
            ExitAck::RestartAfter(_)
        ));
    }

    #[test]
    fn hidden_diagnostics_blank_the_status() {
        let d = rules(Selection::contract().with_defect(Defect::FailureCauseNotReported));
        let mut r = rec(Phase::Provisioning);
        d.set_error(&mut r, "BootstrapFailed", "Unauthenticated");
        assert_eq!((r.phase, r.reason, r.message), (Phase::Error, None, None));
    }
}
