//! Proves the engine with a small in-test target: outcomes, deadlines, restores on every exit
//! path, and timelines re-checked after a round trip through JSON lines.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use conformance_core::case_verdict::CaseVerdict;
use conformance_core::engine::{Engine, EngineOptions, Outcome, recheck};
use conformance_core::phase::Phase;
use conformance_core::scenario::{ActionError, Case, Ctx, Params, Stage, Step, StepResult};
use conformance_core::target::{
    Capability, Fault, SandboxSpec, Target, TargetError, TargetFactory, TargetInfo, TargetResult,
};
use conformance_core::testkit::*;
use conformance_core::timeline::{
    Event, FaultPhase, Recorder, SentinelOp, SentinelPath, SentinelResult, StageStatus, Timeline,
};
use conformance_core::topology::{Topologies, Topology};
use futures::future::BoxFuture;

// ---- tests ------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_correct_target_passes_every_stage_and_check() {
    let r = engine(Factory::new(Quirk::None))
        .run_case(&case(standard_steps()))
        .await;
    assert_eq!(r.outcome, Outcome::Passed, "{:#?}", r.checks);
    assert_eq!(r.case_id, "outage-demo[combined,outage=30s]");
    let stages: Vec<&str> = r.stages.iter().map(|s| s.stage.name()).collect();
    assert_eq!(
        stages,
        [
            "provision",
            "install",
            "seed",
            "fault",
            "verify",
            "teardown"
        ]
    );
    assert!(r.checks.iter().all(|c| c.passed));
    // The outage window is exact in virtual time: requested at 22.001 s (20 s install, 2 s to
    // Ready: the wait for Ready ends 1 ms after the observer records it, not at its next 1 s
    // poll),
    // in effect 5 s later, held 30 s, ready again 3 s after restore.
    assert_eq!(
        fault_phases(&r.timeline),
        vec![
            (22_001, FaultPhase::Requested),
            (27_001, FaultPhase::Started),
            (60_001, FaultPhase::Ended)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_left_in_error_fails_the_requirement_its_wait_served_with_the_deadline_and_last_state()
 {
    let r = engine(Factory::new(Quirk::ErrorOnOutage))
        .run_case(&case(standard_steps()))
        .await;
    let Outcome::Failed(reason) = &r.outcome else {
        panic!("expected a product failure, got {:?}", r.outcome)
    };
    let name = r.timeline.run_info().map(|_| "main-outag-").unwrap();
    assert!(
        reason.starts_with(&format!("[R9] verify: gave up waiting for sandbox {name}")),
        "{reason}"
    );
    // The wait for Ready after the outage serves R9: the case breaks it by name, and its
    // verdict counts it as a check's would.
    assert_eq!(r.step_broke(), ["R9"]);
    let failed_stage = r.stages.iter().find(|s| s.stage == Stage::Verify).unwrap();
    assert_eq!(failed_stage.requirements, ["R9"]);
    assert!(reason.contains("to be Ready after 2m"), "{reason}");
    assert!(reason.contains("phase=Error"), "{reason}");
    let failed: Vec<&str> = r.failed_checks().map(|c| c.name.as_str()).collect();
    assert_eq!(
        failed,
        [
            "sandbox returns to Ready after the outage",
            "sandbox never Error during the outage",
        ]
    );
    // The sentinel was written but the failed step never read it back: that says nothing
    // about the workspace, so the check is not evaluated and names the step, not R6 broken.
    let sentinels = r
        .checks
        .iter()
        .find(|c| c.name == "workspace sentinels retained")
        .unwrap();
    let why = sentinels.not_evaluated.as_deref().unwrap_or_default();
    assert!(
        why.starts_with("step ")
            && why.contains("(stage verify) failed: [R9] verify: gave up waiting"),
        "{}",
        sentinels.diagnosis()
    );
    assert!(!r.verdict().explanation().unwrap().contains("R6"));
    let never = r.checks.iter().find(|c| c.name.contains("never")).unwrap();
    assert_eq!(never.message, "it held at 27.001s");
    assert!(
        never
            .diagnosis()
            .contains("[R9] FAILED in window 27.001s .. 60.001s"),
        "{}",
        never.diagnosis()
    );
}

/// The standard case on a fake with `quirk`, which must fail it as a product failure: the
/// report and the failure's reason.
async fn product_failure(quirk: Quirk) -> (conformance_core::engine::CaseReport, String) {
    let r = engine(Factory::new(quirk))
        .run_case(&case(standard_steps()))
        .await;
    let Outcome::Failed(reason) = &r.outcome else {
        panic!("expected a product failure, got {:?}", r.outcome)
    };
    let reason = reason.clone();
    (r, reason)
}

#[tokio::test(start_paused = true)]
async fn lost_workspace_files_fail_the_sentinel_check_only() {
    let (r, reason) = product_failure(Quirk::LosesFiles).await;
    assert!(
        reason.starts_with("[R6] workspace sentinels retained: 1 of 1 sentinels not intact"),
        "{reason}"
    );
    assert!(reason.contains("LOST"), "{reason}");
    assert_eq!(r.failed_checks().count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_record_the_gateway_stored_before_an_outage_is_not_taken_for_ready_again() {
    // Without the stored-record rule the wait for Ready takes the answer the gateway gives at
    // once from its database, the read-back runs on a sandbox with no session yet, and R6 fails.
    let r = engine(Factory::new(Quirk::AnswersStoredRecord))
        .run_case(&case(standard_steps()))
        .await;
    assert_eq!(r.outcome, Outcome::Passed, "{:#?}", r.checks);
    let stored: Vec<&conformance_core::timeline::ObjectState> = r
        .timeline
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Object(o) => Some(o),
            _ => None,
        })
        .filter(|o| {
            o.condition(conformance_core::timeline::READY_CONDITION)
                .and_then(|c| c.reason.as_deref())
                == Some(conformance_core::timeline::STORED_BEFORE_FAULT_REASON)
        })
        .collect();
    assert_eq!(stored.len(), 1, "the stale answer is on the timeline once");
    assert_eq!(stored[0].phase.as_deref(), Some("Unknown"));
    let message = stored[0].conditions[0].message.as_deref().unwrap_or("");
    assert!(
        message.contains("answered Ready") && message.contains("gateway-stop"),
        "{message}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_install_failure_is_an_error_and_later_stages_are_skipped_with_a_reason() {
    let r = engine(Factory::new(Quirk::InstallFails))
        .run_case(&case(standard_steps()))
        .await;
    assert_eq!(
        r.outcome,
        Outcome::Error("helm not found on PATH; install helm 3".into())
    );
    let statuses: Vec<(String, String)> = r
        .stages
        .iter()
        .map(|s| (s.stage.name().to_string(), format!("{:?}", s.status)))
        .collect();
    assert_eq!(
        statuses,
        [
            ("provision", "Passed"),
            ("install", "Error"),
            ("seed", "Skipped"),
            ("fault", "Skipped"),
            ("verify", "Skipped"),
            ("teardown", "Skipped")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    assert_eq!(
        r.stages[2].message.as_deref(),
        Some("not reached: installation did not complete")
    );
}

#[tokio::test(start_paused = true)]
async fn a_target_without_a_required_capability_skips_the_case_with_the_reason() {
    let c = Case::new(
        scenario(standard_steps(), vec![Capability::RestartPolicy]),
        topology(),
        Params::default(),
    );
    let r = engine(Factory::new(Quirk::None)).run_case(&c).await;
    assert_eq!(
        r.outcome,
        Outcome::Skipped("target fake (model in-test) lacks restart-policy".into())
    );
    assert!(
        r.stages
            .iter()
            .all(|s| s.message.as_deref() == r.outcome.reason())
    );
}

#[tokio::test(start_paused = true)]
async fn a_topology_newer_than_the_target_is_skipped_not_passed() {
    let factory = Factory::new(Quirk::None);
    struct Old(Arc<Factory>);
    #[async_trait]
    impl TargetFactory for Old {
        fn info(&self) -> TargetInfo {
            TargetInfo {
                openshell: Some("0.0.111".parse().unwrap()),
                ..info()
            }
        }
        async fn provision(&self, t: &Topology, r: &Recorder) -> TargetResult<Arc<dyn Target>> {
            self.0.provision(t, r).await
        }
    }
    let c = Case::new(
        scenario(standard_steps(), vec![]),
        Topologies::builtin().get("gateway").unwrap().clone(),
        Params::default(),
    );
    let r = Engine::new(Arc::new(Old(factory)), EngineOptions::default())
        .run_case(&c)
        .await;
    assert_eq!(
        r.outcome,
        Outcome::Skipped(
            "topology gateway needs OpenShell 0.1.5 or newer; the target runs 0.0.111".into()
        )
    );
}

fn panics_mid_outage(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        ctx.inject(&OUTAGE, Fault::GatewayStop).await?;
        panic!("scenario bug while the gateway is down");
    })
}

fn hangs_mid_outage(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        ctx.inject(&OUTAGE, Fault::GatewayStop).await?;
        futures::future::pending::<()>().await;
        Ok(())
    })
}

#[tokio::test(start_paused = true)]
async fn a_step_that_panics_during_a_fault_still_gets_the_fault_restored() {
    let f = Factory::new(Quirk::None);
    let steps = vec![
        Step::new(Stage::Seed, "create and seed", seed),
        Step::new(Stage::Fault, "buggy step", panics_mid_outage),
    ];
    let r = engine(f.clone()).run_case(&case(steps)).await;
    assert_eq!(f.restores.load(Ordering::SeqCst), 1);
    assert_eq!(
        r.outcome,
        Outcome::Error("step 'buggy step' panicked: scenario bug while the gateway is down".into())
    );
    let phases: Vec<FaultPhase> = fault_phases(&r.timeline)
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    assert_eq!(
        phases,
        [
            FaultPhase::Requested,
            FaultPhase::Started,
            FaultPhase::Ended
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_step_that_hangs_during_a_fault_hits_its_deadline_as_a_harness_error_and_the_fault_is_restored()
 {
    let f = Factory::new(Quirk::None);
    let steps = vec![
        Step::new(Stage::Seed, "create and seed", seed),
        Step::new(Stage::Fault, "stuck step", hangs_mid_outage)
            .with_deadline(Duration::from_secs(90)),
    ];
    let r = engine(f.clone()).run_case(&case(steps)).await;
    assert_eq!(f.restores.load(Ordering::SeqCst), 1);
    // The step's own deadline is the harness's: running into it is an error, not a product
    // failure. It grew by the case's 30 s outage: 90 s + 30 s.
    let Outcome::Error(reason) = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert!(
        reason.starts_with(
            "fault: the harness gave up on step 'stuck step' after its own deadline of 2m; last seen:"
        ),
        "{reason}"
    );
    assert!(
        reason.contains("StatefulSet/openshell/openshell replicas=0/0"),
        "{reason}"
    );
    let fault = r.stages.iter().find(|s| s.stage == Stage::Fault).unwrap();
    assert_eq!(fault.status, conformance_core::timeline::StageStatus::Error);
    // The fault window closes after the deadline: requested at 22.001 s, deadline at 142.001 s, +3 s.
    assert_eq!(
        fault_phases(&r.timeline).last().unwrap(),
        &(145_001, FaultPhase::Ended)
    );
}

#[tokio::test(start_paused = true)]
async fn an_outage_longer_than_the_fault_stage_default_deadline_passes_on_a_correct_target() {
    // 31 min against the fault stage's 30 min default: the step deadline grows with the
    // requested outage instead of cutting it short.
    let mut c = case(standard_steps());
    c.params = Params::default().with_outage(Duration::from_secs(31 * 60));
    let r = engine(Factory::new(Quirk::None)).run_case(&c).await;
    assert_eq!(r.outcome, Outcome::Passed, "{:#?}", r.stages);
    let ended = fault_phases(&r.timeline).last().copied().unwrap();
    assert_eq!(ended, (27_001 + 31 * 60_000 + 3_000, FaultPhase::Ended));
}

#[tokio::test(start_paused = true)]
async fn a_shell_that_fails_on_a_ready_sandbox_is_a_product_failure_naming_its_requirement() {
    let (r, reason) = product_failure(Quirk::ShellBroken).await;
    assert!(
        reason.starts_with("[R6] could not write sentinel s1 into main-outag-"),
        "{reason}"
    );
    assert!(
        reason.ends_with("through its shell: exit 126: sh: cannot execute: permission denied"),
        "{reason}"
    );
    let seed = r.stages.iter().find(|s| s.stage == Stage::Seed).unwrap();
    assert_eq!(seed.status, conformance_core::timeline::StageStatus::Failed);
}

#[tokio::test(start_paused = true)]
async fn a_write_reported_failed_with_no_output_that_took_effect_counts_with_a_note() {
    let r = engine(Factory::new(Quirk::WriteStatusLost { took_effect: true }))
        .run_case(&case(standard_steps()))
        .await;
    assert_eq!(r.outcome, Outcome::Passed, "{:#?}", r.stages);
    let notes: Vec<&str> = r
        .timeline
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Note { message } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("sentinel s1")
            && n.contains("exit 1 with no output")
            && n.contains("F2.14")),
        "{notes:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_write_reported_failed_with_no_output_that_did_not_take_effect_fails_the_sentinels_requirement()
 {
    let (_, reason) = product_failure(Quirk::WriteStatusLost { took_effect: false }).await;
    assert!(
        reason.starts_with("[R6] could not write sentinel s1"),
        "{reason}"
    );
    assert!(reason.ends_with("through its shell: exit 1: "), "{reason}");
}

/// Creates, stops and starts a sandbox in one step, waiting for all three behaviours; the
/// fake supports no stop or start, so only a refusal of one stops the step.
fn create_stop_and_start(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name("main");
        let unsupported_is_fine = |r: Result<(), ActionError>| match r {
            Err(ActionError {
                error: TargetError::Unsupported(_),
                ..
            }) => Ok(()),
            r => r,
        };
        ctx.create_sandbox(&SandboxSpec {
            name: name.clone(),
            ..SandboxSpec::default()
        })
        .await?;
        unsupported_is_fine(ctx.stop_sandbox(&name).await)?;
        unsupported_is_fine(ctx.start_sandbox(&name).await)?;
        Ok(())
    })
}

#[tokio::test(start_paused = true)]
async fn a_refused_create_stop_or_start_breaks_its_own_requirement_not_every_one_its_step_waits_for()
 {
    // Issue 43: a step that waits for several behaviours (the seeded sweep's one step waits
    // for R1, R7, R9 and R11) blamed all of them for one refusal.
    for (call, requirement) in [("create", "R11"), ("stop", "R7"), ("start", "R8")] {
        let steps = vec![
            Step::new(Stage::Seed, "create, stop and start", create_stop_and_start)
                .waiting_for(&["R1", "R7", "R8", "R11"]),
        ];
        let r = engine(Factory::new(Quirk::Refuses(call)))
            .run_case(&case(steps))
            .await;
        let Outcome::Failed(reason) = &r.outcome else {
            panic!("{call}: expected a product failure, got {:?}", r.outcome)
        };
        assert!(
            reason.starts_with(&format!("[{requirement}] unexpectedly refused: "))
                && reason.ends_with(&format!("{call} refused")),
            "{call}: {reason}"
        );
        assert_eq!(r.step_broke(), [requirement], "{call}");
        assert_eq!(r.broken_requirements(), [requirement], "{call}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_restore_whose_effect_does_not_come_back_is_an_error_naming_the_restore() {
    let f = Factory::new(Quirk::RestoreHasNoEffect);
    let r = engine(f.clone()).run_case(&case(standard_steps())).await;
    let Outcome::Error(reason) = &r.outcome else {
        panic!("expected an infrastructure error, got {:?}", r.outcome)
    };
    assert!(
        reason.contains(
            "restoring gateway-stop (outage): its effect did not come back: StatefulSet openshell has 0 of 1 replicas ready"
        ),
        "{reason}"
    );
    assert!(
        fault_phases(&r.timeline)
            .iter()
            .any(|(_, p)| *p == FaultPhase::RestoreFailed),
        "the failed restore is on the timeline"
    );
}

#[rstest::rstest]
#[case::passing(Quirk::None)]
#[case::failing(Quirk::ErrorOnOutage)]
#[tokio::test(start_paused = true)]
async fn a_lossy_observer_makes_a_passing_or_failing_case_an_infrastructure_error_naming_what_it_missed(
    #[case] quirk: Quirk,
) {
    let r = engine(Factory::missing_a_phase(quirk))
        .run_case(&case(standard_steps()))
        .await;
    assert_eq!(r.outcome, Outcome::Error(MISSED_PHASE.into()));
    // Every report and a saved timeline give the reason: the teardown stage carries it.
    let teardown = r.stages.last().unwrap();
    assert_eq!(
        (teardown.stage, teardown.status, teardown.message.as_deref()),
        (Stage::Teardown, StageStatus::Error, Some(MISSED_PHASE))
    );
    assert_eq!(
        CaseVerdict::of_timeline(&r.timeline),
        Some(CaseVerdict::Error {
            reason: MISSED_PHASE.into()
        })
    );
}

#[tokio::test(start_paused = true)]
async fn a_timeline_saved_as_json_lines_is_rechecked_offline_with_the_same_verdicts() {
    for quirk in [Quirk::None, Quirk::ErrorOnOutage, Quirk::LosesFiles] {
        let r = engine(Factory::new(quirk))
            .run_case(&case(standard_steps()))
            .await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("timeline.jsonl");
        std::fs::write(&path, r.timeline.to_jsonl()).unwrap();
        let back =
            Timeline::read_jsonl(std::io::BufReader::new(std::fs::File::open(&path).unwrap()))
                .unwrap();
        assert_eq!(back, r.timeline);
        let again = recheck(&back);
        assert!(again.agrees, "{quirk:?}: {:#?}", again);
        assert_eq!(again.outcomes, r.checks);
        assert_eq!(back.check_plan().len(), 3);
    }
}

#[tokio::test(start_paused = true)]
async fn a_tampered_timeline_no_longer_agrees_with_its_recorded_verdicts() {
    let r = engine(Factory::new(Quirk::None))
        .run_case(&case(standard_steps()))
        .await;
    let mut t = r.timeline.clone();
    for e in &mut t.entries {
        if let Event::Sentinel(s) = &mut e.event
            && let SentinelResult::Ok(v) = &mut s.result
            && s.op == conformance_core::timeline::SentinelOp::Read
        {
            v.push('!');
        }
    }
    let again = recheck(&t);
    assert!(!again.agrees);
    assert!(
        again
            .outcomes
            .iter()
            .any(|o| !o.passed && o.message.contains("CORRUPT"))
    );
}

#[tokio::test(start_paused = true)]
async fn the_same_case_run_twice_gives_byte_identical_timelines() {
    let a = engine(Factory::new(Quirk::ErrorOnOutage))
        .run_case(&case(standard_steps()))
        .await;
    let b = engine(Factory::new(Quirk::ErrorOnOutage))
        .run_case(&case(standard_steps()))
        .await;
    assert_eq!(a.timeline.to_jsonl(), b.timeline.to_jsonl());
}

#[tokio::test(start_paused = true)]
async fn a_failed_case_keeps_its_sandbox_logs_on_the_timeline_and_a_passed_one_does_not() {
    let logs = |t: &Timeline| {
        t.entries
            .iter()
            .filter_map(|e| match &e.event {
                Event::Logs(x) => Some(x.lines.join("\n")),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let failed = engine(Factory::new(Quirk::ErrorOnOutage))
        .run_case(&case(standard_steps()))
        .await;
    assert_eq!(
        logs(&failed.timeline),
        ["Policy fetch failed, retrying attempt=1 max_attempts=5"]
    );
    let passed = engine(Factory::new(Quirk::None))
        .run_case(&case(standard_steps()))
        .await;
    assert!(logs(&passed.timeline).is_empty());
}

fn injects_one_key_twice(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        ctx.inject(&OUTAGE, Fault::GatewayStop).await?;
        ctx.restore(&OUTAGE).await?;
        ctx.inject(&OUTAGE, Fault::GatewayStop).await?;
        Ok(())
    })
}

#[tokio::test(start_paused = true)]
async fn a_fault_key_injected_twice_in_one_case_is_a_harness_error_naming_the_key() {
    let f = Factory::new(Quirk::None);
    let r = engine(f.clone())
        .run_case(&case(vec![
            Step::new(Stage::Seed, "create and seed", seed),
            Step::new(Stage::Fault, "inject twice", injects_one_key_twice),
        ]))
        .await;
    let Outcome::Error(reason) = &r.outcome else {
        panic!("expected an error, got {:?}", r.outcome);
    };
    assert!(
        reason.contains("fault outage was already injected"),
        "{reason}"
    );
    // The first injection was restored once, and the refused one was never applied.
    assert_eq!(f.restores.load(Ordering::SeqCst), 1);
}

// ---- interrupted runs -------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_case_interrupted_during_its_outage_restores_the_gateway_and_ends_interrupted_without_verdicts()
 {
    let f = Factory::new(Quirk::None);
    let opts = EngineOptions::default();
    let interrupt = opts.interrupt.clone();
    // The outage is in effect from 28 s to 58 s; the run is interrupted in the middle of it.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(40)).await;
        interrupt.raise("SIGINT");
    });
    let r = Engine::new(f.clone(), opts)
        .run_case(&case(standard_steps()))
        .await;
    assert!(r.outcome.is_interrupted(), "{:?}", r.outcome);
    assert_eq!(
        r.outcome,
        Outcome::Error("interrupted by SIGINT: stopped before its steps ended".into())
    );
    assert_eq!(
        f.restores.load(Ordering::SeqCst),
        1,
        "the outage was restored"
    );
    let phases: Vec<FaultPhase> = fault_phases(&r.timeline).into_iter().map(|p| p.1).collect();
    assert_eq!(
        phases,
        [
            FaultPhase::Requested,
            FaultPhase::Started,
            FaultPhase::Ended
        ]
    );
    assert!(
        r.checks.is_empty(),
        "no verdicts over a cut run: {:?}",
        r.checks
    );
    let status = |name: &str| {
        r.stages
            .iter()
            .find(|s| s.stage.name() == name)
            .map(|s| (s.status, s.message.clone()))
            .unwrap()
    };
    use conformance_core::timeline::StageStatus;
    assert_eq!(
        status("fault"),
        (StageStatus::Error, Some("interrupted by SIGINT".into()))
    );
    assert_eq!(status("verify").0, StageStatus::Skipped);
    assert_eq!(
        status("teardown").0,
        StageStatus::Passed,
        "the sandboxes are cleaned up"
    );
}

#[tokio::test(start_paused = true)]
async fn a_case_that_would_start_after_the_interrupt_does_not_start_and_says_so() {
    let f = Factory::new(Quirk::None);
    let opts = EngineOptions::default();
    opts.interrupt.raise("SIGTERM");
    opts.interrupt.raise("SIGINT");
    let r = Engine::new(f.clone(), opts)
        .run_case(&case(standard_steps()))
        .await;
    assert_eq!(
        r.outcome,
        Outcome::Error("interrupted by SIGTERM: the case did not start".into()),
        "the first reason wins"
    );
    assert!(r.outcome.is_interrupted());
    assert!(fault_phases(&r.timeline).is_empty());
    assert!(r.checks.is_empty());
    assert!(
        r.stages.iter().all(
            |s| s.status == conformance_core::timeline::StageStatus::Skipped
                && s.message.as_deref() == Some("not started: interrupted by SIGTERM")
        ),
        "{:?}",
        r.stages
    );
}

#[test]
fn only_an_interruption_makes_an_outcome_interrupted() {
    assert!(Outcome::interrupted("SIGINT", "x").is_interrupted());
    assert!(!Outcome::Error("the cluster is unreachable".into()).is_interrupted());
    assert!(!Outcome::Failed("interrupted by SIGINT: x".into()).is_interrupted());
    assert!(!Outcome::Passed.is_interrupted());
}

#[tokio::test(start_paused = true)]
async fn while_the_gateway_is_down_the_timeline_shows_the_sandbox_phase_as_unknown_not_the_last_one_seen()
 {
    let r = engine(Factory::new(Quirk::None))
        .run_case(&case(standard_steps()))
        .await;
    assert_eq!(r.outcome, Outcome::Passed, "{:#?}", r.checks);
    let faults = fault_phases(&r.timeline);
    let (started, ended) = (faults[1].0, faults[2].0);
    let sandbox: Vec<(u64, &conformance_core::timeline::ObjectState)> = r
        .timeline
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Object(o) if o.kind == conformance_core::timeline::GATEWAY_SANDBOX_KIND => {
                Some((e.at_ms, o))
            }
            _ => None,
        })
        .collect();
    let unknown: Vec<u64> = sandbox
        .iter()
        .filter(|(_, o)| o.unobserved())
        .map(|(at, _)| *at)
        .collect();
    assert!(
        unknown.iter().any(|at| (started..=ended).contains(at)),
        "no Unknown phase during the outage {started}..{ended}: {:?}",
        sandbox
            .iter()
            .map(|(at, o)| format!("{at} {}", o.summary()))
            .collect::<Vec<_>>()
    );
    let last = sandbox.last().unwrap().1;
    assert_eq!(last.phase.as_deref(), Some("Ready"), "{}", last.summary());
}

fn settles_seven_seconds(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        ctx.sleep(Duration::from_secs(7)).await;
        Ok(())
    })
}

