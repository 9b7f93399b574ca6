#![warn(unreachable_pub)]
//! Kubernetes observers: kube-runtime watchers that turn Sandbox resources, pods, PVCs and the
//! gateway workload into timeline object states. The emulated and the real targets share them,
//! so what the harness sees of a cluster is computed the same way on both.

mod logs;

pub use logs::timestamped_log;

use std::collections::BTreeSet;
use std::fmt::Debug;

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, WatchEvent, WatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use conformance_core::target::Observers;
use conformance_core::timeline::{
    API_SERVER_REACHABLE_KEY, ConditionState, ContainerState, ObjectRef, ObjectState, Recorder,
    Replicas,
};
use conformance_upstream::{SANDBOX_GROUP, SANDBOX_KIND, SANDBOX_PLURAL};

/// The `Sandbox` resource in a given version (`v1beta1` from Agent Sandbox v0.5.0, `v1alpha1`
/// before; docs/upstream-facts.md F4.1).
pub fn sandbox_resource(version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(SANDBOX_GROUP, version, SANDBOX_KIND),
        SANDBOX_PLURAL,
    )
}

/// What to watch.
#[derive(Clone, Debug)]
pub struct ObserveSpec {
    /// The namespace holding sandboxes and the gateway (shared workspace mode).
    pub namespace: String,
    pub sandbox_resource: ApiResource,
}

fn base<K: Resource>(kind: &str, o: &K) -> ObjectState {
    let meta = o.meta();
    let mut s = ObjectState::new(
        kind,
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or(""),
    );
    s.uid = meta.uid.clone();
    s.resource_version = meta.resource_version.clone();
    s.labels = meta.labels.clone().unwrap_or_default();
    s
}

fn container(c: &ContainerStatus) -> ContainerState {
    let (state, reason, exit_code) = match &c.state {
        Some(st) if st.terminated.is_some() => {
            let t = st.terminated.as_ref().expect("checked");
            ("terminated", t.reason.clone(), Some(t.exit_code))
        }
        Some(st) if st.running.is_some() => ("running", None, None),
        Some(st) => (
            "waiting",
            st.waiting.as_ref().and_then(|w| w.reason.clone()),
            None,
        ),
        None => ("waiting", None, None),
    };
    ContainerState {
        name: c.name.clone(),
        state: state.to_string(),
        reason,
        exit_code,
        restart_count: u32::try_from(c.restart_count).ok(),
    }
}

/// A pod as the observers read it: its metadata and status. The spec (containers, volumes,
/// environment) is skipped unparsed: the pod watcher sees every change of every pod, and building
/// typed specs that nothing reads was over half of what parsing a pod cost.
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct PodSeen {
    pub metadata: kube::api::ObjectMeta,
    #[serde(default)]
    pub status: Option<k8s_openapi::api::core::v1::PodStatus>,
}

/// The same resource as [`Pod`]: requests go to the same URLs.
impl Resource for PodSeen {
    type DynamicType = ();
    type Scope = <Pod as Resource>::Scope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        <Pod as Resource>::kind(dt)
    }

    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        <Pod as Resource>::group(dt)
    }

    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        <Pod as Resource>::version(dt)
    }

    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        <Pod as Resource>::plural(dt)
    }

    fn meta(&self) -> &kube::api::ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
        &mut self.metadata
    }
}

/// Pods in a namespace, read as [`PodSeen`].
fn pods_seen(client: Client, ns: &str) -> Api<PodSeen> {
    Api::namespaced(client, ns)
}

