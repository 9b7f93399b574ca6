//! A sandbox provisions on the topology within the provisioning timeout (bug 2; #3144).

use conformance_core::checks::{Anchor, Check};
use conformance_core::phase::Phase;
use conformance_core::scenario::{CaseInfo, Ctx, Scenario, Stage, Step, StepResult};
use conformance_core::target::Capability;
use futures::future::BoxFuture;

use super::common::*;

/// The catalog's entry: this scenario and the parameter sets it runs with.
pub(crate) fn entry() -> Entry {
    Entry::new(provisioning(), one())
}

pub(crate) fn provisioning() -> Scenario {
    Scenario {
        id: "provisioning".into(),
        title: "Provisioning on the topology within the provisioning timeout".into(),
        requirements: ["R6", "R11", "R13"].map(String::from).to_vec(),
        requires: vec![Capability::MainCommand],
        steps: vec![
            Step::new(Stage::Seed, "create a sandbox", create_and_wait).waiting_for(&["R11"]),
            Step::new(Stage::Verify, "use the sandbox", use_sandbox).waiting_for(&["R11"]),
            Step::new(Stage::Verify, "delete the sandbox", delete_main).waiting_for(&["R13"]),
        ],
        checks: provisioning_checks,
    }
}

fn create_and_wait(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let spec = spec(ctx, MAIN, workload_command(), None);
        ctx.create_sandbox(&spec).await?;
        if ctx
            .settle_phase("R11", &spec.name, &[Phase::Ready], PROVISION_TIMEOUT)
            .await
            .is_some()
        {
            wait_usable(ctx, &spec.name).await?;
        }
        Ok(())
    })
}

fn use_sandbox(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        wait_starts(ctx, "R11", &name, 1, RECOVERY).await;
        // A workspace write, and the shell reads it back, on a fresh sandbox. A write that
        // fails leaves the sentinels check without a sentinel (R6); the shell is still judged.
        ctx.write_sentinel(&name, "fresh").await.ok();
        check_shell(ctx, &name, "fresh").await;
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
            usable_once_ready(case, MAIN, Anchor::action_end("create")),
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