/// The waits a scenario mandates, as its timeline records them: (which, ms).
fn scenario_waits(t: &Timeline) -> Vec<(String, serde_json::Value)> {
    t.entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Observation {
                key,
                subject: Some(s),
                value,
            } if key == conformance_core::timeline::SCENARIO_WAIT_KEY => {
                Some((s.clone(), value.clone()))
            }
            _ => None,
        })
        .collect()
}

/// A speed figure tells the scenario's own waits from the time the product and the harness
/// take: its sleeps and the deadlines it waited out are on the timeline, a wait that ended in
/// time is not.
#[rstest::rstest]
#[case::in_time(Quirk::None, &[("outage", 30_000), ("sleep", 7_000)])]
#[case::waited_out(
    Quirk::ErrorOnOutage,
    &[("outage", 30_000), ("sleep", 7_000), ("deadline: sandbox main-outag-", 120_000)]
)]
#[tokio::test(start_paused = true)]
async fn the_waits_a_scenario_mandates_are_on_its_timeline(
    #[case] quirk: Quirk,
    #[case] want: &[(&str, u64)],
) {
    let steps = vec![
        Step::new(Stage::Seed, "create and seed", seed),
        Step::new(Stage::Fault, "gateway outage", outage),
        Step::new(Stage::Verify, "settle", settles_seven_seconds),
        Step::new(Stage::Verify, "read back", verify),
    ];
    let r = engine(Factory::new(quirk)).run_case(&case(steps)).await;
    let got = scenario_waits(&r.timeline);
    assert_eq!(got.len(), want.len(), "{got:?}");
    for ((which, ms), (prefix, want_ms)) in got.iter().zip(want) {
        assert!(which.starts_with(prefix), "{which} (want {prefix}…)");
        assert_eq!(ms, &serde_json::json!(want_ms), "{which}");
    }
}

