//! Bad credentials, or a gateway certificate the sandbox must reject: the sandbox fails fast and
//! says why, never becomes Ready, and leaves nothing behind (bug 1 acceptance; bug 2 leaks).

use conformance_core::checks::{Anchor, Check, Predicate, Window};
use conformance_core::phase::Phase;
use conformance_core::scenario::{CaseInfo, Ctx, Params, Scenario, Stage, Step, StepResult};
use conformance_core::target::{BootstrapMaterial, Capability, Fault};
use conformance_core::timeline::READY_CONDITION;
use futures::future::BoxFuture;

use super::common::*;

/// The catalog's entry: this scenario and the parameter sets it runs with.
pub(crate) fn entry() -> Entry {
    Entry::new(
        permanent_bootstrap_error(),
        BootstrapMaterial::ALL
            .map(|w| Params::default().with_variant(w))
            .to_vec(),
    )
}

pub(crate) fn permanent_bootstrap_error() -> Scenario {
    Scenario {
        id: "permanent-bootstrap-error".into(),
        title: "Permanent bootstrap error: explicit, bounded, diagnosable, no leaks".into(),
        requirements: ["R4", "R13", "R14"].map(String::from).to_vec(),
        requires: vec![
            Capability::MainCommand,
            Capability::BootstrapCredentialFault,
        ],
        steps: vec![
            Step::new(
                Stage::Seed,
                "create a sandbox with broken bootstrap",
                create_broken,
            )
            .waiting_for(&["R4"]),
            Step::new(Stage::Fault, "wait for the failure", wait_failure).waiting_for(&["R4"]),
            Step::new(Stage::Verify, "delete the sandbox", delete_broken).waiting_for(&["R13"]),
        ],
        checks: permanent_checks,
    }
}

fn create_broken(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let what = *ctx.variant::<BootstrapMaterial>()?;
        let spec = spec(ctx, MAIN, workload_command(), None);
        ctx.inject(
            &BAD_CREDENTIALS,
            Fault::BootstrapCredentials {
                sandbox: spec.name.clone(),
                what,
            },
        )
        .await?;
        ctx.create_sandbox(&spec).await?;
        Ok(())
    })
}

fn wait_failure(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        ctx.settle_phase("R4", &name, &[Phase::Error], PROVISION_TIMEOUT)
            .await;
        observe_starts(ctx, &name, &starts_key(&name, "starts")).await;
        Ok(())
    })
}

fn delete_broken(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name(MAIN);
        delete(ctx, &name).await?;
        // Put the credentials back only after the checks' window: the engine restores them.
        Ok(())
    })
}

fn permanent_checks(case: &CaseInfo) -> Vec<Check> {
    let words: Vec<String> = match case.params.variant() {
        Some(BootstrapMaterial::Certificate) => ["certificate", "tls", "x509"],
        Some(BootstrapMaterial::Credentials) | None => ["unauthenticated", "credential", "token"],
    }
    .map(String::from)
    .to_vec();
    with_leaks(
        vec![
            Check::eventually(
                "the sandbox fails explicitly within a bounded time",
                &["R4"],
                phase_is(case, MAIN, &[Phase::Error]),
                Anchor::action_end("create"),
                PERMANENT_ERROR_BOUND,
            ),
            Check::never(
                "the sandbox never becomes Ready with bootstrap that must fail (TLS validation kept)",
                &["R4"],
                phase_is(case, MAIN, &[Phase::Ready]),
                Window::whole_run(),
            ),
            starts_eq(
                "the workload never starts without bootstrap",
                &["R3", "R4"],
                case,
                MAIN,
                "starts",
                0,
            ),
            Check::eventually(
                "the reported status names the cause",
                &["R14"],
                Predicate::ConditionMentions {
                    object: gateway_view(case, MAIN),
                    type_: READY_CONDITION.into(),
                    any_of: words,
                },
                Anchor::action_end("create"),
                PERMANENT_ERROR_BOUND,
            ),
            // Failing fast means one pod that fails, not a loop of replacements retrying it.
            pod_incarnations(
                "the failing sandbox's pod is not replaced",
                &["R4"],
                case,
                MAIN,
                1,
            ),
        ],
        case,
    )
}
