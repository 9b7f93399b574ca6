//! `check`: re-judges saved timelines offline, strictly, and gives each case its verdict again.
//! Every file is looked at, whatever the ones before it were. A check verdict that differs from
//! the recorded one, or a stored check plan that differs from the catalog's plan for that case,
//! fails the check and is named. The case's verdict comes from [`CaseVerdict`] with the known
//! failures the timeline recorded (those of the run that wrote it) or, with `--expectations`,
//! those of that file, so `check` reproduces the run's verdict: an expected failure exits 0, an
//! unexpected pass 1, an error 3. A timeline that cannot be judged (unreadable, not written by
//! `run`, or cut before its closing record) is a usage error (exit 2) once all files are seen.

use std::collections::BTreeMap;
use std::path::Path;

use conformance_catalog::expectations::Expectations;
use conformance_core::case_verdict::CaseVerdict;
use conformance_core::checks::{Check, CheckOutcome, CheckStatus};
use conformance_core::error::{Error, ExitStatus};
use conformance_core::timeline::Timeline;
use serde::Serialize;

use super::args::{CheckArgs, Format};
use super::files::load_timeline;

/// What checking one timeline came to, worst last.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Judgement {
    /// The recorded verdicts hold and the case's verdict lets a run pass.
    Agrees,
    /// A verdict differs, the plan is not the catalog's, or the case failed (or passed
    /// unexpectedly).
    Fails,
    /// The case's verdict is an error or an interruption: it says nothing about the product.
    Errored,
    /// The file cannot be judged.
    Unjudgeable,
}

/// One file's result, as `--format json` prints it.
#[derive(Debug, Serialize)]
struct Judged {
    file: String,
    judgement: Judgement,
    /// The case's verdict (absent when the file cannot be judged).
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict: Option<CaseVerdict>,
    checks_passed: usize,
    /// Checks a stopped step left without anything to judge.
    checks_not_evaluated: usize,
    checks: usize,
    /// What differs from the record, and why the file cannot be judged.
    problems: Vec<String>,
    /// How the stored check plan differs from the catalog's for the case.
    plan_differences: Vec<String>,
    /// The failing checks' diagnoses.
    failing: Vec<String>,
    /// The checks not evaluated, each with the step that stopped the case.
    not_evaluated: Vec<String>,
}

impl Judged {
    fn new(file: String) -> Self {
        Self {
            file,
            judgement: Judgement::Agrees,
            verdict: None,
            checks_passed: 0,
            checks_not_evaluated: 0,
            checks: 0,
            problems: Vec::new(),
            plan_differences: Vec::new(),
            failing: Vec::new(),
            not_evaluated: Vec::new(),
        }
    }

    fn print(&self) {
        let name = &self.file;
        let Some(v) = &self.verdict else {
            for p in &self.problems {
                say!("{name}: cannot be judged: {p}");
            }
            return;
        };
        if let CaseVerdict::Skipped { reason } = v {
            say!("{name}: skipped: {reason}");
            return;
        }
        if !self.plan_differences.is_empty() {
            say!("{name}: the stored check plan DIFFERS from the catalog's for this case:");
            for p in &self.plan_differences {
                say!("  {p}");
            }
        }
        let unjudged = match self.checks_not_evaluated {
            0 => String::new(),
            n => format!(" ({n} not evaluated)"),
        };
        say!(
            "{name}: {} of {} checks passed{unjudged}, {}",
            self.checks_passed,
            self.checks,
            if self.problems.is_empty() {
                "as recorded"
            } else {
                "DIFFERENT from the verdicts recorded in the file"
            }
        );
        for d in &self.problems {
            say!("  {d}");
        }
        for f in self.failing.iter().chain(&self.not_evaluated) {
            say!("  {}", f.replace('\n', "\n  "));
        }
        match v.explanation() {
            Some(why) => say!("{name}: {}: {why}", v.label()),
            None => say!("{name}: {}", v.label()),
        }
    }
}

