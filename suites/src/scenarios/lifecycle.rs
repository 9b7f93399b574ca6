//! Lifecycle under faults: stops, completed workloads, recovery from Error, restart policies,
//! permanent bootstrap errors, provisioning and supervisor restarts on every topology.

use conformance_core::timeline::READY_CONDITION;
use std::time::Duration;

use conformance_core::checks::{Anchor, Check, Cmp, Counted, Predicate, Selector, Window};
use conformance_core::keys::{FaultKey, Marker};
use conformance_core::phase::Phase;
use conformance_core::scenario::{CaseInfo, Ctx, Scenario, Stage, Step, StepResult, Variant};
use conformance_core::target::{Capability, Fault, RestartPolicy, TargetError};
use conformance_core::timeline::ActionStatus;
use futures::future::BoxFuture;

use super::common::*;

fn with_leaks(mut checks: Vec<Check>, case: &CaseInfo) -> Vec<Check> {
    checks.extend(no_leaks(case, MAIN));
    checks
}

/// For scenarios that start from a Ready sandbox: that it got there comes first.
fn from_ready(mut checks: Vec<Check>, case: &CaseInfo) -> Vec<Check> {
    checks.insert(0, provisioned(case, MAIN));
    with_leaks(checks, case)
}

// ---- a stopped sandbox through a gateway outage ---------------------------------------------

/// A stopped sandbox stays stopped while the gateway goes away and comes back, then starts with
/// its workspace (bug 3; the stop/start contract, docs/upstream-facts.md F1.9, F1.10).
/// A completed-workload case: the main process's exit code, and what ends its supervision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Completed {
    pub exit: i32,
    pub via: Via,
}

/// How a completed workload loses its supervision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    GatewayRestart,
    SupervisorRestart,
}

impl Variant for Completed {
    fn label(&self) -> Vec<(&'static str, String)> {
        let via = match self.via {
            Via::GatewayRestart => "gateway-restart",
            Via::SupervisorRestart => "supervisor-restart",
        };
        vec![("exit", self.exit.to_string()), ("via", via.to_string())]
    }

    fn requires(&self) -> Vec<Capability> {
        vec![match self.via {
            Via::GatewayRestart => Capability::GatewayRestart,
            Via::SupervisorRestart => Capability::SupervisorKill,
        }]
    }
}

/// What a restart-policy-always case does to end the main process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The main process is killed.
    MainKill,
    /// The main process dies while the gateway is down.
    GatewayRestart,
}

impl Variant for Trigger {
    fn label(&self) -> Vec<(&'static str, String)> {
        let name = match self {
            Self::MainKill => "main-kill",
            Self::GatewayRestart => "gateway-restart",
        };
        vec![("trigger", name.to_string())]
    }

    fn requires(&self) -> Vec<Capability> {
        match self {
            Self::MainKill => Vec::new(),
            Self::GatewayRestart => vec![Capability::GatewayStop],
        }
    }
}

/// Which bootstrap material a permanent-bootstrap-error case breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadMaterial {
    /// The gateway rejects the sandbox's credentials.
    Credentials,
    /// The gateway presents a certificate the sandbox cannot verify.
    Certificate,
}

impl BadMaterial {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Credentials => "credentials",
            Self::Certificate => "certificate",
        }
    }
}

impl Variant for BadMaterial {
    fn label(&self) -> Vec<(&'static str, String)> {
        vec![("what", self.name().to_string())]
    }
}

// Markers of these scenarios (VERIFIED and SETTLED are common).
const STOPPED: Marker = Marker::new("stopped");
const COMPLETED: Marker = Marker::new("completed");
const RECOVERING: Marker = Marker::new("recovering");
const RECOVERED: Marker = Marker::new("recovered");
const MAIN_ENDED: Marker = Marker::new("main-ended");
/// The fault that ends a completed workload's supervision (a gateway restart or a supervisor
/// kill, by variant).
const TRIGGER: FaultKey = FaultKey::new("trigger");

pub(crate) fn stopped_through_outage() -> Scenario {
    Scenario {
        id: "stopped-through-outage".into(),
        title: "Stopped sandbox through a gateway outage, then started".into(),
        requirements: ["R6", "R7", "R13"].map(String::from).to_vec(),
        requires: vec![Capability::MainCommand, Capability::GatewayStop],
        steps: vec![
            Step::new(
                Stage::Seed,
                "create, write a sentinel and stop",
                seed_and_stop,
            ),
            Step::new(
                Stage::Fault,
                "stop the gateway for the outage",
                stopped_outage_fault,
            ),
            Step::new(Stage::Verify, "start and read back", start_and_verify),
            Step::new(Stage::Verify, "delete the sandbox", delete_main),
        ],
        checks: stopped_checks,
    }
}

