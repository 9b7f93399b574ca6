//! One running gateway process: its store, sessions, log tail and tasks, and the few
//! operations every other part of the gateway builds on (commit a phase, log, spawn).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use kube_emulator::sync::watch;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::core::Rules;
use super::rpc::Status;
use super::store::{SandboxRecord, Store};
use crate::model::OpenShellModel;
use conformance_core::phase::Phase;
use conformance_core::target::SandboxView;
use kube_emulator::Cluster;

/// One line of a sandbox's log as the gateway keeps it in memory (F1.17).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogLine {
    pub level: String,
    pub target: String,
    pub message: String,
    pub fields: BTreeMap<String, String>,
}

/// The in-memory tail kept per sandbox (F1.17: 2000 lines).
const LOG_TAIL: usize = 2000;

/// One sandbox a shared supervisor must serve (gateway topology).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BoundaryAssignment {
    pub sandbox_id: String,
    pub cr_name: String,
    /// How many times the user started the sandbox again: a boundary that failed for good is
    /// retried only in a new epoch.
    pub epoch: u64,
}

pub(crate) struct SessionEntry {
    pub id: u64,
    /// Until when exec is refused although the session made the sandbox Ready (defect
    /// `ready-before-shell-usable`, on a sandbox's first session only).
    pub shell_from: Option<Instant>,
    /// Held so that dropping the entry (stop, delete, shutdown) ends the supervisor's session.
    pub _alive: watch::Sender<bool>,
}

pub(crate) struct Core {
    pub store: Store,
    pub sessions: BTreeMap<String, SessionEntry>,
    pub next_session: u64,
    /// Until when exec is refused after a sandbox turned Ready again (defect
    /// `ready-again-before-shell-usable`: every turn to Ready but the sandbox's first).
    pub shell_lag_until: BTreeMap<String, Instant>,
}

/// What a gateway started from the chart's config file shows its sandboxes.
pub(crate) struct Served {
    pub config: super::config::GatewayConfig,
    /// The certificate chain it presents (DER, leaf first); empty without TLS.
    pub chain: Vec<Vec<u8>>,
}

/// One running gateway process. Clients and supervisors hold an `Arc<Gateway>` they got from
/// [`conformance_kube_models::network::Network::connect`]; once the process ends, every call is Unavailable.
pub struct Gateway {
    pub model: Arc<OpenShellModel>,
    pub cluster: Cluster,
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub started: Instant,
    core: Mutex<Core>,
    pub(super) alive: watch::Sender<bool>,
    pub(crate) wake: Notify,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Gateway log lines about each sandbox, by sandbox id (served by `GetSandboxLogs`).
    sandbox_logs: Mutex<BTreeMap<String, std::collections::VecDeque<LogLine>>>,
    /// Set by the gateway program from its config file; None when started in process without
    /// one (the emulated target).
    pub(crate) served: Mutex<Option<Served>>,
}

impl Gateway {
    pub fn start(
        model: Arc<OpenShellModel>,
        cluster: Cluster,
        namespace: &str,
        pod: &str,
        container: &str,
        mut store: Store,
    ) -> Arc<Self> {
        store.db.boots += 1;
        store.save();
        Arc::new(Self {
            model,
            cluster,
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
            started: Instant::now(),
            core: Mutex::new(Core {
                store,
                sessions: BTreeMap::new(),
                next_session: 1,
                shell_lag_until: BTreeMap::new(),
            }),
            alive: watch::channel(true).0,
            wake: Notify::new(),
            tasks: Mutex::default(),
            sandbox_logs: Mutex::default(),
            served: Mutex::default(),
        })
    }

    pub(crate) fn core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn rules(&self) -> Rules {
        Rules {
            b: self.model.behaviour,
            t: self.model.timings.clone(),
        }
    }

    pub(crate) fn is_alive(&self) -> bool {
        *self.alive.borrow()
    }

    pub(crate) fn check_alive(&self) -> Result<(), Status> {
        if self.is_alive() {
            Ok(())
        } else {
            Err(Status::unavailable(
                "error trying to connect: tcp connect error: Connection refused (os error 111)",
            ))
        }
    }

