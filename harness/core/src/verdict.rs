//! The check vocabulary as data: what a check demands ([`Check`], with its anchors, windows,
//! selectors and predicates) and what it concluded ([`CheckOutcome`]). A leaf below the
//! timeline: the timeline stores a case's check plan and outcomes, and
//! [`checks`](crate::checks) evaluates the plan over the timeline; the types and their wording
//! live here, the evaluation there.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::keys::{FaultKey, Marker};
use crate::record::{ActionStatus, ObjectState};

/// A point in a timeline that checks measure from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "at", rename_all = "snake_case")]
pub enum Anchor {
    RunStart,
    RunEnd,
    /// The `nth` (1-based) marker with this label.
    Marker {
        label: String,
        #[serde(default = "one")]
        nth: usize,
    },
    /// The fault is in effect.
    FaultStart {
        id: String,
    },
    /// The fault was restored.
    FaultEnd {
        id: String,
    },
    /// The `nth` (1-based) action with this name started.
    ActionStart {
        name: String,
        #[serde(default = "one")]
        nth: usize,
    },
    /// The `nth` (1-based) action with this name finished, successfully or not.
    ActionEnd {
        name: String,
        #[serde(default = "one")]
        nth: usize,
    },
}

fn one() -> usize {
    1
}

impl Anchor {
    pub fn marker(marker: &Marker) -> Self {
        Self::Marker {
            label: marker.to_string(),
            nth: 1,
        }
    }

    pub fn fault_start(key: &FaultKey) -> Self {
        Self::FaultStart {
            id: key.to_string(),
        }
    }

    pub fn fault_end(key: &FaultKey) -> Self {
        Self::FaultEnd {
            id: key.to_string(),
        }
    }

    pub fn action_end(name: &str) -> Self {
        Self::ActionEnd {
            name: name.to_string(),
            nth: 1,
        }
    }
}

impl std::fmt::Display for Anchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RunStart => write!(f, "run start"),
            Self::RunEnd => write!(f, "run end"),
            Self::Marker { label, nth: 1 } => write!(f, "marker '{label}'"),
            Self::Marker { label, nth } => write!(f, "marker '{label}' #{nth}"),
            Self::FaultStart { id } => write!(f, "fault {id} started"),
            Self::FaultEnd { id } => write!(f, "fault {id} ended"),
            Self::ActionStart { name, nth } => write!(f, "action {name} #{nth} started"),
            Self::ActionEnd { name, nth } => write!(f, "action {name} #{nth} finished"),
        }
    }
}

/// The part of a timeline between two anchors, both included.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub from: Anchor,
    pub to: Anchor,
}

impl Window {
    pub fn new(from: Anchor, to: Anchor) -> Self {
        Self { from, to }
    }

    pub fn fault(key: &FaultKey) -> Self {
        Self::new(Anchor::fault_start(key), Anchor::fault_end(key))
    }

