//! The supervisor RPCs of the gateway (docs/upstream-facts.md F2.1, F7.1): certificates,
//! bootstrap tokens, sandbox config, sessions and main-process reports.

use std::sync::Arc;

use kube_emulator::sync::watch;
use tokio::time::Instant;

use super::rpc::{ConnectRequest, ExitAck, SandboxConfig, ServerCert, Session, Status};
use conformance_core::phase::Phase;
use conformance_core::target::BootstrapMaterial;
use conformance_upstream::SA_TOKEN_AUDIENCE;

use super::state::{BoundaryAssignment, Gateway, SessionEntry};

/// The contract's refusal of a bootstrap token the gateway does not accept: it names the cause.
const SA_TOKEN_REJECTED: &str = "sandbox service account token rejected: TokenReview: token is not valid for audience openshell-gateway";

impl Gateway {
    // -------------------------------------------------------------------------------------

    /// The certificate this gateway shows a sandbox's supervisor during the TLS handshake.
    pub(crate) fn server_certificate(&self, cr: &str) -> ServerCert {
        if self.model.has_fault(cr, BootstrapMaterial::Certificate) {
            ServerCert::UnknownIssuer
        } else {
            ServerCert::Trusted
        }
    }

    /// IssueSandboxToken: the projected SA token for a gateway JWT (F2.4 token bootstrap). A
    /// token the supervisor read from its projected volume is validated with a TokenReview for
    /// the audience `openshell-gateway`; one the review does not authenticate (another
    /// audience, a pod that is gone) falls through the authenticator chain, and one it does
    /// must name the sandbox through its pod and the pod's owning Sandbox (F12.7). The sandbox
    /// the gateway token is for is the one the pod names, as upstream takes it from the
    /// principal.
    pub(crate) fn issue_sandbox_token(
        &self,
        sandbox_id: &str,
        pod_uid: &str,
        sa_token: Option<&str>,
    ) -> Result<String, Status> {
        self.check_alive()?;
        // Authentication comes before the handler, as the router runs the chain first.
        let mut sandbox_id = sandbox_id.to_string();
        if let Some(token) = sa_token {
            let review = self
                .cluster
                .review_token(token, &[SA_TOKEN_AUDIENCE.to_string()]);
            if review["authenticated"] != true {
                return Err(self.token_not_authenticated());
            }
            sandbox_id = super::identity::sandbox_of(&self.cluster, &review)?;
        }
        let core = self.core();
        let rec = Self::by_id(&core, &sandbox_id)
            .ok_or_else(|| Status::not_found(format!("sandbox {sandbox_id} not found")))?;
        if self
            .model
            .has_fault(&rec.cr_name, BootstrapMaterial::Credentials)
        {
            // The emulated target's credentials fault stands for a token the review does not
            // authenticate, and is answered as one.
            return Err(self.token_not_authenticated());
        }

        Ok(format!("jwt.{sandbox_id}.{pod_uid}"))
    }

    /// The answer to a bootstrap whose ServiceAccount token the TokenReview did not
    /// authenticate. Contract (R14): the refusal names the rejected token; 0.0.111's
    /// authenticator chain falls through to a user principal, and a user may not call a
    /// sandbox-only method, so the answer does not name the cause (F12.7).
    fn token_not_authenticated(&self) -> Status {
        if self.rules().b.diagnostics == crate::spec::Diagnostics::Named {
            return Status::unauthenticated(SA_TOKEN_REJECTED);
        }
        let config = self
            .served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map_or_else(super::config::GatewayConfig::plaintext, |s| {
                s.config.clone()
            });
        config.unauthenticated_bootstrap()
    }

    fn token_parts(token: &str) -> Option<(&str, &str)> {
        let rest = token.strip_prefix("jwt.")?;
        rest.split_once('.')
    }

