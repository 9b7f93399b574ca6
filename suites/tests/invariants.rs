//! The invariants every case checks, shown on the seeded sweep and the single-sandbox lifecycle
//! and outage scenarios: a timeline of a passing run is
//! changed the way a broken product would change it (a workload started again, a pod replaced
//! behind the user's back, a workload running while its sandbox is Stopped), and re-judging its
//! own check plan must fail naming the requirement the change breaks. The restart-policy case
//! ends the main process repeatedly, once across an outage, each end followed by a bounded
//! restart.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use conformance_catalog::catalog::{self, Selection as Pick};
use conformance_core::engine::{self, CaseReport, EngineOptions, Outcome};
use conformance_core::pool;
use conformance_core::target::{
    ExecResult, Fault, Observers, SandboxSpec, SandboxView, Target, TargetFactory, TargetInfo,
    TargetResult,
};
use conformance_core::timeline::{
    Entry, Event, FaultPhase, MAIN_PROCESS_STARTS_KEY, ObjectState, Recorder, Timeline,
};
use conformance_core::topology::{Topologies, Topology};
use conformance_models::spec::Selection;
use conformance_models::target::EmulatedFactory;

/// Runs the one case `pattern` selects on the contract model's combined topology; it passes.
fn run_one(pattern: &str, seed: Option<u64>) -> CaseReport {
    let report = run_on(Selection::contract(), pattern, seed);
    assert_eq!(report.outcome, Outcome::Passed, "{:?}", report.outcome);
    report
}

/// Runs the one case `pattern` selects on the combined topology of `selection`.
fn run_on(selection: Selection, pattern: &str, seed: Option<u64>) -> CaseReport {
    let pick = Pick {
        patterns: vec![pattern.into()],
        seed,
        ..Pick::default()
    };
    let topology = Topologies::builtin().get("combined").unwrap().clone();
    let cases = catalog::cases(&[topology], &pick);
    assert_eq!(cases.len(), 1, "{pattern} selects one case");
    let factory: Arc<dyn TargetFactory> = Arc::new(EmulatedFactory::new(selection));
    pool::run_paused(factory, EngineOptions::default(), cases, 1, &()).remove(0)
}

/// The starts of `sandbox`'s main process the target reported, as (index, count) in order.
fn reported_starts(t: &Timeline, sandbox: &str) -> Vec<(usize, u64)> {
    t.entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.event {
            Event::Observation {
                key,
                subject: Some(s),
                value,
            } if key == MAIN_PROCESS_STARTS_KEY && s == sandbox => Some((i, value.as_u64()?)),
            _ => None,
        })
        .collect()
}

/// Seed 1's schedule: while-ready, while-starting, while-ready, while-starting, during-bootstrap.
fn sweep() -> CaseReport {
    run_one("seeded-sweep", Some(1))
}

/// The name of the sandbox with this sweep role (`sweep-1` …) in the timeline.
fn sandbox(t: &Timeline, role: &str) -> String {
    t.entries
        .iter()
        .find_map(|e| match &e.event {
            Event::Object(o) if o.kind == "OpenShellSandbox" && o.name.contains(role) => {
                Some(o.name.clone())
            }
            _ => None,
        })
        .unwrap()
}

/// The target reports one more start of `name`'s workload right after its first, which the
/// workload also marked in its workspace: only the count of starts is wrong.
fn started_again(t: &mut Timeline, name: &str) {
    let starts = reported_starts(t, name);
    for (i, n) in &starts {
        if let Event::Observation { value, .. } = &mut t.entries[*i].event {
            *value = serde_json::json!(n + 1);
        }
    }
    let first = t.entries[starts[0].0].event.clone();
    let again = Event::Observation {
        key: MAIN_PROCESS_STARTS_KEY.into(),
        subject: Some(name.to_string()),
        value: serde_json::json!(1),
    };
    // Before the first, now counting 2, so the counts stay in order.
    let i = t.entries.iter().position(|e| e.event == first).unwrap();
    let at_ms = t.entries[i].at_ms;
    t.entries.insert(
        i,
        Entry {
            seq: t.entries[i].seq,
            at_ms,
            event: again,
        },
    );
    for e in &mut t.entries {
        if let Event::Observation { key, value, .. } = &mut e.event
            && *key == format!("start-marks:{name}")
        {
            *value = serde_json::json!(value.as_u64().unwrap() + 1);
        }
    }
}

