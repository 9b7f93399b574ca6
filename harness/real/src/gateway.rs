//! Finding the gateway workload and its pods, and waiting on them. The chart renders
//! `StatefulSet/openshell` by default and `Deployment/openshell` with an external database; the
//! certgen Job's pod carries the same selector labels, so pods are filtered by owner
//! (docs/upstream-facts.md F5.7).

use conformance_core::timeline::READY_CONDITION;
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};

use conformance_core::error::one_line;
use conformance_core::target::{TargetError, TargetResult};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkloadKind {
    StatefulSet,
    Deployment,
}

/// The gateway workload: kind, namespace, name and pod selector.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    /// `matchLabels` of the workload's selector.
    pub selector: BTreeMap<String, String>,
}

impl Workload {
    pub fn label(&self) -> String {
        format!("{:?}/{}/{}", self.kind, self.namespace, self.name)
    }
}

fn kerr(stage: &str, e: kube::Error) -> TargetError {
    TargetError::infra_from(stage, e)
}

/// Finds `StatefulSet/<name>`, else `Deployment/<name>` (the order upstream's e2e probes).
pub(crate) async fn resolve(
    client: &Client,
    namespace: &str,
    name: &str,
) -> TargetResult<Workload> {
    find_workload(client, namespace, name, "find the gateway")
        .await?
        .ok_or_else(|| {
            TargetError::infra(format!(
                "find the gateway: neither StatefulSet nor Deployment {namespace}/{name} exists (is OpenShell installed with fullnameOverride={name}?)"
            ))
        })
}

/// `StatefulSet/<name>`, else `Deployment/<name>`, else None.
pub(crate) async fn find_workload(
    client: &Client,
    namespace: &str,
    name: &str,
    stage: &str,
) -> TargetResult<Option<Workload>> {
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    if let Some(s) = sts.get_opt(name).await.map_err(|e| kerr(stage, e))? {
        return Ok(Some(Workload {
            kind: WorkloadKind::StatefulSet,
            namespace: namespace.into(),
            name: name.into(),
            selector: s
                .spec
                .and_then(|sp| sp.selector.match_labels)
                .unwrap_or_default(),
        }));
    }
    let dep: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    Ok(dep
        .get_opt(name)
        .await
        .map_err(|e| kerr(stage, e))?
        .map(|d| Workload {
            kind: WorkloadKind::Deployment,
            namespace: namespace.into(),
            name: name.into(),
            selector: d
                .spec
                .and_then(|sp| sp.selector.match_labels)
                .unwrap_or_default(),
        }))
}

/// (desired, ready) replicas of the workload.
pub(crate) async fn replicas(client: &Client, w: &Workload) -> TargetResult<(i32, i32)> {
    let stage = "read gateway replicas";
    Ok(match w.kind {
        WorkloadKind::StatefulSet => {
            let s = Api::<StatefulSet>::namespaced(client.clone(), &w.namespace)
                .get(&w.name)
                .await
                .map_err(|e| kerr(stage, e))?;
            (
                s.spec.and_then(|x| x.replicas).unwrap_or(1),
                s.status.and_then(|x| x.ready_replicas).unwrap_or(0),
            )
        }
        WorkloadKind::Deployment => {
            let d = Api::<Deployment>::namespaced(client.clone(), &w.namespace)
                .get(&w.name)
                .await
                .map_err(|e| kerr(stage, e))?;
            (
                d.spec.and_then(|x| x.replicas).unwrap_or(1),
                d.status.and_then(|x| x.ready_replicas).unwrap_or(0),
            )
        }
    })
}

/// Sets the replica count through the `scale` subresource.
pub(crate) async fn scale(client: &Client, w: &Workload, replicas: i32) -> TargetResult<()> {
    let patch = Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}}));
    let pp = PatchParams::default();
    let stage = format!("scale {} to {replicas}", w.label());
    match w.kind {
        WorkloadKind::StatefulSet => {
            Api::<StatefulSet>::namespaced(client.clone(), &w.namespace)
                .patch_scale(&w.name, &pp, &patch)
                .await
                .map_err(|e| kerr(&stage, e))?;
        }
        WorkloadKind::Deployment => {
            Api::<Deployment>::namespaced(client.clone(), &w.namespace)
                .patch_scale(&w.name, &pp, &patch)
                .await
                .map_err(|e| kerr(&stage, e))?;
        }
    }
    Ok(())
}

