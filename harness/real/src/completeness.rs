//! Observer completeness on real targets. The gateway logs each phase it commits for a sandbox
//! (`Sandbox phase changed`, docs/upstream-facts.md F1.6, F7.3), our gateway model in the same
//! words; every commit it logged for a case's sandboxes must be on the case's timeline, or the
//! checks judged a history with a hole in it. A commit the timeline does not show makes the case
//! an infrastructure error naming it ("observer missed ..."), never a product verdict: a lossy
//! observer can neither pass nor fail a case.
//!
//! The comparison goes by order, not by clock: per sandbox, the logged commits must appear, in
//! the order logged, among the phases the timeline records for it (gaps aside). The log's
//! timestamps (the kubelet's, else the gateway's own) are another machine's clock on an
//! existing cluster, so they only place a missed commit on the timeline for the reader, through
//! the run's wall-clock observation. A commit the gateway made while the sandbox's stream was
//! down (the observer records when it broke and when it was back) could not be sent: the stream
//! sends the sandbox as it is when it is back (F7.8), so a phase left again before that would be
//! a hole in what the checks judge. Such a commit is put on the timeline at the time the gateway
//! logged it, marked as seen in the gateway's log only, and the checks judge it; an honestly
//! disconnected observer is no lossy one. A commit missing while the stream was up still makes
//! the case an infrastructure error.

use std::collections::BTreeSet;
use std::time::{Duration, UNIX_EPOCH};

use conformance_core::phase::Phase;
use conformance_core::target::TargetError;
use conformance_core::timeline::{
    Event, GATEWAY_SANDBOX_KIND, GATEWAY_UNREACHABLE_REASON, ObjectState, Recorder, Timeline,
};

/// The words the gateway logs a phase commit with.
pub const PHASE_CHANGED: &str = "Sandbox phase changed";

/// Key of the observation that ties a case's timeline to the wall clock: its value is the
/// wall-clock time (milliseconds since the Unix epoch) at the entry's `at_ms`.
pub const WALL_CLOCK_KEY: &str = "wall_clock_unix_ms";

/// How the timeline note and the error about missed commits begin.
pub(crate) const MISSED: &str = "observer missed";

/// One phase commit the gateway logged.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PhaseCommit {
    /// When it was logged (ms since the Unix epoch): the line's first timestamp, the kubelet's
    /// when the log was read with timestamps, else the gateway's own.
    pub logged_unix_ms: Option<i64>,
    pub sandbox: String,
    pub from: Phase,
    pub to: Phase,
}

/// The phase commits in a gateway's log, in the order logged. Reads our gateway model's lines
/// and real OpenShell's (tracing's format, whose colour codes it strips), with or without the
/// kubelet's timestamp in front.
pub fn phase_commits(log: &str) -> Vec<PhaseCommit> {
    log.lines()
        .filter(|l| l.contains(PHASE_CHANGED))
        .filter_map(|l| {
            let plain = strip_ansi(l);
            let (head, fields) = plain.split_once(PHASE_CHANGED)?;
            let logged_unix_ms = head.split_whitespace().find_map(|w| {
                let t = humantime::parse_rfc3339_weak(w.trim_end_matches('Z')).ok()?;
                Some(t.duration_since(UNIX_EPOCH).ok()?.as_millis() as i64)
            });
            let fields = parse_fields(fields);
            let field = |k: &str| {
                fields
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
            };
            Some(PhaseCommit {
                logged_unix_ms,
                sandbox: field("sandbox_name")?,
                from: Phase::parse(&field("old_phase")?),
                to: Phase::parse(&field("new_phase")?),
            })
        })
        .collect()
}

/// A line without its terminal colour codes (`ESC [ ... letter`).
pub(crate) fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `key=value` pairs; a value may be quoted (`"..."`, with `\"` inside).
fn parse_fields(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.rsplit(char::is_whitespace).next().unwrap_or(key);
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut end = q.len();
            let mut escaped = false;
            for (i, c) in q.char_indices() {
                match c {
                    _ if escaped => {
                        value.push(c);
                        escaped = false;
                    }
                    '\\' => escaped = true,
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    _ => value.push(c),
                }
            }
            (value, &q[end.min(q.len())..])
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            (after[..end].to_string(), &after[end..])
        };
        out.push((key.to_string(), value));
        rest = next.trim_start();
    }
    out
}