pub fn pod_state(p: &PodSeen) -> ObjectState {
    let mut s = base("Pod", p);
    if let Some(st) = &p.status {
        s.phase = st.phase.clone();
        s.conditions = st
            .conditions
            .iter()
            .flatten()
            .map(|c| ConditionState {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect();
        s.containers = st
            .init_container_statuses
            .iter()
            .flatten()
            .chain(st.container_statuses.iter().flatten())
            .map(container)
            .collect();
    }
    if p.meta().deletion_timestamp.is_some() && s.phase.as_deref() != Some("Failed") {
        // kubectl shows this as Terminating; checks need to tell it from Running.
        s.phase = Some("Terminating".into());
    }
    s
}

pub fn pvc_state(p: &PersistentVolumeClaim) -> ObjectState {
    let mut s = base("PersistentVolumeClaim", p);
    s.phase = p.status.as_ref().and_then(|st| st.phase.clone());
    s
}

/// Desired replicas default to 1 (the API default); ready ones to 0.
fn replicas(desired: Option<i32>, ready: Option<i32>) -> Replicas {
    Replicas {
        desired: desired.unwrap_or(1).max(0) as u32,
        ready: ready.unwrap_or(0).max(0) as u32,
    }
}

pub fn statefulset_state(o: &StatefulSet) -> ObjectState {
    let mut s = base("StatefulSet", o);
    s.replicas = Some(replicas(
        o.spec.as_ref().and_then(|sp| sp.replicas),
        o.status.as_ref().and_then(|st| st.ready_replicas),
    ));
    s
}

pub fn deployment_state(o: &Deployment) -> ObjectState {
    let mut s = base("Deployment", o);
    s.replicas = Some(replicas(
        o.spec.as_ref().and_then(|sp| sp.replicas),
        o.status.as_ref().and_then(|st| st.ready_replicas),
    ));
    s
}

/// An Agent Sandbox resource: its conditions (Ready, Suspended, Finished) verbatim
/// (docs/upstream-facts.md F4.2).
pub fn sandbox_state(o: &DynamicObject) -> ObjectState {
    let mut s = base("Sandbox", o);
    s.conditions = o
        .data
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .map(|c| {
            let text = |k: &str| c.get(k).and_then(|v| v.as_str()).map(str::to_string);
            ConditionState {
                type_: text("type").unwrap_or_default(),
                status: text("status").unwrap_or_default(),
                reason: text("reason"),
                message: text("message"),
            }
        })
        .collect();
    s
}

/// How long a watcher that lost the API server waits before it lists again; doubled after
/// every failed attempt up to [`RECONNECT_MAX`]. The end of a gap is seen at most this late.
const RECONNECT_FIRST: Duration = Duration::from_millis(500);
const RECONNECT_MAX: Duration = Duration::from_secs(4);

/// How long a watch asks the API server to keep it open (`timeoutSeconds`). The server ends it
/// then (with a bookmark, since the watch asks for them) and the watcher resumes from the last
/// resourceVersion, so a healthy watch delivers something at least this often even when nothing
/// changes.
const WATCH_TIMEOUT_SECS: u32 = 30;

/// A list or watch that delivers nothing (no object, no bookmark, not even its end) for this
/// long is hung: the connection is open but nothing answers on it. The watcher then records the
/// gap, as for a broken connection, and lists afresh. Without it a hung connection would go
/// unnoticed until the client's own idle timeout (kube's watcher: 290 s plus 5 s, after which
/// it resumes silently, with no gap on the timeline).
pub const STALL_DEADLINE: Duration = Duration::from_secs(WATCH_TIMEOUT_SECS as u64 + 5);

/// Whether a request error means the API server could not be reached (the connection failed or
/// broke, or a proxy in front of it answered that it is unavailable), as opposed to the server
/// answering something the watcher handles itself (a 410 Gone it relists after, a 404 of a
/// resource not installed yet).
fn api_unreachable(e: &kube::Error) -> bool {
    match e {
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        kube::Error::Api(s) => matches!(s.code, 502..=504),
        _ => false,
    }
}

/// What a [`Follow`] saw next.
enum Seen<K> {
    /// A complete listing: every object that exists now. `after_gap`: the first one since the
    /// API server was lost, which ends the gap.
    Listed {
        items: Vec<K>,
        after_gap: bool,
    },
    Apply(K),
    Delete(K),
    /// The API server was lost (reported once per gap): the connection failed or broke, or a
    /// request delivered nothing within [`STALL_DEADLINE`].
    Lost(String),
}

/// A list-then-watch of one kind of object that notices a hung connection. Unlike kube's
/// watcher, it reports losing the API server (once per gap, [`Seen::Lost`]) and every relist
/// ([`Seen::Listed`]), so the caller can record the gap and end it. Every request has a
/// deadline: a watch asks for bookmarks and a short server-side timeout, and one that
/// delivers nothing within [`STALL_DEADLINE`] is dropped and the kind listed afresh.
struct Follow<K> {
    api: Api<K>,
    /// Where the watch resumes; None: list first.
    rv: Option<String>,
    stream: Option<BoxStream<'static, kube::Result<WatchEvent<K>>>>,
    lost: bool,
    /// Wait `retry` before the next request (after a failure).
    wait: bool,
    retry: Duration,
}

impl<K> Follow<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    fn new(api: Api<K>) -> Self {
        Self {
            api,
            rv: None,
            stream: None,
            lost: false,
            wait: false,
            retry: RECONNECT_FIRST,
        }
    }

    /// Starts over with a fresh list, as after losing the API server (a request the caller made
    /// on the side failed that way); reports the loss like [`Follow::next`] would.
    fn lose(&mut self, why: String) -> Option<Seen<K>> {
        self.failed(true, why)
    }

    /// After a failed request: forget the position, so the next attempt lists, and back off;
    /// the loss, if it is one and the first of its gap.
    fn failed(&mut self, unreachable: bool, why: String) -> Option<Seen<K>> {
        self.stream = None;
        self.rv = None;
        self.wait = true;
        if unreachable && !self.lost {
            self.lost = true;
            return Some(Seen::Lost(why));
        }
        tracing::debug!(error = %why, "list or watch failed; trying again");
        None
    }

    async fn next(&mut self) -> Seen<K> {
        loop {
            if std::mem::take(&mut self.wait) {
                tokio::time::sleep(self.retry).await;
                self.retry = (self.retry * 2).min(RECONNECT_MAX);
            }
            let Some(rv) = self.rv.clone() else {
                let listed = tokio::time::timeout(
                    STALL_DEADLINE,
                    self.api.list(&kube::api::ListParams::default()),
                )
                .await;
                match listed {
                    Ok(Ok(list)) => {
                        match list.metadata.resource_version.filter(|v| !v.is_empty()) {
                            Some(rv) => {
                                self.rv = Some(rv);
                                self.retry = RECONNECT_FIRST;
                                let after_gap = std::mem::take(&mut self.lost);
                                return Seen::Listed {
                                    items: list.items,
                                    after_gap,
                                };
                            }
                            None => {
                                self.failed(false, "a list without a resourceVersion".into());
                            }
                        }
                    }
                    Ok(Err(e)) => {
                        if let Some(lost) = self.failed(api_unreachable(&e), e.to_string()) {
                            return lost;
                        }
                    }
                    Err(_) => {
                        let why = format!("a list got no answer within {STALL_DEADLINE:?}");
                        if let Some(lost) = self.failed(true, why) {
                            return lost;
                        }
                    }
                }
                continue;
            };
            let Some(stream) = self.stream.as_mut() else {
                let params = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
                match tokio::time::timeout(STALL_DEADLINE, self.api.watch(&params, &rv)).await {
                    Ok(Ok(s)) => self.stream = Some(s.boxed()),
                    Ok(Err(e)) => {
                        if let Some(lost) = self.failed(api_unreachable(&e), e.to_string()) {
                            return lost;
                        }
                    }
                    Err(_) => {
                        let why = format!("a watch got no answer within {STALL_DEADLINE:?}");
                        if let Some(lost) = self.failed(true, why) {
                            return lost;
                        }
                    }
                }
                continue;
            };
            match tokio::time::timeout(STALL_DEADLINE, stream.next()).await {
                Ok(Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)))) => {
                    self.rv = o.resource_version().or(self.rv.take());
                    return Seen::Apply(o);
                }
                Ok(Some(Ok(WatchEvent::Deleted(o)))) => {
                    self.rv = o.resource_version().or(self.rv.take());
                    return Seen::Delete(o);
                }
                Ok(Some(Ok(WatchEvent::Bookmark(b)))) => {
                    self.rv = Some(b.metadata.resource_version);
                }
                // 410 Gone: the position is too old; list afresh. The server answered, so
                // this is no gap.
                Ok(Some(Ok(WatchEvent::Error(e)))) => {
                    self.failed(false, e.to_string());
                    if e.code == 410 {
                        self.wait = false;
                    }
                }
                Ok(Some(Err(e))) => {
                    if let Some(lost) = self.failed(api_unreachable(&e), e.to_string()) {
                        return lost;
                    }
                }
                // The server ended the watch at its timeout: resume where it stopped.
                Ok(None) => self.stream = None,
                Err(_) => {
                    let why = format!("the watch delivered nothing for {STALL_DEADLINE:?}");
                    if let Some(lost) = self.failed(true, why) {
                        return lost;
                    }
                }
            }
        }
    }
}

