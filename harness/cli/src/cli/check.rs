//! `check`: re-judges saved timelines offline, strictly. Every file is looked at, whatever the
//! ones before it were; a verdict that differs from the recorded one, or a stored check plan
//! that differs from the catalog's plan for that case, fails the check and is named. Skipped
//! cases are reported as skipped. A timeline that cannot be judged (unreadable, not written by
//! `run`, or cut before its closing record) is a usage error (exit 2) once all files are seen.

use std::collections::BTreeMap;
use std::path::Path;

use conformance_core::checks::{Check, CheckOutcome};
use conformance_core::error::{Error, ExitStatus};
use conformance_core::timeline::{Event, StageStatus, Timeline};

use super::args::CheckArgs;
use super::files::load_timeline;

/// What checking one timeline came to.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
enum Verdict {
    Agrees,
    /// Checks failed, a verdict differs, or the plan is not the catalog's.
    Fails,
    /// The file cannot be judged.
    Unjudgeable,
}

pub(super) fn check(args: &CheckArgs) -> Result<ExitStatus, Error> {
    let mut worst = Verdict::Agrees;
    for path in &args.timelines {
        let verdict = match load_timeline(path) {
            Ok(t) => check_one(path, &t),
            Err(e) => {
                eprintln!("{}", conformance_core::error::report(&e));
                Verdict::Unjudgeable
            }
        };
        worst = worst.max(verdict);
    }
    Ok(match worst {
        Verdict::Agrees => ExitStatus::Success,
        Verdict::Fails => ExitStatus::ProductFailure,
        Verdict::Unjudgeable => ExitStatus::Usage,
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

fn check_one(path: &Path, t: &Timeline) -> Verdict {
    let name = path.display();
    if let Some(why) = unjudgeable(t) {
        println!("{name}: cannot be judged: {why}");
        return Verdict::Unjudgeable;
    }
    if t.outcome() == Some("skipped") {
        println!("{name}: skipped: {}", skip_reason(t));
        return Verdict::Agrees;
    }
    let plan = t.check_plan();
    if plan.is_empty() {
        println!("{name}: cannot be judged: the case ran but its timeline has no check plan");
        return Verdict::Unjudgeable;
    }
    let mut verdict = Verdict::Agrees;
    let run = t.run_info().expect("checked above");
    match conformance_catalog::catalog::plan_for(run) {
        Ok(catalog) => {
            let differences = plan_differences(&plan, &catalog);
            if !differences.is_empty() {
                println!("{name}: the stored check plan DIFFERS from the catalog's for this case:");
                for d in differences {
                    println!("  {d}");
                }
                verdict = Verdict::Fails;
            }
        }
        Err(why) => println!(
            "{name}: note: the stored check plan was not compared: {}",
            conformance_core::error::one_line(&why)
        ),
    }
    let again = conformance_core::engine::recheck(t);
    let recorded: Vec<CheckOutcome> = t.check_outcomes().into_iter().cloned().collect();
    let differing = verdict_differences(&recorded, &again.outcomes);
    let failed: Vec<&CheckOutcome> = again.outcomes.iter().filter(|o| !o.passed).collect();
    println!(
        "{name}: {} of {} checks passed, {}",
        again.outcomes.len() - failed.len(),
        again.outcomes.len(),
        if differing.is_empty() {
            "as recorded"
        } else {
            "DIFFERENT from the verdicts recorded in the file"
        }
    );
    for d in &differing {
        println!("  {d}");
    }
    for o in &failed {
        println!("  {}", o.diagnosis().replace('\n', "\n  "));
    }
    if !differing.is_empty() || !failed.is_empty() {
        verdict = Verdict::Fails;
    }
    verdict
}

/// Why the case was skipped, as its stages recorded it.
fn skip_reason(t: &Timeline) -> String {
    t.entries
        .iter()
        .find_map(|e| match &e.event {
            Event::Stage(s) if s.status == StageStatus::Skipped => s.message.clone(),
            _ => None,
        })
        .unwrap_or_else(|| "no reason recorded".into())
}

/// Each check whose re-judged verdict is not the recorded one, or that is on one side only.
fn verdict_differences(recorded: &[CheckOutcome], again: &[CheckOutcome]) -> Vec<String> {
    let word = |passed: bool| if passed { "passed" } else { "failed" };
    let before: BTreeMap<&str, bool> = recorded
        .iter()
        .map(|o| (o.name.as_str(), o.passed))
        .collect();
    let now: BTreeMap<&str, bool> = again.iter().map(|o| (o.name.as_str(), o.passed)).collect();
    let mut out = Vec::new();
    for (check, passed) in &now {
        match before.get(check) {
            Some(was) if was == passed => {}
            Some(was) => out.push(format!(
                "verdict of '{check}' DIFFERS: recorded {}, re-judged {}",
                word(*was),
                word(*passed)
            )),
            None => out.push(format!(
                "'{check}' has no recorded verdict; re-judged {}",
                word(*passed)
            )),
        }
    }
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
