//! One verdict everywhere: for a run on a release with known failures, the summary, the exit
//! code, JUnit, the HTML report and `check` on the saved timelines say the same thing, and an
//! unexpected pass is red in all of them.

use std::path::Path;

use quick_junit::{NonSuccessKind, Report, TestCaseStatus};

#[path = "common/binary.rs"]
mod binary;
#[path = "common/junit_consumers.rs"]
mod junit_consumers;

use binary::{run, text};

/// How many shipped topologies run on OpenShell `version`.
fn topologies_on(version: &str) -> usize {
    let v = semver::Version::parse(version).unwrap();
    conformance_core::topology::Topologies::builtin()
        .all()
        .filter(|t| t.supports(&v))
        .count()
}

/// How many variants (outages) the catalog runs bootstrap-outage with on one topology.
fn bootstrap_outage_variants() -> usize {
    let combined = conformance_core::topology::Topologies::builtin()
        .get("combined")
        .unwrap()
        .clone();
    let pick = conformance_catalog::catalog::Selection {
        patterns: vec!["bootstrap-outage".into()],
        ..Default::default()
    };
    conformance_catalog::catalog::cases(&[combined], &pick).len()
}

/// The summary's totals line (without the times after the `;`).
fn totals_line(out: &str) -> String {
    out.lines()
        .find(|l| l.contains(" cases: "))
        .and_then(|l| l.split(';').next())
        .unwrap_or_else(|| panic!("no totals line in:\n{out}"))
        .to_string()
}

fn timelines(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("timelines"))
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    v.sort();
    v
}

/// (failures, errors, skipped of type xfail, failures of type xpass) over the whole report.
fn junit_counts(path: &Path) -> (usize, usize, usize, usize) {
    let xml = std::fs::read_to_string(path).unwrap();
    let report = Report::deserialize_from_str(&xml).unwrap();
    let (mut f, mut e, mut xfail, mut xpass) = (0, 0, 0, 0);
    for s in &report.test_suites {
        for c in &s.test_cases {
            match &c.status {
                TestCaseStatus::NonSuccess { kind, ty, .. } => match kind {
                    NonSuccessKind::Failure => {
                        f += 1;
                        if ty.as_ref().is_some_and(|t| t.as_str() == "xpass") {
                            xpass += 1;
                        }
                    }
                    NonSuccessKind::Error => e += 1,
                },
                TestCaseStatus::Skipped { ty: Some(t), .. } if t.as_str() == "xfail" => xfail += 1,
                _ => {}
            }
        }
    }
    (f, e, xfail, xpass)
}

#[test]
fn a_run_whose_failures_are_all_known_is_green_in_every_output_and_check_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &[
            "run",
            "--model",
            "openshell-0.0.111",
            "--scenario",
            "bootstrap-outage",
            "--scenario",
            "gateway-restart",
            "--artifacts",
            "a",
        ],
        dir.path(),
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    // gateway-restart passes and every bootstrap-outage variant fails as expected, on each
    // topology v0.0.111 runs.
    let n = topologies_on("0.0.111");
    let variants = bootstrap_outage_variants();
    let line = totals_line(&out);
    assert_eq!(
        line,
        format!(
            "{} cases: {n} passed, 0 failed, {} expected failures, 0 unexpected passes, 0 errors, 0 skipped",
            (1 + variants) * n,
            variants * n
        )
    );
    let a = dir.path().join("a");
    // JUnit: no failure, the known ones skipped as xfail.
    let (failures, errors, xfail, _) = junit_counts(&a.join("junit.xml"));
    assert_eq!((failures, errors), (0, 0));
    assert!(
        xfail >= variants * n,
        "each expected failure has xfail testcases"
    );
    let xml = std::fs::read_to_string(a.join("junit.xml")).unwrap();
    assert_eq!(
        xml.matches("<property name=\"outcome\" value=\"expected-failure\"/>")
            .count(),
        variants * n
    );
    // HTML: the same headline.
    let html = std::fs::read_to_string(a.join("report.html")).unwrap();
    assert!(
        html.contains(&format!("<p class=\"totals\">{line}</p>")),
        "{line}"
    );
    // check: the recorded known failures give the same verdicts, and exit 0.
    let tls = timelines(&a);
    let mut args = vec!["check"];
    args.extend(tls.iter().map(String::as_str));
    let o = run(&args, dir.path());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert_eq!(
        out.matches(": expected failure: expected failure of R1")
            .count(),
        variants * n,
        "{out}"
    );
    // Without them (an empty expectations file) the same timelines are failures.
    std::fs::write(
        dir.path().join("none.yaml"),
        "target: openshell-0.0.111\nexpected_failures: []\n",
    )
    .unwrap();
    let mut args = vec!["check", "--expectations", "none.yaml", "--format", "json"];
    args.extend(tls.iter().map(String::as_str));
    let o = run(&args, dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let verdicts: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["verdict"]["verdict"].as_str().unwrap())
        .collect();
    let failed = verdicts.iter().filter(|v| **v == "failed").count();
    let passed = verdicts.iter().filter(|v| **v == "passed").count();
    assert_eq!(
        (failed, passed, verdicts.len()),
        (variants * n, n, (1 + variants) * n)
    );
}