    /// GetSandboxConfig: the policy (the "Policy fetch" of F2.1).
    pub(crate) fn get_sandbox_config(&self, token: &str) -> Result<SandboxConfig, Status> {
        self.check_alive()?;
        let (id, pod_uid) = Self::token_parts(token)
            .ok_or_else(|| Status::unauthenticated("invalid sandbox token"))?;
        let mut core = self.core();
        let name = Self::by_id(&core, id)
            .map(|r| r.name.clone())
            .ok_or_else(|| Status::not_found(format!("sandbox {id} not found")))?;
        let mut reset = false;
        let rules = self.rules();
        self.commit(&mut core, &name, |r, rec| {
            reset = r.note_bootstrap_pod(rec, pod_uid);
        });
        let _ = rules;
        let rec = core.store.get(&name).expect("present");
        Ok(SandboxConfig {
            sandbox_id: rec.id.clone(),
            policy_version: 1,
            command: rec.command.clone(),
            reset_workspace: reset,
            main_completed: rec.phase == Phase::Completed,
        })
    }

    /// ConnectSupervisor: registers the session; the sandbox becomes Ready (F1.7).
    pub(crate) fn connect_supervisor(
        self: &Arc<Self>,
        req: &ConnectRequest,
    ) -> Result<Session, Status> {
        self.check_alive()?;
        let mut core = self.core();
        let (name, cr) = Self::by_id(&core, &req.sandbox_id)
            .map(|r| (r.name.clone(), r.cr_name.clone()))
            .ok_or_else(|| Status::not_found(format!("sandbox {} not found", req.sandbox_id)))?;
        if Self::token_parts(&req.token).map(|p| p.0) != Some(req.sandbox_id.as_str()) {
            return Err(Status::unauthenticated("invalid sandbox token"));
        }
        let rules = self.rules();
        let rec = core.store.get(&name).expect("present").clone();
        if let Err(refusal) = rules.accept_session(&rec, req) {
            let st = refusal.status.clone();
            self.commit(&mut core, &name, |r, rec| r.refuse_session(rec, &refusal));
            self.log(
                "WARN",
                "openshell_server::supervisor_session",
                "supervisor session: rejected",
                &[("sandbox_id", &req.sandbox_id), ("error", &st.to_string())],
            );
            return Err(st);
        }
        let id = core.next_session;
        core.next_session += 1;
        let shell_from = (rules.b.shell_lags_ready && !rec.shell_lag_served)
            .then(|| tokio::time::Instant::now() + self.model.timings.shell_lag_after_ready);
        let (alive_tx, alive_rx) = watch::channel(true);
        let (guard_tx, mut guard_rx) = watch::channel(());
        if core
            .sessions
            .insert(
                name.clone(),
                SessionEntry {
                    id,
                    shell_from,
                    _alive: alive_tx,
                },
            )
            .is_some()
        {
            self.log(
                "INFO",
                "openshell_server::supervisor_session",
                "supervisor session: superseded previous session",
                &[("sandbox_id", &req.sandbox_id)],
            );
        }
        let mut relaunch = false;
        self.commit(&mut core, &name, |r, rec| {
            relaunch = r.session_connected(rec, req);
            rec.shell_lag_served |= shell_from.is_some();
        });
        self.log(
            "INFO",
            "openshell_server::supervisor_session",
            "supervisor session: accepted",
            &[
                ("sandbox_id", &req.sandbox_id),
                ("session_id", &id.to_string()),
                ("reattach", if req.reattach { "true" } else { "false" }),
            ],
        );
        drop(core);
        let _ = cr;
        // The session ends when the supervisor drops its handle.
        let gw_alive = self.alive.subscribe();
        let weak = Arc::downgrade(self);
        let sid = req.sandbox_id.clone();
        self.spawn(async move {
            let _ = guard_rx.changed().await;
            drop(gw_alive);
            if let Some(gw) = weak.upgrade() {
                gw.session_ended(&name, id, &sid);
            }
        });
        self.wake.notify_one();
        Ok(Session {
            id,
            heartbeat: self.model.timings.heartbeat,
            alive: alive_rx,
            relaunch_main: relaunch,
            _guard: guard_tx,
        })
    }

