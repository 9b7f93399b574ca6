//! Pod subresources through `kube::Client` over the in-memory transport, in paused time:
//! exec (WebSocket, v5), logs, port-forward and eviction.

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, EvictParams, LogParams, Patch, PatchParams, PostParams};
use kube_emulator::{Cluster, ClusterConfig, ExecOutput, ExecRequest, ResourceRef};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn api_error(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Creates a pod with the given containers and makes it Running as a kubelet would report it.
async fn running_pod(c: &Cluster, name: &str, containers: &[&str]) -> Pod {
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let cs: Vec<_> = containers
        .iter()
        .map(|n| json!({"name": n, "image": "i:1", "env": [{"name": "GREETING", "value": "hi"}]}))
        .collect();
    let p: Pod =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"containers": cs}}))
            .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    c.bind_pod("default", name, "node-1").unwrap();
    let statuses: Vec<_> = containers
        .iter()
        .map(|n| json!({"name": n, "ready": true, "restartCount": 0, "image": "i:1", "imageID": "", "state": {"running": {"startedAt": c.now_rfc3339()}}}))
        .collect();
    let st = json!({"status": {"phase": "Running", "podIP": "10.244.0.5", "containerStatuses": statuses}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(st))
        .await
        .unwrap()
}

/// Prints container, argv and $GREETING; returns stdin on stderr; exits with argv[1].
async fn echo_handler(req: ExecRequest) -> ExecOutput {
    let code = req.argv.get(1).and_then(|a| a.parse().ok()).unwrap_or(0);
    ExecOutput {
        stdout: format!(
            "{} {} {}\n",
            req.container,
            req.argv.join(" "),
            req.env.get("GREETING").cloned().unwrap_or_default()
        )
        .into_bytes(),
        stderr: req.stdin.clone(),
        exit_code: code,
    }
}

async fn exec(
    pods: &Api<Pod>,
    name: &str,
    argv: &[&str],
    ap: &AttachParams,
    stdin: Option<&[u8]>,
) -> (
    String,
    String,
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Status,
) {
    let mut proc = pods.exec(name, argv.to_vec(), ap).await.unwrap();
    if let Some(data) = stdin {
        let mut w = proc.stdin().unwrap();
        w.write_all(data).await.unwrap();
        // Shutdown (not drop) signals EOF: the write half shares the stream with kube's reader.
        w.shutdown().await.unwrap();
    }
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut o) = proc.stdout() {
        o.read_to_string(&mut out).await.unwrap();
    }
    if let Some(mut e) = proc.stderr() {
        e.read_to_string(&mut err).await.unwrap();
    }
    let status = proc.take_status().unwrap().await.unwrap();
    proc.join().await.unwrap();
    (out, err, status)
}

#[tokio::test(start_paused = true)]
async fn exec_with_exit_code_zero_reports_success_and_the_output() {
    let c = Cluster::new(ClusterConfig::default());
    running_pod(&c, "sb", &["agent"]).await;
    c.register_exec("default", "sb", "agent", echo_handler);
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let (out, err, status) =
        exec(&pods, "sb", &["check", "0"], &AttachParams::default(), None).await;
    assert_eq!(out, "agent check 0 hi\n");
    assert_eq!(err, "");
    assert_eq!(status.status.as_deref(), Some("Success"));
}

#[tokio::test(start_paused = true)]
async fn exec_with_a_non_zero_exit_code_reports_non_zero_exit_code_with_the_code() {
    let c = Cluster::new(ClusterConfig::default());
    running_pod(&c, "sb", &["agent"]).await;
    c.register_exec("default", "sb", "agent", echo_handler);
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let (out, _, status) = exec(&pods, "sb", &["check", "3"], &AttachParams::default(), None).await;
    assert_eq!(out, "agent check 3 hi\n");
    assert_eq!(status.status.as_deref(), Some("Failure"));
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
    let causes = status.details.unwrap().causes.unwrap();
    assert_eq!(
        (causes[0].reason.as_deref(), causes[0].message.as_deref()),
        (Some("ExitCode"), Some("3"))
    );
}

#[tokio::test(start_paused = true)]
async fn exec_passes_stdin_to_the_handler_until_the_client_closes_it() {
    let c = Cluster::new(ClusterConfig::default());
    running_pod(&c, "sb", &["agent"]).await;
    c.register_exec("default", "sb", "agent", echo_handler);
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let ap = AttachParams::default().stdin(true);
    let (_, err, status) = exec(&pods, "sb", &["cat"], &ap, Some(b"from stdin")).await;
    assert_eq!(
        err, "from stdin",
        "the echo handler returns stdin on stderr"
    );
    assert_eq!(status.status.as_deref(), Some("Success"));
}

