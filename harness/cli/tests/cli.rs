//! The command line as a person uses it: the real binary, its output and its exit codes
//! (0 passed or failed as expected, 1 product failures, 2 usage or configuration, 3
//! infrastructure).

use std::path::Path;
use std::process::{Command, Output};

#[path = "common/binary.rs"]
mod binary;
#[path = "common/junit_consumers.rs"]
mod junit_consumers;
#[path = "common/manifest.rs"]
mod manifest;

use binary::{bin, lines_until, run, text};
use manifest::manifest_listing;

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// How many cases `run` with no arguments runs: every variant of the catalog on every topology.
fn whole_catalog() -> usize {
    let topologies: Vec<_> = conformance_core::topology::Topologies::builtin()
        .all()
        .cloned()
        .collect();
    conformance_catalog::catalog::cases(&topologies, &Default::default()).len()
}

/// How many topologies the harness ships: a scenario with one variant runs that many cases.
fn topologies() -> usize {
    topology_names().len()
}

/// The shipped topologies' names, as `--topology` lists them.
fn topology_names() -> Vec<String> {
    conformance_core::topology::Topologies::builtin()
        .names()
        .into_iter()
        .map(String::from)
        .collect()
}

#[test]
fn run_with_no_arguments_runs_the_whole_catalog_on_the_emulated_contract_and_passes() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["run"], dir.path());
    let out = text(&o);
    assert_eq!(code(&o), 0, "{out}");
    let n = whole_catalog();
    assert!(
        out.contains(&format!("{n} cases: {n} passed, 0 failed")),
        "{out}"
    );
    assert!(
        out.contains("scenario") && out.contains("supervisor-pod"),
        "{out}"
    );
    for f in ["artifacts/junit.xml", "artifacts/report.html"] {
        assert!(dir.path().join(f).is_file(), "{f} missing");
    }
    let timelines = std::fs::read_dir(dir.path().join("artifacts/timelines"))
        .unwrap()
        .count();
    assert_eq!(timelines, n);
}

#[test]
fn a_run_whose_stdout_was_closed_still_writes_its_reports_and_exits_with_its_verdict() {
    // A pager quit or `| head` closes stdout while the run goes on: the summary is lost, the
    // verdict, its reports and its exit code are not (it once panicked with exit 101).
    let dir = tempfile::tempdir().unwrap();
    let mut child = bin()
        .args(["run", "--scenario", "provisioning"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(dir.path().join("artifacts/junit.xml").is_file(), "{err}");
}

#[test]
fn a_defect_makes_the_run_exit_1_and_name_the_broken_requirement() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &[
            "run",
            "--defect",
            "gateway-restart-marks-error",
            "--scenario",
            "gateway-restart",
            "--topology",
            "combined",
            "--junit",
            "out/j.xml",
        ],
        dir.path(),
    );
    let out = text(&o);
    assert_eq!(code(&o), 1, "{out}");
    assert!(
        out.contains("FAIL gateway-restart[combined]: [R9]"),
        "{out}"
    );
    let xml = std::fs::read_to_string(dir.path().join("out/j.xml")).unwrap();
    assert!(xml.contains("<failure"), "{xml}");
}

#[test]
fn saved_timelines_are_rechecked_offline_and_rendered_as_html() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &[
            "run",
            "--defect",
            "gateway-restart-marks-error",
            "--scenario",
            "gateway-restart[combined]",
        ],
        dir.path(),
    );
    assert_eq!(code(&o), 1, "{}", text(&o));
    let tl = std::fs::read_dir(dir.path().join("artifacts/timelines"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let tl = tl.to_str().unwrap();
    let o = run(&["check", tl], dir.path());
    let out = text(&o);
    assert_eq!(code(&o), 1, "{out}");
    assert!(out.contains("as recorded"), "{out}");
    assert!(
        out.contains("check 'the sandbox never turns terminal' [R9] FAILED"),
        "{out}"
    );
    let o = run(&["report", tl, "--html", "again.html"], dir.path());
    assert_eq!(code(&o), 0, "{}", text(&o));
    let html = std::fs::read_to_string(dir.path().join("again.html")).unwrap();
    assert!(html.contains("Failing checks"));
}

#[test]
fn list_shows_scenarios_requirements_topologies_models_and_defects_as_tables_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["list"], dir.path());
    let out = text(&o);
    assert_eq!(code(&o), 0, "{out}");
    for heading in [
        "SCENARIOS",
        "REQUIREMENTS",
        "TOPOLOGIES",
        "MODELS",
        "DEFECTS",
    ] {
        assert!(out.contains(heading), "{heading} missing:\n{out}");
    }
    let o = run(&["list", "defects", "--format", "json"], dir.path());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    let shipped: Vec<&str> = conformance_models::spec::DEFECTS
        .iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(names, shipped, "every defect switch, in order");
    assert!(v[0]["breaks"].as_str().unwrap().starts_with('R'));
}

#[test]
fn bad_flags_and_values_exit_2_with_a_message_that_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let unknown_topology = format!(
        "unknown topology `mesh`; known topologies: {}",
        topology_names().join(", ")
    );
    let valid_models = format!(
        "valid models: {}",
        conformance_models::MODELS
            .iter()
            .map(|m| m.name)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--topology", "mesh"], &unknown_topology),
        (
            &["run", "--outage", "soon"],
            "write it like 30s, 2m30s or 5m",
        ),
        (&["run", "--model", "openshell-9"], &valid_models),
        (
            &[
                "run",
                "--model",
                "openshell-0.0.111",
                "--defect",
                "tls-validation-skipped",
            ],
            "defect switches apply only to the contract model",
        ),
        (&["run", "--defect", "nope"], "valid defects:"),
        (
            &["run", "--scenario", "no-such-thing"],
            "`openshell-conformance list scenarios` shows the ids",
        ),
        (&["run", "--jobs", "0"], "0 is not in 1..=64"),
        (
            &["run", "--target", "kind", "--jobs", "2", "--dry-run"],
            "--jobs above 1 applies to the emulated and served targets only",
        ),
        (
            &["run", "--target", "cloud"],
            "possible values: emulated, kind, k3d, existing",
        ),
        (
            &["check", "missing.jsonl"],
            "cannot open timeline missing.jsonl",
        ),
        (
            &["emulate", "serve", "--listen", "10.1.2.3:6443"],
            "only loopback addresses",
        ),
        (
            &[
                "emulate",
                "serve",
                "--model",
                "contract",
                "--topology",
                "mesh",
            ],
            &unknown_topology,
        ),
        (
            // Issue 31 item 14: silently ignored, the run modelled v0.5.4.
            &[
                "run",
                "--model",
                "openshell-0.0.111",
                "--agent-sandbox-version",
                "v0.5.0",
            ],
            "on the emulated target the Agent Sandbox release is --agent-sandbox (e.g. --agent-sandbox v0.5.0)",
        ),
        // Issue 31 item 7: it said "cannot remove /proc/version", having tried.
        (
            &["run", "--html", "/proc/version"],
            "--html /proc/version: cannot write it",
        ),
        // Issue 31 item 12: it aborted with exit 134, allocating for one endless line; issue 44
        // item 5: only regular files are read.
        (
            &["check", "/dev/zero"],
            "timeline /dev/zero: not a regular file",
        ),
        (&["frobnicate"], "unrecognized subcommand"),
    ];
    for (args, says) in cases {
        refused(args, dir.path(), says);
    }
}

