//! The Kubernetes models (kubelet, workload controllers, Agent Sandbox controller) on the
//! emulated cluster, in paused (virtual) time. Durations asserted are virtual.

use std::sync::Arc;
use std::time::Duration;

use crate::agent_sandbox::AgentSandboxVersion;
use crate::kube::{KubeConfig, KubeModels};
use crate::network::Network;
use crate::program::{ContainerCtx, ContainerProgram, Programs};
use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams, PostParams};
use kube_emulator::{Cluster, ClusterConfig, PatchKind, ResourceRef, WatchParams};
use serde_json::{Value, json};
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(3600);

struct Env {
    cluster: Cluster,
    models: KubeModels,
    t0: Instant,
}

fn start_with(programs: Programs, config: KubeConfig) -> Env {
    // The API server knows no Sandbox kind until its CRD is installed, as on a real cluster.
    let cluster = Cluster::new(ClusterConfig {
        crds: vec![crate::agent_sandbox::crd()],
        ..ClusterConfig::default()
    });
    let models = KubeModels::start(&cluster, &Network::new(), programs, config);
    Env {
        cluster,
        models,
        t0: Instant::now(),
    }
}

fn start() -> Env {
    start_with(Programs::new(), KubeConfig::default())
}

impl Env {
    fn elapsed(&self) -> Duration {
        self.t0.elapsed()
    }

    /// Waits (in virtual time, at most an hour) until the named object satisfies `pred`
    /// (`None`: it does not exist), watching it; returns it.
    async fn until(
        &self,
        r: &ResourceRef,
        ns: &str,
        name: &str,
        what: &str,
        pred: impl Fn(Option<&Value>) -> bool,
    ) -> Option<Value> {
        let mut stream = Box::pin(
            self.cluster
                .watch(r, Some(ns), WatchParams::default())
                .expect("watch"),
        );
        let check = |c: &Cluster| {
            let cur = c.get(r, Some(ns), name).ok();
            pred(cur.as_ref()).then_some(cur)
        };
        let wait = async {
            loop {
                if let Some(v) = check(&self.cluster) {
                    return v;
                }
                if stream.next().await.is_none() {
                    stream = Box::pin(
                        self.cluster
                            .watch(r, Some(ns), WatchParams::default())
                            .expect("watch"),
                    );
                }
            }
        };
        match tokio::time::timeout(LONG, wait).await {
            Ok(v) => v,
            Err(_) => panic!(
                "{name}: never {what}; last: {:#}",
                self.cluster.get(r, Some(ns), name).unwrap_or(Value::Null)
            ),
        }
    }

    async fn pod_until(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        self.until(&ResourceRef::pods(), ns, name, what, |p| {
            p.is_some_and(&pred)
        })
        .await
        .expect("present")
    }

    async fn pod_gone(&self, ns: &str, name: &str) {
        self.until(&ResourceRef::pods(), ns, name, "gone", |p| p.is_none())
            .await;
    }
}

fn phase(p: &Value) -> &str {
    p.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn condition<'a>(p: &'a Value, type_: &str) -> Option<&'a Value> {
    p.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

fn cond_status(p: &Value, type_: &str) -> String {
    condition(p, type_)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn container_status(p: &Value, name: &str) -> Value {
    p.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
        })
        .cloned()
        .unwrap_or(Value::Null)
}

fn restart_count(p: &Value) -> i64 {
    container_status(p, "main")
        .get("restartCount")
        .and_then(Value::as_i64)
        .unwrap_or(-1)
}

fn pod_json(name: &str, restart: &str, command: &[&str]) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"restartPolicy": restart, "containers": [
            {"name": "main", "image": "busybox:1.36", "command": command}]}
    }))
    .unwrap()
}

async fn create_pod(env: &Env, pod: Pod) {
    let pods: Api<Pod> = Api::default_namespaced(env.cluster.client());
    pods.create(&PostParams::default(), &pod).await.unwrap();
}

// -------------------------------------------------------------------------------------------
// kubelet
// -------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_pod_running_sleep_is_scheduled_and_becomes_running_and_ready_after_the_start_delay() {
    let env = start();
    create_pod(&env, pod_json("sleeper", "Always", &["sleep", "3600"])).await;
    let p = env
        .pod_until("default", "sleeper", "Ready", |p| {
            cond_status(p, "Ready") == "True"
        })
        .await;
    assert_eq!(env.elapsed(), Duration::from_secs(1));
    assert_eq!(phase(&p), "Running");
    assert_eq!(p.pointer("/spec/nodeName"), Some(&json!("emulated-node")));
    assert_eq!(p.pointer("/status/podIP"), Some(&json!("10.244.0.2")));
    assert_eq!(
        p.pointer("/status/podIPs"),
        Some(&json!([{"ip": "10.244.0.2"}]))
    );
    let types: Vec<&str> = p["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled"
        ]
    );
    let cs = container_status(&p, "main");
    assert_eq!(cs["ready"], json!(true));
    assert_eq!(cs["started"], json!(true));
    assert_eq!(cs["restartCount"], json!(0));
    assert!(cs.pointer("/state/running/startedAt").is_some(), "{cs}");
    assert!(
        cs["imageID"]
            .as_str()
            .unwrap()
            .starts_with("docker.io/library/busybox@sha256:")
    );
    // Typed access works too.
    let pods: Api<Pod> = Api::default_namespaced(env.cluster.client());
    let typed = pods.get("sleeper").await.unwrap();
    assert_eq!(typed.status.unwrap().phase.as_deref(), Some("Running"));
}

