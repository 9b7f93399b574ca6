//! Watches: the event stream of one resource, filtered by namespace and selectors, starting
//! from a resourceVersion (replaying retained events), with 410 Expired for versions older than
//! the retained window, bookmarks on request and a server-side end at `timeoutSeconds`.
//! A watch with nothing to send waits on the cluster's change channel or a tokio timer, so
//! paused (virtual) time advances through quiet periods instead of spinning.

use crate::backend::Backend;
use crate::error::ApiError;
use crate::pointer::Pointer;
use crate::resources::ResourceDef;
use crate::store::{EventRecord, EventType, ListOptions, State};
use serde::Serialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Parameters of a watch request.
#[derive(Debug, Clone, Default)]
pub struct WatchParams {
    /// Unset or "0": start with synthetic ADDED events for the current objects.
    pub resource_version: Option<String>,
    pub allow_bookmarks: bool,
    /// `sendInitialEvents=true`: the synthetic ADDED events end with a bookmark annotated
    /// `k8s.io/initial-events-end: "true"`.
    pub send_initial_events: bool,
    pub timeout: Option<Duration>,
    pub list: ListOptions,
}

/// One watch event: `type` is ADDED, MODIFIED, DELETED, BOOKMARK or ERROR. The object is the
/// store's own where it can be (shared, not copied: watches fan every change out to each
/// watcher).
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    pub type_: String,
    pub object: Arc<Value>,
}

/// The wire form of a watch event, borrowed. `type` comes first, as the real API server writes
/// it: a client's adjacently tagged decoder (kube's `WatchEvent`) then decodes the object
/// straight into its type, where `object` first would make it buffer the whole object and
/// decode it twice.
#[derive(Serialize)]
struct WireEvent<'a> {
    #[serde(rename = "type")]
    type_: &'a str,
    object: &'a Value,
}

impl WatchEvent {
    fn new(type_: &str, object: Value) -> Self {
        Self {
            type_: type_.into(),
            object: Arc::new(object),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({"type": self.type_, "object": *self.object})
    }

    /// The event as one line of a watch response, serialised from the object in place.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(&WireEvent {
            object: &self.object,
            type_: &self.type_,
        })
        .unwrap_or_default();
        line.push(b'\n');
        line
    }
}

fn in_scope(def: &ResourceDef, ns: &Option<String>, obj: &Value) -> bool {
    !def.namespaced
        || ns
            .as_ref()
            .is_none_or(|n| obj.at("/metadata/namespace").and_then(Value::as_str) == Some(n))
}

/// What a selector-filtered watcher sees of one stored change.
fn translate(
    def: &ResourceDef,
    version: &str,
    ns: &Option<String>,
    opts: &ListOptions,
    e: &EventRecord,
) -> Option<WatchEvent> {
    let now = in_scope(def, ns, &e.object) && opts.matches(&e.object);
    let before = e
        .prev
        .as_ref()
        .is_some_and(|p| in_scope(def, ns, p) && opts.matches(p));
    let type_ = match (e.type_, before, now) {
        (EventType::Modified, true, true) => "MODIFIED",
        (EventType::Modified, false, true) => "ADDED",
        (EventType::Modified, true, false) => "DELETED",
        (EventType::Modified, false, false) => return None,
        (t, _, true) => t.as_str(),
        (_, _, false) => return None,
    };
    Some(WatchEvent {
        type_: type_.into(),
        object: State::present_shared(def, version, &e.object),
    })
}

fn bookmark(def: &ResourceDef, version: &str, rv: u64, initial_end: bool) -> WatchEvent {
    let mut md = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    if initial_end {
        md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    WatchEvent::new(
        "BOOKMARK",
        json!({"kind": def.kind, "apiVersion": def.api_version(version), "metadata": md}),
    )
}

fn expired(requested: u64, oldest: u64) -> WatchEvent {
    let e = ApiError::expired(format!("too old resource version: {requested} ({oldest})"));
    WatchEvent::new("ERROR", e.to_status())
}

/// Starts a watch; the stream ends at the timeout, on 410, or when the receiver is dropped.
pub(crate) fn watch_stream(
    cluster: Backend,
    def: std::sync::Arc<ResourceDef>,
    version: String,
    ns: Option<String>,
    p: WatchParams,
) -> ReceiverStream<WatchEvent> {
    let (tx, rx) = mpsc::channel::<WatchEvent>(64);
    let mut changes = cluster.subscribe();
    let timeout = p.timeout.unwrap_or(cluster.config().default_watch_timeout);
    let interval = cluster.config().bookmark_interval;
    let gr = def.gr();
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + timeout;
        let requested = p
            .resource_version
            .as_deref()
            .filter(|r| !r.is_empty() && *r != "0")
            .map(|r| r.parse::<u64>());
        // Initial state: synthetic ADDED events, or the replay position.
        let (mut pos, initial) = match requested {
            Some(Err(_)) => {
                let e = ApiError::bad_request(format!(
                    "invalid resource version: {}",
                    p.resource_version.unwrap_or_default()
                ));
                let _ = tx.send(WatchEvent::new("ERROR", e.to_status())).await;
                return;
            }
            Some(Ok(rv)) => (rv, vec![]),
            None => cluster.read(|s| {
                let objs = s.list(&def, &version, ns.as_deref(), &p.list);
                (
                    s.rv,
                    objs.into_iter()
                        .map(|o| WatchEvent {
                            type_: "ADDED".into(),
                            object: o,
                        })
                        .collect::<Vec<_>>(),
                )
            }),
        };
        for e in initial {
            if tx.send(e).await.is_err() {
                return;
            }
        }
        if requested.is_none()
            && p.send_initial_events
            && p.allow_bookmarks
            && tx.send(bookmark(&def, &version, pos, true)).await.is_err()
        {
            return;
        }
        let mut next_bookmark = tokio::time::Instant::now() + interval;
        loop {
            changes.borrow_and_update();
            let batch = cluster.read(|s| s.events_since(&gr, pos).map(|evs| (evs, s.rv)));
            let (events, head) = match batch {
                Ok(b) => b,
                Err(oldest) => {
                    let _ = tx.send(expired(pos, oldest)).await;
                    return;
                }
            };
            for e in events {
                pos = e.rv;
                if let Some(we) = translate(&def, &version, &ns, &p.list, &e)
                    && tx.send(we).await.is_err()
                {
                    return;
                }
            }
            // Every change up to `head` has been seen, so a bookmark may carry it.
            let safe = head.max(pos);
            // Biased: a fixed branch order keeps runs deterministic when several are ready.
            tokio::select! {
                biased;
                r = changes.changed() => if r.is_err() { return },
                _ = tx.closed() => return,
                _ = tokio::time::sleep_until(next_bookmark) => {
                    next_bookmark = tokio::time::Instant::now() + interval;
                    if p.allow_bookmarks {
                        pos = safe;
                        if tx.send(bookmark(&def, &version, pos, false)).await.is_err() { return }
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    if p.allow_bookmarks {
                        let _ = tx.send(bookmark(&def, &version, safe, false)).await;
                    }
                    return;
                }
            }
        }
    });
    ReceiverStream::new(rx)
}