/// Whether a pod belongs to the workload (not the certgen Job's pod, which has the same labels).
fn owned_by_workload(p: &Pod) -> bool {
    p.owner_references()
        .iter()
        .any(|o| o.kind == "StatefulSet" || o.kind == "ReplicaSet")
}

pub(crate) fn pod_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().is_some_and(|s| {
            s.phase.as_deref() == Some("Running")
                && s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == READY_CONDITION && c.status == "True")
        })
}

/// The workload's pods (any state), sorted by name.
pub(crate) async fn pods(client: &Client, w: &Workload) -> TargetResult<Vec<Pod>> {
    let lp = ListParams::default().labels(&conformance_core::effect::label_selector(&w.selector));
    let mut v: Vec<Pod> = Api::<Pod>::namespaced(client.clone(), &w.namespace)
        .list(&lp)
        .await
        .map_err(|e| kerr("list gateway pods", e))?
        .items
        .into_iter()
        .filter(owned_by_workload)
        .collect();
    v.sort_by_key(|p| p.name_any());
    Ok(v)
}

/// A ready pod of workload `w`, waiting up to `within` for one. The wait wakes on a watch of
/// the workload's pods, so it ends the moment a pod turns ready: the observers' gRPC streams
/// reconnect through the port-forward while the gateway restarts, and polling for the pod added
/// up to its interval to the first phase seen after every restart.
pub(crate) async fn await_ready_pod(
    client: &Client,
    w: &Workload,
    stage: &str,
    within: Duration,
) -> TargetResult<String> {
    wait_until(stage, within, POLL, pods_wake(client, w), || async {
        let p = pods(client, w).await?;
        let ready = p.iter().find(|p| pod_ready(p)).map(|p| p.name_any());
        Ok((ready, format!("no ready gateway pod ({})", describe(&p))))
    })
    .await
}