/// Whether a recorded state of the gateway's sandbox is a gap (the gateway could not be asked),
/// not a phase.
fn is_gap(s: &ObjectState) -> bool {
    s.conditions
        .iter()
        .any(|c| c.reason.as_deref() == Some(GATEWAY_UNREACHABLE_REASON))
}

/// The gateway's states of `sandbox` on the timeline, in order: (at_ms, state).
fn states_of<'a>(t: &'a Timeline, sandbox: &str) -> Vec<(u64, &'a ObjectState)> {
    t.entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Object(o) if o.kind == GATEWAY_SANDBOX_KIND && o.name == sandbox => {
                Some((e.at_ms, o))
            }
            _ => None,
        })
        .collect()
}

/// The commits of `commits` the timeline does not show: per sandbox, each commit must find its
/// phase among the sandbox's recorded phases after the one the previous commit found, and, if
/// the gateway logged it inside a gap of the observer, no earlier than that gap began: a phase
/// recorded before the gap cannot be the one committed in it (a restarted gateway's
/// Ready -> Provisioning is not the Provisioning seen at creation).
pub(crate) fn missed_commits<'a>(t: &Timeline, commits: &'a [PhaseCommit]) -> Vec<&'a PhaseCommit> {
    let sandboxes: BTreeSet<&str> = commits.iter().map(|c| c.sandbox.as_str()).collect();
    let mut missed = Vec::new();
    for sandbox in sandboxes {
        let mut states: Vec<(u64, Phase)> = states_of(t, sandbox)
            .into_iter()
            .filter(|(_, s)| !is_gap(s))
            .map(|(at, s)| (at, Phase::parse(s.phase.as_deref().unwrap_or_default())))
            .collect();
        // States taken from the log are recorded late, at the time they were logged.
        states.sort_by_key(|(at, _)| *at);
        let mut next = 0;
        for c in commits.iter().filter(|c| c.sandbox == sandbox) {
            let from = gap_around(t, c).map_or(next, |(gap, _)| {
                next.max(states.partition_point(|(at, _)| *at < gap))
            });
            match states[from..].iter().position(|(_, p)| *p == c.to) {
                Some(i) => next = from + i + 1,
                None => missed.push(c),
            }
        }
    }
    missed
}

/// The gap of the observer that `c` was logged in, if any, as (began at, ended at; `None` while
/// it lasts): a window where the sandbox's WatchSandbox stream was down, or where the timeline
/// records the gateway as unreachable for it (a gap state up to the next state that is none).
fn gap_around(t: &Timeline, c: &PhaseCommit) -> Option<(u64, Option<u64>)> {
    let at = logged_at(t, c)?;
    let inside = |w: &(u64, Option<u64>)| covers(w, at);
    if let Some(w) = disconnected(t, &c.sandbox).into_iter().find(inside) {
        return Some(w);
    }
    let states = states_of(t, &c.sandbox);
    states
        .iter()
        .enumerate()
        .filter(|(_, (_, s))| is_gap(s))
        .map(|(i, (from, _))| {
            let to = states[i + 1..]
                .iter()
                .find(|(_, s)| !is_gap(s))
                .map(|(to, _)| *to);
            (*from, to)
        })
        .find(inside)
}

/// When each of `sandbox`'s WatchSandbox streams was down, from the observer's own record:
/// (broke at, back at), `None` while still down.
fn disconnected(t: &Timeline, sandbox: &str) -> Vec<(u64, Option<u64>)> {
    use crate::watch::{CONNECTED, DISCONNECTED, STREAM_STATE_KEY};
    let subject = format!("{GATEWAY_SANDBOX_KIND}/{sandbox}");
    let mut windows: Vec<(u64, Option<u64>)> = Vec::new();
    for e in &t.entries {
        let Event::Observation {
            key,
            subject: Some(s),
            value,
        } = &e.event
        else {
            continue;
        };
        if key != STREAM_STATE_KEY || *s != subject {
            continue;
        }
        match value.as_str() {
            Some(DISCONNECTED) => windows.push((e.at_ms, None)),
            Some(CONNECTED) => {
                if let Some(open) = windows.last_mut().filter(|w| w.1.is_none()) {
                    open.1 = Some(e.at_ms);
                }
            }
            _ => {}
        }
    }
    windows
}

