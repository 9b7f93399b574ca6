//! `run --target served --jobs N`: cases side by side, each on a served cluster of its own (its
//! own API server, node and network namespaces), give the verdicts they give one at a time. The
//! models answer (no `--openshell-binaries`) and the scenarios are short, so this stays in the
//! profile that gates every change.

mod served_support;

use std::path::Path;
use std::time::Duration;

use served_support::{Harness, Tools, check_verdicts, summary_verdicts, timeline_entries};

/// `run --target served` with the real tools, `args` and `--jobs jobs`, started.
fn served_run(tools: &Tools, args: &[&str], jobs: &str, artifacts: &Path) -> Harness {
    let mut all: Vec<String> = ["run", "--target", "served", "--jobs", jobs]
        .map(String::from)
        .to_vec();
    all.extend(tools.real_flags());
    all.extend(args.iter().map(|a| a.to_string()));
    all.extend(["--artifacts".into(), artifacts.display().to_string()]);
    Harness::spawn(tools, &all)
}

/// When each case of a run started and ended on the wall clock (ms since the Unix epoch), from
/// its timeline: its wall-clock observation dates `at_ms` 0, its last entry its end.
fn spans(artifacts: &Path) -> Vec<(String, i64, i64)> {
    let dir = artifacts.join("timelines");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
    {
        let entries = timeline_entries(&e.path());
        let zero = served_support::wall_zero_ms(&entries)
            .unwrap_or_else(|| panic!("{}: no wall-clock observation", e.path().display()));
        let end = entries
            .iter()
            .filter_map(|e| e["at_ms"].as_i64())
            .max()
            .unwrap_or_default();
        out.push((
            e.file_name().to_string_lossy().into_owned(),
            zero,
            zero + end,
        ));
    }
    out.sort();
    out
}

/// Two cases of one topology, one of which restarts the gateway (on one cluster it would have
/// to run alone): with `--jobs 2` they overlap, each on a cluster of its own, and every case and
/// check has the verdict `--jobs 1` gives, where one cluster serves both in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cases_side_by_side_on_served_clusters_of_their_own_give_the_verdicts_they_give_one_at_a_time()
 {
    let test = "cases_side_by_side_on_served_clusters_of_their_own_give_the_verdicts_they_give_one_at_a_time";
    let Some(tools) = Tools::require(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let args = [
        "--model",
        "contract",
        "--topology",
        "combined",
        "--scenario",
        "provisioning",
        "--scenario",
        "gateway-restart",
    ];
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    // Both runs at once: the test takes the time of the longer.
    let (a, b) = (
        served_run(&tools, &args, "1", &one),
        served_run(&tools, &args, "2", &two),
    );
    let ((code_one, out_one), (code_two, out_two)) = tokio::join!(
        a.finish(Duration::from_secs(300)),
        b.finish(Duration::from_secs(300))
    );
    let want = summary_verdicts(&out_one);
    assert_eq!(want.len(), 2, "two cases one at a time:\n{out_one}");
    assert_eq!(
        summary_verdicts(&out_two),
        want,
        "--jobs 2 gives other verdicts\n--- jobs 2:\n{out_two}\n--- jobs 1:\n{out_one}"
    );
    assert_eq!(
        code_two, code_one,
        "--- jobs 2:\n{out_two}\n--- jobs 1:\n{out_one}"
    );
    // Check by check (what each check saw, its timings, may differ; whether it passed not).
    let passed = |artifacts: &Path| -> Vec<((String, String), bool)> {
        check_verdicts(artifacts)
            .into_iter()
            .map(|(k, (passed, _))| (k, passed))
            .collect()
    };
    assert_eq!(passed(&two), passed(&one));

    // One at a time, one cluster serves both cases; side by side, a second one is started.
    assert!(
        out_one.contains("served cluster for combined")
            && !out_one.contains("served cluster 2 for combined"),
        "{out_one}"
    );
    assert!(
        out_two.contains("served cluster 2 for combined"),
        "{out_two}"
    );
    let spans = spans(&two);
    let [(a, a_start, a_end), (b, b_start, b_end)] = spans.as_slice() else {
        panic!("two timelines: {spans:?}");
    };
    assert!(
        a_start < b_end && b_start < a_end,
        "{a} ({a_start}..{a_end}) and {b} ({b_start}..{b_end}) did not overlap"
    );
}

/// SIGINT while two cases hold a gateway outage side by side, each on its cluster: both stop
/// and restore their fault at once (not after the outage's 5 minutes), and the run exits 130.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_every_case_running_side_by_side_and_restores_each_ones_fault() {
    let test = "sigint_stops_every_case_running_side_by_side_and_restores_each_ones_fault";
    let Some(tools) = Tools::require(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let args = [
        "--model",
        "contract",
        "--topology",
        "combined",
        "--topology",
        "sidecar",
        "--scenario",
        "gateway-outage*",
        "--outage",
        "5m",
    ];
    let mut h = served_run(&tools, &args, "2", &dir.path().join("a"));
    let mut holding = Vec::new();
    for _ in 0..2 {
        let l = h
            .until_line(" requested for 5m", Duration::from_secs(120))
            .await;
        holding.push(l.text);
    }
    for topology in ["combined", "sidecar"] {
        assert!(
            holding.iter().any(|l| l.contains(&format!("[{topology},"))),
            "both cases hold their outage at once: {holding:?}"
        );
    }
    h.signal("INT").await;
    let (code, out) = h.finish(Duration::from_secs(120)).await;
    assert_eq!(code, 130, "{out}");
    let after = out
        .split_once("SIGINT: interrupting the run")
        .map(|(_, after)| after)
        .unwrap_or_else(|| panic!("the run does not say it was interrupted:\n{out}"));
    for topology in ["combined", "sidecar"] {
        assert!(
            after.lines().any(|l| l.contains(&format!("[{topology},"))
                && l.contains(": fault ")
                && l.ends_with(" ended")),
            "the case on {topology} does not restore its fault after SIGINT:\n{out}"
        );
    }
}

/// The dry run's header says how many cases run at once and where each further cluster keeps
/// its kubeconfig; with `--jobs 1` it is the header of one cluster per topology.
#[test]
fn a_served_dry_run_says_how_many_cases_run_at_once_each_on_a_cluster_of_its_own() {
    let Some(tools) = Tools::require(
        "a_served_dry_run_says_how_many_cases_run_at_once_each_on_a_cluster_of_its_own",
    ) else {
        return;
    };
    let header = |jobs: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_openshell-conformance"))
            .args(["run", "--target", "served", "--dry-run", "--jobs", jobs])
            .args(tools.real_flags())
            .env("PATH", tools.path_env())
            .output()
            .expect("the harness runs");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let three = header("3");
    assert!(
        three.contains("# --jobs 3: up to 3 cases at once, longest first")
            && three.contains("-private/served-$TOPOLOGY-$N (kubeconfig"),
        "{three}"
    );
    assert!(
        !header("1").contains("--jobs"),
        "one at a time says nothing of jobs"
    );
}
