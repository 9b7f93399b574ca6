//! Scenarios: data (id, title, requirements, parameters, checks) plus small step functions.
//! Steps act only through [`Ctx`], which records every action on the timeline, bounds every
//! wait with a deadline, and tracks injected faults so the engine can restore them on any exit.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::checks::Check;
use crate::error::Cause;
use crate::keys::{FaultKey, Marker};
use crate::phase::Phase;
use crate::schedule::{FaultSchedule, InjectionPoint};
use crate::target::{
    Capability, ExecResult, Fault, SandboxSpec, SandboxView, Target, TargetError, TargetInfo,
};
use crate::timeline::{
    ActionStatus, Event, FaultPhase, FaultRecord, ObjectRef, ObjectState, Recorder, SentinelOp,
    SentinelPath, SentinelRecord, SentinelResult,
};
use crate::topology::Topology;

/// The stages of a case; each becomes a JUnit test case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Provision,
    Install,
    /// Create sandboxes, write sentinels, start workloads.
    Seed,
    /// Inject faults and act while they last.
    Fault,
    /// Recover and read back what the checks need.
    Verify,
    Teardown,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Self::Provision => "provision",
            Self::Install => "install",
            Self::Seed => "seed",
            Self::Fault => "fault",
            Self::Verify => "verify",
            Self::Teardown => "teardown",
        }
    }

    /// Default deadline for one step of this stage. Generous for real clusters; in virtual
    /// time it costs nothing.
    pub(crate) fn default_deadline(self) -> Duration {
        match self {
            Self::Provision | Self::Install => Duration::from_secs(15 * 60),
            Self::Seed | Self::Verify | Self::Teardown => Duration::from_secs(10 * 60),
            Self::Fault => Duration::from_secs(30 * 60),
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a step stopped early.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StepError {
    /// The product did something the scenario cannot go on from: a product failure of
    /// `requirements` (none named: those of the step it stopped, [`StepError::of_step`]).
    #[error("{}{message}", named(requirements))]
    Failed {
        requirements: Vec<String>,
        message: String,
    },
    /// A wait ran out: a product failure of the requirement of the behaviour it waited for;
    /// names the stage, what was awaited, the deadline and the last states.
    #[error("{}{stage}: gave up waiting for {what} after {}; last seen: {}", named(std::slice::from_ref(requirement)), humantime::format_duration(*deadline), if last_seen.is_empty() { "nothing".to_string() } else { last_seen.iter().map(ObjectState::summary).collect::<Vec<_>>().join("; ") })]
    Deadline {
        requirement: String,
        stage: Stage,
        what: String,
        deadline: Duration,
        last_seen: Vec<ObjectState>,
    },
    /// The harness or infrastructure failed; the case is an error, not a product failure. The
    /// message says what was being done; `source`, when present, why it failed.
    #[error("infrastructure: {message}")]
    Infra {
        message: String,
        #[source]
        source: Option<Cause>,
    },
    /// The target cannot run this; the case is skipped with this reason.
    #[error("skipped: {0}")]
    Skip(String),
}

/// `[R6, R9] `: how a product failure names its requirements, ahead of what happened.
fn named(requirements: &[String]) -> String {
    if requirements.is_empty() {
        String::new()
    } else {
        format!("[{}] ", requirements.join(", "))
    }
}

impl From<TargetError> for StepError {
    fn from(e: TargetError) -> Self {
        match e {
            TargetError::Refused { .. } => Self::failed(&[], format!("unexpectedly refused: {e}")),
            TargetError::Unsupported(m) => Self::Skip(m),
            TargetError::Infra { message, source } => Self::Infra { message, source },
        }
    }
}

/// A create, stop or start as a step called it: what the target said, and the requirement a
/// refusal of it breaks. A step may wait for several behaviours (create and stop, say); a
/// refusal is the failure of the one call's, never of all the step's ([`StepError::of_step`]).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct ActionError {
    /// The requirement of what the call asks for: [`CREATE_REQUIREMENT`], [`STOP_CONTRACT`],
    /// [`START_REQUIREMENT`].
    pub requirement: &'static str,
    pub error: TargetError,
}

impl ActionError {
    /// Whether the product refused the call (a step may expect that and go on).
    pub fn is_refused(&self) -> bool {
        matches!(self.error, TargetError::Refused { .. })
    }
}

impl From<ActionError> for StepError {
    fn from(e: ActionError) -> Self {
        match e.error {
            TargetError::Refused { .. } => Self::failed(
                &[e.requirement],
                format!("unexpectedly refused: {}", e.error),
            ),
            other => other.into(),
        }
    }
}

/// What a refused create breaks: the sandbox asked for is provisioned (REQUIREMENTS.md R11).
pub const CREATE_REQUIREMENT: &str = "R11";

/// What a stop that is refused or does not complete breaks: an explicit stop ends in Stopped
/// and stays there (the stop contract, R7; docs/upstream-facts.md F1.9).
pub const STOP_CONTRACT: &str = "R7";

/// What a refused start breaks: stop then start is the supported way back (R8; F1.10).
pub const START_REQUIREMENT: &str = "R8";

impl StepError {
    crate::error::error_constructors!(
        Infra,
        infra,
        infra_from,
        "harness or infrastructure failure"
    );

    /// A product failure of `requirements` (empty: the requirements of the step it stops).
    pub fn failed(requirements: &[&str], message: impl Into<String>) -> Self {
        Self::Failed {
            requirements: requirements.iter().map(|r| r.to_string()).collect(),
            message: message.into(),
        }
    }

    /// The requirements this error breaks: none for an error of the harness or a skip.
    pub fn requirements(&self) -> &[String] {
        match self {
            Self::Failed { requirements, .. } => requirements,
            Self::Deadline { requirement, .. } => std::slice::from_ref(requirement),
            Self::Infra { .. } | Self::Skip(_) => &[],
        }
    }

    /// This error as the step `step` ended with it: a product failure that names no
    /// requirement of its own (a refusal the step could not go on from) breaks the step's,
    /// so that no product failure goes unnamed.
    pub(crate) fn of_step(self, step: &Step) -> Self {
        match self {
            Self::Failed {
                requirements,
                message,
            } if requirements.is_empty() => Self::Failed {
                requirements: step.requirements.clone(),
                message,
            },
            other => other,
        }
    }

    /// What the case's outcome and report say of this error: the whole chain on one line, and
    /// for an infrastructure failure without the `infrastructure:` heading (the outcome says
    /// it is an error).
    pub(crate) fn reason(&self) -> String {
        match self {
            Self::Infra { message, source } => match source {
                Some(source) => format!("{message}: {}", crate::error::one_line(&**source)),
                None => message.clone(),
            },
            other => crate::error::one_line(other),
        }
    }
}

/// Errors are equal when they say the same thing at every level of their chain: causes are
/// opaque, so their messages are what can be compared.
impl PartialEq for StepError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Skip(a), Self::Skip(b)) => a == b,
            (Self::Infra { .. }, Self::Infra { .. }) => {
                crate::error::chain(self) == crate::error::chain(other)
            }
            (Self::Failed { .. }, Self::Failed { .. })
            | (Self::Deadline { .. }, Self::Deadline { .. }) => {
                self.to_string() == other.to_string()
            }
            _ => false,
        }
    }
}

