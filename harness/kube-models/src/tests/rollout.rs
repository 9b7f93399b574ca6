//! StatefulSet rolling updates as `kubectl rollout status` follows them, in paused time.

use std::time::Duration;

use crate::kube::{KubeConfig, KubeModels};
use crate::network::{Network, is_ready};
use crate::program::Programs;
use kube_emulator::{Cluster, ClusterConfig, ListOptions, PatchKind, ResourceRef};
use serde_json::{Value, json};
use tokio::time::Instant;

fn sts_ref() -> ResourceRef {
    ResourceRef::new("apps", "v1", "statefulsets")
}

/// Waits (virtual time, at most an hour) until `pred` holds for the cluster.
async fn until(cluster: &Cluster, what: &str, pred: impl Fn(&Cluster) -> bool) {
    let mut changes = cluster.subscribe();
    let deadline = Instant::now() + Duration::from_secs(3600);
    while !pred(cluster) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            tokio::time::timeout(left, changes.changed()).await.is_ok(),
            "never {what} within an hour"
        );
    }
}

fn pods(cluster: &Cluster) -> Vec<Value> {
    cluster
        .list(
            &ResourceRef::pods(),
            Some("default"),
            &ListOptions::default(),
        )
        .map(|(items, _)| items)
        .unwrap_or_default()
}

fn revision_of(cluster: &Cluster, pod: &str) -> Option<String> {
    cluster
        .get(&ResourceRef::pods(), Some("default"), pod)
        .ok()
        .and_then(|p| {
            p.pointer("/metadata/labels/controller-revision-hash")
                .and_then(Value::as_str)
                .map(String::from)
        })
}

fn status(cluster: &Cluster) -> Value {
    cluster
        .get(&sts_ref(), Some("default"), "web")
        .unwrap()
        .get("status")
        .cloned()
        .unwrap_or(json!({}))
}

#[tokio::test(start_paused = true)]
async fn a_template_change_rolls_the_pods_above_the_partition_then_all_of_them_once_it_is_zero() {
    let cluster = Cluster::new(ClusterConfig::default());
    let _models = KubeModels::start(
        &cluster,
        &Network::new(),
        Programs::new(),
        KubeConfig::default(),
    );
    cluster
        .create(
            &sts_ref(),
            Some("default"),
            json!({"metadata": {"name": "web"}, "spec": {"replicas": 3, "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}}}}),
        )
        .unwrap();
    let sts = cluster.get(&sts_ref(), Some("default"), "web").unwrap();
    assert_eq!(sts["spec"]["updateStrategy"]["type"], "RollingUpdate");
    until(&cluster, "3 pods ready", |c| {
        pods(c).iter().filter(|p| is_ready(p)).count() == 3
    })
    .await;
    let old = revision_of(&cluster, "web-0").unwrap();
    // Only ordinals 1 and 2 may be updated.
    cluster
        .patch(
            &sts_ref(),
            Some("default"),
            "web",
            PatchKind::Merge,
            &json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 1}},
                "template": {"metadata": {"annotations": {"restartedAt": "now"}}}}}),
        )
        .unwrap();
    until(&cluster, "web-2 then web-1 updated and ready", |c| {
        let new = status(c)["updateRevision"]
            .as_str()
            .unwrap_or("")
            .to_string();
        new != old
            && revision_of(c, "web-1").as_deref() == Some(new.as_str())
            && pods(c).iter().filter(|p| is_ready(p)).count() == 3
    })
    .await;
    let st = status(&cluster);
    let new = st["updateRevision"].as_str().unwrap().to_string();
    assert_eq!(
        revision_of(&cluster, "web-2").as_deref(),
        Some(new.as_str())
    );
    assert_eq!(
        revision_of(&cluster, "web-0"),
        Some(old.clone()),
        "the partition holds web-0"
    );
    assert_eq!(st["updatedReplicas"], 2, "{st:#}");
    assert_eq!(st["currentRevision"], json!(old), "{st:#}");
    // Partition 0: web-0 follows, and the update revision becomes the current one.
    cluster
        .patch(
            &sts_ref(),
            Some("default"),
            "web",
            PatchKind::Merge,
            &json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}),
        )
        .unwrap();
    until(&cluster, "all updated", |c| {
        let st = status(c);
        st["updatedReplicas"] == 3
            && st["readyReplicas"] == 3
            && st["currentRevision"] == st["updateRevision"]
    })
    .await;
    assert_eq!(
        revision_of(&cluster, "web-0").as_deref(),
        Some(new.as_str())
    );
}
