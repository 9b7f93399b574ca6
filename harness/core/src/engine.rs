//! The engine: runs (scenario, topology) cases against a target, stage by stage, each step
//! under a deadline; restores every fault on every exit path; evaluates the checks over the
//! recorded timeline; and classifies the outcome.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde::{Deserialize, Serialize};

use crate::case_verdict::CaseVerdict;
use crate::checks::{CheckOutcome, evaluate_all};
use crate::scenario::{Case, Ctx, Stage, StepError, restore_fault};
use crate::target::{Target, TargetError, TargetFactory, TargetInfo};
use crate::timeline::{Event, RunInfo, StageRecord, StageStatus, Timeline};

#[derive(Clone)]
pub struct EngineOptions {
    /// How often waits poll the target.
    pub poll: Duration,
    /// Deadline for restoring one fault after the steps end.
    pub restore_deadline: Duration,
    /// The sweep seed, recorded in every timeline and report.
    pub seed: Option<u64>,
    /// Leave the sandboxes of failed cases in place for a person to inspect.
    pub keep_on_failure: bool,
    /// Told about every timeline entry of every case as it is recorded.
    pub listener: Option<CaseListener>,
    /// Raised when the run is interrupted: cases not started end at once, running ones stop
    /// their steps, restore their faults and end as interrupted.
    pub interrupt: Interrupt,
    /// The known failures that name a case (by case id), recorded on its timeline so that its
    /// verdict can be given again from the timeline ([`crate::case_verdict`]).
    pub expected: Option<ExpectedFailures>,
}

/// The known failures of the release under test that name a case, by case id.
pub type ExpectedFailures =
    std::sync::Arc<dyn Fn(&str) -> Vec<crate::timeline::Expectation> + Send + Sync>;

/// A run's interruption (SIGINT, SIGTERM), shared by every case and thread of the run. Raised
/// once; the first reason wins. A watch channel, so cases on other runtimes see it too.
#[derive(Clone)]
pub struct Interrupt(Arc<tokio::sync::watch::Sender<Option<&'static str>>>);

impl Default for Interrupt {
    // Raised once, by a signal: the order its waiters wake in cannot shape a timeline, since an
    // interrupted case gets no verdicts and a run is not reproducible once interrupted.
    #[expect(
        clippy::disallowed_methods,
        reason = "one-shot interrupt; its wake-up order does not reach any timeline"
    )]
    fn default() -> Self {
        Self(Arc::new(tokio::sync::watch::channel(None).0))
    }
}

impl Interrupt {
    /// Interrupts the run, naming why (the signal's name); later calls change nothing.
    pub fn raise(&self, why: &'static str) {
        self.0.send_if_modified(|v| {
            let first = v.is_none();
            if first {
                *v = Some(why);
            }
            first
        });
    }

    /// Why the run was interrupted, if it was.
    pub fn raised(&self) -> Option<&'static str> {
        *self.0.borrow()
    }

    /// Waits until the run is interrupted and returns why.
    pub async fn wait(&self) -> &'static str {
        let mut rx = self.0.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(why) => why.unwrap_or("interrupt"),
            // The sender lives as long as `self`, so this is never reached.
            Err(_) => std::future::pending().await,
        }
    }
}

/// Called with (case id, entry) for every timeline entry as it is recorded.
pub type CaseListener = std::sync::Arc<dyn Fn(&str, &crate::timeline::Entry) + Send + Sync>;

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(1),
            restore_deadline: Duration::from_secs(10 * 60),
            seed: None,
            keep_on_failure: false,
            listener: None,
            interrupt: Interrupt::default(),
            expected: None,
        }
    }
}

