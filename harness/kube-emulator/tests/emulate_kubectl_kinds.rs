//! kubectl 1.33 (`conformance-testtools`) against `emulate serve` over TCP, in real time: the
//! kinds real manifests contain, access reviews, CRD installation by server-side apply, and
//! `port-forward` in kubectl's own form (SPDY in a WebSocket tunnel, and the plain SPDY
//! fallback). Every kubectl call has a deadline.

use conformance_testtools::{Tool, require};
use kube_emulator::{Cluster, ClusterConfig, PatchKind, ResourceRef};
use serde_json::json;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

mod common;
use common::Served;

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
    let kubectl = require(Tool::Kubectl, test)?;
    let served = common::serve(ClusterConfig::default()).await;
    Some(Env { served, kubectl })
}

impl Env {
    fn cmd(&self, args: &[&str]) -> tokio::process::Command {
        self.command(&self.kubectl, args)
    }

    async fn run(&self, args: &[&str]) -> (i32, String, String) {
        let o = self.served.run(&self.kubectl, args, &[]).await;
        (o.code, o.stdout, o.stderr)
    }

    async fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run(args).await;
        assert_eq!(code, 0, "kubectl {args:?} failed: {out}{err}");
        out
    }

    /// A pod the test plays scheduler and kubelet for: bound and Running.
    fn running_pod(&self, name: &str) {
        let pod = json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "main", "image": "gw:1"}]}});
        self.cluster
            .create(&ResourceRef::pods(), Some("default"), pod)
            .unwrap();
        self.cluster.bind_pod("default", name, "node-1").unwrap();
        let st = json!({"status": {"phase": "Running", "podIP": "10.244.0.9",
            "conditions": [{"type": "Ready", "status": "True"}]}});
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

    /// Runs `kubectl port-forward pod/<pod> :<port>` (with `extra` environment), sends bytes
    /// through the local port it opens and returns what came back.
    async fn forward_round_trip(&self, pod: &str, port: u16, env: &[(&str, &str)]) -> Vec<u8> {
        let target = format!("pod/{pod}");
        let ports = format!(":{port}");
        let mut cmd = self.cmd(&["port-forward", &target, &ports]);
        cmd.envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // "Forwarding from 127.0.0.1:NNNNN -> 8080"
        let local = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
                    return rest
                        .split_whitespace()
                        .next()
                        .unwrap()
                        .parse::<u16>()
                        .unwrap();
                }
            }
            panic!("kubectl port-forward ended before forwarding");
        })
        .await
        .expect("kubectl port-forward did not start forwarding within 30 s");
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", local))
            .await
            .unwrap();
        conn.write_all(b"hello").await.unwrap();
        let mut got = vec![];
        tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut got))
            .await
            .expect("no answer through the forward within 30 s")
            .unwrap();
        let _ = child.kill().await;
        got
    }
}

