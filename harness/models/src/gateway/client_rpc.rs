//! The client RPCs of the gateway (docs/upstream-facts.md F1.8-F1.12): create, get, list,
//! stop, start, delete and exec, each checked against the rules in [`super::core`].

use std::sync::Arc;

use super::rpc::Status;
use super::store::SandboxRecord;
use crate::model::cr_name;
use conformance_core::phase::Phase;
use conformance_core::target::{ExecResult, SandboxSpec, SandboxView};

use super::driver;
use super::state::Gateway;

impl Gateway {
    /// CreateSandbox: validates the name (F12.13), persists Provisioning, then asks the
    /// driver (F1.8).
    pub fn create_sandbox(&self, spec: &SandboxSpec) -> Result<SandboxView, Status> {
        self.check_alive()?;
        if spec.name.is_empty() {
            return Err(Status::new("InvalidArgument", "sandbox name is required"));
        }
        validate_sandbox_name(&spec.name)?;
        if spec.restart_policy.is_some() && !self.model.behaviour.restart_policy {
            return Err(Status::new(
                "InvalidArgument",
                "unknown field restart_policy (no restart policy in this version)",
            ));
        }
        let rec = {
            let mut core = self.core();
            if core.store.get(&spec.name).is_some() {
                return Err(Status::new(
                    "AlreadyExists",
                    format!("sandbox '{}' already exists", spec.name),
                ));
            }
            core.store.db.next_id += 1;
            let rec = SandboxRecord {
                id: format!("sbx-{:04}", core.store.db.next_id),
                name: spec.name.clone(),
                cr_name: cr_name(&spec.name),
                phase: Phase::Provisioning,
                command: spec.command.clone(),
                labels: spec.labels.clone(),
                restart_policy: spec.restart_policy,
                ..Default::default()
            };
            core.store
                .db
                .sandboxes
                .insert(spec.name.clone(), rec.clone());
            core.store.save();
            rec
        };
        if let Err(e) = driver::create_sandbox(self, &rec) {
            let mut core = self.core();
            core.store.db.sandboxes.remove(&spec.name);
            core.store.save();
            return Err(if e.code == 409 {
                Status::new("AlreadyExists", e.message)
            } else {
                Status::new("Internal", e.message)
            });
        }
        self.log(
            "INFO",
            "openshell_server::grpc",
            "Sandbox created",
            &[("sandbox_id", &rec.id), ("sandbox_name", &rec.name)],
        );
        self.wake.notify_one();
        Ok(Self::view(&rec))
    }

    pub fn get_sandbox(&self, name: &str) -> Result<Option<SandboxView>, Status> {
        self.check_alive()?;
        Ok(self.core().store.get(name).map(Self::view))
    }

    pub(crate) fn list_sandboxes(&self) -> Result<Vec<SandboxView>, Status> {
        self.check_alive()?;
        Ok(self
            .core()
            .store
            .db
            .sandboxes
            .values()
            .map(Self::view)
            .collect())
    }

    /// StopSandbox (F1.9): returns once Stopping is persisted; the driver work continues.
    pub fn stop_sandbox(self: &Arc<Self>, name: &str) -> Result<(), Status> {
        self.check_alive()?;
        let suspend;
        {
            let mut core = self.core();
            let rec = core
                .store
                .get(name)
                .ok_or_else(|| Status::not_found(format!("sandbox '{name}' not found")))?;
            let rules = self.rules();
            match rules.stop_allowed(&rec.phase) {
                super::core::Verdict::Idempotent => return Ok(()),
                super::core::Verdict::Refuse(msg) => return Err(Status::failed_precondition(msg)),
                super::core::Verdict::Proceed => {}
            }
            // Defect `stop-never-completes`: only a stop of a Ready sandbox, so recovery from
            // Error by stop and start (R8) still works and the defect stays R7's alone.
            suspend = !(rules.b.stop_skips_suspend && rec.phase == Phase::Ready);
            self.commit(&mut core, name, |r, rec| r.begin_stop(rec));
            core.sessions.remove(name);
        }
        let gw = self.clone();
        let name = name.to_string();
        self.spawn(async move { driver::stop_sandbox(&gw, &name, suspend).await });
        Ok(())
    }

