//! Cluster providers, installs, leftovers parsing, the doctor and the restore journal file, with
//! recorded command outputs (no Docker, kind, k3d or helm needed).

use std::sync::Arc;

use crate::cluster::provider;
use crate::command::{CmdOutput, ScriptedRunner, Unscripted};
use crate::doctor::{self, DoctorOptions, Status};
use crate::gateway::{Workload, WorkloadKind};
use crate::install::{Install, install_agent_sandbox};
use crate::journal::{Entry, Journal, Undo};
use crate::leftovers::parse_helm_list;
use crate::options::{Provider, RealArgs, RealOptions};
use crate::target::RealFactory;
use clap::Parser;
use conformance_core::error::{ExitStatus, one_line};
use conformance_core::topology::Topologies;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    real: RealArgs,
}

fn opts(provider: Provider, extra: &[&str], run_dir: &str) -> RealOptions {
    let base = ["x", "--run-dir", run_dir, "--private-dir", "/private"];
    Cli::try_parse_from(base.iter().chain(extra.iter()).copied())
        .unwrap()
        .real
        .resolve(provider, "r1", "/repo")
        .unwrap()
}

#[tokio::test]
async fn kind_creates_the_cluster_when_it_is_not_listed() {
    let r = ScriptedRunner::new(Unscripted::Succeed);
    r.respond("kind get clusters", CmdOutput::ok("other\n"));
    let up = provider(&opts(Provider::Kind, &[], "/run"))
        .up(&r)
        .await
        .unwrap();
    assert!(!up.reused);
    assert_eq!(up.context, "kind-openshell-conformance");
    let lines = r.lines();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(lines[1].starts_with("kind create cluster --name openshell-conformance"));
    assert!(lines[2].starts_with("kind export kubeconfig"));
}

/// Issue 44 item 11: `cluster up` wrote the built-in kind config into the artifacts before
/// finding kind missing.
#[tokio::test]
async fn kind_missing_leaves_nothing_written_and_the_config_is_written_only_to_create() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().to_str().unwrap();
    let config = dir.path().join("kind-config.yaml");
    let r = ScriptedRunner::new(Unscripted::Succeed);
    r.respond(
        "kind get clusters",
        CmdOutput::failed(127, "kind: command not found"),
    );
    let err = provider(&opts(Provider::Kind, &[], run_dir))
        .up(&r)
        .await
        .unwrap_err();
    assert_eq!(err.exit_status(), ExitStatus::Infrastructure);
    assert!(
        !config.exists(),
        "the config was written before kind was found"
    );
    let r = ScriptedRunner::new(Unscripted::Succeed);
    r.respond("kind get clusters", CmdOutput::ok(""));
    provider(&opts(Provider::Kind, &[], run_dir))
        .up(&r)
        .await
        .unwrap();
    assert!(
        config.exists(),
        "the cluster is created from the built-in config"
    );
}

#[tokio::test]
async fn kind_reuses_a_listed_cluster_without_creating_it() {
    let r = ScriptedRunner::new(Unscripted::Succeed);
    r.respond(
        "kind get clusters",
        CmdOutput::ok("openshell-conformance\n"),
    );
    let up = provider(&opts(Provider::Kind, &[], "/run"))
        .up(&r)
        .await
        .unwrap();
    assert!(up.reused);
    assert!(r.lines().iter().all(|l| !l.starts_with("kind create")));
}

