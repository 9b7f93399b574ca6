//! The Job controller, the node the kubelet plays and containers of images the cluster has no
//! model of, in paused (virtual) time. Durations asserted are virtual.

use std::time::Duration;

use crate::kube::{KubeConfig, KubeModels};
use crate::network::Network;
use crate::program::Programs;
use kube_emulator::{Cluster, ClusterConfig, DeleteOptions, ListOptions, ResourceRef};
use serde_json::{Value, json};
use tokio::time::Instant;

fn jobs() -> ResourceRef {
    ResourceRef::new("batch", "v1", "jobs")
}

struct Env {
    cluster: Cluster,
    _models: KubeModels,
    t0: Instant,
}

fn start() -> Env {
    let cluster = Cluster::new(ClusterConfig::default());
    let models = KubeModels::start(
        &cluster,
        &Network::new(),
        Programs::new(),
        KubeConfig::default(),
    );
    Env {
        cluster,
        _models: models,
        t0: Instant::now(),
    }
}

impl Env {
    /// Waits (virtual time, at most an hour) for the object to satisfy `pred` (`None`: absent).
    async fn until(
        &self,
        r: &ResourceRef,
        name: &str,
        what: &str,
        pred: impl Fn(Option<&Value>) -> bool,
    ) -> Option<Value> {
        let mut changes = self.cluster.subscribe();
        let deadline = Instant::now() + Duration::from_secs(3600);
        loop {
            let cur = self.cluster.get(r, Some("default"), name).ok();
            if pred(cur.as_ref()) {
                return cur;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, changes.changed()).await.is_err() {
                panic!("{name}: never {what} within an hour; last: {cur:#?}");
            }
        }
    }

    /// The pods carrying the Job's name label.
    fn pods_of(&self, job: &str) -> Vec<Value> {
        self.cluster
            .list(
                &ResourceRef::pods(),
                Some("default"),
                &ListOptions::default(),
            )
            .map(|(items, _)| items)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == job)
            .collect()
    }

    fn create_job(&self, name: &str, spec: Value) -> Value {
        self.cluster
            .create(
                &jobs(),
                Some("default"),
                json!({"metadata": {"name": name}, "spec": spec}),
            )
            .map(std::sync::Arc::unwrap_or_clone)
            .unwrap()
    }
}

