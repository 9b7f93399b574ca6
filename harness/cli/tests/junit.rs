//! JUnit for CI dashboards: written from the engine's case reports and parsed back.

use std::collections::BTreeMap;

use conformance_core::scenario::{Case, Params};
use conformance_core::target::Capability;
use conformance_core::testkit::*;
use openshell_conformance::junit;
use quick_junit::{NonSuccessKind, Report, TestCaseStatus};

#[tokio::test(start_paused = true)]
async fn junit_has_a_suite_per_case_and_a_testcase_per_stage_and_check() {
    let e = engine(Factory::new(Quirk::ErrorOnOutage));
    let failing = e.run_case(&case(standard_steps())).await;
    let passing = engine(Factory::new(Quirk::None))
        .run_case(&case(standard_steps()))
        .await;
    let skipped = e
        .run_case(&Case::new(
            scenario(standard_steps(), vec![Capability::RestartPolicy]),
            topology(),
            Params::default(),
        ))
        .await;
    let errored = engine(Factory::new(Quirk::InstallFails))
        .run_case(&case(standard_steps()))
        .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reports/junit.xml");
    let cases = [failing, passing, skipped, errored];
    junit::write(&path, "openshell-conformance", &cases).unwrap();
    let xml = std::fs::read_to_string(&path).unwrap();
    // Deterministic: the same reports give the same bytes.
    assert_eq!(
        xml,
        junit::report("openshell-conformance", &cases)
            .to_string()
            .unwrap()
    );

    let report = Report::deserialize_from_str(&xml).unwrap();
    assert_eq!(report.test_suites.len(), 4);
    let failing = &report.test_suites[0];
    assert_eq!(failing.name.as_str(), "outage-demo[combined,outage=30s]");
    let props: BTreeMap<String, String> = failing
        .properties
        .iter()
        .map(|p| (p.name.to_string(), p.value.to_string()))
        .collect();
    assert_eq!(props["topology"], "combined");
    assert_eq!(props["target"], "fake");
    assert_eq!(props["model"], "in-test");
    assert_eq!(props["param.outage"], "30s");
    assert_eq!(props["version.openshell"], "0.0.111");
    assert_eq!(props["outcome"], "failed");
    let names: Vec<&str> = failing.test_cases.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "stage: provision",
            "stage: install",
            "stage: seed",
            "stage: fault",
            "stage: verify",
            "stage: teardown",
            "check: sandbox returns to Ready after the outage [R9]",
            "check: sandbox never Error during the outage [R9]",
            "check: workspace sentinels retained [R6]",
        ]
    );
    let kind = |tc: &quick_junit::TestCase| match &tc.status {
        TestCaseStatus::Success { .. } => "success".to_string(),
        TestCaseStatus::NonSuccess { kind, .. } => match kind {
            NonSuccessKind::Failure => "failure".to_string(),
            NonSuccessKind::Error => "error".to_string(),
        },
        TestCaseStatus::Skipped { .. } => "skipped".to_string(),
    };
    assert_eq!(kind(&failing.test_cases[4]), "failure");
    assert_eq!(kind(&failing.test_cases[7]), "failure");
    let TestCaseStatus::NonSuccess {
        message,
        description,
        ..
    } = &failing.test_cases[7].status
    else {
        unreachable!()
    };
    assert_eq!(message.as_ref().unwrap().as_str(), "it held at 27.001s");
    assert!(
        description
            .as_ref()
            .unwrap()
            .as_str()
            .contains("last seen:")
    );

    assert!(
        report.test_suites[1]
            .test_cases
            .iter()
            .all(|t| kind(t) == "success")
    );
    let skipped = &report.test_suites[2];
    assert!(skipped.test_cases.iter().all(|t| kind(t) == "skipped"));
    let TestCaseStatus::Skipped { message, .. } = &skipped.test_cases[0].status else {
        unreachable!()
    };
    assert_eq!(
        message.as_ref().unwrap().as_str(),
        "target fake (model in-test) lacks restart-policy"
    );
    let errored = &report.test_suites[3];
    assert_eq!(kind(&errored.test_cases[1]), "error");
    assert_eq!(
        errored.test_cases.len(),
        6,
        "no checks ran, so none are reported"
    );
}
