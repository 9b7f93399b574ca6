//! The watchers against the kube emulator, over a transport that can lose the API server.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use conformance_core::checks::{Anchor, Check, Predicate, Selector};
use conformance_core::timeline::{API_SERVER_REACHABLE_KEY, Event, ObjectRef, Recorder};
use kube_emulator::{Cluster, ClusterConfig, PatchKind, ResourceRef};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;

const NS: &str = "openshell";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Reaches the emulator while up; while down, refuses new requests and breaks the responses
/// being streamed (a watch), as a real API server going away does. It can also hang the
/// responses being streamed: the connection stays open and nothing more arrives on it.
#[derive(Clone)]
struct Flaky {
    inner: kube::Client,
    /// Cancelled when the server goes down; replaced by a fresh one when it comes back.
    up: Arc<Mutex<Option<CancellationToken>>>,
    /// Cancelled to hang the responses streaming now; replaced by a fresh one at once, so
    /// later requests are answered.
    live: Arc<Mutex<CancellationToken>>,
}

impl Flaky {
    fn new(cluster: &Cluster) -> Self {
        Self {
            inner: cluster.client(),
            up: Arc::new(Mutex::new(Some(CancellationToken::new()))),
            live: Arc::new(Mutex::new(CancellationToken::new())),
        }
    }

    /// Every response being streamed now (a watch) stops delivering, without an error or an
    /// end: a hung connection.
    fn hang(&self) {
        std::mem::take(&mut *self.live.lock().unwrap()).cancel();
    }

    fn down(&self) {
        if let Some(t) = self.up.lock().unwrap().take() {
            t.cancel();
        }
    }

    fn restore(&self) {
        *self.up.lock().unwrap() = Some(CancellationToken::new());
    }
}

/// A response body that fails once the server goes down, and delivers nothing more once hung.
struct Breakable {
    inner: kube::client::Body,
    gone: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    hung: CancellationToken,
}

impl http_body::Body for Breakable {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.gone.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err("connection reset by peer".into())));
        }
        if self.hung.is_cancelled() {
            // Nothing wakes it: a connection nobody answers on.
            return Poll::Pending;
        }
        Pin::new(&mut self.inner)
            .poll_frame(cx)
            .map_err(|e| Box::new(e) as BoxError)
    }
}

impl tower::Service<http::Request<kube::client::Body>> for Flaky {
    type Response = http::Response<Breakable>;
    type Error = BoxError;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let inner = self.inner.clone();
        let up = self.up.lock().unwrap().clone();
        let hung = self.live.lock().unwrap().clone();
        Box::pin(async move {
            let Some(up) = up else {
                return Err("connection refused".into());
            };
            let res = inner.send(req).await?;
            Ok(res.map(|body| Breakable {
                inner: body,
                gone: Box::pin(up.cancelled_owned()),
                hung,
            }))
        })
    }
}

fn cluster() -> Cluster {
    let c = Cluster::new(ClusterConfig {
        namespaces: ["default", NS].map(String::from).to_vec(),
        ..ClusterConfig::default()
    });
    c.create(
        &ResourceRef::pods(),
        Some(NS),
        json!({"metadata": {"name": "p"},
               "spec": {"containers": [{"name": "agent", "image": "i"}]}}),
    )
    .unwrap();
    set_phase(&c, "Running");
    c
}

fn set_phase(c: &Cluster, phase: &str) {
    c.patch_status(
        &ResourceRef::pods(),
        Some(NS),
        "p",
        PatchKind::Merge,
        &json!({"status": {"phase": phase}}),
    )
    .unwrap();
}

fn pod_ref() -> ObjectRef {
    ObjectRef {
        kind: "Pod".into(),
        namespace: Some(NS.into()),
        name: "p".into(),
    }
}

/// The `api_server_reachable` observations recorded so far, in order.
fn reachability(rec: &Recorder) -> Vec<bool> {
    reachability_at(rec).into_iter().map(|(_, r)| r).collect()
}

