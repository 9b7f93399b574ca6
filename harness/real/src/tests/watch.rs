//! The harness's own gRPC client (`watch.rs`) against a tonic gateway stand-in built from our
//! `.proto`, reached through a TCP relay that plays the port-forward (and can be cut, as a
//! gateway restart cuts it): phases recorded as they arrive, reconnection after a break, the
//! fallback to the `sandbox list` poller on a refusal, mutual TLS, and the end of observation.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::notes;
use conformance_core::target::Observers;
use conformance_core::timeline::{
    Event, GATEWAY_SANDBOX_KIND, GATEWAY_UNREACHABLE_REASON, Recorder,
};
use conformance_openshell_api::datamodel::v1::ObjectMeta;
use conformance_openshell_api::sandbox::v1::{
    GetSandboxConfigRequest, GetSandboxConfigResponse, PolicySource,
};
use conformance_openshell_api::v1::{
    GetSandboxRequest, ListSandboxesRequest, ListSandboxesResponse, Sandbox, SandboxCondition,
    SandboxPhase, SandboxResponse, SandboxStatus, SandboxStreamEvent, WatchSandboxRequest,
    sandbox_stream_event,
};
use conformance_openshell_api::{OpenShell, OpenShellServer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::codegen::BoxStream;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Code, Request, Response, Status};

use crate::command::{CmdOutput, ScriptedRunner, Unscripted};
use crate::watch::{
    ClientCert, Expected, Fallback, GatewayEndpoint, STREAM_NOTE, WatchSettings, observe_phases,
};

pub(super) const RUN: &str = "openshell-conformance.io/run=r1";
/// Deadline of every wait in these tests.
const DEADLINE: Duration = Duration::from_secs(20);

/// A gateway holding sandboxes in memory; every change is sent to the streams of that sandbox,
/// and a removed sandbox ends them, as the v0.0.111 gateway does (docs/upstream-facts.md F7.8).
#[derive(Clone, Default)]
pub(super) struct Gateway {
    pub(super) sandboxes: Arc<Mutex<BTreeMap<String, Sandbox>>>,
    /// Per sandbox id: the changes (None = removed).
    buses: Arc<Mutex<HashMap<String, broadcast::Sender<Option<Sandbox>>>>>,
    refuse_watch: Arc<AtomicBool>,
    open_streams: Arc<AtomicUsize>,
    /// Statuses GetSandbox answers, first first, before it answers from the store again.
    pub(super) get_answers: Arc<Mutex<VecDeque<(Code, String)>>>,
    pub(super) get_calls: Arc<AtomicUsize>,
    pub(super) list_calls: Arc<AtomicUsize>,
    /// Its log: a `Sandbox phase changed` line per phase it commits, as our gateway model
    /// writes them, with the kubelet's timestamp in front.
    pub(super) log: Arc<Mutex<Vec<String>>>,
    /// Lossy: every stream but a sandbox's first drops its first event, the sandbox as it is
    /// when the stream opens (what a reconnecting observer needs most).
    pub(super) drops_first_event_after_reconnect: Arc<AtomicBool>,
    /// Lossy while connected: every stream but a sandbox's first drops the first change it
    /// would send after the sandbox as it is when the stream opens.
    pub(super) drops_first_change_after_reconnect: Arc<AtomicBool>,
    /// Streams opened per sandbox id.
    opened: Arc<Mutex<HashMap<String, usize>>>,
}

pub(super) fn sandbox(name: &str, labels: &[(&str, &str)], phase: SandboxPhase) -> Sandbox {
    Sandbox {
        metadata: Some(ObjectMeta {
            id: format!("id-{name}"),
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }),
        spec: None,
        status: Some(SandboxStatus {
            phase: phase as i32,
            ..Default::default()
        }),
    }
}

impl Gateway {
    fn bus(&self, id: &str) -> broadcast::Sender<Option<Sandbox>> {
        self.buses
            .lock()
            .unwrap()
            .entry(id.to_string())
            .or_insert_with(|| broadcast::channel(64).0)
            .clone()
    }

