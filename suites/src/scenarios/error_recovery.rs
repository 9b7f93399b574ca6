//! A sandbox in terminal bootstrap Error is recovered by the documented path (stop, then start)
//! with its workspace (bug 1; #2179, #3308; docs/upstream-facts.md F1.10, F9.5).

use std::time::Duration;

use conformance_core::checks::{Anchor, Check, Cmp, Counted, Predicate, Window};
use conformance_core::keys::Marker;
use conformance_core::phase::Phase;
use conformance_core::scenario::{CaseInfo, Ctx, Scenario, Stage, Step, StepResult, WakeOn};
use conformance_core::target::{BootstrapMaterial, Capability, Fault};
use conformance_core::timeline::ActionStatus;
use futures::future::BoxFuture;

use super::common::*;

/// The catalog's entry: this scenario and the parameter sets it runs with.
pub(crate) fn entry() -> Entry {
    Entry::new(error_recovery(), one())
}

const RECOVERING: Marker = Marker::new("recovering");
const RECOVERED: Marker = Marker::new("recovered");

pub(crate) fn error_recovery() -> Scenario {
    Scenario {
        id: "error-recovery".into(),
        title: "Recovery of a sandbox in bootstrap Error by stop then start".into(),
        requirements: ["R4", "R6", "R7", "R8", "R13", "R14"]
            .map(String::from)
            .to_vec(),
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
            )
            .waiting_for(&["R11"]),
            Step::new(
                Stage::Fault,
                "break bootstrap so the sandbox ends in Error",
                into_error,
            )
            .waiting_for(&["R4"]),
            Step::new(Stage::Verify, "recover by stop then start", recover)
                .waiting_for(&["R8", "R14"]),
            Step::new(Stage::Verify, "delete the sandbox", delete_main).waiting_for(&["R13"]),
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
                what: BootstrapMaterial::Credentials,
            },
        )
        .await?;
        ctx.inject(&POD_REPLACE, rebootstrap(ctx, &name)).await?;
        ctx.restore(&POD_REPLACE).await?;
        // The bootstrap's own Error, not one the pod's deletion caused (see bootstrap_error).
        let own_error = ctx
            .wait_for_waking(
                "R4",
                &format!("sandbox {name} to be Error for its bootstrap's cause"),
                Duration::from_secs(120),
                WakeOn::AnyObject,
                || async {
                    Ok(ctx.get_sandbox(&name).await.ok().flatten().filter(|v| {
                        v.phase == Phase::Error && v.reason.as_deref() != Some(MAIN_PROCESS_EXITED)
                    }))
                },
            )
            .await;
        if let Err(e) = own_error {
            ctx.rec.note(format!("not reached: {e}"));
        }
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
                ctx.settle_phase("R8", &name, &[Phase::Stopped], Duration::from_secs(120))
                    .await;
            }
            // The checks count refusals (R8); the step goes on to see what is left.
            Err(e) if e.is_refused() => {}
            Err(e) => return Err(e.into()),
        }
        match ctx.start_sandbox(&name).await {
            Ok(()) => {
                let ended = settle_start(ctx, &name).await?;
                wait_usable_again(ctx, &name, ended.phase == Phase::Ready).await?;
            }
            Err(e) if e.is_refused() => {}
            Err(e) => return Err(e.into()),
        }
        check_shell(ctx, &name, BEFORE_FAULT).await;
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
                bootstrap_error(case),
                Anchor::fault_start(&POD_REPLACE),
                Duration::from_secs(120),
            ),
            refused("stop is accepted for a sandbox in Error", "stop"),
            refused("start is accepted after the stop", "start"),
            // How long the start may take is R14's (`settle_start`); that it ends Ready, R8's.
            ready_within(
                "the sandbox is Ready again after stop and start",
                &["R8"],
                case,
                MAIN,
                Anchor::marker(&start_ended_marker(&case.sandbox_name(MAIN))),
                RECOVERY,
            ),
            usable_again(case, MAIN, Anchor::action_end("start"), "after the start"),
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

/// Error for the bootstrap's own cause. Where a supervisor reports the end of the main process
/// its pod deletion caused (docs/upstream-facts.md F1.19), the sandbox is Error/MainProcessExited
/// before the new pod bootstraps at all; that Error says nothing of what the bootstrap did (R4).
fn bootstrap_error(case: &CaseInfo) -> Predicate {
    Predicate::All {
        predicates: vec![
            phase_is(case, MAIN, &[Phase::Error]),
            Predicate::Condition {
                object: gateway_view(case, MAIN),
                type_: "Ready".into(),
                status: None,
                reason: Some(MAIN_PROCESS_EXITED.into()),
            }
            .negate(),
        ],
    }
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
