//! The gateway is scaled to zero for the outage, then back (bug 3).

use std::time::Duration;

use conformance_core::checks::Check;
use conformance_core::scenario::{CaseInfo, Ctx, Scenario, Stage, Step, StepResult};
use conformance_core::target::Capability;
use futures::future::BoxFuture;

use super::common::*;

/// The catalog's entry: this scenario and the parameter sets it runs with.
pub(crate) fn entry() -> Entry {
    // 330 s is longer than a watch's 290 s idle timeout; 960 s outlasts any retry loop that
    // gives up after 15 minutes, which R1 and R5's "as long as it takes" rule out.
    Entry::new(gateway_outage(), outages_of(&[30, 150, 330, 960]))
}

pub(crate) fn gateway_outage() -> Scenario {
    Scenario {
        id: "gateway-outage".into(),
        title: "Ready sandbox through a gateway outage".into(),
        requirements: ["R6", "R7", "R9", "R13"].map(String::from).to_vec(),
        requires: vec![Capability::MainCommand, Capability::GatewayStop],
        steps: vec![
            Step::new(
                Stage::Seed,
                "create a Ready sandbox and write a sentinel",
                seed_main,
            )
            .waiting_for(&["R11"]),
            Step::new(
                Stage::Fault,
                "stop the gateway for the outage",
                outage_fault,
            )
            .waiting_for(&["R9"]),
            Step::new(Stage::Verify, "wait for Ready and read back", verify_ready)
                .waiting_for(&["R9"]),
            Step::new(Stage::Verify, "delete the sandbox", delete_main).waiting_for(&["R13"]),
        ],
        checks: gateway_outage_checks,
    }
}

fn outage_fault(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let outage = ctx.params().outage.unwrap_or(Duration::from_secs(30));
        ctx.outage(&GATEWAY_OUTAGE, outage).await?;
        Ok(())
    })
}

fn gateway_outage_checks(case: &CaseInfo) -> Vec<Check> {
    ready_sandbox_checks(case, &GATEWAY_OUTAGE)
}