pub use crate::case_verdict::Outcome;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageReport {
    pub stage: Stage,
    pub status: StageStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The requirements a failed stage broke: those of the behaviour its step waited for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<String>,
    /// Time spent in the stage, in the run's own (possibly virtual) time.
    pub duration_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseReport {
    pub case_id: String,
    pub scenario: String,
    pub title: String,
    pub topology: String,
    pub requirements: Vec<String>,
    pub target: TargetInfo,
    pub params: BTreeMap<String, String>,
    pub outcome: Outcome,
    pub stages: Vec<StageReport>,
    pub checks: Vec<CheckOutcome>,
    /// Duration in the run's own time (virtual on the emulated target).
    pub virtual_ms: u64,
    /// Duration on the wall clock.
    pub wall_ms: u64,
    #[serde(skip)]
    pub timeline: Timeline,
}

impl CaseReport {
    /// The checks that hold evidence of a broken requirement (not those left unevaluated).
    pub fn failed_checks(&self) -> impl Iterator<Item = &CheckOutcome> {
        self.checks.iter().filter(|c| c.failed())
    }

    /// The case's verdict, with the known failures its timeline records.
    pub fn verdict(&self) -> CaseVerdict {
        let expected = self
            .timeline
            .run_info()
            .map(|i| i.expected_failures.as_slice())
            .unwrap_or_default();
        self.verdict_with(expected)
    }

    /// The case's verdict with the known failures `expected`.
    pub fn verdict_with(&self, expected: &[crate::timeline::Expectation]) -> CaseVerdict {
        CaseVerdict::of_case(&self.outcome, self.step_broke(), &self.checks, expected)
    }

    /// The requirements the step that stopped the case broke (a wait that gave up breaks the
    /// requirement of what it waited for); none when the steps ran to the end.
    pub fn step_broke(&self) -> &[String] {
        self.stages
            .iter()
            .find(|s| s.status == StageStatus::Failed)
            .map_or(&[], |s| s.requirements.as_slice())
    }

    /// Every requirement the case broke, each once: the stopped step's, then the failing
    /// checks'.
    pub fn broken_requirements(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        let checks = self.failed_checks().flat_map(|c| &c.requirements);
        for r in self.step_broke().iter().chain(checks) {
            if !out.contains(&r.as_str()) {
                out.push(r);
            }
        }
        out
    }
}

/// Runs cases against targets made by a factory.
pub struct Engine {
    factory: Arc<dyn TargetFactory>,
    opts: EngineOptions,
}

/// Tracks stage boundaries while a case runs.
struct Stages {
    rec: crate::timeline::Recorder,
    reports: Vec<StageReport>,
    current: Option<(Stage, u64)>,
}

impl Stages {
    fn begin(&mut self, stage: Stage) {
        if self.current.is_some_and(|(s, _)| s == stage) {
            return;
        }
        self.end(StageStatus::Passed, None);
        self.rec.record(Event::Stage(StageRecord {
            stage: stage.name().into(),
            status: StageStatus::Started,
            message: None,
            step: None,
            requirements: Vec::new(),
        }));
        self.current = Some((stage, self.rec.elapsed().as_millis() as u64));
    }

    fn end(&mut self, status: StageStatus, message: Option<String>) {
        self.end_by(status, message, None, &[]);
    }

    /// Ends the stage; `step` names the step that ended it early, breaking `requirements`.
    fn end_by(
        &mut self,
        status: StageStatus,
        message: Option<String>,
        step: Option<&str>,
        requirements: &[String],
    ) {
        if let Some((stage, start)) = self.current.take() {
            self.rec.record(Event::Stage(StageRecord {
                stage: stage.name().into(),
                status,
                message: message.clone(),
                step: step.map(str::to_string),
                requirements: requirements.to_vec(),
            }));
            self.reports.push(StageReport {
                stage,
                status,
                message,
                requirements: requirements.to_vec(),
                duration_ms: self.rec.elapsed().as_millis() as u64 - start,
            });
        }
    }

    /// Skips `all[from..]`, saying why.
    fn skip_from(&mut self, all: &[Stage], from: usize, reason: &str) {
        for s in &all[from..] {
            self.skip(*s, reason);
        }
    }

    fn skip(&mut self, stage: Stage, reason: &str) {
        self.rec.record(Event::Stage(StageRecord {
            stage: stage.name().into(),
            status: StageStatus::Skipped,
            message: Some(reason.to_string()),
            step: None,
            requirements: Vec::new(),
        }));
        self.reports.push(StageReport {
            stage,
            status: StageStatus::Skipped,
            message: Some(reason.to_string()),
            requirements: Vec::new(),
            duration_ms: 0,
        });
    }
}

fn status_of(e: &StepError) -> StageStatus {
    match e {
        StepError::Failed { .. } | StepError::Deadline { .. } => StageStatus::Failed,
        StepError::Infra { .. } => StageStatus::Error,
        StepError::Skip(_) => StageStatus::Skipped,
    }
}

fn target_step_error(e: TargetError) -> StepError {
    match e {
        TargetError::Unsupported(m) => StepError::Skip(m),
        TargetError::Infra { message, source } => StepError::Infra { message, source },
        refused => StepError::infra(crate::error::one_line(&refused)),
    }
}

impl Engine {
    pub fn new(factory: Arc<dyn TargetFactory>, opts: EngineOptions) -> Self {
        Self { factory, opts }
    }

    pub async fn run_case(&self, case: &Case) -> CaseReport {
        let wall_start = std::time::SystemTime::now(); // wall time is reported, never waited on
        let rec = match &self.opts.listener {
            Some(l) => {
                let (l, id) = (l.clone(), case.id());
                crate::timeline::Recorder::with_listener(std::sync::Arc::new(move |e| l(&id, e)))
            }
            None => crate::timeline::Recorder::new(),
        };
        let info = self.factory.info();
        let scenario = &case.scenario;
        let case_info = case.info(info.clone());
        let mut versions = info.versions.clone();
        versions.insert("harness".into(), env!("CARGO_PKG_VERSION").into());
        let expected = self
            .opts
            .expected
            .as_ref()
            .map(|f| f(&case.id()))
            .unwrap_or_default();
        rec.record(Event::RunStarted(RunInfo {
            scenario: scenario.id.clone(),
            title: scenario.title.clone(),
            topology: case.topology.name.clone(),
            target: info.kind.clone(),
            model: info.model.clone(),
            defects: info.defects.clone(),
            seed: case
                .params
                .schedule
                .as_ref()
                .map(|s| s.seed)
                .or(self.opts.seed),
            requirements: scenario.requirements.clone(),
            params: case.params.as_text(),
            versions,
            expected_failures: expected.clone(),
            time_scale: Some(crate::clock::scale()).filter(|n| *n > 1),
        }));
        let mut stages = Stages {
            rec: rec.clone(),
            reports: Vec::new(),
            current: None,
        };
        let (outcome, checks) = self.drive(case, &case_info, &rec, &mut stages).await;
        // The closing record states the case's verdict too, so a reader of the timeline (and
        // `check`) sees what the run reported.
        let step_broke: Vec<String> = stages
            .reports
            .iter()
            .find(|s| s.status == StageStatus::Failed)
            .map(|s| s.requirements.clone())
            .unwrap_or_default();
        let verdict = CaseVerdict::of_case(&outcome, &step_broke, &checks, &expected);
        rec.record(Event::RunFinished {
            outcome: outcome.name().to_string(),
            verdict: Some(verdict.key().to_string()),
        });
        let timeline = rec.snapshot();
        let wall_ms = wall_start.elapsed().map_or(0, |d| d.as_millis() as u64);
        CaseReport {
            case_id: case.id(),
            scenario: scenario.id.clone(),
            title: scenario.title.clone(),
            topology: case.topology.name.clone(),
            requirements: scenario.requirements.clone(),
            target: info,
            params: case.params.as_text(),
            outcome,
            stages: stages.reports,
            checks,
            virtual_ms: timeline.duration().as_millis() as u64,
            wall_ms,
            timeline,
        }
    }

    /// One case, in order: skip if the target cannot run it, bring the target up, record the
    /// check plan, run the steps, restore every fault, judge the timeline, keep the logs of a
    /// failure, tear down.
    async fn drive(
        &self,
        case: &Case,
        case_info: &crate::scenario::CaseInfo,
        rec: &crate::timeline::Recorder,
        stages: &mut Stages,
    ) -> (Outcome, Vec<CheckOutcome>) {
        let scenario = &case.scenario;
        let all_stages = stages_of(scenario);
        if let Some(reason) = case_info
            .target
            .skip_reason(&case.topology, &case.requires())
        {
            stages.skip_from(&all_stages, 0, &reason);
            return (Outcome::Skipped(reason), Vec::new());
        }
        if let Some(why) = self.opts.interrupt.raised() {
            stages.skip_from(
                &all_stages,
                0,
                &format!("not started: interrupted by {why}"),
            );
            return (
                Outcome::interrupted(why, "the case did not start"),
                Vec::new(),
            );
        }
        let (target, observers) = match self.bring_up(case, rec, stages, &all_stages).await {
            Ok(up) => up,
            Err(outcome) => return (outcome, Vec::new()),
        };

        // The check plan goes on the timeline first, so a saved timeline carries its checks.
        let checks = (scenario.checks)(case_info);
        rec.record(Event::CheckPlan {
            checks: checks.clone(),
        });
        let mut ctx = Ctx::new(
            target.clone(),
            rec.clone(),
            case_info.clone(),
            self.opts.poll,
        );
        // An interruption stops the steps wherever they are (an interrupt raised already wins
        // before the first step starts); the faults they injected are still on `ctx`.
        let (step_error, interrupted_by) = tokio::select! {
            biased;
            why = self.opts.interrupt.wait() => (None, Some(why)),
            e = run_steps(scenario, &mut ctx, rec, stages) => (e, None),
        };
        if let Some(why) = interrupted_by {
            let at = stages.current.map_or("before its steps", |(s, _)| s.name());
            rec.note(format!(
                "interrupted by {why} in stage {at}; restoring its faults"
            ));
            stages.end(StageStatus::Error, Some(format!("interrupted by {why}")));
        }
        // Restores cannot be skipped: whatever ended the steps, every active fault is undone.
        let restore_errors = self.restore_all(&mut ctx, &*target, rec).await;
        if let Some(why) = interrupted_by {
            // Verdicts over a cut run say nothing about the product: none are given.
            drop(observers);
            mark_unreached(scenario, stages);
            let mut what = "stopped before its steps ended".to_string();
            if !restore_errors.is_empty() {
                what.push_str(&format!(
                    "; the harness could not restore what it broke: {}",
                    restore_errors.join("; ")
                ));
            }
            let mut outcome = Outcome::interrupted(why, &what);
            self.tear_down(&*target, rec, stages, &mut outcome, None)
                .await;
            return (outcome, Vec::new());
        }

        // End on fresh states, then judge.
        if let Ok(states) = target.snapshot().await {
            for s in states {
                rec.observe(s);
            }
        }
        let missed =
            match tokio::time::timeout(OBSERVATION_CHECK_DEADLINE, target.verify_observation())
                .await
            {
                Ok(r) => r.err().map(|e| crate::error::one_line(&e)),
                Err(_) => Some(format!(
                    "the harness could not check within {} that its observers missed nothing",
                    humantime::format_duration(OBSERVATION_CHECK_DEADLINE)
                )),
            };
        drop(observers);
        let outcomes = evaluate_all(&checks, &rec.snapshot());
        for o in &outcomes {
            rec.record(Event::Check(o.clone()));
        }
        let mut outcome = outcome_of(step_error.as_ref(), &outcomes, &restore_errors);
        // Checks over a timeline the observers left incomplete say nothing either way, so a
        // lossy observer can neither pass nor fail a case.
        let missed = missed.filter(|_| !matches!(outcome, Outcome::Skipped(_)));
        if let Some(missed) = &missed
            && matches!(outcome, Outcome::Passed | Outcome::Failed(_))
        {
            outcome = Outcome::Error(missed.clone());
        }
        mark_unreached(scenario, stages);
        if !matches!(outcome, Outcome::Passed | Outcome::Skipped(_)) {
            record_sandbox_logs(&*target, rec).await;
        }
        self.tear_down(&*target, rec, stages, &mut outcome, missed)
            .await;
        (outcome, outcomes)
    }

    /// Provisions the target, installs OpenShell and starts the observers. On failure the rest
    /// of the stages are skipped and the outcome says why.
    async fn bring_up(
        &self,
        case: &Case,
        rec: &crate::timeline::Recorder,
        stages: &mut Stages,
        all_stages: &[Stage],
    ) -> Result<(Arc<dyn Target>, crate::target::Observers), Outcome> {
        stages.begin(Stage::Provision);
        let provision = self.factory.provision(&case.topology, rec);
        let target: Arc<dyn Target> = match with_deadline(
            Stage::Provision,
            "the cluster",
            Stage::Provision.default_deadline(),
            rec,
            provision,
        )
        .await
        {
            Ok(t) => t,
            Err(e) => {
                stages.end(status_of(&e), Some(e.to_string()));
                stages.skip_from(all_stages, 1, "not reached: provisioning did not complete");
                return Err(classify_step_error(e));
            }
        };
        stages.begin(Stage::Install);
        let install = target.install(&case.topology);
        if let Err(e) = with_deadline(
            Stage::Install,
            "the installation",
            Stage::Install.default_deadline(),
            rec,
            install,
        )
        .await
        {
            stages.end(status_of(&e), Some(e.to_string()));
            stages.skip_from(all_stages, 2, "not reached: installation did not complete");
            let _ = target.teardown().await;
            return Err(classify_step_error(e));
        }
        match target.observe(rec.clone()).await {
            Ok(observers) => Ok((target, observers)),
            Err(e) => {
                let e = target_step_error(e);
                stages.end(status_of(&e), Some(format!("starting observers: {e}")));
                stages.skip_from(all_stages, 2, "not reached: observers did not start");
                let _ = target.teardown().await;
                Err(classify_step_error(e))
            }
        }
    }

    /// Restores every fault still active, each under the restore deadline; returns what could
    /// not be restored.
    async fn restore_all(
        &self,
        ctx: &mut Ctx,
        target: &dyn Target,
        rec: &crate::timeline::Recorder,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        for active in ctx.take_active_faults() {
            let r = tokio::time::timeout(
                self.opts.restore_deadline,
                restore_fault(target, rec, &active),
            )
            .await;
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push(format!(
                    "restoring {} ({}) did not finish within {}",
                    active.fault.kind(),
                    active.id,
                    humantime::format_duration(self.opts.restore_deadline)
                )),
            }
        }
        errors
    }

    /// Tears the target down, unless a failed case is kept for inspection; a teardown that
    /// fails turns a passed case into an error. What the observers `missed` makes the stage an
    /// error too, so every report and a saved timeline name it (the stage's message is what
    /// `check` reads back as the reason).
    async fn tear_down(
        &self,
        target: &dyn Target,
        rec: &crate::timeline::Recorder,
        stages: &mut Stages,
        outcome: &mut Outcome,
        missed: Option<String>,
    ) {
        stages.begin(Stage::Teardown);
        let keep = self.opts.keep_on_failure && matches!(outcome, Outcome::Failed(_));
        let torn = if keep {
            rec.note(
                "keeping the sandboxes of this failed case for inspection (--keep-on-failure)",
            );
            None
        } else {
            Some(
                target
                    .teardown()
                    .await
                    .map_err(|e| crate::error::one_line(&e)),
            )
        };
        if let Some(Err(e)) = &torn
            && matches!(outcome, Outcome::Passed)
        {
            *outcome = Outcome::Error(format!("teardown: {e}"));
        }
        match (missed, torn) {
            (Some(m), Some(Err(e))) => {
                stages.end(StageStatus::Error, Some(format!("{m}; teardown: {e}")))
            }
            (Some(m), _) => stages.end(StageStatus::Error, Some(m)),
            (None, Some(Err(e))) => stages.end(StageStatus::Error, Some(e)),
            (None, None) => stages.end(StageStatus::Skipped, Some("kept for inspection".into())),
            (None, Some(Ok(()))) => stages.end(StageStatus::Passed, None),
        }
    }
}