#[test]
fn an_infrastructure_error_caused_by_an_io_error_prints_the_context_then_the_io_error_and_exits_3()
{
    let dir = tempfile::tempdir().unwrap();
    // A loopback port another process holds: listening on it fails with an I/O error.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let io = std::net::TcpListener::bind(&addr).unwrap_err().to_string();
    let o = run(
        &["emulate", "serve", "--model", "contract", "--listen", &addr],
        dir.path(),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 3, "{err}");
    let context = format!("error: cannot listen on {addr}\n");
    let cause = format!("  caused by: {io}\n");
    assert!(err.contains(&format!("{context}{cause}")), "{err}");
}

#[test]
fn a_usage_error_caused_by_an_io_error_prints_the_cause_below_the_message_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let io = std::fs::File::open(dir.path().join("missing.jsonl"))
        .unwrap_err()
        .to_string();
    let o = run(&["check", "missing.jsonl"], dir.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 2, "{err}");
    assert!(
        err.contains(&format!(
            "error: cannot open timeline missing.jsonl\n  caused by: {io}\n"
        )),
        "{err}"
    );
}

#[test]
fn the_interlock_refuses_a_production_context_before_any_change() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &[
            "run",
            "--target",
            "existing",
            "--context",
            "prod-eu-west",
            "--dry-run",
        ],
        repo(),
    );
    let out = text(&o);
    assert_eq!(code(&o), 2, "{out}");
    assert!(out.contains("prod-eu-west"), "{out}");
    assert!(out.contains("--allow-context"), "{out}");
    let _ = dir;
}

#[test]
fn a_kind_dry_run_prints_the_command_plan_without_touching_anything() {
    let o = run(
        &[
            "run",
            "--target",
            "kind",
            "--dry-run",
            "--topology",
            "sidecar",
        ],
        repo(),
    );
    let out = text(&o);
    assert_eq!(code(&o), 0, "{out}");
    assert!(out.contains("kind create cluster"), "{out}");
    assert!(out.contains("helm upgrade --install"), "{out}");
}

/// `make e2e`'s command with no flags, started outside the repository: every topology the
/// default chart runs is planned, the others are named as skipped with the reason, the kind
/// config is one that exists, and no credential is planned under the artifacts.
#[test]
fn a_kind_dry_run_without_flags_plans_what_the_default_chart_runs_from_any_directory() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["run", "--target", "kind", "--dry-run"], dir.path());
    let out = text(&o);
    assert_eq!(code(&o), 0, "{out}");
    for t in ["combined", "sidecar"] {
        assert!(out.contains(&format!("== openshell [{t}] ==")), "{out}");
    }
    for t in ["gateway", "supervisor-pod"] {
        assert!(
            out.contains(&format!(
                "# skipped: topology {t} needs OpenShell 0.1.5 or newer; the chart installs 0.0.111"
            )),
            "{out}"
        );
        assert!(!out.contains(&format!("== openshell [{t}] ==")), "{out}");
    }
    assert!(
        out.contains("write artifacts/kind-config.yaml:")
            && out.contains("--config artifacts/kind-config.yaml"),
        "{out}"
    );
    assert!(!out.contains("--kubeconfig artifacts/"), "{out}");
    assert!(!out.contains("HOME=artifacts/"), "{out}");
}

#[test]
fn json_logs_are_available_for_ci() {
    let dir = tempfile::tempdir().unwrap();
    let o = bin()
        .args([
            "--log-format",
            "json",
            "run",
            "--scenario",
            "provisioning[combined]",
        ])
        .env("RUST_LOG", "openshell_conformance=info")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", text(&o));
}

