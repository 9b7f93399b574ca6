//! The OpenShell gateway model: a container program (image `ghcr.io/nvidia/openshell/gateway`)
//! that keeps sandbox records in a store on its PVC, derives phases, serves the client and
//! supervisor RPCs on port 8080 through [`crate::network::Network`], drives Sandbox CRs
//! through the Kubernetes driver, and holds the supervisor sessions in memory.
//!
//! Parts: [`store`] (durable rows), [`phase`] (derivation), [`rpc`] (types), [`core`] (the
//! rules over one record), [`driver`] (Kubernetes objects), [`startup`] (the startup sweep),
//! [`config`] (the chart's `gateway.toml`), [`grpc`] (the gRPC listener on port 8080).
//! `Fn.n` in comments are items of docs/upstream-facts.md.

pub(crate) mod config;
pub(crate) mod core;
pub(crate) mod driver;
pub(crate) mod grpc;
mod identity;
pub(crate) mod phase;
pub(crate) mod rpc;
pub(crate) mod startup;
pub(crate) mod store;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use kube_emulator::sync::watch;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::core::Rules;
use self::rpc::{ConnectRequest, ExitAck, SandboxConfig, ServerCert, Session, Status};
use self::store::{SandboxRecord, Store};
use super::model::{GRPC_PORT, OpenShellModel, cr_name};
use super::program::{ContainerCtx, ContainerProgram};
use conformance_core::phase::Phase;
use conformance_core::target::{BootstrapMaterial, ExecResult, SandboxSpec, SandboxView};
use conformance_upstream::{NAMESPACE, SA_TOKEN_AUDIENCE, SANDBOX_SERVICE_ACCOUNT};
use kube_emulator::Cluster;

/// The contract's refusal of a bootstrap token the gateway does not accept: it names the cause.
const SA_TOKEN_REJECTED: &str = "sandbox service account token rejected: TokenReview: token is not valid for audience openshell-gateway";

/// The program the kubelet runs for the gateway image.
pub(crate) struct GatewayProgram {
    pub model: Arc<OpenShellModel>,
}

#[async_trait]
impl ContainerProgram for GatewayProgram {
    async fn run(&self, mut ctx: ContainerCtx) -> i32 {
        // The chart's certgen hook runs the same image as `generate-certs` (F5.12).
        if crate::certgen::is_certgen(&ctx.argv) {
            return crate::certgen::run(ctx).await;
        }
        // Like the real program: a config it cannot use is an error line and exit 1 (F7.7).
        let (config, tls) = match self.configure(&ctx) {
            Ok(c) => c,
            Err(e) => {
                ctx.log(&format!("ERROR openshell_server: {e}"));
                return 1;
            }
        };
        // What sandboxes see of this gateway: the certificate it presents (read by the TLS
        // set-up above, so it parses) and the config's sandbox TLS Secret and auth settings.
        let chain = config
            .tls
            .as_ref()
            .and_then(|t| config::GatewayConfig::file(&ctx.mounts, &t.cert_path).ok())
            .map(|pem| {
                use tokio_rustls::rustls::pki_types::CertificateDer;
                use tokio_rustls::rustls::pki_types::pem::PemObject;
                CertificateDer::pem_slice_iter(&pem)
                    .filter_map(Result::ok)
                    .map(|c| c.as_ref().to_vec())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        // The StatefulSet's claim template `openshell-data` mounted at /var/openshell.
        let volume = ctx
            .cluster
            .pvc_volume(&ctx.namespace, &format!("openshell-data-{}", ctx.pod));
        let gw = Gateway::start(
            self.model.clone(),
            ctx.cluster.clone(),
            &ctx.namespace,
            &ctx.pod,
            &ctx.container,
            Store::open(volume).with_sink(self.model.views.clone()),
        );
        *gw.served.lock().unwrap_or_else(|p| p.into_inner()) = Some(Served {
            config: config.clone(),
            chain,
        });
        // F1.15: the startup sweep runs before the watchers and the listeners start.
        gw.startup_sweep();
        gw.spawn(driver::reconcile_loop(gw.clone()));
        ctx.network
            .bind(&ctx.namespace, &ctx.pod, GRPC_PORT, gw.clone());
        grpc::serve(&gw, config, tls);
        gw.log(
            "INFO",
            "openshell_server",
            "Server listening",
            &[("address", "0.0.0.0:8080")],
        );
        ctx.set_ready(true);
        let sig = ctx.signalled().await;
        ctx.set_ready(false);
        ctx.network.unbind(&ctx.namespace, &ctx.pod, GRPC_PORT);
        grpc::unserve(&gw);
        gw.shutdown();
        gw.log("INFO", "openshell_server", "Shutting down", &[]);
        match sig {
            super::program::Signal::Term => 0,
            super::program::Signal::Kill => 137,
        }
    }
}

impl GatewayProgram {
    /// The config file's settings and the TLS acceptor they ask for. The model cannot switch
    /// topology at run time (every part reads it from the model), so a config naming another
    /// topology, or another sandbox namespace, is refused with both named (F7.7).
    pub(crate) fn configure(
        &self,
        ctx: &ContainerCtx,
    ) -> Result<(config::GatewayConfig, Option<tokio_rustls::TlsAcceptor>), String> {
        let config = config::GatewayConfig::read(&ctx.mounts)?;
        let model_topology = &self.model.topology.name;
        if let Some(t) = config.topology.as_ref().filter(|t| *t != model_topology) {
            return Err(format!(
                "configured supervisor topology {t:?} is not the one this gateway model runs ({model_topology:?}); start the model with topology {t:?}"
            ));
        }
        if let Some(ns) = config
            .sandbox_namespace
            .as_ref()
            .filter(|ns| ns.as_str() != NAMESPACE)
        {
            return Err(format!(
                "configured sandbox_namespace {ns:?} is not the one this gateway model uses ({:?})",
                NAMESPACE
            ));
        }
        if let Some(sa) = config
            .sandbox_service_account
            .as_ref()
            .filter(|sa| sa.as_str() != SANDBOX_SERVICE_ACCOUNT)
        {
            return Err(format!(
                "configured service_account_name {sa:?} is not the one this gateway model runs sandbox pods as ({:?})",
                SANDBOX_SERVICE_ACCOUNT
            ));
        }
        let tls = grpc::tls_acceptor(&config, &ctx.mounts)?;
        Ok((config, tls))
    }
}

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
    /// Held so that dropping the entry (stop, delete, shutdown) ends the supervisor's session.
    pub _alive: watch::Sender<bool>,
}

pub(crate) struct Core {
    pub store: Store,
    pub sessions: BTreeMap<String, SessionEntry>,
    pub next_session: u64,
}

/// What a gateway started from the chart's config file shows its sandboxes.
pub(crate) struct Served {
    pub config: config::GatewayConfig,
    /// The certificate chain it presents (DER, leaf first); empty without TLS.
    pub chain: Vec<Vec<u8>>,
}

/// One running gateway process. Clients and supervisors hold an `Arc<Gateway>` they got from
/// [`crate::network::Network::connect`]; once the process ends, every call is Unavailable.
pub struct Gateway {
    pub model: Arc<OpenShellModel>,
    pub cluster: Cluster,
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub started: Instant,
    core: Mutex<Core>,
    alive: watch::Sender<bool>,
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