/// How long the end of a case may take to check that the observers missed nothing (on real
/// targets: reading the gateway's log and waiting briefly for the observer to catch up).
const OBSERVATION_CHECK_DEADLINE: Duration = Duration::from_secs(120);

/// The stages a case goes through, in order, each once.
fn stages_of(scenario: &crate::scenario::Scenario) -> Vec<Stage> {
    [Stage::Provision, Stage::Install]
        .into_iter()
        .chain(scenario.steps.iter().map(|s| s.stage))
        .chain([Stage::Teardown])
        .fold(Vec::new(), |mut v, s| {
            if !v.contains(&s) {
                v.push(s);
            }
            v
        })
}

/// Runs the steps in order, each under its deadline and with panics caught; the first error
/// stops them and is returned.
async fn run_steps(
    scenario: &crate::scenario::Scenario,
    ctx: &mut Ctx,
    rec: &crate::timeline::Recorder,
    stages: &mut Stages,
) -> Option<StepError> {
    for step in &scenario.steps {
        stages.begin(step.stage);
        ctx.stage = step.stage;
        let deadline = step.deadline_for(&ctx.case.params);
        let run = AssertUnwindSafe((step.run)(ctx)).catch_unwind();
        let result = match tokio::time::timeout(deadline, run).await {
            Ok(Ok(r)) => r,
            Ok(Err(panic)) => Err(StepError::infra(format!(
                "step '{}' panicked: {}",
                step.name,
                panic_message(&panic)
            ))),
            // The step's own deadline is the harness's bound, not a requirement: running into
            // it says the harness misjudged the case, so it is an error, never a product failure.
            // The waits inside a step carry the requirements' deadlines.
            Err(_) => Err(StepError::infra(format!(
                "{}: the harness gave up on step '{}' after its own deadline of {}; last seen: {}",
                step.stage,
                step.name,
                humantime::format_duration(deadline),
                summarize(&rec.last_states())
            ))),
        };
        if let Err(e) = result {
            let e = e.of_step(step);
            // The whole chain, causes included, as one line.
            let said = crate::error::one_line(&e);
            rec.note(format!("step '{}' stopped: {said}", step.name));
            stages.end_by(
                status_of(&e),
                Some(said),
                Some(&step.name),
                e.requirements(),
            );
            return Some(e);
        }
    }
    None
}