/// More that a watcher does with the objects it sees, on the same watch: the pod watcher reads
/// the logs of containers that ended ([`LogTap`]), so pods are watched once.
trait Tap<K>: Send {
    /// After a listing (every object) or a change (one). An error means the API server could
    /// not be reached: the watcher then loses it ([`Seen::Lost`]) and lists afresh, which brings
    /// the objects back here.
    fn seen(
        &mut self,
        rec: &Recorder,
        objects: &[K],
    ) -> impl std::future::Future<Output = Result<(), String>> + Send;
    /// The watcher lost the API server (once per gap).
    fn lost(&mut self, rec: &Recorder);
    /// The watcher's relist after a gap is complete.
    fn regained(&mut self, rec: &Recorder);
}

/// Nothing more.
impl<K: Sync> Tap<K> for () {
    async fn seen(&mut self, _: &Recorder, _: &[K]) -> Result<(), String> {
        Ok(())
    }
    fn lost(&mut self, _: &Recorder) {}
    fn regained(&mut self, _: &Recorder) {}
}

/// Feeds one watch on objects of `kind` into the recorder. A relist does not tell what
/// vanished meanwhile, so the objects missing from it are recorded as deleted.
///
/// When the API server cannot be reached (a broken connection, or one that delivers nothing
/// within [`STALL_DEADLINE`]), nothing more is known of these objects: the watcher records that
/// (observation [`API_SERVER_REACHABLE_KEY`] `false`) and an unknown state of every object it
/// knew ([`ObjectState::api_unreachable`]), so no check goes on judging the last states seen.
/// It then lists afresh until the server answers, and once the relist is complete records
/// `true`: the relisted states end the gap.
async fn pump<K, T>(
    kind: &str,
    api: Api<K>,
    rec: Recorder,
    to_state: impl Fn(&K) -> ObjectState,
    mut tap: T,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    T: Tap<K>,
{
    let mut known: BTreeSet<ObjectRef> = BTreeSet::new();
    let mut follow = Follow::new(api);
    let lost = |known: &BTreeSet<ObjectRef>, tap: &mut T, why: String| {
        tracing::debug!(kind, error = %why, "the API server cannot be reached; listing again once it answers");
        reachable(&rec, kind, false);
        tap.lost(&rec);
        // An Event is a record of something that happened, not a state that can go
        // stale; the relist brings the ones missed.
        for r in known.iter().filter(|_| kind != EVENT_KIND) {
            if let Some(last) = rec.last_state(r)
                && !last.deleted
            {
                rec.observe(last.api_unreachable());
            }
        }
    };
    loop {
        let tapped = match follow.next().await {
            Seen::Listed { items, after_gap } => {
                let mut relisted = BTreeSet::new();
                for o in &items {
                    let s = to_state(o);
                    relisted.insert(s.object_ref());
                    rec.observe(s);
                }
                for gone in known.difference(&relisted) {
                    if let Some(mut last) = rec.last_state(gone) {
                        last.deleted = true;
                        rec.observe(last);
                    }
                }
                known = relisted;
                if after_gap {
                    reachable(&rec, kind, true);
                    tap.regained(&rec);
                }
                tap.seen(&rec, &items).await
            }
            Seen::Apply(o) => {
                let s = to_state(&o);
                known.insert(s.object_ref());
                rec.observe(s);
                tap.seen(&rec, std::slice::from_ref(&o)).await
            }
            Seen::Delete(o) => {
                let mut s = to_state(&o);
                known.remove(&s.object_ref());
                s.deleted = true;
                rec.observe(s);
                Ok(())
            }
            Seen::Lost(why) => {
                lost(&known, &mut tap, why);
                Ok(())
            }
        };
        if let Err(why) = tapped
            && let Some(Seen::Lost(why)) = follow.lose(why)
        {
            lost(&known, &mut tap, why);
        }
    }
}

fn reachable(rec: &Recorder, kind: &str, reachable: bool) {
    rec.record_watched(conformance_core::timeline::Event::Observation {
        key: API_SERVER_REACHABLE_KEY.into(),
        subject: Some(kind.to_string()),
        value: serde_json::Value::Bool(reachable),
    });
}

/// Starts watchers on Sandbox resources, pods, PVCs, StatefulSets and Deployments of the
/// namespace. They stop when the returned [`Observers`] is dropped.
pub fn spawn(client: Client, spec: &ObserveSpec) -> impl FnOnce(Recorder) -> Observers {
    let spec = spec.clone();
    move |rec: Recorder| {
        let ns = spec.namespace.as_str();
        let mut obs = Observers::default();
        obs.push(tokio::spawn(pump(
            "Pod",
            pods_seen(client.clone(), ns),
            rec.clone(),
            pod_state,
            LogTap::new(Api::<Pod>::namespaced(client.clone(), ns)),
        )));
        obs.push(tokio::spawn(pump(
            "PersistentVolumeClaim",
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns),
            rec.clone(),
            pvc_state,
            (),
        )));
        obs.push(tokio::spawn(pump(
            "StatefulSet",
            Api::<StatefulSet>::namespaced(client.clone(), ns),
            rec.clone(),
            statefulset_state,
            (),
        )));
        obs.push(tokio::spawn(pump(
            "Deployment",
            Api::<Deployment>::namespaced(client.clone(), ns),
            rec.clone(),
            deployment_state,
            (),
        )));
        obs.push(tokio::spawn(pump(
            "Sandbox",
            Api::<DynamicObject>::namespaced_with(client, ns, &spec.sandbox_resource),
            rec,
            sandbox_state,
            (),
        )));
        obs
    }
}