    /// StartSandbox (F1.10): Starting, patch the CR, return; a session makes it Ready.
    pub fn start_sandbox(&self, name: &str) -> Result<(), Status> {
        self.check_alive()?;
        let cr = {
            let mut core = self.core();
            let rec = core
                .store
                .get(name)
                .ok_or_else(|| Status::not_found(format!("sandbox '{name}' not found")))?;
            match self.rules().start_allowed(&rec.phase) {
                super::core::Verdict::Idempotent => return Ok(()),
                super::core::Verdict::Refuse(msg) => return Err(Status::failed_precondition(msg)),
                super::core::Verdict::Proceed => {}
            }
            let cr = rec.cr_name.clone();
            self.commit(&mut core, name, |r, rec| r.begin_start(rec));
            cr
        };
        if self.rules().b.start_hangs {
            // Defect `start-hangs`: Starting is held (F1.6) and nothing resumes the sandbox.
            return Ok(());
        }
        driver::set_operating_mode(self, &cr, "Running")
            .map_err(|e| Status::new("Internal", e.message))?;
        self.wake.notify_one();
        Ok(())
    }

    /// DeleteSandbox (F1.11): any phase; Deleting, then the driver deletes the CR.
    pub fn delete_sandbox(&self, name: &str) -> Result<(), Status> {
        self.check_alive()?;
        let rec = {
            let mut core = self.core();
            let rec = core
                .store
                .get(name)
                .cloned()
                .ok_or_else(|| Status::not_found(format!("Sandbox {name} not found")))?;
            self.commit(&mut core, name, |_, rec| {
                rec.phase = Phase::Deleting;
                rec.reason = Some("Deleting".into());
                rec.message = None;
            });
            core.sessions.remove(name);
            rec
        };
        let gone = driver::delete_sandbox(self, &rec);
        if gone {
            let mut core = self.core();
            core.store.db.sandboxes.remove(name);
            core.store.save();
        }
        self.wake.notify_one();
        Ok(())
    }

    /// ExecSandbox: Ready only (F1.12, grpc/sandbox.rs L1209), then runs in the `agent` container.
    pub async fn exec(&self, name: &str, argv: &[String]) -> Result<ExecResult, Status> {
        self.check_alive()?;
        let cr = {
            let core = self.core();
            let rec = core
                .store
                .get(name)
                .ok_or_else(|| Status::not_found(format!("sandbox '{name}' not found")))?;
            if rec.phase != Phase::Ready {
                return Err(Status::failed_precondition("sandbox is not ready"));
            }
            // Defect `ready-before-shell-usable`: Ready, but the shell refuses for a while.
            if core
                .sessions
                .get(name)
                .and_then(|s| s.shell_from)
                .is_some_and(|t| tokio::time::Instant::now() < t)
                || core
                    .shell_lag_until
                    .get(name)
                    .is_some_and(|t| tokio::time::Instant::now() < *t)
            {
                return Err(Status::unavailable(
                    "sandbox shell not reachable yet: the supervisor's relay is not up",
                ));
            }
            rec.cr_name.clone()
        };
        let out = self
            .cluster
            .exec(
                &self.namespace,
                &cr,
                Some(&self.model.topology.workload.container),
                argv,
                &[],
            )
            .await
            .map_err(|e| Status::unavailable(format!("sandbox relay failed: {}", e.message)))?;
        Ok(ExecResult {
            exit_code: out.exit_code,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// The gateway's name rules for a sandbox (docs/upstream-facts.md F12.13): at most 19
/// characters, a DNS-1123 label without consecutive hyphens; the first broken rule answers.
fn validate_sandbox_name(name: &str) -> Result<(), Status> {
    const MAX: usize = conformance_core::scenario::MAX_SANDBOX_NAME;
    let refuse = |m: String| Err(Status::new("InvalidArgument", m));
    if name.len() > MAX {
        return refuse(format!(
            "name exceeds maximum length ({} > {MAX})",
            name.len()
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return refuse(
            "name must contain only lowercase alphanumeric characters or hyphens".into(),
        );
    }
    if name.starts_with('-') || name.ends_with('-') {
        return refuse("name must not start or end with a hyphen".into());
    }
    if name.contains("--") {
        return refuse("name must not contain consecutive hyphens".into());
    }
    Ok(())
}

#[cfg(test)]
mod name_tests {
    use super::validate_sandbox_name;

    #[test]
    fn the_gateway_refuses_sandbox_names_as_openshell_does() {
        assert!(validate_sandbox_name("gateway-re-1a2b3c4d").is_ok());
        for (name, message) in [
            (
                "openshell-conformance-abcd",
                "name exceeds maximum length (26 > 19)",
            ),
            (
                "Upper",
                "name must contain only lowercase alphanumeric characters or hyphens",
            ),
            ("-lead", "name must not start or end with a hyphen"),
            ("a--b", "name must not contain consecutive hyphens"),
        ] {
            let err = validate_sandbox_name(name).unwrap_err();
            assert_eq!(
                (err.code, err.message.as_str()),
                ("InvalidArgument", message)
            );
        }
    }
}