/// Inserts `event` right after the first entry `after` matches, stamped like it.
fn insert_after(t: &mut Timeline, after: impl Fn(&Event) -> bool, event: Event) {
    let i = t.entries.iter().position(|e| after(&e.event)).unwrap();
    let at = &t.entries[i];
    let entry = Entry {
        seq: at.seq,
        at_ms: at.at_ms,
        event,
    };
    t.entries.insert(i + 1, entry);
}

/// The failed checks of re-judging the timeline, as `name [requirements]`.
fn failures(t: &Timeline) -> Vec<String> {
    engine::recheck(t)
        .outcomes
        .into_iter()
        .filter(|o| !o.passed)
        .map(|o| format!("{} [{}]", o.name, o.requirements.join(", ")))
        .collect()
}

#[test]
fn the_sweep_passes_its_invariants_on_the_contract_model_as_recorded() {
    let t = sweep().timeline;
    assert!(failures(&t).is_empty(), "{:?}", failures(&t));
    assert!(engine::recheck(&t).agrees);
}

#[test]
fn a_sweep_whose_workload_started_again_fails_naming_r7() {
    let mut t = sweep().timeline;
    let name = sandbox(&t, "sweep-1");
    started_again(&mut t, &name);
    let failed = failures(&t);
    assert_eq!(
        failed,
        vec!["sweep-1 (while-ready 4m 30s): the workload started at most once, as asked [R7]"],
    );
}

#[test]
fn a_sweep_whose_pod_was_replaced_behind_the_users_back_fails_naming_r9() {
    let mut t = sweep().timeline;
    let name = sandbox(&t, "sweep-3");
    let pod = t
        .entries
        .iter()
        .find_map(|e| match &e.event {
            Event::Object(o) if o.kind == "Pod" && o.name.ends_with(&name) => Some(o.clone()),
            _ => None,
        })
        .unwrap();
    let mut replacement = pod.clone();
    replacement.uid = Some("replaced-behind-the-users-back".into());
    insert_after(
        &mut t,
        |e| matches!(e, Event::Object(o) if o.uid == pod.uid),
        Event::Object(replacement),
    );
    let failed = failures(&t);
    assert_eq!(
        failed,
        vec!["sweep-3 (while-ready 4m 35s): its pod is replaced only by the scenario's stop [R9]"],
    );
}

/// Records sandbox `name`'s last Running pod again right after the gateway reports it Stopped:
/// a workload that runs while its sandbox is Stopped.
fn running_while_stopped(t: &mut Timeline, name: &str) {
    let pod = t
        .entries
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::Object(o)
                if o.kind == "Pod"
                    && o.name.ends_with(name)
                    && o.phase.as_deref() == Some("Running") =>
            {
                Some(o.clone())
            }
            _ => None,
        })
        .unwrap();
    insert_after(
        t,
        |e| {
            matches!(e, Event::Object(o) if o.name == name
                && o.phase.as_deref() == Some("Stopped"))
        },
        Event::Object(pod),
    );
}

#[test]
fn a_sweep_whose_workload_runs_while_the_sandbox_is_stopped_fails_naming_r7() {
    let mut t = sweep().timeline;
    let name = sandbox(&t, "sweep-2");
    // The pod is back and running while the gateway still reports the sandbox Stopped.
    running_while_stopped(&mut t, &name);
    let failed = failures(&t);
    assert!(
        failed.contains(
            &"sweep-2 (while-starting 2m 40s): nothing runs while it is Stopped [R7]".to_string()
        ),
        "{failed:?}"
    );
}