    pub fn whole_run() -> Self {
        Self::new(Anchor::RunStart, Anchor::RunEnd)
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "from {} to {}", self.from, self.to)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cmp {
    Eq,
    AtLeast,
    AtMost,
}

impl Cmp {
    pub(crate) fn test(self, actual: u64, n: u64) -> bool {
        match self {
            Self::Eq => actual == n,
            Self::AtLeast => actual >= n,
            Self::AtMost => actual <= n,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Eq => "exactly",
            Self::AtLeast => "at least",
            Self::AtMost => "at most",
        }
    }
}

/// What a count check counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "of", rename_all = "snake_case")]
pub enum Counted {
    /// Finished actions with this name (and outcome, if given).
    Actions {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<ActionStatus>,
    },
    /// Distinct incarnations (uids) of matching objects: a replaced pod counts twice.
    Incarnations { object: Selector },
    /// The latest value of a numeric observation, such as a measured latency.
    Observed { key: String },
    /// Starts of the sandbox's main process, as its target reported them
    /// ([`crate::timeline::MAIN_PROCESS_STARTS_KEY`]): over the whole run, or those in the
    /// window (whole milliseconds at both ends). Unknown when the target does not report them,
    /// never 0.
    MainProcessStarts { sandbox: String },
    /// Main-process starts the target reported that left no mark in the workspace: the
    /// workload appends a line to a marker file of its workspace each time it starts, and the
    /// latest `marks` observation counts those lines. The reported starts by then, minus the
    /// marks: more than 0 means the workspace lost what the workload wrote (R6), whatever the
    /// number of starts was.
    UnmarkedStarts { sandbox: String, marks: String },
}

impl std::fmt::Display for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Actions { name, status: None } => write!(f, "{name} actions"),
            Self::Actions {
                name,
                status: Some(s),
            } => write!(f, "{name} actions with outcome {s:?}"),
            Self::Incarnations { object } => write!(f, "incarnations of {object}"),
            Self::Observed { key } => write!(f, "observed {key}"),
            Self::MainProcessStarts { sandbox } => {
                write!(f, "main-process starts of {sandbox} reported by the target")
            }
            Self::UnmarkedStarts { sandbox, .. } => write!(
                f,
                "main-process starts of {sandbox} without a mark in its workspace"
            ),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum CheckKind {
    /// `predicate` holds at some instant within `within_ms` after `after`.
    Eventually {
        predicate: Predicate,
        after: Anchor,
        within_ms: u64,
    },
    /// `predicate` holds at no instant of the window.
    Never {
        predicate: Predicate,
        during: Window,
    },
    /// `predicate` holds at every instant from `from` until `until`.
    HoldsUntil {
        predicate: Predicate,
        from: Anchor,
        until: Anchor,
    },
    /// The object's phases during the window, consecutive repeats folded, are `expected` in
    /// order, where after each expected phase only `allowed` intermediates (or that phase again)
    /// may appear before the next; the history must end in the last expected phase.
    PhaseSequence {
        object: Selector,
        during: Window,
        expected: Vec<String>,
        #[serde(default)]
        allowed: Vec<String>,
    },
    Count {
        counted: Counted,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        during: Option<Window>,
        cmp: Cmp,
        n: u64,
    },
    /// Every sentinel written was read back intact (see [`Ledger`]).
    Sentinels,
    /// After each failed `op` attempt the supervisor logged for `sandbox` (observation
    /// [`crate::retries::ATTEMPTS_KEY`]), its next attempt came within `cap_ms` (the longest
    /// back-off sleep) plus `attempt_ms` (the longest one attempt may take): the back-off stops
    /// growing at its cap, no attempt hangs, and recovery after the gateway returns takes at
    /// most one more sleep and attempt (R5). A failure followed by another failure of the same
    /// operation (a retry the gateway answered by refusing it) is held to `cap_ms` plus
    /// `retry_ms` instead, the time such a refused attempt takes: that is what makes a sleep
    /// just over its cap visible (see [`crate::retries::Gap::refused_retry`]). Absent in
    /// timelines written before it: there every gap had the looser bound.
    CappedBackoff {
        sandbox: String,
        op: crate::retries::RetryOp,
        cap_ms: u64,
        attempt_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_ms: Option<u64>,
    },
    /// Ready means usable: the first command `sandbox`'s shell runs after `after` (an `exec`
    /// action that worked) starts within `within_ms` of the Ready it ran in: from that Ready's
    /// turn, or from `after` where the sandbox was Ready since before it. Execs refused in
    /// that Ready are named; refusals while it was not Ready say nothing of Ready; a sandbox
    /// that never turned Ready, or whose shell was never tried, leaves nothing to judge.
    UsableOnceReady {
        sandbox: String,
        after: Anchor,
        within_ms: u64,
    },
}

/// A named check tied to the requirements it verifies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub requirements: Vec<String>,
    #[serde(flatten)]
    pub kind: CheckKind,
}

impl Check {
    pub fn new(name: impl Into<String>, requirements: &[&str], kind: CheckKind) -> Self {
        Self {
            name: name.into(),
            requirements: requirements.iter().map(|r| r.to_string()).collect(),
            kind,
        }
    }

    pub fn eventually(
        name: &str,
        reqs: &[&str],
        predicate: Predicate,
        after: Anchor,
        within: Duration,
    ) -> Self {
        Self::new(
            name,
            reqs,
            CheckKind::Eventually {
                predicate,
                after,
                within_ms: within.as_millis() as u64,
            },
        )
    }

    pub fn never(name: &str, reqs: &[&str], predicate: Predicate, during: Window) -> Self {
        Self::new(name, reqs, CheckKind::Never { predicate, during })
    }

