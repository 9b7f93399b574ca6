//! What every scenario does the same way: a workload that marks its own starts in its
//! workspace (a sentinel of its own; the starts themselves are counted from what the target
//! reports), sentinels, a real command through the sandbox shell, deletion with a leak check,
//! and the checks that go with them; and what each scenario file hands the catalog ([`Entry`]).

use std::sync::Arc;
use std::time::Duration;

use conformance_core::checks::{Anchor, Check, Cmp, Counted, Predicate, Selector, Window};
use conformance_core::keys::{FaultKey, Marker};
use conformance_core::phase::Phase;
use conformance_core::retries::RetryOp;
use futures::future::BoxFuture;

use conformance_core::scenario::{CaseInfo, Ctx, Params, Scenario, StepError, StepResult, WakeOn};
use conformance_core::target::{
    Fault, RestartPolicy, START_MARK, SandboxSpec, SandboxView, TargetError, count_start_marks,
    workspace_pvc_name,
};
use conformance_core::timeline::{GATEWAY_SANDBOX_KIND, StartCount, World};
use conformance_core::topology::SupervisorPlacement;

/// A scenario and the parameter sets it runs with.
pub struct Entry {
    pub scenario: Arc<Scenario>,
    pub variants: Vec<Params>,
    /// Its variants run the fault schedule generated from the run's seed.
    pub seeded: bool,
}

impl Entry {
    pub(crate) fn new(scenario: Scenario, variants: Vec<Params>) -> Self {
        Self {
            scenario: Arc::new(scenario),
            variants,
            seeded: false,
        }
    }
}

/// One variant per outage length, in seconds.
pub(crate) fn outages_of(secs: &[u64]) -> Vec<Params> {
    secs.iter()
        .map(|s| Params::default().with_outage(Duration::from_secs(*s)))
        .collect()
}

/// The scenario's one variant, without parameters.
pub(crate) fn one() -> Vec<Params> {
    vec![Params::default()]
}

/// The role of the one sandbox most scenarios work with.
pub(crate) const MAIN: &str = "main";

/// Step: create the main sandbox running the workload, wait until Ready and until the
/// workload has started, write a sentinel.
pub(crate) fn seed_main(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        seed_ready(ctx, None).await?;
        Ok(())
    })
}

/// Creates the main sandbox running the workload with `policy`, waits until it is Ready and
/// its workload has started, and writes the sentinel [`BEFORE_FAULT`]; the sandbox's name.
pub(crate) async fn seed_ready(
    ctx: &Ctx,
    policy: Option<RestartPolicy>,
) -> Result<String, StepError> {
    let name = create_ready(ctx, MAIN, policy).await?;
    wait_workload_started(ctx, &name).await;
    ctx.write_sentinel(&name, BEFORE_FAULT).await?;
    Ok(name)
}

/// The sentinel a scenario writes before its fault and reads back after it.
pub(crate) const BEFORE_FAULT: &str = "before-fault";

/// The requirement a stop that does not complete breaks, as a refused one does (core's).
pub(crate) use conformance_core::scenario::STOP_CONTRACT;

/// How long the sandbox pod may still be seen running once the gateway says Stopped: the two
/// reach the timeline through different observers (the gateway's stream, the pod watch).
pub(crate) const POD_STOP_SKEW: Duration = Duration::from_secs(30);

/// Waits until the timeline no longer shows `sandbox`'s pod running, so that a window that
/// starts "once Stopped" does not begin inside the observers' skew. A pod still running after
/// [`POD_STOP_SKEW`] ends the wait with a note; the checks then see it running.
pub(crate) async fn pod_seen_stopped(ctx: &Ctx, sandbox: &str) {
    let pod = ctx.case.resource_name(sandbox);
    let running = || {
        ctx.rec.last_states().into_iter().find(|s| {
            s.kind == "Pod" && s.name == pod && !s.deleted && s.phase.as_deref() == Some("Running")
        })
    };
    let Some(seen) = running() else { return };
    let wake = conformance_core::timeline::ObjectRef {
        kind: seen.kind.clone(),
        namespace: seen.namespace.clone(),
        name: seen.name.clone(),
    };
    let stopped = ctx
        .wait_for_waking(
            STOP_CONTRACT,
            "the sandbox pod seen not running",
            POD_STOP_SKEW,
            WakeOn::Object(&wake),
            || async { Ok(running().is_none().then_some(())) },
        )
        .await;
    if let Err(e) = stopped {
        ctx.rec.note(format!("{e}"));
    }
}

/// How long a Ready sandbox's workload may take to start.
pub(crate) const WORKLOAD_START: Duration = Duration::from_secs(30);

