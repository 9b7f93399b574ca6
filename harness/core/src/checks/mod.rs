//! Checks: a small assertion vocabulary evaluated over a recorded timeline.
//!
//! Checks never look at a live system; they read the timeline. That makes every verdict
//! reproducible from a saved timeline (`openshell-conformance check`), and lets a check speak
//! about a whole transition history rather than one poll.

mod backoff;
mod ledger;
mod predicate;

pub(crate) use ledger::{Ledger, SentinelClass};

use crate::timeline::{
    ActionStatus, Entry, Event, FaultPhase, ObjectState, SentinelOp, SentinelResult, StartCount,
    StoppedStep, Timeline, World,
};
pub use crate::verdict::{
    Anchor, Check, CheckKind, CheckOutcome, CheckStatus, Cmp, Counted, Predicate, Selector, Window,
    WindowMs, fmt_ms,
};

impl Anchor {
    /// Index of the entry this anchor names.
    pub fn resolve(&self, t: &Timeline) -> Option<usize> {
        let e = &t.entries;
        match self {
            Self::RunStart => (!e.is_empty()).then_some(0),
            Self::RunEnd => e.len().checked_sub(1),
            Self::Marker { label, nth } => nth_index(
                e,
                *nth,
                |ev| matches!(ev, Event::Marker { label: l } if l == label),
            ),
            Self::FaultStart { id } => nth_index(
                e,
                1,
                |ev| matches!(ev, Event::Fault(f) if &f.id == id && f.phase == FaultPhase::Started),
            ),
            Self::FaultEnd { id } => nth_index(
                e,
                1,
                |ev| matches!(ev, Event::Fault(f) if &f.id == id && f.phase == FaultPhase::Ended),
            ),
            Self::ActionStart { name, nth } => nth_index(
                e,
                *nth,
                |ev| matches!(ev, Event::Action(a) if &a.name == name && a.status == ActionStatus::Started),
            ),
            Self::ActionEnd { name, nth } => nth_index(
                e,
                *nth,
                |ev| matches!(ev, Event::Action(a) if &a.name == name && a.status != ActionStatus::Started),
            ),
        }
    }
}

fn nth_index(entries: &[Entry], nth: usize, f: impl Fn(&Event) -> bool) -> Option<usize> {
    entries
        .iter()
        .enumerate()
        .filter(|(_, e)| f(&e.event))
        .nth(nth.saturating_sub(1))
        .map(|(i, _)| i)
}

impl Check {
    #[cfg(test)]
    pub(crate) fn evaluate(&self, t: &Timeline) -> CheckOutcome {
        self.evaluate_after(t, t.stopped_step().as_ref())
    }

    /// Judges the check over `t`, whose steps `stopped` ended early if it is given: a check
    /// that finds nothing to judge then is not evaluated, naming the step and why, instead of
    /// failing under its own requirements for what another step broke.
    fn evaluate_after(&self, t: &Timeline, stopped: Option<&StoppedStep>) -> CheckOutcome {
        let verdict = match &self.kind {
            CheckKind::Eventually {
                predicate,
                after,
                within_ms,
            } => eval_eventually(t, predicate, after, *within_ms),
            CheckKind::Never { predicate, during } => eval_never(t, predicate, during),
            CheckKind::HoldsUntil {
                predicate,
                from,
                until,
            } => eval_holds_until(t, predicate, from, until),
            CheckKind::PhaseSequence {
                object,
                during,
                expected,
                allowed,
            } => eval_phase_sequence(t, object, during, expected, allowed),
            CheckKind::Count {
                counted,
                during,
                cmp,
                n,
            } => eval_count(t, counted, during.as_ref(), *cmp, *n),
            CheckKind::Sentinels => eval_sentinels(t),
            CheckKind::UsableOnceReady {
                sandbox,
                after,
                within_ms,
            } => eval_usable_once_ready(t, sandbox, after, *within_ms),
            CheckKind::CappedBackoff {
                sandbox,
                op,
                cap_ms,
                attempt_ms,
                retry_ms,
            } => {
                let v = backoff::eval_capped_backoff(
                    t,
                    sandbox,
                    *op,
                    backoff::Limits {
                        any_ms: cap_ms + attempt_ms,
                        retry_ms: cap_ms + retry_ms.unwrap_or(*attempt_ms),
                    },
                );
                Verdict {
                    passed: v.passed,
                    lack: match v.missing {
                        None => Lack::Judged,
                        Some(backoff::Missing::NeverRead) => Lack::Evidence,
                        Some(backoff::Missing::Unreadable) => Lack::Premise,
                    },
                    window: None,
                    message: v.message,
                    last_seen: Vec::new(),
                }
            }
        };
        // A case stopped by a step names that step first: it is why the evidence, or the
        // premise (a Ready that never came after a hung start), is missing.
        let not_evaluated = match (verdict.lack, stopped) {
            (Lack::Evidence | Lack::Premise, Some(step)) => {
                Some(format!("{step}; {}", verdict.message))
            }
            (Lack::Premise, None) => Some(verdict.message.clone()),
            _ => None,
        };
        CheckOutcome {
            name: self.name.clone(),
            requirements: self.requirements.clone(),
            passed: verdict.passed,
            not_evaluated,
            window: verdict.window,
            expected: self.expectation(),
            message: verdict.message,
            last_seen: verdict.last_seen,
        }
    }
}