fn seed_and_stop(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = create_ready(ctx, MAIN, None).await?;
        ctx.write_sentinel(&name, "before-fault").await?;
        ctx.stop_sandbox(&name).await?;
        ctx.wait_phase(&name, &[Phase::Stopped], Duration::from_secs(120))
            .await?;
        pod_seen_stopped(ctx, &name).await;
        ctx.mark(&STOPPED);
        Ok(())
    })
}

fn stopped_outage_fault(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let outage = ctx.params().outage.unwrap_or(Duration::from_secs(30));
        ctx.outage(&GATEWAY_OUTAGE, outage).await?;
        // Watch the sandbox for a while: a returning gateway must not start it.
        ctx.sleep(SETTLE).await;
        let name = ctx.sandbox_name(MAIN);
        ctx.get_sandbox(&name).await.ok();
        ctx.mark(&SETTLED);
        Ok(())
    })
}

fn start_and_verify(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        ctx.start_sandbox(&name).await?;
        ctx.settle_phase(&name, &[Phase::Ready], PROVISION_TIMEOUT)
            .await;
        wait_starts(ctx, &name, 2, RECOVERY).await;
        check_shell(ctx, &name).await;
        ctx.read_sentinel(&name, "before-fault").await;
        observe_starts(ctx, &name, &starts_key(&name, "starts")).await;
        observe_start_marks(ctx, &name).await;
        Ok(())
    })
}

fn stopped_checks(case: &CaseInfo) -> Vec<Check> {
    from_ready(
        vec![
            never(
                "the stopped sandbox is not started by the returning gateway",
                &["R7"],
                case,
                MAIN,
                &[
                    Phase::Starting,
                    Phase::Ready,
                    Phase::Provisioning,
                    Phase::Error,
                ],
                Window::new(Anchor::marker(&STOPPED), Anchor::marker(&SETTLED)),
            ),
            ready_within(
                "the sandbox starts when asked",
                &["R7"],
                case,
                MAIN,
                Anchor::action_end("start"),
                PROVISION_TIMEOUT,
            ),
            starts_eq(
                "the workload ran once before the stop and once after the start",
                &["R7"],
                case,
                MAIN,
                "starts",
                2,
            ),
            start_marks_kept(case, MAIN),
            nothing_runs_while_stopped(
                "no workload runs while the sandbox is Stopped",
                case,
                MAIN,
                Window::new(Anchor::marker(&STOPPED), Anchor::marker(&SETTLED)),
            ),
            pod_incarnations(
                "the sandbox pod is replaced only by the user's stop and start",
                &["R7"],
                case,
                MAIN,
                2,
            ),
            shell_usable(case, MAIN, &["R7"]),
            sentinels(),
        ],
        case,
    )
}

// ---- a completed workload through restarts --------------------------------------------------

/// A main process that exits (0 or non-zero) stays finished through a gateway restart or a
/// supervisor restart: nothing replays it (bug 3; #2884, #3117).
pub(crate) fn completed_workload() -> Scenario {
    Scenario {
        id: "completed-workload".into(),
        title: "Completed workload through a gateway or supervisor restart".into(),
        requirements: ["R7", "R13"].map(String::from).to_vec(),
        requires: vec![Capability::MainCommand],
        steps: vec![
            Step::new(
                Stage::Seed,
                "run a workload to completion",
                run_to_completion,
            ),
            Step::new(
                Stage::Fault,
                "restart the gateway or the supervisor",
                completed_fault,
            ),
            Step::new(
                Stage::Verify,
                "count the workload's starts",
                count_completed,
            ),
            Step::new(Stage::Verify, "delete the sandbox", delete_main),
        ],
        checks: completed_checks,
    }
}

/// Phases in which a finished main process may rest.
const TERMINAL: &[Phase] = &[Phase::Completed, Phase::Error];

