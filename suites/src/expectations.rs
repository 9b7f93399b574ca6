//! Known failures: `fixtures/expectations/<model-or-version>.yaml` lists the cases a version is
//! known to fail, each with the requirement it breaks and the upstream report it reflects. A
//! listed case that fails on that requirement is an *expected failure*; one that passes is an
//! *unexpected pass*, so a fixed bug is noticed.

use std::path::{Path, PathBuf};

use conformance_core::engine::{CaseReport, Outcome};
use conformance_core::error::{Error, Result};
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

/// A case's verdict once expectations are applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Verdict {
    Passed,
    Failed { reason: String },
    ExpectedFailure { requirement: String, report: String },
    UnexpectedPass { requirement: String, report: String },
    Error { reason: String },
    Skipped { reason: String },
}

impl Verdict {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failed { .. } => "failed",
            Self::ExpectedFailure { .. } => "expected failure",
            Self::UnexpectedPass { .. } => "UNEXPECTED PASS",
            Self::Error { .. } => "error",
            Self::Skipped { .. } => "skipped",
        }
    }

    /// Whether the run as a whole can still succeed with this verdict.
    pub fn acceptable(&self) -> bool {
        matches!(
            self,
            Self::Passed | Self::ExpectedFailure { .. } | Self::Skipped { .. }
        )
    }
}

/// Expectations shipped with the harness, by target name.
const SHIPPED: &[(&str, &str)] = &[
    (
        "openshell-0.0.111",
        include_str!("../../fixtures/expectations/openshell-0.0.111.yaml"),
    ),
    (
        "openshell-0.1.6-reported",
        include_str!("../../fixtures/expectations/openshell-0.1.6-reported.yaml"),
    ),
];

impl Expectations {
    pub fn none(target: &str) -> Self {
        Self {
            target: target.to_string(),
            expected_failures: Vec::new(),
        }
    }

    pub fn from_yaml(text: &str, origin: &Path) -> Result<Self> {
        let e: Self = serde_saphyr::from_str(text).map_err(|err| {
            let message = err.to_string();
            let field = message
                .split('`')
                .nth(1)
                .unwrap_or("(document)")
                .to_string();
            Error::config(origin, field, message)
        })?;
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
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::usage_from(
                format!("cannot read expectations file {}", path.display()),
                e,
            )
        })?;
        Self::from_yaml(&text, path)
    }

    /// The shipped expectations for a model or version, or none.
    pub fn shipped(target: &str) -> Self {
        SHIPPED
            .iter()
            .find(|(name, _)| *name == target)
            .map(|(name, text)| {
                let origin = PathBuf::from(format!("fixtures/expectations/{name}.yaml"));
                Self::from_yaml(text, &origin)
                    .unwrap_or_else(|e| panic!("shipped expectations are invalid: {e}"))
            })
            .unwrap_or_else(|| Self::none(target))
    }

    pub fn classify(&self, report: &CaseReport) -> Verdict {
        let expected = self
            .expected_failures
            .iter()
            .filter(|f| glob(&f.case, &report.case_id))
            .collect::<Vec<_>>();
        match &report.outcome {
            Outcome::Skipped(r) => Verdict::Skipped { reason: r.clone() },
            Outcome::Error(r) => Verdict::Error { reason: r.clone() },
            Outcome::Passed => match expected.first() {
                Some(f) => Verdict::UnexpectedPass {
                    requirement: f.requirement.clone(),
                    report: f.report.clone(),
                },
                None => Verdict::Passed,
            },
            Outcome::Failed(reason) => {
                let broken: Vec<&String> = report
                    .failed_checks()
                    .flat_map(|c| c.requirements.iter())
                    .collect();
                match expected.iter().find(|f| broken.contains(&&f.requirement)) {
                    Some(f) => Verdict::ExpectedFailure {
                        requirement: f.requirement.clone(),
                        report: f.report.clone(),
                    },
                    None => Verdict::Failed {
                        reason: reason.clone(),
                    },
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conformance_core::checks::CheckOutcome;
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
            known().classify(&r),
            Verdict::ExpectedFailure {
                requirement: "R1".into(),
                report: "#3274".into()
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
            known().classify(&r),
            Verdict::Failed {
                reason: "lost a sentinel".into()
            }
        );
    }

    #[test]
    fn a_listed_case_that_passes_is_an_unexpected_pass_and_fails_the_run() {
        let v = known().classify(&report(
            "bootstrap-outage[combined,outage=30s]",
            Outcome::Passed,
            &[],
        ));
        assert!(matches!(v, Verdict::UnexpectedPass { .. }));
        assert!(!v.acceptable());
        assert_eq!(v.name(), "UNEXPECTED PASS");
    }

    #[test]
    fn unlisted_cases_keep_their_outcome() {
        let e = known();
        assert_eq!(
            e.classify(&report(
                "bootstrap-outage[sidecar,outage=30s]",
                Outcome::Passed,
                &[]
            )),
            Verdict::Passed
        );
        assert!(matches!(
            e.classify(&report("x[combined]", Outcome::Skipped("no".into()), &[])),
            Verdict::Skipped { .. }
        ));
        assert!(
            !e.classify(&report("x[combined]", Outcome::Error("boom".into()), &[]))
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
    fn the_shipped_expectation_files_load() {
        for (name, _) in SHIPPED {
            assert_eq!(Expectations::shipped(name).target, *name);
        }
        assert!(
            Expectations::shipped("contract")
                .expected_failures
                .is_empty()
        );
    }
}