#[tokio::test(start_paused = true)]
async fn a_command_that_exits_1_with_restart_policy_never_ends_failed_without_restarts() {
    let env = start();
    create_pod(&env, pod_json("once", "Never", &["sh", "-c", "exit 1"])).await;
    let p = env
        .pod_until("default", "once", "Failed", |p| phase(p) == "Failed")
        .await;
    assert_eq!(env.elapsed(), Duration::from_secs(1));
    let cs = container_status(&p, "main");
    assert_eq!(cs.pointer("/state/terminated/exitCode"), Some(&json!(1)));
    assert_eq!(
        cs.pointer("/state/terminated/reason"),
        Some(&json!("Error"))
    );
    assert_eq!(cs["restartCount"], json!(0));
    assert_eq!(cs["ready"], json!(false));
    let ready = condition(&p, "Ready").unwrap();
    assert_eq!(ready["status"], json!("False"));
    assert_eq!(ready["reason"], json!("PodFailed"));
    // Nothing restarts it later.
    tokio::time::sleep(Duration::from_secs(600)).await;
    let p = env
        .cluster
        .get(&ResourceRef::pods(), Some("default"), "once")
        .unwrap();
    assert_eq!(restart_count(&p), 0);
}

#[tokio::test(start_paused = true)]
async fn on_failure_restarts_a_failing_container_with_crash_loop_back_off_and_keeps_previous_logs()
{
    let env = start();
    create_pod(
        &env,
        pod_json(
            "crasher",
            "OnFailure",
            &["sh", "-c", "echo attempt; exit 3"],
        ),
    )
    .await;
    // Starts at 1 s, fails; restart 1 at once, restart 2 after 10 s, restart 3 after 20 s more.
    let p = env
        .pod_until("default", "crasher", "in back-off after restart 1", |p| {
            restart_count(p) == 1
                && container_status(p, "main").pointer("/state/waiting/reason")
                    == Some(&json!("CrashLoopBackOff"))
        })
        .await;
    assert_eq!(env.elapsed(), Duration::from_secs(1));
    let cs = container_status(&p, "main");
    assert_eq!(
        cs.pointer("/lastState/terminated/exitCode"),
        Some(&json!(3))
    );
    assert_eq!(phase(&p), "Running");
    env.pod_until("default", "crasher", "restarted twice", |p| {
        restart_count(p) == 2
    })
    .await;
    assert_eq!(env.elapsed(), Duration::from_secs(11));
    env.pod_until("default", "crasher", "restarted three times", |p| {
        restart_count(p) == 3
    })
    .await;
    assert_eq!(env.elapsed(), Duration::from_secs(31));
    let pods: Api<Pod> = Api::default_namespaced(env.cluster.client());
    let prev = pods
        .logs(
            "crasher",
            &LogParams {
                previous: true,
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(prev, "attempt\n");
}

#[tokio::test(start_paused = true)]
async fn on_failure_leaves_a_successful_container_terminated_and_the_pod_succeeded() {
    let env = start();
    create_pod(&env, pod_json("job", "OnFailure", &["sh", "-c", "exit 0"])).await;
    let p = env
        .pod_until("default", "job", "Succeeded", |p| phase(p) == "Succeeded")
        .await;
    let cs = container_status(&p, "main");
    assert_eq!(
        cs.pointer("/state/terminated/reason"),
        Some(&json!("Completed"))
    );
    assert_eq!(cs["restartCount"], json!(0));
}

#[tokio::test(start_paused = true)]
async fn always_restarts_a_container_even_when_it_exits_0() {
    let env = start();
    create_pod(&env, pod_json("loop", "Always", &["sh", "-c", "exit 0"])).await;
    let p = env
        .pod_until("default", "loop", "restarted twice", |p| {
            restart_count(p) == 2
        })
        .await;
    assert_eq!(env.elapsed(), Duration::from_secs(11));
    assert_eq!(phase(&p), "Running");
}

#[tokio::test(start_paused = true)]
async fn init_containers_run_in_order_before_the_containers_and_a_failing_one_fails_a_never_pod() {
    let env = start();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "inits"},
        "spec": {"restartPolicy": "Never",
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "initContainers": [
                {"name": "one", "image": "busybox", "command": ["sh", "-c", "echo 1 > /s/order"],
                 "volumeMounts": [{"name": "shared", "mountPath": "/s"}]},
                {"name": "two", "image": "busybox", "command": ["sh", "-c", "echo 2 >> /s/order"],
                 "volumeMounts": [{"name": "shared", "mountPath": "/s"}]}],
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"],
                 "volumeMounts": [{"name": "shared", "mountPath": "/s"}]}]}
    }))
    .unwrap();
    create_pod(&env, pod).await;
    let p = env
        .pod_until("default", "inits", "Ready", |p| {
            cond_status(p, "Ready") == "True"
        })
        .await;
    assert_eq!(cond_status(&p, "Initialized"), "True");
    let inits = p.pointer("/status/initContainerStatuses").unwrap();
    assert_eq!(
        inits[0]["state"]["terminated"]["reason"],
        json!("Completed")
    );
    assert_eq!(
        inits[1]["state"]["terminated"]["reason"],
        json!("Completed")
    );
    let out = env
        .cluster
        .exec(
            "default",
            "inits",
            Some("main"),
            &["cat".into(), "/s/order".into()],
            b"",
        )
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n2\n");

    let bad: Pod = serde_json::from_value(json!({
        "metadata": {"name": "bad-init"},
        "spec": {"restartPolicy": "Never",
            "initContainers": [{"name": "one", "image": "busybox", "command": ["sh", "-c", "exit 2"]}],
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}]}
    }))
    .unwrap();
    create_pod(&env, bad).await;
    let p = env
        .pod_until("default", "bad-init", "Failed", |p| phase(p) == "Failed")
        .await;
    assert_eq!(cond_status(&p, "Initialized"), "False");
    assert_eq!(
        container_status(&p, "main").pointer("/state/waiting/reason"),
        Some(&json!("PodInitializing"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_gated_pod_stays_pending_and_scheduling_gated_until_the_gate_is_removed() {
    let env = start();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "gated"},
        "spec": {"schedulingGates": [{"name": "example.com/wait"}],
                 "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}]}
    }))
    .unwrap();
    create_pod(&env, pod).await;
    let p = env
        .pod_until("default", "gated", "SchedulingGated", |p| {
            condition(p, "PodScheduled").is_some_and(|c| c["reason"] == json!("SchedulingGated"))
        })
        .await;
    assert_eq!(phase(&p), "Pending");
    assert_eq!(cond_status(&p, "PodScheduled"), "False");
    tokio::time::sleep(Duration::from_secs(120)).await;
    let p = env
        .cluster
        .get(&ResourceRef::pods(), Some("default"), "gated")
        .unwrap();
    assert_eq!(phase(&p), "Pending");
    assert!(p.pointer("/spec/nodeName").is_none());

    let pods: Api<Pod> = Api::default_namespaced(env.cluster.client());
    pods.patch(
        "gated",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"schedulingGates": null}})),
    )
    .await
    .unwrap();
    let t = env.elapsed();
    env.pod_until("default", "gated", "Ready", |p| {
        cond_status(p, "Ready") == "True"
    })
    .await;
    assert_eq!(env.elapsed() - t, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn deleting_a_pod_sends_term_and_removes_it_as_soon_as_the_program_exits() {
    let env = start();
    create_pod(&env, pod_json("web", "Always", &["sleep", "3600"])).await;
    env.pod_until("default", "web", "Ready", |p| {
        cond_status(p, "Ready") == "True"
    })
    .await;
    let pods: Api<Pod> = Api::default_namespaced(env.cluster.client());
    let t = env.elapsed();
    pods.delete("web", &DeleteParams::default()).await.unwrap();
    env.pod_gone("default", "web").await;
    assert_eq!(env.elapsed(), t, "sleep ends on TERM at once");
    assert!(
        env.models
            .kubelet()
            .running_containers("default", "web")
            .is_empty()
    );
}

/// Ignores TERM: only the grace period's KILL stops it.
struct Stubborn;

#[async_trait]
impl ContainerProgram for Stubborn {
    async fn run(&self, ctx: ContainerCtx) -> i32 {
        ctx.set_ready(true);
        std::future::pending::<i32>().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_program_that_ignores_term_is_killed_when_the_grace_period_ends() {
    let mut programs = Programs::new();
    programs.register("stubborn", Arc::new(Stubborn));
    let env = start_with(programs, KubeConfig::default());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "stubborn"},
        "spec": {"terminationGracePeriodSeconds": 7,
                 "containers": [{"name": "main", "image": "stubborn:1"}]}
    }))
    .unwrap();
    create_pod(&env, pod).await;
    env.pod_until("default", "stubborn", "Ready", |p| {
        cond_status(p, "Ready") == "True"
    })
    .await;
    let pods: Api<Pod> = Api::default_namespaced(env.cluster.client());
    let t = env.elapsed();
    pods.delete("stubborn", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        env.models
            .kubelet()
            .running_containers("default", "stubborn"),
        ["main"]
    );
    env.pod_gone("default", "stubborn").await;
    assert_eq!(env.elapsed() - t, Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn kill_1_inside_exec_terminates_the_first_container_and_always_restarts_it() {
    let env = start();
    create_pod(&env, pod_json("victim", "Always", &["sleep", "3600"])).await;
    env.pod_until("default", "victim", "Ready", |p| {
        cond_status(p, "Ready") == "True"
    })
    .await;
    let out = env
        .cluster
        .exec("default", "victim", None, &["kill".into(), "1".into()], b"")
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    let p = env
        .pod_until("default", "victim", "restarted", |p| {
            restart_count(p) == 1 && cond_status(p, "Ready") == "True"
        })
        .await;
    assert_eq!(
        container_status(&p, "main").pointer("/lastState/terminated/exitCode"),
        Some(&json!(143))
    );
    let out = env
        .cluster
        .exec("default", "victim", None, &["kill".into(), "2".into()], b"")
        .await
        .unwrap();
    assert_eq!(out.exit_code, 1);
    // The handle kills too: exit 137, then the back-off (10 s) before restart 2.
    assert!(
        env.models
            .kubelet()
            .kill_container("default", "victim", "main")
    );
    let t = env.elapsed();
    let p = env
        .pod_until("default", "victim", "restarted twice", |p| {
            restart_count(p) == 2
        })
        .await;
    assert_eq!(env.elapsed() - t, Duration::from_secs(10));
    assert_eq!(
        container_status(&p, "main").pointer("/lastState/terminated/exitCode"),
        Some(&json!(137))
    );
}

// -------------------------------------------------------------------------------------------
// workloads
// -------------------------------------------------------------------------------------------

/// Runs `sh -c script` in a container of a pod and returns (stdout, exit code).
async fn sh_in(env: &Env, pod: &str, container: &str, script: &str) -> (String, i32) {
    let out = env
        .cluster
        .exec(
            "default",
            pod,
            Some(container),
            &["sh".into(), "-c".into(), script.into()],
            b"",
        )
        .await
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.exit_code,
    )
}

