//! The timeline: the ordered record of one run. Everything the harness saw (object states),
//! did (actions, sentinel writes and reads), broke (fault windows) and concluded (stages and
//! checks) lands here, stamped with time since run start. Time is tokio time, so a run in paused
//! (virtual) time gets exact, reproducible stamps. Timelines are written as JSON lines and read
//! back losslessly, which is what lets `check` re-run the checks offline.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::record::{
    API_SERVER_UNREACHABLE_REASON, ActionStatus, ConditionState, ContainerState,
    GATEWAY_UNREACHABLE_REASON, ObjectRef, ObjectState, READY_CONDITION, Replicas,
    STORED_BEFORE_FAULT_REASON,
};
use crate::verdict::{Check, CheckOutcome};

/// One line of a timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Position in the run, strictly increasing; orders entries with the same stamp.
    pub seq: u64,
    /// Milliseconds since run start.
    pub at_ms: u64,
    #[serde(flatten)]
    pub event: Event,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    RunStarted(RunInfo),
    /// An observed state of one object (a Kubernetes object, or the gateway's view of a sandbox).
    Object(ObjectState),
    Action(ActionRecord),
    Fault(FaultRecord),
    Sentinel(SentinelRecord),
    /// A value the harness measured, such as the number of main-process starts.
    Observation {
        key: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subject: Option<String>,
        value: serde_json::Value,
    },
    /// Container logs collected for diagnosis (on failure), such as the supervisor's retries.
    Logs(LogExcerpt),
    /// A named point a scenario marks, for checks to anchor on.
    Marker {
        label: String,
    },
    Stage(StageRecord),
    /// The checks that will be evaluated over this timeline, stored so that a saved timeline
    /// can be re-checked offline without the scenario code.
    CheckPlan {
        checks: Vec<Check>,
    },
    Check(CheckOutcome),
    Note {
        message: String,
    },
    RunFinished {
        outcome: String,
        /// The case's verdict ([`crate::case_verdict::CaseVerdict::key`]); absent in timelines
        /// written before verdicts were recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        verdict: Option<String>,
    },
}

/// What identifies a run: enough to reproduce it and to label reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub scenario: String,
    pub title: String,
    pub topology: String,
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub defects: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default)]
    pub requirements: Vec<String>,
    /// Scenario parameters as text (outage durations, injection points), for reports.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// Versions of what was tested (OpenShell, Agent Sandbox, harness).
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
    /// The known failures of the release under test that name this case (from the expectations
    /// file the run used), so that the case's verdict can be given again from the timeline
    /// alone (`check`, `report`). Empty when none applies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expected_failures: Vec<Expectation>,
    /// The scale of the clock the case ran on (`--time-scale`, [`crate::clock`]) when above 1:
    /// its stamps are scenario time, and real time passed this many times more slowly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_scale: Option<u32>,
}

/// A known failure that applies to a case: the requirement the case is known to break and the
/// upstream report that says so.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expectation {
    pub requirement: String,
    pub report: String,
}

/// Kind used for the gateway's own view of a sandbox (`openshell sandbox get`), as opposed to
/// the Agent Sandbox custom resource of kind `Sandbox`.
pub const GATEWAY_SANDBOX_KIND: &str = "OpenShellSandbox";

/// The fault kinds that end the gateway's process (`Fault::kind` of a gateway stop and a
/// gateway restart): the gateway that answers after one is a new process answering from its
/// database (docs/upstream-facts.md F1.17, F1.18).
pub const GATEWAY_STOP_KIND: &str = "gateway-stop";
/// See [`GATEWAY_STOP_KIND`].
pub const GATEWAY_RESTART_KIND: &str = "gateway-restart";

/// Key of the [`Event::Observation`] a Kubernetes watcher records when it loses the API server
/// (value `false`) and when it has relisted after that (value `true`); the subject is the kind
/// it watches. Between the two, the states of that kind are a gap.
pub const API_SERVER_REACHABLE_KEY: &str = "api_server_reachable";

/// Key of the [`Event::Observation`] a target records each time it learns that a sandbox's main
/// process started: the subject is the sandbox (the gateway's name for it), the value how many
/// times its main process has started so far, over all its pods, or `null` once the target can
/// no longer tell. Checks count starts from these ([`crate::checks::Counted::MainProcessStarts`]),
/// never from files in the workspace under test, so a damaged workspace is judged as such and
/// not as a workload started too often or too rarely.
pub const MAIN_PROCESS_STARTS_KEY: &str = "main_process_starts";

/// Key of the [`Event::Observation`] a target records when it starts observing, if it reports
/// main-process starts ([`MAIN_PROCESS_STARTS_KEY`]); the value says where they come from. On
/// a timeline without it, start counts are unknown, never 0.
pub const MAIN_PROCESS_STARTS_SOURCE_KEY: &str = "main_process_starts_source";

/// A sandbox's main-process starts as its target reported them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartCount {
    Known(u64),
    /// Why the count is not known.
    Unknown(String),
}

/// The starts of `sandbox` reported by the events given (a prefix of the timeline), in
/// timeline order; `timeline` is all of it, which says whether the target reports starts.
fn main_process_starts<'a>(
    mut timeline: impl Iterator<Item = &'a Event>,
    events: impl DoubleEndedIterator<Item = &'a Event>,
    sandbox: &str,
) -> StartCount {
    let reported = timeline.any(
        |e| matches!(e, Event::Observation { key, .. } if key == MAIN_PROCESS_STARTS_SOURCE_KEY),
    );
    if !reported {
        return StartCount::Unknown(
            "the target does not report main-process starts (no main_process_starts_source on the timeline)"
                .into(),
        );
    }
    let last = events.rev().find_map(|e| match e {
        Event::Observation {
            key,
            subject: Some(s),
            value,
        } if key == MAIN_PROCESS_STARTS_KEY && s == sandbox => Some(value),
        _ => None,
    });
    match last {
        None => StartCount::Known(0),
        Some(v) => match v.as_u64() {
            Some(n) => StartCount::Known(n),
            None => StartCount::Unknown(format!(
                "the target could no longer tell the main-process starts of {sandbox} (it reported {v})"
            )),
        },
    }
}