fn run_to_completion(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let exit = ctx.variant::<Completed>()?.exit;
        let spec = spec(ctx, MAIN, completing_command(exit), None);
        ctx.create_sandbox(&spec).await?;
        ctx.wait_phase(&spec.name, TERMINAL, PROVISION_TIMEOUT)
            .await?;
        ctx.mark(&COMPLETED);
        Ok(())
    })
}

fn completed_fault(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        // The variant declared the capability, so the engine skipped the case without it.
        let fault = match ctx.variant::<Completed>()?.via {
            Via::SupervisorRestart => Fault::SupervisorKill { sandbox: name },
            Via::GatewayRestart => Fault::GatewayRestart,
        };
        ctx.inject(&TRIGGER, fault).await?;
        ctx.restore(&TRIGGER).await?;
        ctx.sleep(SETTLE).await;
        ctx.mark(&SETTLED);
        Ok(())
    })
}

fn count_completed(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        ctx.get_sandbox(&name).await.ok();
        observe_starts(ctx, &name, &starts_key(&name, "starts")).await;
        Ok(())
    })
}

fn completed_checks(case: &CaseInfo) -> Vec<Check> {
    with_leaks(
        vec![
            Check::eventually(
                "the workload runs to completion within the provisioning timeout",
                &["R11"],
                phase_is(case, MAIN, TERMINAL),
                Anchor::action_end("create"),
                PROVISION_TIMEOUT,
            ),
            never(
                "the finished workload is not brought back",
                &["R7"],
                case,
                MAIN,
                &[
                    Phase::Ready,
                    Phase::Starting,
                    Phase::Restarting,
                    Phase::Provisioning,
                ],
                Window::new(Anchor::marker(&COMPLETED), Anchor::marker(&SETTLED)),
            ),
            starts_eq(
                "the completed command ran exactly once",
                &["R7"],
                case,
                MAIN,
                "starts",
                1,
            ),
            // A restart that replaces the finished pod replays its command (R7).
            pod_incarnations(
                "the finished workload's pod is not replaced",
                &["R7"],
                case,
                MAIN,
                1,
            ),
        ],
        case,
    )
}

// ---- recovery from bootstrap Error ----------------------------------------------------------

/// A sandbox in terminal bootstrap Error is recovered by the documented path (stop, then start)
/// with its workspace (bug 1; #2179, #3308; docs/upstream-facts.md F1.10, F9.5).
pub(crate) fn error_recovery() -> Scenario {
    Scenario {
        id: "error-recovery".into(),
        title: "Recovery of a sandbox in bootstrap Error by stop then start".into(),
        requirements: ["R4", "R6", "R7", "R8", "R13"].map(String::from).to_vec(),
        requires: vec![
            Capability::MainCommand,
            Capability::BootstrapCredentialFault,
            Capability::SandboxPodReplace,
            Capability::SupervisorKill,
        ],
        steps: vec![
            Step::new(
                Stage::Seed,
                "create a Ready sandbox and write a sentinel",
                seed_main,
            ),
            Step::new(
                Stage::Fault,
                "break bootstrap so the sandbox ends in Error",
                into_error,
            ),
            Step::new(Stage::Verify, "recover by stop then start", recover),
            Step::new(Stage::Verify, "delete the sandbox", delete_main),
        ],
        checks: recovery_checks,
    }
}

fn into_error(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        ctx.inject(
            &BAD_CREDENTIALS,
            Fault::BootstrapCredentials {
                sandbox: name.clone(),
                what: "credentials".into(),
            },
        )
        .await?;
        ctx.inject(&POD_REPLACE, rebootstrap(ctx, &name)).await?;
        ctx.restore(&POD_REPLACE).await?;
        ctx.settle_phase(&name, &[Phase::Error], Duration::from_secs(120))
            .await;
        // The cause is fixed; what remains is the sandbox's terminal state.
        ctx.restore(&BAD_CREDENTIALS).await?;
        ctx.mark(&RECOVERING);
        Ok(())
    })
}