/// Evaluates a plan of checks over a timeline.
pub(crate) fn evaluate_all(checks: &[Check], t: &Timeline) -> Vec<CheckOutcome> {
    let stopped = t.stopped_step();
    checks
        .iter()
        .map(|c| c.evaluate_after(t, stopped.as_ref()))
        .collect()
}

/// Whether the timeline held what a check needs to judge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lack {
    Judged,
    /// The evidence is missing (an anchor that never happened, a value never observed, a
    /// sentinel never written or never read back): after a step stopped the case that is the
    /// step's doing, and the check is not evaluated. With every step run it stays a failure,
    /// saying so: the scenario promised what it did not record.
    Evidence,
    /// What the check is about never came to be (a sandbox never Ready has no "usable once
    /// Ready"): not evaluated whatever ended the steps; the checks of that premise judge it.
    Premise,
}

struct Verdict {
    passed: bool,
    lack: Lack,
    window: Option<WindowMs>,
    message: String,
    last_seen: Vec<ObjectState>,
}

impl Verdict {
    fn fail(message: String) -> Self {
        Self {
            passed: false,
            lack: Lack::Judged,
            window: None,
            message,
            last_seen: Vec::new(),
        }
    }

    /// Nothing to judge: see [`Lack::Evidence`].
    fn lacking(message: String) -> Self {
        Self {
            lack: Lack::Evidence,
            ..Self::fail(message)
        }
    }

    /// Nothing to judge: see [`Lack::Premise`].
    fn without_premise(message: String) -> Self {
        Self {
            lack: Lack::Premise,
            ..Self::fail(message)
        }
    }
}

fn world_through(t: &Timeline, idx: usize) -> World<'_> {
    let mut w = World::default();
    for e in &t.entries[..=idx] {
        w.apply(&e.event);
    }
    w
}

/// All objects, deleted ones too, that any of the selectors matches.
fn seen(world: &World, selectors: &[&Selector]) -> Vec<ObjectState> {
    world
        .all()
        .filter(|o| selectors.iter().any(|s| s.matches(o)))
        .cloned()
        .collect()
}

fn missing_anchor(a: &Anchor) -> Verdict {
    Verdict::lacking(format!(
        "{a} never happened in this run, so the check could not be evaluated"
    ))
}

