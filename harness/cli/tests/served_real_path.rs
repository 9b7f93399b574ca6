//! The real path end to end through one command, `run --target served`: real helm installs the
//! real chart, real kubectl applies the real Agent Sandbox manifest, the real `openshell` CLI
//! drives sandboxes through the harness's port-forward, faults go through the API with the
//! restore journal, in real time, against a served emulated cluster whose images run a model.
//! A smoke set of the catalog gives the emulated target's verdicts for the same model; a defect
//! switch fails naming its requirement with a diagnostics bundle and no key material; and the
//! bugs of the first contact with a cluster stay caught. Each test serves its own cluster on
//! its own port, so nextest runs them side by side.

mod served_support;

use std::path::Path;
use std::time::Duration;

#[path = "common/junit_consumers.rs"]
mod junit_consumers;
#[path = "common/manifest.rs"]
mod manifest;

use manifest::manifest_listing;

use conformance_real::completeness::PhaseCommit;
use served_support::{
    Harness, MODEL, ServeProc, Tools, assert_every_logged_commit_on_its_timeline,
    assert_same_check_verdicts, files_ending, logged_commits, recorded_after, summary_verdicts,
    timeline_entries, wall_zero_ms,
};

fn bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_openshell-conformance"))
}

/// A `run` through the one command, or on the emulated target, with its output.
struct Run {
    code: i32,
    out: String,
    wall: Duration,
}

/// `run --target served` with the real tools and `args`; artifacts into `artifacts`.
async fn served_run(tools: &Tools, args: &[&str], artifacts: &Path, private: &Path) -> Run {
    // One at a time: the smoke set checks that one cluster per topology serves every case
    // with one installation and one CLI registration.
    let mut all: Vec<String> = ["run", "--target", "served", "--jobs", "1"]
        .map(String::from)
        .to_vec();
    all.extend(tools.real_flags());
    all.extend(args.iter().map(|a| a.to_string()));
    all.extend([
        "--artifacts".into(),
        artifacts.display().to_string(),
        "--private-dir".into(),
        private.display().to_string(),
        // The tests read the CLI's registrations and keys there after the run.
        "--keep-private-dir".into(),
    ]);
    let h = Harness::spawn(tools, &all);
    let started = h.started;
    let (code, out) = h.finish(Duration::from_secs(600)).await;
    Run {
        code,
        out,
        wall: started.elapsed(),
    }
}

/// The Agent Sandbox release of the real manifest the served runs apply: the emulated target
/// models the same release, since what the gateway shows for a failed pod depends on it
/// (docs/upstream-facts.md F2.10).
const AGENT_SANDBOX: &str = "v0.5.0";

fn emulated_run(args: &[&str], artifacts: &Path) -> Run {
    let started = std::time::Instant::now();
    let mut cmd = bin();
    cmd.args(["run", "--target", "emulated"]);
    // The release is selectable on the upstream model only; the contract's does not depend on
    // it.
    if args.contains(&MODEL) {
        cmd.args(["--agent-sandbox", AGENT_SANDBOX]);
    }
    let out = cmd
        .args(args)
        .arg("--artifacts")
        .arg(artifacts)
        .output()
        .expect("the harness runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        out: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        wall: started.elapsed(),
    }
}

/// One case's timeline, as the run wrote it (one JSON entry a line).
struct Timeline(Vec<serde_json::Value>);

impl Timeline {
    fn read(path: &Path) -> Self {
        Self(timeline_entries(path))
    }

    /// The timeline's length: the case's duration in the run's own time (virtual on the
    /// emulated target, the wall clock on the served path).
    fn duration_ms(&self) -> i64 {
        self.0
            .iter()
            .filter_map(|e| e["at_ms"].as_i64())
            .max()
            .unwrap_or(0)
    }

    /// When the stage `name` began and ended.
    fn stage_ms(&self, name: &str) -> Option<(i64, i64)> {
        let at = |status: &str| {
            self.0.iter().find_map(|e| {
                (e["type"] == "stage" && e["stage"] == name && e["status"] == status)
                    .then(|| e["at_ms"].as_i64())
                    .flatten()
            })
        };
        let start = at("started")?;
        let end = ["passed", "failed", "error", "skipped"]
            .into_iter()
            .filter_map(at)
            .min()?;
        Some((start, end))
    }

    /// The case without provisioning and install: what runs once the installation is there.
    fn after_install_ms(&self) -> i64 {
        let install_end = self.stage_ms("install").map_or(0, |(_, e)| e);
        self.duration_ms() - install_end
    }