fn recover(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        match ctx.stop_sandbox(&name).await {
            Ok(()) => {
                ctx.settle_phase(&name, &[Phase::Stopped], Duration::from_secs(120))
                    .await;
            }
            Err(TargetError::Refused { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        match ctx.start_sandbox(&name).await {
            Ok(()) => {
                ctx.settle_phase(&name, &[Phase::Ready], PROVISION_TIMEOUT)
                    .await;
            }
            Err(TargetError::Refused { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        check_shell(ctx, &name).await;
        ctx.read_sentinel(&name, "before-fault").await;
        observe_starts(ctx, &name, &starts_key(&name, "starts")).await;
        observe_start_marks(ctx, &name).await;
        ctx.mark(&RECOVERED);
        Ok(())
    })
}

fn recovery_checks(case: &CaseInfo) -> Vec<Check> {
    let refused = |name: &str, action: &str| {
        Check::count(
            name,
            &["R8"],
            Counted::Actions {
                name: action.into(),
                status: Some(ActionStatus::Refused),
            },
            None,
            Cmp::Eq,
            0,
        )
    };
    from_ready(
        vec![
            Check::eventually(
                "a bootstrap that cannot authenticate ends in Error",
                &["R4"],
                phase_is(case, MAIN, &[Phase::Error]),
                Anchor::fault_start(&POD_REPLACE),
                Duration::from_secs(120),
            ),
            refused("stop is accepted for a sandbox in Error", "stop"),
            refused("start is accepted after the stop", "start"),
            ready_within(
                "the sandbox is Ready again after stop and start",
                &["R8"],
                case,
                MAIN,
                Anchor::marker(&RECOVERING),
                PROVISION_TIMEOUT,
            ),
            shell_usable(case, MAIN, &["R8"]),
            sentinels(),
            // Once at creation and once after the user's start: a bootstrap that cannot
            // authenticate starts nothing (R3), and nothing else may start it (R7).
            {
                let (counted, upto) = starts_upto(case, MAIN, "starts");
                Check::count(
                    "the workload started only at creation and at the user's start",
                    &["R3", "R7"],
                    counted,
                    Some(upto),
                    Cmp::AtMost,
                    2,
                )
            },
            start_marks_kept(case, MAIN),
            nothing_runs_while_stopped(
                "no workload runs while the sandbox is Stopped",
                case,
                MAIN,
                Window::new(Anchor::marker(&RECOVERING), Anchor::marker(&RECOVERED)),
            ),
            pod_incarnations(
                "the sandbox pod is replaced only by the scenario's fault and the user's stop and start",
                &["R8"],
                case,
                MAIN,
                error_recovery_pods(case),
            ),
        ],
        case,
    )
}

/// The sandbox pod's incarnations in an error-recovery case: the one created, the one the
/// fault puts in its place (only where the supervisor lives in the sandbox pod, see
/// `rebootstrap`), and the one the user's start creates after the stop removed it.
fn error_recovery_pods(case: &CaseInfo) -> u64 {
    if case.topology.supervisor_in_sandbox_pod() {
        3
    } else {
        2
    }
}

// ---- restart policy always ------------------------------------------------------------------

/// `--restart-policy always` is honoured when the main process is killed, and when it dies
/// while the gateway is away (bug 3; #2798; docs/upstream-facts.md F9.1).
pub(crate) fn restart_policy_always() -> Scenario {
    Scenario {
        id: "restart-policy-always".into(),
        title: "Restart policy always when the main process ends".into(),
        requirements: ["R10", "R13"].map(String::from).to_vec(),
        requires: vec![
            Capability::MainCommand,
            Capability::RestartPolicy,
            Capability::MainProcessKill,
        ],
        steps: vec![
            Step::new(
                Stage::Seed,
                "create a sandbox with restart policy always",
                seed_always,
            ),
            Step::new(Stage::Fault, "end the main process", end_main),
            Step::new(Stage::Verify, "wait for the restart", verify_restarted),
            Step::new(Stage::Verify, "delete the sandbox", delete_main),
        ],
        checks: restart_checks,
    }
}

fn seed_always(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        create_ready(ctx, MAIN, Some(RestartPolicy::Always)).await?;
        Ok(())
    })
}

/// How many times a restart-policy case ends the main process: once is luck, three times with
/// one of them across a gateway outage is a policy.
const ENDS: u64 = 3;
/// How soon the main process must be running again after it ended (or, when it ended during an
/// outage, after the gateway is back): the supervisor's restart backoff is capped at 30 s
/// (docs/upstream-facts.md F2.7), and bootstrap-free restarts need no more than a few attempts.
const RESTARTED: Duration = Duration::from_secs(180);

/// The fault key of the `k`th end of the main process.
fn main_kill(k: u64) -> FaultKey {
    FaultKey::owned(format!("main-kill-{k}"))
}

/// The observation key of the starts counted after the `k`th end.
fn starts_after_end(k: u64) -> String {
    format!("starts-after-end-{k}")
}

fn end_main(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        let across_outage = *ctx.variant::<Trigger>()? == Trigger::GatewayRestart;
        for k in 1..=ENDS {
            let kill = Fault::MainProcessKill {
                sandbox: name.clone(),
            };
            // The last end of the gateway-restart variant happens while its exit cannot be
            // reported (docs/upstream-facts.md F2.7); it comes last so that the earlier ends
            // are judged on a sandbox the outage has not touched yet.
            let during_outage = across_outage && k == ENDS;
            if during_outage {
                ctx.inject_for(
                    &GATEWAY_OUTAGE,
                    Fault::GatewayStop,
                    Some(Duration::from_secs(30)),
                )
                .await?;
            }
            let ended = ctx.rec.elapsed();
            ctx.inject(&main_kill(k), kill).await?;
            ctx.restore(&main_kill(k)).await?;
            ctx.mark(&MAIN_ENDED);
            if during_outage {
                ctx.sleep(Duration::from_secs(30)).await;
                ctx.restore(&GATEWAY_OUTAGE).await?;
            }
            // Each end is followed by a restart within the bound before the next end.
            if wait_starts(ctx, &name, k + 1, RESTARTED).await {
                let latency = ctx.rec.elapsed().saturating_sub(ended);
                ctx.observe_value(
                    &format!("restart-ms-{k}:{name}"),
                    Some(&name),
                    serde_json::json!(latency.as_millis() as u64),
                );
            }
            observe_starts(ctx, &name, &starts_key(&name, &starts_after_end(k))).await;
        }
        Ok(())
    })
}