#[test]
fn the_sweep_records_each_sandboxs_recovery_latency_from_its_last_turn_to_ready() {
    let t = sweep().timeline;
    let latency = |role: &str| {
        let key = format!("recovery-ms:{}", sandbox(&t, role));
        t.entries
            .iter()
            .find_map(|e| match &e.event {
                Event::Observation { key: k, value, .. } if *k == key => value.as_u64(),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no {key} on the timeline"))
    };
    // sweep-1 still reads Ready from before the outage when the gateway returns, then passes
    // through Provisioning until the session is back: its recovery is that last turn to Ready.
    // Every change of the gateway's record is on the timeline, and the outage ends the instant
    // the gateway is ready again (the emulated target's waits wake on store changes), so
    // latencies are exact to the model's 250 ms steps, not shifted by a polling period.
    assert_eq!(latency("sweep-1"), 30_000);
    assert_eq!(latency("sweep-2"), 7_000);
    assert_eq!(latency("sweep-5"), 5_000);
}

#[test]
fn a_sweep_sandbox_ready_only_after_its_recovery_bound_fails() {
    let mut t = sweep().timeline;
    let name = sandbox(&t, "sweep-2");
    // Push sweep-2's return to Ready 61 s past the gateway's return (RECOVERY is 60 s).
    let end = t
        .entries
        .iter()
        .position(|e| {
            matches!(&e.event, Event::Fault(f) if f.id == "sweep-2-outage"
                && f.phase == FaultPhase::Ended)
        })
        .unwrap();
    let ended_at = t.entries[end].at_ms;
    for e in &mut t.entries[end..] {
        if let Event::Object(o) = &e.event
            && o.name == name
            && o.phase.as_deref() == Some("Ready")
        {
            e.at_ms = e.at_ms.max(ended_at + 61_000);
        }
    }
    let failed = failures(&t);
    assert!(
        failed.contains(
            &"sweep-2 (while-starting 2m 40s) is Ready again within its recovery bound [R1]"
                .to_string()
        ),
        "{failed:?}"
    );
}

fn restart_across_outage() -> Timeline {
    run_one("restart-policy-always[*trigger=gateway-restart]", None).timeline
}

#[test]
fn the_restart_policy_case_ends_the_main_process_three_times_the_last_during_an_outage() {
    let t = restart_across_outage();
    let at = |id: &str, phase: FaultPhase| {
        t.entries
            .iter()
            .position(|e| matches!(&e.event, Event::Fault(f) if f.id == id && f.phase == phase))
            .unwrap_or_else(|| panic!("no {id} {phase:?}"))
    };
    let kills: Vec<usize> = (1..=3)
        .map(|k| at(&format!("main-kill-{k}"), FaultPhase::Started))
        .collect();
    let (down, up) = (
        at("gateway-outage", FaultPhase::Started),
        at("gateway-outage", FaultPhase::Ended),
    );
    assert!(kills[1] < down, "the first two ends are outside the outage");
    assert!(down < kills[2] && kills[2] < up, "the third is during it");
    let latencies: Vec<u64> = t
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Observation { key, value, .. } if key.starts_with("restart-ms-") => {
                value.as_u64()
            }
            _ => None,
        })
        .collect();
    assert_eq!(latencies.len(), 3, "one measured restart latency per end");
}

#[test]
fn a_restart_policy_case_whose_second_end_is_not_followed_by_a_restart_fails_naming_r10() {
    let mut t = restart_across_outage();
    // The restart after the second end (the third start) comes only after the scenario
    // stopped waiting for it, just before the restart after the third end.
    let name = sandbox(&t, "main");
    let (third, _) = reported_starts(&t, &name)[2];
    let start = t.entries.remove(third);
    let (fourth, _) = reported_starts(&t, &name)[2];
    let late = Entry {
        at_ms: t.entries[fourth].at_ms,
        ..start
    };
    t.entries.insert(fourth, late);
    assert_eq!(
        failures(&t),
        vec!["end 2 of 3 is followed by a restart within 3m [R10]"]
    );
}