/// Reads the sentinel `s1` of the main sandbox after the outage: through the shell checking
/// it is usable, once the sandbox is Ready again, or through the plain read at once, without
/// waiting for it to be Ready.
fn read_right_after(shell_check: bool) -> Vec<Step> {
    let read: fn(&mut Ctx) -> BoxFuture<'_, StepResult> = if shell_check {
        |ctx| {
            Box::pin(async move {
                let name = ctx.sandbox_name("main");
                ctx.wait_phase("R11", &name, &[Phase::Ready], Duration::from_secs(120))
                    .await?;
                let ran = ctx.use_shell(&name, "s1").await;
                ctx.observe_value("shell-ran", None, serde_json::json!(ran));
                Ok(())
            })
        }
    } else {
        |ctx| {
            Box::pin(async move {
                let name = ctx.sandbox_name("main");
                ctx.read_sentinel(&name, "s1").await;
                Ok(())
            })
        }
    };
    let mut steps = standard_steps();
    steps.pop();
    steps.push(Step::new(Stage::Verify, "read back at once", read));
    steps
}

fn sentinels_check(
    r: &conformance_core::engine::CaseReport,
) -> &conformance_core::checks::CheckOutcome {
    r.checks
        .iter()
        .find(|c| c.name == "workspace sentinels retained")
        .unwrap()
}