/// Lines kept from a container's log when it terminates.
const CAPTURED_LOG_LINES: i64 = 200;

/// The subject of the [`API_SERVER_REACHABLE_KEY`] observations of the container-log watcher.
pub const LOGS_SUBJECT: &str = "Pod/log";

/// Records a container's log on the timeline when the container terminates: that is when its
/// last words (a bootstrap giving up, a supervisor exiting) matter, and a pod deleted later
/// takes its logs with it. It taps the pod watcher (one watch on pods, not two) and records the
/// pod watcher's gaps again under its own subject ([`LOGS_SUBJECT`]), since a log can be
/// missed in them; a log it could not read in a gap is read once the API server answers again
/// and the relist brings the pod back, if the pod is still there.
struct LogTap {
    api: Api<Pod>,
    /// (pod uid, container, exit code, restarts) of the terminations already read.
    read: BTreeSet<(String, String, i32, u32)>,
}

impl LogTap {
    fn new(api: Api<Pod>) -> Self {
        Self {
            api,
            read: BTreeSet::new(),
        }
    }
}

impl Tap<PodSeen> for LogTap {
    async fn seen(&mut self, rec: &Recorder, pods: &[PodSeen]) -> Result<(), String> {
        for pod in pods {
            let (Some(name), Some(uid)) = (pod.metadata.name.as_ref(), pod.metadata.uid.as_ref())
            else {
                continue;
            };
            let statuses = pod
                .status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten());
            for c in statuses {
                let Some(t) = c.state.as_ref().and_then(|s| s.terminated.as_ref()) else {
                    continue;
                };
                let restarts = u32::try_from(c.restart_count).unwrap_or(0);
                let key = (uid.clone(), c.name.clone(), t.exit_code, restarts);
                if self.read.contains(&key) {
                    continue;
                }
                let params = kube::api::LogParams {
                    container: Some(c.name.clone()),
                    tail_lines: Some(CAPTURED_LOG_LINES),
                    ..Default::default()
                };
                let text = match tokio::time::timeout(STALL_DEADLINE, self.api.logs(name, &params))
                    .await
                {
                    Ok(Ok(text)) => text,
                    Ok(Err(e)) if !api_unreachable(&e) => {
                        tracing::debug!(pod = %name, error = %e, "cannot read a container log");
                        self.read.insert(key);
                        continue;
                    }
                    // Not read: the relist after the gap brings the pod back here.
                    Ok(Err(e)) => return Err(e.to_string()),
                    Err(_) => return Err(format!("a log got no answer within {STALL_DEADLINE:?}")),
                };
                self.read.insert(key);
                if !text.trim().is_empty() {
                    rec.record_watched(conformance_core::timeline::Event::Logs(
                        conformance_core::timeline::LogExcerpt {
                            pod: name.clone(),
                            container: c.name.clone(),
                            previous: false,
                            lines: text.lines().map(str::to_string).collect(),
                        },
                    ));
                }
            }
        }
        Ok(())
    }

    fn lost(&mut self, rec: &Recorder) {
        reachable(rec, LOGS_SUBJECT, false);
    }

    fn regained(&mut self, rec: &Recorder) {
        reachable(rec, LOGS_SUBJECT, true);
    }
}