#[test]
fn a_workspace_replaced_under_the_workload_fails_naming_r6_and_not_the_start_counts() {
    // The replacement pod gets a fresh, empty workspace: its sentinel and the workload's start
    // marks are gone, but the workload started exactly as often as it should (R1, R3).
    let selection = Selection::parse(
        "contract",
        &["workspace-pvc-replaced-on-pod-replacement".into()],
        None,
    )
    .unwrap();
    let report = run_on(selection, "bootstrap-outage[*outage=30s]", None);
    let failed = failures(&report.timeline);
    assert_eq!(
        failed,
        vec![
            "workspace sentinels are read back intact [R6]",
            "the workspace keeps the mark of every main-process start [R6]",
        ],
    );
}

#[test]
fn a_workload_started_by_the_returning_gateway_fails_naming_r7_and_not_the_workspace() {
    // The stopped sandbox is started behind the user's back; whatever the workload marked in
    // its workspace then is there, so the workspace is intact.
    let selection = Selection::parse(
        "contract",
        &["gateway-restart-starts-stopped-sandboxes".into()],
        None,
    )
    .unwrap();
    let report = run_on(selection, "stopped-through-outage[*outage=30s]", None);
    let failed = failures(&report.timeline);
    assert!(
        !failed.is_empty() && failed.iter().all(|f| f.ends_with("[R7]")),
        "R7 is broken, and only R7: {failed:?}"
    );
}

/// The emulated target, except that the gateway forgets a deleted sandbox at once while its
/// Kubernetes objects go only `LINGER` later: a slower cluster that still cleans up in time.
struct SlowCleanup {
    inner: Arc<dyn Target>,
    forgotten: Mutex<BTreeSet<String>>,
}

/// Within the leak check's deadline (CLEANUP, 120 s, after the deletion).
const LINGER: Duration = Duration::from_secs(90);

#[async_trait]
impl Target for SlowCleanup {
    fn info(&self) -> TargetInfo {
        self.inner.info()
    }
    async fn install(&self, topology: &Topology) -> TargetResult<()> {
        self.inner.install(topology).await
    }
    async fn observe(&self, rec: Recorder) -> TargetResult<Observers> {
        self.inner.observe(rec).await
    }
    async fn snapshot(&self) -> TargetResult<Vec<ObjectState>> {
        self.inner.snapshot().await
    }
    async fn create_sandbox(&self, spec: &SandboxSpec) -> TargetResult<SandboxView> {
        self.inner.create_sandbox(spec).await
    }
    async fn get_sandbox(&self, name: &str) -> TargetResult<Option<SandboxView>> {
        if self.forgotten.lock().unwrap().contains(name) {
            return Ok(None);
        }
        self.inner.get_sandbox(name).await
    }
    async fn exec(&self, sandbox: &str, argv: &[String]) -> TargetResult<ExecResult> {
        self.inner.exec(sandbox, argv).await
    }
    async fn probe_exec(&self, sandbox: &str, argv: &[String]) -> TargetResult<ExecResult> {
        self.inner.probe_exec(sandbox, argv).await
    }
    async fn read_workspace(&self, sandbox: &str, path: &str) -> TargetResult<Option<String>> {
        self.inner.read_workspace(sandbox, path).await
    }
    async fn stop_sandbox(&self, name: &str) -> TargetResult<()> {
        self.inner.stop_sandbox(name).await
    }
    async fn start_sandbox(&self, name: &str) -> TargetResult<()> {
        self.inner.start_sandbox(name).await
    }
    async fn delete_sandbox(&self, name: &str) -> TargetResult<()> {
        self.forgotten.lock().unwrap().insert(name.to_string());
        let (inner, name) = (self.inner.clone(), name.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(LINGER).await;
            inner.delete_sandbox(&name).await.ok();
        });
        Ok(())
    }
    async fn inject(&self, fault: &Fault) -> TargetResult<()> {
        self.inner.inject(fault).await
    }
    async fn restore(&self, fault: &Fault) -> TargetResult<()> {
        self.inner.restore(fault).await
    }
    async fn supervisor_log(&self, sandbox: &str) -> TargetResult<Option<Vec<String>>> {
        self.inner.supervisor_log(sandbox).await
    }
    async fn teardown(&self) -> TargetResult<()> {
        self.inner.teardown().await
    }
}