fn verify_restarted(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        ctx.settle_phase(&name, &[Phase::Ready], RESTARTED).await;
        check_shell(ctx, &name).await;
        observe_starts(ctx, &name, &starts_key(&name, "starts")).await;
        ctx.mark(&VERIFIED);
        Ok(())
    })
}

fn restart_checks(case: &CaseInfo) -> Vec<Check> {
    from_ready(
        vec![
            ready_within(
                "the sandbox is running again after its main process ended",
                &["R10"],
                case,
                MAIN,
                Anchor::marker(&MAIN_ENDED),
                Duration::from_secs(180),
            ),
            never(
                "the sandbox never rests in a terminal phase",
                &["R10"],
                case,
                MAIN,
                &[Phase::Error, Phase::Completed, Phase::Stopped],
                Window::new(Anchor::marker(&MAIN_ENDED), Anchor::marker(&VERIFIED)),
            ),
            starts_eq(
                "the main process was started again once per end",
                &["R10"],
                case,
                MAIN,
                "starts",
                ENDS + 1,
            ),
            pod_incarnations(
                "the main process restarts in place: the sandbox pod is not replaced",
                &["R10"],
                case,
                MAIN,
                1,
            ),
            shell_usable(case, MAIN, &["R10"]),
        ]
        .into_iter()
        .chain((1..=ENDS).map(|k| {
            let (counted, upto) = starts_upto(case, MAIN, &starts_after_end(k));
            Check::count(
                &format!(
                    "end {k} of {ENDS} is followed by a restart within {}",
                    humantime::format_duration(RESTARTED)
                ),
                &["R10"],
                counted,
                Some(upto),
                Cmp::AtLeast,
                k + 1,
            )
        }))
        .collect(),
        case,
    )
}

// ---- permanent bootstrap errors -------------------------------------------------------------

/// Bad credentials, or a gateway certificate the sandbox must reject: the sandbox fails fast and
/// says why, never becomes Ready, and leaves nothing behind (bug 1 acceptance; bug 2 leaks).
pub(crate) fn permanent_bootstrap_error() -> Scenario {
    Scenario {
        id: "permanent-bootstrap-error".into(),
        title: "Permanent bootstrap error: explicit, bounded, diagnosable, no leaks".into(),
        requirements: ["R4", "R13", "R14"].map(String::from).to_vec(),
        requires: vec![
            Capability::MainCommand,
            Capability::BootstrapCredentialFault,
        ],
        steps: vec![
            Step::new(
                Stage::Seed,
                "create a sandbox with broken bootstrap",
                create_broken,
            ),
            Step::new(Stage::Fault, "wait for the failure", wait_failure),
            Step::new(Stage::Verify, "delete the sandbox", delete_broken),
        ],
        checks: permanent_checks,
    }
}

