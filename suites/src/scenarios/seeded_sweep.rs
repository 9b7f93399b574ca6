//! The seeded sweep: gateway outages of lengths and at injection points drawn from `--seed`,
//! each on a fresh sandbox, all checked against the same invariants. The seed is in the case id,
//! the timeline and the JUnit properties; passing it back reproduces the schedule.

use std::time::Duration;

use conformance_core::checks::{Anchor, Check, Window};
use conformance_core::keys::{FaultKey, Marker};
use conformance_core::phase::Phase;
use conformance_core::retries::RetryOp;
use conformance_core::scenario::{CaseInfo, Ctx, Scenario, Stage, Step, StepError, StepResult};
use conformance_core::schedule::{FaultSchedule, InjectionPoint, PlannedFault, ScheduleSpec};
use conformance_core::target::{Capability, Fault, SandboxSpec};
use futures::future::BoxFuture;

use super::common::*;

/// The default schedule when no seed is given.
pub(crate) const DEFAULT_SEED: u64 = 1;

pub(crate) fn schedule_for(seed: u64) -> FaultSchedule {
    FaultSchedule::generate(seed, &ScheduleSpec::default())
}

/// The catalog's entry: this scenario, its variants drawing their schedule from the run's seed.
pub(crate) fn entry() -> Entry {
    Entry {
        seeded: true,
        ..Entry::new(seeded_sweep(), one())
    }
}

