//! The kube-rs parts of the real target against the embedded emulated API server, in paused
//! time: the port-forward re-resolving the gateway pod, the gateway and sandbox faults with
//! their restores (and the journal restore after a simulated kill), exec through the API,
//! the event observer and leftover detection. A small StatefulSet "controller" in this file
//! plays the part of kube-controller-manager (the emulator has none): it creates `openshell-0`
//! when the StatefulSet wants a replica and deletes it when scaled to zero.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::command::{CmdOutput, ScriptedRunner, Unscripted};
use crate::faults::FaultInjector;
use crate::gateway::{self, Workload, WorkloadKind};
use crate::journal::{self, Journal};
use crate::portforward::{ForwardStats, forward_connection};
use conformance_core::phase::Phase;
use conformance_core::scenario::DEFAULT_WORKSPACE;
use conformance_core::target::{Fault, TargetError, sandbox_resource_name, workspace_pvc_name};
use conformance_core::timeline::{Event, Recorder, StartCount};
use conformance_core::topology::SupervisorPlacement;
use kube_emulator::{Cluster, ClusterConfig, ExecOutput, ExecRequest, PatchKind, ResourceRef};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "openshell";
/// Where the Agent Sandbox manifest puts its controller (docs/upstream-facts.md F8.1).
const AS_NS: &str = "agent-sandbox-system";

/// The resource (and pod) name of the sandbox `name` the harness creates.
/// The options of a kind run the leftovers and diagnostics tests resolve: one run directory,
/// the rest as a user's defaults.
fn kind_args(run_dir: impl Into<std::path::PathBuf>) -> crate::options::RealArgs {
    crate::options::RealArgs {
        cluster_name: "openshell-conformance".into(),
        chart: "oci://x".into(),
        chart_version: "0.0.111".into(),
        agent_sandbox_version: "v0.5.0".into(),
        openshell_bin: "openshell".into(),
        run_dir: Some(run_dir.into()),
        ..crate::options::RealArgs::default()
    }
}

fn kind_options(run_dir: impl Into<std::path::PathBuf>) -> crate::options::RealOptions {
    kind_args(run_dir)
        .resolve(crate::options::Provider::Kind, "r1", "/repo")
        .unwrap()
}

fn cr(name: &str) -> String {
    sandbox_resource_name(DEFAULT_WORKSPACE, name)
}

/// (container, argv) of an exec the emulator received.
type ExecSeen = (String, Vec<String>);

fn cluster() -> Cluster {
    Cluster::new(ClusterConfig {
        namespaces: ["default", "kube-system", NS, AS_NS]
            .map(String::from)
            .to_vec(),
        crds: vec![
            serde_saphyr::from_str(include_str!(
                "../../../../fixtures/crds/sandboxes.agents.x-k8s.io.yaml"
            ))
            .unwrap(),
        ],
        ..ClusterConfig::default()
    })
}

fn selector() -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "openshell".to_string(),
        ),
        (
            "app.kubernetes.io/instance".to_string(),
            "openshell".to_string(),
        ),
    ])
}

fn sts() -> ResourceRef {
    ResourceRef::new("apps", "v1", "statefulsets")
}

/// Creates `StatefulSet/openshell` and returns its uid.
fn create_gateway(c: &Cluster, replicas: i32) -> String {
    let o = c
        .create(
            &sts(),
            Some(NS),
            json!({
                "metadata": {"name": "openshell", "labels": selector()},
                "spec": {"replicas": replicas, "serviceName": "openshell",
                         "selector": {"matchLabels": selector()},
                         "template": {"metadata": {"labels": selector()},
                                      "spec": {"containers": [{"name": "openshell-gateway", "image": "gw:1"}]}}}
            }),
        )
        .unwrap();
    o["metadata"]["uid"].as_str().unwrap().to_string()
}

/// Creates a Running, Ready pod (as kubelet would report it).
fn running_pod(
    c: &Cluster,
    name: &str,
    labels: Value,
    owner: Option<(&str, &str, &str)>,
    containers: &[&str],
) -> String {
    running_pod_with(c, name, labels, owner, containers, false)
}

fn running_pod_with(
    c: &Cluster,
    name: &str,
    labels: Value,
    owner: Option<(&str, &str, &str)>,
    containers: &[&str],
    share_process_namespace: bool,
) -> String {
    let mut meta = json!({"name": name, "labels": labels});
    if let Some((kind, oname, uid)) = owner {
        meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind, "name": oname, "uid": uid, "controller": true}]);
    }
    let cs: Vec<Value> = containers
        .iter()
        .map(|n| json!({"name": n, "image": "i:1"}))
        .collect();
    let p = c
        .create(
            &ResourceRef::pods(),
            Some(NS),
            // The gateway's grace period is 5 s (docs/upstream-facts.md F5.2); the same for every
            // test pod.
            json!({"metadata": meta, "spec": {"containers": cs, "terminationGracePeriodSeconds": 5,
                                              "shareProcessNamespace": share_process_namespace}}),
        )
        .unwrap();
    c.bind_pod(NS, name, "node-1").unwrap();
    let statuses: Vec<Value> = containers
        .iter()
        .map(|n| json!({"name": n, "ready": true, "restartCount": 0, "image": "i:1", "imageID": "", "state": {"running": {"startedAt": c.now_rfc3339()}}}))
        .collect();
    c.patch_status(
        &ResourceRef::pods(),
        Some(NS),
        name,
        PatchKind::Merge,
        &json!({"status": {"phase": "Running", "podIP": "10.244.0.9",
                "conditions": [{"type": "Ready", "status": "True"}], "containerStatuses": statuses}}),
    )
    .unwrap();
    p["metadata"]["uid"].as_str().unwrap().to_string()
}

fn exists(c: &Cluster, r: &ResourceRef, name: &str) -> Option<Value> {
    c.get(r, Some(NS), name).ok()
}

/// Plays the StatefulSet controller for `openshell` with one ordinal, and answers the gateway
/// port with `gen-N:` + what it read, N counting pod generations.
fn run_sts_controller(
    c: Cluster,
    sts_uid: String,
    generation: Arc<AtomicU32>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let want = exists(&c, &sts(), "openshell")
                .and_then(|s| s["spec"]["replicas"].as_i64())
                .unwrap_or(0);
            let pod = exists(&c, &ResourceRef::pods(), "openshell-0");
            match (want > 0, pod) {
                (true, None) => {
                    let g = generation.fetch_add(1, Ordering::SeqCst) + 1;
                    running_pod(
                        &c,
                        "openshell-0",
                        json!(selector()),
                        Some(("StatefulSet", "openshell", &sts_uid)),
                        &["openshell-gateway"],
                    );
                    c.register_port(
                        NS,
                        "openshell-0",
                        8080,
                        move |mut s: tokio::io::DuplexStream| {
                            tokio::spawn(async move {
                                let mut buf = [0u8; 4];
                                if s.read_exact(&mut buf).await.is_ok() {
                                    let _ = s.write_all(format!("gen-{g}:").as_bytes()).await;
                                    let _ = s.write_all(&buf).await;
                                }
                            });
                        },
                    );
                }
                (false, Some(p)) if p["metadata"]["deletionTimestamp"].is_null() => {
                    let _ = c.delete(
                        &ResourceRef::pods(),
                        Some(NS),
                        "openshell-0",
                        &Default::default(),
                    );
                }
                _ => {}
            }
            let ready = exists(&c, &ResourceRef::pods(), "openshell-0")
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .map(|_| 1)
                .unwrap_or(0);
            let _ = c.patch_status(
                &sts(),
                Some(NS),
                "openshell",
                PatchKind::Merge,
                &json!({"status": {"replicas": ready, "readyReplicas": ready}}),
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Deletes the gateway pod and lets [`run_sts_controller`] replace it (its second generation).
async fn replace_gateway_pod(c: &Cluster, generation: &AtomicU32) {
    c.delete(
        &ResourceRef::pods(),
        Some(NS),
        "openshell-0",
        &Default::default(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(generation.load(Ordering::SeqCst), 2);
}

fn workload() -> Workload {
    Workload {
        kind: WorkloadKind::StatefulSet,
        namespace: NS.into(),
        name: "openshell".into(),
        selector: selector(),
    }
}

async fn roundtrip(c: &Cluster, stats: &ForwardStats) -> Result<String, TargetError> {
    let (mut mine, theirs) = tokio::io::duplex(1024);
    let client = c.client();
    let w = workload();
    let fwd = async move {
        forward_connection(&client, &w, 8080, Duration::from_secs(5), stats, theirs).await
    };
    let talk = async {
        mine.write_all(b"ping").await.unwrap();
        // The client closes its side, as a CLI does when done; the forward then ends.
        mine.shutdown().await.unwrap();
        let mut got = Vec::new();
        let _ = mine.read_to_end(&mut got).await;
        String::from_utf8(got).unwrap()
    };
    let (r, text) = tokio::join!(fwd, talk);
    r.map(|_| text)
}

#[tokio::test(start_paused = true)]
async fn the_port_forward_resolves_the_gateway_pod_again_for_each_connection() {
    let c = cluster();
    let uid = create_gateway(&c, 1);
    // The certgen Job's pod carries the same labels (docs/upstream-facts.md F5.7); it must never be
    // picked. The emulator serves no Jobs, so a ConfigMap stands in as the owner object (the
    // garbage collector only needs the uid to exist); the owner reference says kind Job.
    let owner = c
        .create(
            &ResourceRef::new("", "v1", "configmaps"),
            Some(NS),
            json!({"metadata": {"name": "openshell-certgen"}}),
        )
        .unwrap();
    let owner_uid = owner["metadata"]["uid"].as_str().unwrap().to_string();
    running_pod(
        &c,
        "openshell-certgen-x",
        json!(selector()),
        Some(("Job", "openshell-certgen", &owner_uid)),
        &["certgen"],
    );
    let generation = Arc::new(AtomicU32::new(0));
    let ctl = run_sts_controller(c.clone(), uid, generation.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = ForwardStats::default();
    assert_eq!(roundtrip(&c, &stats).await.unwrap(), "gen-1:ping");

    // The gateway pod is replaced: the next connection reaches the new pod.
    replace_gateway_pod(&c, &generation).await;
    assert_eq!(roundtrip(&c, &stats).await.unwrap(), "gen-2:ping");

    // Scaled to zero: a connection is refused after the short resolve wait, like an outage.
    gateway::scale(&c.client(), &workload(), 0).await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let err = roundtrip(&c, &stats).await.unwrap_err();
    assert!(err.to_string().contains("no ready gateway pod"), "{err}");
    assert_eq!(stats.refused.load(Ordering::Relaxed), 1);

    // Scaled back: access works again without restarting anything.
    gateway::scale(&c.client(), &workload(), 1).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(roundtrip(&c, &stats).await.unwrap(), "gen-3:ping");
    assert_eq!(stats.connections.load(Ordering::Relaxed), 4);
    assert_eq!(
        stats.last_pod.lock().unwrap().as_deref(),
        Some("openshell-0")
    );
    ctl.abort();
}

#[tokio::test(start_paused = true)]
async fn a_wait_on_the_cluster_ends_when_what_it_watches_changes_not_a_poll_later() {
    let c = cluster();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(c.client(), NS);
    let start = tokio::time::Instant::now();
    let maker = {
        let c = c.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1000)).await;
            running_pod(&c, "late", json!({}), None, &["x"]);
        })
    };
    let probes = AtomicU32::new(0);
    gateway::wait_until(
        "pod late there",
        Duration::from_secs(10),
        gateway::POLL,
        gateway::Wake::on(pods.clone(), gateway::named("late")),
        || async {
            probes.fetch_add(1, Ordering::SeqCst);
            let p = pods.get_opt("late").await.map_err(|e| {
                conformance_core::target::TargetError::infra_from("get pod late", e)
            })?;
            Ok((p.map(|_| ()), "absent".to_string()))
        },
    )
    .await
    .unwrap();
    // Polling alone probes at 0, 50, 150, 350, 750 and 1250 ms: the pod made at 1000 ms would
    // be seen 250 ms late.
    let waited = start.elapsed();
    assert!(
        waited < Duration::from_millis(1010),
        "seen after {waited:?}, {} probes",
        probes.load(Ordering::SeqCst)
    );
    maker.await.unwrap();
}

fn injector(c: &Cluster, dir: &std::path::Path, placement: SupervisorPlacement) -> FaultInjector {
    FaultInjector::new(
        c.client(),
        Journal::new(dir.join(journal::FILE_NAME), "kind-test", None),
        workload(),
        NS,
        placement,
        "agent",
    )
}

fn in_the_workload_container() -> SupervisorPlacement {
    SupervisorPlacement::WorkloadContainer
}

#[tokio::test(start_paused = true)]
async fn gateway_stop_scales_to_zero_journals_first_and_restores_the_original_replicas_verified_ready()
 {
    let c = cluster();
    let uid = create_gateway(&c, 1);
    let ctl = run_sts_controller(c.clone(), uid, Arc::new(AtomicU32::new(0)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().unwrap();
    let inj = injector(&c, dir.path(), in_the_workload_container());
    let rec = Recorder::new();
    inj.set_recorder(rec.clone());

    inj.inject(&Fault::GatewayStop).await.unwrap();
    assert!(
        exists(&c, &ResourceRef::pods(), "openshell-0").is_none(),
        "the gateway pod is gone once inject returns"
    );
    assert_eq!(
        exists(&c, &sts(), "openshell").unwrap()["spec"]["replicas"],
        0
    );
    let entries = Journal::read(&dir.path().join(journal::FILE_NAME))
        .await
        .unwrap()
        .entries;
    assert_eq!(
        entries.len(),
        1,
        "the journal holds the way back while the fault is on"
    );

    // While the gateway is stopped its restore does not verify, naming what it saw.
    let err = inj
        .verify_restored(&Fault::GatewayStop)
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "gateway {}/openshell has 0 of 0 replicas ready",
            workload().namespace
        )
    );

    tokio::time::sleep(Duration::from_secs(30)).await;
    inj.restore(&Fault::GatewayStop).await.unwrap();
    inj.verify_restored(&Fault::GatewayStop).await.unwrap();
    assert_eq!(
        exists(&c, &sts(), "openshell").unwrap()["spec"]["replicas"],
        1
    );
    assert!(
        gateway::pods(&c.client(), &workload())
            .await
            .unwrap()
            .iter()
            .any(gateway::pod_ready)
    );
    assert!(
        !dir.path().join(journal::FILE_NAME).exists(),
        "a restored fault leaves no journal"
    );
    assert!(inj.active().await.is_empty());

    // The actual window is on the timeline: pods gone, then ready again 30 s or more later.
    let obs: BTreeMap<String, u64> = rec
        .snapshot()
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Observation { key, value, .. } => Some((key.clone(), value.as_u64().unwrap())),
            _ => None,
        })
        .collect();
    let gone = obs["gateway-stop.pods-gone-ms"];
    let back = obs["gateway-stop.ready-again-ms"];
    assert!(back - gone >= 30_000, "window {gone}..{back}");
    ctl.abort();
}