/// An echo server on a pod port: reads five bytes, answers `echo:` and them, then closes.
fn echo_on(cluster: &Cluster, pod: &str, port: u16) {
    cluster.register_port(
        "default",
        pod,
        port,
        move |mut s: tokio::io::DuplexStream| {
            tokio::spawn(async move {
                let mut buf = [0u8; 5];
                if s.read_exact(&mut buf).await.is_ok() {
                    let _ = s.write_all(b"echo:").await;
                    let _ = s.write_all(&buf).await;
                }
            });
        },
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_port_forward_round_trips_bytes_over_its_websocket_tunnel() {
    let Some(env) = start("kubectl_port_forward_round_trips_bytes_over_its_websocket_tunnel").await
    else {
        return;
    };
    env.running_pod("gw");
    echo_on(&env.cluster, "gw", 8080);
    assert_eq!(env.forward_round_trip("gw", 8080, &[]).await, b"echo:hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_port_forward_round_trips_bytes_over_plain_spdy_too() {
    let Some(env) = start("kubectl_port_forward_round_trips_bytes_over_plain_spdy_too").await
    else {
        return;
    };
    env.running_pod("gw");
    echo_on(&env.cluster, "gw", 8080);
    // With WebSockets switched off kubectl speaks SPDY/3.1 on a plain upgrade, as it does
    // after a failed WebSocket upgrade.
    let got = env
        .forward_round_trip("gw", 8080, &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")])
        .await;
    assert_eq!(got, b"echo:hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_is_answered_yes_and_lists_every_rule() {
    let Some(env) = start("kubectl_auth_can_i_is_answered_yes_and_lists_every_rule").await else {
        return;
    };
    assert_eq!(
        env.ok(&["auth", "can-i", "create", "pods"]).await.trim(),
        "yes"
    );
    assert_eq!(
        env.ok(&["auth", "can-i", "delete", "clusterroles"])
            .await
            .trim(),
        "yes"
    );
    let rules = env.ok(&["auth", "can-i", "--list"]).await;
    assert!(rules.contains("*.*"), "{rules}");
    // Reviews are answered, not stored: nothing to list.
    let (code, _, err) = env.run(&["get", "selfsubjectaccessreviews"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("MethodNotAllowed"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token_gets_a_pod_bound_token_that_a_token_review_authenticates() {
    let Some(env) =
        start("kubectl_create_token_gets_a_pod_bound_token_that_a_token_review_authenticates")
            .await
    else {
        return;
    };
    env.ok(&["create", "serviceaccount", "sa"]).await;
    let pod = json!({"metadata": {"name": "p"}, "spec": {"serviceAccountName": "sa", "containers": [{"name": "c", "image": "i"}]}});
    env.cluster
        .create(&ResourceRef::pods(), Some("default"), pod)
        .unwrap();
    let token = env
        .ok(&[
            "create",
            "token",
            "sa",
            "--audience",
            "gw",
            "--duration",
            "10m",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "p",
        ])
        .await;
    let review = env.cluster.review_token(token.trim(), &["gw".into()]);
    assert_eq!(review["authenticated"], true, "{review}");
    assert_eq!(
        review["user"]["extra"]["authentication.kubernetes.io/pod-name"],
        json!(["p"])
    );
    // The API server's own checks, worded as kubectl prints them from a real one.
    let (code, _, err) = env
        .run(&["create", "token", "sa", "--duration", "1m"])
        .await;
    assert_ne!(code, 0);
    assert!(
        err.contains("failed to create token: TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"),
        "{err}"
    );
    let (code, _, err) = env.run(&["create", "token", "nobody"]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("serviceaccounts \"nobody\" not found"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_and_lists_the_kinds_of_the_chart_and_the_agent_sandbox_manifest() {
    let Some(env) =
        start("kubectl_creates_and_lists_the_kinds_of_the_chart_and_the_agent_sandbox_manifest")
            .await
    else {
        return;
    };
    let manifest = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules: [{apiGroups: [""], resources: [nodes], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
subjects: [{kind: ServiceAccount, name: default, namespace: default}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: secrets, namespace: default}
rules: [{apiGroups: [""], resources: [secrets], verbs: [get, create]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: secrets, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: secrets}
subjects: [{kind: ServiceAccount, name: default, namespace: default}]
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: leader, namespace: default}
spec: {holderIdentity: me, leaseDurationSeconds: 15}
---
apiVersion: batch/v1
kind: Job
metadata: {name: once, namespace: default}
spec:
  backoffLimit: 3
  template:
    spec:
      restartPolicy: OnFailure
      containers: [{name: c, image: busybox}]
"#;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), manifest).unwrap();
    let path = file.path().to_str().unwrap();
    env.ok(&["create", "--validate=false", "-f", path]).await;
    let got = env
        .ok(&[
            "get",
            "clusterroles,clusterrolebindings,roles,rolebindings,leases,jobs",
            "-o",
            "name",
        ])
        .await;
    for want in [
        "clusterrole.rbac.authorization.k8s.io/reader",
        "clusterrolebinding.rbac.authorization.k8s.io/reader",
        "role.rbac.authorization.k8s.io/secrets",
        "rolebinding.rbac.authorization.k8s.io/secrets",
        "lease.coordination.k8s.io/leader",
        "job.batch/once",
    ] {
        assert!(got.contains(want), "{want} missing from {got}");
    }
    // The Job got the API server's defaults and its generated selector.
    let job = env
        .cluster
        .get(
            &ResourceRef::new("batch", "v1", "jobs"),
            Some("default"),
            "once",
        )
        .unwrap();
    let uid = job["metadata"]["uid"].as_str().unwrap();
    assert_eq!(job["spec"]["completions"], 1);
    assert_eq!(
        job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        uid
    );
    // A Job whose pods would restart forever is refused with the real message.
    let bad = r#"{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bad"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}"#;
    std::fs::write(file.path(), bad).unwrap();
    let (code, _, err) = env.run(&["create", "--validate=false", "-f", path]).await;
    assert_ne!(code, 0);
    assert!(err.contains("spec.template.spec.restartPolicy"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_of_the_agent_sandbox_manifest_establishes_its_crd() {
    let Some(env) =
        start("server_side_apply_of_the_agent_sandbox_manifest_establishes_its_crd").await
    else {
        return;
    };
    let root = conformance_testtools::workspace_root();
    for manifest in [
        "../shared/upstream/agent-sandbox-v0.5.0/manifest.yaml",
        "../shared/upstream/agent-sandbox-v0.5.4/sandbox.yaml",
    ] {
        let path = root.join(manifest);
        if !path.is_file() {
            assert!(
                !conformance_testtools::in_ci(),
                "{} is missing",
                path.display()
            );
            eprintln!("SKIPPED: {} is missing", path.display());
            return;
        }
        // Until OpenAPI is served, kubectl's client-side validation must be off.
        let applied = env
            .ok(&[
                "apply",
                "--server-side",
                "--validate=false",
                "-f",
                path.to_str().unwrap(),
            ])
            .await;
        assert!(
            applied.contains("customresourcedefinition.apiextensions.k8s.io/sandboxes.agents.x-k8s.io serverside-applied"),
            "{applied}"
        );
        env.ok(&[
            "wait",
            "--for=condition=Established",
            "crd/sandboxes.agents.x-k8s.io",
            "--timeout=10s",
        ])
        .await;
    }
    let got = env
        .ok(&[
            "get",
            "clusterroles,deployments,services",
            "-A",
            "-o",
            "name",
        ])
        .await;
    assert!(
        got.contains("clusterrole.rbac.authorization.k8s.io/agent-sandbox-controller")
            && got.contains("deployment.apps/agent-sandbox-controller"),
        "{got}"
    );
    // The CRD's resource is served.
    let (code, _, err) = env.run(&["get", "sandboxes", "-A"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("No resources found"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_nodes_and_jobs_with_the_columns_it_shows_on_a_real_cluster() {
    let Some(env) =
        start("kubectl_gets_nodes_and_jobs_with_the_columns_it_shows_on_a_real_cluster").await
    else {
        return;
    };
    let nodes = ResourceRef::new("", "v1", "nodes");
    env.cluster
        .create(&nodes, None, json!({"metadata": {"name": "node-1"}}))
        .unwrap();
    env.cluster
        .patch_status(
            &nodes,
            None,
            "node-1",
            PatchKind::Merge,
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.33.0"}}}),
        )
        .unwrap();
    let got = env.ok(&["get", "nodes"]).await;
    let mut lines = got.lines();
    assert!(
        lines
            .next()
            .unwrap()
            .split_whitespace()
            .eq(["NAME", "STATUS", "ROLES", "AGE", "VERSION"]),
        "{got}"
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        (row[0], row[1], row[2], row[4]),
        ("node-1", "Ready", "<none>", "v1.33.0"),
        "{got}"
    );
    env.ok(&[
        "wait",
        "--for=condition=Ready",
        "node/node-1",
        "--timeout=10s",
    ])
    .await;
    let jobs = ResourceRef::new("batch", "v1", "jobs");
    env.cluster
        .create(
            &jobs,
            Some("default"),
            json!({"metadata": {"name": "once"}, "spec": {"template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}),
        )
        .unwrap();
    env.cluster
        .patch_status(
            &jobs,
            Some("default"),
            "once",
            PatchKind::Merge,
            &json!({"status": {"succeeded": 1, "startTime": "2026-01-01T00:00:00Z",
                "completionTime": "2026-01-01T00:00:07Z",
                "conditions": [{"type": "Complete", "status": "True"}]}}),
        )
        .unwrap();
    let got = env.ok(&["get", "jobs"]).await;
    let mut lines = got.lines();
    assert!(
        lines.next().unwrap().split_whitespace().eq([
            "NAME",
            "STATUS",
            "COMPLETIONS",
            "DURATION",
            "AGE"
        ]),
        "{got}"
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&row[..4], ["once", "Complete", "1/1", "7s"], "{got}");
    env.ok(&[
        "wait",
        "--for=condition=Complete",
        "job/once",
        "--timeout=10s",
    ])
    .await;
}