#[tokio::test(start_paused = true)]
async fn exec_picks_the_named_container_and_refuses_an_ambiguous_or_unknown_one() {
    let c = Cluster::new(ClusterConfig::default());
    running_pod(&c, "two", &["agent", "proxy"]).await;
    c.register_exec("default", "two", "proxy", echo_handler);
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let (out, _, _) = exec(
        &pods,
        "two",
        &["x"],
        &AttachParams::default().container("proxy"),
        None,
    )
    .await;
    assert!(out.starts_with("proxy x"));
    let e = pods
        .exec("two", vec!["x"], &AttachParams::default())
        .await
        .err()
        .unwrap();
    assert!(
        format!("{e:?}").contains(
            "a container name must be specified for pod two, choose one of: [agent proxy]"
        ),
        "{e:?}"
    );
    let e = pods
        .exec("two", vec!["x"], &AttachParams::default().container("nope"))
        .await
        .err()
        .unwrap();
    assert!(
        format!("{e:?}").contains("container nope is not valid for pod two"),
        "{e:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn exec_into_a_pod_that_is_not_running_fails_like_the_real_api() {
    let c = Cluster::new(ClusterConfig::default());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let p: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    let e = pods
        .exec("p", vec!["true"], &AttachParams::default())
        .await
        .err()
        .unwrap();
    assert!(
        format!("{e:?}").contains("pod p does not have a host assigned"),
        "{e:?}"
    );
    c.bind_pod("default", "p", "node-1").unwrap();
    let e = pods
        .exec("p", vec!["true"], &AttachParams::default())
        .await
        .err()
        .unwrap();
    assert!(
        format!("{e:?}").contains("container not found (\\\"c\\\")"),
        "{e:?}"
    );
    pods.patch_status(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Failed"}})),
    )
    .await
    .unwrap();
    let e = c
        .exec("default", "p", None, &["true".into()], b"")
        .await
        .unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            400,
            "cannot exec into a container in a completed pod; current phase is Failed"
        )
    );
}

#[tokio::test(start_paused = true)]
async fn in_process_exec_uses_the_same_handlers_and_checks() {
    let c = Cluster::new(ClusterConfig::default());
    running_pod(&c, "sb", &["agent"]).await;
    c.register_exec("default", "sb", "agent", echo_handler);
    let out = c
        .exec(
            "default",
            "sb",
            Some("agent"),
            &["probe".into(), "1".into()],
            b"in",
        )
        .await
        .unwrap();
    assert_eq!(
        (out.stdout, out.stderr, out.exit_code),
        (b"agent probe 1 hi\n".to_vec(), b"in".to_vec(), 1)
    );
}