pub type StepResult = Result<(), StepError>;
pub(crate) type StepFn = for<'a> fn(&'a mut Ctx) -> BoxFuture<'a, StepResult>;

#[derive(Clone)]
pub struct Step {
    pub stage: Stage,
    pub name: String,
    /// The requirements of the behaviours the step waits for ([`Step::waiting_for`]): a
    /// product failure of the step that names none of its own breaks these.
    pub requirements: Vec<String>,
    pub deadline: Duration,
    pub run: StepFn,
}

impl Step {
    pub fn new(stage: Stage, name: &str, run: StepFn) -> Self {
        Self {
            stage,
            name: name.to_string(),
            requirements: Vec::new(),
            deadline: stage.default_deadline(),
            run,
        }
    }

    /// Names the requirements of the behaviours the step waits for (the stop contract for a
    /// step that stops a sandbox, R11 for one that provisions it): each wait inside names the
    /// one it serves, and a product failure that names none breaks these. The catalog's test
    /// walks every step and check for one.
    pub fn waiting_for(mut self, requirements: &[&str]) -> Self {
        self.requirements = requirements.iter().map(|r| r.to_string()).collect();
        self
    }

    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The step's deadline for a case: its own deadline plus every duration the case asks the
    /// harness to hold a fault, so a longer requested outage never runs into the harness's own
    /// deadline (an outage of 31 min against a fixed 30 min step deadline, say).
    pub fn deadline_for(&self, params: &Params) -> Duration {
        self.deadline.saturating_add(params.requested_holds())
    }
}

/// What one case of a scenario varies on, as the scenario's own type (an exit code and how the
/// workload's supervision ends, say). Steps read it back typed with [`Ctx::variant`]; its label
/// names the case and is what timelines and JUnit record.
pub trait Variant: std::any::Any + Send + Sync + std::fmt::Debug {
    /// `(key, value)` pairs for the case id (`exit=1,via=gateway-restart`).
    fn label(&self) -> Vec<(&'static str, String)>;

    /// What this variant needs of the target beyond what its scenario declares.
    fn requires(&self) -> Vec<Capability> {
        Vec::new()
    }
}

/// A case that varies on which bootstrap material a fault breaks is labelled `what=<material>`.
impl Variant for crate::target::BootstrapMaterial {
    fn label(&self) -> Vec<(&'static str, String)> {
        vec![("what", self.name().to_string())]
    }
}

/// Parameters of one case: what varies between cases of a scenario.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Params {
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_ms")]
    pub outage: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point: Option<InjectionPoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<FaultSchedule>,
    /// Anything else a scenario varies on (exit code, restart policy, fault variant).
    #[serde(default)]
    pub values: BTreeMap<String, String>,
    /// What this variant needs of the target beyond what its scenario declares (a variant that
    /// restarts the gateway where the scenario's other variants kill a supervisor).
    #[serde(skip)]
    pub requires: Vec<Capability>,
    /// The scenario's typed variant, if it has one (its label is in `values`).
    #[serde(skip)]
    variant: Option<Arc<dyn Variant>>,
}

/// Equal when they name the same case: the typed variant is compared through its label.
impl PartialEq for Params {
    fn eq(&self, other: &Self) -> bool {
        self.outage == other.outage
            && self.point == other.point
            && self.schedule == other.schedule
            && self.values == other.values
            && self.requires == other.requires
    }
}

impl Params {
    pub fn with_outage(mut self, d: Duration) -> Self {
        self.outage = Some(d);
        self
    }

    pub fn with(mut self, key: &str, value: &str) -> Self {
        self.values.insert(key.to_string(), value.to_string());
        self
    }

    /// Sets the scenario's typed variant: its label joins the case's values and its
    /// capabilities the case's requirements.
    pub fn with_variant(mut self, variant: impl Variant) -> Self {
        for (k, v) in variant.label() {
            self.values.insert(k.to_string(), v);
        }
        for c in variant.requires() {
            self = self.requiring(c);
        }
        self.variant = Some(Arc::new(variant));
        self
    }

    /// The typed variant, if it is a `V`.
    pub fn variant<V: Variant>(&self) -> Option<&V> {
        let any: &dyn std::any::Any = self.variant.as_deref()?;
        any.downcast_ref()
    }

    /// Declares a capability this variant needs (see [`Case::requires`]).
    pub(crate) fn requiring(mut self, capability: Capability) -> Self {
        if !self.requires.contains(&capability) {
            self.requires.push(capability);
        }
        self
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// The total time the case asks faults to be held: its outage and every outage of its
    /// schedule. Harness deadlines grow by it.
    pub fn requested_holds(&self) -> Duration {
        let scheduled = self
            .schedule
            .iter()
            .flat_map(|s| &s.faults)
            .fold(Duration::ZERO, |sum, f| sum.saturating_add(f.outage));
        self.outage.unwrap_or_default().saturating_add(scheduled)
    }

    /// A short label for case ids: `outage=30s,exit=1`.
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if let Some(o) = self.outage {
            parts.push(format!("outage={}", humantime::format_duration(o)));
        }
        if let Some(p) = self.point {
            parts.push(format!("point={p}"));
        }
        if let Some(s) = &self.schedule {
            parts.push(format!("seed={}", s.seed));
        }
        for (k, v) in &self.values {
            parts.push(format!("{k}={v}"));
        }
        parts.join(",")
    }