#[tokio::test]
async fn k3d_reads_its_json_cluster_list_and_imports_images_in_one_call() {
    let r = ScriptedRunner::new(Unscripted::Succeed);
    r.respond(
        "k3d cluster list -o json",
        CmdOutput::ok(r#"[{"name":"openshell-conformance","serversCount":1}]"#),
    );
    let p = provider(&opts(Provider::K3d, &[], "/run"));
    assert!(p.up(&r).await.unwrap().reused);
    p.load_images(&r, &["a:1".into(), "b:2".into()])
        .await
        .unwrap();
    assert_eq!(
        r.lines().last().unwrap(),
        "k3d image import a:1 b:2 --cluster openshell-conformance --mode direct"
    );
}

#[tokio::test]
async fn a_failing_cluster_create_is_an_infrastructure_error_naming_the_stage() {
    let r = ScriptedRunner::new(Unscripted::Succeed);
    r.respond("kind get clusters", CmdOutput::ok(""));
    r.respond(
        "kind create cluster",
        CmdOutput::failed(
            1,
            "ERROR: failed to create cluster: failed to get docker info",
        ),
    );
    let err = provider(&opts(Provider::Kind, &[], "/run"))
        .up(&r)
        .await
        .unwrap_err();
    assert_eq!(err.exit_status(), ExitStatus::Infrastructure);
    assert_eq!(err.to_string(), "cluster up");
    // The tool's failure is the cause, with what it printed.
    let chain = one_line(&err);
    assert!(
        chain.starts_with("cluster up: `kind create cluster"),
        "{chain}"
    );
    assert!(chain.contains("failed to get docker info"), "{chain}");
}

#[tokio::test]
async fn an_existing_cluster_is_never_deleted() {
    let r = ScriptedRunner::new(Unscripted::Fail);
    let o = opts(Provider::Existing, &["--context", "kind-x"], "/run");
    let err = provider(&o).down(&r).await.unwrap_err();
    assert_eq!(err.exit_status(), ExitStatus::Usage);
    assert!(r.calls().is_empty());
}

#[tokio::test]
async fn a_crd_that_never_becomes_established_fails_the_install_naming_the_wait() {
    let r = ScriptedRunner::new(Unscripted::Succeed);
    r.respond(
        "kubectl --kubeconfig /private/kubeconfig --context kind-openshell-conformance wait",
        CmdOutput::failed(1, "error: timed out waiting for the condition on customresourcedefinitions/sandboxes.agents.x-k8s.io"),
    );
    let err = install_agent_sandbox(&r, &opts(Provider::Kind, &[], "/run"))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("wait for CRD sandboxes.agents.x-k8s.io to be Established"),
        "{err}"
    );
    let msg = one_line(&err);
    assert!(msg.contains("timed out waiting for the condition"), "{msg}");
    assert!(
        msg.contains("--timeout=120s"),
        "the deadline is named: {msg}"
    );
    // The controller wait does not run after the CRD wait failed.
    assert_eq!(r.calls().len(), 2);
}

/// Issue 44 item 9: a served run wrote `values-combined.yaml` over the user's file of that
/// name in the artifacts directory (the run directory by default).
#[tokio::test]
async fn helm_install_writes_the_values_file_it_passes_in_the_private_directory_never_over_a_users_file()
 {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("artifacts");
    let private = dir.path().join("private");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("values-sidecar.yaml"), "MINE").unwrap();
    let (run_dir, private_dir) = (run.to_str().unwrap(), private.to_str().unwrap());
    let o = Cli::try_parse_from(["x", "--run-dir", run_dir, "--private-dir", private_dir])
        .unwrap()
        .real
        .resolve(Provider::Kind, "r1", "/repo")
        .unwrap();
    let t = Topologies::builtin();
    let i = Install::new(&o, t.get("sidecar").unwrap()).unwrap();
    assert!(
        i.values_path.starts_with(&o.private_dir),
        "{}",
        i.values_path.display()
    );
    let r = ScriptedRunner::new(Unscripted::Succeed);
    i.run(&r).await.unwrap();
    let written = std::fs::read_to_string(private.join("values-sidecar.yaml")).unwrap();
    assert!(written.contains("topology: sidecar"), "{written}");
    assert!(
        r.lines()[0].contains(&format!("-f {}/values-sidecar.yaml", private.display())),
        "{}",
        r.lines()[0]
    );
    assert_eq!(
        std::fs::read(run.join("values-sidecar.yaml")).unwrap(),
        b"MINE"
    );
}

#[test]
fn the_factory_refuses_a_production_context_before_running_anything() {
    let r = ScriptedRunner::new(Unscripted::Fail);
    let o = opts(
        Provider::Existing,
        &["--context", "arn:aws:eks:us-east-1:1:cluster/prod"],
        "/run",
    );
    let err = RealFactory::new(o, Arc::new(r.clone()))
        .err()
        .expect("refused");
    assert_eq!(err.exit_status(), ExitStatus::Usage);
    assert!(
        err.to_string().contains("refusing to touch context"),
        "{err}"
    );
    assert!(r.calls().is_empty(), "nothing ran");
}

