//! A main process that exits (0 or non-zero) stays finished through a gateway restart or a
//! supervisor restart: nothing replays it (bug 3; #2884, #3117), and its workspace, which
//! only the reader can reach once the sandbox has finished, keeps what was written (R6).

use std::time::Duration;

use conformance_core::checks::{Anchor, Check, Window};
use conformance_core::keys::{FaultKey, Marker};
use conformance_core::phase::Phase;
use conformance_core::scenario::{
    CaseInfo, Ctx, Params, Scenario, Stage, Step, StepResult, Variant,
};
use conformance_core::target::{Capability, Fault};
use futures::future::BoxFuture;

use super::common::*;

/// The catalog's entry: this scenario and the parameter sets it runs with.
pub(crate) fn entry() -> Entry {
    Entry::new(
        completed_workload(),
        [0, 1]
            .into_iter()
            .flat_map(|exit| {
                [Via::GatewayRestart, Via::SupervisorRestart]
                    .map(|via| Params::default().with_variant(Completed { exit, via }))
            })
            .collect(),
    )
}

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

const COMPLETED: Marker = Marker::new("completed");
/// The fault that ends a completed workload's supervision (a gateway restart or a supervisor
/// kill, by variant).
const TRIGGER: FaultKey = FaultKey::new("trigger");

pub(crate) fn completed_workload() -> Scenario {
    Scenario {
        id: "completed-workload".into(),
        title: "Completed workload through a gateway or supervisor restart".into(),
        requirements: ["R6", "R7", "R9", "R13"].map(String::from).to_vec(),
        requires: vec![Capability::MainCommand],
        steps: vec![
            Step::new(
                Stage::Seed,
                "write a sentinel, which ends the workload",
                run_to_completion,
            )
            .waiting_for(&["R11", "R7"]),
            Step::new(
                Stage::Fault,
                "restart the gateway or the supervisor",
                completed_fault,
            )
            .waiting_for(&["R7"]),
            Step::new(
                Stage::Verify,
                "read the workspace back and count the workload's starts",
                count_completed,
            )
            .waiting_for(&["R7"]),
            Step::new(Stage::Verify, "delete the sandbox", delete_main).waiting_for(&["R13"]),
        ],
        checks: completed_checks,
    }
}

/// How long a finished workload's pod is left before its supervisor is killed: the v0.0.111
/// network sidecar ended about 25 ms (real) after the gateway recorded the exit (F2.12).
const FINISHED_SETTLE: Duration = Duration::from_secs(5);

/// Phases in which a finished main process may rest.
const TERMINAL: &[Phase] = &[Phase::Completed, Phase::Error];

fn run_to_completion(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let exit = ctx.variant::<Completed>()?.exit;
        let spec = spec(ctx, MAIN, completing_command(exit), None);
        ctx.create_sandbox(&spec).await?;
        ctx.wait_phase("R11", &spec.name, &[Phase::Ready], PROVISION_TIMEOUT)
            .await?;
        wait_usable(ctx, &spec.name).await?;
        wait_workload_started(ctx, &spec.name).await;
        // The workload ends once it sees the sentinel.
        ctx.write_sentinel(&spec.name, BEFORE_FAULT).await?;
        ctx.wait_phase("R7", &spec.name, TERMINAL, PROVISION_TIMEOUT)
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
            Via::SupervisorRestart => {
                // A finished workload may take its supervisors along, within moments
                // (docs/upstream-facts.md F2.12): the kill comes after that, so it meets what
                // runs then rather than racing it.
                ctx.sleep(FINISHED_SETTLE).await;
                Fault::SupervisorKill { sandbox: name }
            }
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
        // The sandbox has finished: no shell runs in it, the reader reads its workspace.
        ctx.read_sentinel_at_rest(&name, BEFORE_FAULT).await;
        observe_starts(ctx, &name, &starts_key(&name, "starts")).await;
        observe_start_marks(ctx, &name).await;
        Ok(())
    })
}

fn completed_checks(case: &CaseInfo) -> Vec<Check> {
    let variant = case.params.variant::<Completed>().copied();
    let mut checks = vec![
        Check::eventually(
            "the workload runs to completion within the provisioning timeout",
            &["R11"],
            phase_is(case, MAIN, TERMINAL),
            Anchor::action_end("create"),
            PROVISION_TIMEOUT,
        ),
        usable_once_ready(case, MAIN, Anchor::action_end("create")),
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
        sentinels(),
        start_marks_kept(case, MAIN),
    ];
    // The gateway fault's own check (R9): the finished workload rests in the phase its exit
    // gave it, which is right here, and the restart must not change it: a workload that
    // exited 0 is never made Stopped or Error for another cause than its exit (Completed, or
    // Error/MainProcessExited where 0.0.111 reports every exit so, F1.2); one that failed is
    // never made Stopped or Completed (its Error may not name the cause, R14's). Bringing it
    // back, replacing its pod or running its command again replays it: R7's checks above.
    if let Some(Completed {
        exit,
        via: Via::GatewayRestart,
    }) = variant
    {
        let (what, changed) = if exit == 0 {
            (
                "never Stopped, never Error for another cause than its exit",
                terminal_not_by_its_exit(case, MAIN),
            )
        } else {
            (
                "never Stopped, never Completed",
                phase_is(case, MAIN, &[Phase::Stopped, Phase::Completed]),
            )
        };
        checks.push(Check::never(
            &format!(
                "the gateway's restart leaves the finished sandbox as its exit left it: {what}"
            ),
            &["R9"],
            changed,
            Window::new(Anchor::fault_start(&TRIGGER), Anchor::marker(&SETTLED)),
        ));
    }
    with_leaks(checks, case)
}
