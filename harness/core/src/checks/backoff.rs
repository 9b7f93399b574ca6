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

/// How long after a failure the next attempt may come.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Before any next attempt: the cap plus one whole attempt.
    pub(crate) any_ms: u64,
    /// Before a retry that was refused again ([`crate::retries::Gap::refused_retry`]): the cap
    /// plus a refused attempt's round trip.
    pub(crate) retry_ms: u64,
}

impl Limits {
    fn of(&self, g: &crate::retries::Gap) -> u64 {
        if g.refused_retry {
            self.retry_ms.min(self.any_ms)
        } else {
            self.any_ms
        }
    }
}

/// After every failed `op` attempt of `sandbox`'s supervisor, the next attempt came within
/// its [`Limits`]. The last recording of the attempts counts (a scenario may read them more
/// than once; each read holds the whole log so far).
pub(crate) fn eval_capped_backoff(
    t: &Timeline,
    sandbox: &str,
    op: RetryOp,
    limits: Limits,
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
    if let Some(g) = ours.iter().find(|g| g.ms > limits.of(g)) {
        let next = if g.refused_retry {
            "by a retry, refused again,"
        } else {
            "by another"
        };
        return fail(format!(
            "the {} attempt that failed {} after the first logged attempt was not followed {next} \
             until {} later, more than {}; spacing after each failure: {spacing}",
            op.name(),
            fmt_ms(g.after_unix_ms - first),
            fmt_ms(g.ms),
            fmt_ms(limits.of(g))
        ));
    }
    let message = match ours.iter().map(|g| g.ms).max() {
        Some(longest) => format!(
            "{} failed {} attempts, each followed by the next within {} ({} where a refused retry \
             came next; longest {}); spacing: {spacing}",
            ours.len(),
            op.name(),
            fmt_ms(limits.any_ms),
            fmt_ms(limits.retry_ms.min(limits.any_ms)),
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