    /// The waits the scenario mandates after install (its sleeps, outages held and deadlines
    /// it waited out, as the timeline records them): the same on both targets when the case
    /// takes the same path, and told apart when it does not (a deadline that runs out on one).
    fn scenario_waits_after_install_ms(&self) -> i64 {
        let install_end = self.stage_ms("install").map_or(0, |(_, e)| e);
        self.0
            .iter()
            .filter(|e| {
                e["type"] == "observation"
                    && e["key"] == conformance_core::timeline::SCENARIO_WAIT_KEY
                    && e["at_ms"].as_i64().is_some_and(|t| t >= install_end)
            })
            .filter_map(|e| e["value"].as_i64())
            .sum()
    }

    /// How long teardown took to write the diagnostics bundle (from its start to the note
    /// naming the bundle): 0 without one.
    fn bundle_ms(&self) -> i64 {
        let Some((start, _)) = self.stage_ms("teardown") else {
            return 0;
        };
        self.0
            .iter()
            .find_map(|e| {
                (e["type"] == "note"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("diagnostics bundle:")))
                .then(|| e["at_ms"].as_i64())
                .flatten()
            })
            .map_or(0, |at| at - start)
    }
}

/// The delays between the gateway committing a phase and the case's timeline recording it,
/// for every commit of its sandboxes inside the case's window that the timeline recorded.
fn phase_delays(timeline: &Timeline, commits: &[PhaseCommit]) -> Vec<i64> {
    let Some(zero) = wall_zero_ms(&timeline.0) else {
        return Vec::new();
    };
    let end = zero + timeline.duration_ms();
    commits
        .iter()
        .filter(|c| {
            c.logged_unix_ms
                .is_some_and(|at| (zero..=end).contains(&at))
        })
        .filter_map(|c| recorded_after(&timeline.0, zero, c))
        .collect()
}

fn min_median_max(v: &mut [i64]) -> String {
    if v.is_empty() {
        return "none measured".into();
    }
    v.sort();
    format!(
        "min {} ms, median {} ms, max {} ms over {} phase commits",
        v[0],
        v[v.len() / 2],
        v[v.len() - 1],
        v.len()
    )
}