#[test]
fn helm_releases_are_read_from_json() {
    assert_eq!(
        parse_helm_list(r#"[{"name":"openshell","namespace":"openshell","status":"deployed"}]"#)
            .unwrap(),
        vec!["openshell".to_string()]
    );
    assert!(parse_helm_list("").unwrap().is_empty());
    assert!(parse_helm_list("NAME NAMESPACE").is_err());
}

fn doctor_opts(provider: Provider) -> DoctorOptions {
    DoctorOptions {
        provider,
        openshell_bin: "openshell".into(),
        namespace: "openshell".into(),
        context: "kind-openshell-conformance".into(),
    }
}

/// Why the doctor had no client, as `run_for` says it when the context is missing.
const NO_CONTEXT: &str = "context `kind-openshell-conformance` is not in the kubeconfig";

#[tokio::test]
async fn doctor_reports_missing_tools_with_fixes_and_says_the_run_cannot_start() {
    let r = ScriptedRunner::new(Unscripted::Fail);
    r.respond(
        "docker version",
        CmdOutput::failed(
            1,
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock",
        ),
    );
    r.respond("helm version", CmdOutput::ok("v3.6.0+g7f2df64\n"));
    r.respond(
        "kubectl version",
        CmdOutput::ok("Client Version: v1.32.4\n"),
    );
    // kind and openshell are absent: the scripted runner has no output for them.
    let rep = doctor::run(&doctor_opts(Provider::Kind), &r, Err(NO_CONTEXT)).await;
    assert!(!rep.can_start());
    assert_eq!(rep.exit_status(), ExitStatus::Infrastructure);
    let by = |n: &str| rep.checks.iter().find(|c| c.name == n).unwrap().clone();
    assert_eq!(by("docker").status, Status::Missing);
    assert!(
        by("docker")
            .fix
            .unwrap()
            .contains("start the Docker daemon")
    );
    assert_eq!(by("helm").status, Status::Missing);
    assert!(by("helm").detail.contains("too old"), "{:?}", by("helm"));
    assert_eq!(by("kubectl").status, Status::Ok);
    assert_eq!(by("kind").status, Status::Missing);
    // A kind cluster that does not exist yet is created by the run: a note, not a blocker.
    assert_eq!(by("cluster").status, Status::Note);
    let text = rep.to_string();
    assert!(text.contains("a run cannot start"), "{text}");
}

#[tokio::test]
async fn doctor_passes_when_every_tool_answers_with_a_recent_version() {
    let r = ScriptedRunner::new(Unscripted::Fail);
    r.respond("docker version", CmdOutput::ok("28.2.2\n"));
    r.respond(
        "k3d version",
        CmdOutput::ok("k3d version v5.8.3\nk3s version v1.31.5-k3s1 (default)\n"),
    );
    r.respond("helm version", CmdOutput::ok("v3.17.2+gcc0bbbd\n"));
    r.respond(
        "kubectl version",
        CmdOutput::ok("Client Version: v1.32.4\n"),
    );
    r.respond("openshell --version", CmdOutput::ok("openshell 0.0.111\n"));
    let rep = doctor::run(&doctor_opts(Provider::K3d), &r, Err(NO_CONTEXT)).await;
    assert!(rep.can_start(), "{rep}");
    assert!(
        r.lines().iter().all(|l| !l.starts_with("kind")),
        "k3d runs do not need kind"
    );
}

#[tokio::test]
async fn doctor_for_an_existing_cluster_without_a_context_cannot_start() {
    let r = ScriptedRunner::new(Unscripted::Succeed);
    let rep = doctor::run(&doctor_opts(Provider::Existing), &r, Err(NO_CONTEXT)).await;
    assert!(!rep.can_start());
    assert!(
        r.lines().iter().all(|l| !l.starts_with("docker")),
        "existing clusters need no docker"
    );
}

fn workload() -> Workload {
    Workload {
        kind: WorkloadKind::StatefulSet,
        namespace: "openshell".into(),
        name: "openshell".into(),
        selector: [(
            "app.kubernetes.io/name".to_string(),
            "openshell".to_string(),
        )]
        .into(),
    }
}

#[tokio::test]
async fn the_journal_keeps_entries_until_removed_and_then_disappears() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("restore-journal.json");
    let j = Journal::new(&path, "kind-x", None);
    j.add(Entry {
        id: "gateway-stop-openshell".into(),
        fault: "gateway-stop".into(),
        undo: Undo::ScaleBack {
            workload: workload(),
            replicas: 1,
        },
    })
    .await
    .unwrap();
    j.add(Entry {
        id: "node-kill".into(),
        fault: "supervisor-kill".into(),
        undo: Undo::DeletePod {
            namespace: "openshell".into(),
            name: "node-kill".into(),
        },
    })
    .await
    .unwrap();
    let f = Journal::read(&path).await.unwrap();
    assert_eq!(f.context, "kind-x");
    assert_eq!(f.entries.len(), 2);
    j.remove("gateway-stop-openshell").await.unwrap();
    assert_eq!(Journal::read(&path).await.unwrap().entries.len(), 1);
    j.remove("node-kill").await.unwrap();
    assert!(!path.exists(), "an empty journal is removed");
    assert!(Journal::read(&path).await.unwrap().entries.is_empty());
}