/// The case's outcome: a step's error first, then the first failed check; a fault the harness
/// could not restore makes it an error whatever else happened.
fn outcome_of(
    step_error: Option<&StepError>,
    checks: &[CheckOutcome],
    restore_errors: &[String],
) -> Outcome {
    if !restore_errors.is_empty() {
        return Outcome::Error(format!(
            "the harness could not restore what it broke: {}",
            restore_errors.join("; ")
        ));
    }
    match (step_error, checks.iter().find(|o| o.failed())) {
        (Some(StepError::Skip(r)), _) => Outcome::Skipped(r.clone()),
        (Some(e @ StepError::Infra { .. }), _) => Outcome::Error(e.reason()),
        (Some(e), _) => Outcome::Failed(e.to_string()),
        (None, Some(c)) => Outcome::Failed(format!(
            "[{}] {}: {}",
            c.requirements.join(", "),
            c.name,
            c.message
        )),
        (None, None) => Outcome::Passed,
    }
}

/// Steps not reached are reported, not silently dropped.
fn mark_unreached(scenario: &crate::scenario::Scenario, stages: &mut Stages) {
    let current = stages.current.map(|(s, _)| s);
    for s in scenario.steps.iter().map(|s| s.stage) {
        if current != Some(s) && !stages.reports.iter().any(|r| r.stage == s) {
            stages.skip(s, "not reached: an earlier step stopped the case");
        }
    }
}