const EVENT_KIND: &str = "Event";

/// A Kubernetes Event as a timeline object: kind `Event`, the reason as phase, and one
/// condition carrying the type (Normal/Warning), reason and message; the involved object and
/// the count go to labels. Only the real target watches events (the emulated cluster writes
/// none), so this is a separate watcher.
pub fn event_state(e: &k8s_openapi::api::core::v1::Event) -> ObjectState {
    let mut s = base(EVENT_KIND, e);
    s.phase = e.reason.clone();
    s.conditions.push(ConditionState {
        type_: e.type_.clone().unwrap_or_else(|| "Normal".into()),
        status: "True".into(),
        reason: e.reason.clone(),
        message: e.message.clone(),
    });
    let io = &e.involved_object;
    s.labels.insert(
        "involved".into(),
        format!(
            "{}/{}",
            io.kind.clone().unwrap_or_default(),
            io.name.clone().unwrap_or_default()
        ),
    );
    if let Some(c) = e.count {
        s.labels.insert("count".into(), c.to_string());
    }
    s
}

/// Starts a watcher on the namespace's Events; it stops when the returned task is aborted.
pub fn spawn_events(client: Client, namespace: &str, rec: Recorder) -> tokio::task::JoinHandle<()> {
    tokio::spawn(pump(
        EVENT_KIND,
        Api::<k8s_openapi::api::core::v1::Event>::namespaced(client, namespace),
        rec,
        event_state,
        (),
    ))
}