/// Each process of the exec's PID namespace: `pid argv…` per line.
const PS: &str = "for d in /proc/[0-9]*; do echo ${d#/proc/} $(tr '\\0' ' ' < $d/cmdline); done";

async fn ready_pod(env: &Env, pod: Value) {
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    create_pod(env, serde_json::from_value(pod).unwrap()).await;
    env.pod_until("default", &name, "Ready", |p| {
        cond_status(p, "Ready") == "True"
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn kill_kill_1_inside_a_container_of_its_own_is_dropped_as_the_kernel_drops_it() {
    let env = start();
    ready_pod(
        &env,
        serde_json::to_value(pod_json("victim", "Never", &["sleep", "3600"])).unwrap(),
    )
    .await;
    assert_eq!(
        sh_in(&env, "victim", "main", PS).await,
        ("1 sleep 3600\n".into(), 0)
    );
    assert_eq!(sh_in(&env, "victim", "main", "kill -KILL 1").await.1, 0);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let p = env
        .pod_until("default", "victim", "still running", |_| true)
        .await;
    assert_eq!(restart_count(&p), 0);
    assert!(
        container_status(&p, "main")
            .pointer("/state/running")
            .is_some(),
        "{p:#}"
    );
    assert_eq!(
        env.models.kubelet().running_containers("default", "victim"),
        ["main"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_shared_pid_namespace_shows_the_pause_process_as_1_and_kills_a_sibling() {
    let env = start();
    ready_pod(
        &env,
        json!({
            "metadata": {"name": "shared"},
            "spec": {"restartPolicy": "Never", "shareProcessNamespace": true, "containers": [
                {"name": "a", "image": "busybox:1.36", "command": ["sleep", "3600"]},
                {"name": "b", "image": "busybox:1.36", "command": ["sleep", "7200"]}]}
        }),
    )
    .await;
    assert_eq!(
        sh_in(&env, "shared", "a", PS).await,
        ("1 /pause\n2 sleep 3600\n3 sleep 7200\n".into(), 0)
    );
    let p = env.pod_until("default", "shared", "ids", |_| true).await;
    let b_id = container_status(&p, "b")["containerID"]
        .as_str()
        .unwrap()
        .to_string();
    let b_id = b_id.strip_prefix("containerd://").unwrap();
    assert_eq!(
        sh_in(&env, "shared", "a", "cat /proc/2/cgroup").await.0,
        "0::/\n"
    );
    assert_eq!(
        sh_in(&env, "shared", "a", "cat /proc/3/cgroup").await.0,
        format!("0::/../cri-containerd-{b_id}.scope\n")
    );
    // The pause process is the namespace's init: a SIGKILL to it is dropped.
    assert_eq!(
        sh_in(&env, "shared", "a", "kill -KILL 1 && kill -KILL 3")
            .await
            .1,
        0
    );
    let p = env
        .pod_until("default", "shared", "b killed", |p| {
            container_status(p, "b")
                .pointer("/state/terminated")
                .is_some()
        })
        .await;
    assert_eq!(
        container_status(&p, "b").pointer("/state/terminated/exitCode"),
        Some(&json!(137))
    );
    assert!(
        container_status(&p, "a")
            .pointer("/state/running")
            .is_some()
    );
}

#[tokio::test(start_paused = true)]
async fn a_host_pid_pod_sees_every_process_by_its_host_pid_and_kills_a_containers_init() {
    let env = start();
    ready_pod(
        &env,
        serde_json::to_value(pod_json(
            "victim",
            "Always",
            &["openshell-sandbox", "--workdir", "/sandbox"],
        ))
        .unwrap(),
    )
    .await;
    ready_pod(
        &env,
        json!({
            "metadata": {"name": "node-access"},
            "spec": {"hostPID": true, "restartPolicy": "Never", "containers": [
                {"name": "sh", "image": "busybox:1.37.0", "command": ["sleep", "600"],
                 "securityContext": {"privileged": true}}]}
        }),
    )
    .await;
    let (ps, _) = sh_in(&env, "node-access", "sh", PS).await;
    let lines: Vec<&str> = ps.lines().collect();
    assert_eq!(
        lines.len(),
        4,
        "two pause processes and two containers: {ps}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l.split(' ').next().unwrap().parse::<u32>().unwrap() >= 1000),
        "{ps}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with(" openshell-sandbox --workdir /sandbox")),
        "{ps}"
    );
    let p = env.pod_until("default", "victim", "ids", |_| true).await;
    let id = container_status(&p, "main")["containerID"]
        .as_str()
        .unwrap()
        .to_string();
    let id = id.strip_prefix("containerd://").unwrap().to_string();
    let script = format!(
        "n=0; for d in /proc/[0-9]*; do grep -q -- {id} $d/cgroup || continue; \
         c=$(tr '\\0' ' ' < $d/cmdline); case \"$c\" in *openshell-sandbox*) kill -KILL ${{d#/proc/}} && n=$((n+1));; esac; done; echo $n"
    );
    assert_eq!(
        sh_in(&env, "node-access", "sh", &script).await,
        ("1\n".into(), 0)
    );
    let p = env
        .pod_until("default", "victim", "restarted", |p| restart_count(p) == 1)
        .await;
    assert_eq!(
        container_status(&p, "main").pointer("/lastState/terminated/exitCode"),
        Some(&json!(137))
    );
}

fn pvc_ref() -> ResourceRef {
    ResourceRef::new("", "v1", "persistentvolumeclaims")
}

async fn gateway_statefulset(env: &Env) {
    env.cluster
        .create(
            &ResourceRef::new("", "v1", "namespaces"),
            None,
            json!({"metadata": {"name": "openshell"}}),
        )
        .unwrap();
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "openshell", "namespace": "openshell"},
        "spec": {"replicas": 1, "serviceName": "openshell",
            "selector": {"matchLabels": {"app.kubernetes.io/name": "openshell"}},
            "template": {"metadata": {"labels": {"app.kubernetes.io/name": "openshell"}},
                "spec": {"terminationGracePeriodSeconds": 5, "containers": [{"name": "openshell-gateway",
                    "image": "ghcr.io/nvidia/openshell/gateway:0.0.111", "command": ["sleep", "infinity"],
                    "volumeMounts": [{"name": "openshell-data", "mountPath": "/var/openshell"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "openshell-data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}
    }))
    .unwrap();
    let api: Api<StatefulSet> = Api::namespaced(env.cluster.client(), "openshell");
    api.create(&PostParams::default(), &sts).await.unwrap();
}

fn sts_status(env: &Env, field: &str) -> i64 {
    env.cluster
        .get(
            &ResourceRef::new("apps", "v1", "statefulsets"),
            Some("openshell"),
            "openshell",
        )
        .unwrap()
        .pointer(&format!("/status/{field}"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

#[tokio::test(start_paused = true)]
async fn a_statefulset_scaled_1_0_1_removes_and_recreates_openshell_0_with_the_same_pvc() {
    let env = start();
    gateway_statefulset(&env).await;
    let p = env
        .pod_until("openshell", "openshell-0", "Ready", |p| {
            cond_status(p, "Ready") == "True"
        })
        .await;
    assert_eq!(env.elapsed(), Duration::from_secs(1));
    let first_uid = p["metadata"]["uid"].clone();
    assert_eq!(
        p.pointer("/metadata/labels/statefulset.kubernetes.io~1pod-name"),
        Some(&json!("openshell-0"))
    );
    assert_eq!(
        p["metadata"]["ownerReferences"][0]["kind"],
        json!("StatefulSet")
    );
    assert_eq!(
        p["metadata"]["ownerReferences"][0]["controller"],
        json!(true)
    );
    let vol = p["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == json!("openshell-data"))
        .unwrap();
    assert_eq!(
        vol.pointer("/persistentVolumeClaim/claimName"),
        Some(&json!("openshell-data-openshell-0"))
    );
    let pvc = env
        .until(
            &pvc_ref(),
            "openshell",
            "openshell-data-openshell-0",
            "Bound",
            |p| p.is_some_and(|p| phase(p) == "Bound"),
        )
        .await
        .unwrap();
    assert_eq!(
        pvc.pointer("/spec/storageClassName"),
        Some(&json!("standard"))
    );
    assert_eq!(pvc.pointer("/status/capacity/storage"), Some(&json!("1Gi")));
    let pvc_uid = pvc["metadata"]["uid"].clone();
    assert!(pvc.pointer("/spec/volumeName").is_some());
    // Write to the data volume.
    env.cluster
        .exec(
            "openshell",
            "openshell-0",
            None,
            &[
                "sh".into(),
                "-c".into(),
                "echo db > /var/openshell/openshell.db".into(),
            ],
            b"",
        )
        .await
        .unwrap();
    env.until(
        &ResourceRef::new("apps", "v1", "statefulsets"),
        "openshell",
        "openshell",
        "ready 1",
        |s| s.is_some_and(|s| s.pointer("/status/readyReplicas") == Some(&json!(1))),
    )
    .await;
    assert_eq!(sts_status(&env, "availableReplicas"), 1);

    let api: Api<StatefulSet> = Api::namespaced(env.cluster.client(), "openshell");
    api.patch_scale(
        "openshell",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 0}})),
    )
    .await
    .unwrap();
    let t = env.elapsed();
    env.pod_gone("openshell", "openshell-0").await;
    assert_eq!(env.elapsed(), t, "sleep exits on TERM at once");
    env.until(
        &ResourceRef::new("apps", "v1", "statefulsets"),
        "openshell",
        "openshell",
        "replicas 0",
        |s| s.is_some_and(|s| s.pointer("/status/replicas") == Some(&json!(0))),
    )
    .await;
    assert_eq!(sts_status(&env, "readyReplicas"), 0);
    let kept = env
        .cluster
        .get(&pvc_ref(), Some("openshell"), "openshell-data-openshell-0")
        .unwrap();
    assert_eq!(kept["metadata"]["uid"], pvc_uid);

    api.patch_scale(
        "openshell",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    let p = env
        .pod_until("openshell", "openshell-0", "Ready again", |p| {
            cond_status(p, "Ready") == "True"
        })
        .await;
    assert_ne!(p["metadata"]["uid"], first_uid);
    let out = env
        .cluster
        .exec(
            "openshell",
            "openshell-0",
            None,
            &["cat".into(), "/var/openshell/openshell.db".into()],
            b"",
        )
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "db\n");
    let pvc = env
        .cluster
        .get(&pvc_ref(), Some("openshell"), "openshell-data-openshell-0")
        .unwrap();
    assert_eq!(pvc["metadata"]["uid"], pvc_uid);
}

#[tokio::test(start_paused = true)]
async fn a_deleted_statefulset_pod_is_recreated_with_the_same_name_after_the_old_one_is_gone() {
    let env = start();
    gateway_statefulset(&env).await;
    let p = env
        .pod_until("openshell", "openshell-0", "Ready", |p| {
            cond_status(p, "Ready") == "True"
        })
        .await;
    let pods: Api<Pod> = Api::namespaced(env.cluster.client(), "openshell");
    pods.delete("openshell-0", &DeleteParams::default())
        .await
        .unwrap();
    let uid = p["metadata"]["uid"].clone();
    let t = env.elapsed();
    let p = env
        .pod_until("openshell", "openshell-0", "replaced and Ready", |p| {
            p["metadata"]["uid"] != uid && cond_status(p, "Ready") == "True"
        })
        .await;
    assert_eq!(env.elapsed() - t, Duration::from_secs(1));
    // A new pod, not a restarted container: its containers start with no restarts.
    assert_eq!(
        p.pointer("/status/containerStatuses/0/restartCount"),
        Some(&json!(0))
    );
    assert_eq!(p["metadata"]["name"], json!("openshell-0"));
}

#[tokio::test(start_paused = true)]
async fn a_deployment_gets_one_replicaset_and_pods_with_deterministic_names_and_statuses() {
    let env = start();
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx", "command": ["sleep", "infinity"]}]}}}
    }))
    .unwrap();
    let api: Api<Deployment> = Api::default_namespaced(env.cluster.client());
    api.create(&PostParams::default(), &d).await.unwrap();
    let dep = env
        .until(
            &ResourceRef::new("apps", "v1", "deployments"),
            "default",
            "web",
            "available",
            |d| d.is_some_and(|d| d.pointer("/status/availableReplicas") == Some(&json!(2))),
        )
        .await
        .unwrap();
    assert_eq!(env.elapsed(), Duration::from_secs(1));
    let conds = dep.pointer("/status/conditions").unwrap();
    assert_eq!(conds[0]["type"], json!("Available"));
    assert_eq!(conds[0]["status"], json!("True"));
    assert_eq!(conds[1]["reason"], json!("NewReplicaSetAvailable"));
    let (rss, _) = env
        .cluster
        .list(
            &ResourceRef::new("apps", "v1", "replicasets"),
            Some("default"),
            &Default::default(),
        )
        .unwrap();
    assert_eq!(rss.len(), 1);
    let rs_name = rss[0]["metadata"]["name"].as_str().unwrap().to_string();
    let hash = rss[0]
        .pointer("/metadata/labels/pod-template-hash")
        .unwrap()
        .as_str()
        .unwrap();
    assert_eq!(rs_name, format!("web-{hash}"));
    assert_eq!(rss[0].pointer("/status/readyReplicas"), Some(&json!(2)));
    let (pods, _) = env
        .cluster
        .list(&ResourceRef::pods(), Some("default"), &Default::default())
        .unwrap();
    let names: Vec<String> = pods
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 2);
    for n in &names {
        let suffix = n.strip_prefix(&format!("{rs_name}-")).unwrap();
        assert_eq!(suffix.len(), 5, "{n}");
    }
    // Scale to 0: the pods go; back to 1: one pod.
    api.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 0}})),
    )
    .await
    .unwrap();
    for n in &names {
        env.pod_gone("default", n).await;
    }
    api.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    env.until(
        &ResourceRef::new("apps", "v1", "deployments"),
        "default",
        "web",
        "available 1",
        |d| d.is_some_and(|d| d.pointer("/status/readyReplicas") == Some(&json!(1))),
    )
    .await;
}

