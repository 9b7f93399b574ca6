//! Regressions of model bugs the conformance catalog found, end to end through the `Target`
//! trait on the full Kubernetes models (StatefulSet, Agent Sandbox controller, kubelet), in
//! paused (virtual) time.

use std::sync::Arc;
use std::time::Duration;

use crate::spec::Selection;
use conformance_core::phase::Phase;
use conformance_core::target::{Fault, RestartPolicy, SandboxSpec, Target, TargetFactory};

async fn target(topology: &str) -> Arc<dyn Target> {
    let topos = conformance_core::topology::Topologies::builtin();
    let topo = topos.get(topology).unwrap();
    let f = crate::target::EmulatedFactory::new(Selection::contract());
    let rec = conformance_core::timeline::Recorder::new();
    let t = f.provision(topo, &rec).await.unwrap();
    t.install(topo).await.unwrap();
    t
}

fn spec(name: &str, restart_policy: Option<RestartPolicy>) -> SandboxSpec {
    SandboxSpec {
        name: name.into(),
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            "mkdir -p /sandbox/.conformance; echo start >> /sandbox/.conformance/starts; sleep 1000000".into(),
        ]),
        restart_policy,
        ..Default::default()
    }
}

/// The gateway's phase of the sandbox; None while it is unknown or unreachable.
async fn phase(t: &dyn Target, name: &str) -> Option<Phase> {
    match t.get_sandbox(name).await {
        Ok(Some(v)) => Some(v.phase),
        _ => None,
    }
}

/// Waits (virtual time) until the sandbox shows `want`; the last phase seen otherwise.
async fn wait_phase(t: &dyn Target, name: &str, want: Phase, within: Duration) -> Option<Phase> {
    let end = tokio::time::Instant::now() + within;
    loop {
        let p = phase(t, name).await;
        if p.as_ref() == Some(&want) || tokio::time::Instant::now() >= end {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn starts(t: &dyn Target, name: &str) -> usize {
    t.read_workspace(name, ".conformance/starts")
        .await
        .unwrap()
        .map_or(0, |s| s.lines().count())
}

async fn shell_works(t: &dyn Target, name: &str) -> Result<(), String> {
    let out = t
        .exec(name, &["sh".into(), "-c".into(), "echo ok".into()])
        .await
        .map_err(|e| e.to_string())?;
    if out.exit_code == 0 && out.stdout == "ok\n" {
        Ok(())
    } else {
        Err(format!("{out:?}"))
    }
}

/// Restart policy Always: a killed main process runs again (the relaunch request was lost
/// because the process side's `changed()` had already marked it seen).
#[tokio::test(start_paused = true)]
async fn restart_policy_always_relaunches_a_killed_main_process_on_every_topology() {
    for topo in ["combined", "sidecar", "supervisor-pod", "gateway"] {
        let t = target(topo).await;
        let t = t.as_ref();
        t.create_sandbox(&spec("demo", Some(RestartPolicy::Always)))
            .await
            .unwrap();
        assert_eq!(
            wait_phase(t, "demo", Phase::Ready, Duration::from_secs(120)).await,
            Some(Phase::Ready),
            "{topo}"
        );
        assert_eq!(starts(t, "demo").await, 1, "{topo}");
        let f = Fault::MainProcessKill {
            sandbox: "demo".into(),
        };
        t.inject(&f).await.unwrap();
        t.restore(&f).await.unwrap();
        let end = tokio::time::Instant::now() + Duration::from_secs(120);
        while starts(t, "demo").await < 2 && tokio::time::Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert_eq!(starts(t, "demo").await, 2, "{topo}: main started again");
        assert_eq!(
            wait_phase(t, "demo", Phase::Ready, Duration::from_secs(60)).await,
            Some(Phase::Ready),
            "{topo}"
        );
        shell_works(t, "demo").await.unwrap();
        t.teardown().await.unwrap();
    }
}

/// Polls until the sandbox is Ready and, at the first Ready seen, the shell must already work:
/// Ready means usable (R1).
async fn ready_means_usable(t: &dyn Target, name: &str, within: Duration, what: &str) {
    let end = tokio::time::Instant::now() + within;
    loop {
        let p = phase(t, name).await;
        if p == Some(Phase::Ready) {
            if let Err(e) = shell_works(t, name).await {
                panic!("{what}: Ready but the shell does not work: {e}");
            }
            return;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "{what}: not Ready in time (last phase {p:?})"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Gated topologies: stop, start, and a gateway outage while starting. The boundary used to
/// open its session (and the gateway to say Ready) while the replacement workload pod was
/// still behind its gate, because the in-pod link described the previous pod.
#[tokio::test(start_paused = true)]
async fn gated_topologies_are_ready_only_once_the_replacement_workload_runs() {
    for topo in ["supervisor-pod", "gateway"] {
        let t = target(topo).await;
        let t = t.as_ref();
        t.create_sandbox(&spec("demo", None)).await.unwrap();
        ready_means_usable(t, "demo", Duration::from_secs(120), topo).await;
        t.stop_sandbox("demo").await.unwrap();
        assert_eq!(
            wait_phase(t, "demo", Phase::Stopped, Duration::from_secs(60)).await,
            Some(Phase::Stopped),
            "{topo}"
        );
        t.start_sandbox("demo").await.unwrap();
        let f = Fault::GatewayStop;
        t.inject(&f).await.unwrap();
        tokio::time::sleep(Duration::from_secs(160)).await;
        t.restore(&f).await.unwrap();
        ready_means_usable(t, "demo", Duration::from_secs(300), topo).await;
        // Without an outage too.
        t.stop_sandbox("demo").await.unwrap();
        assert_eq!(
            wait_phase(t, "demo", Phase::Stopped, Duration::from_secs(60)).await,
            Some(Phase::Stopped),
            "{topo}"
        );
        t.start_sandbox("demo").await.unwrap();
        ready_means_usable(t, "demo", Duration::from_secs(300), topo).await;
        t.teardown().await.unwrap();
    }
}

/// Bootstrap Error (bad credentials, supervisor restarted), credentials restored, stop and
/// start: the sandbox is usable again on every topology. On the gateway topology the shared
/// supervisor never retried a boundary that had failed once.
#[tokio::test(start_paused = true)]
async fn stop_and_start_recover_a_bootstrap_error_on_every_topology() {
    for topo in ["combined", "sidecar", "supervisor-pod", "gateway"] {
        let t = target(topo).await;
        let t = t.as_ref();
        t.create_sandbox(&spec("demo", None)).await.unwrap();
        ready_means_usable(t, "demo", Duration::from_secs(120), topo).await;
        let creds = Fault::BootstrapCredentials {
            sandbox: "demo".into(),
            what: conformance_core::target::BootstrapMaterial::Credentials,
        };
        let kill = Fault::SupervisorKill {
            sandbox: "demo".into(),
        };
        t.inject(&creds).await.unwrap();
        t.inject(&kill).await.unwrap();
        t.restore(&kill).await.unwrap();
        assert_eq!(
            wait_phase(t, "demo", Phase::Error, Duration::from_secs(120)).await,
            Some(Phase::Error),
            "{topo}"
        );
        t.restore(&creds).await.unwrap();
        t.stop_sandbox("demo").await.unwrap();
        assert_eq!(
            wait_phase(t, "demo", Phase::Stopped, Duration::from_secs(60)).await,
            Some(Phase::Stopped),
            "{topo}"
        );
        t.start_sandbox("demo").await.unwrap();
        ready_means_usable(t, "demo", Duration::from_secs(300), topo).await;
        t.teardown().await.unwrap();
    }
}