    pub fn holds_until(
        name: &str,
        reqs: &[&str],
        predicate: Predicate,
        from: Anchor,
        until: Anchor,
    ) -> Self {
        Self::new(
            name,
            reqs,
            CheckKind::HoldsUntil {
                predicate,
                from,
                until,
            },
        )
    }

    pub fn count(
        name: &str,
        reqs: &[&str],
        counted: Counted,
        during: Option<Window>,
        cmp: Cmp,
        n: u64,
    ) -> Self {
        Self::new(
            name,
            reqs,
            CheckKind::Count {
                counted,
                during,
                cmp,
                n,
            },
        )
    }

    /// Phases are names: a sandbox's [`crate::phase::Phase`] or a Kubernetes object's phase.
    pub fn phase_sequence<P: AsRef<str>>(
        name: &str,
        reqs: &[&str],
        object: Selector,
        during: Window,
        expected: &[P],
        allowed: &[P],
    ) -> Self {
        let strs = |v: &[P]| v.iter().map(|s| s.as_ref().to_string()).collect();
        Self::new(
            name,
            reqs,
            CheckKind::PhaseSequence {
                object,
                during,
                expected: strs(expected),
                allowed: strs(allowed),
            },
        )
    }

    pub fn sentinels(name: &str, reqs: &[&str]) -> Self {
        Self::new(name, reqs, CheckKind::Sentinels)
    }

    pub fn capped_backoff(
        name: &str,
        reqs: &[&str],
        sandbox: &str,
        op: crate::retries::RetryOp,
        cap: Duration,
        attempt: Duration,
        retry: Duration,
    ) -> Self {
        Self::new(
            name,
            reqs,
            CheckKind::CappedBackoff {
                sandbox: sandbox.to_string(),
                op,
                cap_ms: cap.as_millis() as u64,
                attempt_ms: attempt.as_millis() as u64,
                retry_ms: Some(retry.as_millis() as u64),
            },
        )
    }

    pub fn usable_once_ready(
        name: &str,
        reqs: &[&str],
        sandbox: &str,
        after: Anchor,
        within: Duration,
    ) -> Self {
        Self::new(
            name,
            reqs,
            CheckKind::UsableOnceReady {
                sandbox: sandbox.to_string(),
                after,
                within_ms: within.as_millis() as u64,
            },
        )
    }

    /// What the check demands, in words.
    pub(crate) fn expectation(&self) -> String {
        match &self.kind {
            CheckKind::Eventually {
                predicate,
                after,
                within_ms,
            } => format!("{predicate} within {} after {after}", fmt_ms(*within_ms)),
            CheckKind::Never { predicate, during } => format!("never {predicate}, {during}"),
            CheckKind::HoldsUntil {
                predicate,
                from,
                until,
            } => format!("{predicate} from {from} until {until}"),
            CheckKind::PhaseSequence {
                object,
                during,
                expected,
                allowed,
            } => {
                let mut s = format!("{object} phases {} ", expected.join(" -> "));
                if !allowed.is_empty() {
                    s.push_str(&format!("(passing only through {}) ", allowed.join(", ")));
                }
                s.push_str(&during.to_string());
                s
            }
            CheckKind::Count {
                counted,
                during,
                cmp,
                n,
            } => {
                let mut s = format!("{} {n} {counted}", cmp.describe());
                if let Some(w) = during {
                    s.push_str(&format!(", {w}"));
                }
                s
            }
            CheckKind::Sentinels => {
                "every workspace sentinel written is read back intact".to_string()
            }
            CheckKind::CappedBackoff {
                sandbox,
                op,
                cap_ms,
                attempt_ms,
                retry_ms,
            } => {
                let mut s = format!(
                    "after every failed {} attempt of {sandbox}'s supervisor, the next attempt \
                     within {} (back-off cap {} plus one attempt of at most {})",
                    op.name(),
                    fmt_ms(cap_ms + attempt_ms),
                    fmt_ms(*cap_ms),
                    fmt_ms(*attempt_ms)
                );
                if let Some(r) = retry_ms {
                    s.push_str(&format!(
                        ", and a retry that failed again within {} (plus {} for a refused attempt)",
                        fmt_ms(cap_ms + r),
                        fmt_ms(*r)
                    ));
                }
                s
            }
            CheckKind::UsableOnceReady {
                sandbox,
                after,
                within_ms,
            } => format!(
                "a command runs through the shell of {sandbox} within {} of its first Ready after {after}",
                fmt_ms(*within_ms)
            ),
        }
    }
}

