//! JUnit for CI dashboards: one testsuite per (scenario, topology) case, one testcase per stage
//! and per check. Product failures are `failure`, infrastructure problems `error`, skips
//! `skipped` with the reason. Output is deterministic (virtual durations, no timestamps or
//! host names), so the same run gives the same bytes.

use std::path::Path;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

use conformance_core::engine::{CaseReport, Outcome};
use conformance_core::timeline::StageStatus;

pub fn report(name: &str, cases: &[CaseReport]) -> Report {
    let mut report = Report::new(name);
    let mut total = 0u64;
    for case in cases {
        report.add_test_suite(suite(case));
        total += case.virtual_ms;
    }
    report.set_time(Duration::from_millis(total));
    report
}

fn suite(case: &CaseReport) -> TestSuite {
    let mut s = TestSuite::new(case.case_id.as_str());
    s.set_time(Duration::from_millis(case.virtual_ms));
    let mut props: Vec<(String, String)> = vec![
        ("scenario".into(), case.scenario.clone()),
        ("title".into(), case.title.clone()),
        ("topology".into(), case.topology.clone()),
        ("target".into(), case.target.kind.clone()),
        ("requirements".into(), case.requirements.join(",")),
        ("outcome".into(), case.outcome.name().into()),
    ];
    if case.outcome.is_interrupted() {
        props.push(("interrupted".into(), "true".into()));
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
            StageStatus::Failed => {
                non_success(NonSuccessKind::Failure, stage.message.as_deref(), None)
            }
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
        } else if matches!(case.outcome, Outcome::Error(_)) {
            // A check over a run the harness could not complete says nothing about the product.
            non_success(
                NonSuccessKind::Error,
                Some(&check.message),
                Some(&check.diagnosis()),
            )
        } else {
            non_success(
                NonSuccessKind::Failure,
                Some(&check.message),
                Some(&check.diagnosis()),
            )
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

pub fn write(path: &Path, name: &str, cases: &[CaseReport]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let xml = report(name, cases)
        .to_string()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    std::fs::write(path, xml)
}