pub(super) fn check(args: &CheckArgs) -> Result<ExitStatus, Error> {
    // A bad expectations file is refused before any timeline is read.
    let expectations = args
        .expectations
        .as_deref()
        .map(Expectations::load)
        .transpose()?;
    let mut worst = Judgement::Agrees;
    let mut all = Vec::new();
    for path in &args.timelines {
        let judged = match load_timeline(path) {
            Ok(t) => check_one(path, &t, expectations.as_ref()),
            Err(e) => {
                let mut j = Judged::new(path.display().to_string());
                j.judgement = Judgement::Unjudgeable;
                j.problems.push(conformance_core::error::one_line(&e));
                if args.format == Format::Table {
                    tell!("{}", conformance_core::error::report(&e));
                }
                j
            }
        };
        worst = worst.max(judged.judgement);
        match args.format {
            Format::Table => judged.print(),
            Format::Json => all.push(judged),
        }
    }
    if args.format == Format::Json {
        let json = serde_json::to_string_pretty(&all)
            .map_err(|e| Error::infra_from("cannot write the results as JSON", e))?;
        say!("{json}");
    }
    Ok(match worst {
        Judgement::Agrees => ExitStatus::Success,
        Judgement::Fails => ExitStatus::ProductFailure,
        Judgement::Errored => ExitStatus::Infrastructure,
        Judgement::Unjudgeable => ExitStatus::Usage,
    })
}

/// Why a timeline cannot be judged, if it cannot: `check` and `report` refuse the same files.
pub(super) fn unjudgeable(t: &Timeline) -> Option<&'static str> {
    if t.run_info().is_none() {
        return Some("it has no run record: it was not written by `openshell-conformance run`");
    }
    if t.outcome().is_none() {
        return Some(
            "it is incomplete: the run stopped before the case finished (no closing record)",
        );
    }
    None
}

fn check_one(path: &Path, t: &Timeline, expectations: Option<&Expectations>) -> Judged {
    let mut j = Judged::new(path.display().to_string());
    if let Some(why) = unjudgeable(t) {
        j.judgement = Judgement::Unjudgeable;
        j.problems.push(why.into());
        return j;
    }
    let run = t.run_info().expect("checked above");
    // A case this catalog does not have cannot have its stored plan held to the catalog's: a
    // pass here would be a pass of whatever plan the file holds.
    let case = match conformance_catalog::catalog::case_for(run) {
        Ok(case) => case,
        Err(why) => {
            j.judgement = Judgement::Unjudgeable;
            j.problems.push(format!(
                "its case is not in this harness's catalog ({}): its stored check plan cannot be compared with the catalog's; judge it with the harness version that wrote it",
                conformance_core::error::one_line(&why)
            ));
            return j;
        }
    };
    // The known failures to judge by: the file's, for the case the timeline recorded, or the
    // ones the run recorded.
    let expected = match expectations {
        Some(e) => e.for_case(&case.id()),
        None => run.expected_failures.clone(),
    };
    let verdict = CaseVerdict::of_timeline_with(t, &expected).expect("checked above");
    if let CaseVerdict::Skipped { .. } = verdict {
        j.verdict = Some(verdict);
        return j;
    }
    let plan = t.check_plan();
    if plan.is_empty() {
        j.judgement = Judgement::Unjudgeable;
        j.problems
            .push("the case ran but its timeline has no check plan".into());
        return j;
    }
    j.plan_differences = plan_differences(&plan, &conformance_catalog::catalog::plan_of(&case));
    let again = conformance_core::engine::recheck(t);
    let recorded: Vec<CheckOutcome> = t.check_outcomes().into_iter().cloned().collect();
    j.problems
        .extend(verdict_differences(&recorded, &again.outcomes));
    j.checks = again.outcomes.len();
    j.checks_passed = again.outcomes.iter().filter(|o| o.passed).count();
    let diagnoses = |status: CheckStatus| -> Vec<String> {
        again
            .outcomes
            .iter()
            .filter(|o| o.status() == status)
            .map(|o| o.diagnosis())
            .collect()
    };
    j.failing = diagnoses(CheckStatus::Failed);
    j.not_evaluated = diagnoses(CheckStatus::NotEvaluated);
    j.checks_not_evaluated = j.not_evaluated.len();
    // Under the run's own known failures the verdict must be the one the run recorded.
    if let (None, Some(recorded)) = (expectations, t.verdict())
        && recorded != verdict.key()
    {
        j.problems.push(format!(
            "the case's verdict DIFFERS: recorded {recorded}, re-judged {}",
            verdict.key()
        ));
    }
    j.judgement = if !j.problems.is_empty() || !j.plan_differences.is_empty() {
        Judgement::Fails
    } else if matches!(
        verdict,
        CaseVerdict::Error { .. } | CaseVerdict::Interrupted { .. }
    ) {
        Judgement::Errored
    } else if verdict.acceptable() {
        Judgement::Agrees
    } else {
        Judgement::Fails
    };
    j.verdict = Some(verdict);
    j
}