/// The `api_server_reachable` observations recorded so far, with when, in order.
fn reachability_at(rec: &Recorder) -> Vec<(Duration, bool)> {
    rec.snapshot()
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Observation { key, value, .. } if key == API_SERVER_REACHABLE_KEY => {
                value.as_bool().map(|r| (Duration::from_millis(e.at_ms), r))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_watcher_that_loses_the_api_server_records_a_gap_that_ends_when_it_relists() {
    let cluster = cluster();
    let flaky = Flaky::new(&cluster);
    let client = kube::Client::new(flaky.clone(), NS);
    let rec = Recorder::new();
    let task = tokio::spawn(pump(
        "Pod",
        pods_seen(client, NS),
        rec.clone(),
        pod_state,
        (),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = rec.last_state(&pod_ref()).expect("the pod was seen");
    assert_eq!(seen.phase.as_deref(), Some("Running"));
    assert!(
        reachability(&rec).is_empty(),
        "no gap while the server answers"
    );

    flaky.down();
    tokio::time::sleep(Duration::from_secs(5)).await;
    rec.mark("in the gap");
    // What happens meanwhile is not seen; it is once the server is back.
    set_phase(&cluster, "Failed");
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        reachability(&rec),
        [false],
        "the loss is on the timeline, once"
    );
    let during = rec.last_state(&pod_ref()).unwrap();
    assert!(
        during.unobserved() && during.phase.as_deref() == Some("Unknown"),
        "the last state seen is not assumed while the server is gone: {}",
        during.summary()
    );
    assert_eq!(during.uid, seen.uid, "still the same incarnation");

    flaky.restore();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        reachability(&rec),
        [false, true],
        "the gap ends on the relist"
    );
    let after = rec.last_state(&pod_ref()).unwrap();
    assert!(!after.unobserved(), "{}", after.summary());
    assert_eq!(after.phase.as_deref(), Some("Failed"));

    // A check that needs the pod's state inside the gap is not satisfied by the last one seen.
    let running_then = Check::eventually(
        "running in the gap",
        &["R1"],
        Predicate::phase(Selector::named("Pod", "p"), &["Running"]),
        Anchor::Marker {
            label: "in the gap".into(),
            nth: 1,
        },
        Duration::ZERO,
    );
    rec.record(Event::CheckPlan {
        checks: vec![running_then],
    });
    let o = &conformance_core::engine::recheck(&rec.snapshot()).outcomes[0];
    assert!(!o.passed, "judged on a stale state: {}", o.diagnosis());
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_watcher_whose_api_server_answers_records_no_gap() {
    let cluster = cluster();
    let rec = Recorder::new();
    let task = tokio::spawn(pump(
        "Pod",
        pods_seen(cluster.client(), NS),
        rec.clone(),
        pod_state,
        (),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    set_phase(&cluster, "Succeeded");
    // Past the server's watch timeout, so the watch is renewed at least once.
    tokio::time::sleep(Duration::from_secs(900)).await;
    assert!(reachability(&rec).is_empty());
    let last = rec.last_state(&pod_ref()).unwrap();
    assert_eq!(last.phase.as_deref(), Some("Succeeded"));
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn an_event_watcher_that_loses_the_api_server_records_the_gap_but_keeps_the_events() {
    let cluster = cluster();
    cluster
        .create(
            &ResourceRef::new("", "v1", "events"),
            Some(NS),
            json!({"metadata": {"name": "p.1"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": NS},
                   "reason": "Killing", "type": "Normal", "message": "Stopping container agent"}),
        )
        .unwrap();
    let flaky = Flaky::new(&cluster);
    let rec = Recorder::new();
    let task = spawn_events(kube::Client::new(flaky.clone(), NS), NS, rec.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    flaky.down();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(reachability(&rec), [false]);
    let event = ObjectRef {
        kind: "Event".into(),
        namespace: Some(NS.into()),
        name: "p.1".into(),
    };
    let e = rec.last_state(&event).unwrap();
    assert_eq!(
        e.phase.as_deref(),
        Some("Killing"),
        "what happened stays recorded: {}",
        e.summary()
    );
    flaky.restore();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(reachability(&rec), [false, true]);
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_watcher_whose_watch_hangs_records_a_gap_within_the_stall_deadline_and_relists() {
    let cluster = cluster();
    let flaky = Flaky::new(&cluster);
    let rec = Recorder::new();
    let task = tokio::spawn(pump(
        "Pod",
        pods_seen(kube::Client::new(flaky.clone(), NS), NS),
        rec.clone(),
        pod_state,
        (),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(rec.last_state(&pod_ref()).is_some(), "the pod was seen");
    // The watch's connection stays open but nothing more comes: not even the server's end of
    // the watch. What changes meanwhile is not seen.
    flaky.hang();
    let hung_at = rec.elapsed();
    set_phase(&cluster, "Failed");
    tokio::time::sleep(STALL_DEADLINE + Duration::from_secs(5)).await;
    let seen = reachability_at(&rec);
    assert_eq!(
        seen.iter().map(|(_, r)| *r).collect::<Vec<_>>(),
        [false, true],
        "the hang is a gap, ended by a relist"
    );
    assert!(
        seen[0].0 <= hung_at + STALL_DEADLINE,
        "noticed at {:?}, hung at {hung_at:?}: later than the stall deadline",
        seen[0].0
    );
    let states: Vec<String> = rec
        .snapshot()
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Object(o) => o.phase.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(
        states,
        ["Running", "Unknown", "Failed"],
        "the last state seen is not assumed while the watch hangs"
    );
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn the_pod_watcher_records_a_hang_as_a_gap_in_the_logs_too_and_reads_the_log_it_missed_afterwards()
 {
    let cluster = cluster();
    let flaky = Flaky::new(&cluster);
    let rec = Recorder::new();
    let client = kube::Client::new(flaky.clone(), NS);
    let task = tokio::spawn(pump(
        "Pod",
        pods_seen(client.clone(), NS),
        rec.clone(),
        pod_state,
        LogTap::new(Api::<Pod>::namespaced(client, NS)),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    flaky.hang();
    cluster.append_log(NS, "p", "agent", "Error: sandbox bootstrap failed");
    cluster
        .patch_status(
            &ResourceRef::pods(),
            Some(NS),
            "p",
            PatchKind::Merge,
            &json!({"status": {"phase": "Failed", "containerStatuses": [{"name": "agent",
                "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}}),
        )
        .unwrap();
    tokio::time::sleep(STALL_DEADLINE + Duration::from_secs(5)).await;
    let gaps: Vec<(Option<String>, bool)> = rec
        .snapshot()
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Observation {
                key,
                subject,
                value,
            } if key == API_SERVER_REACHABLE_KEY => Some((subject.clone(), value.as_bool()?)),
            _ => None,
        })
        .collect();
    let logs_subject = Some(LOGS_SUBJECT.to_string());
    let pod_subject = Some("Pod".to_string());
    assert_eq!(
        gaps,
        [
            (pod_subject.clone(), false),
            (logs_subject.clone(), false),
            (pod_subject, true),
            (logs_subject, true)
        ]
    );
    let logs: Vec<String> = rec
        .snapshot()
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Logs(l) => Some(l.lines.join("\n")),
            _ => None,
        })
        .collect();
    assert_eq!(logs, ["Error: sandbox bootstrap failed"]);
    task.abort();
}