/// A failed case keeps the logs of its sandboxes on the timeline: the supervisor's retries and
/// errors are what a person reads first.
async fn record_sandbox_logs(target: &dyn Target, rec: &crate::timeline::Recorder) {
    let sandboxes: Vec<String> = rec
        .last_states()
        .into_iter()
        .filter(|s| s.kind == crate::timeline::GATEWAY_SANDBOX_KIND)
        .map(|s| s.name)
        .collect();
    for name in sandboxes {
        if let Ok(excerpts) = target.logs(&name).await {
            for x in excerpts {
                rec.record(Event::Logs(x));
            }
        }
    }
}

fn classify_step_error(e: StepError) -> Outcome {
    match e {
        StepError::Skip(r) => Outcome::Skipped(r),
        e @ StepError::Infra { .. } => Outcome::Error(e.reason()),
        e @ (StepError::Deadline { .. } | StepError::Failed { .. }) => {
            Outcome::Failed(e.to_string())
        }
    }
}

async fn with_deadline<T>(
    stage: Stage,
    what: &str,
    deadline: Duration,
    rec: &crate::timeline::Recorder,
    fut: impl std::future::Future<Output = Result<T, TargetError>>,
) -> Result<T, StepError> {
    match tokio::time::timeout(deadline, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(target_step_error(e)),
        // The environment's own deadline: no requirement of the product's is waited for here.
        Err(_) => Err(StepError::infra(format!(
            "{stage}: gave up waiting for {what} after {}; last seen: {}",
            humantime::format_duration(deadline),
            summarize(&rec.last_states())
        ))),
    }
}

fn summarize(states: &[crate::timeline::ObjectState]) -> String {
    if states.is_empty() {
        "nothing".to_string()
    } else {
        states
            .iter()
            .map(crate::timeline::ObjectState::summary)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// The verdicts of re-running a saved timeline's check plan, and whether they agree with the
/// verdicts recorded in it.
#[derive(Clone, Debug)]
pub struct Recheck {
    pub outcomes: Vec<CheckOutcome>,
    pub agrees: bool,
}

pub fn recheck(t: &Timeline) -> Recheck {
    // Judge the timeline as it was when the checks first ran: up to the first recorded verdict.
    let cut = t
        .entries
        .iter()
        .position(|e| matches!(e.event, Event::Check(_)))
        .unwrap_or(t.entries.len());
    let judged = Timeline {
        entries: t.entries[..cut].to_vec(),
    };
    let outcomes = evaluate_all(&t.check_plan(), &judged);
    let recorded: Vec<CheckOutcome> = t.check_outcomes().into_iter().cloned().collect();
    Recheck {
        agrees: recorded == outcomes,
        outcomes,
    }
}