#[test]
fn without_a_terminal_progress_is_plain_lines_with_stages_and_fault_windows() {
    let dir = tempfile::tempdir().unwrap();
    // A case id with a comma selects exactly that case.
    let o = run(
        &["run", "--scenario", "gateway-outage[combined,outage=30s]"],
        dir.path(),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(
        err.contains("gateway-outage[combined,outage=30s]: stage fault"),
        "{err}"
    );
    assert!(
        err.contains("fault gateway-outage gateway-stop requested for 30s"),
        "{err}"
    );
    assert!(
        err.contains("fault gateway-outage gateway-stop ended"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("1 cases: 1 passed"));
}

#[test]
fn emulate_serve_runs_a_scenario_live_against_the_served_cluster() {
    let mut child = bin()
        .args([
            "emulate",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--model",
            "contract",
            "--scenario",
            "provisioning",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Real time: provisioning takes a few seconds; the guard is generous.
    let seen = lines_until(
        &mut child,
        "still serving",
        std::time::Duration::from_secs(60),
    );
    let _ = child.kill();
    let _ = child.wait();
    let all = seen.join("\n");
    assert!(
        all.contains("running provisioning[combined] in real time"),
        "{all}"
    );
    assert!(all.contains("provisioning[combined]: passed"), "{all}");
}

#[test]
fn doctor_says_the_kubeconfig_is_missing_rather_than_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &[
            "doctor",
            "--provider",
            "existing",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--context",
            "x",
        ],
        dir.path(),
    );
    let out = text(&o);
    // Issue 31 item 13: it said "context x is not in the kubeconfig".
    assert!(
        out.contains("kubeconfig /nonexistent/kubeconfig does not exist"),
        "{out}"
    );
    assert!(!out.contains("is not in the kubeconfig"), "{out}");
}

#[test]
fn emulate_serve_with_images_listens_on_the_fixed_port_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    // A port that was free a moment ago (issue 31 item 8: the command always failed with
    // "Address already in use", binding the address twice).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = bin()
        .args([
            "emulate",
            "serve",
            "--listen",
            &listen,
            "--kubeconfig-out",
            "kc",
            "--model",
            "contract",
            "--images",
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let seen = lines_until(
        &mut child,
        "listening on",
        std::time::Duration::from_secs(30),
    );
    let exited = child.try_wait().unwrap();
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let all = format!(
        "{}\n{}",
        seen.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(exited.is_none(), "it exited: {all}");
    assert!(
        all.contains(&format!(
            "emulated Kubernetes API listening on https://{listen}"
        )),
        "{all}"
    );
}

/// Runs `gateway-restart[combined]` with a defect that fails it, and returns the timeline.
fn failing_timeline(dir: &Path) -> (std::path::PathBuf, String) {
    let o = run(
        &[
            "run",
            "--defect",
            "gateway-restart-marks-error",
            "--scenario",
            "gateway-restart[combined]",
        ],
        dir,
    );
    assert_eq!(code(&o), 1, "{}", text(&o));
    let path = dir.join("artifacts/timelines/gateway-restart_combined_.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

/// The timeline's lines as JSON values, edited by `f`, written back.
fn edit_lines(path: &Path, text: &str, f: impl Fn(&mut serde_json::Value) -> bool) {
    let lines: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            f(&mut v).then(|| v.to_string())
        })
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn check_names_each_recorded_verdict_the_timeline_does_not_support_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let (path, original) = failing_timeline(dir.path());
    // Record a pass for the check that failed.
    edit_lines(&path, &original, |v| {
        if v["type"] == "check" && v["name"] == "the sandbox never turns terminal" {
            v["passed"] = true.into();
        }
        true
    });
    let o = run(&["check", path.to_str().unwrap()], dir.path());
    let out = text(&o);
    assert_eq!(code(&o), 1, "{out}");
    assert!(
        out.contains(
            "verdict of 'the sandbox never turns terminal' DIFFERS: recorded passed, re-judged failed"
        ),
        "{out}"
    );
}

#[test]
fn check_compares_the_stored_plan_with_the_catalog_and_names_the_checks_removed_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, original) = failing_timeline(dir.path());
    // Drop the failing check from the plan and from the verdicts, and call the case passed.
    let removed = "the sandbox never turns terminal";
    edit_lines(&path, &original, |v| {
        if v["type"] == "check_plan" {
            let kept: Vec<serde_json::Value> = v["checks"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["name"] != removed)
                .cloned()
                .collect();
            v["checks"] = kept.into();
        }
        if v["type"] == "run_finished" {
            v["outcome"] = "passed".into();
        }
        !(v["type"] == "check" && v["name"] == removed)
    });
    let o = run(&["check", path.to_str().unwrap()], dir.path());
    let out = text(&o);
    assert_eq!(code(&o), 1, "{out}");
    assert!(
        out.contains("the stored check plan DIFFERS from the catalog's for this case"),
        "{out}"
    );
    assert!(out.contains(&format!("missing: '{removed}'")), "{out}");
}

#[test]
fn check_judges_every_file_reports_skipped_cases_and_refuses_a_cut_timeline_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &[
            "run",
            "--model",
            "openshell-0.0.111",
            "--topology",
            "combined",
            "--scenario",
            "restart-policy-always*",
            "--scenario",
            "gateway-restart",
        ],
        dir.path(),
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let tl = dir.path().join("artifacts/timelines");
    let mut files: Vec<String> = std::fs::read_dir(&tl)
        .unwrap()
        .map(|e| e.unwrap().path().to_str().unwrap().to_string())
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "{files:?}");
    // Every file is judged: the skipped ones say so, the one that ran is re-judged.
    let mut args = vec!["check"];
    args.extend(files.iter().map(String::as_str));
    let o = run(&args, dir.path());
    let out = text(&o);
    assert_eq!(code(&o), 0, "{out}");
    assert_eq!(out.matches(": skipped: ").count(), 2, "{out}");
    assert!(out.contains("checks passed, as recorded"), "{out}");

    // A timeline cut before its closing record cannot be judged, and the others still are.
    let ran = files
        .iter()
        .find(|f| f.contains("gateway-restart"))
        .unwrap();
    let text_of = std::fs::read_to_string(ran).unwrap();
    let cut: Vec<&str> = text_of.lines().collect();
    let cut_path = dir.path().join("cut.jsonl");
    std::fs::write(&cut_path, cut[..cut.len() - 1].join("\n") + "\n").unwrap();
    let o = run(&["check", cut_path.to_str().unwrap(), ran], dir.path());
    let out = text(&o);
    assert_eq!(code(&o), 2, "{out}");
    assert!(out.contains("it is incomplete"), "{out}");
    assert!(out.contains("checks passed, as recorded"), "{out}");
    // `report` refuses what `check` refuses.
    let o = run(
        &["report", cut_path.to_str().unwrap(), "--html", "r.html"],
        dir.path(),
    );
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("it is incomplete"), "{}", text(&o));
}

#[test]
fn report_paths_that_cannot_be_written_are_refused_before_the_first_case_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    // A plain file where a directory is needed: nothing can be written beneath it.
    std::fs::write(dir.path().join("blocker"), "").unwrap();
    for (flag, value) in [
        ("--junit", "blocker/j.xml"),
        ("--html", "blocker/r.html"),
        ("--artifacts", "blocker/artifacts"),
    ] {
        let o = run(
            &[
                "run",
                "--scenario",
                "provisioning",
                "--topology",
                "combined",
                flag,
                value,
            ],
            dir.path(),
        );
        let out = text(&o);
        assert_eq!(code(&o), 2, "{flag}: {out}");
        assert!(out.contains(&format!("{flag} {value}")), "{flag}: {out}");
        assert!(!out.contains("start provisioning"), "a case ran: {out}");
        assert!(
            !dir.path().join("artifacts/timelines").exists(),
            "{flag}: timelines were written"
        );
    }
}

#[test]
fn restore_with_a_missing_journal_names_the_path_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &["restore", "--journal", "typo/restore-journal.json"],
        dir.path(),
    );
    let out = text(&o);
    assert_eq!(code(&o), 2, "{out}");
    assert!(out.contains("typo/restore-journal.json"), "{out}");
    assert!(!out.contains("nothing to restore"), "{out}");
}

#[test]
fn booleans_from_the_environment_accept_the_usual_spellings_and_errors_name_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    for yes in ["1", "yes", "on", "true", "0", "no", "off", "false"] {
        let o = bin()
            .args(["run", "--dry-run", "--scenario", "provisioning"])
            .env("OPENSHELL_CONFORMANCE_KEEP_ON_FAILURE", yes)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "{yes}: {}", text(&o));
    }
    let o = bin()
        .args(["run", "--dry-run", "--scenario", "provisioning"])
        .env("OPENSHELL_CONFORMANCE_KEEP_ON_FAILURE", "maybe")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(code(&o), 2, "{out}");
    assert!(
        out.contains("OPENSHELL_CONFORMANCE_KEEP_ON_FAILURE=maybe")
            && out.contains("1/0, true/false, yes/no, on/off"),
        "{out}"
    );
}

#[test]
fn an_outage_shorter_than_the_minimum_is_refused_like_zero_naming_the_minimum() {
    let dir = tempfile::tempdir().unwrap();
    let mut messages = Vec::new();
    for d in ["0s", "1ns", "999ms"] {
        let o = run(&["run", "--dry-run", "--outage", d], dir.path());
        let out = text(&o);
        assert_eq!(code(&o), 2, "{d}: {out}");
        assert!(out.contains("give at least 1s"), "{d}: {out}");
        messages.push(out.replace(d, "D"));
    }
    assert!(messages.windows(2).all(|w| w[0] == w[1]), "{messages:#?}");
    let o = run(&["run", "--dry-run", "--outage", "1s"], dir.path());
    assert_eq!(code(&o), 0, "{}", text(&o));
}