/// Lists one kind of object in a namespace as timeline states.
async fn list_states<K>(
    api: Api<K>,
    to_state: impl Fn(&K) -> ObjectState,
) -> kube::Result<Vec<ObjectState>>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let items = api.list(&kube::api::ListParams::default()).await?.items;
    Ok(items.iter().map(to_state).collect())
}

/// A one-shot listing of the same objects, for the end-of-case snapshot.
pub async fn snapshot(client: Client, spec: &ObserveSpec) -> kube::Result<Vec<ObjectState>> {
    let ns = spec.namespace.as_str();
    let mut out: Vec<ObjectState> = Vec::new();
    out.extend(list_states(pods_seen(client.clone(), ns), pod_state).await?);
    out.extend(
        list_states(
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns),
            pvc_state,
        )
        .await?,
    );
    out.extend(
        list_states(
            Api::<StatefulSet>::namespaced(client.clone(), ns),
            statefulset_state,
        )
        .await?,
    );
    out.extend(
        list_states(
            Api::<Deployment>::namespaced(client.clone(), ns),
            deployment_state,
        )
        .await?,
    );
    out.extend(
        list_states(
            Api::<DynamicObject>::namespaced_with(client, ns, &spec.sandbox_resource),
            sandbox_state,
        )
        .await?,
    );
    out.sort_by_key(|s| s.object_ref());
    Ok(out)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod mapping_tests {
    use super::*;

    fn pod(json: serde_json::Value) -> PodSeen {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_failed_bootstrap_pod_maps_to_terminated_exit_1_with_pod_failed() {
        // The failed bootstrap pod of docs/upstream-facts.md F10.2.
        let p = pod(serde_json::json!({
            "metadata": {"name": "default--demo", "namespace": "openshell", "uid": "u1",
                          "resourceVersion": "7", "labels": {"agents.x-k8s.io/sandbox-name-hash": "523e82a3"}},
            "status": {"phase": "Failed",
                "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed"}],
                "initContainerStatuses": [{"name": "workspace-init", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
                "containerStatuses": [{"name": "agent", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                    "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}
        }));
        let s = pod_state(&p);
        assert_eq!(
            s.summary(),
            "Pod/openshell/default--demo uid=u1 phase=Failed Ready=False(PodFailed) workspace-init=terminated(0) agent=terminated(1)"
        );
        assert_eq!(s.labels["agents.x-k8s.io/sandbox-name-hash"], "523e82a3");
    }

    #[test]
    fn a_pod_being_deleted_is_terminating() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "openshell-0", "namespace": "openshell", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Running"}
        }));
        assert_eq!(pod_state(&p).phase.as_deref(), Some("Terminating"));
    }

    #[test]
    fn a_sandbox_resource_keeps_its_conditions_in_order() {
        let o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
            "metadata": {"name": "default--demo", "namespace": "openshell"},
            "status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "DependenciesNotReady", "message": "Pod exists with phase: Failed"},
                {"type": "Finished", "status": "True", "reason": "PodFailed", "message": "Pod failed"}]}
        }))
        .unwrap();
        let s = sandbox_state(&o);
        assert_eq!(
            s.summary(),
            "Sandbox/openshell/default--demo Ready=False(DependenciesNotReady) Finished=True(PodFailed)"
        );
    }

    #[test]
    fn an_event_keeps_its_reason_type_message_and_involved_object() {
        let e: k8s_openapi::api::core::v1::Event = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "default--demo.1", "namespace": "openshell"},
            "involvedObject": {"kind": "Pod", "name": "default--demo"},
            "reason": "BackOff", "type": "Warning", "message": "Back-off pulling image", "count": 3
        }))
        .unwrap();
        let s = event_state(&e);
        assert_eq!(
            s.summary(),
            "Event/openshell/default--demo.1 phase=BackOff Warning=True(BackOff)"
        );
        assert_eq!(s.labels["involved"], "Pod/default--demo");
        assert_eq!(s.labels["count"], "3");
    }

    #[test]
    fn a_gateway_scaled_to_zero_shows_zero_of_zero_replicas() {
        let o: StatefulSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "openshell", "namespace": "openshell"},
            "spec": {"replicas": 0, "serviceName": "openshell", "selector": {}, "template": {}},
            "status": {"replicas": 1, "readyReplicas": 1}
        }))
        .unwrap();
        assert_eq!(
            statefulset_state(&o).replicas,
            Some(Replicas {
                desired: 0,
                ready: 1
            })
        );
    }
}