fn eval_eventually(t: &Timeline, p: &Predicate, after: &Anchor, within_ms: u64) -> Verdict {
    let Some(i) = after.resolve(t) else {
        return missing_anchor(after);
    };
    let start = t.entries[i].at_ms;
    let deadline = start + within_ms;
    let mut world = world_through(t, i);
    let mut j = i;
    loop {
        if p.holds(&world) {
            let at = t.entries[j].at_ms;
            return Verdict {
                lack: Lack::Judged,
                passed: true,
                window: Some(WindowMs {
                    from_ms: start,
                    to_ms: deadline,
                }),
                message: format!(
                    "held at {}, {} after {after}",
                    fmt_ms(at),
                    fmt_ms(at - start)
                ),
                last_seen: seen(&world, &p.selectors()),
            };
        }
        j += 1;
        // Within zero means at the anchor itself, not at whatever else shares its millisecond.
        if within_ms == 0 || j >= t.entries.len() || t.entries[j].at_ms > deadline {
            break;
        }
        world.apply(&t.entries[j].event);
    }
    let end = t.entries.last().map_or(0, |e| e.at_ms);
    let message = if end < deadline {
        format!(
            "did not hold by the end of the run at {}, {} before the deadline",
            fmt_ms(end),
            fmt_ms(deadline - end)
        )
    } else {
        format!("did not hold by the deadline at {}", fmt_ms(deadline))
    };
    Verdict {
        lack: Lack::Judged,
        passed: false,
        window: Some(WindowMs {
            from_ms: start,
            to_ms: deadline,
        }),
        message,
        last_seen: seen(&world, &p.selectors()),
    }
}

/// Walks the window, calling `bad` on the world at the window start and after every entry in
/// it; returns the first instant at which `bad` is true.
struct Scan<'t> {
    window: WindowMs,
    /// When `bad` first held, and the world then.
    first_bad: Option<(u64, World<'t>)>,
    /// The world at the end of the window.
    end: World<'t>,
}

fn scan_window<'t>(
    t: &'t Timeline,
    w: &Window,
    bad: impl Fn(&World) -> bool,
) -> Result<Scan<'t>, Verdict> {
    let i = w.from.resolve(t).ok_or_else(|| missing_anchor(&w.from))?;
    let k = w.to.resolve(t).ok_or_else(|| missing_anchor(&w.to))?;
    let window = WindowMs {
        from_ms: t.entries[i].at_ms,
        to_ms: t.entries[k].at_ms,
    };
    if k < i {
        return Err(Verdict::fail(format!(
            "the window is empty: {} came before {}",
            w.to, w.from
        )));
    }
    let mut world = world_through(t, i);
    for j in i..=k {
        if j > i {
            world.apply(&t.entries[j].event);
        }
        if bad(&world) {
            return Ok(Scan {
                window,
                first_bad: Some((t.entries[j].at_ms, world.clone())),
                end: world,
            });
        }
    }
    Ok(Scan {
        window,
        first_bad: None,
        end: world,
    })
}