#[test]
fn an_unexpected_pass_is_red_in_every_output_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    // gateway-restart passes on v0.0.111; an expectations file that calls it broken is stale.
    std::fs::write(
        dir.path().join("stale.yaml"),
        "target: openshell-0.0.111\nexpected_failures:\n  - case: \"gateway-restart[*\"\n    requirement: R9\n    report: \"#9999, fixed since\"\n",
    )
    .unwrap();
    let o = run(
        &[
            "run",
            "--model",
            "openshell-0.0.111",
            "--scenario",
            "gateway-restart",
            "--topology",
            "combined",
            "--expectations",
            "stale.yaml",
            "--artifacts",
            "a",
        ],
        dir.path(),
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let line = totals_line(&out);
    assert_eq!(
        line,
        "1 cases: 0 passed, 0 failed, 0 expected failures, 1 unexpected passes, 0 errors, 0 skipped"
    );
    assert!(out.contains("XPASS gateway-restart[combined]: passed although expected to fail R9 (#9999, fixed since); the bug looks fixed: update the expectations"), "{out}");
    let a = dir.path().join("a");
    let (failures, _, _, xpass) = junit_counts(&a.join("junit.xml"));
    assert_eq!((failures, xpass), (1, 1));
    let html = std::fs::read_to_string(a.join("report.html")).unwrap();
    assert!(html.contains(&format!("<p class=\"totals\">{line}</p>")));
    assert!(
        html.contains("<p class=\"o-unexpected-pass\">UNEXPECTED PASS gateway-restart[combined]")
    );
    let tls = timelines(&a);
    let o = run(&["check", &tls[0]], dir.path());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(": UNEXPECTED PASS: passed although expected to fail R9"),
        "{out}"
    );
}

/// The verdict keys in the order of the totals line.
const KEYS: [&str; 7] = conformance_core::case_verdict::CaseVerdict::KEYS;

fn tally<'a>(keys: impl Iterator<Item = &'a str>) -> [usize; 8] {
    let mut t = [0; 8];
    for k in keys {
        t[0] += 1;
        let i = KEYS
            .iter()
            .position(|x| *x == k)
            .unwrap_or_else(|| panic!("{k}"));
        t[i + 1] += 1;
    }
    t
}

#[rstest::rstest]
#[case::contract(&["--model", "contract"])]
#[case::upstream(&["--model", "openshell-0.0.111"])]
#[case::reported(&["--model", "openshell-0.1.6-reported"])]
#[case::defect(&["--defect", "gateway-restart-marks-error"])]
fn summary_exit_code_junit_html_timelines_and_check_agree_on_every_model_and_a_defect(
    #[case] which: &[&str],
) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["run"];
    args.extend_from_slice(which);
    for s in [
        "provisioning",
        "bootstrap-outage",
        "gateway-restart",
        "restart-policy-always",
    ] {
        args.extend(["--scenario", s]);
    }
    args.extend(["--artifacts", "a"]);
    let o = run(&args, dir.path());
    let out = text(&o);
    let summary = junit_consumers::summary_totals(&out);
    assert!(summary[0] > 0, "{out}");
    // The exit code follows from the totals.
    let want = if summary[5] > 0 {
        3
    } else if summary[2] + summary[4] > 0 {
        1
    } else {
        0
    };
    assert_eq!(o.status.code(), Some(want), "{out}");
    let a = dir.path().join("a");
    // JUnit: each suite's outcome property.
    let xml = std::fs::read_to_string(a.join("junit.xml")).unwrap();
    let report = Report::deserialize_from_str(&xml).unwrap();
    let outcomes: Vec<String> = report
        .test_suites
        .iter()
        .map(|s| {
            s.properties
                .iter()
                .find(|p| p.name.as_str() == "outcome")
                .unwrap()
                .value
                .to_string()
        })
        .collect();
    assert_eq!(tally(outcomes.iter().map(String::as_str)), summary, "JUnit");
    // And as a CI dashboard's parser reads it.
    if let Some(parsed) = junit_consumers::read(
        &a.join("junit.xml"),
        "summary_exit_code_junit_html_timelines_and_check_agree_on_every_model_and_a_defect",
    ) {
        junit_consumers::assert_agrees(&parsed, summary);
    }
    // HTML: the same totals line.
    let html = std::fs::read_to_string(a.join("report.html")).unwrap();
    let line = totals_line(&out);
    assert!(
        html.contains(&format!("<p class=\"totals\">{line}</p>")),
        "HTML: {line}"
    );
    // The timelines' closing records, and `check` on them.
    let tls = timelines(&a);
    let recorded: Vec<String> = tls
        .iter()
        .map(|p| {
            let last = std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .last()
                .unwrap()
                .to_string();
            let v: serde_json::Value = serde_json::from_str(&last).unwrap();
            v["event"]["verdict"]
                .as_str()
                .or_else(|| v["verdict"].as_str())
                .unwrap_or_else(|| panic!("no verdict in the closing record {last}"))
                .to_string()
        })
        .collect();
    assert_eq!(
        tally(recorded.iter().map(String::as_str)),
        summary,
        "timelines"
    );
    let mut args = vec!["check", "--format", "json"];
    args.extend(tls.iter().map(String::as_str));
    let o = run(&args, dir.path());
    assert_eq!(o.status.code(), Some(want), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let checked: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            assert_eq!(j["problems"], serde_json::json!([]), "{j}");
            assert_eq!(j["plan_differences"], serde_json::json!([]), "{j}");
            j["verdict"]["verdict"].as_str().unwrap()
        })
        .collect();
    assert_eq!(checked, recorded, "check gives the recorded verdicts");
}