#[test]
fn an_outage_longer_than_the_maximum_is_refused_at_once_naming_the_maximum() {
    let dir = tempfile::tempdir().unwrap();
    for d in ["10000y", "999999999999999h", "7d 1s", "8d"] {
        let started = std::time::Instant::now();
        let o = run(
            &["run", "--scenario", "gateway-outage", "--outage", d],
            dir.path(),
        );
        let out = text(&o);
        assert_eq!(code(&o), 2, "{d}: {out}");
        assert!(out.contains("give at most 7d"), "{d}: {out}");
        assert!(started.elapsed().as_secs() < 10, "{d}: it ran");
    }
    let o = run(&["run", "--dry-run", "--outage", "7d"], dir.path());
    assert_eq!(code(&o), 0, "{}", text(&o));
}

#[test]
fn log_lines_on_a_pipe_carry_no_colour() {
    let dir = tempfile::tempdir().unwrap();
    let o = bin()
        .args([
            "run",
            "--scenario",
            "provisioning",
            "--topology",
            "combined",
        ])
        .env("RUST_LOG", "debug")
        .env_remove("NO_COLOR")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("DEBUG"), "no log lines to judge: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "ANSI escapes on a pipe");
}

#[test]
fn emulate_serve_refuses_a_kubeconfig_path_it_cannot_write_with_exit_2_like_every_command() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("blocker"), "").unwrap();
    let o = run(
        &["emulate", "serve", "--kubeconfig-out", "blocker/kubeconfig"],
        dir.path(),
    );
    let out = text(&o);
    assert_eq!(code(&o), 2, "{out}");
    assert!(out.contains("blocker/kubeconfig"), "{out}");
}

#[test]
fn the_html_report_of_a_run_names_the_model_and_its_defect_switches() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &[
            "run",
            "--defect",
            "gateway-restart-marks-error",
            "--scenario",
            "gateway-restart",
            "--topology",
            "combined",
        ],
        dir.path(),
    );
    assert_eq!(code(&o), 1, "{}", text(&o));
    let html = std::fs::read_to_string(dir.path().join("artifacts/report.html")).unwrap();
    assert!(
        html.contains(
            "<title>openshell-conformance on target emulated, model contract, defects gateway-restart-marks-error</title>"
        ),
        "{}",
        &html[..400.min(html.len())]
    );
    // `report` on the saved timelines gives the same title, from their run records.
    let timelines: Vec<String> = std::fs::read_dir(dir.path().join("artifacts/timelines"))
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    let mut args = vec!["report", "--html", "again.html"];
    args.extend(timelines.iter().map(String::as_str));
    let o = run(&args, dir.path());
    assert_eq!(code(&o), 0, "{}", text(&o));
    let again = std::fs::read_to_string(dir.path().join("again.html")).unwrap();
    assert!(
        again.contains("defects gateway-restart-marks-error</title>"),
        "{}",
        &again[..400.min(again.len())]
    );
}

/// A run of the four `provisioning` cases, paused on the wall clock after each case by the
/// test knob, interrupted by `signal` once the first case is done; returns (exit code, stdout
/// then stderr, seconds from the signal to the exit).
fn interrupt_after_first_case(dir: &Path, signal: &str) -> (i32, String, f64) {
    let knob = ("OPENSHELL_CONFORMANCE_TEST_PAUSE_AFTER_CASE", "60s");
    signal_run_at(dir, knob, " done ", signal)
}

/// `run --scenario provisioning --jobs 1` with the test knob `knob` (a pause), sent `signal`
/// once a line of its stderr contains `at`; returns (exit code, stdout then stderr, seconds
/// from the signal to the exit).
fn signal_run_at(dir: &Path, knob: (&str, &str), at: &str, signal: &str) -> (i32, String, f64) {
    use std::io::{BufReader, Read};
    let mut child = bin()
        .args(["run", "--scenario", "provisioning", "--jobs", "1"])
        .env(knob.0, knob.1)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = stderr_until(&mut stderr, at);
    let sent = std::time::Instant::now();
    let kill = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    stderr.read_to_string(&mut seen).unwrap();
    let status = child.wait().unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    (
        status.code().unwrap_or(-1),
        format!("{out}{seen}"),
        sent.elapsed().as_secs_f64(),
    )
}

