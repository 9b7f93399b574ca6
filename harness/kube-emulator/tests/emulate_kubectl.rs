//! The machine's real `kubectl` against `emulate serve` (TCP, real time): get, describe, scale,
//! delete, wait, exec and logs. Each kubectl call has a deadline. kubectl is the pinned one
//! conformance-testtools finds: missing, a test is skipped locally and fails in CI.

use kube_emulator::{ClusterConfig, PatchKind, ResourceRef};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

mod common;
use common::{Out, Served};

struct Env {
    served: Served,
    kubectl: PathBuf,
}

impl std::ops::Deref for Env {
    type Target = Served;
    fn deref(&self) -> &Served {
        &self.served
    }
}

async fn start(test: &str) -> Option<Env> {
    let kubectl = conformance_testtools::require(conformance_testtools::Tool::Kubectl, test)?;
    let served = common::serve(ClusterConfig {
        crds: vec![
            serde_saphyr::from_str(include_str!(
                "../../../fixtures/crds/sandboxes.agents.x-k8s.io.yaml"
            ))
            .unwrap(),
        ],
        ..ClusterConfig::default()
    })
    .await;
    Some(Env { served, kubectl })
}

impl Env {
    async fn kubectl(&self, args: &[&str]) -> Out {
        self.run(&self.kubectl, args, &[]).await
    }

    async fn ok(&self, args: &[&str]) -> String {
        let o = self.kubectl(args).await;
        assert_eq!(
            o.code, 0,
            "kubectl {args:?} failed: {}{}",
            o.stdout, o.stderr
        );
        o.stdout
    }

