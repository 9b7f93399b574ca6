//! The supervisor's attempts to reach the gateway, read from its own log: each retry it logs
//! and each success, stamped by the container runtime. R5 ("retries use capped backoff") is
//! judged from their spacing ([`crate::checks::Check::capped_backoff`]), so the same check
//! holds our models and the real supervisor to the same cap.
//!
//! The lines recognised are upstream's wording, which our models copy (docs/upstream-facts.md
//! F2.1, F2.7): `Policy fetch failed, retrying` and `… failed after N attempts` from bootstrap's
//! `grpc_retry`, `supervisor session failed, reconnecting (attempt N)` and `supervisor session
//! established` from the session loop, and the gated topologies' `boundary attach failed,
//! retrying`. Anything else in the log is ignored.

use serde::{Deserialize, Serialize};

/// Key of the [`crate::timeline::Event::Observation`] holding a sandbox's attempts (its
/// subject is the sandbox); the value is a list of [`Attempt`], or `{"unavailable": reason}`
/// when the target could not read the supervisor's log.
pub const ATTEMPTS_KEY: &str = "supervisor-attempts";

/// What the supervisor was trying to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RetryOp {
    /// Bootstrap: token exchange and policy fetch (F2.1).
    Bootstrap,
    /// Attaching to the gateway before the workload pod is released (gated topologies).
    Attach,
    /// The supervisor session with the gateway (F2.7).
    Session,
}

impl RetryOp {
    pub fn name(self) -> &'static str {
        match self {
            Self::Bootstrap => "bootstrap",
            Self::Attach => "attach",
            Self::Session => "session",
        }
    }
}

/// One attempt as the supervisor logged it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub op: RetryOp,
    /// When the runtime stamped the line, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// Whether the attempt succeeded (a failed one is followed by a back-off sleep).
    pub ok: bool,
}

/// The attempts in `lines`, each `<RFC 3339 timestamp> <text>` as `kubectl logs --timestamps`
/// prints them, in log order. Lines without a readable timestamp are skipped.
pub fn parse_attempts<S: AsRef<str>>(lines: &[S]) -> Vec<Attempt> {
    lines
        .iter()
        .filter_map(|l| {
            let (stamp, text) = l.as_ref().split_once(' ')?;
            let at = humantime::parse_rfc3339_weak(stamp).ok()?;
            let at_unix_ms = at
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_millis()
                .try_into()
                .ok()?;
            let (op, ok) = classify(text)?;
            Some(Attempt { op, at_unix_ms, ok })
        })
        .collect()
}

/// The field a supervisor that serves several sandboxes (the shared Deployment) puts on each
/// line it logs for one of them: `sandbox=<Sandbox resource name>`.
pub const SANDBOX_FIELD: &str = "sandbox=";

/// [`parse_attempts`] for the sandbox whose Sandbox resource is `resource`, out of the log of a
/// supervisor that serves several ([`SANDBOX_FIELD`]): only the lines naming it. None when no
/// line names any sandbox: such a log does not say which sandbox an attempt was for, and
/// judging it as a whole could fail one sandbox for a gap another's attempts filled.
pub fn parse_attempts_of<S: AsRef<str>>(lines: &[S], resource: &str) -> Option<Vec<Attempt>> {
    if !lines.iter().any(|l| names_sandbox(l.as_ref()).is_some()) {
        return None;
    }
    let ours: Vec<&str> = lines
        .iter()
        .map(AsRef::as_ref)
        .filter(|l| names_sandbox(l) == Some(resource))
        .collect();
    Some(parse_attempts(&ours))
}

/// The sandbox a line names in its [`SANDBOX_FIELD`], if any.
pub fn names_sandbox(line: &str) -> Option<&str> {
    line.split([' ', '(', ',', ')'])
        .find_map(|w| w.strip_prefix(SANDBOX_FIELD))
}

/// Which attempt a log line reports, if any.
fn classify(text: &str) -> Option<(RetryOp, bool)> {
    if text.contains("Policy fetch failed") {
        Some((RetryOp::Bootstrap, false))
    } else if text.contains("supervisor session failed, reconnecting") {
        Some((RetryOp::Session, false))
    } else if text.contains("supervisor session established") {
        Some((RetryOp::Session, true))
    } else if text.contains("boundary attach failed, retrying") {
        Some((RetryOp::Attach, false))
    } else {
        None
    }
}

