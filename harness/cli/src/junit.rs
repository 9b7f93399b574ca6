//! JUnit for CI dashboards: one testsuite per (scenario, topology) case, one testcase per stage
//! and per check, judged by the case's one verdict ([`CaseVerdict`]) in the convention pytest
//! writes and CI reporters read (Jenkins, GitLab, the GitHub reporters, junit2html):
//!
//! - a product failure is `<failure>`, an infrastructure problem `<error>`, a skip `<skipped>`
//!   with the reason;
//! - an expected failure's failing stages and checks are `<skipped type="xfail"
//!   message="expected failure: <report>">` with what was observed in the body, so a run whose
//!   failures are all known is green;
//! - an unexpected pass adds a testcase `expectation: fails <requirement>` that is a
//!   `<failure type="xpass">` saying what to do, so a fixed bug turns the dashboard red;
//! - a check that was not evaluated (a step it depended on stopped the case) is `<skipped
//!   type="not-evaluated" message="not evaluated: <which step stopped, and why>">`, never a
//!   failure of its own requirements: the stopped step's stage testcase carries the failure;
//! - an interrupted case is an `<error>` testcase `interrupted`;
//! - each suite's `outcome` property is the verdict's key (`passed`, `failed`,
//!   `expected-failure`, `unexpected-pass`, `error`, `skipped`, `interrupted`);
//! - a case run on a scaled clock (`--time-scale N`) has the properties `time-scale` (N),
//!   `scenario-time-ms` (the suite's time) and `real-time-ms` (that divided by N).
//!
//! Output is deterministic (virtual durations, no timestamps or host names), so the same run
//! gives the same bytes.

use std::path::Path;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

use conformance_core::case_verdict::CaseVerdict;
use conformance_core::engine::CaseReport;
use conformance_core::timeline::StageStatus;

pub fn report(name: &str, cases: &[CaseReport], verdicts: &[CaseVerdict]) -> Report {
    let mut report = Report::new(name);
    let mut total = 0u64;
    for (case, verdict) in cases.iter().zip(verdicts) {
        report.add_test_suite(suite(case, verdict));
        total += case.virtual_ms;
    }
    report.set_time(Duration::from_millis(total));
    report
}

