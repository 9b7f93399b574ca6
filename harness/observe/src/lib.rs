#![warn(unreachable_pub)]
//! Kubernetes observers: kube-runtime watchers that turn Sandbox resources, pods, PVCs and the
//! gateway workload into timeline object states. The emulated and the real targets share them,
//! so what the harness sees of a cluster is computed the same way on both.

use std::collections::BTreeSet;
use std::fmt::Debug;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use conformance_core::target::Observers;
use conformance_core::timeline::{
    API_SERVER_REACHABLE_KEY, ConditionState, ContainerState, ObjectRef, ObjectState, Recorder,
    Replicas,
};

/// The Agent Sandbox API group (docs/upstream-facts.md F4.1).
pub const SANDBOX_GROUP: &str = "agents.x-k8s.io";

/// The `Sandbox` resource in a given version (`v1beta1` from Agent Sandbox v0.5.0, `v1alpha1`
/// before; docs/upstream-facts.md F4.1).
pub fn sandbox_resource(version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(SANDBOX_GROUP, version, "Sandbox"),
        "sandboxes",
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
        restart_count: u32::try_from(c.restart_count).unwrap_or(0),
    }
}

pub fn pod_state(p: &Pod) -> ObjectState {
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
const RECONNECT_FIRST: std::time::Duration = std::time::Duration::from_millis(500);
const RECONNECT_MAX: std::time::Duration = std::time::Duration::from_secs(4);

/// Whether a watch error means the API server could not be reached (the connection failed or
/// broke, or a proxy in front of it answered that it is unavailable), as opposed to the server
/// answering something the watcher handles itself (a 410 Gone it relists after, a 404 of a
/// resource not installed yet).
fn api_unreachable(e: &watcher::Error) -> bool {
    let client = match e {
        watcher::Error::InitialListFailed(c)
        | watcher::Error::WatchStartFailed(c)
        | watcher::Error::WatchFailed(c) => c,
        watcher::Error::WatchError(_) | watcher::Error::NoResourceVersion => return false,
    };
    match client {
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        kube::Error::Api(s) => matches!(s.code, 502..=504),
        _ => false,
    }
}

/// Feeds one watcher on objects of `kind` into the recorder. A watcher that reconnects relists
/// without telling what vanished meanwhile, so the objects missing from a relist are recorded
/// as deleted.
///
/// When the API server cannot be reached, nothing more is known of these objects: the watcher
/// records that (observation [`API_SERVER_REACHABLE_KEY`] `false`) and an unknown state of every
/// object it knew ([`ObjectState::api_unreachable`]), so no check goes on judging the last
/// states seen. It then lists afresh until the server answers, and once the relist is complete
/// records `true`: the relisted states end the gap. (kube's own retry resumes a broken watch
/// from its last resourceVersion and reports nothing when nothing changed, which would leave
/// the end of the gap unseen.)
async fn pump<K>(kind: &str, api: Api<K>, rec: Recorder, to_state: impl Fn(&K) -> ObjectState)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut known: BTreeSet<ObjectRef> = BTreeSet::new();
    let mut lost = false;
    let mut retry = RECONNECT_FIRST;
    loop {
        let mut relisted: Option<BTreeSet<ObjectRef>> = None;
        let mut stream = watcher::watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(WatchEvent::Init) => relisted = Some(BTreeSet::new()),
                Ok(WatchEvent::InitApply(o)) => {
                    let s = to_state(&o);
                    if let Some(r) = relisted.as_mut() {
                        r.insert(s.object_ref());
                    }
                    known.insert(s.object_ref());
                    rec.observe(s);
                }
                Ok(WatchEvent::InitDone) => {
                    if let Some(r) = relisted.take() {
                        for gone in known.difference(&r) {
                            if let Some(mut last) = rec.last_state(gone) {
                                last.deleted = true;
                                rec.observe(last);
                            }
                        }
                        known = r;
                    }
                    if lost {
                        lost = false;
                        retry = RECONNECT_FIRST;
                        reachable(&rec, kind, true);
                    }
                }
                Ok(WatchEvent::Apply(o)) => {
                    let s = to_state(&o);
                    known.insert(s.object_ref());
                    rec.observe(s);
                }
                Ok(WatchEvent::Delete(o)) => {
                    let mut s = to_state(&o);
                    known.remove(&s.object_ref());
                    s.deleted = true;
                    rec.observe(s);
                }
                Err(e) if api_unreachable(&e) => {
                    tracing::debug!(kind, error = %e, "the API server cannot be reached; listing again once it answers");
                    if !lost {
                        lost = true;
                        reachable(&rec, kind, false);
                        // An Event is a record of something that happened, not a state that
                        // can go stale; the relist brings the ones missed.
                        for r in known.iter().filter(|_| kind != EVENT_KIND) {
                            if let Some(last) = rec.last_state(r)
                                && !last.deleted
                            {
                                rec.observe(last.api_unreachable());
                            }
                        }
                    }
                    break;
                }
                Err(e) => {
                    tracing::debug!(kind, error = %e, "watch error; the watcher retries with backoff")
                }
            }
        }
        if !lost {
            // The stream only ends when the watcher is dropped; nothing left to do.
            return;
        }
        drop(stream);
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RECONNECT_MAX);
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
            Api::<Pod>::namespaced(client.clone(), ns),
            rec.clone(),
            pod_state,
        )));
        obs.push(tokio::spawn(pump(
            "PersistentVolumeClaim",
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns),
            rec.clone(),
            pvc_state,
        )));
        obs.push(tokio::spawn(pump(
            "StatefulSet",
            Api::<StatefulSet>::namespaced(client.clone(), ns),
            rec.clone(),
            statefulset_state,
        )));
        obs.push(tokio::spawn(pump(
            "Deployment",
            Api::<Deployment>::namespaced(client.clone(), ns),
            rec.clone(),
            deployment_state,
        )));
        obs.push(tokio::spawn(capture_logs(
            Api::<Pod>::namespaced(client.clone(), ns),
            rec.clone(),
        )));
        obs.push(tokio::spawn(pump(
            "Sandbox",
            Api::<DynamicObject>::namespaced_with(client, ns, &spec.sandbox_resource),
            rec,
            sandbox_state,
        )));
        obs
    }
}

/// Lines kept from a container's log when it terminates.
const CAPTURED_LOG_LINES: i64 = 200;

/// Records a container's log on the timeline when the container terminates: that is when its
/// last words (a bootstrap giving up, a supervisor exiting) matter, and a pod deleted later
/// takes its logs with it.
async fn capture_logs(api: Api<Pod>, rec: Recorder) {
    let mut seen: BTreeSet<(String, String, i32, u32)> = BTreeSet::new();
    let mut stream = watcher::watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(ev) = stream.next().await {
        let pod = match ev {
            Ok(WatchEvent::Apply(p) | WatchEvent::InitApply(p)) => p,
            _ => continue,
        };
        let (Some(name), Some(uid)) = (pod.metadata.name.clone(), pod.metadata.uid.clone()) else {
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
            if !seen.insert((uid.clone(), c.name.clone(), t.exit_code, restarts)) {
                continue;
            }
            let params = kube::api::LogParams {
                container: Some(c.name.clone()),
                tail_lines: Some(CAPTURED_LOG_LINES),
                ..Default::default()
            };
            if let Ok(text) = api.logs(&name, &params).await
                && !text.trim().is_empty()
            {
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
    out.extend(list_states(Api::<Pod>::namespaced(client.clone(), ns), pod_state).await?);
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

    fn pod(json: serde_json::Value) -> Pod {
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