#[tokio::test]
async fn a_corrupt_journal_is_a_configuration_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("restore-journal.json");
    std::fs::write(&path, "{not json").unwrap();
    let err = Journal::read(&path).await.unwrap_err();
    assert_eq!(err.exit_status(), ExitStatus::Usage);
    assert!(err.to_string().contains("restore-journal.json"), "{err}");
}

#[test]
fn a_bundle_is_collected_on_failure_only_unless_asked_for_always() {
    use crate::options::DiagnosticsPolicy;
    use crate::target::wants_diagnostics;
    use conformance_core::timeline::{Event, Recorder, StageRecord, StageStatus};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let rec = Recorder::new();
        rec.record(Event::Stage(StageRecord {
            stage: "verify".into(),
            status: StageStatus::Passed,
            message: None,
            step: None,
            requirements: Vec::new(),
        }));
        assert!(!wants_diagnostics(
            DiagnosticsPolicy::OnFailure,
            &rec.snapshot()
        ));
        assert!(wants_diagnostics(
            DiagnosticsPolicy::Always,
            &rec.snapshot()
        ));
        rec.record(Event::Stage(StageRecord {
            stage: "fault".into(),
            status: StageStatus::Error,
            message: None,
            step: None,
            requirements: Vec::new(),
        }));
        assert!(wants_diagnostics(
            DiagnosticsPolicy::OnFailure,
            &rec.snapshot()
        ));
        assert!(!wants_diagnostics(
            DiagnosticsPolicy::Never,
            &rec.snapshot()
        ));
    });
}

#[test]
fn outside_the_repository_the_built_in_kind_config_is_written_to_the_run_directory_and_used() {
    let elsewhere = opts(Provider::Kind, &[], "/run");
    let plan = provider(&elsewhere).up_plan();
    // After the listing: nothing is written before the tool is found.
    let crate::plan::Step::Write { path, contents } = &plan[1] else {
        panic!("{plan:?}")
    };
    assert_eq!(path, &std::path::PathBuf::from("/run/kind-config.yaml"));
    assert!(contents.contains(&format!("image: {}", crate::pins::KIND_NODE_IMAGE)));
    let create = plan
        .iter()
        .find_map(|s| match s {
            crate::plan::Step::Run { cmd, .. }
                if cmd.args.get(1).map(String::as_str) == Some("cluster") =>
            {
                Some(cmd.line())
            }
            _ => None,
        })
        .unwrap();
    assert!(
        create.contains("--config /run/kind-config.yaml"),
        "{create}"
    );
    // kind reads --wait as a Go duration.
    let wait = create.split("--wait ").nth(1).unwrap();
    assert!(
        wait.strip_suffix('s')
            .is_some_and(|n| n.parse::<u64>().is_ok()),
        "{wait}"
    );

    // Inside the repository its own file is used, and nothing is written.
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let inside = Cli::try_parse_from(["x", "--run-dir", "/run", "--private-dir", "/private"])
        .unwrap()
        .real
        .resolve(Provider::K3d, "r1", &repo)
        .unwrap();
    let plan = provider(&inside).up_plan();
    assert!(
        !plan
            .iter()
            .any(|s| matches!(s, crate::plan::Step::Write { .. }))
    );
    assert!(
        plan.iter().any(|s| matches!(s, crate::plan::Step::Run { cmd, .. } if cmd.line().contains(&format!("--config {}", repo.join("k3d-config.yaml").display())))),
        "{plan:?}"
    );
}

