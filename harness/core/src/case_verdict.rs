//! A case's one verdict: its outcome judged against the known failures of the release under
//! test (the expectations file). The summary, the exit code, JUnit, the HTML report and `check`
//! all take it from here, so they cannot disagree. The known failures that name a case are
//! recorded on its timeline ([`crate::timeline::RunInfo::expected_failures`]), so a saved
//! timeline gives the same verdict as the run did.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::checks::CheckOutcome;
use crate::timeline::{Event, Expectation, StageStatus, Timeline};

/// What running a case came to, before the known failures are applied: the engine's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", content = "reason", rename_all = "snake_case")]
pub enum Outcome {
    Passed,
    /// The product broke a requirement; the reason names the first thing that broke.
    Failed(String),
    /// The harness or infrastructure could not run the case.
    Error(String),
    Skipped(String),
}

/// How the reason of an interrupted case's outcome begins.
const INTERRUPTED: &str = "interrupted by ";

impl Outcome {
    /// A case the run's interruption (`why`: the signal) stopped or never started: an error,
    /// since it says nothing about the product.
    pub fn interrupted(why: &str, what: &str) -> Self {
        Self::Error(format!("{INTERRUPTED}{why}: {what}"))
    }

    /// Whether the run's interruption stopped this case or kept it from starting.
    pub fn is_interrupted(&self) -> bool {
        matches!(self, Self::Error(r) if r.starts_with(INTERRUPTED))
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failed(_) => "failed",
            Self::Error(_) => "error",
            Self::Skipped(_) => "skipped",
        }
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Passed => None,
            Self::Failed(r) | Self::Error(r) | Self::Skipped(r) => Some(r),
        }
    }
}

/// What one case came to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum CaseVerdict {
    Passed,
    /// The product broke a requirement no known failure names.
    Failed {
        reason: String,
    },
    /// The product broke a requirement that a known failure of the release names.
    ExpectedFailure {
        requirement: String,
        report: String,
        reason: String,
    },
    /// A known failure names the case, and it passed: the bug looks fixed.
    UnexpectedPass {
        requirement: String,
        report: String,
    },
    /// The harness or the infrastructure could not run the case.
    Error {
        reason: String,
    },
    Skipped {
        reason: String,
    },
    /// The run's interruption stopped the case or kept it from starting.
    Interrupted {
        reason: String,
    },
}

impl CaseVerdict {
    /// Every [`Self::key`], in the order of the totals line.
    pub const KEYS: [&'static str; 7] = crate::timeline::VERDICT_KEYS;

    /// The verdict of a case whose outcome is `outcome`, whose failing checks name the
    /// requirements `broken`, with the known failures `expected` that name it. A failure is
    /// expected only if a failing check breaks the requirement a known failure names.
    pub fn of(outcome: &Outcome, broken: &[&str], expected: &[Expectation]) -> Self {
        match outcome {
            Outcome::Skipped(r) => Self::Skipped { reason: r.clone() },
            Outcome::Error(r) if outcome.is_interrupted() => {
                Self::Interrupted { reason: r.clone() }
            }
            Outcome::Error(r) => Self::Error { reason: r.clone() },
            Outcome::Passed => match expected.first() {
                Some(f) => Self::UnexpectedPass {
                    requirement: f.requirement.clone(),
                    report: f.report.clone(),
                },
                None => Self::Passed,
            },
            Outcome::Failed(reason) => {
                match expected
                    .iter()
                    .find(|f| broken.contains(&f.requirement.as_str()))
                {
                    Some(f) => Self::ExpectedFailure {
                        requirement: f.requirement.clone(),
                        report: f.report.clone(),
                        reason: reason.clone(),
                    },
                    None => Self::Failed {
                        reason: reason.clone(),
                    },
                }
            }
        }
    }

    /// The verdict of a case whose outcome is `outcome` and whose checks came to `checks`.
    pub fn of_checks(outcome: &Outcome, checks: &[CheckOutcome], expected: &[Expectation]) -> Self {
        Self::of_case(outcome, &[], checks, expected)
    }

    /// The verdict of a case whose step that stopped it broke `step_broke` (a wait that gave
    /// up breaks the requirement of what it waited for) and whose checks came to `checks`.
    pub fn of_case(
        outcome: &Outcome,
        step_broke: &[String],
        checks: &[CheckOutcome],
        expected: &[Expectation],
    ) -> Self {
        Self::of(outcome, &broken(step_broke, checks), expected)
    }

    /// The verdict a saved timeline records, with the known failures it records; none for a
    /// timeline cut before its closing record.
    pub fn of_timeline(t: &Timeline) -> Option<Self> {
        let expected = t
            .run_info()
            .map(|i| i.expected_failures.as_slice())
            .unwrap_or_default();
        Self::of_timeline_with(t, expected)
    }

    /// The verdict of a saved timeline with the known failures `expected`, as `check
    /// --expectations` gives it.
    pub fn of_timeline_with(t: &Timeline, expected: &[Expectation]) -> Option<Self> {
        let outcome = outcome_of(t)?;
        let step_broke = t
            .stopped_step()
            .filter(|s| s.status == StageStatus::Failed)
            .map(|s| s.requirements)
            .unwrap_or_default();
        Some(Self::of(
            &outcome,
            &broken(&step_broke, t.check_outcomes()),
            expected,
        ))
    }

    /// The name reports and tools use (`expected-failure`, `unexpected-pass`, ...).
    pub fn key(&self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failed { .. } => "failed",
            Self::ExpectedFailure { .. } => "expected-failure",
            Self::UnexpectedPass { .. } => "unexpected-pass",
            Self::Error { .. } => "error",
            Self::Skipped { .. } => "skipped",
            Self::Interrupted { .. } => "interrupted",
        }
    }