fn sentinel_reads(t: &Timeline) -> Vec<(SentinelPath, SentinelResult)> {
    t.entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Sentinel(s) if s.op == SentinelOp::Read => Some((s.via, s.result.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_sentinel_the_shell_cannot_read_is_read_from_the_workspace_volume_and_judged_on_it() {
    // Left in Error by the outage, the sandbox refuses the exec; its workspace still holds the
    // sentinel, so the sentinels' requirement holds and the refusal is the shell's to answer.
    let r = engine(Factory::new(Quirk::ErrorOnOutage))
        .run_case(&case(read_right_after(false)))
        .await;
    let reads = sentinel_reads(&r.timeline);
    assert_eq!(reads.len(), 2, "{reads:?}");
    assert!(
        matches!(&reads[0], (SentinelPath::Shell, SentinelResult::Failed(m)) if m.contains("sandbox is not ready")),
        "{reads:?}"
    );
    assert!(
        matches!(&reads[1], (SentinelPath::Reader, SentinelResult::Ok(v)) if v.starts_with("s1-")),
        "{reads:?}"
    );
    let sentinels = sentinels_check(&r);
    assert!(sentinels.passed, "{}", sentinels.message);
}

#[tokio::test(start_paused = true)]
async fn a_shell_that_runs_over_an_emptied_workspace_is_usable_and_fails_the_sentinels() {
    let r = engine(Factory::new(Quirk::LosesFiles))
        .run_case(&case(read_right_after(true)))
        .await;
    let ran = r.timeline.entries.iter().find_map(|e| match &e.event {
        Event::Observation { key, value, .. } if key == "shell-ran" => value.as_bool(),
        _ => None,
    });
    assert_eq!(ran, Some(true));
    let reads = sentinel_reads(&r.timeline);
    assert!(
        reads.contains(&(SentinelPath::Shell, SentinelResult::Missing)),
        "{reads:?}"
    );
    let sentinels = sentinels_check(&r);
    assert!(!sentinels.passed);
    assert!(sentinels.message.contains("LOST"), "{}", sentinels.message);
}

// ---- an outage at a phase the gateway reports ---------------------------------------------

/// Creates the main sandbox and, while the create runs, stops the gateway for 30 s once the
/// sandbox is reported Provisioning.
fn outage_during_bootstrap(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name("main");
        let spec = conformance_core::target::SandboxSpec {
            name: name.clone(),
            ..Default::default()
        };
        let create = ctx.begin_create(&spec);
        let key = conformance_core::keys::FaultKey::new("outage");
        let (created, during) = tokio::join!(
            create,
            ctx.outage_while(
                "R11",
                &name,
                Phase::Provisioning,
                &key,
                Duration::from_secs(30)
            )
        );
        during?;
        ctx.observe_value("create-ok", None, serde_json::json!(created.is_ok()));
        Ok(())
    })
}

/// The phases the main sandbox was recorded in before the outage took effect.
fn phases_before_outage(t: &Timeline) -> Vec<String> {
    let started = t
        .entries
        .iter()
        .position(|e| matches!(&e.event, Event::Fault(f) if f.phase == FaultPhase::Started))
        .expect("the outage started");
    t.entries[..started]
        .iter()
        .filter_map(|e| match &e.event {
            Event::Object(o) if o.kind == conformance_core::timeline::GATEWAY_SANDBOX_KIND => {
                o.phase.clone()
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_outage_during_bootstrap_starts_while_the_sandbox_provisions_though_create_waits_for_ready()
 {
    // A create that returns only at Ready (v0.0.111's CLI) would put an outage injected after
    // it past bootstrap; the outage is placed by the phase the gateway reports instead.
    let r = engine(Factory::new(Quirk::CreateWaitsForReady))
        .run_case(&case(vec![Step::new(
            Stage::Fault,
            "outage during bootstrap",
            outage_during_bootstrap,
        )]))
        .await;
    let fault = r.stages.iter().find(|s| s.stage == Stage::Fault).unwrap();
    assert_eq!(fault.status, StageStatus::Passed, "{:#?}", r.stages);
    let before = phases_before_outage(&r.timeline);
    assert!(
        !before.is_empty() && before.iter().all(|p| p == "Provisioning"),
        "{before:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_outage_that_lands_after_the_phase_it_was_meant_for_is_an_infrastructure_error_naming_it()
 {
    // The in-test gateway takes 5 s to stop and bootstrap 2 s: the sandbox is Ready first.
    let f = Factory::new(Quirk::None);
    let r = engine(f.clone())
        .run_case(&case(vec![Step::new(
            Stage::Fault,
            "outage during bootstrap",
            outage_during_bootstrap,
        )]))
        .await;
    let Outcome::Error(reason) = &r.outcome else {
        panic!("expected an error, got {:?}", r.outcome);
    };
    assert!(
        reason.contains("was to start while sandbox main-")
            && reason.contains("was Provisioning, but it was Ready before the gateway stopped"),
        "{reason}"
    );
    // The outage that missed was restored.
    assert_eq!(f.restores.load(Ordering::SeqCst), 1);
}