#[rstest::rstest]
#[case::sigint("INT", 130)]
#[case::sigterm("TERM", 143)]
fn a_signal_during_run_writes_the_finished_cases_marks_the_rest_interrupted_and_leaves_no_earlier_files(
    #[case] signal: &str,
    #[case] want: i32,
) {
    let dir = tempfile::tempdir().unwrap();
    let art = dir.path().join("artifacts");
    // What an earlier, all-passing run left behind.
    std::fs::create_dir_all(art.join("timelines")).unwrap();
    std::fs::create_dir_all(art.join("diagnostics/combined-1234")).unwrap();
    std::fs::write(
        art.join("timelines/seeded-sweep_gateway_.jsonl"),
        "{\"seq\":1,\"at_ms\":0,\"type\":\"run_started\"}\n",
    )
    .unwrap();
    std::fs::write(art.join("diagnostics/combined-1234/pods.txt"), "old").unwrap();
    std::fs::write(art.join("junit.xml"), "EARLIER RUN").unwrap();
    std::fs::write(art.join("report.html"), "EARLIER RUN").unwrap();
    manifest_listing(
        &art,
        &[
            "timelines/seeded-sweep_gateway_.jsonl",
            "diagnostics/combined-1234/pods.txt",
            "junit.xml",
            "report.html",
        ],
    );

    let (exit, out, secs) = interrupt_after_first_case(dir.path(), signal);
    assert_eq!(exit, want, "{out}");
    assert!(
        secs < 30.0,
        "the 60 s pause was not cut short: {secs} s\n{out}"
    );
    assert!(
        out.contains("removed the files of an earlier run from artifacts: timelines/ (1 files), diagnostics/ (1 files), artifacts/junit.xml, artifacts/report.html"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "interrupted by SIG{signal}: 1 of {} cases finished",
            topologies()
        )),
        "{out}"
    );

    let timelines: Vec<String> = std::fs::read_dir(art.join("timelines"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(timelines, ["provisioning_combined_.jsonl"], "{out}");
    assert!(!art.join("diagnostics").exists());
    // The finished case's timeline is whole: `check` judges it and agrees.
    let o = run(
        &["check", "artifacts/timelines/provisioning_combined_.jsonl"],
        dir.path(),
    );
    assert_eq!(code(&o), 0, "{}", text(&o));

    let junit = std::fs::read_to_string(art.join("junit.xml")).unwrap();
    assert!(!junit.contains("EARLIER RUN"));
    // What CI dashboards read: one passed case, the others interrupted, as the summary says.
    if let Some(parsed) = junit_consumers::read(&art.join("junit.xml"), "a_signal_during_run") {
        let totals = junit_consumers::summary_totals(&out);
        assert_eq!(totals[1], 1, "{out}");
        assert_eq!(totals[7], topologies() - 1, "{out}");
        junit_consumers::assert_agrees(&parsed, totals);
    }
    let report = quick_junit::Report::deserialize_from_str(&junit).unwrap();
    let suites: Vec<(&str, bool)> = report
        .test_suites
        .iter()
        .map(|s| {
            let interrupted = s.test_cases.iter().any(|c| {
                c.name.as_str() == "interrupted"
                    && matches!(
                        &c.status,
                        quick_junit::TestCaseStatus::NonSuccess {
                            kind: quick_junit::NonSuccessKind::Error,
                            message: Some(m),
                            ..
                        } if m.as_str() == format!("interrupted by SIG{signal}: the case did not start")
                    )
            });
            (s.name.as_str(), interrupted)
        })
        .collect();
    // The first topology's case finished before the signal; every other one never started.
    let first = topology_names()[0].clone();
    let mut expected: Vec<(String, bool)> = topology_names()
        .into_iter()
        .map(|t| (format!("provisioning[{t}]"), t != first))
        .collect();
    expected.sort();
    let mut suites: Vec<(String, bool)> = suites
        .into_iter()
        .map(|(s, i)| (s.to_string(), i))
        .collect();
    suites.sort();
    assert_eq!(suites, expected);
    let html = std::fs::read_to_string(art.join("report.html")).unwrap();
    assert!(!html.contains("EARLIER RUN"));
    assert!(html.contains(&format!("(interrupted by SIG{signal})")));
}

/// Issue 31 item 6: a signal in the first milliseconds left the earlier run's JUnit beside
/// part of its timelines. The run pauses (test knob) just before it removes them.
#[test]
fn a_signal_before_the_earlier_runs_files_are_removed_interrupts_the_run_after_removing_them_whole()
{
    let dir = tempfile::tempdir().unwrap();
    let art = dir.path().join("artifacts");
    let o = run(&["run", "--scenario", "gateway-restart"], dir.path());
    assert_eq!(code(&o), 0, "{}", text(&o));
    let knob = ("OPENSHELL_CONFORMANCE_TEST_PAUSE_BEFORE_CLEAR", "3s");
    let at = "pausing before the earlier run's files are removed";
    let (exit, out, _) = signal_run_at(dir.path(), knob, at, "INT");
    assert_eq!(exit, 130, "{out}");
    assert!(
        out.contains("removed the files of an earlier run from artifacts"),
        "{out}"
    );
    // Nothing of the earlier run is left, hidden or not; what is there is this run's.
    let names: Vec<String> = files_under(&art).into_keys().collect();
    assert!(
        names.iter().all(|n| !n.contains("gateway-restart")
            && (!n.starts_with('.') || n == ".openshell-conformance-manifest.json")),
        "{names:?}"
    );
    let junit = std::fs::read_to_string(art.join("junit.xml")).unwrap();
    assert!(!junit.contains("gateway-restart"), "{junit}");
    assert!(junit.contains("interrupted by SIGINT"), "{junit}");
}

/// Issue 31 item 5: the run removed `proj/timelines/mydata.txt` and `proj/diagnostics/notes.txt`.
#[test]
fn an_artifacts_directory_holding_files_the_run_did_not_write_is_refused_naming_them_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let proj = dir.path().join("proj");
    let args = [
        "run",
        "--scenario",
        "provisioning",
        "--topology",
        "combined",
        "--artifacts",
        "proj",
    ];
    let o = run(&args, dir.path());
    assert_eq!(code(&o), 0, "{}", text(&o));
    std::fs::write(proj.join("timelines/mydata.txt"), "mine").unwrap();
    std::fs::create_dir_all(proj.join("diagnostics")).unwrap();
    std::fs::write(proj.join("diagnostics/notes.txt"), "mine").unwrap();
    let before = files_under(&proj);
    let o = run(&args, dir.path());
    let out = text(&o);
    assert_eq!(code(&o), 2, "{out}");
    assert!(
        out.contains(
            "diagnostics/notes.txt, timelines/mydata.txt not files of the earlier run as its manifest"
        ) && out.contains("move them elsewhere"),
        "{out}"
    );
    assert!(!out.contains("start provisioning"), "a case ran: {out}");
    assert_eq!(files_under(&proj), before, "a file changed");
    // Moved away, the run replaces its own earlier files.
    std::fs::remove_file(proj.join("timelines/mydata.txt")).unwrap();
    std::fs::remove_file(proj.join("diagnostics/notes.txt")).unwrap();
    let o = run(&args, dir.path());
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains("removed the files of an earlier run"));
}

/// Issue 44 item 9: a `junit.xml` the user wrote was deleted as "the files of an earlier run",
/// and files shaped like the run's own were deleted for their shape.
#[test]
fn a_users_junit_xml_and_a_file_shaped_like_a_timeline_survive_the_next_run_and_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let art = dir.path().join("artifacts");
    std::fs::create_dir_all(art.join("timelines")).unwrap();
    std::fs::write(art.join("junit.xml"), "MINE").unwrap();
    std::fs::write(
        art.join("timelines/provisioning_combined_.jsonl"),
        "{\"seq\":1,\"at_ms\":0,\"type\":\"run_started\"}\n",
    )
    .unwrap();
    let before = files_under(&art);
    let o = run(&["run", "--scenario", "provisioning"], dir.path());
    let out = text(&o);
    assert_eq!(code(&o), 2, "{out}");
    assert!(
        out.contains(
            "--artifacts artifacts: junit.xml, timelines/provisioning_combined_.jsonl not files of an earlier run: no run left a manifest"
        ),
        "{out}"
    );
    assert!(!out.contains("start provisioning"), "a case ran: {out}");
    assert_eq!(files_under(&art), before, "a file changed");
}

