//! The harness's own gRPC client, for observation only: the gateway's sandbox phases through
//! `WatchSandbox` (one `follow_status` stream per sandbox of the run), so a phase is on the
//! timeline the moment the gateway sends it instead of at the next `sandbox list` poll. Actions
//! stay on the user's path, the CLI; this client reaches the gateway through the same
//! port-forward and presents the same client certificate as the CLI.
//!
//! When the gateway refuses the stream (or the client cannot connect at the start), the
//! `sandbox list` poller runs instead; a timeline note says which observer ran and why.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conformance_core::phase::Phase;
use conformance_core::target::SandboxView;
use conformance_core::timeline::{Event, GATEWAY_SANDBOX_KIND, Recorder};
use conformance_openshell_api::OpenShellClient;
use conformance_openshell_api::v1::{
    GetSandboxRequest, ListSandboxesRequest, Sandbox, SandboxPhase, WatchSandboxRequest,
    sandbox_stream_event::Payload,
};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

/// The timeline note when the streams observe the gateway's phases.
pub(crate) const STREAM_NOTE: &str = "the gateway's sandbox phases are observed through the WatchSandbox stream, one per sandbox of the run, as the gateway sends them";

/// Key of the timeline observation (subject [`GATEWAY_SANDBOX_KIND`]) that names the observer
/// of the gateway's phases: [`STREAM_OBSERVER`], or the poller with its period and the reason,
/// for reports to show beside the note.
pub(crate) const PHASE_OBSERVER_KEY: &str = "gateway_phase_observer";

/// Key of the timeline observation (subject `<GATEWAY_SANDBOX_KIND>/<sandbox>`) that says when
/// a sandbox's WatchSandbox stream broke ([`DISCONNECTED`]) and when it was back ([`CONNECTED`]):
/// a phase commit the gateway made in between could not be sent, so the completeness check takes
/// it from the gateway's log; one missing while the stream was up is a lossy observer.
pub(crate) const STREAM_STATE_KEY: &str = "watch_stream";
pub(crate) const DISCONNECTED: &str = "disconnected";
pub(crate) const CONNECTED: &str = "connected";

fn record_stream_state(rec: &Recorder, name: &str, state: &str) {
    rec.record_watched(Event::Observation {
        key: STREAM_STATE_KEY.to_string(),
        subject: Some(format!("{GATEWAY_SANDBOX_KIND}/{name}")),
        value: serde_json::Value::from(state),
    });
}

/// The [`PHASE_OBSERVER_KEY`] value while the streams observe.
pub(crate) const STREAM_OBSERVER: &str = "WatchSandbox stream";

/// The observer when the `sandbox list` poller observes instead, and why.
pub(crate) fn poll_observer(every: Duration, why: &str) -> String {
    format!(
        "polling `sandbox list` every {}s because {why}",
        every.as_secs_f64()
    )
}

/// Says on the timeline which observer runs: a note for people, an observation for reports.
pub(crate) fn record_observer(rec: &Recorder, observer: &str, note: &str) {
    rec.note(note);
    rec.record(Event::Observation {
        key: PHASE_OBSERVER_KEY.to_string(),
        subject: Some(GATEWAY_SANDBOX_KIND.to_string()),
        value: serde_json::Value::from(observer),
    });
}

/// The timeline note when the `sandbox list` poller observes instead, and why.
pub(crate) fn fallback_note(every: Duration, why: &str) -> String {
    format!(
        "the gateway's sandbox phases: {}",
        poll_observer(every, why)
    )
}

/// The files the CLI reads for mutual TLS (`ca.crt`, `tls.crt`, `tls.key`, PEM).
#[derive(Clone)]
pub(crate) struct ClientCert {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for ClientCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Key material stays out of logs and error messages.
        f.write_str("ClientCert { .. }")
    }
}

/// Why the harness's own gRPC client cannot reach the gateway; the run then reads through
/// the CLI and records [`ConnectError::reason`] as why.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("read the client certificate {}", path.display())]
    Certificate {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("gateway URL {url}")]
    Url {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("TLS settings for {url}")]
    Tls {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("connect to {url}")]
    Connect {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("connect to {url}: no connection within {within:?}")]
    Timeout { url: String, within: Duration },
}

impl ConnectError {
    /// The error and its causes on one line (a TLS failure is several levels down).
    pub(crate) fn reason(&self) -> String {
        error_chain(self)
    }
}

