//! The gateway is stopped, the sandbox pod is replaced so that bootstrap runs while the gateway
//! is away, and the gateway returns after the outage (bug 1; docs/upstream-facts.md F9.5, F9.6).
//! Where the supervisor lives apart from the sandbox pod, what runs while the gateway is away is
//! the boundary's attach of the replacement, which waits behind its scheduling gate.

use std::time::Duration;

use conformance_core::checks::{Anchor, Check, Predicate, Selector, Window};
use conformance_core::keys::Marker;
use conformance_core::phase::Phase;
use conformance_core::retries::RetryOp;
use conformance_core::scenario::{CaseInfo, Ctx, Scenario, Stage, Step, StepResult};
use conformance_core::target::{Capability, Fault};
use futures::future::BoxFuture;

use super::common::*;

/// The catalog's entry: this scenario and the parameter sets it runs with.
pub(crate) fn entry() -> Entry {
    // Longer than the policy-fetch retry window (11 s), than the sidecar wait (120 s), and than
    // 15 minutes (a retry loop with a time limit, which R1 and R5 rule out).
    Entry::new(bootstrap_outage(), outages_of(&[30, 150, 960]))
}

pub(crate) fn bootstrap_outage() -> Scenario {
    Scenario {
        id: "bootstrap-outage".into(),
        title: "Sandbox bootstrap through a gateway outage longer than the retry windows".into(),
        requirements: ["R1", "R2", "R3", "R5", "R6", "R13"]
            .map(String::from)
            .to_vec(),
        requires: vec![
            Capability::MainCommand,
            Capability::GatewayStop,
            Capability::SandboxPodReplace,
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
                "replace the sandbox pod while the gateway is down",
                bootstrap_outage_fault,
            )
            .waiting_for(&["R1"]),
            Step::new(
                Stage::Verify,
                "wait for recovery and read back",
                verify_main,
            )
            .waiting_for(&["R1"]),
            Step::new(Stage::Verify, "delete the sandbox", delete_main).waiting_for(&["R13"]),
        ],
        checks: bootstrap_outage_checks,
    }
}

fn bootstrap_outage_fault(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        let outage = ctx.params().outage.unwrap_or(Duration::from_secs(150));
        ctx.inject_for(&GATEWAY_OUTAGE, Fault::GatewayStop, Some(outage))
            .await?;
        // The sandbox pod on every topology, not the supervisor (`rebootstrap`): the Agent
        // Sandbox controller brings it back without the gateway (F4.12), so a supervisor works
        // through the rest of the outage everywhere, bootstrapping again where it lives in the
        // pod and attaching the gated replacement where it lives apart. A replaced dedicated
        // supervisor pod (the gateway creates it) or shared one (the gateway assigns its
        // sandboxes) would idle until the gateway returned, hiding a give-up after 15 minutes.
        let replace = Fault::SandboxPodReplace {
            sandbox: name.clone(),
        };
        ctx.inject(&POD_REPLACE, replace).await?;
        ctx.restore(&POD_REPLACE).await?;
        // Marked once R2's windows are past, so that a sandbox that turns terminal later (a
        // give-up after 15 minutes) breaks R1 alone, not R2 as well.
        let windows = R2_WINDOWS.min(outage);
        ctx.sleep(windows).await;
        ctx.mark(&R2_WINDOWS_PASSED);
        ctx.sleep(outage - windows).await;
        // Before the gateway returns: has the workload started again without bootstrap (R3)?
        observe_starts(
            ctx,
            &name,
            &starts_key(&name, "starts-before-gateway-returned"),
        )
        .await;
        ctx.restore(&GATEWAY_OUTAGE).await?;
        Ok(())
    })
}

/// How long after the replacement R2's windows last: the 120 s sidecar wait (F2.5), the
/// longer of the two (the policy-fetch retries give up within about 11 s, F2.1), plus 30 s for
/// the replacement pod to start and its give-up to reach the gateway.
const R2_WINDOWS: Duration = Duration::from_secs(150);