    /// As text for the timeline and JUnit properties.
    pub fn as_text(&self) -> BTreeMap<String, String> {
        let mut m = self.values.clone();
        if let Some(o) = self.outage {
            m.insert("outage".into(), humantime::format_duration(o).to_string());
        }
        if let Some(p) = self.point {
            m.insert("point".into(), p.to_string());
        }
        if let Some(s) = &self.schedule {
            m.insert("seed".into(), s.seed.to_string());
            m.insert("schedule".into(), s.describe());
        }
        m
    }
}

mod opt_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

/// Builds the checks of a case; they may depend on the case (sandbox names, outage length).
pub(crate) type ChecksFn = fn(&CaseInfo) -> Vec<Check>;

/// One scenario: runs unchanged against any target and topology.
#[derive(Clone)]
pub struct Scenario {
    pub id: String,
    pub title: String,
    pub requirements: Vec<String>,
    pub requires: Vec<Capability>,
    pub steps: Vec<Step>,
    pub checks: ChecksFn,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("id", &self.id)
            .field("requirements", &self.requirements)
            .finish_non_exhaustive()
    }
}

/// One (scenario, topology, parameters) combination.
#[derive(Clone, Debug)]
pub struct Case {
    pub scenario: Arc<Scenario>,
    pub topology: Topology,
    pub params: Params,
}

impl Case {
    pub fn new(scenario: Arc<Scenario>, topology: Topology, params: Params) -> Self {
        Self {
            scenario,
            topology,
            params,
        }
    }

    /// What the case needs of the target: its scenario's capabilities and its variant's.
    pub fn requires(&self) -> Vec<Capability> {
        let mut all = self.scenario.requires.clone();
        for c in &self.params.requires {
            if !all.contains(c) {
                all.push(*c);
            }
        }
        all
    }

    /// Whether the case declares a fault that every sandbox on a shared cluster would see (the
    /// gateway stopped or restarted), so it must run alone there.
    pub(crate) fn touches_shared_gateway(&self) -> bool {
        self.requires().iter().any(|c| c.affects_shared_gateway())
    }

    /// `scenario[topology,outage=30s]`: stable, readable, unique within a run.
    pub fn id(&self) -> String {
        let label = self.params.label();
        if label.is_empty() {
            format!("{}[{}]", self.scenario.id, self.topology.name)
        } else {
            format!("{}[{},{label}]", self.scenario.id, self.topology.name)
        }
    }

    pub fn info(&self, target: TargetInfo) -> CaseInfo {
        CaseInfo {
            case_id: self.id(),
            scenario: self.scenario.id.clone(),
            topology: self.topology.clone(),
            params: self.params.clone(),
            target,
        }
    }
}

/// What a step or a checks function knows about its case.
#[derive(Clone, Debug)]
pub struct CaseInfo {
    pub case_id: String,
    pub scenario: String,
    pub topology: Topology,
    pub params: Params,
    pub target: TargetInfo,
}

impl CaseInfo {
    /// A sandbox name unique to this case and role that OpenShell accepts: a DNS label of at
    /// most 19 characters without consecutive hyphens, so that `<workspace>--<name>` and the
    /// gateway's other routable names fit one DNS label (docs/upstream-facts.md F3.2, F12.13).
    /// A readable prefix of the role and the scenario (the role first, so a case's sandboxes
    /// stay apart to the eye), then a hash of the case and role.
    pub fn sandbox_name(&self, role: &str) -> String {
        let hash = fnv1a(format!("{}/{role}", self.case_id).as_bytes());
        let mut base = String::new();
        for c in format!("{role}-{}", self.scenario).chars() {
            let c = if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            };
            if !(c == '-' && (base.is_empty() || base.ends_with('-'))) {
                base.push(c);
            }
        }
        base.truncate(MAX_SANDBOX_NAME - 9);
        let base = base.trim_end_matches('-');
        if base.is_empty() {
            format!("s-{hash:08x}")
        } else {
            format!("{base}-{hash:08x}")
        }
    }

    /// The Kubernetes name of a sandbox's resources: the Sandbox resource and its pod are
    /// `<workspace>--<name>` in OpenShell's default shared workspace mode, its PVC
    /// `workspace-<that>` (docs/upstream-facts.md F3.2).
    pub fn resource_name(&self, sandbox: &str) -> String {
        crate::target::sandbox_resource_name(DEFAULT_WORKSPACE, sandbox)
    }

    /// The content written into a sentinel: unique per case and key, so a sentinel from another
    /// case or an earlier run cannot pass for this one.
    pub(crate) fn sentinel_value(&self, key: &str) -> String {
        format!(
            "{key}-{:08x}",
            fnv1a(format!("{}/{key}", self.case_id).as_bytes())
        )
    }
}

/// The longest sandbox name OpenShell accepts (docs/upstream-facts.md F12.13).
pub const MAX_SANDBOX_NAME: usize = 19;

fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// OpenShell's default workspace (`--workspace`, docs/upstream-facts.md F6.1).
pub const DEFAULT_WORKSPACE: &str = "default";

/// The requirement a sentinel that cannot be written or read back breaks: workspace data
/// (REQUIREMENTS.md R6).
pub const SENTINEL_REQUIREMENT: &str = "R6";

/// Where sentinels live inside a sandbox: on the workspace volume (`/sandbox`,
/// docs/upstream-facts.md F3.6), in a directory of their own.
pub(crate) const SENTINEL_DIR: &str = "/sandbox/.conformance";
/// [`SENTINEL_DIR`] relative to the workspace root, as [`Target::read_workspace`] takes it.
const SENTINEL_SUBDIR: &str = ".conformance";

/// The word a shell-usability command prints before it reads a sentinel ([`Ctx::use_shell`]).
const SHELL_RAN: &str = "usable";

/// What a read through the shell came to: the file's content, missing, or a failure to run.
fn sentinel_read(r: Result<ExecResult, TargetError>) -> SentinelResult {
    match r {
        Ok(r) if r.exit_code == 0 => SentinelResult::Ok(r.stdout),
        Ok(r) if r.stderr.contains("No such file") => SentinelResult::Missing,
        Ok(r) => SentinelResult::Failed(format!("exit {}: {}", r.exit_code, r.stderr.trim())),
        Err(e) => SentinelResult::Failed(crate::error::one_line(&e)),
    }
}

