//! The gateway pod is deleted while sandboxes are Ready (bug 3; docs/upstream-facts.md F1.15,
//! F9.6).

use conformance_core::checks::Check;
use conformance_core::scenario::{CaseInfo, Ctx, Scenario, Stage, Step, StepResult};
use conformance_core::target::{Capability, Fault};
use futures::future::BoxFuture;

use super::common::*;

/// The catalog's entry: this scenario and the parameter sets it runs with.
pub(crate) fn entry() -> Entry {
    Entry::new(gateway_restart(), one())
}

pub(crate) fn gateway_restart() -> Scenario {
    Scenario {
        id: "gateway-restart".into(),
        title: "Ready sandbox through a gateway restart".into(),
        requirements: ["R6", "R7", "R9", "R13"].map(String::from).to_vec(),
        requires: vec![Capability::MainCommand, Capability::GatewayRestart],
        steps: vec![
            Step::new(
                Stage::Seed,
                "create a Ready sandbox and write a sentinel",
                seed_main,
            )
            .waiting_for(&["R11"]),
            Step::new(Stage::Fault, "restart the gateway", restart_fault).waiting_for(&["R9"]),
            Step::new(Stage::Verify, "wait for Ready and read back", verify_ready)
                .waiting_for(&["R9"]),
            Step::new(Stage::Verify, "delete the sandbox", delete_main).waiting_for(&["R13"]),
        ],
        checks: gateway_restart_checks,
    }
}

fn restart_fault(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        ctx.inject(&GATEWAY_RESTART, Fault::GatewayRestart).await?;
        ctx.restore(&GATEWAY_RESTART).await
    })
}

fn gateway_restart_checks(case: &CaseInfo) -> Vec<Check> {
    ready_sandbox_checks(case, &GATEWAY_RESTART)
}