/// Each check whose re-judged verdict is not the recorded one, or that is on one side only.
///
/// A harness that did not yet tell unevaluated checks apart recorded them as failed with the
/// same message; such a record agrees with a re-judged "not evaluated".
fn verdict_differences(recorded: &[CheckOutcome], again: &[CheckOutcome]) -> Vec<String> {
    let word = |status: CheckStatus| match status {
        CheckStatus::Passed => "passed",
        CheckStatus::Failed => "failed",
        CheckStatus::NotEvaluated => "not evaluated",
    };
    let before: BTreeMap<&str, &CheckOutcome> =
        recorded.iter().map(|o| (o.name.as_str(), o)).collect();
    let mut out = Vec::new();
    for now in again {
        let check = now.name.as_str();
        match before.get(check) {
            Some(was) if was.status() == now.status() => {}
            Some(was)
                if was.status() == CheckStatus::Failed
                    && was.not_evaluated.is_none()
                    && now.status() == CheckStatus::NotEvaluated
                    && was.message == now.message => {}
            Some(was) => out.push(format!(
                "verdict of '{check}' DIFFERS: recorded {}, re-judged {}",
                word(was.status()),
                word(now.status())
            )),
            None => out.push(format!(
                "'{check}' has no recorded verdict; re-judged {}",
                word(now.status())
            )),
        }
    }
    let now: BTreeMap<&str, ()> = again.iter().map(|o| (o.name.as_str(), ())).collect();
    for check in before.keys().filter(|c| !now.contains_key(*c)) {
        out.push(format!(
            "'{check}' has a recorded verdict but is not in the check plan"
        ));
    }
    out
}

/// How a stored plan differs from the catalog's: checks missing, added or changed, by name.
fn plan_differences(stored: &[Check], catalog: &[Check]) -> Vec<String> {
    let by_name = |plan: &[Check]| -> BTreeMap<String, String> {
        plan.iter()
            .map(|c| {
                let json = serde_json::to_string(c).unwrap_or_default();
                (c.name.clone(), json)
            })
            .collect()
    };
    let (stored, catalog) = (by_name(stored), by_name(catalog));
    let mut out = Vec::new();
    for (name, json) in &catalog {
        match stored.get(name) {
            None => out.push(format!("missing: '{name}'")),
            Some(s) if s != json => out.push(format!("changed: '{name}'")),
            Some(_) => {}
        }
    }
    for name in stored.keys().filter(|n| !catalog.contains_key(*n)) {
        out.push(format!("not in the catalog: '{name}'"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(name: &str, passed: bool) -> CheckOutcome {
        CheckOutcome {
            name: name.into(),
            requirements: vec!["R1".into()],
            passed,
            not_evaluated: None,
            window: None,
            expected: String::new(),
            message: String::new(),
            last_seen: Vec::new(),
        }
    }

    #[test]
    fn a_flipped_verdict_is_named_with_both_sides() {
        let d = verdict_differences(
            &[outcome("a", true), outcome("b", false)],
            &[outcome("a", true), outcome("b", true)],
        );
        assert_eq!(
            d,
            ["verdict of 'b' DIFFERS: recorded failed, re-judged passed"]
        );
    }

    #[test]
    fn a_check_an_older_harness_recorded_as_failed_agrees_with_not_evaluated_only_if_it_said_the_same()
     {
        let unjudged = |message: &str| CheckOutcome {
            not_evaluated: Some(format!("step 'seed' failed; {message}")),
            message: message.into(),
            ..outcome("b", false)
        };
        let old = |message: &str| CheckOutcome {
            message: message.into(),
            ..outcome("b", false)
        };
        let said =
            "marker 'verified' never happened in this run, so the check could not be evaluated";
        assert!(verdict_differences(&[old(said)], &[unjudged(said)]).is_empty());
        assert_eq!(
            verdict_differences(&[old("it held at 3s")], &[unjudged(said)]),
            ["verdict of 'b' DIFFERS: recorded failed, re-judged not evaluated"]
        );
        // A record that knew about not evaluated is held to it.
        assert_eq!(
            verdict_differences(&[unjudged(said)], &[old(said)]),
            ["verdict of 'b' DIFFERS: recorded not evaluated, re-judged failed"]
        );
    }

    #[test]
    fn verdicts_on_one_side_only_are_named() {
        let d = verdict_differences(&[outcome("gone", true)], &[outcome("new", false)]);
        assert_eq!(
            d,
            [
                "'new' has no recorded verdict; re-judged failed",
                "'gone' has a recorded verdict but is not in the check plan",
            ]
        );
    }
}
