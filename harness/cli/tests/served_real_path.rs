//! The real path through one command, `run --target served`: what it refuses before starting
//! anything, what its dry run plans, and a gateway that lets no unauthenticated user in (the
//! chart's auth values) stopping the install with the gateway's answer and leaving nothing on
//! the cluster. Each test that serves a cluster serves its own, on its own port.

mod served_support;

use std::time::Duration;

use served_support::{Harness, MODEL, ServeProc, Tools};

fn bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_openshell-conformance"))
}

#[test]
fn a_served_run_refuses_a_chart_path_without_a_chart() {
    let out = bin()
        .args(["run", "--target", "served", "--chart-path"])
        .arg(std::env::temp_dir().join("no-such-chart-dir"))
        .output()
        .expect("the harness runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--chart-path") && err.contains("Chart.yaml"),
        "{err}"
    );
}

#[test]
fn a_served_run_refuses_a_missing_agent_sandbox_manifest() {
    let out = bin()
        .args(["run", "--target", "served", "--agent-sandbox-manifest"])
        .arg(std::env::temp_dir().join("no-such-manifest.yaml"))
        .output()
        .expect("the harness runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--agent-sandbox-manifest") && err.contains("no such file"),
        "{err}"
    );
}

#[test]
fn a_served_run_refuses_a_missing_openshell_cli_path_and_one_not_on_path() {
    let out = bin()
        .args(["run", "--target", "served", "--openshell-bin"])
        .arg(std::env::temp_dir().join("no-such-dir/openshell"))
        .output()
        .expect("the harness runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a path the user gave:\n{err}");
    assert!(err.contains("--openshell-bin"), "{err}");
    let empty = tempfile::tempdir().expect("a temporary directory");
    let out = bin()
        .args(["run", "--target", "served", "--openshell-bin", "openshell"])
        .env("PATH", empty.path())
        .output()
        .expect("the harness runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "a tool the machine lacks:\n{err}"
    );
    assert!(
        err.contains("not on PATH") && err.contains("--openshell-bin"),
        "{err}"
    );
}

#[test]
fn a_served_run_refuses_a_context_of_its_own_and_an_unknown_model() {
    let out = bin()
        .args(["run", "--target", "served", "--context", "kind-x"])
        .output()
        .expect("the harness runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("drop --context"), "{err}");
    let out = bin()
        .args(["run", "--target", "served", "--model", "no-such-model"])
        .output()
        .expect("the harness runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no-such-model"), "{err}");
}

#[test]
fn a_served_dry_run_prints_the_served_cluster_and_the_real_plan_touching_nothing() {
    let Some(tools) = Tools::require(
        "a_served_dry_run_prints_the_served_cluster_and_the_real_plan_touching_nothing",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = bin()
        .args([
            "run",
            "--target",
            "served",
            "--dry-run",
            "--topology",
            "sidecar",
        ])
        .args(tools.real_flags())
        .arg("--private-dir")
        .arg(dir.path().join("private"))
        .env("PATH", tools.path_env())
        .output()
        .expect("the harness runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "served emulated cluster",
        "model openshell-0.0.111",
        "context kube-emulator",
        "helm",
        "kubectl",
        "allowUnauthenticatedUsers: true",
    ] {
        assert!(text.contains(want), "the plan lacks {want:?}:\n{text}");
    }
    assert!(
        !dir.path().join("private").exists(),
        "a dry run creates nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_lets_no_unauthenticated_user_in_stops_the_install_naming_the_value_and_leaves_nothing_behind()
 {
    let test = "a_gateway_that_lets_no_unauthenticated_user_in_stops_the_install_naming_the_value_and_leaves_nothing_behind";
    let Some(tools) = Tools::require(test) else {
        return;
    };
    // Its own served process, so the cluster can be inspected after the run.
    let served = ServeProc::start(MODEL).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(served.existing_flags());
    args.extend(tools.real_flags());
    args.extend(
        [
            "--topology",
            "combined",
            "--scenario",
            "provisioning",
            "--set",
            "server.auth.allowUnauthenticatedUsers=false",
        ]
        .map(String::from),
    );
    args.extend([
        "--artifacts".into(),
        dir.path().join("a").display().to_string(),
        "--private-dir".into(),
        dir.path().join("p").display().to_string(),
    ]);
    let (code, out) = Harness::spawn(&tools, &args)
        .finish(Duration::from_secs(300))
        .await;
    assert_eq!(code, 3, "an infrastructure error:\n{out}");
    for want in [
        "the gateway did not let the harness in",
        "Unauthenticated",
        "allowUnauthenticatedUsers=true",
    ] {
        assert!(out.contains(want), "the error lacks {want:?}:\n{out}");
    }
    let left = tools.leftovers(&served.kubeconfig()).await;
    assert!(left.is_empty(), "left behind: {}", left.join("; "));
}