/// Waits until the target reports the workload's first start. Real OpenShell v0.0.111 reports
/// Ready when its supervisor's session connects and starts the workload after that (seen on
/// the served cluster: a fault injected 0.4 s after Ready met a pod whose workload had not
/// started), so a fault injected at once would make the verdict depend on that order. A
/// target that cannot tell starts is not waited for; a deadline ends the wait with a note and
/// the checks judge what was seen.
pub(crate) async fn wait_workload_started(ctx: &Ctx, name: &str) {
    let started = ctx
        .wait_for(
            "R11",
            "the workload's first start",
            WORKLOAD_START,
            || async {
                sample_starts(ctx, name).await;
                Ok(match ctx.rec.main_process_starts(name) {
                    StartCount::Known(0) => None,
                    StartCount::Known(_) | StartCount::Unknown(_) => Some(()),
                })
            },
        )
        .await;
    if let Err(e) = started {
        ctx.rec.note(format!("{e}"));
    }
}

/// Step: delete the main sandbox and wait until the gateway forgets it.
pub(crate) fn delete_main(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        delete(ctx, &name).await
    })
}

/// The main-process start marker, relative to the workspace root (`/sandbox`).
pub(crate) const STARTS_FILE: &str = ".conformance/starts";

/// OpenShell's provisioning timeout: the CLI's idle wait for Ready (docs/upstream-facts.md F6.3).
pub(crate) const PROVISION_TIMEOUT: Duration = Duration::from_secs(300);
/// How soon a sandbox must be Ready again once the gateway is back: the supervisor's session
/// backoff is capped at 30 s (docs/upstream-facts.md F2.7), so 60 s leaves room for one more
/// attempt.
pub(crate) const RECOVERY: Duration = Duration::from_secs(60);
/// How long bootstrap may take once the gateway is back after a long outage: a capped retry
/// plus bootstrap plus the session (R1, R5).
pub(crate) const BOOTSTRAP_RECOVERY: Duration = Duration::from_secs(120);
/// R5's caps on the supervisor's back-off, the contract's values (docs/upstream-facts.md F2.11):
/// bootstrap retries sleep at most 8 s, the session and attach reconnects at most 30 s (F2.7),
/// and one attempt takes at most its 10 s connect timeout (F2.3).
pub(crate) const BOOTSTRAP_BACKOFF_CAP: Duration = Duration::from_secs(8);
pub(crate) const SESSION_BACKOFF_CAP: Duration = Duration::from_secs(30);
pub(crate) const ATTEMPT_BOUND: Duration = Duration::from_secs(10);
/// How long a retry the gateway refused again may take, on top of the sleep before it
/// (docs/upstream-facts.md F2.11): every fault of the catalog makes the gateway answer a
/// connect at once (no endpoint behind its Service rejects it; a bad credential or certificate
/// is refused in the handshake), so such an attempt is one round trip, not the 10 s
/// [`ATTEMPT_BOUND`] of a connect nobody answers. The log's stamps are the runtime's, to the
/// nanosecond, so the margin is the round trip on a loaded node; 1 s, so that a sleep 2 s over
/// its cap fails.
pub(crate) const REFUSED_RETRY_BOUND: Duration = Duration::from_secs(1);
/// How soon a started sandbox must be Ready, or terminal with a reported cause (R14), derived
/// from the release's own timeouts (docs/upstream-facts.md F2.13): the driver's resume, one
/// Kubernetes API call (30 s, F3.8); bootstrap in the new pod, which the sidecar's process side
/// waits at most 120 s for (F2.5; a combined bootstrap gives up within 61 s, F2.1, F2.3); the
/// first session attempt (10 s, F2.3) and, if it raced the gateway, one capped sleep and another
/// attempt (30 s + 10 s, F2.7).
pub(crate) const START_BOUND: Duration = Duration::from_secs(30 + 120 + 10 + 30 + 10);
/// A permanent bootstrap error must surface within this (R4).
pub(crate) const PERMANENT_ERROR_BOUND: Duration = Duration::from_secs(60);
/// Objects of a deleted sandbox must be gone within this (R13).
pub(crate) const CLEANUP: Duration = Duration::from_secs(120);
/// How long a terminal or stopped sandbox is watched after a fault, to see that it stays put.
pub(crate) const SETTLE: Duration = Duration::from_secs(90);

/// A main process that appends a line to the start marker each time it starts and never ends
/// on its own: one that completed during a long outage (`sleep 1000000` did at `--outage 12d`)
/// would read as the gateway losing a running sandbox. A POSIX loop rather than `sleep
/// infinity`, which not every image's `sleep` takes.
pub(crate) fn workload_command() -> Vec<String> {
    sh(&format!(
        "mkdir -p /sandbox/.conformance; echo {START_MARK} >> /sandbox/{STARTS_FILE}; while :; do sleep 3600; done"
    ))
}

/// A main process that records its start, waits until the sentinel [`BEFORE_FAULT`] is in its
/// workspace and exits with `code`: the sentinel is written through the shell of a running
/// sandbox, the user's path, and read back once the sandbox has finished and cannot run one.
pub(crate) fn completing_command(code: i32) -> Vec<String> {
    sh(&format!(
        "mkdir -p /sandbox/.conformance; echo {START_MARK} >> /sandbox/{STARTS_FILE}; \
         while [ ! -f /sandbox/.conformance/{BEFORE_FAULT} ]; do sleep 1; done; exit {code}"
    ))
}