/// Before anything is installed the real target says which OpenShell the chart installs, so the
/// engine skips (with the reason, in the summary and JUnit) the cases of topologies it cannot
/// run instead of the run failing at their install.
#[test]
fn the_real_target_reports_the_charts_release_so_unsupported_topologies_are_skipped() {
    use conformance_core::target::TargetFactory;
    use conformance_core::topology::Topologies;
    let o = opts(Provider::Kind, &[], "/run");
    let f = RealFactory::new(o, Arc::new(ScriptedRunner::new(Unscripted::Fail))).unwrap();
    let info = f.info();
    assert_eq!(
        info.openshell.as_ref().map(|v| v.to_string()).as_deref(),
        Some("0.0.111")
    );
    let t = Topologies::builtin();
    assert_eq!(info.skip_reason(t.get("combined").unwrap(), &[]), None);
    assert_eq!(info.skip_reason(t.get("sidecar").unwrap(), &[]), None);
    for name in ["gateway", "supervisor-pod"] {
        let why = info.skip_reason(t.get(name).unwrap(), &[]).unwrap();
        assert!(why.contains("needs OpenShell 0.1.5 or newer"), "{why}");
    }
    // An unreleased chart (0.0.0) names no release: nothing is skipped by version.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Chart.yaml"),
        "apiVersion: v2\nname: helm-chart\nversion: 0.0.0\nappVersion: \"0.0.0\"\n",
    )
    .unwrap();
    let o = opts(
        Provider::Kind,
        &["--chart-path", dir.path().to_str().unwrap()],
        "/run",
    );
    let why = o
        .topology_skip_reason(t.get("gateway").unwrap())
        .unwrap()
        .unwrap();
    assert!(why.contains("has no helm values for chart 0.0.0"), "{why}");
    let f = RealFactory::new(o, Arc::new(ScriptedRunner::new(Unscripted::Fail))).unwrap();
    assert_eq!(f.info().openshell, None);
}

fn stop_entry() -> Entry {
    Entry {
        id: "gateway-stop-openshell".into(),
        fault: "gateway-stop".into(),
        undo: Undo::ScaleBack {
            workload: workload(),
            replicas: 1,
        },
    }
}

#[tokio::test]
async fn restore_of_a_served_runs_journal_removes_it_with_nothing_to_undo_and_no_interlock() {
    // Issue 31 item 9: the cluster of `run --target served` died with the killed run, so its
    // journal was refused by the interlock, then failed to connect, and stayed forever.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("restore-journal.json");
    Journal::new(&path, "kube-emulator", None)
        .cluster_ends_with_run(true)
        .add(stop_entry())
        .await
        .unwrap();
    let report = crate::journal::restore(&path, &[], std::time::Duration::from_secs(1))
        .await
        .expect("nothing to restore, and no context to allow");
    assert_eq!(report.ended, 1);
    assert!(report.to_string().contains("served run"), "{report}");
    assert!(!path.exists(), "the journal is removed");
}

#[tokio::test]
async fn a_new_run_removes_a_served_runs_journal_and_refuses_one_with_faults_on_a_live_cluster() {
    use crate::journal::{Earlier, earlier};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("restore-journal.json");
    assert_eq!(earlier(&path).await.unwrap(), Earlier::None);

    Journal::new(&path, "kube-emulator", None)
        .cluster_ends_with_run(true)
        .add(stop_entry())
        .await
        .unwrap();
    assert_eq!(earlier(&path).await.unwrap(), Earlier::Ended(1));
    // Found, not removed: the new run removes it once its other checks passed.
    assert!(path.exists());
    crate::journal::remove_ended(&path).await.unwrap();
    assert!(!path.exists());

    Journal::new(&path, "kind-x", None)
        .add(stop_entry())
        .await
        .unwrap();
    let err = earlier(&path).await.unwrap_err();
    assert_eq!(
        err.exit_status(),
        conformance_core::error::ExitStatus::Usage
    );
    let msg = err.to_string();
    assert!(
        msg.contains("1 fault(s)") && msg.contains("kind-x"),
        "{msg}"
    );
    assert!(msg.contains("restore --journal"), "{msg}");
    assert!(
        path.exists(),
        "a journal with faults on a live cluster is kept"
    );

    std::fs::write(&path, b"\x00\x01 not json").unwrap();
    let err = earlier(&path).await.unwrap_err();
    assert_eq!(
        err.exit_status(),
        conformance_core::error::ExitStatus::Usage
    );
    assert!(err.to_string().contains("not a restore journal"), "{err}");
}