/// Key of the [`Event::Observation`] a scenario step records for each wait the scenario itself
/// mandates: a sleep it asks for (an outage held, a settle time), or a deadline of a wait that
/// ran out (the scenario waited all of it for a state that did not come). The subject says
/// which wait, the value is its length in milliseconds. What a case spends beyond these is the
/// product's time and the harness's, so a speed figure can tell the two apart from the
/// timeline alone, whichever path the scenario took.
pub const SCENARIO_WAIT_KEY: &str = "scenario_wait_ms";

/// Key of the [`Event::Observation`] an observer records when it samples objects of the kind
/// named by its subject instead of streaming their changes; the value is the interval in
/// milliseconds. A state held for less than that may be missing from the timeline.
pub const SAMPLING_INTERVAL_KEY: &str = "sampling_interval_ms";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// Pairs the `started` entry with its outcome.
    pub id: u64,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    pub status: ActionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultPhase {
    /// The harness asked for the fault (the requested window starts).
    Requested,
    /// The fault is in effect (for a gateway stop: its pods are gone).
    Started,
    /// Restore finished (for a gateway stop: ready again).
    Ended,
    /// Restore could not be completed; the journal keeps what is left to undo.
    RestoreFailed,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultRecord {
    pub id: String,
    pub kind: String,
    pub phase: FaultPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The requested hold, in milliseconds, for faults that last a duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SentinelOp {
    Write,
    Read,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", content = "value", rename_all = "snake_case")]
pub enum SentinelResult {
    /// The write succeeded, or the read returned this content.
    Ok(String),
    /// The read ran and the file was not there.
    Missing,
    /// The operation could not run (sandbox not usable); says nothing about the data.
    Failed(String),
}

/// The way a sentinel was written or read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SentinelPath {
    /// Through the sandbox's own shell, the user's path (`openshell sandbox exec`).
    #[default]
    Shell,
    /// From the workspace volume without the sandbox (a reader pod mounting its PVC), where
    /// the sandbox cannot run a command (finished, failed, stopped).
    Reader,
}

impl SentinelPath {
    fn is_shell(&self) -> bool {
        *self == Self::Shell
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentinelRecord {
    pub key: String,
    pub sandbox: String,
    pub op: SentinelOp,
    #[serde(flatten)]
    pub result: SentinelResult,
    /// Absent in timelines written before reads through the reader existed: the shell.
    #[serde(default, skip_serializing_if = "SentinelPath::is_shell")]
    pub via: SentinelPath,
}

/// The log of one container of one pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogExcerpt {
    pub pod: String,
    pub container: String,
    /// The log of the previous run of the container (after a restart).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub previous: bool,
    pub lines: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageStatus {
    Started,
    Passed,
    Failed,
    Error,
    Skipped,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageRecord {
    pub stage: String,
    pub status: StageStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The step that ended the stage early (failed, could not run, or skipped the case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The requirements a failed stage broke: those of the behaviour its step waited for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<String>,
}

/// The step that stopped a case before its steps ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoppedStep {
    pub stage: String,
    /// Absent in timelines written before stage records named their step.
    pub step: Option<String>,
    pub status: StageStatus,
    pub message: Option<String>,
    /// The requirements the step broke (none for one that could not run or was skipped).
    pub requirements: Vec<String>,
}

impl std::fmt::Display for StoppedStep {
    /// `step 'write a sentinel' (stage seed) failed: <why>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.step {
            Some(step) => write!(f, "step '{step}' (stage {})", self.stage)?,
            None => write!(f, "stage {}", self.stage)?,
        }
        let how = match self.status {
            StageStatus::Skipped => "was skipped",
            StageStatus::Error => "could not run",
            _ => "failed",
        };
        write!(f, " {how}")?;
        // The stage's record keeps the last states a wait saw; the reason names the step.
        match self
            .message
            .as_deref()
            .map(|m| m.split("; last seen:").next().unwrap_or(m))
        {
            Some(m) => write!(f, ": {m}"),
            None => Ok(()),
        }
    }
}

/// The whole record of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub entries: Vec<Entry>,
}

#[derive(Debug, thiserror::Error)]
pub enum TimelineError {
    #[error("cannot read timeline: {0}")]
    Io(#[from] std::io::Error),
    #[error("timeline line {line}: {message}")]
    Parse { line: usize, message: String },
    #[error(
        "timeline line {line} is longer than {MAX_LINE} bytes: not a timeline this harness wrote"
    )]
    LineTooLong { line: usize },
    /// Well-formed, but not something `run` writes: judging it would vouch for it.
    #[error("timeline line {line}: {message}")]
    Invalid { line: usize, message: String },
}

/// The longest line a timeline may have. The longest `run` writes are container log excerpts,
/// well under a megabyte; a bound keeps `check /dev/zero` from allocating without end.
pub const MAX_LINE: usize = 16 << 20;

/// The outcomes a closing record may name ([`crate::engine::Outcome::name`]).
const OUTCOMES: [&str; 4] = ["passed", "failed", "error", "skipped"];

/// The verdicts a closing record may name: the keys of `case_verdict::CaseVerdict`, which
/// builds on this module, so the list lives here.
pub const VERDICT_KEYS: [&str; 7] = [
    "passed",
    "failed",
    "expected-failure",
    "unexpected-pass",
    "error",
    "skipped",
    "interrupted",
];

impl Timeline {
    /// The sampling interval an observer declared for objects of `kind`, if they were sampled
    /// rather than streamed (see [`SAMPLING_INTERVAL_KEY`]).
    pub fn sampling_interval(&self, kind: &str) -> Option<Duration> {
        self.entries.iter().find_map(|e| match &e.event {
            Event::Observation {
                key,
                subject: Some(subject),
                value,
            } if key == SAMPLING_INTERVAL_KEY && subject == kind => {
                value.as_u64().map(Duration::from_millis)
            }
            _ => None,
        })
    }

    /// The main-process starts of `sandbox` that the target had reported by the end of the
    /// millisecond of entry `upto` (so a start stamped in the same millisecond as a marker
    /// counts, whichever way the two were ordered).
    pub fn main_process_starts(&self, sandbox: &str, upto: usize) -> StartCount {
        let at = self.entries.get(upto).map_or(0, |e| e.at_ms);
        let end = self.entries.partition_point(|e| e.at_ms <= at);
        let events = |n: usize| self.entries[..n].iter().map(|e| &e.event);
        main_process_starts(events(self.entries.len()), events(end), sandbox)
    }

    /// The main-process starts of `sandbox` that the target had reported before the
    /// millisecond of entry `from` began.
    pub fn main_process_starts_before(&self, sandbox: &str, from: usize) -> StartCount {
        let at = self.entries.get(from).map_or(0, |e| e.at_ms);
        let end = self.entries.partition_point(|e| e.at_ms < at);
        let events = |n: usize| self.entries[..n].iter().map(|e| &e.event);
        main_process_starts(events(self.entries.len()), events(end), sandbox)
    }

    pub fn run_info(&self) -> Option<&RunInfo> {
        self.entries.iter().find_map(|e| match &e.event {
            Event::RunStarted(info) => Some(info),
            _ => None,
        })
    }

    /// The outcome the run recorded when the case finished; none for a timeline cut before.
    pub fn outcome(&self) -> Option<&str> {
        self.entries.iter().rev().find_map(|e| match &e.event {
            Event::RunFinished { outcome, .. } => Some(outcome.as_str()),
            _ => None,
        })
    }

    /// The verdict the run recorded in the closing record, if it recorded one.
    pub fn verdict(&self) -> Option<&str> {
        self.entries.iter().rev().find_map(|e| match &e.event {
            Event::RunFinished { verdict, .. } => verdict.as_deref(),
            _ => None,
        })
    }

    pub fn check_plan(&self) -> Vec<Check> {
        self.entries
            .iter()
            .filter_map(|e| match &e.event {
                Event::CheckPlan { checks } => Some(checks.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// The step that stopped the case's steps, as recorded before the checks were judged:
    /// the checks that depended on what it would have done are not evaluated.
    pub fn stopped_step(&self) -> Option<StoppedStep> {
        self.entries
            .iter()
            .take_while(|e| !matches!(e.event, Event::Check(_)))
            .find_map(|e| match &e.event {
                Event::Stage(s)
                    if matches!(
                        s.status,
                        StageStatus::Failed | StageStatus::Error | StageStatus::Skipped
                    ) =>
                {
                    Some(StoppedStep {
                        stage: s.stage.clone(),
                        step: s.step.clone(),
                        status: s.status,
                        message: s.message.clone(),
                        requirements: s.requirements.clone(),
                    })
                }
                _ => None,
            })
    }

    pub fn check_outcomes(&self) -> Vec<&CheckOutcome> {
        self.entries
            .iter()
            .filter_map(|e| match &e.event {
                Event::Check(o) => Some(o),
                _ => None,
            })
            .collect()
    }

    /// Stamp of the last entry: how long the run lasted in its own (possibly virtual) time.
    pub fn duration(&self) -> Duration {
        Duration::from_millis(self.entries.last().map_or(0, |e| e.at_ms))
    }

    pub(crate) fn write_jsonl(&self, mut out: impl Write) -> std::io::Result<()> {
        for entry in &self.entries {
            serde_json::to_writer(&mut out, entry)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }

    pub fn to_jsonl(&self) -> String {
        let mut buf = Vec::new();
        self.write_jsonl(&mut buf)
            .expect("writing to a Vec cannot fail");
        String::from_utf8(buf).expect("serde_json writes UTF-8")
    }

    /// Reads a timeline `run` wrote, refusing what it cannot have written: a line longer than
    /// [`MAX_LINE`], a record after the closing one, an outcome or verdict it does not know, or
    /// a newer harness's file.
    pub fn read_jsonl(mut input: impl BufRead) -> Result<Self, TimelineError> {
        let mut entries: Vec<Entry> = Vec::new();
        let mut buf = Vec::new();
        let mut closed_at = None;
        for line in 1.. {
            buf.clear();
            let n =
                std::io::Read::take(&mut input, MAX_LINE as u64 + 1).read_until(b'\n', &mut buf)?;
            if n == 0 {
                break;
            }
            if buf.len() > MAX_LINE {
                return Err(TimelineError::LineTooLong { line });
            }
            // As `BufRead::lines` did: bytes that are not UTF-8 are a read error.
            let text = std::str::from_utf8(&buf).map_err(|e| {
                TimelineError::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            })?;
            if text.trim().is_empty() {
                continue;
            }
            let entry: Entry = serde_json::from_str(text).map_err(|e| TimelineError::Parse {
                line,
                message: e.to_string(),
            })?;
            let invalid = |message: String| TimelineError::Invalid { line, message };
            if let Some(closed) = closed_at {
                return Err(invalid(format!(
                    "a record after the closing record of line {closed}"
                )));
            }
            match &entry.event {
                Event::RunStarted(info) => check_version(info).map_err(invalid)?,
                Event::RunFinished { outcome, verdict } => {
                    if !OUTCOMES.contains(&outcome.as_str()) {
                        return Err(invalid(format!(
                            "unknown outcome {outcome:?} (known: {})",
                            OUTCOMES.join(", ")
                        )));
                    }
                    if let Some(v) = verdict.as_deref()
                        && !VERDICT_KEYS.contains(&v)
                    {
                        return Err(invalid(format!(
                            "unknown verdict {v:?} (known: {})",
                            VERDICT_KEYS.join(", ")
                        )));
                    }
                    closed_at = Some(line);
                }
                _ => {}
            }
            entries.push(entry);
        }
        Ok(Self { entries })
    }

    #[cfg(test)]
    pub(crate) fn from_jsonl(text: &str) -> Result<Self, TimelineError> {
        Self::read_jsonl(text.as_bytes())
    }
}

/// A timeline from a newer harness may record what this one cannot judge.
fn check_version(info: &RunInfo) -> Result<(), String> {
    let ours = semver::Version::parse(env!("CARGO_PKG_VERSION")).expect("our own version");
    match info.versions.get("harness") {
        None => Ok(()),
        Some(v) => match semver::Version::parse(v) {
            Ok(theirs) if theirs <= ours => Ok(()),
            Ok(theirs) => Err(format!(
                "written by harness {theirs}, newer than this one ({ours}): judge it with that version"
            )),
            Err(e) => Err(format!("harness version {v:?} is not a version: {e}")),
        },
    }
}

/// The latest known state of every object, as of some point in a timeline. It borrows the
/// timeline's states: the checks replay a timeline into a world for every check, and copying
/// each state was a top item of the proof's profile.
#[derive(Clone, Debug, Default)]
pub struct World<'t> {
    /// By kind, namespace and name: the order of [`ObjectRef`].
    objects: BTreeMap<(&'t str, Option<&'t str>, &'t str), &'t ObjectState>,
}

impl<'t> World<'t> {
    pub fn apply(&mut self, event: &'t Event) {
        if let Event::Object(state) = event {
            self.insert(state);
        }
    }

    /// Takes `state` as its object's latest.
    pub fn insert(&mut self, state: &'t ObjectState) {
        self.objects.insert(
            (&state.kind, state.namespace.as_deref(), &state.name),
            state,
        );
    }

    pub fn get(&self, r: &ObjectRef) -> Option<&'t ObjectState> {
        // Keys of a shorter lifetime look up the same map (it is covariant in its keys).
        let objects: &BTreeMap<(&str, Option<&str>, &str), &'t ObjectState> = &self.objects;
        objects
            .get(&(r.kind.as_str(), r.namespace.as_deref(), r.name.as_str()))
            .copied()
    }

    /// Every object ever seen, deleted ones included (with `deleted` set).
    pub fn all(&self) -> impl Iterator<Item = &'t ObjectState> + '_ {
        self.objects.values().copied()
    }

    /// Objects that currently exist.
    pub fn live(&self) -> impl Iterator<Item = &'t ObjectState> + '_ {
        self.all().filter(|o| !o.deleted)
    }
}

/// The write side of a timeline, shared by the engine, the scenario's steps and the target's
/// observers. Cheap to clone; stamps each entry with tokio time since the recorder was created.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Mutex<RecorderInner>>,
}

struct RecorderInner {
    start: tokio::time::Instant,
    entries: Vec<Entry>,
    /// Per entry: whether a watcher or poller recorded it (rather than the harness's own steps).
    watched: Vec<bool>,
    next_action: u64,
    /// Last state per object, so observers that report the same state twice (a relist, a
    /// poller) do not clutter the timeline.
    last_state: BTreeMap<ObjectRef, ObjectState>,
    /// Told about every entry as it is recorded (progress display).
    listener: Option<Listener>,
    /// Steps waiting for an observer to record the next state of an object (None: of any
    /// object) ([`Recorder::next_watched_state`]); each is told once.
    state_waiters: Vec<(Option<ObjectRef>, tokio::sync::oneshot::Sender<()>)>,
    /// The last resource version the gateway answered for each sandbox.
    gateway_versions: BTreeMap<ObjectRef, String>,
    /// The kind of the latest fault that ends the gateway's process, and each sandbox's
    /// version when it took effect: an answer with that version since is the stored record
    /// (before it took effect, the gateway that answers is the one still running).
    stored_before: Option<(String, BTreeMap<ObjectRef, String>)>,
}

impl RecorderInner {
    fn stored_before_fault(&self, state: &ObjectState) -> Option<String> {
        // Only Ready rests on what a restart loses (a supervisor session, F1.17); a stored
        // Error, Stopped or Provisioning is as true after the restart as before it.
        if state.kind != GATEWAY_SANDBOX_KIND || state.phase.as_deref() != Some("Ready") {
            return None;
        }
        let version = state.resource_version.as_ref()?;
        let (fault, versions) = self.stored_before.as_ref()?;
        (versions.get(&state.object_ref()) == Some(version)).then(|| fault.clone())
    }
}

/// What [`Recorder::observe_as`] did with a state.
struct Observed {
    /// It differed from the object's last state and went on the timeline.
    recorded: bool,
    /// It was a Ready answer from the record the gateway stored before a fault, recorded as
    /// not known ([`STORED_BEFORE_FAULT_REASON`]).
    stored: bool,
}

/// Called with every entry as it is recorded.
pub(crate) type Listener = Arc<dyn Fn(&Entry) + Send + Sync>;

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Mutex::new(RecorderInner {
                start: tokio::time::Instant::now(),
                entries: Vec::new(),
                watched: Vec::new(),
                next_action: 1,
                last_state: BTreeMap::new(),
                listener: None,
                state_waiters: Vec::new(),
                gateway_versions: BTreeMap::new(),
                stored_before: None,
            })),
        }
    }

    /// A recorder that also tells `listener` about every entry (for progress display).
    pub(crate) fn with_listener(listener: Listener) -> Self {
        let rec = Self::new();
        rec.lock().listener = Some(listener);
        rec
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecorderInner> {
        // A panic while holding the lock leaves plain data behind; keep recording.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Time since run start.
    pub fn elapsed(&self) -> Duration {
        self.lock().start.elapsed()
    }

    pub fn record(&self, event: Event) -> Entry {
        let mut inner = self.lock();
        Self::push(&mut inner, event, false)
    }

    /// Records something a watcher or poller saw (see [`Recorder::snapshot`] for why the
    /// origin matters).
    pub fn record_watched(&self, event: Event) -> Entry {
        let mut inner = self.lock();
        Self::push(&mut inner, event, true)
    }

    /// Records what a watcher learned late but knows the time of (`at_ms`, clamped to now): a
    /// phase commit the gateway logged while the observer was disconnected. The snapshot puts
    /// it in its place among the entries.
    pub fn record_watched_at(&self, at_ms: u64, event: Event) -> Entry {
        let mut inner = self.lock();
        let now = inner.start.elapsed().as_millis() as u64;
        Self::push_at(&mut inner, at_ms.min(now), event, true)
    }

    fn push(inner: &mut RecorderInner, event: Event, watched: bool) -> Entry {
        let at_ms = inner.start.elapsed().as_millis() as u64;
        Self::push_at(inner, at_ms, event, watched)
    }

    fn push_at(inner: &mut RecorderInner, at_ms: u64, event: Event, watched: bool) -> Entry {
        if let Event::Fault(f) = &event
            && f.phase == FaultPhase::Started
            && [GATEWAY_STOP_KIND, GATEWAY_RESTART_KIND].contains(&f.kind.as_str())
        {
            inner.stored_before = Some((f.kind.clone(), inner.gateway_versions.clone()));
        }
        let entry = Entry {
            seq: inner.entries.len() as u64 + 1,
            at_ms,
            event,
        };
        if watched && let Event::Object(state) = &entry.event {
            let key = state.object_ref();
            // In the order they began to wait, so that emulated runs stay deterministic.
            let waiters = std::mem::take(&mut inner.state_waiters);
            for (of, tx) in waiters {
                if of.as_ref().is_none_or(|of| *of == key) {
                    let _ = tx.send(());
                } else if !tx.is_closed() {
                    inner.state_waiters.push((of, tx));
                }
            }
        }
        inner.entries.push(entry.clone());
        inner.watched.push(watched);
        if let Some(l) = &inner.listener {
            l(&entry);
        }
        entry
    }

    /// Resolves once a watcher or poller records a state of `object` after this call (the
    /// harness's own reads do not count): a step that polls for a state wakes on it at once
    /// instead of at its next poll. Registered when called, not when first polled, so a state
    /// recorded in between is not missed.
    /// `object` None: a state of any object.
    pub fn next_watched_state(
        &self,
        object: Option<&ObjectRef>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.lock().state_waiters.push((object.cloned(), tx));
        async move {
            // A recorder dropped first ends the wait too; the caller's poll still bounds it.
            let _ = rx.await;
        }
    }

    /// Records an object state a watcher or poller saw, unless it equals the last one recorded
    /// for that object (resourceVersion aside). Returns whether it was recorded.
    pub fn observe(&self, state: ObjectState) -> bool {
        self.observe_as(state, true, false).recorded
    }

    /// Records a state an observer was sent as it came back after a gap, even where it equals
    /// the last one recorded: what held during the gap may be filled in later, at the times it
    /// held (from the gateway's log), and the state seen when the observer was back must then
    /// still follow it on the timeline. Returns whether it was recorded.
    pub fn observe_after_gap(&self, state: ObjectState) -> bool {
        self.observe_as(state, true, true).recorded
    }

    /// Records an object state the harness itself read in a step (the gateway's answer to a
    /// `get`), which may cause what the step does next. Returns whether it was taken for the
    /// record the gateway stored before a fault ([`STORED_BEFORE_FAULT_REASON`]).
    pub(crate) fn observe_direct(&self, state: ObjectState) -> bool {
        self.observe_as(state, false, false).stored
    }

    fn observe_as(&self, state: ObjectState, watched: bool, after_gap: bool) -> Observed {
        let mut inner = self.lock();
        let key = state.object_ref();
        let stored = inner.stored_before_fault(&state);
        let state = match &stored {
            Some(fault) => state.stored_before_fault(fault),
            None => {
                if state.kind == GATEWAY_SANDBOX_KIND
                    && let Some(v) = &state.resource_version
                {
                    inner.gateway_versions.insert(key.clone(), v.clone());
                }
                state
            }
        };
        if !after_gap
            && inner
                .last_state
                .get(&key)
                .is_some_and(|prev| prev.same_but_version(&state))
        {
            return Observed {
                recorded: false,
                stored: stored.is_some(),
            };
        }
        inner.last_state.insert(key, state.clone());
        Self::push(&mut inner, Event::Object(state), watched);
        Observed {
            recorded: true,
            stored: stored.is_some(),
        }
    }

    /// The main-process starts of `sandbox` the target has reported so far.
    pub fn main_process_starts(&self, sandbox: &str) -> StartCount {
        let inner = self.lock();
        let events = || inner.entries.iter().map(|e| &e.event);
        main_process_starts(events(), events(), sandbox)
    }

    /// The last recorded state of every object, for failure messages.
    pub fn last_states(&self) -> Vec<ObjectState> {
        self.lock().last_state.values().cloned().collect()
    }

    pub fn last_state(&self, r: &ObjectRef) -> Option<ObjectState> {
        self.lock().last_state.get(r).cloned()
    }

    /// Records the start of an action and returns its id for [`Recorder::action_end`].
    pub(crate) fn action_start(&self, name: &str, subject: Option<&str>) -> u64 {
        let mut inner = self.lock();
        let id = inner.next_action;
        inner.next_action += 1;
        Self::push(
            &mut inner,
            Event::Action(ActionRecord {
                id,
                name: name.to_string(),
                subject: subject.map(str::to_string),
                status: ActionStatus::Started,
                detail: None,
            }),
            false,
        );
        id
    }

    pub fn action_end(
        &self,
        id: u64,
        name: &str,
        subject: Option<&str>,
        status: ActionStatus,
        detail: Option<String>,
    ) {
        self.record(Event::Action(ActionRecord {
            id,
            name: name.to_string(),
            subject: subject.map(str::to_string),
            status,
            detail,
        }));
    }

    pub fn mark(&self, label: &str) {
        self.record(Event::Marker {
            label: label.to_string(),
        });
    }

    pub fn note(&self, message: impl Into<String>) {
        self.record(Event::Note {
            message: message.into(),
        });
    }

    /// The timeline so far, in canonical order. Within one millisecond, what the harness did
    /// and read itself keeps its order and comes first; what watchers and pollers saw in that
    /// millisecond follows, ordered by resourceVersion (the order in which the cluster made the
    /// changes); the closing record comes last. Watcher tasks and the scenario's task may run in either order at the same
    /// instant, which would otherwise make two runs of the same case differ for no reason.
    pub fn snapshot(&self) -> Timeline {
        let inner = self.lock();
        let rv = |e: &Entry| match &e.event {
            Event::Object(o) => o
                .resource_version
                .as_deref()
                .and_then(|r| r.parse::<u64>().ok())
                .unwrap_or(u64::MAX),
            _ => u64::MAX,
        };
        let mut tagged: Vec<(bool, Entry)> = inner
            .watched
            .iter()
            .copied()
            .zip(inner.entries.iter().cloned())
            .collect();
        drop(inner);
        // Entries are recorded in time order but for those recorded late at their own time
        // (`record_watched_at`); stable, so the order within a millisecond is kept.
        tagged.sort_by_key(|(_, e)| e.at_ms);
        let mut i = 0;
        while i < tagged.len() {
            let mut j = i;
            while j < tagged.len() && tagged[j].1.at_ms == tagged[i].1.at_ms {
                j += 1;
            }
            // Stable: the harness's events keep their order; watched ones theirs within a
            // resourceVersion; the closing record stays last, after what watchers saw in its
            // millisecond.
            tagged[i..j].sort_by_key(|(w, e)| match e.event {
                Event::RunFinished { .. } => (2, 0),
                _ if *w => (1, rv(e)),
                _ => (0, 0),
            });
            i = j;
        }
        let entries = tagged
            .into_iter()
            .enumerate()
            .map(|(n, (_, mut e))| {
                e.seq = n as u64 + 1;
                e
            })
            .collect();
        Timeline { entries }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::{Anchor, CheckKind, Predicate, Selector};

    fn sample() -> Timeline {
        let rec = Recorder::new();
        rec.record(Event::RunStarted(RunInfo {
            scenario: "gateway-restart".into(),
            title: "Gateway restart with Ready sandboxes".into(),
            topology: "sidecar".into(),
            target: "emulated".into(),
            model: Some("contract".into()),
            defects: vec!["gateway-restart-marks-error".into()],
            seed: Some(u64::MAX),
            requirements: vec!["R9".into()],
            params: [("outage".to_string(), "30s".to_string())].into(),
            versions: [("openshell".to_string(), "0.0.111".to_string())].into(),
            expected_failures: vec![],
            time_scale: None,
        }));
        let mut pod = ObjectState::new("Pod", Some("openshell"), "default--a");
        pod.uid = Some("u-1".into());
        pod.phase = Some("Failed".into());
        pod.conditions.push(ConditionState {
            type_: "Ready".into(),
            status: "False".into(),
            reason: Some("PodFailed".into()),
            message: Some("Pod failed: \"quoted\" & <tagged>".into()),
        });
        pod.containers.push(ContainerState {
            name: "agent".into(),
            state: "terminated".into(),
            reason: Some("Error".into()),
            exit_code: Some(-1),
            restart_count: Some(3),
        });
        pod.replicas = Some(Replicas {
            desired: 1,
            ready: 0,
        });
        pod.labels.insert("a".into(), "b".into());
        pod.deleted = true;
        rec.observe(pod);
        let id = rec.action_start("stop", Some("a"));
        rec.action_end(
            id,
            "stop",
            Some("a"),
            ActionStatus::Refused,
            Some("FailedPrecondition: sandbox must be Ready to stop".into()),
        );
        rec.record(Event::Fault(FaultRecord {
            id: "f1".into(),
            kind: "gateway-stop".into(),
            phase: FaultPhase::Requested,
            subject: None,
            requested_ms: Some(30_000),
            detail: None,
        }));
        for result in [
            SentinelResult::Ok("tok\nen".into()),
            SentinelResult::Missing,
            SentinelResult::Failed("not ready".into()),
        ] {
            rec.record(Event::Sentinel(SentinelRecord {
                key: "s1".into(),
                sandbox: "a".into(),
                op: SentinelOp::Read,
                result,
                via: SentinelPath::Shell,
            }));
        }
        rec.record(Event::Sentinel(SentinelRecord {
            key: "s1".into(),
            sandbox: "a".into(),
            op: SentinelOp::Read,
            result: SentinelResult::Ok(String::new()),
            via: SentinelPath::Reader,
        }));
        rec.record(Event::Observation {
            key: "main-starts".into(),
            subject: Some("a".into()),
            value: serde_json::json!(1),
        });
        rec.record(Event::CheckPlan {
            checks: vec![Check {
                name: "ready".into(),
                requirements: vec!["R9".into()],
                kind: CheckKind::Eventually {
                    predicate: Predicate::Phase {
                        object: Selector::named(GATEWAY_SANDBOX_KIND, "a"),
                        any_of: vec!["Ready".into()],
                    },
                    after: Anchor::FaultEnd { id: "f1".into() },
                    within_ms: 60_000,
                },
            }],
        });
        rec.record(Event::Stage(StageRecord {
            stage: "fault".into(),
            status: StageStatus::Failed,
            message: Some("deadline".into()),
            step: None,
            requirements: vec!["R9".into()],
        }));
        rec.mark("gateway-back");
        rec.record(Event::RunFinished {
            outcome: "failed".into(),
            verdict: Some("failed".into()),
        });
        rec.snapshot()
    }

    /// A gateway sandbox answer: `phase` at resource version `version` (None: the target
    /// numbers no writes).
    fn answer(phase: &str, version: Option<u64>) -> ObjectState {
        let mut o = ObjectState::new(GATEWAY_SANDBOX_KIND, None, "a");
        o.phase = Some(phase.into());
        o.resource_version = version.map(|v| v.to_string());
        o
    }

    fn fault(rec: &Recorder, kind: &str, phase: FaultPhase) {
        rec.record(Event::Fault(FaultRecord {
            id: "f".into(),
            kind: kind.into(),
            phase,
            subject: None,
            requested_ms: None,
            detail: None,
        }));
    }

    /// The phases the recorder kept for sandbox `a`, with the reason of any stored answer.
    fn phases(rec: &Recorder) -> Vec<String> {
        rec.snapshot()
            .entries
            .iter()
            .filter_map(|e| match &e.event {
                Event::Object(o) => Some(match o.condition(READY_CONDITION) {
                    Some(c) => format!(
                        "{}({})",
                        o.phase.clone().unwrap_or_default(),
                        c.reason.clone().unwrap_or_default()
                    ),
                    None => o.phase.clone().unwrap_or_default(),
                }),
                _ => None,
            })
            .collect()
    }

    #[rstest::rstest]
    #[case::restart("gateway-restart")]
    #[case::stop("gateway-stop")]
    fn a_ready_answer_a_new_gateway_gives_from_its_stored_record_is_recorded_as_not_known(
        #[case] kind: &str,
    ) {
        let rec = Recorder::new();
        rec.observe(answer("Ready", Some(5)));
        fault(&rec, kind, FaultPhase::Requested);
        // The gateway still running before the fault takes effect answers as it is.
        rec.observe(answer("Ready", Some(5)));
        fault(&rec, kind, FaultPhase::Started);
        fault(&rec, kind, FaultPhase::Ended);
        rec.observe(answer("Ready", Some(5)));
        assert!(rec.observe_direct(answer("Ready", Some(5))));
        rec.observe(answer("Provisioning", Some(6)));
        rec.observe(answer("Ready", Some(7)));
        assert_eq!(
            phases(&rec),
            [
                "Ready",
                "Unknown(StoredBeforeFault)",
                "Provisioning",
                "Ready"
            ]
        );
        let stored = rec.snapshot().entries[4].clone();
        let Event::Object(o) = stored.event else {
            panic!("{stored:?}")
        };
        assert!(o.unobserved(), "no check takes it for a phase: {o:?}");
        assert_eq!(o.resource_version.as_deref(), Some("5"));
    }

    #[rstest::rstest]
    #[case::another_fault("supervisor-kill", "Ready", Some(5), &["Ready"])]
    #[case::a_stored_error("gateway-restart", "Error", Some(5), &["Error"])]
    #[case::no_version("gateway-restart", "Ready", None, &["Ready"])]
    fn an_answer_is_taken_as_it_is_when_no_restart_could_have_made_it_stale(
        #[case] kind: &str,
        #[case] phase: &str,
        #[case] version: Option<u64>,
        #[case] kept: &[&str],
    ) {
        let rec = Recorder::new();
        rec.observe(answer(phase, version));
        fault(&rec, kind, FaultPhase::Started);
        rec.observe(answer(phase, version));
        assert_eq!(phases(&rec), kept);
    }

    #[test]
    fn a_timeline_written_as_json_lines_reads_back_identical() {
        let t = sample();
        let text = t.to_jsonl();
        assert_eq!(text.lines().count(), t.entries.len());
        let back = Timeline::from_jsonl(&text).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.to_jsonl(), text);
    }

    #[test]
    fn a_malformed_timeline_line_is_reported_with_its_number() {
        let text = format!(
            "{}\n{{not json}}\n",
            sample().to_jsonl().lines().next().unwrap()
        );
        match Timeline::from_jsonl(&text) {
            Err(TimelineError::Parse { line, .. }) => assert_eq!(line, 2),
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    #[test]
    fn the_recorder_skips_an_object_state_identical_to_the_last_one() {
        let rec = Recorder::new();
        let mut s = ObjectState::new("Pod", Some("ns"), "p");
        s.phase = Some("Running".into());
        s.resource_version = Some("1".into());
        assert!(rec.observe(s.clone()));
        s.resource_version = Some("2".into());
        assert!(!rec.observe(s.clone()));
        s.phase = Some("Failed".into());
        assert!(rec.observe(s));
        assert_eq!(rec.snapshot().entries.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn entries_are_stamped_with_virtual_time_since_run_start() {
        let rec = Recorder::new();
        rec.mark("start");
        tokio::time::sleep(Duration::from_secs(330)).await;
        rec.mark("end");
        let t = rec.snapshot();
        assert_eq!(t.entries[0].at_ms, 0);
        assert_eq!(t.entries[1].at_ms, 330_000);
        assert_eq!(t.entries[1].seq, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_state_recorded_late_at_its_own_time_takes_its_place_on_the_timeline() {
        let rec = Recorder::new();
        rec.mark("before");
        tokio::time::sleep(Duration::from_secs(10)).await;
        rec.mark("after");
        rec.record_watched_at(
            4_000,
            Event::Object(ObjectState::new("OpenShellSandbox", None, "late")),
        );
        // Never in the future.
        rec.record_watched_at(
            99_000,
            Event::Marker {
                label: "now".into(),
            },
        );
        let t = rec.snapshot();
        let seen: Vec<(u64, u64)> = t.entries.iter().map(|e| (e.seq, e.at_ms)).collect();
        assert_eq!(seen, [(1, 0), (2, 4_000), (3, 10_000), (4, 10_000)]);
        assert!(matches!(&t.entries[1].event, Event::Object(o) if o.name == "late"));
    }

    #[test]
    fn within_a_millisecond_harness_events_come_first_then_observations_by_resource_version() {
        let rec = Recorder::new();
        let state = |name: &str, rv: &str| {
            let mut s = ObjectState::new("Pod", Some("ns"), name);
            s.resource_version = Some(rv.into());
            s
        };
        rec.mark("before");
        rec.observe(state("b", "12"));
        rec.observe(state("a", "11"));
        rec.mark("between");
        rec.observe(state("c", "9"));
        let names: Vec<String> = rec
            .snapshot()
            .entries
            .iter()
            .map(|e| match &e.event {
                Event::Object(o) => o.name.clone(),
                Event::Marker { label } => label.clone(),
                _ => unreachable!(),
            })
            .collect();
        // In one millisecond the harness's own events come first, then what was observed.
        assert_eq!(names, ["before", "between", "c", "a", "b"]);
        let seqs: Vec<u64> = rec.snapshot().entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5]);
    }

    #[test]
    fn an_object_summary_names_phase_conditions_and_containers() {
        let t = sample();
        let Some(pod) = t.entries.iter().find_map(|e| match &e.event {
            Event::Object(o) => Some(o),
            _ => None,
        }) else {
            panic!("the sample has a pod")
        };
        assert_eq!(
            pod.summary(),
            "Pod/openshell/default--a uid=u-1 deleted phase=Failed Ready=False(PodFailed) agent=terminated(-1) restarts=3 replicas=0/1"
        );
    }

    #[test]
    fn the_closing_record_stays_last_after_what_watchers_saw_in_its_millisecond() {
        let rec = Recorder::new();
        rec.record(Event::Note {
            message: "teardown".into(),
        });
        rec.record_watched(Event::Object(ObjectState::new("Pod", Some("ns"), "p")));
        rec.record(Event::RunFinished {
            outcome: "passed".into(),
            verdict: Some("passed".into()),
        });
        let t = rec.snapshot();
        assert!(matches!(
            t.entries.last().unwrap().event,
            Event::RunFinished { .. }
        ));
        assert!(matches!(t.entries[1].event, Event::Object(_)));
    }

    /// The sample's JSON lines with `edit` applied to them.
    fn edited(edit: impl Fn(&mut Vec<String>)) -> String {
        let mut lines: Vec<String> = sample().to_jsonl().lines().map(String::from).collect();
        edit(&mut lines);
        lines.join("\n")
    }

    #[test]
    fn a_timeline_run_could_not_have_written_is_refused_naming_the_line() {
        // A record after the closing one.
        let text = edited(|l| {
            let first = l[1].clone();
            l.push(first)
        });
        let e = Timeline::from_jsonl(&text).unwrap_err().to_string();
        assert!(e.contains("a record after the closing record"), "{e}");
        // An outcome and a verdict nobody writes.
        let text = edited(|l| {
            let last = l.len() - 1;
            l[last] = l[last].replace("\"failed\"", "\"bogus-outcome\"");
        });
        let e = Timeline::from_jsonl(&text).unwrap_err().to_string();
        assert!(e.contains("unknown outcome \"bogus-outcome\""), "{e}");
        let text = edited(|l| {
            let last = l.len() - 1;
            l[last] = l[last].replace("\"verdict\":\"failed\"", "\"verdict\":\"meh\"");
        });
        let e = Timeline::from_jsonl(&text).unwrap_err().to_string();
        assert!(e.contains("unknown verdict \"meh\""), "{e}");
        // A newer harness's file.
        let text = edited(|l| {
            l[0] = l[0].replace("\"versions\":{", "\"versions\":{\"harness\":\"999.0.0\",");
        });
        let e = Timeline::from_jsonl(&text).unwrap_err().to_string();
        assert!(
            e.contains("written by harness 999.0.0, newer than this one"),
            "{e}"
        );
        // Our own version and the sample itself are fine.
        let ours = format!(
            "\"versions\":{{\"harness\":\"{}\",",
            env!("CARGO_PKG_VERSION")
        );
        let text = edited(|l| l[0] = l[0].replace("\"versions\":{", &ours));
        assert!(Timeline::from_jsonl(&text).is_ok());
    }

    #[test]
    fn a_line_longer_than_the_bound_is_refused_without_reading_it_all() {
        let long = "x".repeat(MAX_LINE + 10);
        let e = Timeline::from_jsonl(&long).unwrap_err();
        assert!(matches!(e, TimelineError::LineTooLong { line: 1 }), "{e}");
    }
}
