//! The Kubernetes models (kubelet, workload controllers, Agent Sandbox controller) on the
//! emulated cluster, in paused (virtual) time. Durations asserted are virtual.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams, PostParams};
use openshell_conformance::emulate::{Cluster, ClusterConfig, ResourceRef, WatchParams};
use openshell_conformance::models::kube::{KubeConfig, KubeModels};
use openshell_conformance::models::network::Network;
use openshell_conformance::models::program::{ContainerCtx, ContainerProgram, Programs};
use serde_json::{Value, json};
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(3600);

struct Env {
    cluster: Cluster,
    models: KubeModels,
    t0: Instant,
}

fn start_with(programs: Programs, config: KubeConfig) -> Env {
    let cluster = Cluster::new(ClusterConfig::default());
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