// -------------------------------------------------------------------------------------------
// Agent Sandbox
// -------------------------------------------------------------------------------------------

fn sb_ref() -> ResourceRef {
    crate::agent_sandbox::sandboxes_in("v1beta1")
}

fn start_version(v: AgentSandboxVersion) -> Env {
    start_with(
        Programs::new(),
        KubeConfig {
            agent_sandbox_version: v,
            ..KubeConfig::default()
        },
    )
}

/// A sandbox like OpenShell creates it (docs/upstream-facts.md section 3), running `command`.
fn create_sandbox(env: &Env, name: &str, command: &[&str]) -> Value {
    env.cluster
        .create(
            &sb_ref(),
            Some("default"),
            json!({
                "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                "metadata": {"name": name, "labels": {"openshell.ai/managed-by": "openshell"}},
                "spec": {
                    "podTemplate": {
                        "metadata": {"annotations": {"openshell.io/sandbox-id": "sb-1"}},
                        "spec": {"restartPolicy": "Never", "containers": [{"name": "agent", "image": "base:latest",
                            "command": command,
                            "volumeMounts": [{"name": "workspace", "mountPath": "/sandbox"}]}]}},
                    "volumeClaimTemplates": [{"metadata": {"name": "workspace"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}}]}
            }),
        )
        .map(std::sync::Arc::unwrap_or_clone)
        .unwrap()
}