/// The window a verdict was reached in, in milliseconds since run start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowMs {
    pub from_ms: u64,
    pub to_ms: u64,
}

impl std::fmt::Display for WindowMs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} .. {}", fmt_ms(self.from_ms), fmt_ms(self.to_ms))
    }
}

/// What a check came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckStatus {
    Passed,
    /// The timeline holds evidence that the requirement was broken.
    Failed,
    /// A step the check depended on stopped the case, so the timeline holds nothing to judge:
    /// the check says nothing about its requirements.
    NotEvaluated,
}

impl CheckStatus {
    /// How reports write it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failed => "FAILED",
            Self::NotEvaluated => "not evaluated",
        }
    }
}

/// The verdict of one check, with what it expected and what it saw.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckOutcome {
    pub name: String,
    pub requirements: Vec<String>,
    /// False for a failed check and for one that was not evaluated.
    pub passed: bool,
    /// Why the check was not evaluated: which step stopped the case, and why. Absent for a
    /// check that was judged (and in timelines written before checks could go unevaluated,
    /// where such a check reads as failed, as it was reported then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_evaluated: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowMs>,
    pub expected: String,
    /// What happened: for a pass the evidence, for a failure what broke and when.
    pub message: String,
    /// Last states seen of the objects the check looks at, at the moment of the verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_seen: Vec<ObjectState>,
}

impl CheckOutcome {
    pub fn status(&self) -> CheckStatus {
        match (self.passed, &self.not_evaluated) {
            (true, _) => CheckStatus::Passed,
            (false, None) => CheckStatus::Failed,
            (false, Some(_)) => CheckStatus::NotEvaluated,
        }
    }

    /// Whether the check holds evidence that its requirements were broken.
    pub fn failed(&self) -> bool {
        self.status() == CheckStatus::Failed
    }

    /// The full diagnosis of a failure: which check, which requirement, which window, what was
    /// expected, what happened and the last states seen; for a check not evaluated, why.
    pub fn diagnosis(&self) -> String {
        let mut s = format!(
            "check '{}' [{}] {}",
            self.name,
            self.requirements.join(", "),
            self.status().label()
        );
        if let Some(why) = &self.not_evaluated {
            s.push_str(&format!(": {why}\n  expected: {}", self.expected));
            return s;
        }
        if let Some(w) = &self.window {
            s.push_str(&format!(" in window {w}"));
        }
        s.push_str(&format!(
            "\n  expected: {}\n  observed: {}",
            self.expected, self.message
        ));
        if !self.last_seen.is_empty() {
            s.push_str("\n  last seen:");
            for o in &self.last_seen {
                s.push_str(&format!("\n    {}", o.summary()));
            }
        }
        s
    }
}

pub fn fmt_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.3}s", ms as f64 / 1000.0)
    }
}

/// Selects objects by kind and optionally namespace, exact name, name prefix and labels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selector {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<(String, String)>,
}

impl Selector {
    pub fn kind(kind: &str) -> Self {
        Self {
            kind: kind.to_string(),
            ..Self::default()
        }
    }