/// A group of the smoke set through the served real path and on the emulated target, in one
/// run each (on the served path, one OpenShell installation for the group's cases): the
/// verdicts must be equal, case by case. Prints the figures of each case: its wall time
/// on the served path against its virtual time on the emulated target (what the scenario
/// waits for and what the model takes), the install of the topology, and the delays between
/// the gateway model committing a phase and the timeline recording it.
async fn smoke(model: &str, topology: &str, scenarios: &[&str]) {
    let test = format!(
        "the_served_real_path_gives_the_emulated_verdicts[{model},{topology},{scenarios:?}]"
    );
    let Some(tools) = Tools::require(&test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    // The shortest outage the scenarios accept: the run's waits are the scenario's own.
    let mut args = vec!["--model", model, "--topology", topology, "--outage", "1s"];
    for s in scenarios {
        args.extend(["--scenario", s]);
    }
    let emulated = emulated_run(&args, &dir.path().join("emulated"));
    // Every case's bundle holds the gateway's log with the kubelet's timestamps: the phase
    // commits the delays are measured against.
    args.extend(["--diagnostics", "always"]);
    let served = served_run(
        &tools,
        &args,
        &dir.path().join("served"),
        &dir.path().join("private"),
    )
    .await;
    let want = summary_verdicts(&emulated.out);
    let got = summary_verdicts(&served.out);
    assert!(
        !want.is_empty(),
        "no verdicts on the emulated target:\n{}",
        emulated.out
    );
    assert_eq!(
        got, want,
        "the served real path's verdicts differ from the emulated target's\n--- served:\n{}\n--- emulated:\n{}",
        served.out, emulated.out
    );
    assert_eq!(
        served.code, emulated.code,
        "exit codes differ\n--- served:\n{}\n--- emulated:\n{}",
        served.out, emulated.out
    );
    // And check by check: a check that passes on one side only is a harness bug even where
    // the case verdicts agree (supervisor-restart's "Ready again" was one).
    assert_same_check_verdicts(&dir.path().join("served"), &dir.path().join("emulated"));
    // The HTML links every case's bundle (`--diagnostics always`): it looked for a bundle
    // named after the case, which the real target never writes, so it linked none.
    let html = std::fs::read_to_string(dir.path().join("served/report.html")).unwrap();
    let bundles = files_ending(&dir.path().join("served/diagnostics"), ".tar.gz");
    assert!(!bundles.is_empty(), "no bundle was written");
    for b in bundles {
        let name = b.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            html.contains(&format!("<a href=\"diagnostics/{name}\">diagnostics</a>")),
            "the report does not link {name}"
        );
    }
    // One registration per topology per run, reused by every case: a second `gateway add` of
    // the name is refused by the CLI (docs/upstream-facts.md F6.2), so a run that registered per
    // case would error from its second case on.
    let gateways = dir
        .path()
        .join(format!("private/cli-{topology}/config/openshell/gateways"));
    let registered: Vec<String> = std::fs::read_dir(&gateways)
        .unwrap_or_else(|e| panic!("no gateway registry at {} ({e})", gateways.display()))
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(registered, [format!("conformance-{topology}")]);
    // One installation for the topology: one `helm upgrade --install`, and every later case
    // says on its timeline that it reused it.
    let served_timelines = files_ending(&dir.path().join("served/timelines"), ".jsonl");
    let ran: Vec<Timeline> = served_timelines
        .iter()
        .map(|p| Timeline::read(p))
        .filter(|t| t.stage_ms("install").is_some_and(|(s, e)| e > s))
        .collect();
    let reused = served_timelines
        .iter()
        .filter(|p| {
            std::fs::read_to_string(p)
                .is_ok_and(|t| t.contains("reusing the OpenShell installation of topology"))
        })
        .count();
    assert!(
        !ran.is_empty(),
        "the group runs cases on {topology}:\n{}",
        served.out
    );
    assert_eq!(
        reused,
        ran.len() - 1,
        "every case after the first reuses the installation:\n{}",
        served.out
    );

    // Every phase commit the gateway logged is on its case's timeline, and the harness says it
    // checked that itself: a lossy observer fails the case instead of passing it.
    let checked = assert_every_logged_commit_on_its_timeline(&dir.path().join("served"));
    assert!(checked > 0, "no logged phase commit was checked");

    // Figures, printed, not asserted: they depend on the machine.
    let commits = logged_commits(&dir.path().join("served"));
    let mut all_delays = Vec::new();
    let (mut sum_wall, mut sum_mandated, mut sum_bundle) = (0i64, 0i64, 0i64);
    let mut installs = Vec::new();
    for path in &served_timelines {
        let served_t = Timeline::read(path);
        let Some(name) = path.file_name() else {
            continue;
        };
        let emulated_path = dir.path().join("emulated/timelines").join(name);
        if !emulated_path.is_file() || served_t.stage_ms("install").is_none() {
            continue;
        }
        let emulated_t = Timeline::read(&emulated_path);
        let install = served_t.stage_ms("install").map_or(0, |(s, e)| e - s);
        installs.push(install);
        // The installation is the topology's (measured on its own below); what each case
        // adds to it is compared with what the emulated target's virtual time says the
        // scenario and the model take after their install. The scenario's own waits count on
        // each side as that side recorded them: a deadline the served run waited out and the
        // emulated one did not (or the other way round) is the scenario's wait, not overhead.
        let wall = served_t.after_install_ms();
        let served_waits = served_t.scenario_waits_after_install_ms();
        let emulated_waits = emulated_t.scenario_waits_after_install_ms();
        let mandated = emulated_t.after_install_ms() - emulated_waits + served_waits;
        // A user's run that passes writes no bundle; this test asks for one on every case.
        let bundle = served_t.bundle_ms();
        sum_wall += wall;
        sum_mandated += mandated;
        sum_bundle += bundle;
        let teardown = served_t.stage_ms("teardown").map_or(0, |(s, e)| e - s);
        let mut delays = phase_delays(&served_t, &commits);
        all_delays.extend(delays.iter().copied());
        println!(
            "FIGURES {topology} {}: install {:.1}s, after install: wall {:.1}s, scenario and model time {:.1}s (scenario waits {:.1}s served, {:.1}s emulated), harness overhead {:.1}s ({:.1}%), without the diagnostics bundle ({:.1}s) {:.1}s ({:.1}%), teardown {:.1}s; phase delays: {}",
            name.to_string_lossy().trim_end_matches(".jsonl"),
            install as f64 / 1000.0,
            wall as f64 / 1000.0,
            mandated as f64 / 1000.0,
            served_waits as f64 / 1000.0,
            emulated_waits as f64 / 1000.0,
            (wall - mandated) as f64 / 1000.0,
            100.0 * (wall - mandated) as f64 / wall.max(1) as f64,
            bundle as f64 / 1000.0,
            (wall - bundle - mandated) as f64 / 1000.0,
            100.0 * (wall - bundle - mandated) as f64 / (wall - bundle).max(1) as f64,
            teardown as f64 / 1000.0,
            min_median_max(&mut delays)
        );
    }
    installs.sort();
    println!(
        "FIGURES {topology} total: {} cases, install per topology {:.1}s (the other cases' install stage: {}), after install: wall {:.1}s, scenario and model time {:.1}s, harness overhead {:.1}%, without the diagnostics bundles ({:.1}s) {:.1}%, whole run wall {:.1}s; phase delays: {}",
        installs.len(),
        installs.last().copied().unwrap_or(0) as f64 / 1000.0,
        installs[..installs.len().saturating_sub(1)]
            .iter()
            .map(|ms| format!("{:.2}s", *ms as f64 / 1000.0))
            .collect::<Vec<_>>()
            .join(", "),
        sum_wall as f64 / 1000.0,
        sum_mandated as f64 / 1000.0,
        100.0 * (sum_wall - sum_mandated) as f64 / sum_wall.max(1) as f64,
        sum_bundle as f64 / 1000.0,
        100.0 * (sum_wall - sum_bundle - sum_mandated) as f64
            / (sum_wall - sum_bundle).max(1) as f64,
        served.wall.as_secs_f64(),
        min_median_max(&mut all_delays)
    );
}