/// Issue 44 item 9: the next run removes exactly what the earlier run's manifest lists; a
/// listed file the user changed since, and a file of the user's beside them, stay.
#[test]
fn the_next_run_removes_the_listed_files_and_keeps_an_edited_one_and_the_users_naming_the_edited() {
    let dir = tempfile::tempdir().unwrap();
    let art = dir.path().join("artifacts");
    let o = run(
        &[
            "run",
            "--scenario",
            "gateway-restart",
            "--html",
            "artifacts/old.html",
        ],
        dir.path(),
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(art.join(".openshell-conformance-manifest.json").is_file());
    std::fs::write(art.join("old.html"), "EDITED").unwrap();
    std::fs::write(art.join("notes.txt"), "mine").unwrap();
    let o = run(&["run", "--scenario", "provisioning"], dir.path());
    let out = text(&o);
    assert_eq!(code(&o), 0, "{out}");
    assert!(
        out.contains("kept in artifacts, changed since the earlier run wrote them: old.html"),
        "{out}"
    );
    let names: Vec<String> = files_under(&art).into_keys().collect();
    assert!(
        names.iter().all(|n| !n.contains("gateway-restart")),
        "a listed timeline stays: {names:?}"
    );
    assert_eq!(std::fs::read(art.join("old.html")).unwrap(), b"EDITED");
    assert_eq!(std::fs::read(art.join("notes.txt")).unwrap(), b"mine");
    let junit = std::fs::read_to_string(art.join("junit.xml")).unwrap();
    assert!(junit.contains("provisioning") && !junit.contains("gateway-restart"));
}

/// Issue 31 items 4 and 11: each exited 3, several after the earlier run's files were removed
/// or the served cluster started.
#[test]
fn user_given_paths_are_refused_with_exit_2_naming_flag_and_path_before_anything_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("chart")).unwrap();
    std::fs::write(d.join("chart/Chart.yaml"), "version: [unclosed\n").unwrap();
    std::fs::write(d.join("bad.yaml"), "a: [unclosed\n").unwrap();
    std::fs::write(d.join("openshell"), "#!/bin/sh\n").unwrap();
    std::fs::create_dir(d.join("jdir")).unwrap();
    std::fs::write(d.join("junk"), [0x00, 0xff, 0x13, 0x37, 0xc3]).unwrap();
    let inside = d.join("art2/priv").display().to_string();
    mkfifo(&d.join("fifo"));
    // Issue 44 item 7: a run with --run-dir ignored the active faults of the journal there.
    std::fs::write(
        d.join("kc.yaml"),
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    )
    .unwrap();
    std::fs::create_dir(d.join("rd")).unwrap();
    std::fs::write(
        d.join("rd/restore-journal.json"),
        r#"{"context":"kind-x","entries":[{"id":"gateway-stop-openshell","fault":"gateway-stop","undo":{"undo":"scale-back","workload":{"kind":"StatefulSet","namespace":"openshell","name":"openshell","selector":{}},"replicas":1}}]}"#,
    )
    .unwrap();
    let served = ["run", "--target", "served"];
    let cases: Vec<(Vec<&str>, String)> =
        vec![
        (
            vec![
                "run", "--target", "existing", "--context", "kind-x", "--kubeconfig", "kc.yaml",
                "--run-dir", "rd",
            ],
            "rd/restore-journal.json holds 1 fault(s) an earlier run left active on context kind-x"
                .into(),
        ),
        (
            [&served[..], &["--chart-path", "chart"]].concat(),
            "--chart-path chart: ".into(),
        ),
        (
            [&served[..], &["--agent-sandbox-manifest", "bad.yaml"]].concat(),
            "--agent-sandbox-manifest bad.yaml: not YAML".into(),
        ),
        (
            [&served[..], &["--openshell-bin", "./openshell"]].concat(),
            "--openshell-bin ./openshell: not an executable file".into(),
        ),
        (
            [&served[..], &["--values", "missing.yaml"]].concat(),
            "--values missing.yaml: cannot read it".into(),
        ),
        (
            [&served[..], &["--values", "bad.yaml"]].concat(),
            "--values bad.yaml: not YAML".into(),
        ),
        (
            [&served[..], &["--private-dir", "/proc/priv"]].concat(),
            "--private-dir /proc/priv: the run cannot make its directory there".into(),
        ),
        (
            vec!["run", "--target", "kind", "--values", "bad.yaml"],
            "--values bad.yaml: not YAML".into(),
        ),
        (
            [
                &served[..],
                &["--artifacts", "art2", "--private-dir", &inside],
            ]
            .concat(),
            format!("--private-dir {inside} is inside art2: credentials must stay out"),
        ),
        // Issue 44 items 5 and 6: /dev/zero never ended (gigabytes resident); a missing or
        // garbage kubeconfig exited 3.
        (
            [&served[..], &["--values", "/dev/zero"]].concat(),
            "--values /dev/zero: not a regular file".into(),
        ),
        (
            vec!["run", "--expectations", "/dev/zero"],
            "expectations file /dev/zero: not a regular file".into(),
        ),
        (
            vec![
                "run",
                "--target",
                "existing",
                "--context",
                "kind-x",
                "--kubeconfig",
                "nokc",
            ],
            "kubeconfig nokc does not exist (--kubeconfig)".into(),
        ),
        (
            vec![
                "run",
                "--target",
                "existing",
                "--context",
                "kind-x",
                "--kubeconfig",
                "junk",
            ],
            "--kubeconfig junk: not a kubeconfig".into(),
        ),
        (
            vec![
                "run",
                "--target",
                "existing",
                "--context",
                "kind-x",
                "--kubeconfig",
                "/dev/zero",
            ],
            "--kubeconfig /dev/zero: not a regular file".into(),
        ),
        (
            vec!["check", "fifo"],
            "timeline fifo: not a regular file".into(),
        ),
        (
            [&served[..], &["--run-dir", "/proc/rd"]].concat(),
            "--run-dir /proc/rd: the run cannot make its directory there".into(),
        ),
        (
            vec!["restore", "--journal", "jdir"],
            "restore --journal jdir: not a file".into(),
        ),
        (
            vec!["restore", "--journal", "junk"],
            "restore --journal junk: not a restore journal".into(),
        ),
    ];
    for (args, says) in cases {
        // What an earlier run left, which a refused run must not touch.
        std::fs::create_dir_all(d.join("artifacts/timelines")).unwrap();
        std::fs::write(d.join("artifacts/junit.xml"), "EARLIER RUN").unwrap();
        manifest_listing(&d.join("artifacts"), &["junit.xml"]);
        let out = refused(&args, d, &says);
        assert!(!out.contains("served cluster for"), "{args:?}: {out}");
        assert_eq!(
            std::fs::read_to_string(d.join("artifacts/junit.xml")).unwrap(),
            "EARLIER RUN",
            "{args:?}"
        );
    }
}

/// Runs `args` in `dir`, which must exit 2 saying `says`; what it printed.
fn refused(args: &[&str], dir: &Path, says: &str) -> String {
    let o = run(args, dir);
    let out = text(&o);
    assert_eq!(code(&o), 2, "{args:?}: {out}");
    assert!(out.contains(says), "{args:?} should say {says:?}:\n{out}");
    out
}

