//! The gateway model's gRPC listener: `openshell.v1.OpenShell` (our `.proto`,
//! docs/upstream-facts.md F7.5, F7.6) on the pod's port 8080, reached through
//! `pods/portforward` like the real gateway. Each call goes to the same [`Gateway`] methods the
//! in-process client uses, so the rules are the model's; this file only translates. TLS and
//! the credential check follow the config file (F7.7).

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use conformance_openshell_api::datamodel::v1::ObjectMeta;
use conformance_openshell_api::sandbox::v1::{
    GetSandboxConfigRequest, GetSandboxConfigResponse, PolicySource,
};
use conformance_openshell_api::v1::{
    self as pb, CreateSandboxRequest, DeleteSandboxRequest, DeleteSandboxResponse, DeletionOutcome,
    ExecSandboxEvent, ExecSandboxRequest, GetCurrentUserRequest, GetCurrentUserResponse,
    GetGatewayInfoRequest, GetGatewayInfoResponse, GetSandboxLogsRequest, GetSandboxLogsResponse,
    GetSandboxRequest, HealthRequest, HealthResponse, ListSandboxesRequest, ListSandboxesResponse,
    SandboxPhase, SandboxResponse, SandboxStreamEvent, ServiceStatus, StartSandboxRequest,
    StopSandboxRequest, WatchSandboxRequest, exec_sandbox_event, sandbox_stream_event,
};
use conformance_openshell_api::{OpenShell, OpenShellServer};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::BoxStream;
use tonic::{Code, Request, Response};

use super::config::GatewayConfig;
use super::state::Gateway;
use super::store::SandboxRecord;
use crate::model::{GRPC_PORT, WORKSPACE};
use conformance_core::phase::Phase;
use conformance_core::target::{RestartPolicy, SandboxSpec};
use kube_emulator::shell::Mounts;

/// The methods served (F7.5). Any other path is answered Unimplemented naming it, so a client
/// that needs more says what.
const SERVED: [&str; 13] = [
    "Health",
    "GetCurrentUser",
    "GetGatewayInfo",
    "CreateSandbox",
    "GetSandbox",
    "ListSandboxes",
    "DeleteSandbox",
    "StopSandbox",
    "StartSandbox",
    "ExecSandbox",
    "GetSandboxLogs",
    "GetSandboxConfig",
    "WatchSandbox",
];

const SERVICE_PREFIX: &str = "/openshell.v1.OpenShell/";