fn condition(job: &Value, t: &str) -> Option<(String, String)> {
    job.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == t && c["status"] == "True")
        .map(|c| {
            (
                c["reason"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
}

#[tokio::test(start_paused = true)]
async fn a_job_of_an_image_the_cluster_has_no_model_of_completes_and_goes_after_its_ttl() {
    let env = start();
    env.create_job(
        "certgen",
        json!({"backoffLimit": 3, "ttlSecondsAfterFinished": 300, "template": {"spec": {
            "restartPolicy": "OnFailure",
            "containers": [{"name": "certgen", "image": "ghcr.io/nvidia/openshell/gateway:0.0.111",
                "command": ["/usr/local/bin/openshell-gateway"], "args": ["generate-certs"]}]}}}),
    );
    let job = env
        .until(&jobs(), "certgen", "complete", |j| {
            j.is_some_and(|j| condition(j, "Complete").is_some())
        })
        .await
        .unwrap();
    let done = env.t0.elapsed();
    assert_eq!(
        condition(&job, "SuccessCriteriaMet").unwrap().0,
        "CompletionsReached"
    );
    assert_eq!(job["status"]["succeeded"], 1);
    assert!(job["status"]["completionTime"].is_string());
    assert!(job["status"].get("active").is_none(), "{job:#}");
    let pods = env.pods_of("certgen");
    assert_eq!(pods.len(), 1);
    let pod = &pods[0];
    assert_eq!(pod["status"]["phase"], "Succeeded");
    let term = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (term["exitCode"].as_i64(), term["reason"].as_str()),
        (Some(0), Some("Completed"))
    );
    assert_eq!(
        pod["metadata"]["ownerReferences"][0]["kind"], "Job",
        "{pod:#}"
    );
    // The TTL-after-finished controller deletes it 300 s later, its pod with it.
    env.until(&jobs(), "certgen", "deleted", |j| j.is_none())
        .await;
    let ttl = env.t0.elapsed() - done;
    assert!(
        (Duration::from_secs(299)..=Duration::from_secs(302)).contains(&ttl),
        "{ttl:?}"
    );
    let pod_name = pod["metadata"]["name"].as_str().unwrap();
    env.until(&ResourceRef::pods(), pod_name, "gone", |p| p.is_none())
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_job_whose_pods_fail_beyond_its_backoff_limit_fails_with_backoff_limit_exceeded() {
    let env = start();
    env.create_job(
        "fails",
        json!({"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "exit 3"]}]}}}),
    );
    let job = env
        .until(&jobs(), "fails", "failed", |j| {
            j.is_some_and(|j| condition(j, "Failed").is_some())
        })
        .await
        .unwrap();
    assert_eq!(
        condition(&job, "Failed").unwrap(),
        (
            "BackoffLimitExceeded".to_string(),
            "Job has reached the specified backoff limit".to_string()
        )
    );
    assert_eq!(
        condition(&job, "FailureTarget").unwrap().0,
        "BackoffLimitExceeded"
    );
    // backoffLimit 1: the first pod and one replacement, both failed, no third.
    assert_eq!(job["status"]["failed"], 2);
    let pods = env.pods_of("fails");
    assert_eq!(pods.len(), 2);
    assert!(pods.iter().all(|p| p["status"]["phase"] == "Failed"));
}

#[tokio::test(start_paused = true)]
async fn a_job_active_longer_than_its_deadline_fails_and_its_pod_is_deleted() {
    let env = start();
    env.create_job(
        "slow",
        json!({"activeDeadlineSeconds": 10, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}}}),
    );
    let job = env
        .until(&jobs(), "slow", "failed", |j| {
            j.is_some_and(|j| condition(j, "Failed").is_some())
        })
        .await
        .unwrap();
    let at = env.t0.elapsed();
    assert!(
        (Duration::from_secs(10)..=Duration::from_secs(12)).contains(&at),
        "{at:?}"
    );
    assert_eq!(condition(&job, "Failed").unwrap().0, "DeadlineExceeded");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !env.pods_of("slow").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the pod outlived its Job's deadline"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_kubelet_registers_its_node_ready() {
    let env = start();
    let nodes = ResourceRef::new("", "v1", "nodes");
    let (items, _) = env
        .cluster
        .list(&nodes, None, &ListOptions::default())
        .unwrap();
    assert_eq!(items.len(), 1);
    let node = &items[0];
    assert_eq!(node["metadata"]["name"], KubeConfig::default().node_name);
    let ready = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("True"), Some("KubeletReady"))
    );
    assert_eq!(
        node["status"]["addresses"][0]["address"],
        KubeConfig::default().host_ip
    );
}

#[tokio::test(start_paused = true)]
async fn an_unknown_executable_in_a_pod_that_keeps_running_idles_ready_until_deleted() {
    let env = start();
    env.cluster
        .create(
            &ResourceRef::pods(),
            Some("default"),
            json!({"metadata": {"name": "ctl"}, "spec": {"containers": [{"name": "manager",
                "image": "registry.k8s.io/agent-sandbox/agent-sandbox-controller:v0.5.0",
                "command": ["/manager"]}]}}),
        )
        .unwrap();
    let pod = env
        .until(&ResourceRef::pods(), "ctl", "ready", |p| {
            p.is_some_and(crate::network::is_ready)
        })
        .await
        .unwrap();
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);
    // It stays so (no exit, no restart) ...
    tokio::time::sleep(Duration::from_secs(600)).await;
    let pod = env
        .cluster
        .get(&ResourceRef::pods(), Some("default"), "ctl")
        .unwrap();
    assert!(crate::network::is_ready(&pod));
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);
    // ... and stops on TERM like a process without handlers.
    env.cluster
        .delete(
            &ResourceRef::pods(),
            Some("default"),
            "ctl",
            &DeleteOptions::default(),
        )
        .unwrap();
    env.until(&ResourceRef::pods(), "ctl", "gone", |p| p.is_none())
        .await;
}