/// Runs provisioning on combined in `d`; its one timeline.
fn provisioning_timeline(d: &Path) -> std::path::PathBuf {
    let o = run(
        &[
            "run",
            "--scenario",
            "provisioning",
            "--topology",
            "combined",
        ],
        d,
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    std::fs::read_dir(d.join("artifacts/timelines"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
}

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.unwrap().success(), "mkfifo {}", path.display());
}

/// Issue 44 item 3: each was renamed over (a device node or symbolic link became a regular
/// file, the input timeline was overwritten, one report replaced the other), with exit 0.
#[test]
fn reports_are_written_only_to_a_regular_file_or_a_new_path_and_never_over_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let timeline = provisioning_timeline(d);
    let timeline = timeline.to_str().unwrap();
    std::fs::write(d.join("target"), "the user's").unwrap();
    std::os::unix::fs::symlink(d.join("target"), d.join("link")).unwrap();
    let fifo = d.join("fifo");
    mkfifo(&fifo);
    let quick = ["run", "--scenario", "provisioning", "--artifacts", "art"];
    // A device node of the test's own (the null device's numbers), never the machine's
    // /dev/null: a regression would replace the node it names. Making one needs root.
    let device = std::process::Command::new("mknod")
        .args(["-m", "666", "null", "c", "1", "3"])
        .current_dir(d)
        .status()
        .is_ok_and(|s| s.success());
    let mut cases: Vec<(Vec<&str>, &str)> = vec![
        (
            [&quick[..], &["--html", "link"]].concat(),
            "--html link: it is a symbolic link",
        ),
        (
            [&quick[..], &["--junit", "fifo"]].concat(),
            "--junit fifo: it is a FIFO",
        ),
        (
            [&quick[..], &["--junit", "same.xml", "--html", "./same.xml"]].concat(),
            "--html ./same.xml is also the path of --junit: two reports cannot share one file",
        ),
        (
            vec!["report", timeline, "--html", timeline],
            "which this command reads: writing there would replace it",
        ),
    ];
    if device {
        cases.push((
            [&quick[..], &["--junit", "null"]].concat(),
            "--junit null: it is a device; reports are written only to a regular file or a new path",
        ));
        cases.push((
            vec!["report", timeline, "--html", "null"],
            "--html null: it is a device",
        ));
    }
    let before = std::fs::read(timeline).unwrap();
    for (args, says) in cases {
        let out = refused(&args, d, says);
        assert!(
            !out.contains("start provisioning"),
            "{args:?}: a case ran: {out}"
        );
    }
    assert!(!d.join("art").exists(), "a refused run made its artifacts");
    assert_eq!(std::fs::read(timeline).unwrap(), before);
    assert!(
        std::fs::symlink_metadata(d.join("link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(d.join("target")).unwrap(),
        "the user's"
    );
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    if device {
        assert!(
            std::fs::symlink_metadata(d.join("null"))
                .unwrap()
                .file_type()
                .is_char_device(),
            "the device is still a device"
        );
    }
}

/// Issue 44 items 1 and 4: a private directory another user made first was used (and the
/// token written into it); `--private-dir` on an existing directory set it to 0700.
#[test]
fn a_private_dir_that_is_not_new_or_an_empty_private_directory_of_ours_is_refused_and_left_as_it_was()
 {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let open = d.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let full = d.join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::set_permissions(&full, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(full.join("notes"), "mine").unwrap();
    std::os::unix::fs::symlink(&full, d.join("link")).unwrap();
    for (private, says) in [
        (
            "open",
            "--private-dir: open has mode 0755: other users can reach it",
        ),
        ("full", "--private-dir: full is not empty"),
        ("link", "--private-dir: link is a symbolic link"),
    ] {
        let o = run(
            &[
                "run",
                "--target",
                "served",
                "--dry-run",
                "--private-dir",
                private,
            ],
            d,
        );
        let out = text(&o);
        assert_eq!(code(&o), 2, "{private}: {out}");
        assert!(out.contains(says), "{private} should say {says:?}:\n{out}");
    }
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        mode(&open),
        0o755,
        "the mode of the user's directory is never changed"
    );
    assert_eq!(std::fs::read_to_string(full.join("notes")).unwrap(), "mine");
}

/// Issue 44 item 10: each exited 0, the flags silently ignored.
#[test]
fn a_flag_for_another_target_or_command_is_refused_naming_it_and_where_it_applies() {
    let dir = tempfile::tempdir().unwrap();
    for (args, says) in [
        (
            &[
                "run",
                "--context",
                "prod",
                "--kubeconfig",
                "/nonexistent",
                "--chart-path",
                "/nonexistent",
            ][..],
            "does not apply to --target emulated: it is for --target",
        ),
        (
            &[
                "run",
                "--target",
                "served",
                "--sweep-leftovers",
                "--dry-run",
            ][..],
            "--sweep-leftovers does not apply to --target served: it is for --target kind|k3d|existing",
        ),
        (&["emulate", "serve", "--defect", "bogus"][..], "--model"),
    ] {
        refused(args, dir.path(), says);
        assert!(
            !dir.path().join("artifacts").exists(),
            "{args:?} wrote artifacts"
        );
    }
}

/// Issue 44 item 11: `check` passed it, skipping the comparison of its stored plan.
#[test]
fn check_refuses_a_timeline_whose_case_is_not_in_the_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = provisioning_timeline(d);
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(saved.contains(r#""scenario":"provisioning""#));
    std::fs::write(
        d.join("renamed.jsonl"),
        saved.replacen(
            r#""scenario":"provisioning""#,
            r#""scenario":"no-such-scenario""#,
            1,
        ),
    )
    .unwrap();
    let o = run(&["check", "renamed.jsonl"], d);
    let out = text(&o);
    assert_eq!(code(&o), 2, "{out}");
    assert!(
        out.contains("its case is not in this harness's catalog")
            && out.contains("no-such-scenario"),
        "{out}"
    );
}

#[test]
fn a_run_into_a_fresh_directory_says_nothing_about_earlier_files() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["run", "--scenario", "provisioning"], dir.path());
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(!text(&o).contains("earlier run"), "{}", text(&o));
}

/// Every file of `dir`, by its path under `dir`, with its bytes.
fn files_under(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn identical_runs_write_byte_identical_timelines_junit_and_html_whatever_the_jobs() {
    let dir = tempfile::tempdir().unwrap();
    // The scenarios whose records differed between runs before wake-ups were ordered, on
    // every topology: uids, resourceVersions and Ready reasons depended on which task woke first.
    let select = [
        "--scenario",
        "provisioning*",
        "--scenario",
        "supervisor-restart*",
        "--scenario",
        "error-recovery*",
        "--seed",
        "7",
    ];
    let runs = [("a", "1"), ("b", "2"), ("c", "2")];
    for (name, jobs) in runs {
        let mut args = vec!["run", "--jobs", jobs, "--artifacts", name];
        args.extend(select);
        let o = run(&args, dir.path());
        assert_eq!(code(&o), 0, "{}", text(&o));
    }
    let a = files_under(&dir.path().join("a"));
    assert!(a.contains_key("junit.xml") && a.contains_key("report.html"));
    assert!(a.keys().filter(|k| k.starts_with("timelines")).count() >= 12);
    for other in ["b", "c"] {
        let b = files_under(&dir.path().join(other));
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        let differing: Vec<&String> = a.keys().filter(|k| a[*k] != b[*k]).collect();
        assert!(
            differing.is_empty(),
            "a and {other} differ in {differing:?}"
        );
    }
}

#[test]
fn a_run_removes_the_key_directories_a_killed_run_left_under_the_temporary_directory() {
    // Issue 31 items 2-3: each SIGKILL left a node state directory (pods' keys and tokens) and
    // a private directory, and later runs never cleaned them.
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let left = tmp.join(format!("openshell-conformance-node-{dead}-AbC123"));
    std::fs::create_dir(&left).unwrap();
    std::fs::write(left.join("tls.key"), "-----BEGIN PRIVATE KEY-----").unwrap();
    let o = bin()
        .args(["run", "--scenario", "provisioning[combined]"])
        .current_dir(dir.path())
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(!left.exists(), "the killed run's directory is left");
    assert!(
        text(&o).contains("removed 1 directory left by killed runs"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_run_refuses_an_artifacts_directory_whose_journal_holds_faults_on_a_live_cluster() {
    // Issue 31 item 9: a stale journal was never mentioned, and a new run merged its own
    // entries into it under its own context.
    let dir = tempfile::tempdir().unwrap();
    let art = dir.path().join("art");
    std::fs::create_dir_all(art.join("timelines")).unwrap();
    let earlier = art.join("timelines/provisioning_combined_.jsonl");
    std::fs::write(&earlier, "{\"seq\":1,\"type\":\"run_started\"}\n").unwrap();
    manifest_listing(&art, &["timelines/provisioning_combined_.jsonl"]);
    std::fs::write(
        art.join("restore-journal.json"),
        r#"{"context":"kind-x","entries":[{"id":"node-access-n","fault":"supervisor-kill","undo":{"undo":"delete-pod","namespace":"openshell","name":"n"}}]}"#,
    )
    .unwrap();
    let o = run(
        &[
            "run",
            "--target",
            "existing",
            "--context",
            "kind-x",
            "--artifacts",
            art.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        text(&o).contains("1 fault(s) an earlier run left active on context kind-x"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("restore --journal"), "{}", text(&o));
    assert!(earlier.exists(), "nothing was cleared before the refusal");
}

/// Issue 42 item 1: `--jobs` on the served target takes 1 to 64; kind, k3d and existing keep
/// refusing more than one (a topology's cases share one release there), before anything starts.
#[test]
fn jobs_out_of_range_is_refused_on_served_and_above_one_on_kind_k3d_and_existing() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["0", "65", "-1", "many"] {
        let flag = format!("--jobs={bad}");
        let out = refused(
            &["run", "--target", "served", &flag, "--dry-run"],
            dir.path(),
            "--jobs",
        );
        assert!(out.contains(bad), "{bad}: {out}");
    }
    for target in ["kind", "k3d", "existing"] {
        refused(
            &["run", "--target", target, "--jobs", "2", "--dry-run"],
            dir.path(),
            "--jobs above 1 applies to the emulated and served targets only",
        );
    }
    assert!(
        !dir.path().join("artifacts").exists(),
        "a refused run wrote artifacts"
    );
}

/// Starts `run` in `dir` with `knob` set to a pause of `pause`, SIGINT ignored as a shell
/// starts a background job of a script; returns it once it printed `at` on stderr, with the
/// stderr read so far and the reader.
fn started_ignoring_sigint(
    dir: &Path,
    knob: &str,
    pause: &str,
    at: &str,
) -> (
    std::process::Child,
    String,
    std::io::BufReader<std::process::ChildStderr>,
) {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = bin();
    cmd.args([
        "run",
        "--scenario",
        "provisioning",
        "--topology",
        "combined",
    ])
    .current_dir(dir)
    .env(knob, pause)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped());
    // SAFETY: signal() is async-signal-safe, as between fork and exec requires.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("the binary starts");
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let seen = stderr_until(&mut stderr, at);
    (child, seen, stderr)
}

/// The run's stderr up to and including the first line that contains `at`.
fn stderr_until(stderr: &mut impl std::io::BufRead, at: &str) -> String {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "the run ended before it printed {at:?}: {seen}"
        );
        seen.push_str(&line);
        if line.contains(at) {
            return seen;
        }
    }
}

fn sigint(child: &std::process::Child) {
    // SAFETY: kill() on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
}

#[test]
fn a_run_started_with_sigint_ignored_still_stops_on_a_sigint_before_its_handler_leaving_the_earlier_run()
 {
    use std::io::Read as _;
    use std::os::unix::process::ExitStatusExt as _;
    let dir = tempfile::tempdir().unwrap();
    let art = dir.path().join("artifacts");
    std::fs::create_dir_all(&art).unwrap();
    std::fs::write(art.join("junit.xml"), "EARLIER RUN").unwrap();
    manifest_listing(&art, &["junit.xml"]);
    let (mut child, mut seen, mut stderr) = started_ignoring_sigint(
        dir.path(),
        "OPENSHELL_CONFORMANCE_TEST_PAUSE_AT_START",
        "5s",
        "pausing before anything is checked",
    );
    sigint(&child);
    stderr.read_to_string(&mut seen).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGINT),
        "the SIGINT was lost: {status:?}\n{seen}"
    );
    assert_eq!(
        std::fs::read_to_string(art.join("junit.xml")).unwrap(),
        "EARLIER RUN"
    );
}

#[test]
fn a_second_signal_while_the_results_are_written_waits_for_the_junit_and_exits_130() {
    use std::io::Read as _;
    let dir = tempfile::tempdir().unwrap();
    let (mut child, mut seen, mut stderr) = started_ignoring_sigint(
        dir.path(),
        "OPENSHELL_CONFORMANCE_TEST_PAUSE_WHILE_WRITING",
        "3s",
        "pausing between the timelines and the JUnit",
    );
    sigint(&child);
    std::thread::sleep(std::time::Duration::from_millis(300));
    sigint(&child);
    stderr.read_to_string(&mut seen).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen}");
    let art = dir.path().join("artifacts");
    let timelines = std::fs::read_dir(art.join("timelines")).unwrap().count();
    assert_eq!(timelines, 1, "{seen}");
    let junit = std::fs::read_to_string(art.join("junit.xml"))
        .unwrap_or_else(|e| panic!("timelines but no JUnit: {e}\n{seen}"));
    assert!(junit.contains("provisioning[combined]"), "{junit}");
    assert!(
        art.join(".openshell-conformance-manifest.json").is_file(),
        "{seen}"
    );
}