fn conditions(sb: &Value) -> Vec<(String, String, String, String)> {
    sb.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    let f = |k: &str| c[k].as_str().unwrap_or("").to_string();
                    (f("type"), f("status"), f("reason"), f("message"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn cond(t: &str, st: &str, r: &str, m: &str) -> (String, String, String, String) {
    (t.into(), st.into(), r.into(), m.into())
}

async fn sandbox_until(env: &Env, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    env.until(&sb_ref(), "default", name, what, |v| v.is_some_and(&pred))
        .await
        .unwrap()
}

fn is_sb_ready(sb: &Value) -> bool {
    conditions(sb)
        .iter()
        .any(|c| c.0 == "Ready" && c.1 == "True")
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_gets_its_workspace_pvc_and_pod_with_the_reference_names_labels_owners_and_annotation()
 {
    let env = start();
    let cr = create_sandbox(&env, "default--demo", &["sleep", "infinity"]);
    let sb = sandbox_until(&env, "default--demo", "Ready", is_sb_ready).await;
    assert_eq!(env.elapsed(), Duration::from_secs(1));
    assert_eq!(
        conditions(&sb),
        [cond("Ready", "True", "DependenciesReady", "Pod is Ready")]
    );
    assert_eq!(
        sb["status"]["conditions"][0]["observedGeneration"],
        json!(1)
    );
    assert_eq!(
        sb.pointer("/status/selector"),
        Some(&json!("agents.x-k8s.io/sandbox-name-hash=523e82a3"))
    );
    assert_eq!(sb.pointer("/status/podIPs"), Some(&json!(["10.244.0.2"])));
    assert_eq!(
        sb.pointer("/status/nodeName"),
        Some(&json!("emulated-node"))
    );
    assert_eq!(
        sb.pointer("/metadata/annotations/agents.x-k8s.io~1pod-name"),
        Some(&json!("default--demo"))
    );
    assert_eq!(sb["metadata"]["generation"], json!(1));
    let owner = json!([{"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "name": "default--demo",
        "uid": cr["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]);
    let pod = env
        .cluster
        .get(&ResourceRef::pods(), Some("default"), "default--demo")
        .unwrap();
    assert_eq!(pod["metadata"]["ownerReferences"], owner);
    assert_eq!(
        pod.pointer("/metadata/labels/agents.x-k8s.io~1sandbox-name-hash"),
        Some(&json!("523e82a3"))
    );
    assert_eq!(
        pod.pointer("/metadata/annotations"),
        Some(&json!({"openshell.io/sandbox-id": "sb-1",
            "agents.x-k8s.io/propagated-annotations": "openshell.io/sandbox-id"}))
    );
    let vols = pod["spec"]["volumes"].as_array().unwrap();
    assert_eq!(
        vols.last().unwrap(),
        &json!({"name": "workspace", "persistentVolumeClaim": {"claimName": "workspace-default--demo"}})
    );
    let pvc = env
        .cluster
        .get(&pvc_ref(), Some("default"), "workspace-default--demo")
        .unwrap();
    assert_eq!(pvc["metadata"]["ownerReferences"], owner);
    assert_eq!(
        pvc.pointer("/metadata/labels/agents.x-k8s.io~1sandbox-name-hash"),
        Some(&json!("523e82a3"))
    );
    assert_eq!(phase(&pvc), "Bound");
    assert!(sb.pointer("/metadata/finalizers").is_none());
    assert!(pod.pointer("/metadata/finalizers").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_failed_sandbox_pod_gives_the_v0_5_0_conditions_and_is_never_restarted() {
    let env = start_version(AgentSandboxVersion::V0_5_0);
    create_sandbox(&env, "fails", &["sh", "-c", "sleep 11; exit 1"]);
    let sb = sandbox_until(&env, "fails", "Finished", |sb| {
        conditions(sb).iter().any(|c| c.0 == "Finished")
    })
    .await;
    assert_eq!(env.elapsed(), Duration::from_secs(12));
    assert_eq!(
        conditions(&sb),
        [
            cond(
                "Ready",
                "False",
                "DependenciesNotReady",
                "Pod exists with phase: Failed"
            ),
            cond("Finished", "True", "PodFailed", "Pod failed"),
        ]
    );
    let pod = env
        .cluster
        .get(&ResourceRef::pods(), Some("default"), "fails")
        .unwrap();
    tokio::time::sleep(Duration::from_secs(600)).await;
    let later = env
        .cluster
        .get(&ResourceRef::pods(), Some("default"), "fails")
        .unwrap();
    assert_eq!(later["metadata"]["uid"], pod["metadata"]["uid"]);
    assert_eq!(phase(&later), "Failed");
    assert_eq!(container_status(&later, "agent")["restartCount"], json!(0));
}

#[tokio::test(start_paused = true)]
async fn a_failed_sandbox_pod_gives_the_v0_5_1_conditions() {
    let env = start_version(AgentSandboxVersion::V0_5_1);
    create_sandbox(&env, "fails", &["sh", "-c", "exit 1"]);
    let sb = sandbox_until(&env, "fails", "Finished", |sb| {
        conditions(sb).iter().any(|c| c.0 == "Finished")
    })
    .await;
    assert_eq!(
        conditions(&sb),
        [
            cond("Ready", "False", "PodFailed", "Pod failed"),
            cond("Finished", "True", "PodFailed", "Pod failed"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_deleted_sandbox_pod_is_recreated_with_a_new_uid_and_the_workspace_survives() {
    let env = start();
    create_sandbox(&env, "keep", &["sleep", "infinity"]);
    sandbox_until(&env, "keep", "Ready", is_sb_ready).await;
    let out = env
        .cluster
        .exec(
            "default",
            "keep",
            None,
            &[
                "sh".into(),
                "-c".into(),
                "echo sentinel > /sandbox/s.txt".into(),
            ],
            b"",
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0);
    let old = env
        .cluster
        .get(&ResourceRef::pods(), Some("default"), "keep")
        .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(env.cluster.client());
    pods.delete("keep", &DeleteParams::default()).await.unwrap();
    let new = env
        .pod_until("default", "keep", "replaced and Ready", |p| {
            p["metadata"]["uid"] != old["metadata"]["uid"] && cond_status(p, "Ready") == "True"
        })
        .await;
    assert_eq!(new["spec"]["volumes"], old["spec"]["volumes"]);
    sandbox_until(&env, "keep", "Ready again", is_sb_ready).await;
    let out = env
        .cluster
        .exec(
            "default",
            "keep",
            None,
            &["cat".into(), "/sandbox/s.txt".into()],
            b"",
        )
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "sentinel\n");
}

#[tokio::test(start_paused = true)]
async fn suspend_deletes_the_pod_and_keeps_the_pvc_and_resume_recreates_it_v0_5_0() {
    let env = start();
    create_sandbox(&env, "nap", &["sleep", "infinity"]);
    sandbox_until(&env, "nap", "Ready", is_sb_ready).await;
    let pvc = env
        .cluster
        .get(&pvc_ref(), Some("default"), "workspace-nap")
        .unwrap();
    env.cluster
        .patch(
            &sb_ref(),
            Some("default"),
            "nap",
            PatchKind::Merge,
            &json!({"spec": {"operatingMode": "Suspended"}}),
        )
        .unwrap();
    let sb = sandbox_until(&env, "nap", "Suspended", |sb| {
        conditions(sb).iter().any(|c| c.0 == "Suspended")
    })
    .await;
    assert_eq!(
        conditions(&sb),
        [
            cond("Ready", "False", "SandboxSuspended", "Sandbox is suspended"),
            cond(
                "Suspended",
                "True",
                "PodTerminated",
                "Pod has been terminated. Sandbox is not operational."
            ),
        ]
    );
    assert_eq!(
        sb["status"]["conditions"][1]["observedGeneration"],
        json!(2)
    );
    assert!(
        sb.pointer("/metadata/annotations/agents.x-k8s.io~1pod-name")
            .is_none()
    );
    env.pod_gone("default", "nap").await;
    let kept = env
        .cluster
        .get(&pvc_ref(), Some("default"), "workspace-nap")
        .unwrap();
    assert_eq!(kept["metadata"]["uid"], pvc["metadata"]["uid"]);

    env.cluster
        .patch(
            &sb_ref(),
            Some("default"),
            "nap",
            PatchKind::Merge,
            &json!({"spec": {"operatingMode": "Running"}}),
        )
        .unwrap();
    env.pod_until("default", "nap", "Ready", |p| {
        cond_status(p, "Ready") == "True"
    })
    .await;
    let sb = sandbox_until(&env, "nap", "Ready", is_sb_ready).await;
    // v0.5.0 never removes Suspended: it stays stale after a resume (docs/upstream-facts.md F4.5).
    assert_eq!(
        conditions(&sb),
        [
            cond("Ready", "True", "DependenciesReady", "Pod is Ready"),
            cond(
                "Suspended",
                "True",
                "PodTerminated",
                "Pod has been terminated. Sandbox is not operational."
            ),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn v0_5_4_reports_pod_terminating_until_the_pod_is_gone_and_keeps_suspended_first() {
    let env = start_version(AgentSandboxVersion::V0_5_4);
    create_sandbox(
        &env,
        "nap",
        &["sh", "-c", "trap 'sleep 3; exit 0' TERM; sleep infinity"],
    );
    let sb = sandbox_until(&env, "nap", "Ready", is_sb_ready).await;
    assert_eq!(
        conditions(&sb),
        [
            cond(
                "Suspended",
                "False",
                "NotSuspended",
                "Sandbox is not suspended"
            ),
            cond("Ready", "True", "DependenciesReady", "Pod is Ready"),
        ]
    );
    env.cluster
        .patch(
            &sb_ref(),
            Some("default"),
            "nap",
            PatchKind::Merge,
            &json!({"spec": {"operatingMode": "Suspended"}}),
        )
        .unwrap();
    let sb = sandbox_until(&env, "nap", "Suspended", |sb| {
        conditions(sb)
            .iter()
            .any(|c| c.0 == "Suspended" && c.1 == "True")
    })
    .await;
    assert_eq!(
        conditions(&sb),
        [
            cond(
                "Suspended",
                "True",
                "PodTerminated",
                "Pod has been terminated. Sandbox is suspended"
            ),
            cond("Ready", "False", "SandboxSuspended", "Sandbox is suspended"),
        ]
    );
    assert!(
        env.cluster
            .get(&ResourceRef::pods(), Some("default"), "nap")
            .is_err()
    );
}

#[tokio::test(start_paused = true)]
async fn deleting_the_sandbox_removes_its_pod_and_pvc() {
    let env = start();
    create_sandbox(&env, "bye", &["sleep", "infinity"]);
    sandbox_until(&env, "bye", "Ready", is_sb_ready).await;
    let (_, gone) = env
        .cluster
        .delete(&sb_ref(), Some("default"), "bye", &Default::default())
        .unwrap();
    assert!(gone, "no finalizer: the CR goes at once");
    env.pod_gone("default", "bye").await;
    env.until(&pvc_ref(), "default", "workspace-bye", "gone", |p| {
        p.is_none()
    })
    .await;
}

/// Records, when the kubelet starts it, whether its pod already said the container runs.
struct SeesItsStart {
    running_at_start: Arc<std::sync::Mutex<Vec<bool>>>,
}

#[async_trait]
impl ContainerProgram for SeesItsStart {
    async fn run(&self, ctx: ContainerCtx) -> i32 {
        ctx.set_ready(true);
        std::future::pending::<i32>().await
    }

    fn on_start(&self, ctx: &ContainerCtx) {
        let pod = ctx
            .cluster
            .get(&ResourceRef::pods(), Some(&ctx.namespace), &ctx.pod)
            .unwrap();
        let running = pod
            .pointer("/status/containerStatuses/0/state/running")
            .is_some();
        self.running_at_start.lock().unwrap().push(running);
    }
}

#[tokio::test(start_paused = true)]
async fn a_program_prepares_its_container_before_the_pod_says_it_runs() {
    let seen = Arc::new(std::sync::Mutex::new(vec![]));
    let mut programs = Programs::new();
    programs.register(
        "sees-its-start",
        Arc::new(SeesItsStart {
            running_at_start: seen.clone(),
        }),
    );
    let env = start_with(programs, KubeConfig::default());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "early"},
        "spec": {"containers": [{"name": "main", "image": "sees-its-start:1"}]}
    }))
    .unwrap();
    create_pod(&env, pod).await;
    env.pod_until("default", "early", "Ready", |p| {
        cond_status(p, "Ready") == "True"
    })
    .await;
    // An exec handler set up then exists before any client can see the container running.
    assert_eq!(*seen.lock().unwrap(), [false]);
}