impl ClientCert {
    /// Reads the client certificate the harness wrote for the CLI into `dir`.
    pub(crate) fn read(dir: &Path) -> Result<Self, ConnectError> {
        let read = |f: &str| {
            std::fs::read(dir.join(f)).map_err(|source| ConnectError::Certificate {
                path: dir.join(f),
                source,
            })
        };
        Ok(Self {
            ca: read("ca.crt")?,
            cert: read("tls.crt")?,
            key: read("tls.key")?,
        })
    }
}

/// Where and how to reach the gateway: the local end of the port-forward, with TLS and the
/// client certificate when the install serves TLS, plaintext otherwise.
#[derive(Clone, Debug)]
pub(crate) struct GatewayEndpoint {
    pub port: u16,
    pub tls: Option<ClientCert>,
}

impl GatewayEndpoint {
    /// The URL the CLI registers too (`cli.rs` `gateway_add_cmd`). With TLS the server name is
    /// the URL's host, 127.0.0.1, which rustls checks against the certificate's IP
    /// subjectAltNames, as the CLI's own (rustls) client does.
    pub(crate) fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Connects, with the deadline `within` for the connection (and TLS handshake).
    pub(crate) async fn connect(&self, within: Duration) -> Result<Channel, ConnectError> {
        let url = self.url();
        let mut ep = Endpoint::from_shared(url.clone())
            .map_err(|source| ConnectError::Url {
                url: url.clone(),
                source,
            })?
            .connect_timeout(within)
            // A port-forward whose far end died keeps the local socket open; keepalive pings
            // notice it and the stream reconnects.
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true);
        if let Some(c) = &self.tls {
            let tls = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&c.ca))
                .identity(Identity::from_pem(&c.cert, &c.key))
                .assume_http2(true);
            ep = ep.tls_config(tls).map_err(|source| ConnectError::Tls {
                url: url.clone(),
                source,
            })?;
        }
        match tokio::time::timeout(within, ep.connect()).await {
            Ok(Ok(ch)) => Ok(ch),
            Ok(Err(source)) => Err(ConnectError::Connect { url, source }),
            Err(_) => Err(ConnectError::Timeout { url, within }),
        }
    }
}

/// How eagerly the observer discovers sandboxes and reconnects.
#[derive(Clone, Debug)]
pub(crate) struct WatchSettings {
    /// `ListSandboxes` period while no created sandbox is awaited.
    pub discover_every: Duration,
    /// `ListSandboxes` period while a sandbox the case created is not yet streamed.
    pub discover_fast: Duration,
    /// How long a created sandbox is awaited at the fast period.
    pub expect_for: Duration,
    /// First reconnect delay of a broken stream; doubles up to `reconnect_cap`.
    pub reconnect_first: Duration,
    pub reconnect_cap: Duration,
    /// Deadline of the connection and of each unary call.
    pub call_timeout: Duration,
}

impl Default for WatchSettings {
    fn default() -> Self {
        Self {
            discover_every: Duration::from_secs(1),
            discover_fast: Duration::from_millis(50),
            expect_for: Duration::from_secs(30),
            reconnect_first: Duration::from_millis(100),
            // The new stream sends the sandbox as it is first (docs/upstream-facts.md F7.8), so
            // what a restarted gateway commits before the stream is back reaches the timeline
            // one backoff after the gateway is: 250 ms at most. An attempt is one API call and
            // a local connect through the port-forward, cheap enough four times a second.
            reconnect_cap: Duration::from_millis(250),
            call_timeout: Duration::from_secs(10),
        }
    }
}

/// Names of sandboxes the case is creating, so the observer looks for them at once instead of
/// at its next slow discovery: `sandbox create` blocks until Ready, so its answer comes too
/// late to see the first phases.
#[derive(Clone, Default)]
pub(crate) struct Expected {
    names: Arc<Mutex<BTreeSet<String>>>,
    wake: Arc<Notify>,
}

impl Expected {
    pub(crate) fn expect(&self, name: &str) {
        self.names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string());
        self.wake.notify_one();
    }

    fn pending(&self, streamed: &BTreeMap<String, String>) -> bool {
        let mut n = self.names.lock().unwrap_or_else(|p| p.into_inner());
        n.retain(|name| !streamed.contains_key(name));
        !n.is_empty()
    }
}