/// The smoke set of the catalog (issue 13) in groups: the short cases share one run (and so
/// one installation), and each long one (its scenario waits for minutes) has a run of its own,
/// so nextest runs them side by side.
#[rstest::rstest]
#[case::short(MODEL, &["provisioning", "gateway-restart", "gateway-outage*"])]
// Both variants, the sandbox created while the fault holds its first pod back (the Agent
// Sandbox controller paused until the template is broken). On the contract model, whose
// sandboxes fail fast and say why: about 5 s and 10 s of real time per case. On 0.0.111 each
// case takes about 10 minutes (the CLI's create waits out its 300 s provisioning timeout, then
// the scenario its 5 minutes for an Error that never comes, docs/upstream-facts.md F2.10,
// F6.3), too long for CI.
#[case::permanent_bootstrap_error("contract", &["permanent-bootstrap-error*"])]
#[case::stopped_through_outage(MODEL, &["stopped-through-outage*"])]
#[case::error_recovery(MODEL, &["error-recovery"])]
// About 95 s of scenario time each (the re-attach window and its settle): the supervisor is
// killed from a hostPID pod on combined (PID 1 of its container) and found through /proc on
// sidecar (a shared process namespace).
#[case::supervisor_restart(MODEL, &["supervisor-restart"])]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_real_path_gives_the_emulated_targets_verdicts(
    #[values("combined", "sidecar")] topology: &str,
    #[case] model: &str,
    #[case] scenarios: &[&str],
) {
    smoke(model, topology, scenarios).await;
}