    fn session_ended(&self, name: &str, id: u64, sandbox_id: &str) {
        let mut core = self.core();
        if core.sessions.get(name).map(|s| s.id) != Some(id) {
            return;
        }
        core.sessions.remove(name);
        self.commit(&mut core, name, |r, rec| r.session_disconnected(rec));
        self.log(
            "INFO",
            "openshell_server::supervisor_session",
            "supervisor session: ended",
            &[("sandbox_id", sandbox_id)],
        );
    }

    /// ReportMainProcessExit (F1.2 main_process_exited; F9.1 restart policy).
    pub(crate) fn report_main_exit(
        &self,
        token: &str,
        instance: u64,
        code: i32,
        exited_at: Instant,
    ) -> Result<ExitAck, Status> {
        self.check_alive()?;
        let (id, _) = Self::token_parts(token)
            .ok_or_else(|| Status::unauthenticated("invalid sandbox token"))?;
        let mut core = self.core();
        let name = Self::by_id(&core, id)
            .map(|r| r.name.clone())
            .ok_or_else(|| Status::not_found(format!("sandbox {id} not found")))?;
        let across_restart = exited_at < self.started;
        if across_restart && self.rules().b.exit_across_restart_flaps_error {
            // Defect `exit-across-gateway-restart-flaps-error`: Error/StartFailed, then back.
            let mut held = None;
            self.commit(&mut core, &name, |r, rec| {
                if matches!(rec.phase, Phase::Ready | Phase::Provisioning) {
                    held = Some((rec.phase.clone(), rec.reason.clone(), rec.message.clone()));
                    r.set_error(
                        rec,
                        "StartFailed",
                        "main process exit reported after a gateway restart",
                    );
                }
            });
            if let Some((phase, reason, message)) = held {
                self.commit(&mut core, &name, |_, rec| {
                    rec.phase = phase;
                    rec.reason = reason;
                    rec.message = message;
                });
            }
        }
        let mut ack = ExitAck::Ignored;
        self.commit(&mut core, &name, |r, rec| {
            ack = r.main_exited(rec, instance, code, across_restart);
        });
        Ok(ack)
    }

    /// The 0.1.x boundary reports its bootstrap material ready; the gate opens (reported).
    pub(crate) fn attach_boundary(&self, token: &str) -> Result<(), Status> {
        self.check_alive()?;
        let (id, _) = Self::token_parts(token)
            .ok_or_else(|| Status::unauthenticated("invalid sandbox token"))?;
        let mut core = self.core();
        let Some(name) = Self::by_id(&core, id).map(|r| r.name.clone()) else {
            return Err(Status::not_found(format!("sandbox {id} not found")));
        };
        let mut res = Ok(());
        self.commit(&mut core, &name, |r, rec| res = r.attach_boundary(rec));
        drop(core);
        self.wake.notify_one();
        res
    }

    /// The main process was (re)launched (restart policy; replay).
    pub(crate) fn report_main_started(&self, token: &str, instance: u64) -> Result<(), Status> {
        self.check_alive()?;
        let (id, _) = Self::token_parts(token)
            .ok_or_else(|| Status::unauthenticated("invalid sandbox token"))?;
        let mut core = self.core();
        let Some(name) = Self::by_id(&core, id).map(|r| r.name.clone()) else {
            return Err(Status::not_found(format!("sandbox {id} not found")));
        };
        let connected = core.sessions.contains_key(&name);
        self.commit(&mut core, &name, |r, rec| {
            r.main_started(rec, instance, connected)
        });
        Ok(())
    }

    /// Sandboxes a shared supervisor (gateway topology) must serve.
    pub(crate) fn boundary_assignments(&self) -> Result<Vec<BoundaryAssignment>, Status> {
        self.check_alive()?;
        Ok(self
            .core()
            .store
            .db
            .sandboxes
            .values()
            .filter(|r| !matches!(r.phase, Phase::Stopped | Phase::Stopping | Phase::Deleting))
            .map(|r| BoundaryAssignment {
                sandbox_id: r.id.clone(),
                cr_name: r.cr_name.clone(),
                epoch: r.starts,
            })
            .collect())
    }
}