/// The fallback observer, started with the reason the stream was not used.
pub(crate) type Fallback =
    Box<dyn FnOnce(String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// Whether a status means the gateway will not serve this client the stream (rather than that
/// it is momentarily unreachable).
fn is_refusal(code: Code) -> bool {
    matches!(
        code,
        Code::Unimplemented | Code::Unauthenticated | Code::PermissionDenied
    )
}

/// A status as one line: code and message.
pub(crate) fn status_line(s: &Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

/// An error and its sources on one line (a TLS failure is several levels down).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !out.contains(&t) {
            out.push_str(": ");
            out.push_str(&t);
        }
        src = s.source();
    }
    out
}

/// The phase the harness knows for the wire's enum value.
pub(crate) fn phase_of(value: i32) -> Phase {
    match SandboxPhase::try_from(value) {
        Ok(SandboxPhase::Unspecified) => Phase::Unspecified,
        Ok(SandboxPhase::Provisioning) => Phase::Provisioning,
        Ok(SandboxPhase::Ready) => Phase::Ready,
        Ok(SandboxPhase::Error) => Phase::Error,
        Ok(SandboxPhase::Deleting) => Phase::Deleting,
        Ok(SandboxPhase::Unknown) => Phase::Unknown,
        Ok(SandboxPhase::Stopping) => Phase::Stopping,
        Ok(SandboxPhase::Stopped) => Phase::Stopped,
        Ok(SandboxPhase::Starting) => Phase::Starting,
        Ok(SandboxPhase::Completed) => Phase::Completed,
        Err(_) => Phase::Other(format!("phase {value}")),
    }
}

/// A gateway record's `metadata.resource_version` as the timeline keeps it: 0, the protocol's
/// zero value (the models number no writes), is none.
pub(crate) fn resource_version(version: u64) -> Option<String> {
    (version > 0).then(|| version.to_string())
}

/// Records one sandbox as the gateway sent it, in the shape the `sandbox list` poller records
/// (name, phase, exit code), and with the reason and message of its `Ready` condition, which
/// the stream carries and the CLI's JSON does not (docs/upstream-facts.md F6.4): what the
/// gateway reports as the cause of a failure. `restarts` is the restart count recorded last for
/// it, so a count is recorded once per change.
fn record(rec: &Recorder, s: &Sandbox, restarts: &mut Option<u32>, after_gap: bool) {
    let Some(name) = s.metadata.as_ref().map(|m| m.name.clone()) else {
        return;
    };
    let status = s.status.clone().unwrap_or_default();
    let (reason, message) = ready_cause(&status);
    let view = SandboxView {
        name: name.clone(),
        phase: phase_of(status.phase),
        reason,
        message,
        exit_code: status.exit_code,
        resource_version: s
            .metadata
            .as_ref()
            .and_then(|m| resource_version(m.resource_version)),
    };
    if after_gap {
        rec.observe_after_gap(view.to_state());
    } else {
        rec.observe(view.to_state());
    }
    // Field 14 exists from 0.1.x on; v0.0.111 sends none, which reads as 0, so only a count
    // above zero says anything (docs/upstream-facts.md F7.6).
    if status.restart_count > 0 && *restarts != Some(status.restart_count) {
        *restarts = Some(status.restart_count);
        rec.record(Event::Observation {
            key: "restart_count".to_string(),
            subject: Some(format!("{GATEWAY_SANDBOX_KIND}/{name}")),
            value: serde_json::Value::from(status.restart_count),
        });
    }
}