struct SlowCleanupFactory(EmulatedFactory);

#[async_trait]
impl TargetFactory for SlowCleanupFactory {
    fn info(&self) -> TargetInfo {
        self.0.info()
    }
    async fn provision(
        &self,
        topology: &Topology,
        rec: &Recorder,
    ) -> TargetResult<Arc<dyn Target>> {
        Ok(Arc::new(SlowCleanup {
            inner: self.0.provision(topology, rec).await?,
            forgotten: Mutex::default(),
        }))
    }
}

#[test]
fn the_leak_check_judges_at_its_deadline_not_when_the_case_ends() {
    let pick = Pick {
        patterns: vec!["gateway-outage[combined,outage=30s]".into()],
        ..Pick::default()
    };
    let topology = Topologies::builtin().get("combined").unwrap().clone();
    let cases = catalog::cases(&[topology], &pick);
    assert_eq!(cases.len(), 1);
    let factory: Arc<dyn TargetFactory> = Arc::new(SlowCleanupFactory(EmulatedFactory::new(
        Selection::contract(),
    )));
    let report = pool::run_paused(factory, EngineOptions::default(), cases, 1, &()).remove(0);
    let leak = report
        .checks
        .iter()
        .find(|c| c.name == "nothing of the deleted sandbox is left behind")
        .unwrap();
    assert!(leak.passed, "{}", leak.diagnosis());
    assert!(
        leak.message.contains("after marker 'deleted:"),
        "{}",
        leak.message
    );
    assert_eq!(report.outcome, Outcome::Passed, "{:?}", report.outcome);
}

/// Runs the one case `id` names on the combined topology (where the supervisor lives in the
/// sandbox pod) and inserts, right after its last sandbox pod first appears, the same pod with a
/// new uid: a replacement nobody asked for, deleted with the sandbox like the rest.
fn with_an_unasked_pod_replacement(id: &str) -> Timeline {
    let mut t = run_one(id, None).timeline;
    let name = sandbox(&t, "main");
    let pod = t
        .entries
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::Object(o) if o.kind == "Pod" && o.name.ends_with(&name) && !o.deleted => {
                Some(o.clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("{id}: no pod of {name} on the timeline"));
    let mut replacement = pod.clone();
    replacement.uid = Some("replaced-behind-the-users-back".into());
    let last = pod.uid.clone();
    let i = t
        .entries
        .iter()
        .position(|e| matches!(&e.event, Event::Object(o) if o.kind == "Pod" && o.uid == last))
        .unwrap();
    let at = &t.entries[i];
    let entry = Entry {
        seq: at.seq,
        at_ms: at.at_ms,
        event: Event::Object(replacement),
    };
    t.entries.insert(i + 1, entry);
    t
}

#[rstest::rstest]
#[case::completed_workload(
    "completed-workload[combined,exit=0,via=gateway-restart]",
    "the finished workload's pod is not replaced [R7]"
)]
#[case::error_recovery(
    "error-recovery[combined]",
    "the sandbox pod is replaced only by the scenario's fault and the user's stop and start [R8]"
)]
#[case::permanent_bootstrap_error(
    "permanent-bootstrap-error[combined,what=credentials]",
    "the failing sandbox's pod is not replaced [R4]"
)]
#[case::bootstrap_outage(
    "bootstrap-outage[combined,outage=30s]",
    "the sandbox pod is replaced only by the scenario's fault [R1]"
)]
fn a_pod_replaced_beyond_what_the_scenario_caused_fails_naming_its_requirement(
    #[case] id: &str,
    #[case] check: &str,
) {
    let failed = failures(&with_an_unasked_pod_replacement(id));
    assert_eq!(failed, vec![check.to_string()], "{id}");
}

