//! JUnit for CI dashboards: written from the engine's case reports and their verdicts, and
//! parsed back.

use std::collections::BTreeMap;

use conformance_core::case_verdict::CaseVerdict;
use conformance_core::engine::CaseReport;
use conformance_core::scenario::{Case, Params};
use conformance_core::target::Capability;
use conformance_core::testkit::*;
use conformance_core::timeline::Expectation;
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
    let verdicts = verdicts(&cases);
    junit::write(&path, "openshell-conformance", &cases, &verdicts).unwrap();
    let xml = std::fs::read_to_string(&path).unwrap();
    // Deterministic: the same reports give the same bytes.
    assert_eq!(
        xml,
        junit::report("openshell-conformance", &cases, &verdicts)
            .to_string()
            .unwrap()
    );

    let report = Report::deserialize_from_str(&xml).unwrap();
    assert_eq!(report.test_suites.len(), 4);
    let failing = &report.test_suites[0];
    assert_eq!(failing.name.as_str(), "outage-demo[combined,outage=30s]");
    let props = props(failing);
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
    // The failed verify step never read the sentinel back: the check is skipped as not
    // evaluated, naming the step, so dashboards count no failure under R6.
    let TestCaseStatus::Skipped { message, ty, .. } = &failing.test_cases[8].status else {
        panic!("{:?}", failing.test_cases[8].status)
    };
    assert_eq!(ty.as_ref().unwrap().as_str(), "not-evaluated");
    let message = message.as_ref().unwrap().as_str();
    assert!(
        message.starts_with("not evaluated: step ") && message.contains("(stage verify) failed"),
        "{message}"
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

fn verdicts(cases: &[CaseReport]) -> Vec<CaseVerdict> {
    cases.iter().map(CaseReport::verdict).collect()
}

fn kind(tc: &quick_junit::TestCase) -> String {
    match &tc.status {
        TestCaseStatus::Success { .. } => "success".to_string(),
        TestCaseStatus::NonSuccess { kind, .. } => match kind {
            NonSuccessKind::Failure => "failure".to_string(),
            NonSuccessKind::Error => "error".to_string(),
        },
        TestCaseStatus::Skipped { .. } => "skipped".to_string(),
    }
}

fn known(requirement: &str) -> Vec<Expectation> {
    vec![Expectation {
        requirement: requirement.into(),
        report: "bug 3, #42".into(),
    }]
}

#[tokio::test(start_paused = true)]
async fn an_expected_failure_is_skipped_as_xfail_with_what_was_seen_and_counts_no_failure() {
    let failing = engine(Factory::new(Quirk::ErrorOnOutage))
        .run_case(&case(standard_steps()))
        .await;
    let verdict = failing.verdict_with(&known("R9"));
    assert_eq!(verdict.key(), "expected-failure");
    let xml = junit::report("r", std::slice::from_ref(&failing), &[verdict])
        .to_string()
        .unwrap();
    let report = Report::deserialize_from_str(&xml).unwrap();
    let suite = &report.test_suites[0];
    assert_eq!((suite.failures, suite.errors), (0, 0), "{xml}");
    assert!(suite.skipped > 0, "{xml}");
    let props = props(suite);
    assert_eq!(props["outcome"], "expected-failure");
    assert_eq!(props["expected-failure.requirement"], "R9");
    let xfails: Vec<_> = suite
        .test_cases
        .iter()
        .filter_map(|t| match &t.status {
            TestCaseStatus::Skipped {
                ty: Some(ty),
                message,
                description,
            } if ty.as_str() == "xfail" => {
                Some((t.name.to_string(), message.clone(), description.clone()))
            }
            _ => None,
        })
        .collect();
    // Each failing stage and check of the case, with its own observation in the body.
    let failed_stages = failing
        .stages
        .iter()
        .filter(|s| s.status == conformance_core::timeline::StageStatus::Failed)
        .count();
    assert_eq!(
        xfails.len(),
        failed_stages + failing.failed_checks().count(),
        "{xml}"
    );
    for (name, message, body) in xfails {
        assert_eq!(message.unwrap().as_str(), "expected failure: bug 3, #42");
        // What was observed: the check's diagnosis, or the stage's message.
        let body = body.unwrap();
        if name.starts_with("check: ") {
            assert!(body.as_str().contains("FAILED"), "{xml}");
        } else {
            assert!(body.as_str().contains("gave up waiting"), "{xml}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_unexpected_pass_is_a_failure_of_type_xpass_that_says_what_to_do() {
    let passing = engine(Factory::new(Quirk::None))
        .run_case(&case(standard_steps()))
        .await;
    let verdict = passing.verdict_with(&known("R9"));
    let xml = junit::report("r", std::slice::from_ref(&passing), &[verdict])
        .to_string()
        .unwrap();
    let report = Report::deserialize_from_str(&xml).unwrap();
    let suite = &report.test_suites[0];
    assert_eq!(suite.failures, 1, "{xml}");
    let xpass = suite
        .test_cases
        .iter()
        .find(|t| t.name.as_str() == "expectation: fails R9")
        .expect("an expectation testcase");
    assert_eq!(kind(xpass), "failure");
    let TestCaseStatus::NonSuccess {
        ty,
        message,
        description,
        ..
    } = &xpass.status
    else {
        unreachable!()
    };
    assert_eq!(ty.as_ref().unwrap().as_str(), "xpass");
    assert_eq!(
        message.as_ref().unwrap().as_str(),
        "passed although expected to fail: R9 (bug 3, #42)"
    );
    assert!(
        description
            .as_ref()
            .unwrap()
            .as_str()
            .contains("update the expectations")
    );
    assert_eq!(props(suite)["outcome"], "unexpected-pass");
}

fn props(suite: &quick_junit::TestSuite) -> BTreeMap<String, String> {
    suite
        .properties
        .iter()
        .map(|p| (p.name.to_string(), p.value.to_string()))
        .collect()
}

/// `case` as if it had run on a clock `scale` times as fast (its timeline says so).
fn on_a_scaled_clock(mut case: CaseReport, scale: u32) -> CaseReport {
    let lines: Vec<String> = case
        .timeline
        .to_jsonl()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            if v["type"] == "run_started" {
                v["time_scale"] = scale.into();
            }
            v.to_string()
        })
        .collect();
    case.timeline =
        conformance_core::timeline::Timeline::read_jsonl(lines.join("\n").as_bytes()).unwrap();
    case
}

#[tokio::test(start_paused = true)]
async fn a_case_on_a_scaled_clock_gives_the_scale_and_its_scenario_and_real_time() {
    let real_time = engine(Factory::new(Quirk::None))
        .run_case(&case(standard_steps()))
        .await;
    let scaled = on_a_scaled_clock(real_time.clone(), 10);
    let cases = [real_time, scaled];
    let report = junit::report("openshell-conformance", &cases, &verdicts(&cases));
    let xml = report.to_string().unwrap();
    let report = Report::deserialize_from_str(&xml).unwrap();

    let plain = props(&report.test_suites[0]);
    assert!(
        !plain.contains_key("time-scale"),
        "real time adds nothing: {plain:?}"
    );
    let scaled = props(&report.test_suites[1]);
    let scenario_ms = cases[1].virtual_ms;
    assert!(scenario_ms > 0);
    assert_eq!(scaled["time-scale"], "10");
    assert_eq!(scaled["scenario-time-ms"], scenario_ms.to_string());
    assert_eq!(scaled["real-time-ms"], (scenario_ms / 10).to_string());
}