    pub(super) fn put(&self, s: Sandbox) {
        let meta = s.metadata.clone().unwrap();
        // A phase this API does not declare (the reads tests send one) is logged by number.
        let phase = |s: Option<&Sandbox>| {
            let raw = s
                .and_then(|s| s.status.as_ref())
                .map_or(SandboxPhase::Unspecified as i32, |st| st.phase);
            SandboxPhase::try_from(raw).map_or_else(|_| raw.to_string(), |p| format!("{p:?}"))
        };
        let old = self
            .sandboxes
            .lock()
            .unwrap()
            .insert(meta.name.clone(), s.clone());
        let (old, new) = (phase(old.as_ref()), phase(Some(&s)));
        if old != new {
            self.log.lock().unwrap().push(format!(
                "{} INFO openshell_server::compute: Sandbox phase changed sandbox_id={} sandbox_name={} old_phase={old} new_phase={new}",
                humantime::format_rfc3339_nanos(std::time::SystemTime::now()),
                meta.id,
                meta.name
            ));
        }
        let _ = self.bus(&meta.id).send(Some(s));
    }

    pub(super) fn set_phase(&self, name: &str, phase: SandboxPhase) {
        let mut s = self.sandboxes.lock().unwrap().get(name).cloned().unwrap();
        s.status.as_mut().unwrap().phase = phase as i32;
        self.put(s);
    }

    fn remove(&self, name: &str) {
        let s = self.sandboxes.lock().unwrap().remove(name).unwrap();
        let _ = self.bus(&s.metadata.unwrap().id).send(None);
    }

    fn streams(&self) -> usize {
        self.open_streams.load(Ordering::SeqCst)
    }
}

/// Counts a stream as open until the client drops it.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn matches(labels: &HashMap<String, String>, selector: &str) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|kv| {
        let (k, v) = kv.split_once('=').unwrap();
        labels.get(k).map(String::as_str) == Some(v)
    })
}

#[tonic::async_trait]
impl OpenShell for Gateway {
    async fn list_sandboxes(
        &self,
        request: Request<ListSandboxesRequest>,
    ) -> Result<Response<ListSandboxesResponse>, Status> {
        self.list_calls.fetch_add(1, Ordering::SeqCst);
        let selector = request.into_inner().label_selector;
        let sandboxes = self
            .sandboxes
            .lock()
            .unwrap()
            .values()
            .filter(|s| matches(&s.metadata.as_ref().unwrap().labels, &selector))
            .cloned()
            .collect();
        Ok(Response::new(ListSandboxesResponse {
            sandboxes,
            next_page_token: String::new(),
        }))
    }

    async fn get_sandbox(
        &self,
        request: Request<GetSandboxRequest>,
    ) -> Result<Response<SandboxResponse>, Status> {
        self.get_calls.fetch_add(1, Ordering::SeqCst);
        if let Some((code, message)) = self.get_answers.lock().unwrap().pop_front() {
            return Err(Status::new(code, message));
        }
        let name = request.into_inner().name;
        match self.sandboxes.lock().unwrap().get(&name) {
            Some(s) => Ok(Response::new(SandboxResponse {
                sandbox: Some(s.clone()),
            })),
            None => Err(Status::not_found("sandbox not found")),
        }
    }

    /// What the CLI's `sandbox get` asks after GetSandbox (the policy's revision and source).
    async fn get_sandbox_config(
        &self,
        request: Request<GetSandboxConfigRequest>,
    ) -> Result<Response<GetSandboxConfigResponse>, Status> {
        // The CLI sends the sandbox's id here; the gateway takes a name too.
        let wanted = request.into_inner().name;
        let known = self.sandboxes.lock().unwrap().values().any(|s| {
            let m = s.metadata.as_ref().unwrap();
            m.name == wanted || m.id == wanted
        });
        if !known {
            return Err(Status::not_found("sandbox not found"));
        }
        Ok(Response::new(GetSandboxConfigResponse {
            version: 0,
            policy_source: PolicySource::Sandbox as i32,
        }))
    }