/// Set once [`R2_WINDOWS`] have passed since the replacement (or the gateway returned first).
const R2_WINDOWS_PASSED: Marker = Marker::new("r2-windows-passed");

fn verify_main(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        let ready = ctx
            .settle_phase("R1", &name, &[Phase::Ready], BOOTSTRAP_RECOVERY)
            .await
            .is_some();
        wait_usable_again(ctx, &name, ready).await?;
        record_recovery(ctx, &Anchor::fault_end(&GATEWAY_OUTAGE), &name);
        ctx.record_attempts(&name).await;
        check_shell(ctx, &name, BEFORE_FAULT).await;
        observe_starts(ctx, &name, &starts_key(&name, "starts")).await;
        observe_start_marks(ctx, &name).await;
        ctx.mark(&VERIFIED);
        Ok(())
    })
}

fn bootstrap_outage_checks(case: &CaseInfo) -> Vec<Check> {
    let mut checks = provisioned_usable(case, MAIN).to_vec();
    checks.extend([
        // R1's: R5's bound on the back-off is judged by the back-off check, from the log.
        ready_within(
            "the sandbox is Ready again after the gateway returns, without manual deletion",
            &["R1"],
            case,
            MAIN,
            Anchor::fault_end(&GATEWAY_OUTAGE),
            BOOTSTRAP_RECOVERY,
        ),
        // A gateway that comes back may show its stored phase for a moment before it looks at
        // the cluster; what counts is the phase once recovery is verified.
        ready_within(
            "the sandbox is still Ready when recovery is verified",
            &["R1"],
            case,
            MAIN,
            Anchor::marker(&VERIFIED),
            Duration::ZERO,
        ),
        never(
            "the sandbox does not turn terminal within the retry and sidecar windows",
            &["R1", "R2"],
            case,
            MAIN,
            &[Phase::Error],
            fault_until(&GATEWAY_OUTAGE, &R2_WINDOWS_PASSED),
        ),
        never(
            "the sandbox never turns terminal while bootstrap waits for the gateway",
            &["R1"],
            case,
            MAIN,
            &[Phase::Error],
            Window::new(
                Anchor::marker(&R2_WINDOWS_PASSED),
                Anchor::marker(&VERIFIED),
            ),
        ),
        // From the replacement on: the replaced pod may end with exit code 1 as it is deleted
        // (real v0.0.111's sidecar process side does, once its network side is gone), which
        // says nothing about the replacement's bootstrap.
        Check::never(
            "the replacement pod's bootstrap does not give up while the gateway is away",
            &["R2"],
            Predicate::ContainerTerminated {
                object: Selector::named("Pod", &case.resource_name(&case.sandbox_name(MAIN))),
                container: None,
                exit_code: Some(1),
            },
            Window::new(Anchor::fault_end(&POD_REPLACE), Anchor::marker(&VERIFIED)),
        ),
        starts_eq(
            "the workload does not start before bootstrap succeeds",
            &["R3"],
            case,
            MAIN,
            "starts-before-gateway-returned",
            1,
        ),
        starts_eq(
            "the workload starts once in the replacement pod",
            &["R1"],
            case,
            MAIN,
            "starts",
            2,
        ),
        usable_again(
            case,
            MAIN,
            Anchor::fault_end(&GATEWAY_OUTAGE),
            "once bootstrap recovered",
        ),
        shell_usable(case, MAIN, &["R1"]),
        sentinels(),
        start_marks_kept(case, MAIN),
        // The scenario's own replacement is the only one: recovery happens without a new pod
        // (R1).
        pod_incarnations(
            "the sandbox pod is replaced only by the scenario's fault",
            &["R1"],
            case,
            MAIN,
            2,
        ),
    ]);
    checks.push(capped_backoff(case, MAIN, RetryOp::Bootstrap));
    checks.extend(no_leaks(case, MAIN));
    checks
}