/// Where on the timeline `c` was logged, if it was logged while its sandbox's stream was down
/// (so the observer could not have been sent it).
fn while_disconnected(t: &Timeline, c: &PhaseCommit) -> Option<u64> {
    let at = logged_at(t, c)?;
    disconnected(t, &c.sandbox)
        .iter()
        .any(|w| covers(w, at))
        .then_some(at)
}

/// When the gateway logged commit `c`, on the timeline's clock.
fn logged_at(t: &Timeline, c: &PhaseCommit) -> Option<u64> {
    u64::try_from(c.logged_unix_ms? - wall_zero(t)?).ok()
}

/// Whether window (from, to), open while `to` is None, holds `at`.
fn covers(&(from, to): &(u64, Option<u64>), at: u64) -> bool {
    from <= at && to.is_none_or(|to| at <= to)
}

/// Puts on the timeline, at the time the gateway logged it, each missed commit made while the
/// stream was down, marked as seen in the gateway's log only: the observer was honestly
/// disconnected, and the checks judge the history the gateway had. Returns how many.
fn record_from_log(rec: &Recorder, t: &Timeline, missed: &[&PhaseCommit]) -> usize {
    let mut n = 0;
    for c in missed {
        let Some(at) = while_disconnected(t, c) else {
            continue;
        };
        let view = conformance_core::target::SandboxView {
            name: c.sandbox.clone(),
            phase: c.to.clone(),
            reason: Some(FROM_LOG_REASON.into()),
            message: Some(format!(
                "{} -> {}, committed while the WatchSandbox stream was down: seen in the gateway's log only",
                c.from, c.to
            )),
            exit_code: None,
            // The log line names no version.
            resource_version: None,
        };
        rec.record_watched_at(at, Event::Object(view.to_state()));
        n += 1;
    }
    n
}

/// The reason on a state taken from the gateway's log (see [`record_from_log`]).
pub const FROM_LOG_REASON: &str = "SeenInGatewayLogOnly";

/// The wall-clock time (ms since the Unix epoch) of the timeline's `at_ms` 0.
fn wall_zero(t: &Timeline) -> Option<i64> {
    t.entries.iter().find_map(|e| match &e.event {
        Event::Observation { key, value, .. } if key == WALL_CLOCK_KEY => {
            Some(value.as_i64()? - e.at_ms as i64)
        }
        _ => None,
    })
}

/// One missed commit for the reader: the sandbox, the phases, when the gateway logged it, where
/// that falls on the timeline and whether the timeline notes a gap of the observer there.
fn describe(t: &Timeline, c: &PhaseCommit) -> String {
    let mut s = format!("{} -> {} of sandbox {}", c.from, c.to, c.sandbox);
    let Some(logged) = c.logged_unix_ms else {
        return s;
    };
    let stamp = UNIX_EPOCH + Duration::from_millis(logged.max(0) as u64);
    s.push_str(&format!(
        ", logged by the gateway at {}",
        humantime::format_rfc3339_millis(stamp)
    ));
    let Some(zero) = wall_zero(t) else {
        return s;
    };
    let at = logged - zero;
    s.push_str(&format!(" ({:.3}s on the timeline", at as f64 / 1000.0));
    let gap = gap_around(t, c);
    match gap {
        Some((from, Some(to))) => s.push_str(&format!(
            ", inside the gap the timeline notes from {:.3}s to {:.3}s",
            from as f64 / 1000.0,
            to as f64 / 1000.0
        )),
        Some((from, None)) => s.push_str(&format!(
            ", inside the gap the timeline notes from {:.3}s on",
            from as f64 / 1000.0
        )),
        None => s.push_str(", while the timeline notes no gap"),
    }
    s.push(')');
    s
}