    async fn watch_sandbox(
        &self,
        request: Request<WatchSandboxRequest>,
    ) -> Result<Response<BoxStream<SandboxStreamEvent>>, Status> {
        if self.refuse_watch.load(Ordering::SeqCst) {
            return Err(Status::unimplemented("WatchSandbox is not served here"));
        }
        let id = request.into_inner().sandbox;
        let mut rx = self.bus(&id).subscribe();
        let snapshot = self
            .sandboxes
            .lock()
            .unwrap()
            .values()
            .find(|s| s.metadata.as_ref().unwrap().id == id)
            .cloned()
            .ok_or_else(|| Status::not_found("sandbox not found"))?;
        self.open_streams.fetch_add(1, Ordering::SeqCst);
        let open = Open(self.open_streams.clone());
        let reconnect = {
            let mut opened = self.opened.lock().unwrap();
            let n = opened.entry(id.clone()).or_default();
            *n += 1;
            *n > 1
        };
        let drop_first = reconnect
            && self
                .drops_first_event_after_reconnect
                .load(Ordering::SeqCst);
        let mut drop_change = reconnect
            && self
                .drops_first_change_after_reconnect
                .load(Ordering::SeqCst);
        let event = |s: Sandbox| SandboxStreamEvent {
            payload: Some(sandbox_stream_event::Payload::Sandbox(s)),
        };
        let stream = async_stream(move |tx| async move {
            let _open = open;
            if !drop_first && tx.send(Ok(event(snapshot))).await.is_err() {
                return;
            }
            while let Ok(Some(s)) = rx.recv().await {
                if std::mem::take(&mut drop_change) {
                    continue;
                }
                if tx.send(Ok(event(s))).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(stream))
    }
}

/// A stream fed by a task; the task ends (and drops what it holds) once the client is gone.
fn async_stream<F, Fut>(f: F) -> BoxStream<SandboxStreamEvent>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<SandboxStreamEvent, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let fut = f(tx.clone());
    tokio::spawn(async move {
        tokio::select! {
            () = fut => {}
            () = tx.closed() => {}
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// Serves `gw` on a local port, with TLS when given.
pub(super) async fn serve(gw: Gateway, tls: Option<ServerTlsConfig>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut server = tonic::transport::Server::builder();
    if let Some(t) = tls {
        server = server.tls_config(t).unwrap();
    }
    let router = server.add_service(OpenShellServer::new(gw));
    tokio::spawn(router.serve_with_incoming(TcpListenerStream::new(listener)));
    addr
}

/// The port-forward's part: relays local connections to the gateway; while cut, it drops
/// every connection and closes new ones at once, as a port-forward to a gateway that is
/// restarting does.
pub(super) struct Relay {
    pub(super) port: u16,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<JoinSet<()>>>,
}

impl Relay {
    pub(super) async fn start(to: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<JoinSet<()>>> = Default::default();
        let (c, k) = (cut.clone(), conns.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if c.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                k.lock().unwrap().spawn(async move {
                    if let Ok(mut out) = TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
            }
        });
        Relay { port, cut, conns }
    }

    pub(super) fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.conns.lock().unwrap().abort_all();
    }

    pub(super) fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

pub(super) fn fast() -> WatchSettings {
    WatchSettings {
        discover_every: Duration::from_millis(200),
        discover_fast: Duration::from_millis(20),
        expect_for: Duration::from_secs(10),
        reconnect_first: Duration::from_millis(20),
        reconnect_cap: Duration::from_millis(200),
        call_timeout: Duration::from_secs(5),
    }
}

/// A fallback that only says it ran and why.
pub(super) fn marking_fallback(rec: &Recorder) -> Fallback {
    let rec = rec.clone();
    Box::new(move |why: String| {
        Box::pin(async move {
            rec.note(format!("fallback ran: {why}"));
            std::future::pending::<()>().await
        })
    })
}

/// The phases recorded for the gateway's sandbox `name`, in order, with `deleted` marking the
/// end.
pub(super) fn phases(rec: &Recorder, name: &str) -> Vec<String> {
    rec.snapshot()
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Object(o) if o.kind == GATEWAY_SANDBOX_KIND && o.name == name => {
                Some(if o.deleted {
                    "deleted".to_string()
                } else if o
                    .conditions
                    .iter()
                    .any(|c| c.reason.as_deref() == Some(GATEWAY_UNREACHABLE_REASON))
                {
                    "unreachable".to_string()
                } else {
                    o.phase.clone().unwrap_or_default()
                })
            }
            _ => None,
        })
        .collect()
}

/// The observer the timeline names for the gateway's phases (the last one, if several).
fn observer(rec: &Recorder) -> Option<String> {
    rec.snapshot()
        .entries
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::Observation {
                key,
                subject: Some(subject),
                value,
            } if key == crate::watch::PHASE_OBSERVER_KEY && subject == GATEWAY_SANDBOX_KIND => {
                value.as_str().map(str::to_string)
            }
            _ => None,
        })
}

/// Waits until `done` holds, failing with the stage, the deadline and the last state seen.
pub(super) async fn until<T: std::fmt::Debug>(
    stage: &str,
    mut seen: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
) {
    let start = tokio::time::Instant::now();
    loop {
        let now = seen();
        if done(&now) {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{stage}: not within {DEADLINE:?}; last seen: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn spawn_observer(
    port: u16,
    tls: Option<ClientCert>,
    rec: &Recorder,
    expected: &Expected,
    fallback: Fallback,
) -> Observers {
    let mut obs = Observers::default();
    obs.push(tokio::spawn(observe_phases(
        GatewayEndpoint { port, tls },
        RUN.to_string(),
        rec.clone(),
        fast(),
        expected.clone(),
        fallback,
    )));
    obs
}

pub(super) const LABEL: [(&str, &str); 1] = [("openshell-conformance.io/run", "r1")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phases_arrive_in_order_and_are_recorded_on_the_timeline() {
    let gw = Gateway::default();
    let addr = serve(gw.clone(), None).await;
    let rec = Recorder::new();
    let expected = Expected::default();
    let _obs = spawn_observer(addr.port(), None, &rec, &expected, marking_fallback(&rec));
    // Another run's sandbox is not this run's to observe.
    gw.put(sandbox(
        "foreign",
        &[("openshell-conformance.io/run", "r0")],
        SandboxPhase::Ready,
    ));
    expected.expect("a");
    gw.put(sandbox("a", &LABEL, SandboxPhase::Provisioning));
    until("stream of a opens", || gw.streams(), |n| *n == 1).await;
    for p in [
        SandboxPhase::Ready,
        SandboxPhase::Stopping,
        SandboxPhase::Stopped,
        SandboxPhase::Starting,
        SandboxPhase::Ready,
    ] {
        gw.set_phase("a", p);
    }
    gw.remove("a");
    until(
        "a recorded as deleted",
        || phases(&rec, "a"),
        |p| p.last().map(String::as_str) == Some("deleted"),
    )
    .await;
    assert_eq!(
        phases(&rec, "a"),
        [
            "Provisioning",
            "Ready",
            "Stopping",
            "Stopped",
            "Starting",
            "Ready",
            "deleted"
        ]
    );
    assert!(phases(&rec, "foreign").is_empty());
    let n = notes(&rec);
    assert!(n.iter().any(|m| m == STREAM_NOTE), "notes: {n:?}");
    assert!(
        !n.iter().any(|m| m.starts_with("fallback ran")),
        "notes: {n:?}"
    );
    assert_eq!(observer(&rec).as_deref(), Some("WatchSandbox stream"));
    // Streamed, not sampled: no sampling interval for checks to qualify a pass with.
    assert_eq!(rec.snapshot().sampling_interval(GATEWAY_SANDBOX_KIND), None);
    until("the ended stream is closed", || gw.streams(), |n| *n == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_breaks_reconnects_and_loses_nothing_the_gateway_still_reports() {
    let gw = Gateway::default();
    let addr = serve(gw.clone(), None).await;
    let relay = Relay::start(addr).await;
    let rec = Recorder::new();
    let expected = Expected::default();
    gw.put(sandbox("a", &LABEL, SandboxPhase::Ready));
    let _obs = spawn_observer(relay.port, None, &rec, &expected, marking_fallback(&rec));
    until("stream of a opens", || gw.streams(), |n| *n == 1).await;
    // The gateway goes away; what it commits meanwhile is reported again once it is back.
    relay.cut();
    until(
        "the outage is recorded",
        || phases(&rec, "a"),
        |p| p.last().map(String::as_str) == Some("unreachable"),
    )
    .await;
    gw.set_phase("a", SandboxPhase::Stopped);
    relay.heal();
    until(
        "the stopped phase after reconnecting",
        || phases(&rec, "a"),
        |p| p.last().map(String::as_str) == Some("Stopped"),
    )
    .await;
    // And the new stream carries what follows.
    gw.set_phase("a", SandboxPhase::Starting);
    gw.set_phase("a", SandboxPhase::Ready);
    until(
        "phases after the reconnection",
        || phases(&rec, "a"),
        |p| p.last().map(String::as_str) == Some("Ready") && p.len() >= 5,
    )
    .await;
    assert_eq!(
        phases(&rec, "a"),
        ["Ready", "unreachable", "Stopped", "Starting", "Ready"]
    );
    // The note may follow the phases it reconnected for: on a loaded machine it was not yet
    // recorded when the last phase was.
    until(
        "the note that the stream is back",
        || notes(&rec),
        |n| {
            n.iter()
                .any(|m| m.starts_with("the WatchSandbox stream of a is back after it broke"))
        },
    )
    .await;
    let n = notes(&rec);
    assert!(
        !n.iter().any(|m| m.starts_with("fallback ran")),
        "notes: {n:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unimplemented_watch_sandbox_falls_back_to_polling_and_the_note_says_so() {
    let gw = Gateway::default();
    gw.refuse_watch.store(true, Ordering::SeqCst);
    let addr = serve(gw.clone(), None).await;
    gw.put(sandbox("a", &LABEL, SandboxPhase::Provisioning));
    // The fallback the real target uses: the `sandbox list` poller, here over recorded output.
    let runner = ScriptedRunner::new(Unscripted::Fail);
    runner.respond(
        "openshell sandbox list",
        CmdOutput::ok(r#"[{"id":"id-a","name":"a","phase":"Ready"}]"#),
    );
    let cli = crate::cli::OpenShellCli::new(Arc::new(runner), "openshell", "/run/xdg".into(), "gw");
    let rec = Recorder::new();
    let fallback =
        crate::target::poll_fallback(cli, RUN.to_string(), rec.clone(), Duration::from_secs(2));
    let _obs = spawn_observer(addr.port(), None, &rec, &Expected::default(), fallback);
    until(
        "the poller's Ready",
        || phases(&rec, "a"),
        |p| p.last().map(String::as_str) == Some("Ready"),
    )
    .await;
    let n = notes(&rec);
    assert!(
        n.iter().any(|m| m
            == "the gateway's sandbox phases: polling `sandbox list` every 2s because WatchSandbox of a: Unimplemented: WatchSandbox is not served here"),
        "notes: {n:?}"
    );
    assert_eq!(
        observer(&rec).as_deref(),
        Some(
            "polling `sandbox list` every 2s because WatchSandbox of a: Unimplemented: WatchSandbox is not served here"
        )
    );
    assert_eq!(
        rec.snapshot().sampling_interval(GATEWAY_SANDBOX_KIND),
        Some(Duration::from_secs(2))
    );
    assert_eq!(gw.streams(), 0);
}

/// A CA, a gateway certificate for 127.0.0.1 (an IP subjectAltName, as the chart's certgen
/// issues for port-forwarded access) and a client certificate, as PEM.
pub(super) struct Pki {
    ca: String,
    server_cert: String,
    server_key: String,
    pub(super) client: ClientCert,
}

pub(super) fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let mut sp = CertificateParams::new(vec!["openshell".to_string()]).unwrap();
    sp.subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    let server = sp.signed_by(&server_key, &issuer).unwrap();
    let client_key = KeyPair::generate().unwrap();
    let client = CertificateParams::new(vec!["openshell-client".to_string()])
        .unwrap()
        .signed_by(&client_key, &issuer)
        .unwrap();
    Pki {
        ca: ca.pem(),
        server_cert: server.pem(),
        server_key: server_key.serialize_pem(),
        client: ClientCert {
            ca: ca.pem().into_bytes(),
            cert: client.pem().into_bytes(),
            key: client_key.serialize_pem().into_bytes(),
        },
    }
}

/// TLS that demands a client certificate from the CA, as the chart's gateway does with mTLS.
pub(super) fn server_tls(p: &Pki) -> ServerTlsConfig {
    ServerTlsConfig::new()
        .identity(Identity::from_pem(&p.server_cert, &p.server_key))
        .client_ca_root(Certificate::from_pem(&p.ca))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_the_clients_certificate_carries_the_stream() {
    let p = pki();
    let gw = Gateway::default();
    let addr = serve(gw.clone(), Some(server_tls(&p))).await;
    gw.put(sandbox("a", &LABEL, SandboxPhase::Provisioning));
    let rec = Recorder::new();
    let _obs = spawn_observer(
        addr.port(),
        Some(p.client.clone()),
        &rec,
        &Expected::default(),
        marking_fallback(&rec),
    );
    until("stream of a opens", || gw.streams(), |n| *n == 1).await;
    gw.set_phase("a", SandboxPhase::Ready);
    until(
        "Ready over TLS",
        || phases(&rec, "a"),
        |p| p.last().map(String::as_str) == Some("Ready"),
    )
    .await;
    assert_eq!(phases(&rec, "a"), ["Provisioning", "Ready"]);
    let n = notes(&rec);
    assert!(n.iter().any(|m| m == STREAM_NOTE), "notes: {n:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_certificate_from_another_ca_is_a_refusal_that_falls_back_with_the_reason() {
    let p = pki();
    let other = pki();
    let gw = Gateway::default();
    let addr = serve(gw.clone(), Some(server_tls(&p))).await;
    gw.put(sandbox("a", &LABEL, SandboxPhase::Ready));
    let rec = Recorder::new();
    // The client trusts another CA than the one that signed the gateway's certificate.
    let mut client = p.client.clone();
    client.ca = other.client.ca.clone();
    let _obs = spawn_observer(
        addr.port(),
        Some(client),
        &rec,
        &Expected::default(),
        marking_fallback(&rec),
    );
    until(
        "the fallback",
        || notes(&rec),
        |n| n.iter().any(|m| m.starts_with("fallback ran")),
    )
    .await;
    let n = notes(&rec);
    let why = n.iter().find(|m| m.starts_with("fallback ran")).unwrap();
    assert!(
        why.contains(&format!("connect to https://127.0.0.1:{}", addr.port()))
            // Both CAs have the same (empty) name, as two installs' CAs may: the
            // signature is what does not check out.
            && why.contains("invalid peer certificate"),
        "the reason names the endpoint and the certificate problem: {why}"
    );
    assert!(!n.iter().any(|m| m == STREAM_NOTE), "notes: {n:?}");
    assert!(phases(&rec, "a").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observer_stops_when_the_case_ends() {
    let gw = Gateway::default();
    let addr = serve(gw.clone(), None).await;
    gw.put(sandbox("a", &LABEL, SandboxPhase::Ready));
    gw.put(sandbox("b", &LABEL, SandboxPhase::Ready));
    let rec = Recorder::new();
    let obs = spawn_observer(
        addr.port(),
        None,
        &rec,
        &Expected::default(),
        marking_fallback(&rec),
    );
    until("streams of a and b open", || gw.streams(), |n| *n == 2).await;
    // The engine drops the case's observers when the case ends.
    drop(obs);
    until("every stream closed", || gw.streams(), |n| *n == 0).await;
    // Nothing is recorded after the end, whatever the gateway does.
    let before = rec.snapshot().entries.len();
    gw.set_phase("a", SandboxPhase::Stopped);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rec.snapshot().entries.len(), before);
    assert_eq!(gw.streams(), 0);
}

/// A plaintext gateway with sandbox `a` in `phase`, and an observer whose stream of it is open.
async fn streaming_one(phase: SandboxPhase) -> (Gateway, Recorder, Observers) {
    let gw = Gateway::default();
    let addr = serve(gw.clone(), None).await;
    gw.put(sandbox("a", &LABEL, phase));
    let rec = Recorder::new();
    let obs = spawn_observer(
        addr.port(),
        None,
        &rec,
        &Expected::default(),
        marking_fallback(&rec),
    );
    until("stream of a opens", || gw.streams(), |n| *n == 1).await;
    (gw, rec, obs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_count_the_gateway_reports_is_recorded_once_per_change() {
    let (gw, rec, _obs) = streaming_one(SandboxPhase::Ready).await;
    for (phase, restarts) in [
        (SandboxPhase::Error, 1),
        (SandboxPhase::Ready, 1),
        (SandboxPhase::Error, 2),
        (SandboxPhase::Ready, 2),
    ] {
        let mut s = gw.sandboxes.lock().unwrap().get("a").cloned().unwrap();
        let st = s.status.as_mut().unwrap();
        st.phase = phase as i32;
        st.restart_count = restarts;
        gw.put(s);
    }
    until("the last phase", || phases(&rec, "a"), |p| p.len() == 5).await;
    let counts: Vec<u64> = rec
        .snapshot()
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Observation {
                key,
                subject: Some(subject),
                value,
            } if key == "restart_count" && *subject == format!("{GATEWAY_SANDBOX_KIND}/a") => {
                value.as_u64()
            }
            _ => None,
        })
        .collect();
    assert_eq!(counts, [1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cause_the_gateway_reports_in_the_ready_condition_reaches_the_timeline() {
    let (gw, rec, _obs) = streaming_one(SandboxPhase::Provisioning).await;
    let mut s = gw.sandboxes.lock().unwrap().get("a").cloned().unwrap();
    let st = s.status.as_mut().unwrap();
    st.phase = SandboxPhase::Error as i32;
    st.conditions = vec![
        SandboxCondition {
            r#type: "Scheduled".into(),
            status: "True".into(),
            reason: "Other".into(),
            message: "not this one".into(),
            ..Default::default()
        },
        SandboxCondition {
            r#type: "Ready".into(),
            status: "False".into(),
            reason: "BootstrapFailed".into(),
            message: "token audience rejected".into(),
            ..Default::default()
        },
    ];
    gw.put(s);
    until("the Error phase", || phases(&rec, "a"), |p| p.len() == 2).await;
    let last = rec
        .snapshot()
        .entries
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::Object(o) if o.kind == GATEWAY_SANDBOX_KIND && o.name == "a" => Some(o.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(last.conditions.len(), 1, "{last:?}");
    let ready = &last.conditions[0];
    assert_eq!(ready.type_, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("BootstrapFailed"));
    assert_eq!(ready.message.as_deref(), Some("token audience rejected"));
}