/// A fault the case injected and has not yet restored.
#[derive(Clone, Debug)]
pub(crate) struct ActiveFault {
    pub id: String,
    pub fault: Fault,
}

/// What a wait probes again on, besides its poll ([`Ctx::wait_for_waking`]).
#[derive(Clone, Copy, Debug)]
pub enum WakeOn<'a> {
    /// Only its poll.
    Poll,
    /// A new state of this object recorded by an observer.
    Object(&'a ObjectRef),
    /// A new state of any object recorded by an observer.
    AnyObject,
}

/// The context a step runs in.
pub struct Ctx {
    pub target: Arc<dyn Target>,
    pub rec: Recorder,
    pub case: CaseInfo,
    pub stage: Stage,
    /// How often waits poll the target.
    pub poll: Duration,
    active: Vec<ActiveFault>,
    /// Every fault key injected so far: a key names one fault of the case.
    injected: BTreeSet<FaultKey>,
    /// Free-form state steps hand to later steps.
    pub vars: BTreeMap<String, String>,
}

impl Ctx {
    pub fn new(target: Arc<dyn Target>, rec: Recorder, case: CaseInfo, poll: Duration) -> Self {
        Self {
            target,
            rec,
            case,
            stage: Stage::Seed,
            poll,
            active: Vec::new(),
            injected: BTreeSet::new(),
            vars: BTreeMap::new(),
        }
    }

    pub fn sandbox_name(&self, role: &str) -> String {
        self.case.sandbox_name(role)
    }

    pub fn params(&self) -> &crate::scenario::Params {
        &self.case.params
    }

    /// The case's typed variant; a case built without one is a harness error.
    pub fn variant<V: Variant>(&self) -> Result<&V, StepError> {
        self.case.params.variant().ok_or_else(|| {
            StepError::infra(format!(
                "case {} has no variant of type {}",
                self.case.case_id,
                std::any::type_name::<V>()
            ))
        })
    }

    pub fn mark(&self, marker: &Marker) {
        self.rec.mark(marker.as_str());
    }

    /// Marks `marker` after every state the observers have recorded: within a millisecond the
    /// timeline puts the harness's own entries before what observers saw
    /// ([`crate::timeline::Recorder::snapshot`]), so a mark that means "once this was seen",
    /// placed in the millisecond the state was seen, would come before that state.
    pub async fn mark_after_observed(&self, marker: &Marker) {
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.mark(marker);
    }

    pub fn observe_value(&self, key: &str, subject: Option<&str>, value: serde_json::Value) {
        self.rec.record(Event::Observation {
            key: key.to_string(),
            subject: subject.map(str::to_string),
            value,
        });
    }

    /// Records the attempts `sandbox`'s supervisor has logged so far
    /// ([`crate::retries::ATTEMPTS_KEY`]), for R5's back-off checks; what kept them from being
    /// read is recorded instead, and those checks say so.
    pub async fn record_attempts(&self, sandbox: &str) {
        /// A log read is one API call; a cluster that does not answer it is judged by the
        /// checks as unreadable, not waited for.
        const READ: Duration = Duration::from_secs(30);
        let unavailable = |why: String| serde_json::json!({ "unavailable": why });
        let value = match tokio::time::timeout(READ, self.target.supervisor_log(sandbox)).await {
            Ok(Ok(Some(lines))) if self.case.topology.supervisor_per_sandbox() => {
                serde_json::to_value(crate::retries::parse_attempts(&lines))
                    .unwrap_or_else(|e| unavailable(e.to_string()))
            }
            Ok(Ok(Some(lines))) => {
                let resource = self.case.resource_name(sandbox);
                match crate::retries::parse_attempts_of(&lines, &resource) {
                    Some(a) => {
                        serde_json::to_value(a).unwrap_or_else(|e| unavailable(e.to_string()))
                    }
                    None => unavailable(
                        "the supervisor serves every sandbox and its log does not say which \
                         sandbox an attempt was for"
                            .to_string(),
                    ),
                }
            }
            Ok(Ok(None)) => unavailable(format!(
                "the {} target does not read supervisor logs",
                self.case.target.kind
            )),
            Ok(Err(e)) => unavailable(e.to_string()),
            Err(_) => unavailable(format!(
                "reading the supervisor's log got no answer within {}",
                humantime::format_duration(READ)
            )),
        };
        self.observe_value(crate::retries::ATTEMPTS_KEY, Some(sandbox), value);
    }

    /// Sleeps in tokio time (virtual in emulated runs), recorded as a wait the scenario
    /// mandates ([`crate::timeline::SCENARIO_WAIT_KEY`]).
    pub async fn sleep(&self, d: Duration) {
        self.mandated_wait("sleep", d);
        tokio::time::sleep(d).await;
    }

    fn mandated_wait(&self, what: &str, d: Duration) {
        self.observe_value(
            crate::timeline::SCENARIO_WAIT_KEY,
            Some(what),
            serde_json::json!(d.as_millis() as u64),
        );
    }

    /// Runs one target call as a recorded action. Refusals by the product are returned to the
    /// step, which decides whether they are expected.
    pub async fn act<T, F>(&self, name: &str, subject: Option<&str>, f: F) -> Result<T, TargetError>
    where
        F: std::future::Future<Output = Result<T, TargetError>>,
        T: std::fmt::Debug,
    {
        act(&self.rec, name, subject, f).await
    }

    pub async fn create_sandbox(&self, spec: &SandboxSpec) -> Result<SandboxView, ActionError> {
        self.begin_create(spec).await
    }