/// The observer of the gateway's phases the timeline names, if it names one.
fn observer(t: &Timeline) -> Option<String> {
    t.entries.iter().rev().find_map(|e| match &e.event {
        Event::Observation { key, value, .. } if key == crate::watch::PHASE_OBSERVER_KEY => {
            value.as_str().map(str::to_string)
        }
        _ => None,
    })
}

/// What the gateway's log held for the case, as read.
#[derive(Clone, Debug, Default)]
pub(crate) struct GatewayLogRead {
    /// The lines read, each source's in order.
    pub text: String,
    /// Sources that could not be read, and why.
    pub unreadable: Vec<String>,
}

/// Checks that every phase commit the gateway logged for `sandboxes` is on the timeline,
/// waiting up to `settle` for commits the observer has yet to record (it runs meanwhile). Says
/// on the timeline what was checked, or why nothing could be; Err names what was missed.
pub(crate) async fn verify(
    rec: &Recorder,
    log: &GatewayLogRead,
    sandboxes: &BTreeSet<String>,
    settle: Duration,
) -> Result<(), TargetError> {
    if sandboxes.is_empty() {
        return Ok(());
    }
    let mut commits: Vec<PhaseCommit> = phase_commits(&log.text)
        .into_iter()
        .filter(|c| sandboxes.contains(&c.sandbox))
        .collect();
    // Lines of several gateway pods (a restart) in the order they were logged.
    commits.sort_by_key(|c| c.logged_unix_ms.unwrap_or(i64::MAX));
    let names = sandboxes.iter().cloned().collect::<Vec<_>>().join(", ");
    let unread = if log.unreadable.is_empty() {
        String::new()
    } else {
        format!(
            "; parts of the gateway's log could not be read: {}",
            log.unreadable.join("; ")
        )
    };
    if commits.is_empty() {
        rec.note(format!(
            "the gateway logged no phase commit (`{PHASE_CHANGED}`) of this case's sandboxes ({names}){unread}: whether the observer missed one is not checked"
        ));
        return Ok(());
    }
    let end = tokio::time::Instant::now() + settle;
    let mut from_log = 0;
    loop {
        let t = rec.snapshot();
        let missed = missed_commits(&t, &commits);
        if missed.is_empty() {
            let from_log = if from_log == 0 {
                String::new()
            } else {
                format!(
                    ", {from_log} of them from the gateway's log only (committed while the observer's stream was down)"
                )
            };
            rec.note(format!(
                "all {} phase commits the gateway logged for this case's sandboxes ({names}) are on the timeline{from_log}{unread}",
                commits.len()
            ));
            return Ok(());
        }
        if tokio::time::Instant::now() >= end && from_log == 0 {
            // Once: what the stream could not send is taken from the log, then judged again.
            from_log = record_from_log(rec, &t, &missed);
            if from_log > 0 {
                continue;
            }
        }
        if tokio::time::Instant::now() >= end {
            let by = observer(&t).map_or(String::new(), |o| format!(" (phase observer: {o})"));
            let message = format!(
                "{MISSED} {} of the {} phase commits the gateway logged for this case's sandboxes{by}: {}{unread}",
                missed.len(),
                commits.len(),
                missed
                    .iter()
                    .map(|c| describe(&t, c))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            rec.note(message.clone());
            return Err(TargetError::infra(message));
        }
        let wake = rec.next_watched_state(None);
        let _ = tokio::time::timeout_at(
            end.min(tokio::time::Instant::now() + Duration::from_millis(100)),
            wake,
        )
        .await;
    }
}

/// Whether the timeline says the observer missed a commit (the case then wants its
/// diagnostics bundle).
pub(crate) fn noted_missed(t: &Timeline) -> bool {
    t.entries
        .iter()
        .any(|e| matches!(&e.event, Event::Note { message } if message.starts_with(MISSED)))
}

#[cfg(test)]
mod tests;
