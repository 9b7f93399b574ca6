//! `--restart-policy always` is honoured when the main process is killed, and when it dies
//! while the gateway is away (bug 3; #2798; docs/upstream-facts.md F9.1).

use std::time::Duration;

use conformance_core::checks::{Anchor, Check, Cmp, Counted, Predicate, Selector, Window};
use conformance_core::keys::{FaultKey, Marker};
use conformance_core::phase::Phase;
use conformance_core::scenario::{
    CaseInfo, Ctx, Params, Scenario, Stage, Step, StepResult, Variant,
};
use conformance_core::target::{Capability, Fault, RestartPolicy};
use futures::future::BoxFuture;

use super::common::*;

/// The catalog's entry: this scenario and the parameter sets it runs with.
pub(crate) fn entry() -> Entry {
    Entry::new(
        restart_policy_always(),
        [Trigger::MainKill, Trigger::GatewayRestart]
            .map(|t| Params::default().with_variant(t))
            .to_vec(),
    )
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

const MAIN_ENDED: Marker = Marker::new("main-ended");

pub(crate) fn restart_policy_always() -> Scenario {
    Scenario {
        id: "restart-policy-always".into(),
        title: "Restart policy always when the main process ends".into(),
        requirements: ["R6", "R9", "R10", "R13"].map(String::from).to_vec(),
        requires: vec![
            Capability::MainCommand,
            Capability::RestartPolicy,
            Capability::MainProcessKill,
        ],
        steps: vec![
            Step::new(
                Stage::Seed,
                "create a sandbox with restart policy always and write a sentinel",
                seed_always,
            )
            .waiting_for(&["R11"]),
            Step::new(Stage::Fault, "end the main process", end_main).waiting_for(&["R10"]),
            Step::new(Stage::Verify, "wait for the restart", verify_restarted)
                .waiting_for(&["R10"]),
            Step::new(Stage::Verify, "delete the sandbox", delete_main).waiting_for(&["R13"]),
        ],
        checks: restart_checks,
    }
}

fn seed_always(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        seed_ready(ctx, Some(RestartPolicy::Always)).await?;
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
            if wait_starts(ctx, "R10", &name, k + 1, RESTARTED).await {
                let latency = ctx.rec.elapsed().saturating_sub(ended);
                ctx.observe_value(
                    &format!("restart-ms-{k}:{name}"),
                    Some(&name),
                    serde_json::json!(latency.as_millis() as u64),
                );
                // Each restart is a turn to Ready: Ready means usable there too (R11).
                let ready = ctx
                    .settle_phase("R10", &name, &[Phase::Ready], RESTARTED)
                    .await
                    .is_some();
                wait_usable_again(ctx, &name, ready).await?;
            }
            observe_starts(ctx, &name, &starts_key(&name, &starts_after_end(k))).await;
        }
        Ok(())
    })
}

fn verify_restarted(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        ctx.settle_phase("R10", &name, &[Phase::Ready], RESTARTED)
            .await;
        check_shell(ctx, &name, BEFORE_FAULT).await;
        observe_starts(ctx, &name, &starts_key(&name, "starts")).await;
        observe_start_marks(ctx, &name).await;
        ctx.mark(&VERIFIED);
        Ok(())
    })
}

fn restart_checks(case: &CaseInfo) -> Vec<Check> {
    let across_outage = case.params.variant::<Trigger>() == Some(&Trigger::GatewayRestart);
    let mut checks = vec![ready_within(
        "the sandbox is running again after its main process ended",
        &["R10"],
        case,
        MAIN,
        Anchor::marker(&MAIN_ENDED),
        Duration::from_secs(180),
    )];
    if across_outage {
        checks.extend(policy_and_gateway_checks(case));
    } else {
        checks.extend([
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
        ]);
    }
    checks.extend([
        shell_usable(case, MAIN, &["R10"]),
        sentinels(),
        start_marks_kept(case, MAIN),
    ]);
    checks.extend((1..=ENDS).map(|k| {
        usable_again(
            case,
            MAIN,
            Anchor::fault_end(&main_kill(k)),
            &format!("after restart {k} of {ENDS}"),
        )
    }));
    checks.extend((1..=ENDS).map(|k| {
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
    }));
    from_ready(checks, case)
}

/// Where the last end falls in a gateway outage, the fault is a gateway restart too (R9): from
/// the outage on, what the gateway must not do there (make the sandbox terminal for anything
/// but the exit, replace its pod) is R9's, and what the restart policy owes the end (no
/// resting in the exit's phase, the restart) stays R10's, as everything before the outage
/// does. A start more than one per end is R9's here: the count cannot tell when it came.
fn policy_and_gateway_checks(case: &CaseInfo) -> Vec<Check> {
    let pod = || Counted::Incarnations {
        object: Selector::named("Pod", &case.resource_name(&case.sandbox_name(MAIN))),
    };
    let outage = fault_until(&GATEWAY_OUTAGE, &VERIFIED);
    vec![
        never(
            "the sandbox never rests in a terminal phase before the gateway goes away",
            &["R10"],
            case,
            MAIN,
            &[Phase::Error, Phase::Completed, Phase::Stopped],
            Window::new(
                Anchor::marker(&MAIN_ENDED),
                Anchor::fault_start(&GATEWAY_OUTAGE),
            ),
        ),
        Check::never(
            "the exit the gateway learns of across its outage is not left terminal",
            &["R10"],
            Predicate::Any {
                predicates: vec![
                    phase_is(case, MAIN, &[Phase::Completed]),
                    Predicate::All {
                        predicates: vec![
                            phase_is(case, MAIN, &[Phase::Error]),
                            ended_by_its_exit(case, MAIN),
                        ],
                    },
                ],
            },
            outage.clone(),
        ),
        Check::never(
            "the gateway's outage never makes the sandbox terminal for anything but the exit",
            &["R9"],
            terminal_not_by_its_exit(case, MAIN),
            outage.clone(),
        ),
        // Too few starts are the restart policy's (each end's own check above); one more
        // than the ends asked for is a start nobody asked for, where the fault is the gateway's.
        starts_at_most_with(
            "the main process is started no more than once per end, through the gateway's outage too",
            &["R9"],
            case,
            MAIN,
            "starts",
            ENDS + 1,
        ),
        Check::count(
            "the main process restarts in place before the outage: the sandbox pod is not replaced",
            &["R10"],
            pod(),
            Some(Window::new(
                Anchor::RunStart,
                Anchor::fault_start(&GATEWAY_OUTAGE),
            )),
            Cmp::AtMost,
            1,
        ),
        Check::count(
            "the gateway's outage does not replace the sandbox pod",
            &["R9"],
            pod(),
            Some(outage),
            Cmp::AtMost,
            1,
        ),
    ]
}
