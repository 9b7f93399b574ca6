//! A stopped sandbox stays stopped while the gateway goes away and comes back, then starts with
//! its workspace (bug 3; the stop/start contract, docs/upstream-facts.md F1.9, F1.10).

use std::time::Duration;

use conformance_core::checks::{Anchor, Check, Window};
use conformance_core::keys::Marker;
use conformance_core::phase::Phase;
use conformance_core::scenario::{CaseInfo, Ctx, Scenario, Stage, Step, StepResult};
use conformance_core::target::Capability;
use futures::future::BoxFuture;

use super::common::*;

/// The catalog's entry: this scenario and the parameter sets it runs with.
pub(crate) fn entry() -> Entry {
    Entry::new(stopped_through_outage(), outages_of(&[30]))
}

const STOPPED: Marker = Marker::new("stopped");

pub(crate) fn stopped_through_outage() -> Scenario {
    Scenario {
        id: "stopped-through-outage".into(),
        title: "Stopped sandbox through a gateway outage, then started".into(),
        requirements: ["R6", "R7", "R13", "R14"].map(String::from).to_vec(),
        requires: vec![Capability::MainCommand, Capability::GatewayStop],
        steps: vec![
            Step::new(
                Stage::Seed,
                "create, write a sentinel and stop",
                seed_and_stop,
            )
            .waiting_for(&["R11", "R7"]),
            Step::new(
                Stage::Fault,
                "stop the gateway for the outage",
                stopped_outage_fault,
            )
            .waiting_for(&["R7"]),
            Step::new(Stage::Verify, "start and read back", start_and_verify)
                .waiting_for(&["R7", "R14"]),
            Step::new(Stage::Verify, "delete the sandbox", delete_main).waiting_for(&["R13"]),
        ],
        checks: stopped_checks,
    }
}

fn seed_and_stop(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = create_ready(ctx, MAIN, None).await?;
        ctx.write_sentinel(&name, BEFORE_FAULT).await?;
        ctx.stop_sandbox(&name).await?;
        ctx.wait_phase(
            STOP_CONTRACT,
            &name,
            &[Phase::Stopped],
            Duration::from_secs(120),
        )
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
        let ended = settle_start(ctx, &name).await?;
        wait_usable_again(ctx, &name, ended.phase == Phase::Ready).await?;
        wait_starts(ctx, "R7", &name, 2, RECOVERY).await;
        check_shell(ctx, &name, BEFORE_FAULT).await;
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
            // How long the start may take is R14's (`settle_start`); that it ends Ready, R7's.
            ready_within(
                "the sandbox starts when asked",
                &["R7"],
                case,
                MAIN,
                Anchor::marker(&start_ended_marker(&case.sandbox_name(MAIN))),
                RECOVERY,
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
            usable_again(case, MAIN, Anchor::action_end("start"), "after the start"),
            shell_usable(case, MAIN, &["R7"]),
            sentinels(),
        ],
        case,
    )
}