fn create_broken(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let what = ctx.variant::<BadMaterial>()?.name().to_string();
        let spec = spec(ctx, MAIN, workload_command(), None);
        ctx.inject(
            &BAD_CREDENTIALS,
            Fault::BootstrapCredentials {
                sandbox: spec.name.clone(),
                what,
            },
        )
        .await?;
        ctx.create_sandbox(&spec).await?;
        Ok(())
    })
}

fn wait_failure(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        ctx.settle_phase(&name, &[Phase::Error], PROVISION_TIMEOUT)
            .await;
        observe_starts(ctx, &name, &starts_key(&name, "starts")).await;
        Ok(())
    })
}

fn delete_broken(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        delete(ctx, &name).await?;
        // Put the credentials back only after the checks' window: the engine restores them.
        Ok(())
    })
}

fn permanent_checks(case: &CaseInfo) -> Vec<Check> {
    let words: Vec<String> = match case.params.variant() {
        Some(BadMaterial::Certificate) => ["certificate", "tls", "x509"],
        Some(BadMaterial::Credentials) | None => ["unauthenticated", "credential", "token"],
    }
    .map(String::from)
    .to_vec();
    with_leaks(
        vec![
            Check::eventually(
                "the sandbox fails explicitly within a bounded time",
                &["R4"],
                phase_is(case, MAIN, &[Phase::Error]),
                Anchor::action_end("create"),
                PERMANENT_ERROR_BOUND,
            ),
            Check::never(
                "the sandbox never becomes Ready with bootstrap that must fail (TLS validation kept)",
                &["R4"],
                phase_is(case, MAIN, &[Phase::Ready]),
                Window::whole_run(),
            ),
            starts_eq(
                "the workload never starts without bootstrap",
                &["R3", "R4"],
                case,
                MAIN,
                "starts",
                0,
            ),
            Check::eventually(
                "the reported status names the cause",
                &["R14"],
                Predicate::ConditionMentions {
                    object: gateway_view(case, MAIN),
                    type_: READY_CONDITION.into(),
                    any_of: words,
                },
                Anchor::action_end("create"),
                PERMANENT_ERROR_BOUND,
            ),
            // Failing fast means one pod that fails, not a loop of replacements retrying it.
            pod_incarnations(
                "the failing sandbox's pod is not replaced",
                &["R4"],
                case,
                MAIN,
                1,
            ),
        ],
        case,
    )
}

// ---- provisioning and supervisor restart ----------------------------------------------------

/// A sandbox provisions on the topology within the provisioning timeout (bug 2; #3144).
pub(crate) fn provisioning() -> Scenario {
    Scenario {
        id: "provisioning".into(),
        title: "Provisioning on the topology within the provisioning timeout".into(),
        requirements: ["R6", "R11", "R13"].map(String::from).to_vec(),
        requires: vec![Capability::MainCommand],
        steps: vec![
            Step::new(Stage::Seed, "create a sandbox", create_and_wait),
            Step::new(Stage::Verify, "use the sandbox", use_sandbox),
            Step::new(Stage::Verify, "delete the sandbox", delete_main),
        ],
        checks: provisioning_checks,
    }
}

fn create_and_wait(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let spec = spec(ctx, MAIN, workload_command(), None);
        ctx.create_sandbox(&spec).await?;
        ctx.settle_phase(&spec.name, &[Phase::Ready], PROVISION_TIMEOUT)
            .await;
        Ok(())
    })
}

fn use_sandbox(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        wait_starts(ctx, &name, 1, RECOVERY).await;
        check_shell(ctx, &name).await;
        // A workspace write and read on a fresh sandbox.
        if ctx.write_sentinel(&name, "fresh").await.is_ok() {
            ctx.read_sentinel(&name, "fresh").await;
        }
        observe_starts(ctx, &name, &starts_key(&name, "starts")).await;
        observe_start_marks(ctx, &name).await;
        Ok(())
    })
}

fn provisioning_checks(case: &CaseInfo) -> Vec<Check> {
    with_leaks(
        vec![
            ready_within(
                "the sandbox is Ready within the provisioning timeout",
                &["R11"],
                case,
                MAIN,
                Anchor::action_end("create"),
                PROVISION_TIMEOUT,
            ),
            starts_eq(
                "the workload started once",
                &["R11"],
                case,
                MAIN,
                "starts",
                1,
            ),
            start_marks_kept(case, MAIN),
            pod_incarnations(
                "the sandbox pod is not replaced while it provisions",
                &["R11"],
                case,
                MAIN,
                1,
            ),
            shell_usable(case, MAIN, &["R11"]),
            sentinels(),
        ],
        case,
    )
}