fn suite(case: &CaseReport, verdict: &CaseVerdict) -> TestSuite {
    let mut s = TestSuite::new(case.case_id.as_str());
    s.set_time(Duration::from_millis(case.virtual_ms));
    let mut props: Vec<(String, String)> = vec![
        ("scenario".into(), case.scenario.clone()),
        ("title".into(), case.title.clone()),
        ("topology".into(), case.topology.clone()),
        ("target".into(), case.target.kind.clone()),
        ("requirements".into(), case.requirements.join(",")),
        ("outcome".into(), verdict.key().into()),
    ];
    if case.outcome.is_interrupted() {
        props.push(("interrupted".into(), "true".into()));
    }
    if let CaseVerdict::ExpectedFailure {
        requirement,
        report,
        ..
    }
    | CaseVerdict::UnexpectedPass {
        requirement,
        report,
    } = verdict
    {
        props.push(("expected-failure.requirement".into(), requirement.clone()));
        props.push(("expected-failure.report".into(), report.clone()));
    }
    if let Some(m) = &case.target.model {
        props.push(("model".into(), m.clone()));
    }
    if !case.target.defects.is_empty() {
        props.push(("defects".into(), case.target.defects.join(",")));
    }
    if let Some(seed) = case.timeline.run_info().and_then(|i| i.seed) {
        props.push(("seed".into(), seed.to_string()));
    }
    // On a scaled clock the suite's time is scenario time; real time is the scale's fraction.
    if let Some(scale) = case.timeline.run_info().and_then(|i| i.time_scale) {
        props.push(("time-scale".into(), scale.to_string()));
        props.push(("scenario-time-ms".into(), case.virtual_ms.to_string()));
        props.push((
            "real-time-ms".into(),
            (case.virtual_ms / u64::from(scale.max(1))).to_string(),
        ));
    }
    for (k, v) in &case.params {
        props.push((format!("param.{k}"), v.clone()));
    }
    for (k, v) in &case.target.versions {
        props.push((format!("version.{k}"), v.clone()));
    }
    for (k, v) in props {
        s.add_property(Property::new(k, v));
    }

    let classname = case.case_id.as_str();
    // An expected failure's failures are known: skipped as xfail, with what was seen.
    let xfail = match verdict {
        CaseVerdict::ExpectedFailure { report, .. } => Some(format!("expected failure: {report}")),
        _ => None,
    };
    let failure = |message: Option<&str>, body: Option<&str>| match &xfail {
        Some(m) => {
            let mut st = TestCaseStatus::skipped();
            st.set_type("xfail");
            st.set_message(m.as_str());
            if let Some(b) = body.or(message) {
                st.set_description(b);
            }
            st
        }
        None => non_success(NonSuccessKind::Failure, message, body),
    };
    if let CaseVerdict::UnexpectedPass {
        requirement,
        report,
    } = verdict
    {
        let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
        st.set_type("xpass");
        st.set_message(format!(
            "passed although expected to fail: {requirement} ({report})"
        ));
        st.set_description(verdict.explanation().unwrap_or_default());
        let mut tc = TestCase::new(format!("expectation: fails {requirement}"), st);
        tc.set_classname(classname);
        s.add_test_case(tc);
    }
    if case.outcome.is_interrupted() {
        // Its stages may all be skipped (it never started): this makes it count as an error.
        let mut tc = TestCase::new(
            "interrupted",
            non_success(NonSuccessKind::Error, case.outcome.reason(), None),
        );
        tc.set_classname(classname);
        s.add_test_case(tc);
    }
    for stage in &case.stages {
        let status = match stage.status {
            StageStatus::Passed | StageStatus::Started => TestCaseStatus::success(),
            StageStatus::Failed => failure(stage.message.as_deref(), None),
            StageStatus::Error => {
                non_success(NonSuccessKind::Error, stage.message.as_deref(), None)
            }
            StageStatus::Skipped => {
                let mut st = TestCaseStatus::skipped();
                if let Some(m) = &stage.message {
                    st.set_message(m.as_str());
                }
                st
            }
        };
        let mut tc = TestCase::new(format!("stage: {}", stage.stage), status);
        tc.set_classname(classname);
        tc.set_time(Duration::from_millis(stage.duration_ms));
        s.add_test_case(tc);
    }
    for check in &case.checks {
        let status = if check.passed {
            TestCaseStatus::success()
        } else if let Some(why) = &check.not_evaluated {
            // Not a failure of its requirements: a step it depended on stopped the case, and
            // that step's stage carries the failure.
            let mut st = TestCaseStatus::skipped();
            st.set_type("not-evaluated");
            st.set_message(format!("not evaluated: {why}"));
            st.set_description(check.diagnosis());
            st
        } else if matches!(
            verdict,
            CaseVerdict::Error { .. } | CaseVerdict::Interrupted { .. }
        ) {
            // A check over a run the harness could not complete says nothing about the product.
            non_success(
                NonSuccessKind::Error,
                Some(&check.message),
                Some(&check.diagnosis()),
            )
        } else {
            failure(Some(&check.message), Some(&check.diagnosis()))
        };
        let mut tc = TestCase::new(
            format!("check: {} [{}]", check.name, check.requirements.join(",")),
            status,
        );
        tc.set_classname(classname);
        s.add_test_case(tc);
    }
    s
}

fn non_success(
    kind: NonSuccessKind,
    message: Option<&str>,
    description: Option<&str>,
) -> TestCaseStatus {
    let mut st = TestCaseStatus::non_success(kind);
    if let Some(m) = message {
        st.set_message(m);
    }
    if let Some(d) = description.or(message) {
        st.set_description(d);
    }
    st
}

pub fn write(
    path: &Path,
    name: &str,
    cases: &[CaseReport],
    verdicts: &[CaseVerdict],
) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let xml = report(name, cases, verdicts)
        .to_string()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    replace(path, xml.as_bytes())
}

/// Writes `bytes` to `path` whole or not at all: into a temporary file in the same directory,
/// then renamed over `path`. The file is readable by all (0644), as reports are meant to be
/// shared; none holds key material.
pub fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".openshell-conformance-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