    pub(crate) fn spawn(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        let h = tokio::spawn(f);
        self.tasks.lock().unwrap_or_else(|p| p.into_inner()).push(h);
    }

    pub(super) fn shutdown(&self) {
        self.alive.send_replace(false);
        self.core().sessions.clear();
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }

    /// A tracing-shaped line in the gateway container's log (F7.3).
    pub(crate) fn log(&self, level: &str, target: &str, msg: &str, fields: &[(&str, &str)]) {
        let mut line = format!("{level} {target}: {msg}");
        for (k, v) in fields {
            if v.contains(' ') {
                line.push_str(&format!(" {k}=\"{v}\""));
            } else {
                line.push_str(&format!(" {k}={v}"));
            }
        }
        self.cluster
            .append_log(&self.namespace, &self.pod, &self.container, &line);
        if let Some((_, id)) = fields.iter().find(|(k, _)| *k == "sandbox_id") {
            let mut logs = self.sandbox_logs.lock().unwrap_or_else(|p| p.into_inner());
            let tail = logs.entry(id.to_string()).or_default();
            if tail.len() == LOG_TAIL {
                tail.pop_front();
            }
            tail.push_back(LogLine {
                level: level.to_string(),
                target: target.to_string(),
                message: msg.to_string(),
                fields: fields
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            });
        }
    }

    /// The last `lines` (0: all) log lines about sandbox `id`, and how many are kept.
    pub(crate) fn sandbox_log_tail(&self, id: &str, lines: usize) -> (Vec<LogLine>, usize) {
        let logs = self.sandbox_logs.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tail) = logs.get(id) else {
            return (vec![], 0);
        };
        let skip = if lines == 0 {
            0
        } else {
            tail.len().saturating_sub(lines)
        };
        (tail.iter().skip(skip).cloned().collect(), tail.len())
    }

    /// Writes a phase (and logs the change); persists the row.
    pub(crate) fn commit(
        &self,
        core: &mut Core,
        name: &str,
        f: impl FnOnce(&Rules, &mut SandboxRecord),
    ) {
        let rules = self.rules();
        let Some(rec) = core.store.get_mut(name) else {
            return;
        };
        let before = rec.clone();
        f(&rules, rec);
        if rec.phase == Phase::Ready && before.phase != Phase::Ready {
            // Defect `ready-again-before-shell-usable`: each Ready but the first lags.
            let again = rec.readies > 0;
            rec.readies += 1;
            if rules.b.shell_lags_ready_again && again {
                let until = Instant::now() + self.model.timings.shell_lag_after_ready;
                core.shell_lag_until.insert(name.to_string(), until);
            }
        }
        let Some(rec) = core.store.get_mut(name) else {
            return;
        };
        if *rec != before {
            if rec.phase != before.phase {
                let (id, old, new) = (rec.id.clone(), before.phase.name(), rec.phase.name());
                let reason = rec.reason.clone().unwrap_or_default();
                self.log(
                    "INFO",
                    "openshell_server::compute",
                    "Sandbox phase changed",
                    &[
                        ("sandbox_id", &id),
                        ("sandbox_name", name),
                        ("old_phase", old),
                        ("new_phase", new),
                        ("reason", &reason),
                    ],
                );
            }
            core.store.save();
        }
    }

    pub(crate) fn view(rec: &SandboxRecord) -> SandboxView {
        rec.view()
    }

    pub(super) fn by_id<'a>(core: &'a Core, id: &str) -> Option<&'a SandboxRecord> {
        core.store.db.sandboxes.values().find(|r| r.id == id)
    }

    /// The certificate chain this gateway presents to sandboxes (DER, leaf first); empty when
    /// it serves plaintext or was started without a config file.
    pub(crate) fn presented_chain(&self) -> Vec<Vec<u8>> {
        self.served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|s| s.chain.clone())
            .unwrap_or_default()
    }

    /// The Secret the driver mounts into sandbox pods for TLS to the gateway (F3.5).
    pub(crate) fn client_tls_secret(&self) -> Option<String> {
        self.served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|s| s.config.client_tls_secret.clone())
    }
}