pub(crate) fn seeded_sweep() -> Scenario {
    Scenario {
        id: "seeded-sweep".into(),
        title: "Gateway outages at seeded lengths and injection points".into(),
        requirements: ["R1", "R5", "R6", "R7", "R9", "R13", "R14"]
            .map(String::from)
            .to_vec(),
        requires: vec![Capability::MainCommand, Capability::GatewayStop],
        steps: vec![
            Step::new(Stage::Fault, "run the fault schedule", run_schedule)
                .waiting_for(&["R1", "R7", "R9", "R11", "R14"])
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

/// Set when the sandbox `name`, stopped through its outage, was asked to start again.
fn restarted_marker(name: &str) -> Marker {
    Marker::owned(format!("start-asked:{name}"))
}

/// Whether the schedule stops and starts the sandbox at this injection point: then its
/// workload starts twice and its pod is replaced once, by the scenario's own hand.
fn stops(point: InjectionPoint) -> bool {
    matches!(
        point,
        InjectionPoint::WhileStopping | InjectionPoint::WhileStarting
    )
}

/// Where the recovery bound of a sandbox counts from, and the bound: once the gateway is back,
/// a sandbox that was Ready (or starting) is Ready again within [`RECOVERY`], one that was still
/// bootstrapping within [`BOOTSTRAP_RECOVERY`]; a sandbox stopped through the outage is started
/// by the user afterwards, and the bound counts from the end of that start ([`settle_start`]).
fn recovery_bound(point: InjectionPoint, role: &str, name: &str) -> (Anchor, Duration) {
    match point {
        InjectionPoint::BeforeCreate | InjectionPoint::DuringBootstrap => {
            (Anchor::fault_end(&outage_key(role)), BOOTSTRAP_RECOVERY)
        }
        InjectionPoint::WhileReady | InjectionPoint::WhileStarting => {
            (Anchor::fault_end(&outage_key(role)), RECOVERY)
        }
        // How long the start may take is R14's (`settle_start`); that it ends Ready, this one's.
        InjectionPoint::WhileStopping => (Anchor::marker(&start_ended_marker(name)), RECOVERY),
    }
}

fn run_schedule(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let schedule = ctx
            .params()
            .schedule
            .clone()
            .ok_or_else(|| StepError::infra("the sweep needs a fault schedule (a seed)"))?;
        for (i, planned) in schedule.faults.iter().enumerate() {
            run_one(ctx, &role(i), planned).await?;
        }
        Ok(())
    })
}

/// Set once a sandbox the sweep provisions before its fault was created.
fn created_marker(sandbox: &str) -> Marker {
    Marker::owned(format!("created:{sandbox}"))
}

/// Whether the sandbox must provision before its fault: then it is checked as every
/// scenario's first sandbox is (Ready within the provisioning timeout, and usable once Ready).
fn provisions_first(point: InjectionPoint) -> bool {
    !matches!(
        point,
        InjectionPoint::BeforeCreate | InjectionPoint::DuringBootstrap
    )
}

/// Creates the sandbox and waits until it is Ready and its shell runs a command.
async fn create_usable(ctx: &Ctx, spec: &SandboxSpec) -> StepResult {
    ctx.create_sandbox(spec).await?;
    ctx.mark(&created_marker(&spec.name));
    ctx.wait_phase("R11", &spec.name, &[Phase::Ready], PROVISION_TIMEOUT)
        .await?;
    wait_usable(ctx, &spec.name).await
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
                Err(e) if e.is_refused() => {
                    ctx.create_sandbox(&spec).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        InjectionPoint::DuringBootstrap => {
            // During bootstrap is what the gateway reports, not when create returns: a CLI's
            // create may wait for Ready (v0.0.111's does, docs/upstream-facts.md F6.3), so the
            // outage starts while it runs, once the sandbox is seen Provisioning.
            let create = ctx.begin_create(&spec);
            let key = outage_key(role);
            let (created, during) = tokio::join!(
                create,
                ctx.outage_while("R11", &name, Phase::Provisioning, &key, outage)
            );
            during?;
            // A create that was waiting for Ready when the gateway went away may fail; the
            // sandbox it asked for exists (it was seen Provisioning), as for a user.
            if let Err(e) = created {
                ctx.rec.note(format!(
                    "create of {name} ended with the outage it was waiting through: {e}"
                ));
            }
        }
        InjectionPoint::WhileReady => {
            create_usable(ctx, &spec).await?;
            ctx.write_sentinel(&name, role).await?;
            ctx.outage(&outage_key(role), outage).await?;
        }
        InjectionPoint::WhileStopping => {
            create_usable(ctx, &spec).await?;
            ctx.write_sentinel(&name, role).await?;
            ctx.stop_sandbox(&name).await?;
            ctx.outage(&outage_key(role), outage).await?;
            ctx.settle_phase(STOP_CONTRACT, &name, &[Phase::Stopped], PROVISION_TIMEOUT)
                .await;
            ctx.mark(&restarted_marker(&name));
            ctx.start_sandbox(&name).await?;
            settle_start(ctx, &name).await?;
        }
        InjectionPoint::WhileStarting => {
            create_usable(ctx, &spec).await?;
            ctx.write_sentinel(&name, role).await?;
            ctx.stop_sandbox(&name).await?;
            ctx.wait_phase(STOP_CONTRACT, &name, &[Phase::Stopped], PROVISION_TIMEOUT)
                .await?;
            ctx.start_sandbox(&name).await?;
            ctx.outage(&outage_key(role), outage).await?;
        }
    }
    // Ready, or terminal for a reported cause, once the gateway is back (R14); one that ends
    // elsewhere than Ready is the recovery checks' to judge (R1, R9).
    let ended = settle_ended(
        ctx,
        &name,
        &format!("sandbox {name}, once its outage ended,"),
    )
    .await?;
    let ready = ended.phase == Phase::Ready;
    // A sandbox first Ready only now provisioned through the outage: usable once Ready too;
    // one Ready again after its outage (or the user's start), usable once Ready again.
    if ready && !provisions_first(planned.point) {
        wait_usable(ctx, &name).await?;
    }
    if provisions_first(planned.point) {
        wait_usable_again(ctx, &name, ready).await?;
    }
    record_recovery(ctx, &recovery_bound(planned.point, role, &name).0, &name);
    if matches!(
        planned.point,
        InjectionPoint::BeforeCreate | InjectionPoint::DuringBootstrap
    ) {
        ctx.write_sentinel(&name, role).await.ok();
    }
    check_shell(ctx, &name, role).await;
    observe_starts(ctx, &name, &starts_key(&name, "starts")).await;
    observe_start_marks(ctx, &name).await;
    ctx.record_attempts(&name).await;
    ctx.mark(&verified_marker(&name));
    delete(ctx, &name).await
}

fn sweep_checks(case: &CaseInfo) -> Vec<Check> {
    let Some(schedule) = &case.params.schedule else {
        return Vec::new();
    };
    let mut checks = Vec::new();
    // Stops and starts are numbered over the whole case, in schedule order.
    let mut stop_nth = 0;
    for (i, planned) in schedule.faults.iter().enumerate() {
        let role = role(i);
        let fault = outage_key(&role);
        let name = case.sandbox_name(&role);
        let label = format!(
            "{} {}",
            planned.point,
            humantime::format_duration(planned.outage)
        );
        // Its first Ready: after its creation, or after the outage it was created in.
        let first_ready = if provisions_first(planned.point) {
            let created = Anchor::marker(&created_marker(&name));
            checks.push(ready_within(
                &format!("{role} ({label}) is Ready within the provisioning timeout"),
                &["R11"],
                case,
                &role,
                created.clone(),
                PROVISION_TIMEOUT,
            ));
            created
        } else {
            Anchor::fault_end(&fault)
        };
        let mut usable = usable_once_ready(case, &role, first_ready);
        usable.name = format!("{role} ({label}): {}", usable.name);
        checks.push(usable);
        // The outage met a sandbox running or stopping (R9's: a gateway fault harms no
        // sandbox), or one bootstrapping, at creation or at the user's start (R1's: bootstrap
        // tolerates the gateway's absence, "started while the gateway is away" in 0.0.111's
        // known failure).
        let fault_req: &[&str] = match planned.point {
            InjectionPoint::WhileReady | InjectionPoint::WhileStopping => &["R9"],
            InjectionPoint::BeforeCreate
            | InjectionPoint::DuringBootstrap
            | InjectionPoint::WhileStarting => &["R1"],
        };
        let (from, within) = recovery_bound(planned.point, &role, &name);
        if provisions_first(planned.point) {
            let mut again = usable_again(case, &role, from.clone(), "after its outage");
            again.name = format!("{role} ({label}): {}", again.name);
            checks.push(again);
        }
        checks.push(ready_within(
            &format!("{role} ({label}) is Ready again within its recovery bound"),
            fault_req,
            case,
            &role,
            from,
            within,
        ));
        // A sandbox the schedule stops rests Stopped by the user's hand; one Ready through the
        // outage never rests in any terminal phase.
        let terminal: &[Phase] = if planned.point == InjectionPoint::WhileReady {
            &[Phase::Error, Phase::Stopped, Phase::Completed]
        } else {
            &[Phase::Error]
        };
        checks.push(never(
            &format!("{role} ({label}) never turns terminal"),
            fault_req,
            case,
            &role,
            terminal,
            Window::new(
                Anchor::fault_start(&fault),
                Anchor::marker(&verified_marker(&name)),
            ),
        ));
        let mut usable = shell_usable(case, &role, fault_req);
        usable.name = format!("{role} ({label}): a command runs through the sandbox shell");
        checks.push(usable);
        // The invariants of every case: the workload starts only when the scenario starts it,
        // its pod is replaced only when the scenario stops and starts it, and nothing runs
        // while the sandbox is Stopped.
        let (asked, times) = if stops(planned.point) {
            (2, "twice")
        } else {
            (1, "once")
        };
        checks.push(starts_at_most(
            &format!("{role} ({label}): the workload started at most {times}, as asked"),
            case,
            &role,
            "starts",
            asked,
        ));
        let mut marks = start_marks_kept(case, &role);
        marks.name = format!("{role} ({label}): {}", marks.name);
        checks.push(marks);
        checks.push(pod_incarnations(
            &format!("{role} ({label}): its pod is replaced only by the scenario's stop"),
            &["R9"],
            case,
            &role,
            asked,
        ));
        if stops(planned.point) {
            stop_nth += 1;
            checks.push(nothing_runs_while_stopped(
                &format!("{role} ({label}): nothing runs while it is Stopped"),
                case,
                &role,
                Window::new(
                    Anchor::ActionEnd {
                        name: "stop".into(),
                        nth: stop_nth,
                    },
                    Anchor::ActionStart {
                        name: "start".into(),
                        nth: stop_nth,
                    },
                ),
            ));
        }
        // R5 wherever the supervisor retried: the session through every outage, bootstrap where
        // the sandbox bootstrapped in one.
        let mut ops = vec![RetryOp::Session];
        if !provisions_first(planned.point) {
            ops.insert(0, RetryOp::Bootstrap);
        }
        for op in ops {
            let mut backoff = capped_backoff(case, &role, op);
            backoff.name = format!("{role} ({label}): {}", backoff.name);
            checks.push(backoff);
        }
        for mut leak in no_leaks(case, &role) {
            leak.name = format!("{role}: {}", leak.name);
            checks.push(leak);
        }
    }
    checks.push(sentinels());
    checks
}