fn describe(pods: &[Pod]) -> String {
    if pods.is_empty() {
        return "no pods".into();
    }
    pods.iter()
        .map(|p| {
            format!(
                "{} uid={} phase={}{}{}",
                p.name_any(),
                p.uid().unwrap_or_default(),
                p.status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_else(|| "?".into()),
                if pod_ready(p) { " ready" } else { "" },
                if p.metadata.deletion_timestamp.is_some() {
                    " terminating"
                } else {
                    ""
                }
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What a wait watches: when it changes, the wait probes again at once instead of waiting out
/// its interval. A gateway that turned ready was seen up to half a second late by polling,
/// which moved the end of every gateway fault (and the recovery times measured from it) by as
/// much.
pub(crate) struct Wake(futures::stream::BoxStream<'static, ()>);

impl Wake {
    /// Any change of the objects `api` and `cfg` select (the watcher lists first, then follows
    /// changes; it retries a broken watch with backoff, and the wait still polls meanwhile).
    pub(crate) fn on<K>(api: Api<K>, cfg: kube::runtime::watcher::Config) -> Self
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        Self(watcher(api, cfg).default_backoff().map(|_| ()).boxed())
    }

    /// Either's changes.
    pub(crate) fn or(self, other: Self) -> Self {
        Self(Box::pin(futures::stream::select(self.0, other.0)))
    }

    /// Until the next change, taking every change already there with it (one probe for a
    /// burst). A stream that ended never wakes again.
    pub(crate) async fn next(&mut self) {
        use futures::{FutureExt, StreamExt};
        if self.0.next().await.is_none() {
            self.0 = Box::pin(futures::stream::pending());
            return std::future::pending().await;
        }
        while let Some(Some(())) = self.0.next().now_or_never() {}
    }
}

/// Probes until `probe` returns Some, or fails at `deadline` with an error naming the stage,
/// the deadline and the last state seen. It probes again as soon as `wake` sees a change, and
/// otherwise polls: the first probes come quickly (after [`FIRST_POLL`], doubling) and the
/// interval grows to `every`, in case the watch is broken or misses what the probe reads.
pub(crate) async fn wait_until<T, F, Fut>(
    stage: &str,
    deadline: Duration,
    every: Duration,
    mut wake: Wake,
    mut probe: F,
) -> TargetResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = TargetResult<(Option<T>, String)>>,
{
    let end = tokio::time::Instant::now() + deadline;
    let mut interval = FIRST_POLL.min(every);
    let mut last;
    loop {
        match probe().await {
            Ok((Some(v), _)) => return Ok(v),
            Ok((None, seen)) => last = seen,
            Err(e) => last = format!("error: {}", one_line(&e)),
        }
        if tokio::time::Instant::now() >= end {
            return Err(TargetError::infra(format!(
                "{stage}: gave up after {}; last seen: {last}",
                humantime::format_duration(deadline)
            )));
        }
        tokio::select! {
            biased;
            () = wake.next() => {}
            () = tokio::time::sleep_until(end.min(tokio::time::Instant::now() + interval)) => {
                interval = (interval * 2).min(every);
            }
        }
    }
}

/// The longest interval between two probes of a wait on the cluster.
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// The first interval of a wait: 50, 100, 200, 400 ms, then [`POLL`] (or the wait's own
/// interval), so a wait's API load stays at two requests a second once it lasts.
const FIRST_POLL: Duration = Duration::from_millis(50);

/// Waits until the gateway has no pods left (a scale to zero took effect).
pub(crate) async fn wait_pods_gone(
    client: &Client,
    w: &Workload,
    deadline: Duration,
) -> TargetResult<()> {
    wait_workload_pods_gone(client, w, "gateway pods gone", deadline).await
}

/// Waits until workload `w` has no pods left; `stage` names the wait in its error.
pub(crate) async fn wait_workload_pods_gone(
    client: &Client,
    w: &Workload,
    stage: &str,
    deadline: Duration,
) -> TargetResult<()> {
    wait_until(stage, deadline, POLL, pods_wake(client, w), || async {
        let p = pods(client, w).await?;
        Ok((p.is_empty().then_some(()), describe(&p)))
    })
    .await
}

/// A watch of the one object named `name`.
pub(crate) fn named(name: &str) -> kube::runtime::watcher::Config {
    kube::runtime::watcher::Config::default().fields(&format!("metadata.name={name}"))
}

/// Changes of the workload's pods.
pub(crate) fn pods_wake(client: &Client, w: &Workload) -> Wake {
    Wake::on(
        Api::<Pod>::namespaced(client.clone(), &w.namespace),
        kube::runtime::watcher::Config::default()
            .labels(&conformance_core::effect::label_selector(&w.selector)),
    )
}

/// Changes of the workload's pods and of the workload itself (its ready count).
fn workload_wake(client: &Client, w: &Workload) -> Wake {
    let cfg = named(&w.name);
    let own = match w.kind {
        WorkloadKind::StatefulSet => Wake::on(
            Api::<StatefulSet>::namespaced(client.clone(), &w.namespace),
            cfg,
        ),
        WorkloadKind::Deployment => Wake::on(
            Api::<Deployment>::namespaced(client.clone(), &w.namespace),
            cfg,
        ),
    };
    pods_wake(client, w).or(own)
}

/// Waits until `want` replicas are ready, none terminating, and (if given) none of the pods
/// has one of the `old_uids` (a deleted pod was replaced, not merely still there).
pub(crate) async fn wait_ready(
    client: &Client,
    w: &Workload,
    want: i32,
    old_uids: &[String],
    deadline: Duration,
) -> TargetResult<()> {
    wait_until(
        &format!("{} ready ({want} replicas)", w.label()),
        deadline,
        POLL,
        workload_wake(client, w),
        || async {
            let p = pods(client, w).await?;
            let ready = p
                .iter()
                .filter(|p| pod_ready(p) && !old_uids.contains(&p.uid().unwrap_or_default()))
                .count() as i32;
            let (_, ready_replicas) = replicas(client, w).await?;
            let done = ready >= want && ready_replicas >= want;
            Ok((
                done.then_some(()),
                format!("readyReplicas={ready_replicas}; {}", describe(&p)),
            ))
        },
    )
    .await
}