fn sh(script: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), script.into()]
}

pub(crate) fn spec(
    ctx: &Ctx,
    role: &str,
    command: Vec<String>,
    policy: Option<RestartPolicy>,
) -> SandboxSpec {
    SandboxSpec {
        name: ctx.sandbox_name(role),
        labels: [
            (
                "openshell-conformance/case".to_string(),
                label_safe(&ctx.case.scenario),
            ),
            ("openshell-conformance/role".to_string(), role.to_string()),
        ]
        .into(),
        command: Some(command),
        restart_policy: policy,
    }
}

fn label_safe(s: &str) -> String {
    let mut v: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    v.truncate(63);
    v
}

/// Creates a sandbox running the workload and waits until it is Ready (R11's deadline) and
/// its shell runs a command ([`wait_usable`]).
pub(crate) async fn create_ready(
    ctx: &Ctx,
    role: &str,
    policy: Option<RestartPolicy>,
) -> Result<String, StepError> {
    let spec = spec(ctx, role, workload_command(), policy);
    ctx.create_sandbox(&spec).await?;
    ctx.wait_phase("R11", &spec.name, &[Phase::Ready], PROVISION_TIMEOUT)
        .await?;
    wait_usable(ctx, &spec.name).await?;
    Ok(spec.name)
}

/// How soon after Ready a sandbox's shell must run a command (R11, [`usable_once_ready`]):
/// the observers' lag between the gateway's Ready and the harness seeing it, plus one exec's
/// round trip through the CLI on a real cluster.
pub(crate) const USABLE_AFTER_READY: Duration = Duration::from_secs(5);
/// How long a Ready sandbox's shell is tried before the step gives up: long enough to measure a
/// shell that lags Ready, so that the case goes on and the later checks judge what they are
/// about instead of a write that met an unusable shell.
pub(crate) const USABLE_WAIT: Duration = Duration::from_secs(60);

