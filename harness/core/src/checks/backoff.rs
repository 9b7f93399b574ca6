//! R5's capped back-off, judged from the supervisor's own attempts as the timeline recorded
//! them (observation [`ATTEMPTS_KEY`]).

use crate::retries::{ATTEMPTS_KEY, Attempt, RetryOp, gaps};
use crate::timeline::{Event, Timeline};
use crate::verdict::fmt_ms;

/// Whether the check held, and what it saw.
pub(crate) struct BackoffVerdict {
    pub(crate) passed: bool,
    pub(crate) message: String,
    /// Why there was nothing to judge, when there was not.
    pub(crate) missing: Option<Missing>,
}

/// Why a back-off check had no attempts to judge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Missing {
    /// The case never read them: a step before the read stopped it.
    NeverRead,
    /// The target could not read the supervisor's log.
    Unreadable,
}

/// After every failed `op` attempt of `sandbox`'s supervisor, the next attempt came within
/// `limit_ms`. The last recording of the attempts counts (a scenario may read them more than
/// once; each read holds the whole log so far).
pub(crate) fn eval_capped_backoff(
    t: &Timeline,
    sandbox: &str,
    op: RetryOp,
    limit_ms: u64,
) -> BackoffVerdict {
    let fail = |message: String| BackoffVerdict {
        passed: false,
        message,
        missing: None,
    };
    let recorded = t.entries.iter().rev().find_map(|e| match &e.event {
        Event::Observation {
            key,
            subject: Some(s),
            value,
        } if key == ATTEMPTS_KEY && s == sandbox => Some(value),
        _ => None,
    });
    let Some(value) = recorded else {
        return BackoffVerdict {
            missing: Some(Missing::NeverRead),
            ..fail(format!(
                "the supervisor's attempts of {sandbox} were never read in this run"
            ))
        };
    };
    if let Some(why) = value.get("unavailable") {
        return BackoffVerdict {
            missing: Some(Missing::Unreadable),
            ..fail(format!(
                "the supervisor's log of {sandbox} could not be read: {}",
                why.as_str().unwrap_or("no reason given")
            ))
        };
    }
    let attempts: Vec<Attempt> = match serde_json::from_value(value.clone()) {
        Ok(a) => a,
        Err(e) => return fail(format!("unreadable attempts of {sandbox}: {e}")),
    };
    let first = attempts.first().map_or(0, |a| a.at_unix_ms);
    let ours: Vec<_> = gaps(&attempts).into_iter().filter(|g| g.op == op).collect();
    // A long outage makes dozens of retries; the first ones show the growth and the cap.
    const SHOWN: usize = 12;
    let mut spacing = ours
        .iter()
        .take(SHOWN)
        .map(|g| fmt_ms(g.ms))
        .collect::<Vec<_>>()
        .join(", ");
    if ours.len() > SHOWN {
        spacing.push_str(&format!(", … ({} more)", ours.len() - SHOWN));
    }
    if let Some(g) = ours.iter().find(|g| g.ms > limit_ms) {
        return fail(format!(
            "the {} attempt that failed {} after the first logged attempt was not followed by \
             another until {} later, more than {}; spacing after each failure: {spacing}",
            op.name(),
            fmt_ms(g.after_unix_ms - first),
            fmt_ms(g.ms),
            fmt_ms(limit_ms)
        ));
    }
    let message = match ours.iter().map(|g| g.ms).max() {
        Some(longest) => format!(
            "{} failed {} attempts, each followed by the next within {} (longest {}); spacing: \
             {spacing}",
            ours.len(),
            op.name(),
            fmt_ms(limit_ms),
            fmt_ms(longest)
        ),
        None => format!(
            "no failed {} attempt was followed by another in this run ({} attempts logged)",
            op.name(),
            attempts.len()
        ),
    };
    BackoffVerdict {
        passed: true,
        message,
        missing: None,
    }
}