    fn sts(&self, name: &str) {
        let sts = json!({"metadata": {"name": name}, "spec": {"replicas": 1, "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "gw", "image": "gw:1"}]}}}});
        self.cluster
            .create(
                &ResourceRef::new("apps", "v1", "statefulsets"),
                Some("default"),
                sts,
            )
            .unwrap();
    }

    /// Creates a pod and plays the scheduler and kubelet: bound, Running, Ready.
    fn running_pod(&self, name: &str) {
        let pod = json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "main", "image": "busybox:1"}]}});
        self.cluster
            .create(&ResourceRef::pods(), Some("default"), pod)
            .unwrap();
        self.cluster.bind_pod("default", name, "node-1").unwrap();
        self.set_ready(name);
    }

    fn set_ready(&self, name: &str) {
        let st = json!({"status": {"phase": "Running", "podIP": "10.244.0.9",
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "main", "ready": true, "restartCount": 0, "image": "busybox:1", "imageID": "",
                                   "state": {"running": {"startedAt": self.cluster.now_rfc3339()}}}]}});
        self.cluster
            .patch_status(
                &ResourceRef::pods(),
                Some("default"),
                name,
                PatchKind::Merge,
                &st,
            )
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_describes_scales_and_deletes_objects() {
    let Some(env) = start("kubectl_gets_describes_scales_and_deletes_objects").await else {
        return;
    };
    env.sts("openshell");
    let got = env.ok(&["get", "statefulsets"]).await;
    assert!(
        got.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .eq(["NAME", "READY", "AGE"]),
        "{got}"
    );
    assert!(got.contains("openshell") && got.contains("0/1"), "{got}");
    let described = env.ok(&["describe", "statefulset", "openshell"]).await;
    assert!(
        described.contains("Replicas:") && described.contains("Selector:           app=openshell"),
        "{described}"
    );
    env.ok(&["scale", "statefulset/openshell", "--replicas=0"])
        .await;
    let sts = env
        .cluster
        .get(
            &ResourceRef::new("apps", "v1", "statefulsets"),
            Some("default"),
            "openshell",
        )
        .unwrap();
    assert_eq!(sts["spec"]["replicas"], 0);
    assert_eq!(
        env.ok(&[
            "get",
            "sts",
            "openshell",
            "-o",
            "jsonpath={.metadata.generation}"
        ])
        .await,
        "2"
    );
    let ns = env.ok(&["get", "namespaces"]).await;
    assert!(ns.contains("kube-system") && ns.contains("Active"), "{ns}");
    env.ok(&["delete", "statefulset", "openshell"]).await;
    let gone = env.kubectl(&["get", "statefulset", "openshell"]).await;
    assert_eq!(gone.code, 1);
    assert!(
        gone.stderr
            .contains("statefulsets.apps \"openshell\" not found"),
        "{}",
        gone.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shows_pods_and_sandboxes_with_their_columns() {
    let Some(env) = start("kubectl_shows_pods_and_sandboxes_with_their_columns").await else {
        return;
    };
    env.running_pod("p");
    let pods = env.ok(&["get", "pods"]).await;
    let row: Vec<&str> = pods.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..4], ["p", "1/1", "Running", "0"], "{pods}");
    let described = env.ok(&["describe", "pod", "p"]).await;
    assert!(
        described.contains("Node:") && described.contains("node-1"),
        "{described}"
    );
    let sb = json!({"metadata": {"name": "default--demo"}, "spec": {"podTemplate": {"spec": {"containers": []}}}});
    env.cluster
        .create(
            &ResourceRef::new("agents.x-k8s.io", "v1beta1", "sandboxes"),
            Some("default"),
            sb,
        )
        .unwrap();
    let st = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady"}]}});
    env.cluster
        .patch_status(
            &ResourceRef::new("agents.x-k8s.io", "v1beta1", "sandboxes"),
            Some("default"),
            "default--demo",
            PatchKind::Merge,
            &st,
        )
        .unwrap();
    let sandboxes = env.ok(&["get", "sandboxes"]).await;
    assert!(
        sandboxes
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .eq(["NAME", "READY", "REASON", "AGE"]),
        "{sandboxes}"
    );
    let row: Vec<&str> = sandboxes
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..3],
        ["default--demo", "True", "DependenciesReady"],
        "{sandboxes}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_waits_for_a_condition_and_for_deletion() {
    let Some(env) = start("kubectl_waits_for_a_condition_and_for_deletion").await else {
        return;
    };
    let pod = json!({"metadata": {"name": "w"}, "spec": {"terminationGracePeriodSeconds": 2, "containers": [{"name": "main", "image": "busybox:1"}]}});
    env.cluster
        .create(&ResourceRef::pods(), Some("default"), pod)
        .unwrap();
    env.cluster.bind_pod("default", "w", "node-1").unwrap();
    let c = env.cluster.clone();
    let kubelet = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let st = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        c.patch_status(
            &ResourceRef::pods(),
            Some("default"),
            "w",
            PatchKind::Merge,
            &st,
        )
        .unwrap();
    });
    let out = env
        .ok(&["wait", "--for=condition=Ready", "pod/w", "--timeout=30s"])
        .await;
    assert!(out.contains("pod/w condition met"), "{out}");
    kubelet.await.unwrap();
    // The pod is bound, so deletion is graceful (2 s); kubectl delete waits for it to be gone.
    let started = tokio::time::Instant::now();
    let out = env.ok(&["delete", "pod", "w"]).await;
    assert!(out.contains("pod \"w\" deleted"), "{out}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "kubectl delete waited for the grace period"
    );
    env.ok(&["wait", "--for=delete", "pod/w", "--timeout=10s"])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_execs_into_a_pod_and_reads_its_logs() {
    let Some(env) = start("kubectl_execs_into_a_pod_and_reads_its_logs").await else {
        return;
    };
    env.running_pod("p");
    let o = env
        .kubectl(&["exec", "p", "--", "sh", "-c", "echo hello from the shell"])
        .await;
    assert_eq!(
        (o.code, o.stdout.as_str()),
        (0, "hello from the shell\n"),
        "{}",
        o.stderr
    );
    let o = env
        .kubectl(&["exec", "p", "--", "sh", "-c", "echo partial; exit 3"])
        .await;
    assert_eq!(
        (o.code, o.stdout.as_str()),
        (3, "partial\n"),
        "kubectl exits with the command's code: {}",
        o.stderr
    );
    let o = env.kubectl(&["exec", "-i", "p", "--", "cat"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    env.cluster
        .append_log("default", "p", "main", "line one\nline two");
    assert_eq!(env.ok(&["logs", "p"]).await, "line one\nline two\n");
    assert_eq!(env.ok(&["logs", "p", "--tail=1"]).await, "line two\n");
    let missing = env.kubectl(&["exec", "nope", "--", "true"]).await;
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("pods \"nope\" not found"),
        "{}",
        missing.stderr
    );
}