    /// How a reader sees it: an unexpected pass shouts, since it asks for a change.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failed { .. } => "failed",
            Self::ExpectedFailure { .. } => "expected failure",
            Self::UnexpectedPass { .. } => "UNEXPECTED PASS",
            Self::Error { .. } => "error",
            Self::Skipped { .. } => "skipped",
            Self::Interrupted { .. } => "interrupted",
        }
    }

    /// Whether the run as a whole can still succeed with this verdict.
    pub fn acceptable(&self) -> bool {
        matches!(
            self,
            Self::Passed | Self::ExpectedFailure { .. } | Self::Skipped { .. }
        )
    }

    /// What a reader needs to know beyond the label: the reason, the known failure, or what to
    /// do about an unexpected pass.
    pub fn explanation(&self) -> Option<String> {
        match self {
            Self::Passed => None,
            Self::Failed { reason }
            | Self::Error { reason }
            | Self::Skipped { reason }
            | Self::Interrupted { reason } => Some(reason.clone()),
            Self::ExpectedFailure {
                requirement,
                report,
                ..
            } => Some(format!("expected failure of {requirement}: {report}")),
            Self::UnexpectedPass {
                requirement,
                report,
            } => Some(format!(
                "passed although expected to fail {requirement} ({report}); the bug looks fixed: update the expectations"
            )),
        }
    }
}

/// The requirements the stopped step broke and the failing ones of `checks` name, each once.
/// A check that was not evaluated names none: it says nothing about its requirements.
fn broken<'a>(
    step_broke: &'a [String],
    checks: impl IntoIterator<Item = &'a CheckOutcome>,
) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    let checks = checks
        .into_iter()
        .filter(|c| c.failed())
        .flat_map(|c| &c.requirements);
    for r in step_broke.iter().chain(checks) {
        if !out.contains(&r.as_str()) {
            out.push(r);
        }
    }
    out
}

/// The outcome a timeline's closing record names, with the reason its entries give.
fn outcome_of(t: &Timeline) -> Option<Outcome> {
    let stage_message = |status: StageStatus| {
        t.entries.iter().find_map(|e| match &e.event {
            Event::Stage(s) if s.status == status => s.message.clone(),
            _ => None,
        })
    };
    Some(match t.outcome()? {
        "passed" => Outcome::Passed,
        "skipped" => Outcome::Skipped(
            stage_message(StageStatus::Skipped).unwrap_or_else(|| "no reason recorded".into()),
        ),
        "error" => Outcome::Error(
            stage_message(StageStatus::Error).unwrap_or_else(|| "no reason recorded".into()),
        ),
        _ => Outcome::Failed(
            stage_message(StageStatus::Failed)
                .or_else(|| {
                    t.check_outcomes()
                        .into_iter()
                        .find(|c| c.failed())
                        .map(|c| c.message.clone())
                })
                .unwrap_or_else(|| "no reason recorded".into()),
        ),
    })
}

/// How many cases came to each verdict: the one totals line every output prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub cases: usize,
    pub passed: usize,
    pub failed: usize,
    pub expected_failures: usize,
    pub unexpected_passes: usize,
    pub errors: usize,
    pub skipped: usize,
    pub interrupted: usize,
}

impl Totals {
    pub fn of<'a>(verdicts: impl IntoIterator<Item = &'a CaseVerdict>) -> Self {
        let mut t = Self::default();
        for v in verdicts {
            t.cases += 1;
            match v {
                CaseVerdict::Passed => t.passed += 1,
                CaseVerdict::Failed { .. } => t.failed += 1,
                CaseVerdict::ExpectedFailure { .. } => t.expected_failures += 1,
                CaseVerdict::UnexpectedPass { .. } => t.unexpected_passes += 1,
                CaseVerdict::Error { .. } => t.errors += 1,
                CaseVerdict::Skipped { .. } => t.skipped += 1,
                CaseVerdict::Interrupted { .. } => t.interrupted += 1,
            }
        }
        t
    }
}