fn eval_never(t: &Timeline, p: &Predicate, during: &Window) -> Verdict {
    let mut v = judge_window(
        t,
        p,
        during,
        |w| p.holds(w),
        ("it held at", "it never held"),
    );
    // A pass over sampled states says less than one over streamed changes: say how coarse.
    let mut kinds: Vec<&str> = p.selectors().iter().map(|s| s.kind.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    for kind in kinds {
        if let Some(every) = t.sampling_interval(kind) {
            v.message.push_str(&format!(
                " ({kind} states were sampled every {}: a shorter excursion may be unseen)",
                fmt_ms(every.as_millis() as u64)
            ));
        }
    }
    v
}

fn eval_holds_until(t: &Timeline, p: &Predicate, from: &Anchor, until: &Anchor) -> Verdict {
    let w = Window::new(from.clone(), until.clone());
    judge_window(
        t,
        p,
        &w,
        |world| !p.holds(world),
        ("it stopped holding at", "it held throughout"),
    )
}

/// Fails at the first instant of the window where `bad` holds; `words` say what happened then,
/// and what a pass means.
fn judge_window(
    t: &Timeline,
    p: &Predicate,
    w: &Window,
    bad: impl Fn(&World) -> bool,
    (failed_at, passed): (&str, &str),
) -> Verdict {
    let sel = p.selectors();
    match scan_window(t, w, bad) {
        Err(v) => v,
        Ok(Scan {
            window,
            first_bad: Some((at, world)),
            ..
        }) => Verdict {
            lack: Lack::Judged,
            passed: false,
            window: Some(window),
            message: format!("{failed_at} {}", fmt_ms(at)),
            last_seen: seen(&world, &sel),
        },
        Ok(Scan {
            window,
            first_bad: None,
            end,
        }) => Verdict {
            lack: Lack::Judged,
            passed: true,
            window: Some(window),
            message: passed.to_string(),
            last_seen: seen(&end, &sel),
        },
    }
}

fn eval_phase_sequence(
    t: &Timeline,
    object: &Selector,
    during: &Window,
    expected: &[String],
    allowed: &[String],
) -> Verdict {
    let (Some(i), Some(k)) = (during.from.resolve(t), during.to.resolve(t)) else {
        return missing_anchor(if during.from.resolve(t).is_none() {
            &during.from
        } else {
            &during.to
        });
    };
    // Phase history of the matching object(s), consecutive repeats folded.
    let phase_of = |o: &ObjectState| {
        if o.deleted {
            "<deleted>".to_string()
        } else {
            o.phase.clone().unwrap_or_else(|| "<none>".to_string())
        }
    };
    let mut world = world_through(t, i);
    let mut history: Vec<(u64, String)> = Vec::new();
    let mut push = |at: u64, phase: String| {
        if history.last().is_none_or(|(_, p)| *p != phase) {
            history.push((at, phase));
        }
    };
    // A state recorded while the gateway was unreachable is a gap, not a phase the sandbox
    // went through: the phases on either side of it are what was seen.
    for o in world.all().filter(|o| object.matches(o) && !o.unobserved()) {
        push(t.entries[i].at_ms, phase_of(o));
    }
    for e in t.entries.iter().take(k + 1).skip(i + 1) {
        world.apply(&e.event);
        if let Event::Object(o) = &e.event
            && object.matches(o)
            && !o.unobserved()
        {
            push(e.at_ms, phase_of(o));
        }
    }
    let phases: Vec<&str> = history.iter().map(|(_, p)| p.as_str()).collect();
    let shown = history
        .iter()
        .map(|(at, p)| format!("{p}@{}", fmt_ms(*at)))
        .collect::<Vec<_>>()
        .join(" -> ");
    let window = WindowMs {
        from_ms: t.entries[i].at_ms,
        to_ms: t.entries[k].at_ms,
    };
    let last_seen = seen(&world, &[object]);
    match match_sequence(&phases, expected, allowed) {
        Ok(()) => Verdict {
            lack: Lack::Judged,
            passed: true,
            window: Some(window),
            message: format!("observed {shown}"),
            last_seen,
        },
        Err(why) => Verdict {
            lack: Lack::Judged,
            passed: false,
            window: Some(window),
            message: format!(
                "observed {}: {why}",
                if shown.is_empty() {
                    "no phases"
                } else {
                    &shown
                }
            ),
            last_seen,
        },
    }
}

/// Matches `E0 (A|E0)* E1 (A|E1)* … Ek` where A are the allowed intermediates. Greedy matching
/// is exact here because an expected phase is taken as soon as it appears, and staying on a
/// phase is always allowed; it returns a description of the first mismatch.
fn match_sequence(phases: &[&str], expected: &[String], allowed: &[String]) -> Result<(), String> {
    let Some(first) = expected.first() else {
        return Ok(());
    };
    let mut it = phases.iter().enumerate();
    match it.next() {
        Some((_, p)) if *p == first => {}
        Some((_, p)) => return Err(format!("it started in {p}, not {first}")),
        None => return Err(format!("the object was never seen; expected {first}")),
    }
    let mut idx = 0;
    for (_, p) in it {
        if idx + 1 < expected.len() && *p == expected[idx + 1] {
            idx += 1;
        } else if allowed.iter().any(|a| a == p) || *p == expected[idx] {
            continue;
        } else {
            return Err(format!(
                "{p} after {} is neither the next expected phase{} nor an allowed intermediate",
                expected[idx],
                expected
                    .get(idx + 1)
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            ));
        }
    }
    let last = phases.last().copied().unwrap_or_default();
    if idx + 1 < expected.len() {
        return Err(format!(
            "it never reached {} (stuck after {})",
            expected[idx + 1],
            expected[idx]
        ));
    }
    if last != expected[idx] {
        return Err(format!("it ended in {last}, not {}", expected[idx]));
    }
    Ok(())
}

fn eval_count(
    t: &Timeline,
    counted: &Counted,
    during: Option<&Window>,
    cmp: Cmp,
    n: u64,
) -> Verdict {
    let (from, to) = match during {
        None => (0, t.entries.len().saturating_sub(1)),
        Some(w) => match (w.from.resolve(t), w.to.resolve(t)) {
            (Some(a), Some(b)) => (a, b),
            (None, _) => return missing_anchor(&w.from),
            (_, None) => return missing_anchor(&w.to),
        },
    };
    let slice = t.entries.get(from..=to).unwrap_or(&[]);
    let window = slice.first().zip(slice.last()).map(|(a, b)| WindowMs {
        from_ms: a.at_ms,
        to_ms: b.at_ms,
    });
    let mut last_seen = Vec::new();
    let actual = match counted {
        Counted::Actions { name, status } => slice
            .iter()
            .filter(|e| {
                matches!(&e.event, Event::Action(a) if &a.name == name
                    && a.status != ActionStatus::Started
                    && status.is_none_or(|s| s == a.status))
            })
            .count() as u64,
        Counted::Incarnations { object } => {
            let mut uids = std::collections::BTreeSet::new();
            // What already lived when the window opened counts too: an object that never
            // changed inside the window is still one incarnation.
            if from > 0 {
                let world = world_through(t, from - 1);
                for o in object.live(&world) {
                    uids.insert(o.uid.clone().unwrap_or_default());
                    last_seen.push(o.clone());
                }
            }
            for e in slice {
                if let Event::Object(o) = &e.event
                    && object.matches(o)
                {
                    uids.insert(o.uid.clone().unwrap_or_default());
                    last_seen.retain(|s: &ObjectState| s.object_ref() != o.object_ref());
                    last_seen.push(o.clone());
                }
            }
            uids.len() as u64
        }
        Counted::MainProcessStarts { sandbox } => {
            match starts_in(t, sandbox, during.is_some(), from, to) {
                Ok(n) => n,
                Err(why) => {
                    return Verdict {
                        lack: Lack::Judged,
                        passed: false,
                        window,
                        message: format!("not known: {why}"),
                        last_seen,
                    };
                }
            }
        }
        Counted::UnmarkedStarts { sandbox, marks } => {
            let read = slice
                .iter()
                .enumerate()
                .rev()
                .find_map(|(i, e)| match &e.event {
                    Event::Observation { key, value, .. } if key == marks => {
                        Some((from + i, value))
                    }
                    _ => None,
                });
            let Some((at, value)) = read else {
                return Verdict::lacking(format!(
                    "{marks} was never observed: the workspace's start marks were not read"
                ));
            };
            let Some(marked) = value.as_u64() else {
                return Verdict::fail(format!(
                    "the last {marks} observation is not a count: {value}"
                ));
            };
            match starts_in(t, sandbox, false, from, at) {
                Ok(started) => {
                    let unmarked = started.saturating_sub(marked);
                    return Verdict {
                        lack: Lack::Judged,
                        passed: cmp.test(unmarked, n),
                        window,
                        message: format!(
                            "counted {unmarked}: the target reported {started} starts by then, the workspace held {marked} marks"
                        ),
                        last_seen,
                    };
                }
                Err(why) => {
                    return Verdict {
                        lack: Lack::Judged,
                        passed: false,
                        window,
                        message: format!("not known: {why}"),
                        last_seen,
                    };
                }
            }
        }
        Counted::Observed { key } => {
            let value = slice.iter().rev().find_map(|e| match &e.event {
                Event::Observation { key: k, value, .. } if k == key => Some(value.clone()),
                _ => None,
            });
            match value.as_ref().and_then(|v| v.as_u64()) {
                Some(v) => v,
                None => {
                    return Verdict {
                        lack: if value.is_none() {
                            Lack::Evidence
                        } else {
                            Lack::Judged
                        },
                        passed: false,
                        window,
                        message: match value {
                            Some(v) => format!("the last {key} observation is not a count: {v}"),
                            None => format!("{key} was never observed"),
                        },
                        last_seen,
                    };
                }
            }
        }
    };
    Verdict {
        lack: Lack::Judged,
        passed: cmp.test(actual, n),
        window,
        message: format!("counted {actual}"),
        last_seen,
    }
}

/// The main-process starts of `sandbox` in the entries `from..=to`; the whole run without a
/// window. Err: why the count is not known.
fn starts_in(
    t: &Timeline,
    sandbox: &str,
    windowed: bool,
    from: usize,
    to: usize,
) -> Result<u64, String> {
    let end = match t.main_process_starts(sandbox, to) {
        StartCount::Known(n) => n,
        StartCount::Unknown(why) => return Err(why),
    };
    if !windowed {
        return Ok(end);
    }
    match t.main_process_starts_before(sandbox, from) {
        StartCount::Known(n) => Ok(end.saturating_sub(n)),
        StartCount::Unknown(why) => Err(why),
    }
}

fn eval_sentinels(t: &Timeline) -> Verdict {
    let ledger = Ledger::from_timeline(t);
    let summaries = ledger.summaries();
    if summaries.is_empty() {
        // A write the product's path refused is evidence; no write at all is nothing to judge.
        let refused: Vec<String> = t
            .entries
            .iter()
            .filter_map(|e| match &e.event {
                Event::Sentinel(s) if s.op == SentinelOp::Write => match &s.result {
                    SentinelResult::Failed(why) => Some(format!("{}:{} {why}", s.sandbox, s.key)),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        if refused.is_empty() {
            return Verdict::lacking("no sentinel was written".to_string());
        }
        return Verdict::fail(format!(
            "no sentinel was written: the writes failed: {}",
            refused.join("; ")
        ));
    }
    let bad: Vec<String> = summaries
        .iter()
        .filter(|s| s.class != SentinelClass::Stable)
        .map(|s| s.describe())
        .collect();
    let good = summaries.len() - bad.len();
    if bad.is_empty() {
        Verdict {
            lack: Lack::Judged,
            passed: true,
            window: None,
            message: summaries
                .iter()
                .map(|s| s.describe())
                .collect::<Vec<_>>()
                .join("; "),
            last_seen: Vec::new(),
        }
    } else {
        let message = format!(
            "{} of {} sentinels not intact: {}",
            bad.len(),
            good + bad.len(),
            bad.join("; ")
        );
        // Written, and no read of them ever ran: nothing says whether they survived.
        let unread = summaries
            .iter()
            .filter(|s| s.class != SentinelClass::Stable)
            .all(|s| s.class == SentinelClass::NeverRead && s.failed_reads == 0);
        if unread {
            Verdict::lacking(message)
        } else {
            Verdict::fail(message)
        }
    }
}

/// See [`CheckKind::UsableOnceReady`].
fn eval_usable_once_ready(t: &Timeline, sandbox: &str, after: &Anchor, within_ms: u64) -> Verdict {
    let Some(i) = after.resolve(t) else {
        return missing_anchor(after);
    };
    let view = Selector::named(crate::timeline::GATEWAY_SANDBOX_KIND, sandbox);
    let ready = Predicate::phase(view.clone(), &[crate::phase::Phase::Ready]);
    let mut world = world_through(t, i);
    // Since when the view has been Ready, counted from the anchor at the earliest: a Ready
    // that held before the anchor (a gateway's stored phase, say) is judged from the anchor,
    // and a Ready the sandbox left and reached again from its latest turn.
    let mut ready_since = ready.holds(&world).then_some(t.entries[i].at_ms);
    let mut first_ready = ready_since;
    // The shell's answers after the anchor, in order: (started at, the Ready it started in).
    let mut started: std::collections::BTreeMap<u64, (u64, Option<u64>)> =
        std::collections::BTreeMap::new();
    let mut refused: Vec<(u64, u64, String)> = Vec::new();
    let mut worked = None;
    for (j, e) in t.entries.iter().enumerate().skip(i) {
        if j > i {
            world.apply(&e.event);
            if let Event::Object(_) = &e.event {
                match (ready.holds(&world), ready_since) {
                    (true, None) => {
                        ready_since = Some(e.at_ms);
                        first_ready.get_or_insert(e.at_ms);
                    }
                    (false, Some(_)) => ready_since = None,
                    _ => {}
                }
            }
        }
        let Event::Action(a) = &e.event else { continue };
        if a.name != "exec" || a.subject.as_deref() != Some(sandbox) {
            continue;
        }
        match a.status {
            ActionStatus::Started => {
                started.insert(a.id, (e.at_ms, ready_since));
            }
            ActionStatus::Ok => {
                worked = Some(
                    started
                        .get(&a.id)
                        .copied()
                        .unwrap_or((e.at_ms, ready_since)),
                );
                break;
            }
            // A refusal while the sandbox was not Ready says nothing of Ready.
            ActionStatus::Refused | ActionStatus::Error => {
                let (at, since) = started
                    .get(&a.id)
                    .copied()
                    .unwrap_or((e.at_ms, ready_since));
                if let Some(since) = since {
                    refused.push((at, since, a.detail.clone().unwrap_or_default()));
                }
            }
        }
    }
    let Some(first_ready) = first_ready else {
        return Verdict::without_premise(format!(
            "{sandbox} was never Ready after {after}: whether Ready was usable cannot be told (the checks on Ready judge that)"
        ));
    };
    let last_seen = seen(&world, &[&view]);
    // The refusals within the Ready that began at `since`.
    let refusals = |since: u64| {
        let within: Vec<&(u64, u64, String)> =
            refused.iter().filter(|(_, s, _)| *s == since).collect();
        match within.as_slice() {
            [] => String::new(),
            [(at, _, why), ..] => format!(
                "; its shell refused {} command(s) before, the first at {}: {why}",
                within.len(),
                fmt_ms(*at)
            ),
        }
    };
    match worked {
        Some((at, Some(ready_at))) => {
            let gap = at.saturating_sub(ready_at);
            let passed = gap <= within_ms;
            Verdict {
                lack: Lack::Judged,
                passed,
                window: Some(WindowMs {
                    from_ms: ready_at,
                    to_ms: ready_at + within_ms,
                }),
                message: format!(
                    "{sandbox} Ready at {}; the first command that worked through its shell started at {}, {} after Ready{}{}",
                    fmt_ms(ready_at),
                    fmt_ms(at),
                    fmt_ms(gap),
                    refusals(ready_at),
                    if passed {
                        ""
                    } else {
                        ": Ready, but not usable"
                    }
                ),
                last_seen,
            }
        }
        // It worked before the harness saw the Ready it ran in: usable by then.
        Some((at, None)) => Verdict {
            lack: Lack::Judged,
            passed: true,
            window: None,
            message: format!(
                "a command worked through the shell of {sandbox} at {}, while it was not seen Ready",
                fmt_ms(at)
            ),
            last_seen,
        },
        // The steps did not get to try it (they stopped, or the sandbox left Ready first).
        None if refused.is_empty() => Verdict::without_premise(format!(
            "no command was run through the shell of {sandbox} while it was Ready after {}",
            fmt_ms(first_ready)
        )),
        None => {
            let since = refused[0].1;
            Verdict {
                lack: Lack::Judged,
                passed: false,
                window: Some(WindowMs {
                    from_ms: since,
                    to_ms: since + within_ms,
                }),
                message: format!(
                    "{sandbox} Ready at {}, but no command worked through its shell after it{}: Ready, but not usable",
                    fmt_ms(since),
                    refusals(since)
                ),
                last_seen,
            }
        }
    }
}

#[cfg(test)]
mod tests;