    fn shutdown(&self) {
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

    fn by_id<'a>(core: &'a Core, id: &str) -> Option<&'a SandboxRecord> {
        core.store.db.sandboxes.values().find(|r| r.id == id)
    }

    // -------------------------------------------------------------------------------------
    // client RPCs (F1.8-F1.12)
    // -------------------------------------------------------------------------------------

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
        {
            let mut core = self.core();
            let rec = core
                .store
                .get(name)
                .ok_or_else(|| Status::not_found(format!("sandbox '{name}' not found")))?;
            match self.rules().stop_allowed(&rec.phase) {
                core::Verdict::Idempotent => return Ok(()),
                core::Verdict::Refuse(msg) => return Err(Status::failed_precondition(msg)),
                core::Verdict::Proceed => {}
            }
            self.commit(&mut core, name, |r, rec| r.begin_stop(rec));
            core.sessions.remove(name);
        }
        let gw = self.clone();
        let name = name.to_string();
        self.spawn(async move { driver::stop_sandbox(&gw, &name).await });
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
                core::Verdict::Idempotent => return Ok(()),
                core::Verdict::Refuse(msg) => return Err(Status::failed_precondition(msg)),
                core::Verdict::Proceed => {}
            }
            let cr = rec.cr_name.clone();
            self.commit(&mut core, name, |r, rec| r.begin_start(rec));
            cr
        };
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

    // -------------------------------------------------------------------------------------
    // supervisor RPCs (F2.1, F7.1)
    // -------------------------------------------------------------------------------------

    /// The certificate this gateway shows a sandbox's supervisor during the TLS handshake.
    pub(crate) fn server_certificate(&self, cr: &str) -> ServerCert {
        if self.model.has_fault(cr, BootstrapMaterial::Certificate) {
            ServerCert::UnknownIssuer
        } else {
            ServerCert::Trusted
        }
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
            sandbox_id = identity::sandbox_of(&self.cluster, &review)?;
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
            .map_or_else(config::GatewayConfig::plaintext, |s| s.config.clone());
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
        let (alive_tx, alive_rx) = watch::channel(true);
        let (guard_tx, mut guard_rx) = watch::channel(());
        if core
            .sessions
            .insert(
                name.clone(),
                SessionEntry {
                    id,
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
