//! The seeded sweep: gateway outages of lengths and at injection points drawn from `--seed`,
//! each on a fresh sandbox, all checked against the same invariants. The seed is in the case id,
//! the timeline and the JUnit properties; passing it back reproduces the schedule.

use std::time::Duration;

use conformance_core::checks::{Anchor, Check, Window};
use conformance_core::keys::{FaultKey, Marker};
use conformance_core::phase::Phase;
use conformance_core::scenario::{CaseInfo, Ctx, Scenario, Stage, Step, StepError, StepResult};
use conformance_core::schedule::{FaultSchedule, InjectionPoint, PlannedFault, ScheduleSpec};
use conformance_core::target::{Capability, Fault, TargetError};
use futures::future::BoxFuture;

use super::common::*;

/// The default schedule when no seed is given.
pub(crate) const DEFAULT_SEED: u64 = 1;

pub(crate) fn schedule_for(seed: u64) -> FaultSchedule {
    FaultSchedule::generate(seed, &ScheduleSpec::default())
}

pub(crate) fn seeded_sweep() -> Scenario {
    Scenario {
        id: "seeded-sweep".into(),
        title: "Gateway outages at seeded lengths and injection points".into(),
        requirements: ["R1", "R6", "R7", "R9", "R13"].map(String::from).to_vec(),
        requires: vec![Capability::MainCommand, Capability::GatewayStop],
        steps: vec![
            Step::new(Stage::Fault, "run the fault schedule", run_schedule)
                .with_deadline(Duration::from_secs(4 * 3600)),
        ],
        checks: sweep_checks,
    }
}

fn role(i: usize) -> String {
    format!("sweep-{}", i + 1)
}

/// The outage of the sandbox with `role`.
fn outage_key(role: &str) -> FaultKey {
    FaultKey::owned(format!("{role}-outage"))
}

/// Set once the sandbox `name` was verified after its outage.
fn verified_marker(name: &str) -> Marker {
    Marker::owned(format!("verified:{name}"))
}

fn run_schedule(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let schedule =
            ctx.params().schedule.clone().ok_or_else(|| {
                StepError::Infra("the sweep needs a fault schedule (a seed)".into())
            })?;
        for (i, planned) in schedule.faults.iter().enumerate() {
            run_one(ctx, &role(i), planned).await?;
        }
        Ok(())
    })
}

async fn run_one(ctx: &mut Ctx, role: &str, planned: &PlannedFault) -> StepResult {
    let name = ctx.sandbox_name(role);
    let spec = spec(ctx, role, workload_command(), None);
    let outage = planned.outage;
    match planned.point {
        InjectionPoint::BeforeCreate => {
            let f = ctx
                .inject_for(&outage_key(role), Fault::GatewayStop, Some(outage))
                .await?;
            let early = ctx.create_sandbox(&spec).await;
            ctx.sleep(outage).await;
            ctx.restore(&f).await?;
            match early {
                Ok(_) => {}
                // The gateway was away: the user retries once it is back.
                Err(TargetError::Refused { .. }) => {
                    ctx.create_sandbox(&spec).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        InjectionPoint::DuringBootstrap => {
            ctx.create_sandbox(&spec).await?;
            ctx.outage(&outage_key(role), outage).await?;
        }
        InjectionPoint::WhileReady => {
            ctx.create_sandbox(&spec).await?;
            ctx.wait_phase(&name, &[Phase::Ready], PROVISION_TIMEOUT)
                .await?;
            ctx.write_sentinel(&name, role).await?;
            ctx.outage(&outage_key(role), outage).await?;
        }
        InjectionPoint::WhileStopping => {
            ctx.create_sandbox(&spec).await?;
            ctx.wait_phase(&name, &[Phase::Ready], PROVISION_TIMEOUT)
                .await?;
            ctx.write_sentinel(&name, role).await?;
            ctx.stop_sandbox(&name).await?;
            ctx.outage(&outage_key(role), outage).await?;
            ctx.settle_phase(&name, &[Phase::Stopped], PROVISION_TIMEOUT)
                .await;
            ctx.start_sandbox(&name).await?;
        }
        InjectionPoint::WhileStarting => {
            ctx.create_sandbox(&spec).await?;
            ctx.wait_phase(&name, &[Phase::Ready], PROVISION_TIMEOUT)
                .await?;
            ctx.write_sentinel(&name, role).await?;
            ctx.stop_sandbox(&name).await?;
            ctx.wait_phase(&name, &[Phase::Stopped], PROVISION_TIMEOUT)
                .await?;
            ctx.start_sandbox(&name).await?;
            ctx.outage(&outage_key(role), outage).await?;
        }
    }
    ctx.settle_phase(&name, &[Phase::Ready], PROVISION_TIMEOUT)
        .await;
    if matches!(
        planned.point,
        InjectionPoint::BeforeCreate | InjectionPoint::DuringBootstrap
    ) {
        ctx.write_sentinel(&name, role).await.ok();
    }
    check_shell(ctx, &name).await;
    ctx.read_sentinel(&name, role).await;
    ctx.mark(&verified_marker(&name));
    delete(ctx, &name).await
}

fn sweep_checks(case: &CaseInfo) -> Vec<Check> {
    let Some(schedule) = &case.params.schedule else {
        return Vec::new();
    };
    let mut checks = Vec::new();
    for (i, planned) in schedule.faults.iter().enumerate() {
        let role = role(i);
        let fault = outage_key(&role);
        let name = case.sandbox_name(&role);
        let label = format!(
            "{} {}",
            planned.point,
            humantime::format_duration(planned.outage)
        );
        checks.push(ready_within(
            &format!("{role} ({label}) is Ready after the outage"),
            &["R1", "R9"],
            case,
            &role,
            Anchor::fault_end(&fault),
            PROVISION_TIMEOUT,
        ));
        checks.push(never(
            &format!("{role} ({label}) never turns terminal"),
            &["R1", "R9"],
            case,
            &role,
            &[Phase::Error],
            Window::new(
                Anchor::fault_start(&fault),
                Anchor::marker(&verified_marker(&name)),
            ),
        ));
        let mut usable = shell_usable(case, &role, &["R1", "R9"]);
        usable.name = format!("{role} ({label}): a command runs through the sandbox shell");
        checks.push(usable);
        for mut leak in no_leaks(case, &role) {
            leak.name = format!("{role}: {}", leak.name);
            checks.push(leak);
        }
    }
    checks.push(sentinels());
    checks
}