/// The bundle's files, relative to `dir`, and their text.
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = files_ending(dir, "")
        .into_iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            Some((
                p.strip_prefix(dir).unwrap_or(&p).display().to_string(),
                text,
            ))
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_defect_on_the_served_real_path_fails_naming_its_requirement_with_a_clean_diagnostics_bundle()
 {
    let test = "a_defect_on_the_served_real_path_fails_naming_its_requirement_with_a_clean_diagnostics_bundle";
    let Some(tools) = Tools::require(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let artifacts = dir.path().join("a");
    let private = dir.path().join("private");
    let run = served_run(
        &tools,
        &[
            "--model",
            "contract",
            "--defect",
            "gateway-restart-marks-error",
            "--topology",
            "combined",
            "--scenario",
            "gateway-restart",
        ],
        &artifacts,
        &private,
    )
    .await;
    assert_eq!(run.code, 1, "a product failure:\n{}", run.out);
    assert!(
        run.out.contains("[R9]"),
        "the failure names R9:\n{}",
        run.out
    );
    // A served run's JUnit, as CI dashboards read it, counts what the summary says.
    if let Some(parsed) = junit_consumers::read(&artifacts.join("junit.xml"), test) {
        junit_consumers::assert_agrees(&parsed, junit_consumers::summary_totals(&run.out));
    }
    let bundles: Vec<_> = std::fs::read_dir(artifacts.join("diagnostics"))
        .unwrap_or_else(|e| panic!("no diagnostics directory ({e}):\n{}", run.out))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(bundles.len(), 1, "one bundle: {bundles:?}");
    let bundle = files(&bundles[0]);
    let names: Vec<&str> = bundle.iter().map(|(n, _)| n.as_str()).collect();
    let has = |what: &str, pred: &dyn Fn(&str) -> bool| {
        assert!(
            names.iter().any(|n| pred(n)),
            "the bundle has no {what}: {names:?}"
        );
    };
    has("pod logs", &|n| {
        n.starts_with("openshell/") && n.ends_with(".log")
    });
    has("events", &|n| n.contains("events"));
    has("object YAML", &|n| n == "openshell/pods.yaml");
    has("helm values", &|n| n == "helm/values.yaml");
    has("CLI JSON", &|n| n == "openshell/sandboxes.json");
    // No key material: no PEM private key, and none of the client key's lines the CLI used.
    let key_lines: Vec<String> = files(&private)
        .into_iter()
        .filter(|(n, _)| n.ends_with("tls.key"))
        .flat_map(|(_, k)| {
            k.lines()
                .filter(|l| l.len() > 20 && !l.starts_with("-----"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        !key_lines.is_empty(),
        "the CLI's client key was not found in the private directory"
    );
    for (name, text) in &bundle {
        assert!(!text.contains("PRIVATE KEY"), "{name} holds a private key");
        for l in &key_lines {
            assert!(!text.contains(l.as_str()), "{name} holds the client key");
        }
    }
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
    assert!(
        err.contains("--context does not apply to --target served")
            && err.contains("use --target existing for a cluster you serve yourself"),
        "{err}"
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_run_removes_the_private_directory_it_made_for_itself() {
    let test = "a_served_run_removes_the_private_directory_it_made_for_itself";
    let Some(tools) = Tools::require(test) else {
        return;
    };
    // Issue 31 item 3: every run left its private directory, with a client tls.key, behind.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut args: Vec<String> = vec!["run".into(), "--target".into(), "served".into()];
    args.extend(tools.real_flags());
    for a in [
        "--model",
        "contract",
        "--topology",
        "combined",
        "--scenario",
        "provisioning",
        "--artifacts",
    ] {
        args.push(a.into());
    }
    args.push(dir.path().join("a").display().to_string());
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_openshell-conformance"))
        .args(&args)
        .env("PATH", tools.path_env())
        .env("TMPDIR", &tmp)
        .output()
        .await
        .expect("the harness runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    let left: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("-private"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}\n{text}");
    let keys = [
        served_support::private_keys_under(&tmp),
        served_support::private_keys_under(&dir.path().join("a")),
    ]
    .concat();
    assert!(keys.is_empty(), "private keys left: {keys:?}\n{text}");
}

/// Issue 44: nothing of a served run (private directory, kubeconfig, client key, token) is
/// readable by another local user, while it runs and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_local_user_reads_no_key_token_or_kubeconfig_of_a_served_run_during_or_after_it() {
    let test =
        "another_local_user_reads_no_key_token_or_kubeconfig_of_a_served_run_during_or_after_it";
    let Some(tools) = Tools::require(test) else {
        return;
    };
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    if !root {
        let why = "switching to another user needs root";
        assert!(std::env::var_os("CI").is_none(), "{test}: {why}");
        eprintln!("SKIPPED {test}: {why}");
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (tmp, art) = served_support::shared_machine_dirs(dir.path());
    let mut args: Vec<String> = vec!["run".into(), "--target".into(), "served".into()];
    args.extend(tools.real_flags());
    args.extend(served_support::outage_flags("contract", "combined", &art));
    let mut h = Harness::spawn_with(&tools, &args, &[("TMPDIR", &tmp)]);
    h.until_line("stage fault", Duration::from_secs(180)).await;
    for uid in [65534, 1000] {
        let found = served_support::readable_by(uid, &[&tmp, &art], &[]).await;
        assert!(found.is_empty(), "during the run uid {uid} reads: {found}");
    }
    let (code, out) = h.finish(Duration::from_secs(300)).await;
    assert_eq!(code, 0, "{out}");
    for uid in [65534, 1000] {
        let found = served_support::readable_by(uid, &[&tmp, &art], &[]).await;
        assert!(found.is_empty(), "after the run uid {uid} reads: {found}");
    }
}

/// An HTTP server on loopback that answers every request with `status` and `body`, until the
/// test ends; its base URL.
fn answering(status: &str, body: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let base = format!("http://{}", listener.local_addr().expect("its address"));
    let status = status.to_string();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    base
}

#[test]
fn a_wrong_openshell_cli_or_agent_sandbox_release_is_refused_before_the_earlier_runs_files_are_removed()
 {
    let test = "a_wrong_openshell_cli_or_agent_sandbox_release_is_refused_before_the_earlier_runs_files_are_removed";
    let Some(tools) = Tools::require(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let d = dir.path();
    std::fs::write(
        d.join("kc.yaml"),
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    )
    .unwrap();
    std::fs::write(d.join("not-a-cli"), "#!/bin/sh\necho 'something 1.2.3'\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(d.join("not-a-cli"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    let openshell = tools.openshell.display().to_string();
    let chart = tools.chart.display().to_string();
    let manifest = tools.manifest.display().to_string();
    let missing = answering("404 Not Found", "Not Found");
    // A port that was free a moment ago: the download cannot connect (the machine's trouble).
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let served = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["run", "--target", "served", "--chart-path", &chart]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let existing = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "run",
            "--target",
            "existing",
            "--context",
            "kind-x",
            "--kubeconfig",
            "kc.yaml",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let wrong_cli = [
        (
            "./not-a-cli",
            "--openshell-bin ./not-a-cli: not the openshell CLI",
        ),
        (
            "no-such-openshell",
            "--openshell-bin no-such-openshell: no `no-such-openshell` on PATH",
        ),
    ];
    // (arguments, releases URL, exit code, what it says)
    let mut cases: Vec<(Vec<String>, Option<&str>, i32, String)> = Vec::new();
    for (cli, says) in wrong_cli {
        let flags = [
            "--agent-sandbox-manifest",
            &manifest,
            "--openshell-bin",
            cli,
        ];
        cases.push((served(&flags), None, 2, says.into()));
        cases.push((existing(&flags), None, 2, says.into()));
    }
    for args in [
        served(&[
            "--openshell-bin",
            &openshell,
            "--agent-sandbox-version",
            "v9.9.9",
        ]),
        existing(&[
            "--openshell-bin",
            &openshell,
            "--agent-sandbox-version",
            "v9.9.9",
        ]),
    ] {
        cases.push((
            args.clone(),
            Some(&missing),
            2,
            "--agent-sandbox-version v9.9.9: Agent Sandbox has no such release".into(),
        ));
        cases.push((
            args,
            Some(&closed),
            3,
            "--agent-sandbox-version v9.9.9: cannot download its manifest before the run starts"
                .into(),
        ));
    }
    for (args, releases, status, says) in cases {
        // What an earlier run left, which a refused run must not touch.
        std::fs::create_dir_all(d.join("artifacts/timelines")).unwrap();
        std::fs::write(d.join("artifacts/junit.xml"), "EARLIER RUN").unwrap();
        std::fs::write(d.join("artifacts/timelines/a.jsonl"), "EARLIER RUN").unwrap();
        manifest_listing(&d.join("artifacts"), &["junit.xml", "timelines/a.jsonl"]);
        // And the restore journal of a killed served run (its cluster ended with it): removed
        // by a run that starts, not by one that is refused.
        let journal = d
            .join("artifacts")
            .join(conformance_real::journal::FILE_NAME);
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(
                conformance_real::journal::Journal::new(&journal, "kube-emulator", None)
                    .cluster_ends_with_run(true)
                    .add(conformance_real::journal::Entry {
                        id: "node-access-x".into(),
                        fault: "supervisor-kill".into(),
                        undo: conformance_real::journal::Undo::DeletePod {
                            namespace: "openshell".into(),
                            name: "x".into(),
                        },
                    }),
            )
            .unwrap();
        let mut cmd = bin();
        cmd.args(&args).current_dir(d).env("PATH", tools.path_env());
        if let Some(url) = releases {
            cmd.env(conformance_real::fetch::RELEASES_KNOB, url);
        }
        let out = cmd.output().expect("the harness runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(status), "{args:?}: {text}");
        assert!(
            text.contains(&says),
            "{args:?} should say {says:?}:\n{text}"
        );
        assert!(!text.contains("served cluster for"), "{args:?}: {text}");
        for f in ["junit.xml", "timelines/a.jsonl"] {
            assert_eq!(
                std::fs::read_to_string(d.join("artifacts").join(f)).unwrap(),
                "EARLIER RUN",
                "{args:?} removed {f}: {text}"
            );
        }
        assert!(journal.is_file(), "{args:?} removed the journal: {text}");
        assert!(
            !text.contains("restore journal of a killed served run"),
            "{text}"
        );
    }
}
