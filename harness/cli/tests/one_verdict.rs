//! One verdict everywhere: for a run on a release with known failures, the summary, the exit
//! code, JUnit, the HTML report and `check` on the saved timelines say the same thing, and an
//! unexpected pass is red in all of them.

use std::path::Path;
use std::process::{Command, Output};

use quick_junit::{NonSuccessKind, Report, TestCaseStatus};

fn run(args: &[&str], dir: &Path) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_openshell-conformance"));
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENSHELL_CONFORMANCE_") {
            c.env_remove(k);
        }
    }
    c.args(args)
        .current_dir(dir)
        .output()
        .expect("the binary runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
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
            "--topology",
            "combined",
            "--artifacts",
            "a",
        ],
        dir.path(),
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let line = totals_line(&out);
    assert_eq!(
        line,
        "3 cases: 1 passed, 0 failed, 2 expected failures, 0 unexpected passes, 0 errors, 0 skipped"
    );
    let a = dir.path().join("a");
    // JUnit: no failure, the known ones skipped as xfail.
    let (failures, errors, xfail, _) = junit_counts(&a.join("junit.xml"));
    assert_eq!((failures, errors), (0, 0));
    assert!(xfail >= 2, "each expected failure has xfail testcases");
    let xml = std::fs::read_to_string(a.join("junit.xml")).unwrap();
    assert_eq!(
        xml.matches("<property name=\"outcome\" value=\"expected-failure\"/>")
            .count(),
        2
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
        2,
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
    assert_eq!(verdicts, ["failed", "failed", "passed"]);
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
