//! Regressions of model bugs the conformance catalog found, end to end through the `Target`
//! trait on the full Kubernetes models (StatefulSet, Agent Sandbox controller, kubelet), in
//! paused (virtual) time.

use std::sync::Arc;
use std::time::Duration;

use openshell_conformance::models::spec::Selection;
use openshell_conformance::target::{Fault, RestartPolicy, SandboxSpec, Target, TargetFactory};

async fn target(topology: &str) -> Arc<dyn Target> {
    let topos = openshell_conformance::topology::Topologies::builtin();
    let topo = topos.get(topology).unwrap();
    let f = openshell_conformance::models::target::EmulatedFactory::new(Selection::contract());
    let rec = openshell_conformance::timeline::Recorder::new();
    let t = f.provision(topo, &rec).await.unwrap();
    t.install(topo).await.unwrap();
    t.into()
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

async fn phase(t: &dyn Target, name: &str) -> String {
    match t.get_sandbox(name).await {
        Ok(Some(v)) => v.phase,
        _ => String::new(),
    }
}

/// Waits (virtual time) until the sandbox shows `want`; the last phase seen otherwise.
async fn wait_phase(t: &dyn Target, name: &str, want: &str, within: Duration) -> String {
    let end = tokio::time::Instant::now() + within;
    loop {
        let p = phase(t, name).await;
        if p == want || tokio::time::Instant::now() >= end {
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
            wait_phase(t, "demo", "Ready", Duration::from_secs(120)).await,
            "Ready",
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
            wait_phase(t, "demo", "Ready", Duration::from_secs(60)).await,
            "Ready",
            "{topo}"
        );
        shell_works(t, "demo").await.unwrap();
        t.teardown().await.unwrap();
    }
}