/// The reason and message of a sandbox's `Ready` condition, empty ones as none.
pub(crate) fn ready_cause(
    status: &conformance_openshell_api::v1::SandboxStatus,
) -> (Option<String>, Option<String>) {
    let ready = status
        .conditions
        .iter()
        .find(|c| c.r#type == conformance_core::timeline::READY_CONDITION);
    let text = |v: &str| (!v.is_empty()).then(|| v.to_string());
    (
        ready.and_then(|c| text(&c.reason)),
        ready.and_then(|c| text(&c.message)),
    )
}

/// Records `name` as gone from the gateway, keeping its last state.
pub(crate) fn record_deleted(rec: &Recorder, name: &str) {
    let mut st = SandboxView {
        name: name.to_string(),
        ..SandboxView::default()
    }
    .to_state();
    if let Some(last) = rec.last_state(&st.object_ref()) {
        st = last;
    }
    st.deleted = true;
    rec.observe(st);
}

/// Observes the phases of the run's sandboxes (those matching `selector`) through
/// `WatchSandbox`, or runs `fallback` when the gateway refuses the stream or cannot be reached
/// at the start. Runs until aborted; its streams end with it.
pub(crate) async fn observe_phases(
    endpoint: GatewayEndpoint,
    selector: String,
    rec: Recorder,
    settings: WatchSettings,
    expected: Expected,
    fallback: Fallback,
) {
    let refusal = match start(&endpoint, &selector, &settings).await {
        Ok(channel) => {
            record_observer(&rec, STREAM_OBSERVER, STREAM_NOTE);
            match streams(channel, &selector, &rec, &settings, &expected).await {
                Some(why) => why,
                None => return,
            }
        }
        Err(why) => why,
    };
    tracing::warn!(reason = %refusal, "WatchSandbox refused; polling `sandbox list` instead");
    fallback(refusal).await;
}

/// Connects and lists once, so a gateway that refuses this client is known before any stream.
async fn start(
    endpoint: &GatewayEndpoint,
    selector: &str,
    settings: &WatchSettings,
) -> Result<Channel, String> {
    let channel = endpoint
        .connect(settings.call_timeout)
        .await
        .map_err(|e| e.reason())?;
    list(&channel, selector, settings.call_timeout)
        .await
        .map_err(|e| format!("ListSandboxes: {e}"))?;
    Ok(channel)
}

async fn list(channel: &Channel, selector: &str, within: Duration) -> Result<Vec<Sandbox>, String> {
    let mut c = OpenShellClient::new(channel.clone());
    let req = ListSandboxesRequest {
        label_selector: selector.to_string(),
    };
    match tokio::time::timeout(within, c.list_sandboxes(req)).await {
        Ok(Ok(r)) => Ok(r.into_inner().sandboxes),
        Ok(Err(s)) => Err(status_line(&s)),
        Err(_) => Err(format!("no answer within {within:?}")),
    }
}

/// Discovers the run's sandboxes and keeps one stream per sandbox. Returns the refusal when a
/// stream is refused (the caller then falls back), else runs until aborted.
async fn streams(
    channel: Channel,
    selector: &str,
    rec: &Recorder,
    settings: &WatchSettings,
    expected: &Expected,
) -> Option<String> {
    let (refused_tx, mut refused_rx) = mpsc::channel::<String>(1);
    // Dropped with this future (an aborted observer), which aborts every stream task.
    let mut tasks: JoinSet<()> = JoinSet::new();
    // Name -> id of the sandboxes being streamed.
    let mut streamed: BTreeMap<String, String> = BTreeMap::new();
    let mut expecting_since: Option<tokio::time::Instant> = None;
    loop {
        if let Ok(list) = list(&channel, selector, settings.call_timeout).await {
            for s in list {
                let Some(meta) = s.metadata.clone() else {
                    continue;
                };
                if streamed.get(&meta.name) == Some(&meta.id) {
                    continue;
                }
                // The list's state first: the stream's snapshot repeats it (and is not
                // recorded twice), and a sandbox gone before its stream opens is still seen.
                record(rec, &s, &mut None, false);
                streamed.insert(meta.name.clone(), meta.id.clone());
                tasks.spawn(watch_one(
                    channel.clone(),
                    meta.id,
                    meta.name,
                    rec.clone(),
                    settings.clone(),
                    refused_tx.clone(),
                ));
            }
        }
        let period = if expected.pending(&streamed) {
            let since = *expecting_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() < settings.expect_for {
                settings.discover_fast
            } else {
                settings.discover_every
            }
        } else {
            expecting_since = None;
            settings.discover_every
        };
        tokio::select! {
            why = refused_rx.recv() => {
                tasks.abort_all();
                return why;
            }
            _ = tokio::time::sleep(period) => {}
            _ = expected.wake.notified() => {}
        }
        // Finished stream tasks (their sandbox is gone) leave the set.
        while tasks.try_join_next().is_some() {}
    }
}

/// Follows one sandbox's status until the gateway says it is gone. A refusal of the first
/// call goes to `refused`; a stream that breaks later reconnects with capped backoff, recording
/// the gateway as unreachable while it cannot be reached, as the poller does.
async fn watch_one(
    channel: Channel,
    id: String,
    name: String,
    rec: Recorder,
    settings: WatchSettings,
    refused: mpsc::Sender<String>,
) {
    let mut client = OpenShellClient::new(channel.clone());
    let mut established = false;
    let mut backoff = settings.reconnect_first;
    let mut broken: Option<String> = None;
    let mut restarts: Option<u32> = None;
    loop {
        let req = WatchSandboxRequest {
            // The sandbox's id for the v0.0.111 gateway (docs/upstream-facts.md F7.6).
            sandbox: id.clone(),
            follow_status: true,
            ..WatchSandboxRequest::default()
        };
        let call = tokio::time::timeout(settings.call_timeout, client.watch_sandbox(req)).await;
        let failure = match call {
            Ok(Ok(resp)) => {
                // The first state sent after a gap is recorded even if unchanged: the
                // completeness check may put commits made during the gap before it.
                let mut after_gap = broken.is_some();
                if let Some(why) = broken.take() {
                    record_stream_state(&rec, &name, CONNECTED);
                    rec.note(format!(
                        "the WatchSandbox stream of {name} is back after it broke ({why}); phases held meanwhile may be missing"
                    ));
                }
                established = true;
                backoff = settings.reconnect_first;
                let mut stream = resp.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(ev)) => {
                            if let Some(Payload::Sandbox(s)) = ev.payload {
                                record(&rec, &s, &mut restarts, std::mem::take(&mut after_gap));
                            }
                        }
                        // The v0.0.111 gateway ends the stream when the sandbox leaves its
                        // store (docs/upstream-facts.md F7.8); ask to tell that from a
                        // gateway shutting down.
                        Ok(None) => break None,
                        Err(s) => break Some((s, true)),
                    }
                }
            }
            Ok(Err(s)) => Some((s, false)),
            Err(_) => Some((
                Status::deadline_exceeded(format!(
                    "WatchSandbox did not answer within {:?}",
                    settings.call_timeout
                )),
                false,
            )),
        };
        match failure {
            Some((s, _)) if !established && is_refusal(s.code()) => {
                let _ = refused
                    .send(format!("WatchSandbox of {name}: {}", status_line(&s)))
                    .await;
                return;
            }
            Some((s, _)) if s.code() == Code::NotFound => {
                record_deleted(&rec, &name);
                return;
            }
            Some((s, from_stream)) => {
                let detail = status_line(&s);
                if established && broken.is_none() {
                    record_stream_state(&rec, &name, DISCONNECTED);
                }
                if from_stream {
                    // A stream can end for reasons other than an outage (a lagging
                    // subscriber); only a failed reconnect says the gateway is unreachable.
                    tracing::debug!(sandbox = %name, error = %detail, "WatchSandbox stream broke; reconnecting");
                    broken.get_or_insert(detail);
                } else {
                    // However the stream was lost (a break, or an end the gateway could not
                    // be asked about), a gap on the timeline is said when it is back.
                    if established {
                        broken.get_or_insert(detail.clone());
                    }
                    rec.observe(SandboxView::unreachable_state(&name, &detail));
                }
            }
            None => match gone(&channel, &name, &id, settings.call_timeout).await {
                Ok(true) => {
                    record_deleted(&rec, &name);
                    return;
                }
                Ok(false) => {
                    // Ended, yet the gateway still has it: the stream reconnects, and a
                    // commit meanwhile could not be sent.
                    if broken.is_none() {
                        record_stream_state(&rec, &name, DISCONNECTED);
                        broken = Some("the stream ended".into());
                    }
                }
                Err(detail) => {
                    if broken.is_none() {
                        record_stream_state(&rec, &name, DISCONNECTED);
                    }
                    broken.get_or_insert(detail.clone());
                    rec.observe(SandboxView::unreachable_state(&name, &detail));
                }
            },
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(settings.reconnect_cap);
    }
}

/// Whether the gateway no longer has the sandbox `name` of id `id` (NotFound, or the name now
/// belongs to another sandbox).
async fn gone(channel: &Channel, name: &str, id: &str, within: Duration) -> Result<bool, String> {
    let mut c = OpenShellClient::new(channel.clone());
    let req = GetSandboxRequest {
        name: name.to_string(),
    };
    match tokio::time::timeout(within, c.get_sandbox(req)).await {
        Ok(Ok(r)) => Ok(r
            .into_inner()
            .sandbox
            .and_then(|s| s.metadata)
            .is_none_or(|m| m.id != id)),
        Ok(Err(s)) if s.code() == Code::NotFound => Ok(true),
        Ok(Err(s)) => Err(status_line(&s)),
        Err(_) => Err(format!("GetSandbox did not answer within {within:?}")),
    }
}