    /// The create of [`Ctx::create_sandbox`] as a call that borrows nothing of the case, so a
    /// step can inject a fault while it runs: a CLI's create may return only once the sandbox is
    /// Ready (v0.0.111's does, docs/upstream-facts.md F6.3), and what happens during bootstrap
    /// happens while it waits.
    pub fn begin_create(
        &self,
        spec: &SandboxSpec,
    ) -> impl std::future::Future<Output = Result<SandboxView, ActionError>> + Send + 'static {
        let (target, rec, spec) = (self.target.clone(), self.rec.clone(), spec.clone());
        async move {
            let view = act(
                &rec,
                "create",
                Some(&spec.name),
                target.create_sandbox(&spec),
            )
            .await
            .map_err(|error| ActionError {
                requirement: CREATE_REQUIREMENT,
                error,
            })?;
            rec.observe_direct(view.to_state());
            Ok(view)
        }
    }

    pub async fn stop_sandbox(&self, name: &str) -> Result<(), ActionError> {
        self.act("stop", Some(name), self.target.stop_sandbox(name))
            .await
            .map_err(|error| ActionError {
                requirement: STOP_CONTRACT,
                error,
            })
    }

    pub async fn start_sandbox(&self, name: &str) -> Result<(), ActionError> {
        self.act("start", Some(name), self.target.start_sandbox(name))
            .await
            .map_err(|error| ActionError {
                requirement: START_REQUIREMENT,
                error,
            })
    }

    pub async fn delete_sandbox(&self, name: &str) -> Result<(), TargetError> {
        self.act("delete", Some(name), self.target.delete_sandbox(name))
            .await
    }

    /// Runs a shell command in the sandbox (`sh -c SCRIPT`).
    pub async fn sh(&self, sandbox: &str, script: &str) -> Result<ExecResult, TargetError> {
        let argv = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
        self.act("exec", Some(sandbox), self.target.exec(sandbox, &argv))
            .await
    }

    /// Runs a shell command in the sandbox's workload container through the Kubernetes API,
    /// bypassing the gateway (see [`Target::probe_exec`]).
    pub async fn probe(&self, sandbox: &str, script: &str) -> Result<ExecResult, TargetError> {
        let argv = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
        self.act(
            "probe",
            Some(sandbox),
            self.target.probe_exec(sandbox, &argv),
        )
        .await
    }

    /// Reads the gateway's view of a sandbox and records it.
    pub async fn get_sandbox(&self, name: &str) -> Result<Option<SandboxView>, TargetError> {
        let v = match self.target.get_sandbox(name).await {
            Ok(v) => v,
            Err(e) => {
                // The gateway did not answer: what it would say is unknown, not what it said
                // last (for a sandbox it has shown and not deleted).
                let unknown = SandboxView::unreachable_state(name, &crate::error::one_line(&e));
                if self
                    .rec
                    .last_state(&unknown.object_ref())
                    .is_some_and(|last| !last.deleted)
                {
                    self.rec.observe_direct(unknown);
                }
                return Err(e);
            }
        };
        match &v {
            Some(view) => {
                if self.rec.observe_direct(view.to_state()) {
                    // The record as stored before a gateway fault says nothing of now: the
                    // step sees what the timeline records, a phase not known.
                    return Ok(Some(SandboxView {
                        phase: Phase::Unknown,
                        reason: Some(crate::timeline::STORED_BEFORE_FAULT_REASON.into()),
                        exit_code: None,
                        ..view.clone()
                    }));
                }
            }
            None => {
                if let Some(mut last) = self.rec.last_state(&crate::timeline::ObjectRef {
                    kind: crate::timeline::GATEWAY_SANDBOX_KIND.into(),
                    namespace: None,
                    name: name.to_string(),
                }) && !last.deleted
                {
                    last.deleted = true;
                    self.rec.observe_direct(last);
                }
            }
        }
        Ok(v)
    }

    /// Polls until `probe` returns Some, or the deadline passes. The error is a failure of
    /// `requirement`, the requirement of the behaviour awaited, and names the stage, what was
    /// awaited, the deadline, and the last states recorded for the case.
    pub async fn wait_for<T, F, Fut>(
        &self,
        requirement: &str,
        what: &str,
        deadline: Duration,
        probe: F,
    ) -> Result<T, StepError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>, StepError>>,
    {
        self.wait_for_waking(requirement, what, deadline, WakeOn::Poll, probe)
            .await
    }

    /// [`Ctx::wait_for`] that also probes as soon as an observer records a new state of what
    /// `wake_on` names: the object whose state the probe asks the target about, or any object
    /// for a probe over several, so the wait ends when the change is seen rather than up to a
    /// poll later.
    pub async fn wait_for_waking<T, F, Fut>(
        &self,
        requirement: &str,
        what: &str,
        deadline: Duration,
        wake_on: WakeOn<'_>,
        mut probe: F,
    ) -> Result<T, StepError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>, StepError>>,
    {
        let until = tokio::time::Instant::now() + deadline;
        loop {
            // Before the probe, so that a state recorded while it runs wakes the next one.
            let changed = match wake_on {
                WakeOn::Poll => None,
                WakeOn::Object(o) => Some(self.rec.next_watched_state(Some(o))),
                WakeOn::AnyObject => Some(self.rec.next_watched_state(None)),
            };
            if let Some(v) = probe().await? {
                return Ok(v);
            }
            if tokio::time::Instant::now() >= until {
                // The scenario waited all of its deadline: its own wait, not the harness's.
                self.mandated_wait(&format!("deadline: {what}"), deadline);
                return Err(StepError::Deadline {
                    requirement: requirement.to_string(),
                    stage: self.stage,
                    what: what.to_string(),
                    deadline,
                    last_seen: self.relevant_last_states(),
                });
            }
            let poll = tokio::time::sleep(
                self.poll
                    .min(until - tokio::time::Instant::now())
                    .max(Duration::from_millis(1)),
            );
            match changed {
                Some(changed) => {
                    let woken = tokio::select! {
                        biased;
                        () = changed => true,
                        () = poll => false,
                    };
                    if woken {
                        // Probe in the next millisecond: within one, the timeline puts the
                        // harness's own reads before what observers saw (Recorder::snapshot),
                        // so a newer state the probe reads would come before the one that woke
                        // it.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                None => poll.await,
            }
        }
    }

    /// The gateway's view of sandbox `name` as the timeline names it.
    fn gateway_sandbox(name: &str) -> ObjectRef {
        ObjectRef {
            kind: crate::timeline::GATEWAY_SANDBOX_KIND.into(),
            namespace: None,
            name: name.to_string(),
        }
    }

    /// Waits until the gateway reports the sandbox in one of `phases`; giving up fails
    /// `requirement`, the requirement of that phase being reached (the stop contract for
    /// Stopped, R11 for Ready after creation).
    pub async fn wait_phase(
        &self,
        requirement: &str,
        name: &str,
        phases: &[Phase],
        deadline: Duration,
    ) -> Result<SandboxView, StepError> {
        let phase_names: Vec<&str> = phases.iter().map(Phase::name).collect();
        let what = format!("sandbox {name} to be {}", phase_names.join(" or "));
        let object = Self::gateway_sandbox(name);
        self.wait_for_waking(
            requirement,
            &what,
            deadline,
            WakeOn::Object(&object),
            || async {
                match self.get_sandbox(name).await {
                    Ok(Some(v)) if phases.contains(&v.phase) => Ok(Some(v)),
                    Ok(_) => Ok(None),
                    // An unreachable gateway is a state to wait through, not a harness failure.
                    Err(TargetError::Refused { .. }) | Err(TargetError::Infra { .. }) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            },
        )
        .await
    }

    /// Waits until the gateway no longer reports the sandbox in `phase` (another phase, or no
    /// sandbox at all); a gateway that cannot answer has not said so.
    pub async fn wait_phase_left(
        &self,
        requirement: &str,
        name: &str,
        phase: &Phase,
        deadline: Duration,
    ) -> Result<Option<SandboxView>, StepError> {
        let what = format!("sandbox {name} to leave {}", phase.name());
        let object = Self::gateway_sandbox(name);
        self.wait_for_waking(
            requirement,
            &what,
            deadline,
            WakeOn::Object(&object),
            || async {
                match self.get_sandbox(name).await {
                    Ok(Some(v)) if &v.phase == phase => Ok(None),
                    Ok(v) => Ok(Some(v)),
                    Err(TargetError::Refused { .. }) | Err(TargetError::Infra { .. }) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            },
        )
        .await
    }

    /// Like [`Ctx::wait_phase`], but a timeout is not an error: it returns None and leaves the
    /// verdict to the checks, which name the broken requirement.
    pub async fn settle_phase(
        &self,
        requirement: &str,
        name: &str,
        phases: &[Phase],
        deadline: Duration,
    ) -> Option<SandboxView> {
        match self.wait_phase(requirement, name, phases, deadline).await {
            Ok(v) => Some(v),
            Err(e) => {
                self.rec.note(format!("not reached: {e}"));
                None
            }
        }
    }

    /// Reads a workspace file without going through the sandbox (see
    /// [`Target::read_workspace`]), recorded as an action.
    pub async fn read_workspace(
        &self,
        sandbox: &str,
        path: &str,
    ) -> Result<Option<String>, TargetError> {
        self.act(
            "read-workspace",
            Some(sandbox),
            self.target.read_workspace(sandbox, path),
        )
        .await
    }

    /// Waits until the gateway no longer knows the sandbox.
    pub async fn wait_gone(
        &self,
        requirement: &str,
        name: &str,
        deadline: Duration,
    ) -> Result<(), StepError> {
        self.wait_for_waking(
            requirement,
            &format!("sandbox {name} to be deleted"),
            deadline,
            WakeOn::Object(&Self::gateway_sandbox(name)),
            || async {
                match self.get_sandbox(name).await {
                    Ok(None) => Ok(Some(())),
                    Ok(Some(_))
                    | Err(TargetError::Refused { .. })
                    | Err(TargetError::Infra { .. }) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            },
        )
        .await
    }

    fn relevant_last_states(&self) -> Vec<ObjectState> {
        self.rec.last_states()
    }

    /// Writes a sentinel into the sandbox's workspace and records the write.
    ///
    /// A write the product's path did not carry out (a non-zero exit, a refusal) is a product
    /// failure naming the sentinels' requirement; only a harness that could not reach the
    /// product at all ([`TargetError::Infra`]) is an infrastructure error. A write reported
    /// failed with no output at all is read back first: when the workspace holds its value
    /// (each key's value is the case's own, written once), the write took effect and only its
    /// exit status was lost, as real OpenShell's supervisor loses that of a command which ends
    /// at once on a loaded machine (docs/upstream-facts.md F2.14); it counts, with a note.
    pub async fn write_sentinel(&self, sandbox: &str, key: &str) -> Result<(), StepError> {
        let value = self.case.sentinel_value(key);
        let script =
            format!("mkdir -p {SENTINEL_DIR} && printf %s '{value}' > {SENTINEL_DIR}/{key}");
        let written = match self.sh(sandbox, &script).await {
            Ok(r) if r.exit_code != 0 && r.stdout.is_empty() && r.stderr.trim().is_empty() => {
                if self.holds_sentinel(sandbox, key, &value).await {
                    self.rec.note(format!(
                        "the shell reported exit {} with no output for the write of sentinel {key} into {sandbox}, and the workspace holds what it wrote: the write took effect and its exit status was lost (docs/upstream-facts.md F2.14)",
                        r.exit_code
                    ));
                    Ok(ExecResult { exit_code: 0, ..r })
                } else {
                    Ok(r)
                }
            }
            other => other,
        };
        let (result, harness_failure) = match written {
            Ok(r) if r.exit_code == 0 => (SentinelResult::Ok(value), false),
            Ok(r) => (
                SentinelResult::Failed(format!("exit {}: {}", r.exit_code, r.stderr.trim())),
                false,
            ),
            Err(TargetError::Unsupported(m)) => (SentinelResult::Failed(m), true),
            Err(e @ TargetError::Infra { .. }) => {
                (SentinelResult::Failed(crate::error::one_line(&e)), true)
            }
            Err(e) => (SentinelResult::Failed(crate::error::one_line(&e)), false),
        };
        self.rec.record(Event::Sentinel(SentinelRecord {
            key: key.to_string(),
            sandbox: sandbox.to_string(),
            op: SentinelOp::Write,
            result: result.clone(),
            via: SentinelPath::Shell,
        }));
        match (result, harness_failure) {
            // The harness could not reach the product at all: its own failure.
            (SentinelResult::Failed(m), true) => Err(StepError::infra(format!(
                "could not write sentinel {key} into {sandbox}: {m}"
            ))),
            // The write went through the product's own path (gateway, supervisor, shell) and
            // did not work: the workspace is not usable, a product failure.
            (SentinelResult::Failed(m), false) => Err(StepError::failed(
                &[SENTINEL_REQUIREMENT],
                format!("could not write sentinel {key} into {sandbox} through its shell: {m}"),
            )),
            _ => Ok(()),
        }
    }

    /// Reads a sentinel back through the sandbox's shell (the user's path) and records what
    /// came back: its content, missing, or a failure to run the read at all. Where the shell
    /// could not run the read, it is read from the workspace volume instead
    /// ([`Ctx::read_sentinel_at_rest`]), so that a sandbox that cannot run is still judged on
    /// what its workspace kept (R6) and not only on its shell; the result is the shell's.
    pub async fn read_sentinel(&self, sandbox: &str, key: &str) -> SentinelResult {
        let script = format!("cat {SENTINEL_DIR}/{key}");
        let result = sentinel_read(self.sh(sandbox, &script).await);
        self.record_read(sandbox, key, &result).await;
        result
    }

    /// Runs one command through the sandbox's shell that says it ran and then reads the
    /// sentinel `key` back, so that a shell judged usable is a shell that reached the
    /// workspace: the read is recorded as [`Ctx::read_sentinel`] records it (an empty or
    /// remounted workspace fails the sentinels' requirement, not the shell's). Whether the
    /// shell ran the command.
    pub async fn use_shell(&self, sandbox: &str, key: &str) -> bool {
        let script = format!("echo {SHELL_RAN} && cat {SENTINEL_DIR}/{key}");
        let r = self.sh(sandbox, &script).await;
        let ran = r.as_ref().is_ok_and(|r| {
            r.stdout
                .strip_prefix(SHELL_RAN)
                .is_some_and(|rest| rest.starts_with('\n'))
        });
        let result = match r {
            Ok(mut r) if ran => {
                r.stdout.drain(..=SHELL_RAN.len());
                sentinel_read(Ok(r))
            }
            Ok(r) => SentinelResult::Failed(format!(
                "the shell did not run the command (exit {}): {}",
                r.exit_code,
                r.stderr.trim()
            )),
            Err(e) => sentinel_read(Err(e)),
        };
        self.record_read(sandbox, key, &result).await;
        ran
    }

    /// Records a read through the shell; one that could not run is followed by a read from
    /// the workspace volume, whose result is returned.
    async fn record_read(
        &self,
        sandbox: &str,
        key: &str,
        result: &SentinelResult,
    ) -> Option<SentinelResult> {
        self.rec.record(Event::Sentinel(SentinelRecord {
            key: key.to_string(),
            sandbox: sandbox.to_string(),
            op: SentinelOp::Read,
            result: result.clone(),
            via: SentinelPath::Shell,
        }));
        if matches!(result, SentinelResult::Failed(_)) {
            return Some(self.read_sentinel_at_rest(sandbox, key).await);
        }
        None
    }

    /// Whether sentinel `key` of `sandbox` holds `value`, read as [`Ctx::read_sentinel`] reads
    /// (through the shell, else from the volume; both recorded): a finished workload may have
    /// ended as the write landed.
    async fn holds_sentinel(&self, sandbox: &str, key: &str, value: &str) -> bool {
        let script = format!("cat {SENTINEL_DIR}/{key}");
        let shell = sentinel_read(self.sh(sandbox, &script).await);
        let at_rest = self.record_read(sandbox, key, &shell).await;
        [Some(shell), at_rest]
            .into_iter()
            .flatten()
            .any(|r| matches!(r, SentinelResult::Ok(v) if v == value))
    }

    /// Reads a sentinel from the sandbox's workspace volume without going through the sandbox
    /// ([`Ctx::read_workspace`], a reader pod on a real cluster) and records what came back:
    /// for a sandbox that cannot run a command (finished, failed), whose workspace must still
    /// hold what was written (R6).
    pub async fn read_sentinel_at_rest(&self, sandbox: &str, key: &str) -> SentinelResult {
        let path = format!("{SENTINEL_SUBDIR}/{key}");
        let result = match self.read_workspace(sandbox, &path).await {
            Ok(Some(content)) => SentinelResult::Ok(content),
            Ok(None) => SentinelResult::Missing,
            Err(e) => SentinelResult::Failed(crate::error::one_line(&e)),
        };
        self.rec.record(Event::Sentinel(SentinelRecord {
            key: key.to_string(),
            sandbox: sandbox.to_string(),
            op: SentinelOp::Read,
            result: result.clone(),
            via: SentinelPath::Reader,
        }));
        result
    }

    /// Injects a fault under `key` and returns the key, which [`Ctx::restore`] and the checks
    /// refer to. The engine restores every fault still active when the steps end, whatever way
    /// they end.
    pub async fn inject(&mut self, key: &FaultKey, fault: Fault) -> Result<FaultKey, StepError> {
        self.inject_for(key, fault, None).await
    }

    /// Injects a fault meant to last `hold` (recorded as the requested window).
    pub async fn inject_for(
        &mut self,
        key: &FaultKey,
        fault: Fault,
        hold: Option<Duration>,
    ) -> Result<FaultKey, StepError> {
        // Checks anchor on a key's first start and end; a second fault under it would be
        // invisible to them.
        if !self.injected.insert(key.clone()) {
            return Err(StepError::infra(format!(
                "fault {key} was already injected in this case; give each fault its own FaultKey"
            )));
        }
        let id = key.to_string();
        self.record_fault(&id, &fault, FaultPhase::Requested, hold);
        // Registered before the call: a fault that half-applied must still be restored.
        self.active.push(ActiveFault {
            id: id.clone(),
            fault: fault.clone(),
        });
        match self.target.inject(&fault).await {
            Ok(()) => {
                self.record_fault(&id, &fault, FaultPhase::Started, None);
                Ok(key.clone())
            }
            Err(TargetError::Unsupported(m)) => {
                Err(StepError::Skip(format!("{}: {m}", fault.kind())))
            }
            Err(e) => Err(StepError::infra_from(
                format!("injecting {}", fault.kind()),
                e,
            )),
        }
    }

    /// Restores one fault now.
    pub async fn restore(&mut self, key: &FaultKey) -> Result<(), StepError> {
        let Some(pos) = self.active.iter().position(|a| a.id == key.as_str()) else {
            return Ok(());
        };
        let active = self.active.remove(pos);
        restore_fault(&*self.target, &self.rec, &active)
            .await
            .map_err(StepError::infra)
    }

    /// Stops the gateway for `hold` under `key`, running nothing meanwhile, then restores it.
    pub async fn outage(&mut self, key: &FaultKey, hold: Duration) -> Result<(), StepError> {
        self.inject_for(key, Fault::GatewayStop, Some(hold)).await?;
        self.hold(hold).await;
        self.restore(key).await
    }

    /// [`Ctx::outage`] at a point the gateway reports: once it reports sandbox `name` in
    /// `phase` (a wait that fails `requirement` if the sandbox is never reported). A sandbox
    /// already past `phase` when it is first seen, or when the gateway stopped, missed the
    /// point: the case cannot say what it was to say, so that is an infrastructure error naming
    /// it, never a verdict about another point.
    pub async fn outage_while(
        &mut self,
        requirement: &str,
        name: &str,
        phase: Phase,
        key: &FaultKey,
        hold: Duration,
    ) -> Result<(), StepError> {
        let missed = |seen: &str| {
            StepError::infra(format!(
                "the outage {key} was to start while sandbox {name} was {}, but it was {seen} before the gateway stopped",
                phase.name()
            ))
        };
        let seen = self
            .wait_for_waking(
                requirement,
                &format!("sandbox {name} to be reported at all"),
                Duration::from_secs(300),
                WakeOn::Object(&Self::gateway_sandbox(name)),
                || async {
                    Ok(match self.get_sandbox(name).await {
                        Ok(Some(v)) if v.phase != Phase::Unknown => Some(v),
                        _ => None,
                    })
                },
            )
            .await?;
        if seen.phase != phase {
            return Err(missed(seen.phase.name()));
        }
        self.inject_for(key, Fault::GatewayStop, Some(hold)).await?;
        // What the gateway reported last before it went away.
        let at_stop = self
            .rec
            .last_state(&Self::gateway_sandbox(name))
            .and_then(|s| s.phase)
            .map(|p| Phase::parse(&p))
            .filter(|p| *p != Phase::Unknown && *p != phase);
        if let Some(other) = at_stop {
            self.restore(key).await?;
            return Err(missed(other.name()));
        }
        self.hold(hold).await;
        self.restore(key).await
    }

    /// Holds an injected outage for `hold`, the scenario's own wait.
    pub async fn hold(&self, hold: Duration) {
        self.mandated_wait("outage", hold);
        tokio::time::sleep(hold).await;
    }

    pub(crate) fn take_active_faults(&mut self) -> Vec<ActiveFault> {
        std::mem::take(&mut self.active)
    }

    fn record_fault(&self, id: &str, fault: &Fault, phase: FaultPhase, hold: Option<Duration>) {
        self.rec.record(Event::Fault(FaultRecord {
            id: id.to_string(),
            kind: fault.kind().to_string(),
            phase,
            subject: fault.subject().map(str::to_string),
            requested_ms: hold.map(|d| d.as_millis() as u64),
            detail: None,
        }));
    }
}

/// Runs `f` as the harness's action `name`, recorded with its outcome.
async fn act<T, F>(
    rec: &Recorder,
    name: &str,
    subject: Option<&str>,
    f: F,
) -> Result<T, TargetError>
where
    F: std::future::Future<Output = Result<T, TargetError>>,
    T: std::fmt::Debug,
{
    let id = rec.action_start(name, subject);
    let result = f.await;
    let (status, detail) = match &result {
        Ok(_) => (ActionStatus::Ok, None),
        Err(e @ TargetError::Refused { .. }) => (ActionStatus::Refused, Some(e.to_string())),
        Err(e) => (ActionStatus::Error, Some(crate::error::one_line(e))),
    };
    rec.action_end(id, name, subject, status, detail);
    result
}

/// Restores a fault and records the end of its window, or the failure to restore.
pub(crate) async fn restore_fault(
    target: &dyn Target,
    rec: &Recorder,
    active: &ActiveFault,
) -> Result<(), String> {
    let result = match target.restore(&active.fault).await {
        // A restore that returned is not yet a restore that worked: its effect is checked.
        Ok(()) => target.verify_restored(&active.fault).await.map_err(|e| {
            TargetError::infra(format!(
                "its effect did not come back: {}",
                crate::error::one_line(&e)
            ))
        }),
        Err(e) => Err(e),
    };
    let (phase, detail) = match &result {
        Ok(()) => (FaultPhase::Ended, None),
        Err(e) => (FaultPhase::RestoreFailed, Some(crate::error::one_line(e))),
    };
    rec.record(Event::Fault(FaultRecord {
        id: active.id.clone(),
        kind: active.fault.kind().to_string(),
        phase,
        subject: active.fault.subject().map(str::to_string),
        requested_ms: None,
        detail,
    }));
    result.map_err(|e| {
        format!(
            "restoring {} ({}): {}",
            active.fault.kind(),
            active.id,
            crate::error::one_line(&e)
        )
    })
}

#[cfg(test)]
mod name_tests {
    use super::*;

    fn info(case_id: &str, scenario: &str) -> CaseInfo {
        CaseInfo {
            case_id: case_id.into(),
            scenario: scenario.into(),
            topology: crate::topology::Topologies::builtin()
                .get("combined")
                .unwrap()
                .clone(),
            params: Params::default(),
            target: TargetInfo::default(),
        }
    }

    fn accepted_by_openshell(name: &str) -> bool {
        name.len() <= MAX_SANDBOX_NAME
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !name.starts_with('-')
            && !name.ends_with('-')
            && !name.contains("--")
    }

    #[test]
    fn sandbox_names_are_labels_openshell_accepts_even_for_long_or_odd_scenario_names() {
        for (case, scenario) in [
            (
                "permanent-bootstrap-error[combined,variant=certificate]",
                "permanent-bootstrap-error",
            ),
            ("x[combined]", "Weird__Name--with  spaces"),
            ("y[combined]", "---"),
        ] {
            for role in ["main", "second-sandbox"] {
                let name = info(case, scenario).sandbox_name(role);
                assert!(accepted_by_openshell(&name), "{name:?}");
            }
        }
    }

    #[test]
    fn two_roles_of_one_case_get_different_names_though_their_prefixes_are_cut_alike() {
        let i = info("stopped-through-outage[combined]", "stopped-through-outage");
        assert_ne!(i.sandbox_name("main"), i.sandbox_name("main-two"));
        assert!(i.sandbox_name("main").starts_with("main-stopp"));
        assert!(i.sandbox_name("sweep-2").starts_with("sweep-2-st"));
    }
}