#[tokio::test(start_paused = true)]
async fn after_a_simulated_kill_the_journal_restores_the_stopped_gateway() {
    let c = cluster();
    let uid = create_gateway(&c, 1);
    let ctl = run_sts_controller(c.clone(), uid, Arc::new(AtomicU32::new(0)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().unwrap();
    {
        let inj = injector(&c, dir.path(), in_the_workload_container());
        inj.inject(&Fault::GatewayStop).await.unwrap();
        // The process "dies" here: no restore, no guard.
    }
    assert_eq!(
        exists(&c, &sts(), "openshell").unwrap()["spec"]["replicas"],
        0
    );
    let path = dir.path().join(journal::FILE_NAME);
    let report = journal::restore_from(&path, &c.client(), Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(report.restored.len(), 1, "{report}");
    assert_eq!(
        exists(&c, &sts(), "openshell").unwrap()["spec"]["replicas"],
        1
    );
    assert!(
        gateway::pods(&c.client(), &workload())
            .await
            .unwrap()
            .iter()
            .any(gateway::pod_ready)
    );
    assert!(!path.exists());
    // Running it again finds nothing to do.
    let again = journal::restore_from(&path, &c.client(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(again.to_string(), "nothing to restore\n");
    ctl.abort();
}

#[tokio::test(start_paused = true)]
async fn a_restore_that_cannot_complete_keeps_the_journal_and_names_the_wait() {
    let c = cluster();
    create_gateway(&c, 1);
    // No controller: scaling back never brings a pod, so the restore runs out.
    let dir = tempfile::tempdir().unwrap();
    let inj = injector(&c, dir.path(), in_the_workload_container());
    inj.inject(&Fault::GatewayStop).await.unwrap();
    let path = dir.path().join(journal::FILE_NAME);
    let err = journal::restore_from(&path, &c.client(), Duration::from_secs(20))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("gave up after 20s"), "{msg}");
    assert!(msg.contains("last seen: readyReplicas=0; no pods"), "{msg}");
    assert_eq!(
        Journal::read(&path).await.unwrap().entries.len(),
        1,
        "kept for a later restore"
    );
}

#[tokio::test(start_paused = true)]
async fn gateway_restart_deletes_the_pod_and_restore_waits_for_a_new_ready_one() {
    let c = cluster();
    let uid = create_gateway(&c, 1);
    let generation = Arc::new(AtomicU32::new(0));
    let ctl = run_sts_controller(c.clone(), uid, generation.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let old = exists(&c, &ResourceRef::pods(), "openshell-0").unwrap()["metadata"]["uid"].clone();
    let dir = tempfile::tempdir().unwrap();
    let inj = injector(&c, dir.path(), in_the_workload_container());
    inj.inject(&Fault::GatewayRestart).await.unwrap();
    inj.restore(&Fault::GatewayRestart).await.unwrap();
    let new = exists(&c, &ResourceRef::pods(), "openshell-0").unwrap()["metadata"]["uid"].clone();
    assert_ne!(old, new);
    assert_eq!(generation.load(Ordering::SeqCst), 2);
    ctl.abort();
}

/// Plays the Agent Sandbox controller for one sandbox pod: recreates it after deletion with
/// the same name and a new uid (docs/upstream-facts.md F4.12).
fn run_sandbox_pod_controller(
    c: Cluster,
    name: String,
    labels: Value,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if exists(&c, &ResourceRef::pods(), &name).is_none() {
                running_pod(&c, &name, labels.clone(), None, &["agent"]);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

#[tokio::test(start_paused = true)]
async fn sandbox_pod_replace_is_restored_once_a_replacement_with_a_new_uid_exists() {
    let c = cluster();
    let ctl = run_sandbox_pod_controller(
        c.clone(),
        cr("demo"),
        json!({"agents.x-k8s.io/sandbox-name-hash": "523e82a3"}),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let old = exists(&c, &ResourceRef::pods(), &cr("demo")).unwrap()["metadata"]["uid"].clone();
    let dir = tempfile::tempdir().unwrap();
    let inj = injector(&c, dir.path(), in_the_workload_container());
    let f = Fault::SandboxPodReplace {
        sandbox: "demo".into(),
    };
    inj.inject(&f).await.unwrap();
    inj.restore(&f).await.unwrap();
    let new = exists(&c, &ResourceRef::pods(), &cr("demo")).unwrap()["metadata"]["uid"].clone();
    assert_ne!(old, new);
    ctl.abort();
}

#[tokio::test(start_paused = true)]
async fn a_restored_pod_replacement_is_verified_by_the_replacement_being_there() {
    let c = cluster();
    running_pod(&c, &cr("demo"), json!({}), None, &["agent"]);
    let dir = tempfile::tempdir().unwrap();
    let inj = injector(&c, dir.path(), in_the_workload_container());
    let f = Fault::SandboxPodReplace {
        sandbox: "demo".into(),
    };
    inj.verify_restored(&f).await.unwrap();
    c.delete(
        &ResourceRef::pods(),
        Some(NS),
        &cr("demo"),
        &Default::default(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let err = inj.verify_restored(&f).await.unwrap_err();
    assert!(matches!(err, TargetError::Infra { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains(&format!("pod {} has no replacement", cr("demo"))),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_pod_replace_without_a_controller_fails_naming_the_pod_and_what_was_seen() {
    let c = cluster();
    running_pod(&c, &cr("demo"), json!({}), None, &["agent"]);
    let dir = tempfile::tempdir().unwrap();
    let mut inj = injector(&c, dir.path(), in_the_workload_container());
    inj.deadlines.replacement = Duration::from_secs(10);
    let f = Fault::SandboxPodReplace {
        sandbox: "demo".into(),
    };
    inj.inject(&f).await.unwrap();
    let err = inj.restore(&f).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "replacement of pod {}: gave up after 10s",
            cr("demo")
        )),
        "{err}"
    );
    assert_eq!(
        inj.active().await.len(),
        1,
        "still active: the guard or restore can retry"
    );
}

/// Marks container `container` of pod `name` terminated with exit code 137, as the kubelet
/// reports a SIGKILLed main process under `restartPolicy: Never`.
fn terminate_container(c: &Cluster, name: &str, container: &str) {
    let pod = exists(c, &ResourceRef::pods(), name).unwrap();
    let mut statuses = pod["status"]["containerStatuses"].clone();
    for st in statuses.as_array_mut().unwrap() {
        if st["name"] == container {
            st["state"] = json!({"terminated": {"exitCode": 137, "reason": "Error"}});
            st["ready"] = json!(false);
        }
    }
    c.patch_status(
        &ResourceRef::pods(),
        Some(NS),
        name,
        PatchKind::Merge,
        &json!({"status": {"containerStatuses": statuses}}),
    )
    .unwrap();
}

/// Gives every container of pod `name` a container ID.
fn with_container_ids(c: &Cluster, name: &str) {
    let pod = exists(c, &ResourceRef::pods(), name).unwrap();
    let mut statuses = pod["status"]["containerStatuses"].clone();
    for st in statuses.as_array_mut().unwrap() {
        st["containerID"] = json!(format!("containerd://id-{}", st["name"].as_str().unwrap()));
    }
    c.patch_status(
        &ResourceRef::pods(),
        Some(NS),
        name,
        PatchKind::Merge,
        &json!({"status": {"containerStatuses": statuses}}),
    )
    .unwrap();
}

fn sidecar() -> SupervisorPlacement {
    SupervisorPlacement::SidecarContainer {
        container: "openshell-supervisor-network".into(),
    }
}

#[tokio::test(start_paused = true)]
async fn supervisor_kill_with_a_shared_process_namespace_execs_the_kill_and_sees_the_container_end()
{
    let c = cluster();
    running_pod_with(
        &c,
        &cr("demo"),
        json!({}),
        None,
        &["agent", "openshell-supervisor-network"],
        true,
    );
    let seen: Arc<std::sync::Mutex<Vec<ExecSeen>>> = Default::default();
    let s = seen.clone();
    let cc = c.clone();
    c.register_exec(
        NS,
        &cr("demo"),
        "openshell-supervisor-network",
        move |req: ExecRequest| {
            s.lock()
                .unwrap()
                .push((req.container.clone(), req.argv.clone()));
            terminate_container(&cc, &cr("demo"), "openshell-supervisor-network");
            Box::pin(async {
                ExecOutput {
                    stdout: vec![],
                    stderr: vec![],
                    exit_code: 137,
                }
            }) as futures::future::BoxFuture<'static, ExecOutput>
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let inj = injector(&c, dir.path(), sidecar());
    let f = Fault::SupervisorKill {
        sandbox: "demo".into(),
    };
    inj.inject(&f).await.unwrap();
    inj.restore(&f).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0, "openshell-supervisor-network");
    assert_eq!(seen[0].1[..2], ["sh".to_string(), "-c".into()]);
}

/// Runs a node command by marking the container terminated, as the kubelet would report it.
struct KillsOnNode {
    c: Cluster,
    pod: String,
    container: String,
    lines: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl crate::command::CommandRunner for KillsOnNode {
    async fn run(&self, cmd: &crate::command::Cmd) -> Result<CmdOutput, crate::command::CmdError> {
        self.lines.lock().unwrap().push(cmd.line());
        terminate_container(&self.c, &self.pod, &self.container);
        Ok(CmdOutput::ok(""))
    }
}

#[tokio::test(start_paused = true)]
async fn a_supervisor_that_is_pid_1_is_killed_from_the_node_by_its_container_id() {
    let c = cluster();
    running_pod(&c, &cr("demo"), json!({}), None, &["agent"]);
    with_container_ids(&c, &cr("demo"));
    let dir = tempfile::tempdir().unwrap();
    let mut inj = injector(&c, dir.path(), in_the_workload_container());
    let node = Arc::new(KillsOnNode {
        c: c.clone(),
        pod: cr("demo"),
        container: "agent".into(),
        lines: Default::default(),
    });
    inj.set_node_runner(node.clone());
    let f = Fault::SupervisorKill {
        sandbox: "demo".into(),
    };
    inj.inject(&f).await.unwrap();
    let lines = node.lines.lock().unwrap().clone();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("docker exec node-1 sh -c")
            && lines[0].contains("crictl inspect")
            && lines[0].contains(" id-agent)")
            && lines[0].contains("kill -KILL"),
        "{}",
        lines[0]
    );
}

/// Plays kubelet for node-access pods: marks them Running once created.
fn run_node_pod_kubelet(c: Cluster) -> tokio::task::JoinHandle<()> {
    run_test_kubelet(
        c,
        |name| name.starts_with("openshell-conformance-node-kill-"),
        None,
        "node-access",
    )
}

#[tokio::test(start_paused = true)]
async fn a_pid_1_supervisor_without_node_access_is_killed_from_a_host_pid_pod_that_is_then_removed()
{
    let c = cluster();
    running_pod(&c, &cr("demo"), json!({}), None, &["agent"]);
    with_container_ids(&c, &cr("demo"));
    let kubelet = run_node_pod_kubelet(c.clone());
    let node_pod = crate::faults::node_pod::node_pod_name("id-agent");
    // The node-access pod as the exec found it, and the exec's argv.
    type Seen = Vec<(Value, Vec<String>)>;
    let seen: Arc<std::sync::Mutex<Seen>> = Default::default();
    let (s, cc) = (seen.clone(), c.clone());
    let dir = tempfile::tempdir().unwrap();
    let journal_path = dir.path().join(journal::FILE_NAME);
    let jp = journal_path.clone();
    c.register_exec(NS, &node_pod, "node-access", move |req: ExecRequest| {
        let pod = exists(&cc, &ResourceRef::pods(), &req.pod).unwrap();
        let journal = std::fs::read_to_string(&jp).unwrap_or_default();
        assert!(
            journal.contains(&req.pod),
            "journaled before it exists: {journal}"
        );
        s.lock().unwrap().push((pod, req.argv.clone()));
        terminate_container(&cc, &cr("demo"), "agent");
        Box::pin(async {
            ExecOutput {
                stdout: b"1\n".to_vec(),
                stderr: vec![],
                exit_code: 0,
            }
        }) as futures::future::BoxFuture<'static, ExecOutput>
    });
    let inj = injector(&c, dir.path(), in_the_workload_container());
    inj.inject(&Fault::SupervisorKill {
        sandbox: "demo".into(),
    })
    .await
    .unwrap();
    kubelet.abort();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let (pod, argv) = &seen[0];
    assert_eq!(pod["spec"]["hostPID"], true);
    assert_eq!(pod["spec"]["nodeName"], "node-1");
    assert_eq!(
        pod["spec"]["containers"][0]["securityContext"]["privileged"],
        true
    );
    assert_eq!(
        pod["metadata"]["labels"][crate::pins::NODE_ACCESS_LABEL],
        "supervisor-kill"
    );
    assert_eq!(argv[..2], ["sh".to_string(), "-c".into()]);
    assert!(
        argv[2].contains("/proc/[0-9]*") && argv[2].contains("cgroup"),
        "{}",
        argv[2]
    );
    assert_eq!(argv.last().map(String::as_str), Some("id-agent"));
    assert!(
        exists(&c, &ResourceRef::pods(), &node_pod).is_none(),
        "the node-access pod is gone"
    );
    assert!(!journal_path.exists(), "the journal is consumed");
}

#[tokio::test(start_paused = true)]
async fn a_node_access_kill_that_finds_no_process_is_an_error_and_still_removes_its_pod() {
    let c = cluster();
    running_pod(&c, &cr("demo"), json!({}), None, &["agent"]);
    with_container_ids(&c, &cr("demo"));
    let kubelet = run_node_pod_kubelet(c.clone());
    let node_pod = crate::faults::node_pod::node_pod_name("id-agent");
    c.register_exec(NS, &node_pod, "node-access", move |_req: ExecRequest| {
        Box::pin(async {
            ExecOutput {
                stdout: b"0\n".to_vec(),
                stderr: vec![],
                exit_code: 0,
            }
        }) as futures::future::BoxFuture<'static, ExecOutput>
    });
    let dir = tempfile::tempdir().unwrap();
    let inj = injector(&c, dir.path(), in_the_workload_container());
    let err = inj
        .inject(&Fault::SupervisorKill {
            sandbox: "demo".into(),
        })
        .await
        .unwrap_err();
    kubelet.abort();
    assert!(matches!(err, TargetError::Infra { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("no process of container agent (id-agent)"),
        "{err}"
    );
    assert!(
        exists(&c, &ResourceRef::pods(), &node_pod).is_none(),
        "the node-access pod is gone"
    );
    assert!(
        !dir.path().join(journal::FILE_NAME).exists(),
        "the journal is consumed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_kill_whose_effect_is_never_seen_is_an_infrastructure_error_naming_the_fault() {
    let c = cluster();
    running_pod_with(
        &c,
        &cr("demo"),
        json!({}),
        None,
        &["agent", "openshell-supervisor-network"],
        true,
    );
    // The kill runs and nothing ends (the old `kill -KILL 1` in a PID namespace of its own).
    c.register_exec(
        NS,
        &cr("demo"),
        "openshell-supervisor-network",
        move |_req: ExecRequest| {
            Box::pin(async {
                ExecOutput {
                    stdout: vec![],
                    stderr: vec![],
                    exit_code: 0,
                }
            }) as futures::future::BoxFuture<'static, ExecOutput>
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let mut inj = injector(&c, dir.path(), sidecar());
    inj.deadlines.replacement = Duration::from_secs(20);
    let err = inj
        .inject(&Fault::SupervisorKill {
            sandbox: "demo".into(),
        })
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, TargetError::Infra { .. }), "{err:?}");
    assert!(
        text.contains(&format!(
            "fault supervisor-kill: container openshell-supervisor-network of pod {} stopped or restarted: gave up after 20s; last seen: running",
            cr("demo")
        )),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn supervisor_kill_in_a_dedicated_pod_deletes_that_pod_only() {
    let c = cluster();
    let ctl = run_sandbox_pod_controller(
        c.clone(),
        "sup-demo".into(),
        json!({"app": "openshell-supervisor", "openshell.ai/sandbox-name": cr("demo")}),
    );
    running_pod(
        &c,
        "sup-other",
        json!({"app": "openshell-supervisor", "openshell.ai/sandbox-name": cr("other")}),
        None,
        &["supervisor"],
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let old = exists(&c, &ResourceRef::pods(), "sup-demo").unwrap()["metadata"]["uid"].clone();
    let other = exists(&c, &ResourceRef::pods(), "sup-other").unwrap()["metadata"]["uid"].clone();
    let dir = tempfile::tempdir().unwrap();
    let inj = injector(
        &c,
        dir.path(),
        SupervisorPlacement::DedicatedPod {
            name_suffix: "-supervisor".into(),
            container: "supervisor".into(),
            selector: BTreeMap::from([("app".to_string(), "openshell-supervisor".to_string())]),
            sandbox_label: "openshell.ai/sandbox-name".into(),
        },
    );
    let f = Fault::SupervisorKill {
        sandbox: "demo".into(),
    };
    inj.inject(&f).await.unwrap();
    inj.restore(&f).await.unwrap();
    assert_ne!(
        exists(&c, &ResourceRef::pods(), "sup-demo").unwrap()["metadata"]["uid"],
        old
    );
    let o = exists(&c, &ResourceRef::pods(), "sup-other").unwrap();
    assert_eq!(o["metadata"]["uid"], other);
    assert!(o["metadata"]["deletionTimestamp"].is_null());
    ctl.abort();
}

#[tokio::test(start_paused = true)]
async fn faults_the_real_target_cannot_do_yet_are_unsupported_not_errors() {
    let c = cluster();
    let dir = tempfile::tempdir().unwrap();
    let inj = injector(&c, dir.path(), in_the_workload_container());
    let err = inj
        .inject(&Fault::MainProcessKill {
            sandbox: "demo".into(),
        })
        .await
        .unwrap_err();
    assert!(matches!(err, TargetError::Unsupported(_)), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn the_restore_guard_restores_a_stopped_gateway_when_dropped() {
    let c = cluster();
    let uid = create_gateway(&c, 1);
    let ctl = run_sts_controller(c.clone(), uid, Arc::new(AtomicU32::new(0)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().unwrap();
    let inj = Arc::new(injector(&c, dir.path(), in_the_workload_container()));
    inj.inject(&Fault::GatewayStop).await.unwrap();
    drop(crate::faults::RestoreGuard::new(inj.clone()));
    // On a current-thread runtime the guard spawns the restore; let it run.
    for _ in 0..100 {
        if inj.active().await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(inj.active().await.is_empty());
    assert_eq!(
        exists(&c, &sts(), "openshell").unwrap()["spec"]["replicas"],
        1
    );
    ctl.abort();
}

#[tokio::test(start_paused = true)]
async fn exec_through_the_api_returns_output_and_the_exit_code() {
    let c = cluster();
    running_pod(&c, &cr("demo"), json!({}), None, &["agent"]);
    c.register_exec(NS, &cr("demo"), "agent", |req: ExecRequest| {
        let code = if req.argv.last().map(String::as_str) == Some("fail") {
            3
        } else {
            0
        };
        Box::pin(async move {
            ExecOutput {
                stdout: b"out\n".to_vec(),
                stderr: b"err\n".to_vec(),
                exit_code: code,
            }
        }) as futures::future::BoxFuture<'static, ExecOutput>
    });
    let ok = crate::kexec::exec(
        &c.client(),
        NS,
        &cr("demo"),
        "agent",
        &["echo".into(), "ok".into()],
    )
    .await
    .unwrap();
    assert_eq!(
        (ok.exit_code, ok.stdout.as_str(), ok.stderr.as_str()),
        (0, "out\n", "err\n")
    );
    let bad = crate::kexec::exec(&c.client(), NS, &cr("demo"), "agent", &["fail".into()])
        .await
        .unwrap();
    assert_eq!(bad.exit_code, 3);
}

#[tokio::test(start_paused = true)]
async fn the_event_observer_records_events_of_the_namespace() {
    let c = cluster();
    let rec = Recorder::new();
    let task = conformance_observe::spawn_events(c.client(), NS, rec.clone());
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.create(
        &ResourceRef::new("", "v1", "events"),
        Some(NS),
        json!({"metadata": {"name": format!("{}.1", cr("demo"))}, "involvedObject": {"kind": "Pod", "name": cr("demo"), "namespace": NS},
               "reason": "Killing", "type": "Normal", "message": "Stopping container agent"}),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let states = rec.last_states();
    let e = states
        .iter()
        .find(|s| s.kind == "Event")
        .expect("an event state");
    assert_eq!(e.phase.as_deref(), Some("Killing"));
    assert_eq!(e.labels["involved"], format!("Pod/{}", cr("demo")));
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn leftovers_of_another_run_are_found_and_stop_the_run_or_are_swept() {
    use crate::leftovers;
    use crate::options::Provider;
    let c = cluster();
    let ns = ResourceRef::new("", "v1", "namespaces");
    c.create(&ns, None, json!({"metadata": {"name": "old-run-ns", "labels": {"openshell-conformance.io/run": "old"}}})).unwrap();
    c.create(
        &ns,
        None,
        json!({"metadata": {"name": "mine", "labels": {"openshell-conformance.io/run": "r1"}}}),
    )
    .unwrap();
    c.create(
        &ResourceRef::new("agents.x-k8s.io", "v1beta1", "sandboxes"),
        Some(NS),
        json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
        "metadata": {"name": cr("stale")}, "spec": {"podTemplate": {"spec": {"containers": []}}}}),
    )
    .unwrap();
    let pvcs = ResourceRef::new("", "v1", "persistentvolumeclaims");
    c.create(
        &pvcs,
        Some(NS),
        json!({"metadata": {"name": "openshell-data-openshell-0"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .unwrap();
    let runner = ScriptedRunner::new(Unscripted::Succeed);
    runner.respond(
        "helm list",
        CmdOutput::ok(r#"[{"name":"openshell","namespace":"openshell"}]"#),
    );
    let mut args = kind_args("/run-dir");
    let opts = args.resolve(Provider::Kind, "r1", "/repo").unwrap();
    let found = leftovers::find(&c.client(), &runner, &opts).await.unwrap();
    assert_eq!(found.namespaces, vec!["old-run-ns".to_string()]);
    assert_eq!(found.releases, vec!["openshell".to_string()]);
    assert_eq!(found.sandboxes, vec![format!("openshell/{}", cr("stale"))]);
    assert_eq!(
        found.data_pvcs,
        vec!["openshell-data-openshell-0".to_string()]
    );
    assert!(
        found
            .to_string()
            .contains("gateway data volumes: openshell-data-openshell-0")
    );
    let err = leftovers::handle(&c.client(), &runner, &opts, &found)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--sweep-leftovers"), "{err}");
    assert!(
        exists(
            &c,
            &ResourceRef::new("agents.x-k8s.io", "v1beta1", "sandboxes"),
            &cr("stale")
        )
        .is_some(),
        "stop changes nothing"
    );

    args.sweep_leftovers = true;
    let opts = args.resolve(Provider::Kind, "r1", "/repo").unwrap();
    leftovers::handle(&c.client(), &runner, &opts, &found)
        .await
        .unwrap();
    assert!(
        exists(
            &c,
            &ResourceRef::new("agents.x-k8s.io", "v1beta1", "sandboxes"),
            &cr("stale")
        )
        .is_none()
    );
    assert!(
        runner
            .lines()
            .iter()
            .any(|l| l.starts_with("helm uninstall openshell --namespace openshell"))
    );
    assert!(exists(&c, &pvcs, "openshell-data-openshell-0").is_none());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let gone = c.get(&ns, None, "old-run-ns");
    assert!(gone.is_err() || !gone.unwrap()["metadata"]["deletionTimestamp"].is_null());
}

fn mark_running(c: &Cluster, pod: &str, container: &str) {
    let _ = c.patch_status(
        &ResourceRef::pods(),
        Some(NS),
        pod,
        PatchKind::Merge,
        &json!({"status": {"phase": "Running", "containerStatuses": [{"name": container, "ready": true, "restartCount": 0,
                "image": "i", "imageID": "", "state": {"running": {"startedAt": c.now_rfc3339()}}}]}}),
    );
}

/// Plays kubelet for pods named `*-ws-reader`: marks them Running once created.
fn run_reader_kubelet(c: Cluster) -> tokio::task::JoinHandle<()> {
    run_test_kubelet(
        c,
        |name| name.ends_with("-ws-reader"),
        Some("node-1"),
        "reader",
    )
}

/// Plays kubelet for the pods in `NS` whose name `wanted` accepts: binds them to `node` (when
/// given) and marks them Running with one `container`, once created.
fn run_test_kubelet(
    c: Cluster,
    wanted: fn(&str) -> bool,
    node: Option<&'static str>,
    container: &'static str,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Ok((pods, _)) = c.list(&ResourceRef::pods(), Some(NS), &Default::default()) {
                for p in pods {
                    let name = p["metadata"]["name"].as_str().unwrap_or_default();
                    if wanted(name) && p["status"]["phase"] != "Running" {
                        if let Some(node) = node {
                            let _ = c.bind_pod(NS, name, node);
                        }
                        mark_running(&c, name, container);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// A sandbox pod `demo` running with its workspace claim mounted at /sandbox, where `script`
/// has written through the emulator's shell.
async fn sandbox_with_workspace(c: &Cluster, script: &str) {
    c.create(
        &ResourceRef::new("", "v1", "persistentvolumeclaims"),
        Some(NS),
        json!({"metadata": {"name": workspace_pvc_name(&cr("demo"))},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}}),
    )
    .unwrap();
    // The sandbox pod mounts the claim at /sandbox; the emulator's shell writes through it.
    c.create(
        &ResourceRef::pods(),
        Some(NS),
        json!({"metadata": {"name": cr("demo")},
               "spec": {"containers": [{"name": "agent", "image": "i", "volumeMounts": [{"name": "workspace", "mountPath": "/sandbox"}]}],
                        "volumes": [{"name": "workspace", "persistentVolumeClaim": {"claimName": workspace_pvc_name(&cr("demo"))}}]}}),
    )
    .unwrap();
    c.bind_pod(NS, &cr("demo"), "node-1").unwrap();
    mark_running(c, &cr("demo"), "agent");
    let w = crate::kexec::exec(
        &c.client(),
        NS,
        &cr("demo"),
        "agent",
        &["sh".into(), "-c".into(), script.into()],
    )
    .await
    .unwrap();
    assert_eq!(w.exit_code, 0, "{w:?}");
}

/// While the sandbox pod's container that mounts the claim runs, the workspace is read in it:
/// no reader pod is started (none could be: no test kubelet runs one, so a read through a
/// reader pod would run into its deadline).
#[tokio::test(start_paused = true)]
async fn the_workspace_is_read_in_the_running_sandbox_container_without_a_reader_pod() {
    let c = cluster();
    sandbox_with_workspace(&c, "printf %s 3 > /sandbox/.starts").await;
    let read = |p: &'static str| {
        let client = c.client();
        async move {
            crate::workspace::read(&client, NS, &cr("demo"), p, "r1", Duration::from_secs(5)).await
        }
    };
    assert_eq!(read(".starts").await.unwrap().as_deref(), Some("3"));
    assert_eq!(read("missing").await.unwrap(), None);
    assert!(read("../etc/passwd").await.is_err());
    assert_no_reader_pods(&c);
}

/// Once the sandbox's container no longer runs (stopped, failed), the workspace is read through
/// a reader pod mounting the claim, which is removed again.
#[tokio::test(start_paused = true)]
async fn the_workspace_of_a_sandbox_whose_container_stopped_is_read_through_a_reader_pod() {
    let c = cluster();
    sandbox_with_workspace(&c, "printf %s 3 > /sandbox/.starts").await;
    let _ = c.patch_status(
        &ResourceRef::pods(),
        Some(NS),
        &cr("demo"),
        PatchKind::Merge,
        &json!({"status": {"phase": "Failed", "containerStatuses": [{"name": "agent", "ready": false, "restartCount": 0,
                "image": "i", "imageID": "", "state": {"terminated": {"exitCode": 1}}}]}}),
    );
    let read = |p: &'static str| {
        let client = c.client();
        async move {
            crate::workspace::read(&client, NS, &cr("demo"), p, "r1", Duration::from_secs(30)).await
        }
    };
    // No kubelet runs the reader pod yet: the read waits for it and says so.
    let err = read(".starts").await.unwrap_err().to_string();
    assert!(
        err.contains("reader pod") && err.contains("running"),
        "{err}"
    );
    let kubelet = run_reader_kubelet(c.clone());
    assert_eq!(read(".starts").await.unwrap().as_deref(), Some("3"));
    assert_eq!(read("/.starts").await.unwrap().as_deref(), Some("3"));
    assert_eq!(read("missing").await.unwrap(), None);
    assert!(read("../etc/passwd").await.is_err());
    // Every reader pod is removed again.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_no_reader_pods(&c);
    kubelet.abort();
}

#[tokio::test(start_paused = true)]
async fn the_gateway_is_found_as_a_deployment_when_there_is_no_statefulset() {
    let c = cluster();
    assert!(
        gateway::resolve(&c.client(), NS, "openshell")
            .await
            .unwrap_err()
            .to_string()
            .contains("neither StatefulSet nor Deployment")
    );
    c.create(
        &ResourceRef::new("apps", "v1", "deployments"),
        Some(NS),
        json!({"metadata": {"name": "openshell"},
               "spec": {"replicas": 2, "selector": {"matchLabels": selector()},
                        "template": {"metadata": {"labels": selector()}, "spec": {"containers": [{"name": "g", "image": "g"}]}}}}),
    )
    .unwrap();
    let w = gateway::resolve(&c.client(), NS, "openshell")
        .await
        .unwrap();
    assert_eq!(w.kind, WorkloadKind::Deployment);
    assert_eq!(w.selector, selector());
    gateway::scale(&c.client(), &w, 0).await.unwrap();
    assert_eq!(gateway::replicas(&c.client(), &w).await.unwrap().0, 0);
}

/// Files under `dir` (and inside its `.tar.gz` bundles) that hold key material or a
/// kubeconfig: what must never be uploaded with the artifacts.
fn secrets_in(dir: &std::path::Path) -> Vec<String> {
    fn suspicious(name: &str, text: &str) -> bool {
        (text.contains("-----BEGIN") && text.contains("PRIVATE KEY"))
            || text.contains("client-key-data")
            || (text.contains("kind: Config") && text.contains("users:"))
            || name.ends_with("kubeconfig")
            || name.ends_with("tls.key")
    }
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let name = p.display().to_string();
            let bytes = std::fs::read(&p).unwrap();
            if name.ends_with(".tar.gz") {
                let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
                for entry in ar.entries().unwrap() {
                    let mut entry = entry.unwrap();
                    let inner = format!("{name}:{}", entry.path().unwrap().display());
                    let mut text = String::new();
                    let _ = std::io::Read::read_to_string(&mut entry, &mut text);
                    if suspicious(&inner, &text) {
                        found.push(inner);
                    }
                }
            } else if suspicious(&name, &String::from_utf8_lossy(&bytes)) {
                found.push(name);
            }
        }
    }
    found
}

mod end_to_end {
    //! RealTarget through install, observe, a sandbox, a gateway stop and teardown, with the
    //! emulated API server for Kubernetes and recorded outputs for helm and the openshell CLI.

    use super::*;
    use crate::options::{Provider, RealArgs};
    use crate::target::RealTarget;
    use conformance_core::target::{Capability, SandboxSpec, Target, TargetInfo};
    use conformance_core::topology::Topologies;

    fn recorded(r: &ScriptedRunner) {
        r.respond(
            "helm list",
            CmdOutput::ok(
                r#"[{"name":"openshell","namespace":"openshell","app_version":"0.0.111"}]"#,
            ),
        );
        r.respond("openshell --version", CmdOutput::ok("openshell 0.0.111\n"));
        r.respond(
            "openshell sandbox create --help",
            CmdOutput::ok("Usage: openshell sandbox create [OPTIONS] [-- <COMMAND>...]\n"),
        );
        r.respond(
            "openshell sandbox create --name demo",
            CmdOutput::ok(
                r#"{"id":"1","name":"demo","workspace":"default","labels":{},"phase":"Ready"}"#,
            ),
        );
        r.respond(
            "openshell sandbox list -o json",
            CmdOutput::ok(r#"[{"id":"1","name":"demo","workspace":"default","labels":{"openshell-conformance.io/run":"r1"},"phase":"Ready"}]"#),
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_case_installs_observes_breaks_restores_and_tears_down() {
        let c = cluster();
        let uid = create_gateway(&c, 1);
        let ctl = run_sts_controller(c.clone(), uid, Arc::new(AtomicU32::new(0)));
        // The chart's client certificate (TLS is the chart default).
        c.create(
            &ResourceRef::new("", "v1", "secrets"),
            Some(NS),
            json!({"metadata": {"name": "openshell-client-tls"},
                   "data": {"ca.crt": "Q0E=", "tls.crt": "Q1JU", "tls.key": "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1DNENBUUF3QlFZREsyVndCQ0lFSUE9PQotLS0tLUVORCBQUklWQVRFIEtFWS0tLS0tCg=="}}),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let private = crate::tests::private_tempdir();
        let args = RealArgs {
            cluster_name: "openshell-conformance".into(),
            chart: "oci://ghcr.io/nvidia/openshell/helm-chart".into(),
            chart_version: "0.0.111".into(),
            agent_sandbox_version: "v0.5.0".into(),
            openshell_bin: "openshell".into(),
            run_dir: Some(dir.path().to_path_buf()),
            private_dir: Some(private.path().to_path_buf()),
            ..RealArgs::default()
        };
        let opts = args.resolve(Provider::Kind, "r1", "/repo").unwrap();
        let runner = ScriptedRunner::new(Unscripted::Succeed);
        recorded(&runner);
        let rec = Recorder::new();
        let t = RealTarget::new(
            opts,
            Arc::new(runner.clone()),
            c.client(),
            TargetInfo {
                kind: "kind".into(),
                ..TargetInfo::default()
            },
            rec.clone(),
        );
        let topo = Topologies::builtin().get("combined").unwrap().clone();
        t.install(&topo).await.unwrap();

        let info = t.info();
        assert_eq!(info.openshell.unwrap().to_string(), "0.0.111");
        assert_eq!(info.versions["sandbox-api"], "v1beta1");
        assert!(info.capabilities.contains(&Capability::MainCommand));
        assert!(!info.capabilities.contains(&Capability::RestartPolicy));
        let mtls = private
            .path()
            .join("cli-combined/config/openshell/gateways/conformance-combined/mtls");
        assert!(
            std::fs::read_to_string(mtls.join("tls.key"))
                .unwrap()
                .contains("PRIVATE KEY")
        );
        // The client key is the owner's only, and nothing of it is under the artifacts.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(mtls.join("tls.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "{mode:o}");
        }
        assert!(!dir.path().join("cli-combined").exists());
        let port = t.gateway_port().await.unwrap();
        assert!(
            runner.lines().iter().any(|l| l.ends_with(&format!(
                "openshell gateway add https://127.0.0.1:{port} --name conformance-combined --local"
            ))),
            "{:#?}",
            runner.lines()
        );
        let ns = c
            .get(&ResourceRef::new("", "v1", "namespaces"), None, NS)
            .unwrap();
        assert_eq!(
            ns["metadata"]["labels"]["openshell-conformance.io/run"],
            "r1"
        );

        let observers = t.observe(rec.clone()).await.unwrap();
        let v = t
            .create_sandbox(&SandboxSpec {
                name: "demo".into(),
                ..SandboxSpec::default()
            })
            .await
            .unwrap();
        assert_eq!(v.phase, conformance_core::phase::Phase::Ready);
        assert!(runner.lines().iter().any(|l| l.contains(
            "sandbox create --name demo --label openshell-conformance.io/run=r1 -o json"
        )));

        t.inject(&Fault::GatewayStop).await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        t.restore(&Fault::GatewayStop).await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(observers);

        // The watchers saw the gateway go to zero and come back; the poller saw the sandbox.
        let tl = rec.snapshot();
        let sts_replicas: Vec<u32> = tl
            .entries
            .iter()
            .filter_map(|e| match &e.event {
                Event::Object(s) if s.kind == "StatefulSet" => s.replicas.map(|r| r.desired),
                _ => None,
            })
            .collect();
        assert!(
            sts_replicas.contains(&0) && sts_replicas.last() == Some(&1),
            "{sts_replicas:?}"
        );
        assert!(tl.entries.iter().any(|e| matches!(&e.event, Event::Object(s) if s.kind == "OpenShellSandbox" && s.phase.as_deref() == Some("Ready"))));
        assert!(tl.entries.iter().any(|e| matches!(&e.event, Event::Object(s) if s.kind == "Pod" && s.name == "openshell-0" && s.deleted)));

        // A diagnostics bundle, as a failed case writes one, and a kubeconfig where kind writes
        // it: neither a key nor a kubeconfig may end up in the artifacts.
        std::fs::write(
            private.path().join("kubeconfig"),
            "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    client-key-data: S0VZ\n",
        )
        .unwrap();
        t.diagnostics(&dir.path().join("bundles/combined-1"), None)
            .await
            .unwrap();
        // The gateway's database volume, which helm uninstall keeps (StatefulSet claim).
        c.create(
            &ResourceRef::new("", "v1", "persistentvolumeclaims"),
            Some(NS),
            json!({"metadata": {"name": "openshell-data-openshell-0"},
                   "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .unwrap();
        // The gateway no longer knows the deleted sandbox (and the cluster never had it).
        runner.respond(
            "openshell sandbox get demo",
            CmdOutput::failed(
                1,
                "Error: status: NotFound, message: \"sandbox demo not found\"",
            ),
        );
        t.teardown().await.unwrap();
        let lines = runner.lines();
        assert!(
            lines
                .iter()
                .any(|l| l.ends_with("openshell sandbox delete demo")),
            "{lines:#?}"
        );
        // The case's teardown keeps the installation for the topology's next case.
        assert!(
            !lines.iter().any(|l| l.starts_with("helm uninstall")),
            "{lines:#?}"
        );
        let helm_installs = || {
            runner
                .lines()
                .iter()
                .filter(|l| {
                    l.starts_with("helm upgrade --install") || l.starts_with("helm install")
                })
                .count()
        };
        assert_eq!(helm_installs(), 1, "{:#?}", runner.lines());
        assert!(
            !dir.path().join("diagnostics").exists(),
            "no bundle for a case that did not fail"
        );

        // The next case of the topology reuses the registration and its port.
        let next_case = || {
            let mut n = RealTarget::new(
                args.resolve(Provider::Kind, "r1", "/repo").unwrap(),
                Arc::new(runner.clone()),
                c.client(),
                TargetInfo {
                    kind: "kind".into(),
                    ..TargetInfo::default()
                },
                rec.clone(),
            );
            n.share_access_of(&t);
            n
        };
        let t2 = next_case();
        t2.install(&topo).await.unwrap();
        assert_eq!(t2.gateway_port().await, Some(port));
        let adds = runner
            .lines()
            .iter()
            .filter(|l| l.contains("openshell gateway add"))
            .count();
        assert_eq!(adds, 1, "{:#?}", runner.lines());
        assert_eq!(helm_installs(), 1, "the next case reuses the installation");
        assert!(
            rec.snapshot().entries.iter().any(|e| matches!(&e.event, Event::Note { message } if message.starts_with("reusing the OpenShell installation of topology combined"))),
            "the reuse is on the timeline"
        );
        // A sandbox the case deleted itself is deleted once: teardown only waits until it is
        // gone.
        let deletes = || {
            runner
                .lines()
                .iter()
                .filter(|l| l.ends_with("openshell sandbox delete demo"))
                .count()
        };
        let before = deletes();
        t2.create_sandbox(&SandboxSpec {
            name: "demo".into(),
            ..SandboxSpec::default()
        })
        .await
        .unwrap();
        t2.delete_sandbox("demo").await.unwrap();
        t2.teardown().await.unwrap();
        assert_eq!(deletes(), before + 1, "{:#?}", runner.lines());
        // A case that cannot remove its sandbox leaves the installation unusable: it says so,
        // and the next case notes it and reinstalls instead of running beside the sandbox.
        let t3 = next_case();
        t3.install(&topo).await.unwrap();
        t3.create_sandbox(&SandboxSpec {
            name: "demo".into(),
            ..SandboxSpec::default()
        })
        .await
        .unwrap();
        runner.respond(
            "openshell sandbox delete demo",
            CmdOutput::failed(
                1,
                "Error: status: Unavailable, message: \"gateway unavailable\"",
            ),
        );
        let err = t3.teardown().await.unwrap_err().to_string();
        assert!(err.contains("delete sandbox demo"), "{err}");
        let notes = || crate::tests::notes(&rec);
        assert!(
            notes().iter().any(|m| m.starts_with(
                "this case leaves the OpenShell installation of topology combined unusable"
            )),
            "{:#?}",
            notes()
        );
        let t4 = next_case();
        t4.install(&topo).await.unwrap();
        assert!(
            notes()
                .iter()
                .any(|m| m.contains("cannot serve this case") && m.ends_with("reinstalling")),
            "{:#?}",
            notes()
        );
        assert_eq!(helm_installs(), 2, "{:#?}", runner.lines());
        t4.teardown().await.unwrap();
        // After the topology's last case: the release and the gateway's database go.
        t4.release("combined").await.unwrap();
        assert!(
            exists(
                &c,
                &ResourceRef::new("", "v1", "persistentvolumeclaims"),
                "openshell-data-openshell-0"
            )
            .is_none(),
            "the gateway's database outlived the topology"
        );
        let lines = runner.lines();
        assert!(
            lines
                .last()
                .unwrap()
                .starts_with("helm uninstall openshell --namespace openshell"),
            "{lines:#?}"
        );
        let leaks = secrets_in(dir.path());
        assert!(leaks.is_empty(), "credentials in the artifacts: {leaks:#?}");
        assert!(
            !secrets_in(private.path()).is_empty(),
            "the scan finds what it looks for"
        );
        ctl.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn the_doctor_sees_a_reachable_cluster_and_the_sandbox_crd() {
    use crate::doctor::{self, DoctorOptions, Status};
    use crate::options::Provider;
    let c = cluster();
    let r = ScriptedRunner::new(Unscripted::Succeed);
    let o = DoctorOptions {
        provider: Provider::Existing,
        openshell_bin: "openshell".into(),
        namespace: NS.into(),
        context: "kind-x".into(),
    };
    let rep = doctor::run(&o, &r, Ok(&c.client())).await;
    let by = |n: &str| rep.checks.iter().find(|x| x.name == n).unwrap().clone();
    assert_eq!(by("cluster").status, Status::Ok, "{rep}");
    let crd = by("agent-sandbox CRDs");
    assert_eq!(crd.status, Status::Ok, "{rep}");
    assert!(crd.detail.contains("v1beta1"), "{}", crd.detail);
}

/// Real time: a real SIGTERM is delivered to this test process (nextest runs each test in its
/// own process), and signal delivery does not mix with paused time.
#[tokio::test]
async fn sigterm_restores_the_active_faults_before_the_process_exits() {
    let c = cluster();
    let uid = create_gateway(&c, 1);
    let ctl = run_sts_controller(c.clone(), uid, Arc::new(AtomicU32::new(0)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().unwrap();
    let inj = Arc::new(injector(&c, dir.path(), in_the_workload_container()));
    inj.inject(&Fault::GatewayStop).await.unwrap();
    let handler = tokio::spawn(crate::faults::restore_on_signal(inj.clone()));
    // Let the handler install itself before the signal is sent.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let name = tokio::time::timeout(Duration::from_secs(30), handler)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(name, "SIGTERM");
    assert!(inj.active().await.is_empty());
    assert_eq!(
        exists(&c, &sts(), "openshell").unwrap()["spec"]["replicas"],
        1
    );
    assert!(!dir.path().join(journal::FILE_NAME).exists());
    ctl.abort();
}

#[tokio::test(start_paused = true)]
async fn a_diagnostics_bundle_holds_logs_objects_helm_and_cli_output_with_secrets_redacted() {
    use crate::diagnostics::{Sources, collect};
    let c = cluster();
    running_pod(&c, &cr("demo"), json!({}), None, &["agent"]);
    c.append_log(
        NS,
        &cr("demo"),
        "agent",
        "Policy fetch failed, retrying attempt=1\n",
    );
    c.create(
        &ResourceRef::new("agents.x-k8s.io", "v1beta1", "sandboxes"),
        Some(NS),
        json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": {"name": cr("demo")},
               "spec": {"podTemplate": {"spec": {"containers": [{"name": "agent", "image": "i",
                   "env": [{"name": "OPENSHELL_SANDBOX_TOKEN", "value": "tok-123"}]}]}}}}),
    )
    .unwrap();
    let runner = ScriptedRunner::new(Unscripted::Succeed);
    runner.respond(
        "helm get values",
        CmdOutput::ok("server:\n  tls:\n    key: |\n      -----BEGIN PRIVATE KEY-----\n      MIIEsecret\n      -----END PRIVATE KEY-----\n  disableTls: false\n"),
    );
    runner.respond("helm get manifest", CmdOutput::ok("kind: StatefulSet\n"));
    let opts = kind_options("/run-dir");
    let rec = Recorder::new();
    rec.note("a note");
    let tl = rec.snapshot();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bundle");
    let src = Sources {
        client: &c.client(),
        runner: &runner,
        opts: &opts,
        sandbox_version: "v1beta1",
        cli: None,
        timeline: Some(&tl),
    };
    let b = collect(&src, &out).await.unwrap();
    let read = |rel: &str| {
        std::fs::read_to_string(out.join(rel))
            .unwrap_or_else(|e| panic!("{rel}: {e}; files {:?}", b.files))
    };
    assert!(
        read(&format!("openshell/logs/{}/agent.log", cr("demo"))).contains("Policy fetch failed")
    );
    assert!(read("openshell/pods.yaml").contains(&cr("demo")));
    let sandboxes = read("openshell/sandboxes.yaml");
    assert!(
        sandboxes.contains("OPENSHELL_SANDBOX_TOKEN") && !sandboxes.contains("tok-123"),
        "{sandboxes}"
    );
    let values = read("helm/values.yaml");
    assert!(
        !values.contains("MIIEsecret") && values.contains("disableTls: false"),
        "{values}"
    );
    assert!(read("timeline.jsonl").contains("a note"));
    assert!(b.archive.exists());
    assert_eq!(b.archive, dir.path().join("bundle.tar.gz"));
}

#[tokio::test(start_paused = true)]
async fn the_real_target_counts_starts_from_the_workloads_marks_and_an_unreadable_count_as_unknown()
{
    let c = cluster();
    sandbox_with_workspace(&c, "printf 'start\\nstart\\n' > /sandbox/.starts").await;
    let kubelet = run_reader_kubelet(c.clone());
    let rec = Recorder::new();
    rec.record(Event::Observation {
        key: conformance_core::timeline::MAIN_PROCESS_STARTS_SOURCE_KEY.into(),
        subject: None,
        value: json!("marks"),
    });
    let read = |p: &'static str| {
        let client = c.client();
        async move {
            crate::workspace::read(&client, NS, &cr("demo"), p, "r1", Duration::from_secs(30)).await
        }
    };
    crate::workspace::record_start_marks(&rec, "demo", read(".starts").await);
    assert_eq!(rec.main_process_starts("demo"), StartCount::Known(2));
    // A failed read is not 0 starts: the count is unknown from then on, with the reason noted.
    crate::workspace::record_start_marks(&rec, "demo", read("../escape").await);
    assert!(
        matches!(rec.main_process_starts("demo"), StartCount::Unknown(_)),
        "{:?}",
        rec.main_process_starts("demo")
    );
    assert!(rec.snapshot().entries.iter().any(|e| matches!(&e.event,
        Event::Note { message } if message.starts_with("main-process starts of demo not known"))));
    // No marks file yet: the workload has not started.
    crate::workspace::record_start_marks(&rec, "other", Ok(None));
    assert_eq!(rec.main_process_starts("other"), StartCount::Known(0));
    kubelet.abort();
}

fn sandboxes() -> ResourceRef {
    ResourceRef::new("agents.x-k8s.io", "v1beta1", "sandboxes")
}

/// The volumes of the pod template the gateway writes (docs/upstream-facts.md F3.5, F12.8).
fn template_volumes() -> Value {
    json!([
        {"name": "openshell-supervisor-bin", "emptyDir": {}},
        {"name": "openshell-client-tls", "secret": {"secretName": "openshell-client-tls", "defaultMode": 256}},
        {"name": "openshell-sa-token", "projected": {"defaultMode": 256, "sources": [
            {"serviceAccountToken": {"audience": "openshell-gateway", "expirationSeconds": 3600, "path": "token"}}]}},
    ])
}

fn create_sandbox_resource(c: &Cluster, name: &str) {
    c.create(
        &sandboxes(),
        Some(NS),
        json!({"metadata": {"name": cr(name)}, "spec": {"podTemplate": {"spec": {
            "containers": [{"name": "agent", "image": "sandbox"}],
            "volumes": template_volumes(),
        }}}}),
    )
    .unwrap();
}

fn volumes_of(c: &Cluster, name: &str) -> Value {
    exists(c, &sandboxes(), &cr(name)).unwrap()["spec"]["podTemplate"]["spec"]["volumes"].clone()
}

fn bootstrap_fault(what: &str) -> Fault {
    Fault::BootstrapCredentials {
        sandbox: "demo".into(),
        what: conformance_core::target::BootstrapMaterial::parse(what)
            .expect("a bootstrap material"),
    }
}

#[rstest::rstest]
#[case::credentials("credentials")]
#[case::certificate("certificate")]
#[tokio::test(start_paused = true)]
async fn a_bootstrap_fault_breaks_the_sandbox_template_journaled_without_key_material_and_restore_puts_it_back_exactly(
    #[case] what: &str,
) {
    let c = cluster();
    create_sandbox_resource(&c, "demo");
    let dir = tempfile::tempdir().unwrap();
    let inj = injector(&c, dir.path(), in_the_workload_container());
    let fault = bootstrap_fault(what);
    inj.inject(&fault).await.unwrap();
    let broken = volumes_of(&c, "demo");
    let secret = ResourceRef::new("", "v1", "secrets");
    let ca_secret = format!("openshell-conformance-ca-{}", cr("demo"));
    match what {
        "credentials" => {
            assert_eq!(
                broken[2]["projected"]["sources"][0]["serviceAccountToken"]["audience"],
                "openshell-conformance-not-the-gateway"
            );
            assert_eq!(broken[1], template_volumes()[1], "TLS untouched");
            assert!(exists(&c, &secret, &ca_secret).is_none());
        }
        _ => {
            // The client certificate and key stay the chart's; only the CA is another one.
            let sources = &broken[1]["projected"]["sources"];
            assert_eq!(sources[0]["secret"]["name"], "openshell-client-tls");
            assert_eq!(
                sources[0]["secret"]["items"],
                json!([{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}])
            );
            assert_eq!(sources[1]["secret"]["name"], ca_secret.as_str());
            assert_eq!(broken[1]["projected"]["defaultMode"], 256);
            assert_eq!(broken[2], template_volumes()[2], "token untouched");
            let s = exists(&c, &secret, &ca_secret).expect("the CA Secret exists");
            assert_eq!(
                s["metadata"]["labels"]["openshell-conformance.io/run"],
                "fault"
            );
            assert_eq!(s["data"].as_object().unwrap().len(), 1, "{s}");
            assert!(s["data"].get("ca.crt").is_some(), "{s}");
        }
    }
    let journal_text = std::fs::read_to_string(dir.path().join(journal::FILE_NAME)).unwrap();
    assert!(
        journal_text.contains("restore-pod-template-volumes"),
        "{journal_text}"
    );
    assert!(!journal_text.contains("PRIVATE KEY"), "{journal_text}");
    assert!(
        !journal_text.contains("BEGIN CERTIFICATE"),
        "{journal_text}"
    );
    // Not restored yet: the check says what is still broken.
    let err = inj.verify_restored(&fault).await.unwrap_err();
    assert!(err.to_string().contains("still"), "{err}");
    inj.restore(&fault).await.unwrap();
    assert_eq!(volumes_of(&c, "demo"), template_volumes());
    assert!(exists(&c, &secret, &ca_secret).is_none());
    assert!(!dir.path().join(journal::FILE_NAME).exists());
    inj.verify_restored(&fault).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn after_a_simulated_kill_the_journal_puts_the_template_back_and_the_ca_secret_is_a_leftover_until_then()
 {
    use crate::leftovers;
    let c = cluster();
    create_sandbox_resource(&c, "demo");
    let dir = tempfile::tempdir().unwrap();
    {
        let inj = injector(&c, dir.path(), in_the_workload_container());
        inj.inject(&bootstrap_fault("certificate")).await.unwrap();
        // The process "dies" here: no restore, no guard.
    }
    let runner = ScriptedRunner::new(Unscripted::Succeed);
    runner.respond("helm list", CmdOutput::ok("[]"));
    let opts = kind_options(dir.path());
    let found = leftovers::find(&c.client(), &runner, &opts).await.unwrap();
    assert_eq!(
        found.fault_secrets,
        [format!("openshell-conformance-ca-{}", cr("demo"))]
    );
    let path = dir.path().join(journal::FILE_NAME);
    let report = journal::restore_from(&path, &c.client(), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(report.restored.len(), 1, "{report}");
    assert_eq!(volumes_of(&c, "demo"), template_volumes());
    assert!(!path.exists());
    let found = leftovers::find(&c.client(), &runner, &opts).await.unwrap();
    assert!(found.fault_secrets.is_empty(), "{found}");
}

#[tokio::test(start_paused = true)]
async fn a_bootstrap_fault_for_a_sandbox_that_does_not_exist_yet_on_a_cluster_without_the_controller_is_unsupported_saying_why_and_changes_nothing()
 {
    let c = cluster();
    let dir = tempfile::tempdir().unwrap();
    let inj = injector(&c, dir.path(), in_the_workload_container());
    let err = inj
        .inject(&bootstrap_fault("credentials"))
        .await
        .unwrap_err();
    let TargetError::Unsupported(why) = &err else {
        panic!("{err:?}");
    };
    assert!(
        why.contains("does not exist yet")
            && why.contains("agent-sandbox-system/agent-sandbox-controller"),
        "{why}"
    );
    assert!(!dir.path().join(journal::FILE_NAME).exists());
    assert!(inj.active().await.is_empty());
}

fn deployments() -> ResourceRef {
    ResourceRef::new("apps", "v1", "deployments")
}

const CONTROLLER: &str = "agent-sandbox-controller";
const CONTROLLER_POD: &str = "agent-sandbox-controller-0";

/// The Agent Sandbox controller's Deployment as the release manifest has it (one replica).
fn create_controller(c: &Cluster) {
    let labels = json!({"app": CONTROLLER});
    c.create(
        &deployments(),
        Some(AS_NS),
        json!({"metadata": {"name": CONTROLLER},
               "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                        "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                            {"name": "agent-sandbox-controller",
                             "image": "registry.k8s.io/agent-sandbox/agent-sandbox-controller:v0.5.0"}]}}}}),
    )
    .unwrap();
}

fn controller_replicas(c: &Cluster) -> i64 {
    c.get(&deployments(), Some(AS_NS), CONTROLLER).unwrap()["spec"]["replicas"]
        .as_i64()
        .unwrap()
}

/// Plays the Deployment controller for the Agent Sandbox controller (one pod while it wants a
/// replica, none at zero) and, while that pod runs, the Agent Sandbox controller itself: every
/// Sandbox resource in `NS` without a pod gets one from its current pod template (F4.12).
/// A cluster whose Agent Sandbox controller runs (its pod up), and a run directory.
async fn with_controller() -> (Cluster, tokio::task::JoinHandle<()>, tempfile::TempDir) {
    let c = cluster();
    create_controller(&c);
    let ctl = run_agent_sandbox_controller(c.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    (c, ctl, tempfile::tempdir().unwrap())
}

fn run_agent_sandbox_controller(c: Cluster) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let dep_uid = c.get(&deployments(), Some(AS_NS), CONTROLLER).unwrap()["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string();
        loop {
            let want = controller_replicas(&c);
            let pod = c
                .get(&ResourceRef::pods(), Some(AS_NS), CONTROLLER_POD)
                .ok();
            match (want > 0, &pod) {
                (true, None) => {
                    c.create(
                        &ResourceRef::pods(),
                        Some(AS_NS),
                        json!({"metadata": {"name": CONTROLLER_POD, "labels": {"app": CONTROLLER},
                                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                                 "name": "agent-sandbox-controller-x", "uid": dep_uid, "controller": true}]},
                               "spec": {"containers": [{"name": "manager", "image": "i:1"}]}}),
                    )
                    .unwrap();
                    c.bind_pod(AS_NS, CONTROLLER_POD, "node-1").unwrap();
                    c.patch_status(
                        &ResourceRef::pods(),
                        Some(AS_NS),
                        CONTROLLER_POD,
                        PatchKind::Merge,
                        &json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
                    )
                    .unwrap();
                }
                (false, Some(_)) => {
                    let now = kube_emulator::DeleteOptions {
                        grace_period_seconds: Some(0),
                        ..Default::default()
                    };
                    let _ = c.delete(&ResourceRef::pods(), Some(AS_NS), CONTROLLER_POD, &now);
                }
                _ => {}
            }
            let running = i64::from(want > 0 && pod.is_some());
            let _ = c.patch_status(
                &deployments(),
                Some(AS_NS),
                CONTROLLER,
                PatchKind::Merge,
                &json!({"status": {"replicas": running, "readyReplicas": running}}),
            );
            if running == 1 {
                let (sbs, _) = c.list(&sandboxes(), Some(NS), &Default::default()).unwrap();
                for sb in sbs {
                    let name = sb["metadata"]["name"].as_str().unwrap();
                    if exists(&c, &ResourceRef::pods(), name).is_none() {
                        c.create(
                            &ResourceRef::pods(),
                            Some(NS),
                            json!({"metadata": {"name": name}, "spec": sb["spec"]["podTemplate"]["spec"]}),
                        )
                        .unwrap();
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

fn journal_ids(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join(journal::FILE_NAME))
        .map(|t| {
            serde_json::from_str::<journal::JournalFile>(&t)
                .unwrap()
                .entries
                .into_iter()
                .map(|e| e.id)
                .collect()
        })
        .unwrap_or_default()
}

fn observations(rec: &Recorder) -> Vec<String> {
    rec.snapshot()
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Observation { key, .. } => Some(key.clone()),
            _ => None,
        })
        .collect()
}

#[rstest::rstest]
#[case::credentials("credentials")]
#[case::certificate("certificate")]
#[tokio::test(start_paused = true)]
async fn the_first_pod_of_a_sandbox_created_while_the_fault_is_on_mounts_the_broken_material_and_the_controller_is_back_after_it(
    #[case] what: &str,
) {
    let (c, ctl, dir) = with_controller().await;
    let inj = injector(&c, dir.path(), in_the_workload_container());
    let rec = Recorder::new();
    inj.set_recorder(rec.clone());
    let fault = bootstrap_fault(what);

    inj.inject(&fault).await.unwrap();
    assert_eq!(controller_replicas(&c), 0, "the controller is paused");
    assert!(
        exists_in(&c, AS_NS, CONTROLLER_POD).is_none(),
        "its pod is gone once inject returns"
    );
    assert_eq!(
        journal_ids(dir.path()),
        [format!("agent-sandbox-controller-paused-{}", cr("demo"))],
        "the way back is journaled while the controller is paused"
    );

    // The gateway writes the Sandbox resource (CreateSandbox).
    create_sandbox_resource(&c, "demo");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pod = exists(&c, &ResourceRef::pods(), &cr("demo")).expect("the first pod");
    let mounted = &pod["spec"]["volumes"];
    match what {
        "credentials" => assert_eq!(
            mounted[2]["projected"]["sources"][0]["serviceAccountToken"]["audience"],
            "openshell-conformance-not-the-gateway",
            "{mounted}"
        ),
        _ => assert_eq!(
            mounted[1]["projected"]["sources"][1]["secret"]["name"],
            format!("openshell-conformance-ca-{}", cr("demo")),
            "{mounted}"
        ),
    }
    assert_eq!(controller_replicas(&c), 1, "the controller is resumed");
    assert!(exists_in(&c, AS_NS, CONTROLLER_POD).is_some());
    assert_eq!(
        journal_ids(dir.path()),
        [format!("bootstrap-credentials-{}", cr("demo"))],
        "only the template is left to restore"
    );
    assert_eq!(
        observations(&rec),
        [
            "bootstrap-credentials.controller-paused",
            "bootstrap-credentials.broken",
            "bootstrap-credentials.controller-resumed"
        ]
    );

    inj.restore(&fault).await.unwrap();
    inj.verify_restored(&fault).await.unwrap();
    assert_eq!(volumes_of(&c, "demo"), template_volumes());
    assert!(!dir.path().join(journal::FILE_NAME).exists());
    ctl.abort();
}

fn exists_in(c: &Cluster, ns: &str, name: &str) -> Option<Value> {
    c.get(&ResourceRef::pods(), Some(ns), name).ok()
}

#[tokio::test(start_paused = true)]
async fn a_run_interrupted_while_the_fault_waits_for_its_sandbox_gets_the_controller_back() {
    let (c, ctl, dir) = with_controller().await;
    let inj = injector(&c, dir.path(), in_the_workload_container());
    let fault = bootstrap_fault("certificate");
    inj.inject(&fault).await.unwrap();
    assert_eq!(controller_replicas(&c), 0);
    // SIGINT: the target restores every active fault.
    assert!(inj.restore_all().await.is_empty());
    assert_eq!(controller_replicas(&c), 1);
    assert!(exists_in(&c, AS_NS, CONTROLLER_POD).is_some());
    assert!(!dir.path().join(journal::FILE_NAME).exists());
    inj.verify_restored(&fault).await.unwrap();
    // The sandbox created afterwards gets the template the gateway wrote.
    create_sandbox_resource(&c, "demo");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        exists(&c, &ResourceRef::pods(), &cr("demo")).unwrap()["spec"]["volumes"],
        template_volumes()
    );
    ctl.abort();
}

#[tokio::test(start_paused = true)]
async fn a_restore_from_the_journal_after_a_kill_between_pause_and_resume_brings_the_controller_back()
 {
    use crate::leftovers;
    let (c, ctl, dir) = with_controller().await;
    let inj = injector(&c, dir.path(), in_the_workload_container());
    inj.inject(&bootstrap_fault("credentials")).await.unwrap();
    inj.die().await;
    // The gateway creates the resource; nothing makes its pod while the controller is paused.
    create_sandbox_resource(&c, "demo");
    tokio::time::sleep(Duration::from_secs(90)).await;
    assert_eq!(controller_replicas(&c), 0, "nothing resumed the controller");
    assert!(exists(&c, &ResourceRef::pods(), &cr("demo")).is_none());
    let runner = ScriptedRunner::new(Unscripted::Succeed);
    runner.respond("helm list", CmdOutput::ok("[]"));
    let opts = kind_options(dir.path());
    let found = leftovers::find(&c.client(), &runner, &opts).await.unwrap();
    assert_eq!(
        found.paused_controller.as_ref().map(|w| w.label()),
        Some("Deployment/agent-sandbox-system/agent-sandbox-controller".to_string()),
        "{found}"
    );

    let path = dir.path().join(journal::FILE_NAME);
    let report = journal::restore_from(&path, &c.client(), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(report.restored.len(), 1, "{report}");
    assert_eq!(controller_replicas(&c), 1);
    assert!(!path.exists(), "the journal is consumed");
    let found = leftovers::find(&c.client(), &runner, &opts).await.unwrap();
    assert!(found.paused_controller.is_none(), "{found}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        exists(&c, &ResourceRef::pods(), &cr("demo")).is_some(),
        "the resumed controller reconciles the sandbox"
    );
    ctl.abort();
}

#[tokio::test(start_paused = true)]
async fn a_fault_that_never_sees_its_sandbox_resumes_the_controller_and_reports_the_stage_and_deadline()
 {
    let (c, ctl, dir) = with_controller().await;
    let mut inj = injector(&c, dir.path(), in_the_workload_container());
    inj.deadlines.sandbox_appears = Duration::from_secs(10);
    let rec = Recorder::new();
    inj.set_recorder(rec.clone());
    let fault = bootstrap_fault("credentials");
    inj.inject(&fault).await.unwrap();
    assert_eq!(controller_replicas(&c), 0);
    tokio::time::sleep(Duration::from_secs(20)).await;
    // Back at the deadline, before any restore.
    assert_eq!(controller_replicas(&c), 1);
    assert!(exists_in(&c, AS_NS, CONTROLLER_POD).is_some());
    assert!(!dir.path().join(journal::FILE_NAME).exists());
    let stage = format!(
        "Sandbox {} created while the Agent Sandbox controller is paused: gave up after 10s",
        cr("demo")
    );
    assert!(
        super::notes(&rec).iter().any(|n| n.contains(&stage)),
        "{:?}",
        super::notes(&rec)
    );
    let err = inj.restore(&fault).await.unwrap_err().to_string();
    assert!(err.contains(&stage), "{err}");
    inj.verify_restored(&fault).await.unwrap();
    ctl.abort();
}

#[tokio::test(start_paused = true)]
async fn a_template_without_client_tls_cannot_get_a_wrong_ca_and_says_so() {
    let c = cluster();
    c.create(
        &sandboxes(),
        Some(NS),
        json!({"metadata": {"name": cr("plain")}, "spec": {"podTemplate": {"spec": {
            "containers": [{"name": "agent", "image": "sandbox"}],
            "volumes": [template_volumes()[2].clone()],
        }}}}),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let inj = injector(&c, dir.path(), in_the_workload_container());
    let err = inj
        .inject(&Fault::BootstrapCredentials {
            sandbox: "plain".into(),
            what: conformance_core::target::BootstrapMaterial::Certificate,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, TargetError::Unsupported(m) if m.contains("no client TLS")),
        "{err:?}"
    );
    assert!(!dir.path().join(journal::FILE_NAME).exists());
}

/// No workspace reader pod is left in the namespace.
fn assert_no_reader_pods(c: &Cluster) {
    let (pods, _) = c
        .list(&ResourceRef::pods(), Some(NS), &Default::default())
        .unwrap();
    assert!(
        pods.iter().all(|p| !p["metadata"]["name"]
            .as_str()
            .unwrap()
            .ends_with("-ws-reader")),
        "{pods:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_gateway_log_keeps_what_a_deleted_gateway_pod_logged_and_reads_the_last_pod_to_the_end()
{
    use crate::completeness::phase_commits;
    let c = cluster();
    let uid = create_gateway(&c, 1);
    let generation = Arc::new(AtomicU32::new(0));
    let ctl = run_sts_controller(c.clone(), uid, generation.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = crate::gateway_log::GatewayLog::start(c.client(), workload());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let line = |from: &str, to: &str| {
        format!(
            "INFO openshell_server::compute: Sandbox phase changed sandbox_id=1 sandbox_name=a old_phase={from} new_phase={to}\n"
        )
    };
    c.append_log(
        NS,
        "openshell-0",
        "openshell-gateway",
        &line("Provisioning", "Ready"),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    // A gateway restart takes the first pod's log with it.
    replace_gateway_pod(&c, &generation).await;
    // Logged just before the end: the last read finds it.
    c.append_log(
        NS,
        "openshell-0",
        "openshell-gateway",
        &line("Ready", "Provisioning"),
    );
    let read = log.finish().await;
    let commits: Vec<(Phase, Phase)> = phase_commits(&read.text)
        .into_iter()
        .map(|c| (c.from, c.to))
        .collect();
    assert_eq!(
        commits,
        [
            (Phase::Provisioning, Phase::Ready),
            (Phase::Ready, Phase::Provisioning)
        ],
        "{}",
        read.text
    );
    assert!(read.unreadable.is_empty(), "{:?}", read.unreadable);
    ctl.abort();
}