    pub fn named(kind: &str, name: &str) -> Self {
        Self {
            kind: kind.to_string(),
            name: Some(name.to_string()),
            ..Self::default()
        }
    }

    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.labels.push((key.to_string(), value.to_string()));
        self
    }

    pub fn with_prefix(mut self, prefix: &str) -> Self {
        self.name_prefix = Some(prefix.to_string());
        self
    }

    pub fn matches(&self, o: &ObjectState) -> bool {
        o.kind == self.kind
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| o.namespace.as_ref() == Some(ns))
            && self.name.as_ref().is_none_or(|n| &o.name == n)
            && self
                .name_prefix
                .as_ref()
                .is_none_or(|p| o.name.starts_with(p.as_str()))
            && self.labels.iter().all(|(k, v)| o.labels.get(k) == Some(v))
    }
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if let Some(n) = &self.name {
            write!(f, " {n}")?;
        }
        if let Some(p) = &self.name_prefix {
            write!(f, " {p}*")?;
        }
        for (k, v) in &self.labels {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// A statement about the world at one instant. Statements about an object (phase, condition,
/// container) hold when at least one live object matches and every matching live object
/// satisfies them, so "the sandbox is Ready" is false while the sandbox does not exist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "is", rename_all = "snake_case")]
pub enum Predicate {
    Phase {
        object: Selector,
        any_of: Vec<String>,
    },
    Condition {
        object: Selector,
        #[serde(rename = "type")]
        type_: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The condition's reason or message mentions one of the words (case-insensitive): the
    /// reported status names the cause.
    ConditionMentions {
        object: Selector,
        #[serde(rename = "type")]
        type_: String,
        any_of: Vec<String>,
    },
    /// A container of the object has terminated (with the given exit code, if set).
    ContainerTerminated {
        object: Selector,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        container: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
    /// Some container of the object restarted more than `max` times.
    RestartsAbove {
        object: Selector,
        max: u32,
    },
    /// At least one live object matches.
    Exists {
        object: Selector,
    },
    /// No live object matches.
    Absent {
        object: Selector,
    },
    Not {
        predicate: Box<Predicate>,
    },
    All {
        predicates: Vec<Predicate>,
    },
    Any {
        predicates: Vec<Predicate>,
    },
}

impl Predicate {
    /// The object's phase is one of `phases`: a sandbox's [`crate::phase::Phase`]s or, for a
    /// Kubernetes object, its phase names.
    pub fn phase<P: AsRef<str>>(object: Selector, phases: &[P]) -> Self {
        Self::Phase {
            object,
            any_of: phases.iter().map(|p| p.as_ref().to_string()).collect(),
        }
    }

    pub fn negate(self) -> Self {
        Self::Not {
            predicate: Box::new(self),
        }
    }

    /// The selectors this predicate looks at, for reporting the last states seen.
    pub fn selectors(&self) -> Vec<&Selector> {
        match self {
            Self::Phase { object, .. }
            | Self::Condition { object, .. }
            | Self::ConditionMentions { object, .. }
            | Self::ContainerTerminated { object, .. }
            | Self::RestartsAbove { object, .. }
            | Self::Exists { object }
            | Self::Absent { object } => vec![object],
            Self::Not { predicate } => predicate.selectors(),
            Self::All { predicates } | Self::Any { predicates } => {
                predicates.iter().flat_map(|p| p.selectors()).collect()
            }
        }
    }
}

impl std::fmt::Display for Predicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Phase { object, any_of } => {
                write!(f, "{object} phase in [{}]", any_of.join(", "))
            }
            Self::Condition {
                object,
                type_,
                status,
                reason,
            } => {
                write!(f, "{object} condition {type_}")?;
                if let Some(s) = status {
                    write!(f, "={s}")?;
                }
                if let Some(r) = reason {
                    write!(f, " reason {r}")?;
                }
                Ok(())
            }
            Self::ConditionMentions {
                object,
                type_,
                any_of,
            } => write!(
                f,
                "{object} condition {type_} names one of [{}]",
                any_of.join(", ")
            ),
            Self::ContainerTerminated {
                object,
                container,
                exit_code,
            } => {
                write!(
                    f,
                    "{object} container {} terminated",
                    container.as_deref().unwrap_or("*")
                )?;
                if let Some(c) = exit_code {
                    write!(f, " with exit code {c}")?;
                }
                Ok(())
            }
            Self::RestartsAbove { object, max } => {
                write!(
                    f,
                    "{object} has a container restarted more than {max} times"
                )
            }
            Self::Exists { object } => write!(f, "{object} exists"),
            Self::Absent { object } => write!(f, "no {object} exists"),
            Self::Not { predicate } => write!(f, "not ({predicate})"),
            Self::All { predicates } => write!(f, "{}", join(predicates, " and ")),
            Self::Any { predicates } => write!(f, "{}", join(predicates, " or ")),
        }
    }
}

fn join(ps: &[Predicate], sep: &str) -> String {
    ps.iter()
        .map(|p| format!("({p})"))
        .collect::<Vec<_>>()
        .join(sep)
}