#[test]
fn an_error_recovery_whose_workload_runs_while_the_sandbox_is_stopped_fails_naming_r7() {
    let mut t = run_one("error-recovery[combined]", None).timeline;
    let name = sandbox(&t, "main");
    // The stop left the workload running: its pod is Running while the sandbox reads Stopped.
    running_while_stopped(&mut t, &name);
    let failed = failures(&t);
    assert!(
        failed.contains(&"no workload runs while the sandbox is Stopped [R7]".to_string()),
        "{failed:?}"
    );
}

#[test]
fn an_error_recovery_whose_workload_started_again_fails_naming_r3_and_r7() {
    let mut t = run_one("error-recovery[combined]", None).timeline;
    let name = sandbox(&t, "main");
    started_again(&mut t, &name);
    assert_eq!(
        failures(&t),
        vec!["the workload started only at creation and at the user's start [R3, R7]"],
    );
}

/// The gateway's view of `name` turns Error for a cause of the gateway's own (StartFailed,
/// field report bug 3) right after the fault `fault` ended, and is back as it was at once.
fn flapped_through_start_failed(t: &mut Timeline, name: &str, fault: &str) {
    use conformance_core::timeline::GATEWAY_SANDBOX_KIND;
    let ended = t
        .entries
        .iter()
        .position(|e| {
            matches!(&e.event, Event::Fault(f) if f.id == fault && f.phase == FaultPhase::Ended)
        })
        .unwrap();
    let view = t.entries[..ended]
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::Object(o) if o.kind == GATEWAY_SANDBOX_KIND && o.name == name => Some(o.clone()),
            _ => None,
        })
        .unwrap();
    let mut failed = view.clone();
    failed.phase = Some("Error".into());
    for c in &mut failed.conditions {
        if c.type_ == "Ready" {
            c.status = "False".into();
            c.reason = Some("StartFailed".into());
        }
    }
    let at = &t.entries[ended];
    let (seq, at_ms) = (at.seq, at.at_ms);
    for (i, state) in [failed, view].into_iter().enumerate() {
        t.entries.insert(
            ended + 1 + i,
            Entry {
                seq,
                at_ms,
                event: Event::Object(state),
            },
        );
    }
}

/// A gateway restart that flaps a finished workload through Error for a cause of its own fails
/// the gateway fault's check (R9) and nothing else: Completed is the right phase there, and the
/// R7 checks (brought back, replayed) are about something else (issue 43).
#[test]
fn a_completed_workload_a_gateway_restart_flaps_through_error_fails_naming_r9_only() {
    let mut t = run_one("completed-workload[*exit=0,via=gateway-restart]", None).timeline;
    let name = sandbox(&t, "main");
    flapped_through_start_failed(&mut t, &name, "trigger");
    assert_eq!(
        failures(&t),
        vec![
            "the gateway's restart leaves the finished sandbox as its exit left it: never Stopped, never Error for another cause than its exit [R9]"
        ]
    );
}

/// The same flap where the main process restarts across the gateway's outage: R9, not the
/// restart policy's R10 (issue 43: it was blamed on R10 alone).
#[test]
fn a_restart_across_an_outage_that_flaps_through_error_fails_naming_r9_only() {
    let mut t = restart_across_outage();
    let name = sandbox(&t, "main");
    flapped_through_start_failed(&mut t, &name, "gateway-outage");
    assert_eq!(
        failures(&t),
        vec![
            "the gateway's outage never makes the sandbox terminal for anything but the exit [R9]"
        ]
    );
}