/// `38 cases: 18 passed, 0 failed, 14 expected failures, 0 unexpected passes, 0 errors,
/// 6 skipped`, and `, N interrupted` when a run was cut.
impl fmt::Display for Totals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cases: {} passed, {} failed, {} expected failures, {} unexpected passes, {} errors, {} skipped",
            self.cases,
            self.passed,
            self.failed,
            self.expected_failures,
            self.unexpected_passes,
            self.errors,
            self.skipped
        )?;
        if self.interrupted > 0 {
            write!(f, ", {} interrupted", self.interrupted)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(requirement: &str) -> Vec<Expectation> {
        vec![Expectation {
            requirement: requirement.into(),
            report: "#1".into(),
        }]
    }

    #[test]
    fn a_failure_is_expected_only_when_a_failing_check_breaks_the_known_requirement() {
        let failed = Outcome::Failed("boom".into());
        assert_eq!(
            CaseVerdict::of(&failed, &["R6", "R9"], &known("R9")).key(),
            "expected-failure"
        );
        assert_eq!(
            CaseVerdict::of(&failed, &["R6"], &known("R9")),
            CaseVerdict::Failed {
                reason: "boom".into()
            }
        );
        assert_eq!(CaseVerdict::of(&failed, &["R9"], &[]).key(), "failed");
    }

    #[test]
    fn a_wait_that_gave_up_breaks_its_requirement_though_no_check_failed() {
        let failed = Outcome::Failed("[R7] seed: gave up waiting for Stopped".into());
        let stop = ["R7".to_string()];
        assert_eq!(
            CaseVerdict::of_case(&failed, &stop, &[], &known("R7")).key(),
            "expected-failure"
        );
        assert_eq!(
            CaseVerdict::of_case(&failed, &stop, &[], &known("R9")).key(),
            "failed"
        );
    }

    #[test]
    fn a_check_that_was_not_evaluated_breaks_no_requirement() {
        let check = |name: &str, req: &str, not_evaluated: Option<&str>| CheckOutcome {
            name: name.into(),
            requirements: vec![req.into()],
            passed: false,
            not_evaluated: not_evaluated.map(str::to_string),
            window: None,
            expected: String::new(),
            message: String::new(),
            last_seen: Vec::new(),
        };
        let failed = Outcome::Failed("seed: gave up".into());
        let checks = [
            check("provisioned", "R11", None),
            check("returns to Ready", "R9", Some("step 'seed' failed")),
        ];
        // Only the check that failed counts: a known failure of R9 is not what happened.
        assert_eq!(
            CaseVerdict::of_checks(&failed, &checks, &known("R9")).key(),
            "failed"
        );
        assert_eq!(
            CaseVerdict::of_checks(&failed, &checks, &known("R11")).key(),
            "expected-failure"
        );
    }

    #[test]
    fn a_known_failure_that_passes_is_an_unexpected_pass_and_fails_the_run() {
        let v = CaseVerdict::of(&Outcome::Passed, &[], &known("R1"));
        assert_eq!(v.key(), "unexpected-pass");
        assert!(!v.acceptable());
        assert!(v.explanation().unwrap().contains("update the expectations"));
    }

    #[test]
    fn an_interrupted_case_is_its_own_verdict_not_an_error() {
        let v = CaseVerdict::of(&Outcome::interrupted("SIGINT", "x"), &[], &known("R1"));
        assert_eq!(v.key(), "interrupted");
        assert!(!v.acceptable());
        let e = CaseVerdict::of(&Outcome::Error("down".into()), &[], &known("R1"));
        assert_eq!(e.key(), "error");
    }

    #[test]
    fn the_totals_line_names_interrupted_cases_only_when_there_are_some() {
        let vs = [
            CaseVerdict::Passed,
            CaseVerdict::Skipped { reason: "x".into() },
        ];
        assert_eq!(
            Totals::of(&vs).to_string(),
            "2 cases: 1 passed, 0 failed, 0 expected failures, 0 unexpected passes, 0 errors, 1 skipped"
        );
        let cut = [CaseVerdict::Interrupted { reason: "x".into() }];
        assert!(Totals::of(&cut).to_string().ends_with(", 1 interrupted"));
    }

    #[test]
    fn every_verdict_key_is_one_a_timeline_may_record() {
        let r = || "r".to_string();
        let all = [
            CaseVerdict::Passed,
            CaseVerdict::Failed { reason: r() },
            CaseVerdict::ExpectedFailure {
                requirement: r(),
                report: r(),
                reason: r(),
            },
            CaseVerdict::UnexpectedPass {
                requirement: r(),
                report: r(),
            },
            CaseVerdict::Error { reason: r() },
            CaseVerdict::Skipped { reason: r() },
            CaseVerdict::Interrupted { reason: r() },
        ];
        assert_eq!(all.map(|v| v.key()), CaseVerdict::KEYS);
    }
}
