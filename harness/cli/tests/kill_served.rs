//! A run of the real path interrupted by SIGINT, SIGTERM or SIGKILL at several points (during
//! install, during an outage with the fault injected, during teardown), against a served
//! cluster in its own process so the cluster outlives the harness. Afterwards the gateway has
//! its replicas back, no traffic stays blocked, nothing is left that the leftovers check would
//! report, and the restore journal is consumed; each test prints the count of faults
//! injected, restored and left.

mod served_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use served_support::{Harness, MODEL, ServeProc, Tools};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Point {
    /// While helm installs the chart (the stage has begun).
    Install,
    /// While the gateway is stopped: the fault is in the restore journal.
    Outage,
    /// While the case tears down.
    Teardown,
}

/// The journal's entries, id to fault kind; an absent journal has none.
fn journal_entries(path: &Path) -> BTreeMap<String, String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return BTreeMap::new();
    };
    let v: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON ({e}):\n{text}", path.display()));
    v["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["id"].as_str()?.to_string(),
                e["fault"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// Waits until the journal holds an entry (a fault was injected); returns the ids.
async fn until_fault_journaled(
    path: &Path,
    within: Duration,
    h: &Harness,
) -> BTreeMap<String, String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let ids = journal_entries(path);
        if !ids.is_empty() {
            return ids;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no fault reached the restore journal {} within {within:?}; the harness printed:\n{}",
            path.display(),
            h.seen.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until helm lists the release (any status), or with `settled` until its status is no
/// longer `pending-*`.
async fn until_release(tools: &Tools, kubeconfig: &Path, settled: bool) {
    let within = Duration::from_secs(120);
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let (_, out) = tools
            .tool(
                &tools.helm,
                kubeconfig,
                &["list", "-a", "-n", "openshell", "-o", "json"],
            )
            .await;
        let status: Option<String> = serde_json::from_str::<serde_json::Value>(out.trim())
            .ok()
            .and_then(|v| {
                v.as_array()?
                    .iter()
                    .find(|r| r["name"] == "openshell")?
                    .get("status")?
                    .as_str()
                    .map(str::to_string)
            });
        if let Some(st) = &status
            && (!settled || !st.starts_with("pending"))
        {
            return;
        }
        let last = status.unwrap_or_else(|| "no release".into());
        assert!(
            tokio::time::Instant::now() < deadline,
            "install: helm did not list release openshell{} within {within:?}; last seen: {last}",
            if settled { " as settled" } else { "" }
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The gateway StatefulSet's desired and ready replicas.
async fn gateway_replicas(tools: &Tools, kubeconfig: &Path) -> (String, String) {
    let out = tools
        .kubectl_ok(
            kubeconfig,
            &[
                "get",
                "statefulset/openshell",
                "-n",
                "openshell",
                "-o",
                "jsonpath={.spec.replicas} {.status.readyReplicas}",
            ],
        )
        .await;
    let mut it = out.split_whitespace().map(str::to_string);
    (it.next().unwrap_or_default(), it.next().unwrap_or_default())
}

async fn interrupted_run(point: Point, signal: &str) {
    let test = format!("a_run_killed_by_sig{signal}_during_{point:?}_leaves_the_cluster_clean");
    let Some(tools) = Tools::require(&test) else {
        return;
    };
    let served = ServeProc::start(MODEL).await;
    let kubeconfig = served.kubeconfig();
    let artifacts = tempfile::tempdir().expect("a temporary directory");
    let private = tempfile::tempdir().expect("a temporary directory");
    let journal = artifacts.path().join("restore-journal.json");
    let scenario = match point {
        Point::Outage => "gateway-outage*",
        Point::Install | Point::Teardown => "provisioning",
    };
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(served.existing_flags());
    args.extend(tools.real_flags());
    args.extend(
        [
            "--topology",
            "combined",
            "--scenario",
            scenario,
            // Long enough that the signal lands inside the outage.
            "--outage",
            "2m",
        ]
        .map(String::from),
    );
    args.extend([
        "--artifacts".into(),
        artifacts.path().display().to_string(),
        "--private-dir".into(),
        private.path().join("p").display().to_string(),
    ]);
    let mut h = Harness::spawn(&tools, &args);
    let injected = match point {
        Point::Install => {
            h.until_line("stage install", Duration::from_secs(60)).await;
            until_release(&tools, &kubeconfig, false).await;
            BTreeMap::new()
        }
        Point::Teardown => {
            h.until_line("stage teardown", Duration::from_secs(90))
                .await;
            BTreeMap::new()
        }
        Point::Outage => until_fault_journaled(&journal, Duration::from_secs(90), &h).await,
    };
    h.signal(signal).await;
    let restored;
    if signal == "KILL" {
        let (code, out) = h.finish(Duration::from_secs(30)).await;
        assert_eq!(code, -1, "SIGKILL ends the harness at once:\n{out}");
        let left = journal_entries(&journal);
        assert_eq!(
            left, injected,
            "a killed run leaves its active faults in the journal"
        );
        if point == Point::Install {
            // The killed harness's helm goes on alone; let it finish before looking.
            until_release(&tools, &kubeconfig, true).await;
        }
        let restore = Harness::spawn(
            &tools,
            &[
                "restore".into(),
                "--journal".into(),
                journal.display().to_string(),
                "--allow-context".into(),
                "kube-emulator".into(),
            ],
        );
        let (code, out) = restore.finish(Duration::from_secs(120)).await;
        if injected.is_empty() {
            // Nothing was injected, so no journal was written: restore says so, naming it.
            assert_eq!(code, 2, "restore of an absent journal:\n{out}");
            assert!(out.contains("restore-journal.json"), "{out}");
        } else {
            assert_eq!(code, 0, "restore --journal:\n{out}");
        }
        assert!(
            journal_entries(&journal).is_empty(),
            "restore consumed the journal"
        );
        restored = injected.len() - journal_entries(&journal).len();
        if point == Point::Outage {
            let (want, ready) = gateway_replicas(&tools, &kubeconfig).await;
            assert!(
                want != "0" && !want.is_empty() && want == ready,
                "after restore the gateway has its replicas back and ready: spec {want:?}, ready {ready:?}"
            );
        }
        // The killed run's release, sandboxes and gateway database are leftovers by design:
        // the next run reports them and stops, changing nothing...
        let mut next: Vec<String> = vec!["run".into()];
        next.extend(served.existing_flags());
        next.extend(tools.real_flags());
        next.extend(["--topology", "combined", "--scenario", "provisioning"].map(String::from));
        next.extend([
            "--artifacts".into(),
            artifacts.path().join("refused").display().to_string(),
            "--private-dir".into(),
            private.path().join("r").display().to_string(),
        ]);
        let (code, out) = Harness::spawn(&tools, &next)
            .finish(Duration::from_secs(120))
            .await;
        assert_eq!(code, 2, "the next run stops at the leftovers:\n{out}");
        let wants: &[&str] = if point == Point::Install {
            &["helm releases: openshell"]
        } else {
            &["helm releases: openshell", "openshell-data-openshell-0"]
        };
        for want in wants {
            assert!(
                out.contains(want),
                "the leftovers report lacks {want:?}:\n{out}"
            );
        }
        // ... and with --sweep-leftovers sweeps them and runs on the same cluster.
        let mut next: Vec<String> = vec!["run".into()];
        next.extend(served.existing_flags());
        next.extend(tools.real_flags());
        next.extend(
            [
                "--topology",
                "combined",
                "--scenario",
                "provisioning",
                "--sweep-leftovers",
            ]
            .map(String::from),
        );
        next.extend([
            "--artifacts".into(),
            artifacts.path().join("next").display().to_string(),
            "--private-dir".into(),
            private.path().join("q").display().to_string(),
        ]);
        let (code, out) = Harness::spawn(&tools, &next)
            .finish(Duration::from_secs(180))
            .await;
        // Its verdict is not the point (the served cluster keeps a deleted PVC's data for a new
        // claim of the same name, so the swept gateway's database comes back): the harness
        // swept, ran its case and tore down, which the leftovers check below confirms.
        assert!(
            out.contains("sweeping leftovers of earlier runs") && ![2, 3].contains(&code),
            "the next run sweeps the leftovers and runs its case (exit {code}):\n{out}"
        );
    } else {
        let (code, out) = h.finish(Duration::from_secs(180)).await;
        let want = if signal == "INT" { 130 } else { 143 };
        assert_eq!(code, want, "SIG{signal} interrupts the run:\n{out}");
        for (id, kind) in &injected {
            assert!(
                out.lines().any(|l| l.ends_with(&format!(" {kind} ended"))),
                "fault {id} ({kind}) was restored before the harness exited:\n{out}"
            );
        }
        assert!(
            journal_entries(&journal).is_empty(),
            "the run consumed its journal:\n{out}"
        );
        assert!(
            !out.contains("could not restore"),
            "every restore took effect:\n{out}"
        );
        // The "ended" line of the gateway stop is recorded only once the harness saw the
        // gateway's replicas back and all ready through the API (verify_restored); the release
        // itself is gone after the run, so that is where its return is seen.
        restored = injected.len();
    }
    let left = tools.leftovers(&kubeconfig).await;
    assert!(
        left.is_empty(),
        "the leftovers check would report: {}",
        left.join("; ")
    );
    println!(
        "SIG{signal} during {point:?}: faults injected: {}, faults restored: {restored}, left: {}",
        injected.len(),
        injected.len() - restored
    );
    assert_eq!(injected.len(), restored);
}

#[rstest::rstest]
#[case::sigint("INT")]
#[case::sigterm("TERM")]
#[case::sigkill("KILL")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_interrupted_during_install_leaves_nothing_behind(#[case] signal: &str) {
    interrupted_run(Point::Install, signal).await;
}

#[rstest::rstest]
#[case::sigint("INT")]
#[case::sigterm("TERM")]
#[case::sigkill("KILL")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_interrupted_during_an_outage_gets_the_gateway_back_and_leaves_nothing_behind(
    #[case] signal: &str,
) {
    interrupted_run(Point::Outage, signal).await;
}

#[rstest::rstest]
#[case::sigint("INT")]
#[case::sigterm("TERM")]
#[case::sigkill("KILL")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_interrupted_during_teardown_leaves_nothing_behind(#[case] signal: &str) {
    interrupted_run(Point::Teardown, signal).await;
}