#[tokio::test(start_paused = true)]
async fn logs_serve_the_lines_models_write_with_tail_since_and_timestamps() {
    let c = Cluster::new(ClusterConfig::default());
    running_pod(&c, "gw", &["gateway"]).await;
    c.append_log("default", "gw", "gateway", "starting\nlistening on :8080");
    tokio::time::sleep(Duration::from_secs(100)).await;
    c.append_log("default", "gw", "gateway", "ready");
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    assert_eq!(
        pods.logs("gw", &LogParams::default()).await.unwrap(),
        "starting\nlistening on :8080\nready\n"
    );
    assert_eq!(
        pods.logs(
            "gw",
            &LogParams {
                tail_lines: Some(1),
                ..Default::default()
            }
        )
        .await
        .unwrap(),
        "ready\n"
    );
    assert_eq!(
        pods.logs(
            "gw",
            &LogParams {
                since_seconds: Some(50),
                ..Default::default()
            }
        )
        .await
        .unwrap(),
        "ready\n"
    );
    let ts = pods
        .logs(
            "gw",
            &LogParams {
                timestamps: true,
                tail_lines: Some(1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        ts, "2026-01-01T00:01:40.000000000Z ready\n",
        "cluster time: the epoch plus 100 virtual seconds"
    );
}

#[tokio::test(start_paused = true)]
async fn previous_logs_are_those_before_the_last_restart() {
    let c = Cluster::new(ClusterConfig::default());
    running_pod(&c, "gw", &["gateway"]).await;
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let (code, msg) = api_error(
        pods.logs(
            "gw",
            &LogParams {
                previous: true,
                ..Default::default()
            },
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        (code, msg.as_str()),
        (
            400,
            "previous terminated container \"gateway\" in pod \"gw\" not found"
        )
    );
    c.append_log("default", "gw", "gateway", "first run");
    c.restart_container_log("default", "gw", "gateway");
    c.append_log("default", "gw", "gateway", "second run");
    assert_eq!(
        pods.logs(
            "gw",
            &LogParams {
                previous: true,
                ..Default::default()
            }
        )
        .await
        .unwrap(),
        "first run\n"
    );
    assert_eq!(
        pods.logs("gw", &LogParams::default()).await.unwrap(),
        "second run\n"
    );
}

#[tokio::test(start_paused = true)]
async fn logs_of_a_container_that_has_not_started_are_refused() {
    let c = Cluster::new(ClusterConfig::default());
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let p: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    let (code, msg) = api_error(pods.logs("p", &LogParams::default()).await.unwrap_err());
    assert_eq!(
        (code, msg.as_str()),
        (
            400,
            "container \"c\" in pod \"p\" is waiting to start: ContainerCreating"
        )
    );
}

#[tokio::test(start_paused = true)]
async fn following_logs_streams_new_lines_until_the_container_terminates() {
    let c = Cluster::new(ClusterConfig::default());
    running_pod(&c, "gw", &["gateway"]).await;
    c.append_log("default", "gw", "gateway", "one");
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let writer = c.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(10)).await;
        writer.append_log("default", "gw", "gateway", "two");
        tokio::time::sleep(Duration::from_secs(10)).await;
        let st = json!({"status": {"phase": "Failed", "containerStatuses": [{"name": "gateway", "ready": false, "restartCount": 0,
            "image": "i:1", "imageID": "", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}});
        writer
            .patch_status(
                &ResourceRef::pods(),
                Some("default"),
                "gw",
                kube_emulator::PatchKind::Merge,
                &st,
            )
            .unwrap();
    });
    let start = tokio::time::Instant::now();
    let lines: Vec<String> = pods
        .log_stream(
            "gw",
            &LogParams {
                follow: true,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .lines()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(lines, ["one", "two"]);
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(20),
        "the stream ends when the container terminates"
    );
}

#[tokio::test(start_paused = true)]
async fn port_forward_connects_to_the_handler_a_model_registered_on_the_pod_port() {
    let c = Cluster::new(ClusterConfig::default());
    running_pod(&c, "gw", &["gateway"]).await;
    let connections = Arc::new(Mutex::new(0));
    let counter = connections.clone();
    c.register_port(
        "default",
        "gw",
        8080,
        move |mut s: tokio::io::DuplexStream| {
            *counter.lock().unwrap() += 1;
            tokio::spawn(async move {
                let mut buf = [0u8; 5];
                s.read_exact(&mut buf).await.unwrap();
                s.write_all(b"echo:").await.unwrap();
                s.write_all(&buf).await.unwrap();
                // Closing our end ends the forwarded connection.
            });
        },
    );
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let mut pf = pods.portforward("gw", &[8080]).await.unwrap();
    let mut stream = pf.take_stream(8080).unwrap();
    stream.write_all(b"hello").await.unwrap();
    let mut got = Vec::new();
    stream.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"echo:hello");
    assert_eq!(*connections.lock().unwrap(), 1);
    // The server ends the WebSocket once every forwarded connection is closed (as the kubelet
    // does), which is how the client saw EOF above; the forwarder task has nothing left to do.
    pf.abort();
}

#[tokio::test(start_paused = true)]
async fn port_forward_to_an_unregistered_port_reports_the_error_on_the_error_channel() {
    let c = Cluster::new(ClusterConfig::default());
    let pod = running_pod(&c, "gw", &["gateway"]).await;
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let mut pf = pods.portforward("gw", &[9999]).await.unwrap();
    let err = pf.take_error(9999).unwrap().await.unwrap();
    let uid = pod.metadata.uid.unwrap();
    assert!(
        err.starts_with(&format!("error forwarding port 9999 to pod {uid}, uid : ")),
        "{err}"
    );
    assert!(err.ends_with("connect: connection refused"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn eviction_deletes_the_pod_gracefully() {
    let c = Cluster::new(ClusterConfig::default());
    running_pod(&c, "gw", &["gateway"]).await;
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let status = pods.evict("gw", &EvictParams::default()).await.unwrap();
    assert_eq!(status.code, 201);
    let p = pods.get("gw").await.unwrap();
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(api_error(pods.get("gw").await.unwrap_err()).0, 404);
}

#[tokio::test(start_paused = true)]
async fn a_replacement_pod_of_the_same_name_starts_with_an_empty_log() {
    let c = Cluster::new(ClusterConfig::default());
    running_pod(&c, "gw", &["gateway"]).await;
    c.append_log("default", "gw", "gateway", "old pod");
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    pods.delete("gw", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    running_pod(&c, "gw", &["gateway"]).await;
    assert_eq!(pods.logs("gw", &LogParams::default()).await.unwrap(), "");
}

/// A Running pod with a PVC mounted at /workspace and an emptyDir at /scratch.
async fn pod_with_volumes(c: &Cluster, name: &str) -> Pod {
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
        "containers": [{"name": "agent", "image": "i:1", "env": [{"name": "WHO", "value": "agent"}],
                        "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"}, {"name": "scratch", "mountPath": "/scratch"}]}],
        "volumes": [{"name": "workspace", "persistentVolumeClaim": {"claimName": "workspace-sb"}}, {"name": "scratch", "emptyDir": {}}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    c.bind_pod("default", name, "node-1").unwrap();
    let st = json!({"status": {"phase": "Running", "containerStatuses": [{"name": "agent", "ready": true, "restartCount": 0,
        "image": "i:1", "imageID": "", "state": {"running": {}}}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(st))
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_default_exec_handler_runs_the_shell_with_the_container_env_and_exit_codes() {
    let c = Cluster::new(ClusterConfig::default());
    pod_with_volumes(&c, "sb").await;
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let (out, _, status) = exec(
        &pods,
        "sb",
        &["sh", "-c", "echo hello $WHO"],
        &AttachParams::default(),
        None,
    )
    .await;
    assert_eq!(
        (out.as_str(), status.status.as_deref()),
        ("hello agent\n", Some("Success"))
    );
    let (_, _, status) = exec(
        &pods,
        "sb",
        &["sh", "-c", "exit 7"],
        &AttachParams::default(),
        None,
    )
    .await;
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
    assert_eq!(
        status.details.unwrap().causes.unwrap()[0]
            .message
            .as_deref(),
        Some("7")
    );
}

#[tokio::test(start_paused = true)]
async fn pvc_files_survive_pod_replacement_and_empty_dir_and_root_files_do_not() {
    let c = Cluster::new(ClusterConfig::default());
    pod_with_volumes(&c, "sb").await;
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let write =
        "echo kept > /workspace/.sentinel; echo lost > /scratch/tmp; echo lost > /root-file";
    let (_, err, status) = exec(
        &pods,
        "sb",
        &["sh", "-c", write],
        &AttachParams::default(),
        None,
    )
    .await;
    assert_eq!(status.status.as_deref(), Some("Success"), "{err}");
    assert_eq!(
        c.pvc_volume("default", "workspace-sb").read("/.sentinel"),
        Some(b"kept\n".to_vec()),
        "models see the PVC's files"
    );
    pods.delete("sb", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    pod_with_volumes(&c, "sb").await;
    let (out, _, _) = exec(
        &pods,
        "sb",
        &["cat", "/workspace/.sentinel"],
        &AttachParams::default(),
        None,
    )
    .await;
    assert_eq!(out, "kept\n");
    for gone in ["/scratch/tmp", "/root-file"] {
        let (_, _, status) =
            exec(&pods, "sb", &["cat", gone], &AttachParams::default(), None).await;
        assert_eq!(
            status.status.as_deref(),
            Some("Failure"),
            "{gone} must not survive the pod"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_new_claim_with_a_deleted_claims_name_starts_empty() {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let c = Cluster::new(ClusterConfig::default());
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(c.client());
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    c.pvc_volume("default", "data").write("/db", b"old");
    claims
        .delete("data", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    for _ in 0..100 {
        if claims.get_opt("data").await.unwrap().is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        claims.get_opt("data").await.unwrap().is_none(),
        "the unused claim is removed"
    );
    assert_eq!(
        c.pvc_volume("default", "data").read("/db"),
        None,
        "the claim's volume went with it"
    );
    claims.create(&PostParams::default(), &claim).await.unwrap();
    assert_eq!(
        c.pvc_volume("default", "data").read("/db"),
        None,
        "a new claim of the name starts empty"
    );
}