/// Right after the sandbox turned Ready: tries its shell until a command runs (each attempt an
/// `exec` action on the timeline, which [`usable_once_ready`] judges). A shell that refuses for
/// [`USABLE_WAIT`] stops the step; a harness that cannot reach it is an infrastructure error.
pub(crate) async fn wait_usable(ctx: &Ctx, sandbox: &str) -> Result<(), StepError> {
    let what = format!("the shell of the Ready sandbox {sandbox} to run a command");
    ctx.wait_for("R11", &what, USABLE_WAIT, || async {
        match ctx.sh(sandbox, "true").await {
            Ok(_) => Ok(Some(())),
            Err(TargetError::Refused { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    })
    .await
}

/// Once the sandbox is Ready again (after a recovery, a restart or a start), tries its shell
/// until a command runs, as [`wait_usable`] does at creation: a shell that lags this Ready then
/// fails Ready means usable ([`usable_again`], R11), and the shell the case uses next works, so
/// the check that uses it judges what the case is about. `ready` says whether the step's wait
/// saw the sandbox Ready: one that is not has no shell to try. A shell that refuses for
/// [`USABLE_WAIT`] is noted, for the checks to judge.
pub(crate) async fn wait_usable_again(
    ctx: &Ctx,
    sandbox: &str,
    ready: bool,
) -> Result<(), StepError> {
    if !ready {
        return Ok(());
    }
    match wait_usable(ctx, sandbox).await {
        Err(e @ StepError::Deadline { .. }) => {
            ctx.rec.note(format!("not reached: {e}"));
            Ok(())
        }
        r => r,
    }
}

/// Marks the moment the scenario counts the workload's starts at, under `key` (per sandbox,
/// see [`starts_key`]): the checks of [`starts_eq`] and [`starts_at_most`] count the starts the
/// target reported up to this marker, never the workspace's own marks.
pub(crate) async fn observe_starts(ctx: &Ctx, sandbox: &str, key: &str) {
    sample_starts(ctx, sandbox).await;
    ctx.mark(&Marker::owned(key.to_string()));
}

/// Asks the target to report the workload's starts now (real clusters see them only when
/// asked; see [`conformance_core::target::Target::sample_main_process_starts`]).
async fn sample_starts(ctx: &Ctx, sandbox: &str) {
    if let Err(e) = ctx
        .target
        .sample_main_process_starts(sandbox, STARTS_FILE)
        .await
    {
        ctx.rec.note(format!(
            "could not sample the main-process starts of {sandbox}: {}",
            conformance_core::error::one_line(&e)
        ));
    }
}

/// Counts the start marks the workload left in its workspace (one line per start) and records
/// the count as [`marks_key`]: the marker file is a workspace sentinel of its own, judged
/// against the target's count of starts under R6 ([`start_marks_kept`]). Nothing is recorded
/// when it cannot be read (the check then says so).
pub(crate) async fn observe_start_marks(ctx: &Ctx, sandbox: &str) {
    match ctx.read_workspace(sandbox, STARTS_FILE).await {
        Ok(content) => {
            let n = count_start_marks(content.as_deref());
            ctx.observe_value(&marks_key(sandbox), Some(sandbox), serde_json::json!(n));
        }
        Err(e) => {
            ctx.rec.note(format!(
                "could not read the start marks of {sandbox}: {}",
                conformance_core::error::one_line(&e)
            ));
        }
    }
}

/// The observation key of the start marks counted in a sandbox's workspace.
pub(crate) fn marks_key(sandbox: &str) -> String {
    format!("start-marks:{sandbox}")
}

/// Waits (softly) until the target has reported at least `n` starts of the workload; a restart
/// takes a moment to show after the phase does; `requirement` is the one that asks for those
/// starts. Whether it was reached in time.
pub(crate) async fn wait_starts(
    ctx: &Ctx,
    requirement: &str,
    sandbox: &str,
    n: u64,
    deadline: Duration,
) -> bool {
    let what = format!("the workload of {sandbox} to have started {n} times");
    let r = ctx
        .wait_for(requirement, &what, deadline, || async {
            sample_starts(ctx, sandbox).await;
            Ok(match ctx.rec.main_process_starts(sandbox) {
                StartCount::Known(count) => (count >= n).then_some(()),
                StartCount::Unknown(_) => None,
            })
        })
        .await;
    match r {
        Ok(()) => true,
        Err(e) => {
            ctx.rec.note(format!("not reached: {e}"));
            false
        }
    }
}

/// The fault that makes a sandbox bootstrap again: bootstrap runs where the supervisor runs
/// (the topology's `supervisor` placement), so the sandbox pod is replaced where the supervisor
/// lives in it, and the supervisor is restarted where it lives apart.
pub(crate) fn rebootstrap(ctx: &Ctx, sandbox: &str) -> Fault {
    if ctx.case.topology.supervisor_in_sandbox_pod() {
        Fault::SandboxPodReplace {
            sandbox: sandbox.to_string(),
        }
    } else {
        Fault::SupervisorKill {
            sandbox: sandbox.to_string(),
        }
    }
}

/// Runs a real command through the sandbox shell that reads the sentinel `key` back, and
/// records whether the shell ran it: a shell that runs commands against an empty workspace is
/// usable, and its read fails the sentinels (R6) ([`Ctx::use_shell`]).
pub(crate) async fn check_shell(ctx: &Ctx, sandbox: &str, key: &str) {
    let ok = ctx.use_shell(sandbox, key).await;
    ctx.observe_value(
        &shell_key(sandbox),
        Some(sandbox),
        serde_json::json!(u64::from(ok)),
    );
}

fn shell_key(sandbox: &str) -> String {
    format!("shell-usable:{sandbox}")
}

/// Deletes the sandbox and waits (softly: the leak checks judge) until the gateway forgets it.
pub(crate) async fn delete(ctx: &Ctx, sandbox: &str) -> Result<(), StepError> {
    match ctx.delete_sandbox(sandbox).await {
        Ok(()) | Err(TargetError::Refused { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    if let Err(e) = ctx.wait_gone("R13", sandbox, CLEANUP).await {
        ctx.rec.note(format!("not reached: {e}"));
    }
    ctx.mark(&deleted_marker(sandbox));
    // The leak check judges at its own deadline (CLEANUP after the marker), so the case must
    // not end before then while something is still there: a slower cluster that cleans up in
    // time is not a leak.
    let gone = leaks_gone(&ctx.case, sandbox);
    let what = format!("nothing of the deleted sandbox {sandbox} to be left");
    // Several objects go: any of them seen gone may be the last.
    let r = ctx
        .wait_for_waking("R13", &what, CLEANUP, WakeOn::AnyObject, || async {
            let states = ctx.rec.last_states();
            let mut world = World::default();
            for state in &states {
                world.insert(state);
            }
            Ok(gone.holds(&world).then_some(()))
        })
        .await;
    if let Err(e) = r {
        ctx.rec.note(format!("not reached: {e}"));
    }
    Ok(())
}

/// Holds once the deleted sandbox's Sandbox resource, pod(s) and workspace PVC are gone; on
/// topologies with a dedicated supervisor pod, that pod too.
fn leaks_gone(case: &CaseInfo, sandbox: &str) -> Predicate {
    let cr = case.resource_name(sandbox);
    let mut objects = vec![
        Selector::named("Sandbox", &cr),
        Selector::named("Pod", &cr),
        Selector::named("PersistentVolumeClaim", &workspace_pvc_name(&cr)),
    ];
    if let SupervisorPlacement::DedicatedPod {
        selector,
        sandbox_label,
        ..
    } = &case.topology.supervisor
    {
        let mut s = Selector::kind("Pod").with_label(sandbox_label, &cr);
        for (k, v) in selector {
            s = s.with_label(k, v);
        }
        objects.push(s);
    }
    Predicate::All {
        predicates: objects
            .into_iter()
            .map(|object| Predicate::Absent { object })
            .collect(),
    }
}

/// Set once a sandbox's deletion was waited for.
pub(crate) fn deleted_marker(sandbox: &str) -> Marker {
    Marker::owned(format!("deleted:{sandbox}"))
}

// Markers the steps set and the checks anchor on.
/// The steps verified what the case is about (shell, sentinels).
pub(crate) const VERIFIED: Marker = Marker::new("verified");
/// A fault is over and the system had time to settle.
pub(crate) const SETTLED: Marker = Marker::new("settled");

// Faults, named for what they do.
pub(crate) const GATEWAY_OUTAGE: FaultKey = FaultKey::new("gateway-outage");
pub(crate) const GATEWAY_RESTART: FaultKey = FaultKey::new("gateway-restart");
pub(crate) const POD_REPLACE: FaultKey = FaultKey::new("pod-replace");
pub(crate) const BAD_CREDENTIALS: FaultKey = FaultKey::new("bad-credentials");
pub(crate) const SUPERVISOR_KILL: FaultKey = FaultKey::new("supervisor-kill");

// ---- checks -------------------------------------------------------------------------------

/// The gateway's view of the sandbox.
/// The reason the gateway gives an exit of the main process (docs/upstream-facts.md F1.2).
pub(crate) const MAIN_PROCESS_EXITED: &str = "MainProcessExited";

pub(crate) fn gateway_view(case: &CaseInfo, role: &str) -> Selector {
    Selector::named(GATEWAY_SANDBOX_KIND, &case.sandbox_name(role))
}

pub(crate) fn phase_is(case: &CaseInfo, role: &str, phases: &[Phase]) -> Predicate {
    Predicate::phase(gateway_view(case, role), phases)
}

/// The sandbox's Ready condition gives the end of its main process as the reason.
pub(crate) fn ended_by_its_exit(case: &CaseInfo, role: &str) -> Predicate {
    Predicate::Condition {
        object: gateway_view(case, role),
        type_: "Ready".into(),
        status: None,
        reason: Some(MAIN_PROCESS_EXITED.into()),
    }
}

/// Terminal for a cause other than the end of its main process: Stopped, or Error for another
/// reason (StartFailed, a gateway that lost the sandbox: field report bug 3). What a gateway
/// fault must never do, even to a sandbox whose workload ends or restarts meanwhile (R9): there
/// the end's own phase (Completed, Error/MainProcessExited) is for the scenario's requirement.
pub(crate) fn terminal_not_by_its_exit(case: &CaseInfo, role: &str) -> Predicate {
    Predicate::Any {
        predicates: vec![
            phase_is(case, role, &[Phase::Stopped]),
            Predicate::All {
                predicates: vec![
                    phase_is(case, role, &[Phase::Error]),
                    ended_by_its_exit(case, role).negate(),
                ],
            },
        ],
    }
}

pub(crate) fn ready_within(
    name: &str,
    reqs: &[&str],
    case: &CaseInfo,
    role: &str,
    after: Anchor,
    within: Duration,
) -> Check {
    Check::eventually(
        name,
        reqs,
        phase_is(case, role, &[Phase::Ready]),
        after,
        within,
    )
}

pub(crate) fn never(
    name: &str,
    reqs: &[&str],
    case: &CaseInfo,
    role: &str,
    phases: &[Phase],
    during: Window,
) -> Check {
    Check::never(name, reqs, phase_is(case, role, phases), during)
}

/// The sandbox the scenario starts from becomes Ready within the provisioning timeout (R11):
/// every later check presumes it, and a case stuck here says so first.
pub(crate) fn provisioned(case: &CaseInfo, role: &str) -> Check {
    ready_within(
        "the sandbox is Ready within the provisioning timeout",
        &["R11"],
        case,
        role,
        Anchor::action_end("create"),
        PROVISION_TIMEOUT,
    )
}

/// Ready means usable (R11): the sandbox's shell runs a command within [`USABLE_AFTER_READY`]
/// of its first Ready after `after` (its creation), so a Ready reported before the sandbox can
/// be used fails here, under provisioning, and not in whatever the case did next.
pub(crate) fn usable_once_ready(case: &CaseInfo, role: &str, after: Anchor) -> Check {
    Check::usable_once_ready(
        "Ready means usable: the shell runs a command as soon as the sandbox is Ready",
        &["R11"],
        &case.sandbox_name(role),
        after,
        USABLE_AFTER_READY,
    )
}

/// Ready means usable after every turn to Ready, not only the first (R11): once the sandbox is
/// Ready again after `after` (`what`: a recovery, a restart, a start), its shell runs a command
/// within [`USABLE_AFTER_READY`] of that Ready ([`wait_usable_again`] tries it). A shell that
/// lags fails here, once, and not the later shell checks of the case's own requirement.
pub(crate) fn usable_again(case: &CaseInfo, role: &str, after: Anchor, what: &str) -> Check {
    Check::usable_once_ready(
        &format!(
            "Ready means usable {what}: the shell runs a command as soon as the sandbox is Ready again"
        ),
        &["R11"],
        &case.sandbox_name(role),
        after,
        USABLE_AFTER_READY,
    )
}

/// [`provisioned`] and [`usable_once_ready`]: the sandbox a scenario starts from.
pub(crate) fn provisioned_usable(case: &CaseInfo, role: &str) -> [Check; 2] {
    [
        provisioned(case, role),
        usable_once_ready(case, role, Anchor::action_end("create")),
    ]
}

pub(crate) fn sentinels() -> Check {
    Check::sentinels("workspace sentinels are read back intact", &["R6"])
}

/// The starts of the workload the target reported up to the moment the scenario counted them
/// under `key` ([`observe_starts`]), and the window that selects them.
pub(crate) fn starts_upto(case: &CaseInfo, role: &str, key: &str) -> (Counted, Window) {
    let sandbox = case.sandbox_name(role);
    let marker = Marker::owned(starts_key(&sandbox, key));
    (
        Counted::MainProcessStarts { sandbox },
        Window::new(Anchor::RunStart, Anchor::marker(&marker)),
    )
}

pub(crate) fn starts_eq(
    name: &str,
    reqs: &[&str],
    case: &CaseInfo,
    role: &str,
    key: &str,
    n: u64,
) -> Check {
    starts_compared(name, reqs, case, role, key, Cmp::Eq, n)
}

/// The workload started at most `n` times: no start the scenario did not cause (R7). Too few
/// starts are for the scenario's own checks (Ready, shell) to judge, under their requirement.
pub(crate) fn starts_at_most(name: &str, case: &CaseInfo, role: &str, key: &str, n: u64) -> Check {
    starts_at_most_with(name, &["R7"], case, role, key, n)
}

/// The workload started at most `n` times up to the count under `key`, under `reqs`: the
/// requirement a start nobody asked for breaks there.
pub(crate) fn starts_at_most_with(
    name: &str,
    reqs: &[&str],
    case: &CaseInfo,
    role: &str,
    key: &str,
    n: u64,
) -> Check {
    starts_compared(name, reqs, case, role, key, Cmp::AtMost, n)
}

/// The workload's starts up to the count under `key`, compared with `n` by `cmp`.
fn starts_compared(
    name: &str,
    reqs: &[&str],
    case: &CaseInfo,
    role: &str,
    key: &str,
    cmp: Cmp,
    n: u64,
) -> Check {
    let (counted, upto) = starts_upto(case, role, key);
    Check::count(name, reqs, counted, Some(upto), cmp, n)
}

/// Marker labels of start counts are per sandbox so that multi-sandbox scenarios do not mix
/// them.
pub(crate) fn starts_key(sandbox: &str, key: &str) -> String {
    format!("{key}:{sandbox}")
}

/// Every start of the workload the target reported left its mark in the workspace (R6): a
/// workspace that lost what the workload wrote fails here, not in the counts of starts.
pub(crate) fn start_marks_kept(case: &CaseInfo, role: &str) -> Check {
    let sandbox = case.sandbox_name(role);
    Check::count(
        "the workspace keeps the mark of every main-process start",
        &["R6"],
        Counted::UnmarkedStarts {
            marks: marks_key(&sandbox),
            sandbox,
        },
        None,
        Cmp::Eq,
        0,
    )
}

pub(crate) fn shell_usable(case: &CaseInfo, role: &str, reqs: &[&str]) -> Check {
    Check::count(
        "a command runs through the sandbox shell",
        reqs,
        Counted::Observed {
            key: shell_key(&case.sandbox_name(role)),
        },
        None,
        Cmp::Eq,
        1,
    )
}

/// After the sandbox is deleted, its Sandbox resource, pod(s) and workspace PVC are gone (R13)
/// within [`CLEANUP`] of the deletion.
pub(crate) fn no_leaks(case: &CaseInfo, role: &str) -> Vec<Check> {
    let sandbox = case.sandbox_name(role);
    vec![Check::eventually(
        "nothing of the deleted sandbox is left behind",
        &["R13"],
        leaks_gone(case, &sandbox),
        Anchor::marker(&deleted_marker(&sandbox)),
        CLEANUP,
    )]
}

/// Records how long after `from` (a fault's end, or a start the scenario asked for) the
/// sandbox was Ready for good, as the observation `recovery-ms:<sandbox>`, so reports show the
/// measured latency and not only whether it was within the bound. "For good" is the last turn
/// to Ready seen so far: the view can still read Ready from before the gateway went away, and a
/// sandbox that passes through Provisioning after the gateway returns has not recovered until
/// it is Ready again. Nothing is recorded when it is not Ready now.
pub(crate) fn record_recovery(ctx: &Ctx, from: &Anchor, sandbox: &str) {
    let t = ctx.rec.snapshot();
    let Some(i) = from.resolve(&t) else {
        return;
    };
    let start = t.entries[i].at_ms;
    let ready = Predicate::phase(
        Selector::named(GATEWAY_SANDBOX_KIND, sandbox),
        &[Phase::Ready],
    );
    let mut world = World::default();
    let mut since = None;
    for (j, e) in t.entries.iter().enumerate() {
        world.apply(&e.event);
        if j < i {
            continue;
        }
        match (ready.holds(&world), since) {
            (true, None) => since = Some(e.at_ms),
            (false, _) => since = None,
            (true, Some(_)) => {}
        }
    }
    if let Some(at) = since {
        ctx.observe_value(
            &recovery_key(sandbox),
            Some(sandbox),
            serde_json::json!(at - start),
        );
    }
}

/// The observation key of a sandbox's measured recovery latency, in milliseconds.
pub(crate) fn recovery_key(sandbox: &str) -> String {
    format!("recovery-ms:{sandbox}")
}

/// The sandbox's pod was never seen Running while the gateway reported the sandbox Stopped,
/// `during` the window: a stop that leaves the workload running, or a start nobody asked for
/// (R7).
pub(crate) fn nothing_runs_while_stopped(
    name: &str,
    case: &CaseInfo,
    role: &str,
    during: Window,
) -> Check {
    let pod = Selector::named("Pod", &case.resource_name(&case.sandbox_name(role)));
    Check::never(
        name,
        &["R7"],
        Predicate::All {
            predicates: vec![
                phase_is(case, role, &[Phase::Stopped]),
                Predicate::phase(pod, &["Running"]),
            ],
        },
        during,
    )
}

/// The sandbox's pod had at most `n` incarnations over the whole case: no pod is replaced
/// unless the scenario replaced it; `reqs` name what such a replacement breaks there.
pub(crate) fn pod_incarnations(
    name: &str,
    reqs: &[&str],
    case: &CaseInfo,
    role: &str,
    n: u64,
) -> Check {
    Check::count(
        name,
        reqs,
        Counted::Incarnations {
            object: Selector::named("Pod", &case.resource_name(&case.sandbox_name(role))),
        },
        None,
        Cmp::AtMost,
        n,
    )
}

/// The window from a fault's start to a marker set once the scenario has verified recovery.
pub(crate) fn fault_until(fault: &FaultKey, marker: &Marker) -> Window {
    Window::new(Anchor::fault_start(fault), Anchor::marker(marker))
}

// ---- shared by several scenarios ------------------------------------------------------------

pub(crate) fn with_leaks(mut checks: Vec<Check>, case: &CaseInfo) -> Vec<Check> {
    checks.extend(no_leaks(case, MAIN));
    checks
}

/// For scenarios that start from a Ready sandbox: that it got there, usable, comes first.
pub(crate) fn from_ready(checks: Vec<Check>, case: &CaseInfo) -> Vec<Check> {
    let all = provisioned_usable(case, MAIN).into_iter().chain(checks);
    with_leaks(all.collect(), case)
}

/// R5 over the attempts `role`'s supervisor logged at `op` (recorded by
/// [`Ctx::record_attempts`]): after each failure the next attempt within the cap plus one
/// attempt, so the back-off stops growing, no attempt hangs, and recovery once the gateway is
/// back takes one more sleep at most; a retry refused again within the cap plus
/// [`REFUSED_RETRY_BOUND`], so that a sleep just over its cap fails. Where one supervisor serves
/// every sandbox, the attempts are those of its lines that name the sandbox.
pub(crate) fn capped_backoff(case: &CaseInfo, role: &str, op: RetryOp) -> Check {
    let cap = match op {
        RetryOp::Bootstrap => BOOTSTRAP_BACKOFF_CAP,
        RetryOp::Attach | RetryOp::Session => SESSION_BACKOFF_CAP,
    };
    Check::capped_backoff(
        &format!(
            "the supervisor's {} retries back off to at most {} and never hang",
            op.name(),
            humantime::format_duration(cap)
        ),
        &["R5"],
        &case.sandbox_name(role),
        op,
        cap,
        ATTEMPT_BOUND,
        REFUSED_RETRY_BOUND,
    )
}

/// Set once a start of `sandbox` ended: Ready, or terminal with its cause ([`settle_start`]).
pub(crate) fn start_ended_marker(sandbox: &str) -> Marker {
    Marker::owned(format!("start-ended:{sandbox}"))
}

/// After a start of `sandbox` (the user's, after a stop): waits until it is Ready, or terminal
/// with a cause in its status, and marks [`start_ended_marker`]. A start that does neither
/// within [`START_BOUND`] stops the case under R14 ([`settle_ended`]).
pub(crate) async fn settle_start(ctx: &Ctx, sandbox: &str) -> Result<SandboxView, StepError> {
    let ended = settle_ended(ctx, sandbox, &format!("the start of sandbox {sandbox}")).await?;
    ctx.mark(&start_ended_marker(sandbox));
    Ok(ended)
}

/// Waits until `sandbox` is Ready, or terminal with a cause in its status, after `what` (a
/// start, or a fault's end: the sandbox bootstraps and connects its session again, the stages
/// [`START_BOUND`] is derived from). One that does neither within [`START_BOUND`] stops the case
/// under R14, naming the phase it hangs in and the supervisor's last log line: a hang is
/// undiagnosable, whatever else it breaks.
pub(crate) async fn settle_ended(
    ctx: &Ctx,
    sandbox: &str,
    what: &str,
) -> Result<SandboxView, StepError> {
    let ended = [Phase::Ready, Phase::Error, Phase::Completed];
    let hung = match ctx.wait_phase("R14", sandbox, &ended, START_BOUND).await {
        Ok(v) if v.phase == Phase::Ready || v.reason.as_deref().is_some_and(|r| !r.is_empty()) => {
            return Ok(v);
        }
        Ok(v) => format!("ended {} with no cause in its status", v.phase.name()),
        Err(StepError::Deadline { .. }) => match ctx.get_sandbox(sandbox).await {
            Ok(Some(v)) => format!(
                "hangs in {}{} after {}",
                v.phase.name(),
                v.reason
                    .filter(|r| !r.is_empty())
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default(),
                humantime::format_duration(START_BOUND)
            ),
            _ => format!(
                "did not end within {}",
                humantime::format_duration(START_BOUND)
            ),
        },
        Err(e) => return Err(e),
    };
    Err(StepError::Failed {
        requirements: vec!["R14".into()],
        message: format!(
            "{what} {hung}; the supervisor's last log line: {}",
            last_supervisor_line(ctx, sandbox).await
        ),
    })
}

/// The last line `sandbox`'s supervisor logged (where one serves every sandbox, the last that
/// names it), or why there is none.
async fn last_supervisor_line(ctx: &Ctx, sandbox: &str) -> String {
    let resource = ctx.case.resource_name(sandbox);
    let shared = !ctx.case.topology.supervisor_per_sandbox();
    match ctx.target.supervisor_log(sandbox).await {
        Ok(Some(lines)) => lines
            .iter()
            .rev()
            .find(|l| !shared || conformance_core::retries::names_sandbox(l) == Some(&resource))
            .map_or_else(|| "none".to_string(), |l| format!("\"{l}\"")),
        Ok(None) => "unreadable (the target does not read supervisor logs)".to_string(),
        Err(e) => match conformance_core::error::one_line(&e) {
            // A stopped sandbox's pod, where its supervisor lives, is gone until it is resumed.
            why if why.contains("NotFound") => "none (its pod does not exist)".to_string(),
            why => format!("unreadable ({why})"),
        },
    }
}

/// Step shared by gateway-restart and gateway-outage: the sandbox is Ready again and usable.
pub(crate) fn verify_ready(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        let ready = ctx
            .settle_phase("R9", &name, &[Phase::Ready], RECOVERY)
            .await
            .is_some();
        wait_usable_again(ctx, &name, ready).await?;
        // Shared by the restart and the outage: only the fault this case injected resolves.
        for fault in [&GATEWAY_OUTAGE, &GATEWAY_RESTART] {
            record_recovery(ctx, &Anchor::fault_end(fault), &name);
        }
        ctx.record_attempts(&name).await;
        check_shell(ctx, &name, BEFORE_FAULT).await;
        observe_starts(ctx, &name, &starts_key(&name, "starts")).await;
        observe_start_marks(ctx, &name).await;
        ctx.mark(&VERIFIED);
        Ok(())
    })
}

/// A Ready sandbox goes through `fault` on the gateway unharmed.
pub(crate) fn ready_sandbox_checks(case: &CaseInfo, fault: &FaultKey) -> Vec<Check> {
    let pod = Selector::named("Pod", &case.resource_name(&case.sandbox_name(MAIN)));
    let mut checks = provisioned_usable(case, MAIN).to_vec();
    checks.extend([
        ready_within(
            "the sandbox returns to Ready once the gateway is back",
            &["R9"],
            case,
            MAIN,
            Anchor::fault_end(fault),
            RECOVERY,
        ),
        never(
            "the sandbox never turns terminal",
            &["R9"],
            case,
            MAIN,
            &[Phase::Error, Phase::Stopped, Phase::Completed],
            fault_until(fault, &VERIFIED),
        ),
        Check::count(
            "the sandbox pod keeps running: it is never replaced",
            &["R9"],
            conformance_core::checks::Counted::Incarnations {
                object: pod.clone(),
            },
            Some(Window::new(
                Anchor::fault_start(fault),
                Anchor::marker(&VERIFIED),
            )),
            conformance_core::checks::Cmp::Eq,
            1,
        ),
        Check::never(
            "the sandbox pod's containers are never restarted",
            &["R9"],
            Predicate::RestartsAbove {
                object: pod,
                max: 0,
            },
            fault_until(fault, &VERIFIED),
        ),
        starts_eq(
            "the running workload is not started again",
            &["R7", "R9"],
            case,
            MAIN,
            "starts",
            1,
        ),
        usable_again(
            case,
            MAIN,
            Anchor::fault_end(fault),
            "once the gateway is back",
        ),
        shell_usable(case, MAIN, &["R9"]),
        sentinels(),
        start_marks_kept(case, MAIN),
    ]);
    checks.push(capped_backoff(case, MAIN, RetryOp::Session));
    checks.extend(no_leaks(case, MAIN));
    checks
}