/// Issue 43: a stop that never completed stopped the case at its seed with no requirement named
/// in the summary, JUnit or HTML. Each now names the stop contract (R7) as what broke.
#[test]
fn a_stop_that_never_completes_is_named_r7_in_the_summary_junit_and_html() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &[
            "run",
            "--defect",
            "stop-never-completes",
            "--scenario",
            "stopped-through-outage",
            "--topology",
            "combined",
        ],
        dir.path(),
    );
    let out = text(&o);
    assert_eq!(code(&o), 1, "{out}");
    assert!(
        out.contains(
            "FAIL stopped-through-outage[combined,outage=30s]: [R7] seed: gave up waiting for sandbox "
        ) && out.contains(" to be Stopped after 2m; last seen: "),
        "{out}"
    );
    let junit = std::fs::read_to_string(dir.path().join("artifacts/junit.xml")).unwrap();
    let seed = junit
        .split("<testcase name=\"stage: seed\"")
        .nth(1)
        .and_then(|s| s.split("</testcase>").next())
        .unwrap_or_else(|| panic!("no seed stage: {junit}"));
    assert!(
        seed.contains("<failure message=\"[R7] seed: gave up waiting for sandbox "),
        "{seed}"
    );
    let html = std::fs::read_to_string(dir.path().join("artifacts/report.html")).unwrap();
    assert!(
        html.contains(
            "<h3>Failing step</h3>\n<div class=\"check\"><b>create, write a sentinel and stop</b> [R7] (stage seed)<br>[R7] seed: gave up waiting for sandbox "
        ),
        "{}",
        html.split("<section").nth(1).unwrap_or(&html)
    );
}