/// The TLS acceptor the config asks for (None: plaintext), built from the files it names in
/// the container's filesystem; the error is what the gateway logs before it exits 1.
pub(crate) fn tls_acceptor(
    config: &GatewayConfig,
    mounts: &Mounts,
) -> Result<Option<TlsAcceptor>, String> {
    let Some(paths) = &config.tls else {
        return Ok(None);
    };
    let cert_pem = GatewayConfig::file(mounts, &paths.cert_path)?;
    let key_pem = GatewayConfig::file(mounts, &paths.key_path)?;
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("failed to parse {}: {e}", paths.cert_path))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("failed to parse {}: {e}", paths.key_path))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?;
    let builder = match &paths.client_ca_path {
        None => builder.with_no_client_auth(),
        Some(ca_path) => {
            let ca_pem = GatewayConfig::file(mounts, ca_path)?;
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&ca_pem) {
                let c = c.map_err(|e| format!("failed to parse {ca_path}: {e}"))?;
                roots
                    .add(c)
                    .map_err(|e| format!("failed to parse {ca_path}: {e}"))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            // F7.7: required with a client CA (and no OIDC); otherwise verified if presented.
            let verifier = if config.require_client_cert {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            let verifier = verifier
                .build()
                .map_err(|e| format!("failed to load client CA {ca_path}: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut tls = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("failed to load the server certificate: {e}"))?;
    tls.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Some(TlsAcceptor::from(Arc::new(tls))))
}

/// Serves gRPC on (namespace, pod, 8080) for connections made through the cluster's
/// port-forward, until [`unserve`] and the gateway's shutdown (which aborts every connection,
/// as a dead process drops its sockets).
pub(crate) fn serve(gw: &Arc<Gateway>, config: GatewayConfig, tls: Option<TlsAcceptor>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<DuplexStream>();
    gw.cluster
        .register_port(&gw.namespace, &gw.pod, GRPC_PORT, move |s: DuplexStream| {
            let _ = tx.send(s);
        });
    let svc = Svc {
        inner: OpenShellServer::new(Api { gw: gw.clone() }),
        config: Arc::new(config),
    };
    let weak = Arc::downgrade(gw);
    gw.spawn(async move {
        // Connections live in this set: aborting the acceptor (shutdown) drops them all.
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                biased;
                s = rx.recv() => {
                    let Some(stream) = s else { break };
                    conns.spawn(connection(svc.clone(), tls.clone(), stream, weak.clone()));
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
    });
}

/// Stops taking connections: the port refuses like a port nothing listens on.
pub(crate) fn unserve(gw: &Gateway) {
    gw.cluster
        .unregister_port(&gw.namespace, &gw.pod, GRPC_PORT);
}

async fn connection(
    svc: Svc,
    tls: Option<TlsAcceptor>,
    stream: DuplexStream,
    gw: std::sync::Weak<Gateway>,
) {
    match tls {
        None => http2(svc, stream).await,
        Some(acceptor) => match acceptor.accept(stream).await {
            Ok(s) => http2(svc, s).await,
            Err(e) => {
                if let Some(gw) = gw.upgrade() {
                    gw.log(
                        "WARN",
                        "openshell_server",
                        "TLS handshake failed",
                        &[("error", &e.to_string())],
                    );
                }
            }
        },
    }
}

async fn http2<IO>(svc: Svc, io: IO)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(svc))
        .await;
}

/// The tonic service behind the credential check and the served-method check.
#[derive(Clone)]
struct Svc {
    inner: OpenShellServer<Api>,
    config: Arc<GatewayConfig>,
}

type HttpResponse = http::Response<tonic::body::Body>;

impl tower::Service<http::Request<hyper::body::Incoming>> for Svc {
    type Response = HttpResponse;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let path = req.uri().path().to_string();
        let served = path
            .strip_prefix(SERVICE_PREFIX)
            .is_some_and(|m| SERVED.contains(&m));
        if !served {
            let st =
                tonic::Status::unimplemented(format!("the gateway model does not serve {path}"));
            return Box::pin(async move { Ok(st.into_http()) });
        }
        if let Some(msg) = self.config.refusal(&path) {
            let st = tonic::Status::unauthenticated(msg);
            return Box::pin(async move { Ok(st.into_http()) });
        }
        let inner = self.inner.clone();
        Box::pin(async move { tower::ServiceExt::oneshot(inner, req).await })
    }
}

/// The model's status as gRPC's (the model carries tonic's code names).
fn status(s: super::rpc::Status) -> tonic::Status {
    let code = match s.code {
        "Cancelled" => Code::Cancelled,
        "InvalidArgument" => Code::InvalidArgument,
        "DeadlineExceeded" => Code::DeadlineExceeded,
        "NotFound" => Code::NotFound,
        "AlreadyExists" => Code::AlreadyExists,
        "PermissionDenied" => Code::PermissionDenied,
        "ResourceExhausted" => Code::ResourceExhausted,
        "FailedPrecondition" => Code::FailedPrecondition,
        "Aborted" => Code::Aborted,
        "OutOfRange" => Code::OutOfRange,
        "Unimplemented" => Code::Unimplemented,
        "Internal" => Code::Internal,
        "Unavailable" => Code::Unavailable,
        "DataLoss" => Code::DataLoss,
        "Unauthenticated" => Code::Unauthenticated,
        _ => Code::Unknown,
    };
    tonic::Status::new(code, s.message)
}

fn phase(p: &Phase) -> SandboxPhase {
    match p {
        Phase::Unspecified => SandboxPhase::Unspecified,
        Phase::Provisioning => SandboxPhase::Provisioning,
        Phase::Ready => SandboxPhase::Ready,
        Phase::Error => SandboxPhase::Error,
        Phase::Deleting => SandboxPhase::Deleting,
        Phase::Stopping => SandboxPhase::Stopping,
        Phase::Stopped => SandboxPhase::Stopped,
        Phase::Starting => SandboxPhase::Starting,
        Phase::Completed => SandboxPhase::Completed,
        // No wire value for the 0.1.x branch's Restarting (F9.1) or a name we do not know.
        Phase::Unknown | Phase::Restarting | Phase::Other(_) => SandboxPhase::Unknown,
    }
}

/// A record as the gateway answers it: metadata, the command, phase, Ready condition and exit.
pub(crate) fn sandbox_message(rec: &SandboxRecord) -> pb::Sandbox {
    let ready = if rec.phase == Phase::Ready {
        "True"
    } else {
        "False"
    };
    pb::Sandbox {
        metadata: Some(ObjectMeta {
            id: rec.id.clone(),
            name: rec.name.clone(),
            labels: rec
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            workspace: WORKSPACE.to_string(),
            ..Default::default()
        }),
        spec: Some(pb::SandboxSpec {
            command: rec.command.clone().unwrap_or_default(),
            ..Default::default()
        }),
        status: Some(pb::SandboxStatus {
            agent_pod: rec.cr_name.clone(),
            phase: phase(&rec.phase) as i32,
            conditions: vec![pb::SandboxCondition {
                r#type: "Ready".into(),
                status: ready.into(),
                reason: rec.reason.clone().unwrap_or_default(),
                message: rec.message.clone().unwrap_or_default(),
                ..Default::default()
            }],
            main_process_instance_id: rec.main_instance.map(|i| i.to_string()).unwrap_or_default(),
            exit_code: rec.exit_code,
            restart_count: rec.restart_count,
            ..Default::default()
        }),
    }
}

/// `key=value`, `key==value`, `key!=value` and `key` terms, comma-separated (AND).
fn selector_matches(
    selector: &str,
    labels: &BTreeMap<String, String>,
) -> Result<bool, tonic::Status> {
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let ok = if let Some((k, v)) = term.split_once("!=") {
            labels.get(k.trim()).map(String::as_str) != Some(v.trim())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            labels.get(k.trim()).map(String::as_str) == Some(v.trim())
        } else if term.contains(|c: char| c.is_whitespace() || "()!".contains(c)) {
            return Err(tonic::Status::invalid_argument(format!(
                "invalid label selector term {term:?}: use key=value, key!=value or key"
            )));
        } else {
            labels.contains_key(term)
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

struct Api {
    gw: Arc<Gateway>,
}

impl Api {
    fn record(&self, name: &str) -> Option<SandboxRecord> {
        self.gw.core().store.get(name).cloned()
    }

    /// The record a client names by id (v0.0.111 sends the id, F7.6) or, failing that, name.
    fn record_by_ref(&self, r: &str) -> Option<SandboxRecord> {
        let core = self.gw.core();
        core.store
            .db
            .sandboxes
            .values()
            .find(|rec| rec.id == r)
            .or_else(|| core.store.get(r))
            .cloned()
    }

    fn answer(&self, name: &str) -> Result<Response<SandboxResponse>, tonic::Status> {
        let rec = self
            .record(name)
            .ok_or_else(|| tonic::Status::not_found("sandbox not found"))?;
        Ok(Response::new(SandboxResponse {
            sandbox: Some(sandbox_message(&rec)),
        }))
    }

    fn alive(&self) -> Result<(), tonic::Status> {
        self.gw.check_alive().map_err(status)
    }
}

fn required(name: &str) -> Result<(), tonic::Status> {
    if name.is_empty() {
        Err(tonic::Status::invalid_argument("name is required"))
    } else {
        Ok(())
    }
}

#[tonic::async_trait]
impl OpenShell for Api {
    async fn health(
        &self,
        _: Request<HealthRequest>,
    ) -> Result<Response<HealthResponse>, tonic::Status> {
        self.alive()?;
        Ok(Response::new(HealthResponse {
            status: ServiceStatus::Healthy as i32,
            version: self.gw.model.version.clone(),
        }))
    }

    /// The principal of a caller without a credential when unauthenticated users are allowed,
    /// or when no authentication is configured (F7.7).
    async fn get_current_user(
        &self,
        _: Request<GetCurrentUserRequest>,
    ) -> Result<Response<GetCurrentUserResponse>, tonic::Status> {
        self.alive()?;
        Ok(Response::new(GetCurrentUserResponse {
            subject: "unauthenticated-local-dev".into(),
            display_name: "Unauthenticated Local Dev".into(),
            roles: vec!["openshell-user".into(), "openshell-admin".into()],
            scopes: vec!["openshell:all".into()],
            identity_provider: "local_dev".into(),
        }))
    }

    async fn get_gateway_info(
        &self,
        _: Request<GetGatewayInfoRequest>,
    ) -> Result<Response<GetGatewayInfoResponse>, tonic::Status> {
        self.alive()?;
        Ok(Response::new(GetGatewayInfoResponse {
            status: ServiceStatus::Healthy as i32,
            gateway_version: self.gw.model.version.clone(),
            compute_drivers: vec![pb::ComputeDriverInfo {
                name: "kubernetes".into(),
            }],
        }))
    }

    async fn create_sandbox(
        &self,
        request: Request<CreateSandboxRequest>,
    ) -> Result<Response<SandboxResponse>, tonic::Status> {
        let r = request.into_inner();
        let spec = r
            .spec
            .ok_or_else(|| tonic::Status::invalid_argument("spec is required"))?;
        let restart_policy = match pb::SandboxRestartPolicy::try_from(spec.restart_policy) {
            Ok(pb::SandboxRestartPolicy::Never) => Some(RestartPolicy::Never),
            Ok(pb::SandboxRestartPolicy::OnFailure) => Some(RestartPolicy::OnFailure),
            Ok(pb::SandboxRestartPolicy::Always) => Some(RestartPolicy::Always),
            _ => None,
        };
        let spec = SandboxSpec {
            name: r.name.clone(),
            labels: r.labels.into_iter().collect(),
            command: (!spec.command.is_empty()).then_some(spec.command),
            restart_policy,
        };
        self.gw.create_sandbox(&spec).map_err(status)?;
        self.answer(&r.name)
    }

    async fn get_sandbox(
        &self,
        request: Request<GetSandboxRequest>,
    ) -> Result<Response<SandboxResponse>, tonic::Status> {
        self.alive()?;
        let name = request.into_inner().name;
        required(&name)?;
        self.answer(&name)
    }

    async fn list_sandboxes(
        &self,
        request: Request<ListSandboxesRequest>,
    ) -> Result<Response<ListSandboxesResponse>, tonic::Status> {
        self.alive()?;
        let selector = request.into_inner().label_selector;
        let records: Vec<SandboxRecord> = self
            .gw
            .core()
            .store
            .db
            .sandboxes
            .values()
            .cloned()
            .collect();
        let mut sandboxes = vec![];
        for rec in &records {
            if selector_matches(&selector, &rec.labels)? {
                sandboxes.push(sandbox_message(rec));
            }
        }
        Ok(Response::new(ListSandboxesResponse {
            sandboxes,
            next_page_token: String::new(),
        }))
    }

    async fn delete_sandbox(
        &self,
        request: Request<DeleteSandboxRequest>,
    ) -> Result<Response<DeleteSandboxResponse>, tonic::Status> {
        let name = request.into_inner().name;
        required(&name)?;
        let id = self.record(&name).map(|r| r.id).unwrap_or_default();
        match self.gw.delete_sandbox(&name) {
            Ok(()) => {
                let gone = self.record(&name).is_none();
                Ok(Response::new(DeleteSandboxResponse {
                    deleted: true,
                    outcome: if gone {
                        DeletionOutcome::Completed
                    } else {
                        DeletionOutcome::Accepted
                    } as i32,
                    sandbox_id: id,
                }))
            }
            // Upstream answers a missing sandbox with `deleted: false`, not an error (F7.6).
            Err(e) if e.code == "NotFound" => Ok(Response::new(DeleteSandboxResponse {
                deleted: false,
                outcome: DeletionOutcome::AlreadyAbsent as i32,
                sandbox_id: String::new(),
            })),
            Err(e) => Err(status(e)),
        }
    }

    async fn stop_sandbox(
        &self,
        request: Request<StopSandboxRequest>,
    ) -> Result<Response<SandboxResponse>, tonic::Status> {
        let name = request.into_inner().name;
        required(&name)?;
        self.gw.stop_sandbox(&name).map_err(status)?;
        self.answer(&name)
    }

    async fn start_sandbox(
        &self,
        request: Request<StartSandboxRequest>,
    ) -> Result<Response<SandboxResponse>, tonic::Status> {
        let name = request.into_inner().name;
        required(&name)?;
        self.gw.start_sandbox(&name).map_err(status)?;
        self.answer(&name)
    }

    /// Runs the command to completion, then sends its output and exit (F1.12 order of checks:
    /// sandbox, command, existence, readiness).
    async fn exec_sandbox(
        &self,
        request: Request<ExecSandboxRequest>,
    ) -> Result<Response<BoxStream<ExecSandboxEvent>>, tonic::Status> {
        self.alive()?;
        let r = request.into_inner();
        if r.sandbox.is_empty() {
            return Err(tonic::Status::invalid_argument("sandbox_id is required"));
        }
        if r.command.is_empty() {
            return Err(tonic::Status::invalid_argument("command is required"));
        }
        let rec = self
            .record_by_ref(&r.sandbox)
            .ok_or_else(|| tonic::Status::not_found("sandbox not found"))?;
        let out = self.gw.exec(&rec.name, &r.command).await.map_err(status)?;
        let mut events = vec![];
        let event = |p| Ok(ExecSandboxEvent { payload: Some(p) });
        if !out.stdout.is_empty() {
            events.push(event(exec_sandbox_event::Payload::Stdout(
                pb::ExecSandboxStdout {
                    data: out.stdout.into_bytes(),
                },
            )));
        }
        if !out.stderr.is_empty() {
            events.push(event(exec_sandbox_event::Payload::Stderr(
                pb::ExecSandboxStderr {
                    data: out.stderr.into_bytes(),
                },
            )));
        }
        events.push(event(exec_sandbox_event::Payload::Exit(
            pb::ExecSandboxExit {
                exit_code: out.exit_code,
            },
        )));
        Ok(Response::new(Box::pin(tokio_stream::iter(events))))
    }

    /// `sandbox get` asks for the sandbox's configuration. The models give sandboxes no policy,
    /// which upstream answers with no policy, version 0 and source SANDBOX (F7.5).
    async fn get_sandbox_config(
        &self,
        request: Request<GetSandboxConfigRequest>,
    ) -> Result<Response<GetSandboxConfigResponse>, tonic::Status> {
        self.alive()?;
        let r = request.into_inner();
        self.record_by_ref(&r.name)
            .ok_or_else(|| tonic::Status::not_found("sandbox not found"))?;
        Ok(Response::new(GetSandboxConfigResponse {
            version: 0,
            policy_source: PolicySource::Sandbox as i32,
        }))
    }

    async fn get_sandbox_logs(
        &self,
        request: Request<GetSandboxLogsRequest>,
    ) -> Result<Response<GetSandboxLogsResponse>, tonic::Status> {
        self.alive()?;
        let r = request.into_inner();
        let rec = self
            .record_by_ref(&r.sandbox)
            .ok_or_else(|| tonic::Status::not_found("sandbox not found"))?;
        let (lines, total) = self.gw.sandbox_log_tail(&rec.id, r.lines as usize);
        let logs = lines
            .into_iter()
            .map(|l| pb::SandboxLogLine {
                sandbox_id: rec.id.clone(),
                level: l.level,
                target: l.target,
                message: l.message,
                source: "gateway".into(),
                fields: l.fields.into_iter().collect::<HashMap<_, _>>(),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(GetSandboxLogsResponse {
            logs,
            buffer_total: total as u32,
        }))
    }

    /// The sandbox now, then (with `follow_status`) once per committed change of it, from the
    /// store's change feed. Like v0.0.111, `stop_on_terminal` ends the stream at Ready, and the
    /// stream ends when the row is gone (F7.8).
    async fn watch_sandbox(
        &self,
        request: Request<WatchSandboxRequest>,
    ) -> Result<Response<BoxStream<SandboxStreamEvent>>, tonic::Status> {
        self.alive()?;
        let r = request.into_inner();
        if r.sandbox.is_empty() {
            return Err(tonic::Status::invalid_argument("id is required"));
        }
        // Subscribe before the first read, so no change falls between the two.
        let mut changes = self.gw.core().store.subscribe();
        let rec = self
            .record_by_ref(&r.sandbox)
            .ok_or_else(|| tonic::Status::not_found("sandbox not found"))?;
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let send = |rec: &SandboxRecord| {
            Ok(SandboxStreamEvent {
                payload: Some(sandbox_stream_event::Payload::Sandbox(sandbox_message(rec))),
            })
        };
        let _ = tx.try_send(send(&rec));
        let stop_on_terminal = r.stop_on_terminal;
        let ends = move |rec: &SandboxRecord| stop_on_terminal && rec.phase == Phase::Ready;
        if r.follow_status && !ends(&rec) {
            let id = rec.id.clone();
            let mut last = rec;
            self.gw.spawn(async move {
                loop {
                    let db = tokio::select! {
                        biased;
                        () = tx.closed() => return,
                        got = changes.recv() => match got {
                            Ok(db) => db,
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(_) => return,
                        },
                    };
                    let Some(now) = db.sandboxes.values().find(|x| x.id == id) else {
                        return;
                    };
                    if *now == last {
                        continue;
                    }
                    if tx.send(send(now)).await.is_err() || ends(now) {
                        return;
                    }
                    last = now.clone();
                }
            });
        }
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selectors_match_equality_inequality_and_existence() {
        let labels = BTreeMap::from([("suite".to_string(), "conformance".to_string())]);
        for (sel, want) in [
            ("", true),
            ("suite=conformance", true),
            ("suite==conformance", true),
            ("suite=other", false),
            ("suite!=other", true),
            ("suite", true),
            ("team", false),
            ("suite=conformance,team", false),
        ] {
            assert_eq!(selector_matches(sel, &labels).unwrap(), want, "{sel}");
        }
        assert_eq!(
            selector_matches("suite in (a)", &labels)
                .unwrap_err()
                .code(),
            Code::InvalidArgument
        );
    }

    #[test]
    fn a_record_is_answered_with_its_phase_ready_condition_and_exit_code() {
        let rec = SandboxRecord {
            id: "sbx-0001".into(),
            name: "s1".into(),
            cr_name: "default--s1".into(),
            phase: Phase::Error,
            reason: Some("MainProcessExited".into()),
            exit_code: Some(3),
            ..Default::default()
        };
        let m = sandbox_message(&rec);
        let st = m.status.unwrap();
        assert_eq!(st.phase, SandboxPhase::Error as i32);
        assert_eq!(st.exit_code, Some(3));
        assert_eq!(st.conditions[0].status, "False");
        assert_eq!(st.conditions[0].reason, "MainProcessExited");
        assert_eq!(m.metadata.unwrap().id, "sbx-0001");
    }

    #[test]
    fn the_models_code_names_become_grpc_codes() {
        let s = status(super::super::rpc::Status::new("FailedPrecondition", "x"));
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(s.message(), "x");
        assert_eq!(
            status(super::super::rpc::Status::new("Nonsense", "y")).code(),
            Code::Unknown
        );
    }
}