/// A failed attempt and how long the supervisor took to try again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    pub op: RetryOp,
    /// The failed attempt, in milliseconds since the Unix epoch.
    pub after_unix_ms: u64,
    pub ms: u64,
    /// The next attempt was a retry of the same operation that failed too. Each line is logged
    /// when its attempt has failed, so a gap is the back-off sleep plus the next attempt's own
    /// time; a retry that failed again was refused by what it reached (the catalog's faults make
    /// the gateway refuse: no endpoint behind its Service, a rejected credential or
    /// certificate), which takes one round trip, not the 10 s connect timeout a connect that is
    /// never answered waits (docs/upstream-facts.md F2.3, F2.11). A gap ending in a success or
    /// in the next step holds a whole attempt, or more.
    pub refused_retry: bool,
}

/// The time from each failed attempt to the supervisor's next attempt at anything (a retry of
/// the same operation, or the next step once it succeeded: bootstrap's last failure is
/// followed by the session's first attempt). A failure with nothing after it (the supervisor
/// gave up, or the log was read before its next try) has no gap.
pub fn gaps(attempts: &[Attempt]) -> Vec<Gap> {
    attempts
        .windows(2)
        .filter(|w| !w[0].ok)
        .map(|w| Gap {
            op: w[0].op,
            after_unix_ms: w[0].at_unix_ms,
            ms: w[1].at_unix_ms.saturating_sub(w[0].at_unix_ms),
            refused_retry: !w[1].ok && w[1].op == w[0].op,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<&str> {
        text.lines().collect()
    }

    #[test]
    fn upstream_and_model_retry_lines_become_attempts_in_log_order() {
        let log = lines(
            "2026-01-01T00:00:00.000000000Z INFO starting\n\
             2026-01-01T00:00:01.000Z WARN openshell_sandbox: Policy fetch failed, retrying attempt=1 max_attempts=5\n\
             2026-01-01T00:00:02.500Z OCSF NET:FAIL [LOW] supervisor session failed, reconnecting (attempt 1): connect failed\n\
             2026-01-01T00:00:04Z OCSF NET:OPEN [INFO] supervisor session established (session_id=s, heartbeat_secs=15)\n\
             not a stamped line\n\
             2026-01-01T00:00:05Z OCSF NET:FAIL [MED] boundary attach failed, retrying (attempt 1, retry_in=1s): x",
        );
        let a = parse_attempts(&log);
        let t0 = 1_767_225_600_000;
        assert_eq!(
            a,
            vec![
                Attempt {
                    op: RetryOp::Bootstrap,
                    at_unix_ms: t0 + 1_000,
                    ok: false
                },
                Attempt {
                    op: RetryOp::Session,
                    at_unix_ms: t0 + 2_500,
                    ok: false
                },
                Attempt {
                    op: RetryOp::Session,
                    at_unix_ms: t0 + 4_000,
                    ok: true
                },
                Attempt {
                    op: RetryOp::Attach,
                    at_unix_ms: t0 + 5_000,
                    ok: false
                },
            ]
        );
    }

    #[test]
    fn a_shared_supervisors_attempts_are_the_lines_naming_the_sandbox_or_none_when_no_line_names_one()
     {
        let log = lines(
            "2026-01-01T00:00:01Z OCSF NET:FAIL [LOW] supervisor session failed, reconnecting (attempt 1) sandbox=a\n\
             2026-01-01T00:00:02Z OCSF NET:FAIL [LOW] supervisor session failed, reconnecting (attempt 1) sandbox=ab\n\
             2026-01-01T00:00:03Z OCSF NET:OPEN [INFO] supervisor session established (session_id=s, heartbeat_secs=15) sandbox=a",
        );
        let a = parse_attempts_of(&log, "a").unwrap();
        let t0 = 1_767_225_600_000;
        assert_eq!(
            a.iter()
                .map(|a| (a.at_unix_ms - t0, a.ok))
                .collect::<Vec<_>>(),
            vec![(1_000, false), (3_000, true)]
        );
        let unnamed = lines(
            "2026-01-01T00:00:01Z OCSF NET:FAIL [LOW] supervisor session failed, reconnecting (attempt 1)",
        );
        assert_eq!(parse_attempts_of(&unnamed, "a"), None);
    }

    #[test]
    fn a_gap_runs_from_each_failure_to_the_next_attempt_of_any_kind() {
        let at = |op, s: u64, ok| Attempt {
            op,
            at_unix_ms: s * 1000,
            ok,
        };
        let g = gaps(&[
            at(RetryOp::Bootstrap, 0, false),
            at(RetryOp::Bootstrap, 1, false),
            at(RetryOp::Session, 9, true),
            at(RetryOp::Session, 100, false),
        ]);
        let ms: Vec<(RetryOp, u64, bool)> =
            g.iter().map(|g| (g.op, g.ms, g.refused_retry)).collect();
        // Only a retry of the same operation that failed again was refused.
        assert_eq!(
            ms,
            vec![
                (RetryOp::Bootstrap, 1_000, true),
                (RetryOp::Bootstrap, 8_000, false)
            ]
        );
    }
}
