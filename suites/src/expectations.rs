//! Known failures: `fixtures/expectations/<file>.yaml` lists the cases a version is known to
//! fail, each with the requirement it breaks and the upstream report it reflects; a release of
//! `fixtures/releases/` names the file that applies to it (`expectations:`). A
//! listed case that fails on that requirement is an *expected failure*; one that passes is an
//! *unexpected pass*, so a fixed bug is noticed.

use std::path::Path;

use conformance_core::error::{Error, Result};
use conformance_core::release::Releases;
use conformance_core::timeline::Expectation;
use serde::{Deserialize, Serialize};

use crate::catalog::glob;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectations {
    /// The model or OpenShell version these expectations describe.
    pub target: String,
    #[serde(default)]
    pub expected_failures: Vec<ExpectedFailure>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedFailure {
    /// A glob over case ids, such as `bootstrap-outage[combined,*`.
    pub case: String,
    /// The requirement the case is known to break.
    pub requirement: String,
    /// The upstream report this reflects.
    pub report: String,
}

impl Expectations {
    pub fn none(target: &str) -> Self {
        Self {
            target: target.to_string(),
            expected_failures: Vec::new(),
        }
    }

    pub fn from_yaml(text: &str, origin: &Path) -> Result<Self> {
        let e: Self = conformance_core::error::parse_yaml(text, origin)?;
        for (i, f) in e.expected_failures.iter().enumerate() {
            if crate::requirements::find(&f.requirement).is_none() {
                return Err(Error::config(
                    origin,
                    format!("expected_failures[{i}].requirement"),
                    format!("`{}` is not a requirement id (R1..R14)", f.requirement),
                ));
            }
            if f.report.trim().is_empty() {
                return Err(Error::config(
                    origin,
                    format!("expected_failures[{i}].report"),
                    "must name the upstream report this failure reflects",
                ));
            }
        }
        Ok(e)
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text = conformance_core::user_file::read_to_string(
            path,
            conformance_core::user_file::Kind::Expectations,
            &format!("expectations file {}", path.display()),
        )?;
        Self::from_yaml(&text, path)
    }

    /// The shipped expectations for a model or version (the release of that name), or none.
    pub fn shipped(target: &str) -> Self {
        Self::of_release(Releases::builtin(), target)
            .unwrap_or_else(|e| panic!("shipped expectations are invalid: {e}"))
    }

    /// The expectations the release `target` of `releases` names, or none.
    pub fn of_release(releases: &Releases, target: &str) -> Result<Self> {
        match releases.expectations(target) {
            Some(e) => Self::from_yaml(e.text, e.origin),
            None => Ok(Self::none(target)),
        }
    }

    /// The known failures that name case `case_id`: what the engine records on its timeline.
    pub fn for_case(&self, case_id: &str) -> Vec<Expectation> {
        self.expected_failures
            .iter()
            .filter(|f| glob(&f.case, case_id))
            .map(|f| Expectation {
                requirement: f.requirement.clone(),
                report: f.report.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conformance_core::case_verdict::CaseVerdict;
    use conformance_core::checks::CheckOutcome;
    use conformance_core::engine::{CaseReport, Outcome};

    /// A case's verdict under `e`: the known failures that name it, by the one rule.
    fn classify(e: &Expectations, report: &CaseReport) -> CaseVerdict {
        report.verdict_with(&e.for_case(&report.case_id))
    }
    use conformance_core::target::TargetInfo;

    fn report(case_id: &str, outcome: Outcome, failed_reqs: &[&str]) -> CaseReport {
        CaseReport {
            case_id: case_id.into(),
            scenario: case_id.split('[').next().unwrap().into(),
            title: String::new(),
            topology: "combined".into(),
            requirements: vec![],
            target: TargetInfo::default(),
            params: Default::default(),
            outcome,
            stages: vec![],
            checks: failed_reqs
                .iter()
                .map(|r| CheckOutcome {
                    name: format!("check for {r}"),
                    requirements: vec![r.to_string()],
                    passed: false,
                    not_evaluated: None,
                    window: None,
                    expected: String::new(),
                    message: String::new(),
                    last_seen: vec![],
                })
                .collect(),
            virtual_ms: 0,
            wall_ms: 0,
            timeline: Default::default(),
        }
    }

    fn known() -> Expectations {
        Expectations::from_yaml(
            "target: t\nexpected_failures:\n  - case: \"bootstrap-outage[combined,*\"\n    requirement: R1\n    report: \"#3274\"\n",
            Path::new("e.yaml"),
        )
        .unwrap()
    }

    #[test]
    fn a_listed_case_failing_on_its_requirement_is_an_expected_failure() {
        let r = report(
            "bootstrap-outage[combined,outage=30s]",
            Outcome::Failed("x".into()),
            &["R2", "R1"],
        );
        assert_eq!(
            classify(&known(), &r),
            CaseVerdict::ExpectedFailure {
                requirement: "R1".into(),
                report: "#3274".into(),
                reason: "x".into()
            }
        );
    }

    #[test]
    fn a_listed_case_failing_on_another_requirement_is_a_real_failure() {
        let r = report(
            "bootstrap-outage[combined,outage=30s]",
            Outcome::Failed("lost a sentinel".into()),
            &["R6"],
        );
        assert_eq!(
            classify(&known(), &r),
            CaseVerdict::Failed {
                reason: "lost a sentinel".into()
            }
        );
    }

    #[test]
    fn a_listed_case_that_passes_is_an_unexpected_pass_and_fails_the_run() {
        let v = classify(
            &known(),
            &report(
                "bootstrap-outage[combined,outage=30s]",
                Outcome::Passed,
                &[],
            ),
        );
        assert!(matches!(v, CaseVerdict::UnexpectedPass { .. }));
        assert!(!v.acceptable());
        assert_eq!(v.label(), "UNEXPECTED PASS");
    }

    #[test]
    fn unlisted_cases_keep_their_outcome() {
        let e = known();
        assert_eq!(
            classify(
                &e,
                &report("bootstrap-outage[sidecar,outage=30s]", Outcome::Passed, &[])
            ),
            CaseVerdict::Passed
        );
        assert!(matches!(
            classify(
                &e,
                &report("x[combined]", Outcome::Skipped("no".into()), &[])
            ),
            CaseVerdict::Skipped { .. }
        ));
        assert!(
            !classify(
                &e,
                &report("x[combined]", Outcome::Error("boom".into()), &[])
            )
            .acceptable()
        );
    }

    #[test]
    fn an_expectation_naming_an_unknown_requirement_is_rejected_with_file_and_field() {
        let err = Expectations::from_yaml(
            "target: t\nexpected_failures:\n  - case: a\n    requirement: R99\n    report: r\n",
            Path::new("fixtures/expectations/x.yaml"),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "fixtures/expectations/x.yaml: field `expected_failures[0].requirement`: `R99` is not a requirement id (R1..R14)"
        );
    }

    #[test]
    fn the_shipped_expectation_files_load_for_the_releases_that_name_them() {
        let releases = Releases::builtin();
        for name in releases.names() {
            let e = Expectations::shipped(name);
            if releases.expectations(name).is_some() {
                assert_eq!(e.target, name);
                assert!(!e.expected_failures.is_empty(), "{name}");
            }
        }
        assert!(
            Expectations::shipped("contract")
                .expected_failures
                .is_empty()
        );
    }

    /// A newcomer's release that behaves like 0.1.6-reported except that the re-attach is
    /// taken (#3396 fixed), in a copy of the shipped folders: one release file and one
    /// expectations file, and the models, `--model`, the target's report and the expectations
    /// all pick it up from the folder.
    #[test]
    fn a_release_added_to_the_folder_is_picked_up_by_the_models_and_the_expectations() {
        use conformance_core::target::TargetFactory;
        use conformance_models::spec::{ModelInfo, Selection, SelectionError};
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        let tmp = tempfile::tempdir().unwrap();
        for sub in ["releases", "expectations"] {
            std::fs::create_dir(tmp.path().join(sub)).unwrap();
            for f in std::fs::read_dir(fixtures.join(sub)).unwrap() {
                let f = f.unwrap().path();
                std::fs::copy(&f, tmp.path().join(sub).join(f.file_name().unwrap())).unwrap();
            }
        }
        let reported =
            std::fs::read_to_string(fixtures.join("releases/openshell-0.1.6-reported.yaml"))
                .unwrap();
        let newer = reported
            .replace("openshell-0.1.6-reported", "openshell-0.1.7")
            .replace("openshell: 0.1.6", "openshell: 0.1.7")
            .replace("version: 0.1.6", "version: 0.1.7")
            .replace("reattach_refused: true", "reattach_refused: false");
        std::fs::write(tmp.path().join("releases/openshell-0.1.7.yaml"), newer).unwrap();
        std::fs::write(
            tmp.path().join("expectations/openshell-0.1.7.yaml"),
            "target: openshell-0.1.7\nexpected_failures:\n  - case: \"bootstrap-outage[*\"\n    requirement: R1\n    report: \"#3274\"\n",
        )
        .unwrap();

        let releases: &'static Releases = Box::leak(Box::new(
            Releases::load_dir(&tmp.path().join("releases")).unwrap(),
        ));
        let mut shipped: Vec<&str> = conformance_models::MODELS.iter().map(|m| m.name).collect();
        shipped.push("openshell-0.1.7");
        shipped.sort();
        assert_eq!(releases.names(), shipped);
        let models: &'static [ModelInfo] = ModelInfo::all_of(releases).unwrap().leak();
        let err = Selection::parse_among(models, "nope", &[], None).unwrap_err();
        assert!(matches!(err, SelectionError::UnknownModel { .. }));
        assert!(err.to_string().ends_with(&shipped.join(", ")), "{err}");

        let old = Selection::parse_among(models, "openshell-0.1.6-reported", &[], None).unwrap();
        let new = Selection::parse_among(models, "openshell-0.1.7", &[], None).unwrap();
        assert!(old.behaviour().reattach_refused);
        assert_eq!(
            new.behaviour(),
            conformance_models::spec::Behaviour {
                reattach_refused: false,
                ..old.behaviour()
            }
        );
        let info = conformance_models::target::EmulatedFactory::new(new).info();
        assert_eq!(info.model.as_deref(), Some("openshell-0.1.7"));
        assert_eq!(
            info.openshell.map(|v| v.to_string()).as_deref(),
            Some("0.1.7")
        );
        assert_eq!(
            info.capabilities,
            releases
                .get("openshell-0.1.6-reported")
                .unwrap()
                .capabilities
        );

        let e = Expectations::of_release(releases, "openshell-0.1.7").unwrap();
        assert_eq!(e.target, "openshell-0.1.7");
        assert_eq!(e.expected_failures.len(), 1);
        // Its expectations are validated like the shipped ones.
        std::fs::write(
            tmp.path().join("expectations/openshell-0.1.7.yaml"),
            "target: openshell-0.1.7\nexpected_failures:\n  - case: a\n    requirement: R99\n    report: r\n",
        )
        .unwrap();
        let releases = Releases::load_dir(&tmp.path().join("releases")).unwrap();
        let err = Expectations::of_release(&releases, "openshell-0.1.7").unwrap_err();
        assert!(
            err.to_string()
                .contains("openshell-0.1.7.yaml: field `expected_failures[0].requirement`"),
            "{err}"
        );
    }
}