/// The supervisor is killed where the topology runs it; the workload re-attaches without being
/// restarted and without a crash loop (bug 2; #3396).
pub(crate) fn supervisor_restart() -> Scenario {
    Scenario {
        id: "supervisor-restart".into(),
        title: "Supervisor restart: the workload re-attaches".into(),
        requirements: ["R6", "R12", "R13"].map(String::from).to_vec(),
        requires: vec![Capability::MainCommand, Capability::SupervisorKill],
        steps: vec![
            Step::new(
                Stage::Seed,
                "create a Ready sandbox and write a sentinel",
                seed_main,
            ),
            Step::new(Stage::Fault, "kill the supervisor", kill_supervisor),
            Step::new(
                Stage::Verify,
                "wait for re-attach and read back",
                verify_reattached,
            ),
            Step::new(Stage::Verify, "delete the sandbox", delete_main),
        ],
        checks: supervisor_checks,
    }
}

fn kill_supervisor(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        ctx.inject(
            &SUPERVISOR_KILL,
            Fault::SupervisorKill {
                sandbox: name.clone(),
            },
        )
        .await?;
        ctx.restore(&SUPERVISOR_KILL).await?;
        // "Ready again" counts from when the gateway noticed the loss: from the fault's end
        // alone it could count the Ready of before the kill, which the gateway reports until it
        // notices (in virtual time the two share a millisecond, and upstream's model, whose
        // sandbox never recovers, passed that check). A supervisor back before anyone noticed
        // leaves the sandbox Ready throughout: then the mark comes at the wait's end. The mark
        // follows the state that ended the wait on the timeline too, or "Ready again" would be
        // judged from the Ready the gateway reported before it noticed.
        if let Err(e) = ctx
            .wait_phase_left(&name, &Phase::Ready, LOSS_NOTICED)
            .await
        {
            ctx.rec.note(format!("not reached: {e}"));
        }
        ctx.mark_after_observed(&SUPERVISOR_LOST).await;
        Ok(())
    })
}

/// How long the gateway may take to notice a killed supervisor's lost session.
const LOSS_NOTICED: Duration = Duration::from_secs(10);
/// Set once the gateway stopped reporting Ready after the supervisor kill (or did not within
/// [`LOSS_NOTICED`]).
const SUPERVISOR_LOST: Marker = Marker::new("supervisor-lost");

fn verify_reattached(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        ctx.settle_phase(&name, &[Phase::Ready], RECOVERY).await;
        // Let a crash loop, if any, show itself.
        ctx.sleep(SETTLE).await;
        ctx.get_sandbox(&name).await.ok();
        check_shell(ctx, &name).await;
        ctx.read_sentinel(&name, "before-fault").await;
        observe_starts(ctx, &name, &starts_key(&name, "starts")).await;
        observe_start_marks(ctx, &name).await;
        ctx.mark(&VERIFIED);
        Ok(())
    })
}

fn supervisor_checks(case: &CaseInfo) -> Vec<Check> {
    let pod = Selector::named("Pod", &case.resource_name(&case.sandbox_name(MAIN)));
    from_ready(
        vec![
            ready_within(
                "the workload re-attaches: the sandbox is Ready again",
                &["R12"],
                case,
                MAIN,
                Anchor::marker(&SUPERVISOR_LOST),
                RECOVERY,
            ),
            Check::never(
                "no crash loop: the sandbox pod's containers restart at most once",
                &["R12"],
                Predicate::RestartsAbove {
                    object: pod,
                    max: 1,
                },
                fault_until(&SUPERVISOR_KILL, &VERIFIED),
            ),
            starts_eq(
                "the workload is re-attached, not started again",
                &["R12"],
                case,
                MAIN,
                "starts",
                1,
            ),
            start_marks_kept(case, MAIN),
            pod_incarnations(
                "the sandbox pod is not replaced: the workload re-attaches in place",
                &["R12"],
                case,
                MAIN,
                1,
            ),
            shell_usable(case, MAIN, &["R12"]),
            sentinels(),
        ],
        case,
    )
}
