//! Every check kind, passing and failing, on hand-built timelines.

use std::time::Duration;

use super::*;
use crate::keys::{FaultKey, Marker};
use crate::phase::Phase;
use crate::timeline::{
    ActionRecord, ConditionState, ContainerState, FaultRecord, GATEWAY_SANDBOX_KIND, SentinelOp,
    SentinelRecord, SentinelResult,
};

/// Builds a timeline by hand with explicit stamps.
#[derive(Default)]
struct Tb {
    t: Timeline,
}

impl Tb {
    fn push(mut self, at_s: f64, event: Event) -> Self {
        let seq = self.t.entries.len() as u64 + 1;
        self.t.entries.push(Entry {
            seq,
            at_ms: (at_s * 1000.0) as u64,
            event,
        });
        self
    }

    fn phase(self, at_s: f64, name: &str, phase: Phase) -> Self {
        let mut o = ObjectState::new(GATEWAY_SANDBOX_KIND, None, name);
        o.phase = Some(phase.name().to_string());
        self.push(at_s, Event::Object(o))
    }

    fn pod(self, at_s: f64, name: &str, uid: &str, phase: &str, restarts: u32) -> Self {
        let mut o = ObjectState::new("Pod", Some("openshell"), name);
        o.uid = Some(uid.to_string());
        o.phase = Some(phase.to_string());
        o.containers.push(ContainerState {
            name: "agent".into(),
            state: if phase == "Failed" {
                "terminated"
            } else {
                "running"
            }
            .into(),
            reason: None,
            exit_code: (phase == "Failed").then_some(1),
            restart_count: Some(restarts),
        });
        o.conditions.push(ConditionState {
            type_: "Ready".into(),
            status: if phase == "Running" { "True" } else { "False" }.into(),
            reason: (phase == "Failed").then(|| "PodFailed".to_string()),
            message: None,
        });
        self.push(at_s, Event::Object(o))
    }

    fn deleted(self, at_s: f64, kind: &str, ns: Option<&str>, name: &str) -> Self {
        let mut o = ObjectState::new(kind, ns, name);
        o.deleted = true;
        self.push(at_s, Event::Object(o))
    }

    fn fault(self, at_s: f64, id: &str, phase: FaultPhase) -> Self {
        self.push(
            at_s,
            Event::Fault(FaultRecord {
                id: id.into(),
                kind: "gateway-stop".into(),
                phase,
                subject: None,
                requested_ms: None,
                detail: None,
            }),
        )
    }

    fn outage(self, from_s: f64, to_s: f64) -> Self {
        self.fault(from_s, "f1", FaultPhase::Started)
            .fault(to_s, "f1", FaultPhase::Ended)
    }

    fn action(self, at_s: f64, name: &str, status: ActionStatus) -> Self {
        self.push(
            at_s,
            Event::Action(ActionRecord {
                id: 1,
                name: name.into(),
                subject: None,
                status,
                detail: None,
            }),
        )
    }

    fn sentinel(self, at_s: f64, key: &str, op: SentinelOp, result: SentinelResult) -> Self {
        self.push(
            at_s,
            Event::Sentinel(SentinelRecord {
                key: key.into(),
                sandbox: "a".into(),
                op,
                result,
                via: crate::timeline::SentinelPath::Shell,
            }),
        )
    }

    fn observed(self, at_s: f64, key: &str, value: serde_json::Value) -> Self {
        self.push(
            at_s,
            Event::Observation {
                key: key.into(),
                subject: None,
                value,
            },
        )
    }

    /// The target reports main-process starts (it declares where they come from).
    fn reports_starts(self) -> Self {
        self.push(
            0.0,
            Event::Observation {
                key: crate::timeline::MAIN_PROCESS_STARTS_SOURCE_KEY.into(),
                subject: None,
                value: serde_json::json!("test"),
            },
        )
    }

    /// The target reports that `sandbox`'s main process has started `n` times so far.
    fn started(self, at_s: f64, sandbox: &str, n: serde_json::Value) -> Self {
        self.push(
            at_s,
            Event::Observation {
                key: crate::timeline::MAIN_PROCESS_STARTS_KEY.into(),
                subject: Some(sandbox.into()),
                value: n,
            },
        )
    }

    fn mark(self, at_s: f64, label: &str) -> Self {
        self.push(
            at_s,
            Event::Marker {
                label: label.into(),
            },
        )
    }

    /// Entries may be pushed out of order for readability; the timeline is ordered by stamp.
    fn build(mut self) -> Timeline {
        self.t.entries.sort_by_key(|e| e.at_ms);
        for (i, e) in self.t.entries.iter_mut().enumerate() {
            e.seq = i as u64 + 1;
        }
        self.t
    }
}

fn sandbox() -> Selector {
    Selector::named(GATEWAY_SANDBOX_KIND, "a")
}

fn ready_within(secs: u64) -> Check {
    Check::eventually(
        "sandbox returns to Ready",
        &["R9"],
        Predicate::phase(sandbox(), &[Phase::Ready]),
        Anchor::fault_end(&FaultKey::new("f1")),
        Duration::from_secs(secs),
    )
}

#[test]
fn eventually_passes_when_the_predicate_holds_inside_the_deadline() {
    let t = Tb::default()
        .phase(0.0, "a", Phase::Ready)
        .outage(10.0, 40.0)
        .phase(20.0, "a", Phase::Provisioning)
        .phase(55.0, "a", Phase::Ready)
        .build();
    let o = ready_within(60).evaluate(&t);
    assert!(o.passed, "{}", o.diagnosis());
    assert_eq!(o.message, "held at 55s, 15s after fault f1 ended");
    assert_eq!(
        o.window,
        Some(WindowMs {
            from_ms: 40_000,
            to_ms: 100_000
        })
    );
}

#[test]
fn eventually_fails_when_the_predicate_holds_only_after_the_deadline() {
    let t = Tb::default()
        .phase(0.0, "a", Phase::Ready)
        .outage(10.0, 40.0)
        .phase(20.0, "a", Phase::Error)
        .phase(200.0, "a", Phase::Ready)
        .build();
    let o = ready_within(60).evaluate(&t);
    assert!(!o.passed);
    assert_eq!(o.message, "did not hold by the deadline at 100s");
    assert_eq!(o.last_seen.len(), 1);
    assert_eq!(o.last_seen[0].phase.as_deref(), Some(Phase::Error.name()));
    let d = o.diagnosis();
    assert!(
        d.contains("check 'sandbox returns to Ready' [R9] FAILED in window 40s .. 100s"),
        "{d}"
    );
    assert!(d.contains("OpenShellSandbox/a phase=Error"), "{d}");
}

#[test]
fn eventually_within_zero_judges_the_instant_of_the_anchor_only() {
    let t = Tb::default()
        .phase(0.0, "a", Phase::Provisioning)
        .mark(5.0, "verified")
        .phase(5.0, "a", Phase::Ready)
        .build();
    let c = Check::eventually(
        "Ready when verified",
        &["R1"],
        Predicate::phase(sandbox(), &[Phase::Ready]),
        Anchor::marker(&Marker::new("verified")),
        Duration::ZERO,
    );
    let o = c.evaluate(&t);
    assert!(!o.passed);
    assert_eq!(
        o.last_seen[0].phase.as_deref(),
        Some(Phase::Provisioning.name())
    );
}

#[test]
fn eventually_says_when_the_run_ended_before_the_deadline() {
    let t = Tb::default()
        .outage(10.0, 40.0)
        .phase(41.0, "a", Phase::Error)
        .build();
    let o = ready_within(60).evaluate(&t);
    assert!(!o.passed);
    assert!(o.message.contains("end of the run at 41s"), "{}", o.message);
}

#[test]
fn a_check_anchored_on_an_event_that_never_happened_fails_and_says_so() {
    let t = Tb::default().phase(0.0, "a", Phase::Ready).build();
    let o = ready_within(60).evaluate(&t);
    assert!(!o.passed);
    assert_eq!(
        o.message,
        "fault f1 ended never happened in this run, so the check could not be evaluated"
    );
}

#[test]
fn never_passes_when_the_predicate_stays_false_in_the_window() {
    let t = Tb::default()
        .phase(0.0, "a", Phase::Ready)
        .outage(10.0, 40.0)
        .phase(20.0, "a", Phase::Provisioning)
        .phase(45.0, "a", Phase::Error) // after the window: not this check's business
        .build();
    let c = Check::never(
        "no Error during the outage",
        &["R9"],
        Predicate::phase(sandbox(), &[Phase::Error]),
        Window::fault(&FaultKey::new("f1")),
    );
    let o = c.evaluate(&t);
    assert!(o.passed, "{}", o.diagnosis());
}

#[test]
fn never_fails_at_the_first_instant_the_predicate_holds() {
    let t = Tb::default()
        .phase(0.0, "a", Phase::Ready)
        .outage(10.0, 40.0)
        .phase(21.5, "a", Phase::Error)
        .build();
    let c = Check::never(
        "no Error during the outage",
        &["R9"],
        Predicate::phase(sandbox(), &[Phase::Error]),
        Window::fault(&FaultKey::new("f1")),
    );
    let o = c.evaluate(&t);
    assert!(!o.passed);
    assert_eq!(o.message, "it held at 21.500s");
    assert_eq!(o.last_seen[0].phase.as_deref(), Some(Phase::Error.name()));
}

#[test]
fn holds_until_passes_when_the_predicate_holds_across_the_whole_span() {
    let t = Tb::default()
        .pod(0.0, "p", "u1", "Running", 0)
        .outage(10.0, 40.0)
        .pod(20.0, "p", "u1", "Running", 0)
        .mark(50.0, "checked")
        .pod(60.0, "p", "u1", "Failed", 0)
        .build();
    let c = Check::holds_until(
        "pod keeps running",
        &["R9"],
        Predicate::phase(Selector::named("Pod", "p"), &["Running"]),
        Anchor::fault_start(&FaultKey::new("f1")),
        Anchor::marker(&Marker::new("checked")),
    );
    assert!(c.evaluate(&t).passed);
}

#[test]
fn holds_until_fails_when_the_predicate_breaks_inside_the_span() {
    let t = Tb::default()
        .pod(0.0, "p", "u1", "Running", 0)
        .outage(10.0, 40.0)
        .pod(30.0, "p", "u1", "Failed", 0)
        .mark(50.0, "checked")
        .build();
    let c = Check::holds_until(
        "pod keeps running",
        &["R9"],
        Predicate::phase(Selector::named("Pod", "p"), &["Running"]),
        Anchor::fault_start(&FaultKey::new("f1")),
        Anchor::marker(&Marker::new("checked")),
    );
    let o = c.evaluate(&t);
    assert!(!o.passed);
    assert_eq!(o.message, "it stopped holding at 30s");
    assert!(o.diagnosis().contains("agent=terminated(1)"));
}

fn ready_error_sequence() -> Check {
    Check::phase_sequence(
        "Ready through the restart",
        &["R9"],
        sandbox(),
        Window::whole_run(),
        &[Phase::Provisioning, Phase::Ready],
        &[Phase::Provisioning],
    )
}

#[test]
fn a_phase_sequence_passes_with_allowed_intermediates_and_repeats() {
    let t = Tb::default()
        .phase(0.0, "a", Phase::Provisioning)
        .phase(5.0, "a", Phase::Ready)
        .phase(10.0, "a", Phase::Provisioning)
        .phase(15.0, "a", Phase::Provisioning)
        .phase(30.0, "a", Phase::Ready)
        .build();
    let o = ready_error_sequence().evaluate(&t);
    assert!(o.passed, "{}", o.diagnosis());
    assert_eq!(
        o.message,
        "observed Provisioning@0s -> Ready@5s -> Provisioning@10s -> Ready@30s"
    );
}

#[test]
fn a_phase_sequence_fails_on_a_phase_that_is_not_allowed() {
    let t = Tb::default()
        .phase(0.0, "a", Phase::Provisioning)
        .phase(5.0, "a", Phase::Ready)
        .phase(10.0, "a", Phase::Error)
        .phase(30.0, "a", Phase::Ready)
        .build();
    let o = ready_error_sequence().evaluate(&t);
    assert!(!o.passed);
    assert!(
        o.message.ends_with(
            "Error after Ready is neither the next expected phase nor an allowed intermediate"
        ),
        "{}",
        o.message
    );
}

#[test]
fn a_phase_sequence_fails_when_it_stops_short_or_ends_elsewhere() {
    let stuck = Tb::default()
        .phase(0.0, "a", Phase::Provisioning)
        .phase(300.0, "a", Phase::Provisioning)
        .build();
    let o = ready_error_sequence().evaluate(&stuck);
    assert!(!o.passed);
    assert!(
        o.message
            .ends_with("it never reached Ready (stuck after Provisioning)"),
        "{}",
        o.message
    );

    let ends_elsewhere = Tb::default()
        .phase(0.0, "a", Phase::Provisioning)
        .phase(5.0, "a", Phase::Ready)
        .phase(9.0, "a", Phase::Provisioning)
        .build();
    let o = ready_error_sequence().evaluate(&ends_elsewhere);
    assert!(!o.passed);
    assert!(
        o.message.ends_with("it ended in Provisioning, not Ready"),
        "{}",
        o.message
    );
}

#[test]
fn a_phase_sequence_counts_deletion_as_a_phase() {
    let t = Tb::default()
        .phase(0.0, "a", Phase::Provisioning)
        .phase(5.0, "a", Phase::Ready)
        .deleted(9.0, GATEWAY_SANDBOX_KIND, None, "a")
        .build();
    let c = Check::phase_sequence(
        "deleted after Ready",
        &["R13"],
        sandbox(),
        Window::whole_run(),
        &["Provisioning", "Ready", "<deleted>"],
        &["Deleting"],
    );
    assert!(c.evaluate(&t).passed);
}

#[test]
fn a_count_of_observed_main_process_starts_passes_at_exactly_one() {
    let t = Tb::default()
        .observed(1.0, "main-starts", serde_json::json!(1))
        .build();
    let c = Check::count(
        "main process started once",
        &["R7"],
        Counted::Observed {
            key: "main-starts".into(),
        },
        None,
        Cmp::Eq,
        1,
    );
    assert!(c.evaluate(&t).passed);
}

#[test]
fn a_count_fails_on_a_replayed_workload_and_on_a_missing_observation() {
    let c = Check::count(
        "main process started once",
        &["R7"],
        Counted::Observed {
            key: "main-starts".into(),
        },
        None,
        Cmp::Eq,
        1,
    );
    let replayed = Tb::default()
        .observed(1.0, "main-starts", serde_json::json!(1))
        .observed(90.0, "main-starts", serde_json::json!(2))
        .build();
    let o = c.evaluate(&replayed);
    assert!(!o.passed);
    assert_eq!(o.message, "counted 2");
    assert_eq!(o.expected, "exactly 1 observed main-starts");

    let o = c.evaluate(&Tb::default().mark(0.0, "x").build());
    assert!(!o.passed);
    assert_eq!(o.message, "main-starts was never observed");
}

#[test]
fn a_count_of_incarnations_sees_a_replaced_pod() {
    let t = Tb::default()
        .pod(0.0, "p", "u1", "Running", 0)
        .outage(10.0, 40.0)
        .pod(12.0, "p", "u2", "Running", 0)
        .build();
    let at_most_one = Check::count(
        "pod never replaced",
        &["R9"],
        Counted::Incarnations {
            object: Selector::named("Pod", "p"),
        },
        None,
        Cmp::AtMost,
        1,
    );
    let o = at_most_one.evaluate(&t);
    assert!(!o.passed);
    assert_eq!(o.message, "counted 2");
    // Within the fault window: the pod alive when it opened and its replacement.
    let in_window = Check::count(
        "pods during the outage",
        &["R9"],
        Counted::Incarnations {
            object: Selector::named("Pod", "p"),
        },
        Some(Window::fault(&FaultKey::new("f1"))),
        Cmp::Eq,
        2,
    );
    assert!(in_window.evaluate(&t).passed);
}

#[test]
fn an_object_unchanged_through_the_window_is_one_incarnation() {
    let t = Tb::default()
        .pod(0.0, "p", "u1", "Running", 0)
        .outage(10.0, 40.0)
        .build();
    let c = Check::count(
        "pod never replaced",
        &["R9"],
        Counted::Incarnations {
            object: Selector::named("Pod", "p"),
        },
        Some(Window::fault(&FaultKey::new("f1"))),
        Cmp::Eq,
        1,
    );
    let o = c.evaluate(&t);
    assert!(o.passed, "{}", o.diagnosis());
    assert_eq!(o.last_seen[0].uid.as_deref(), Some("u1"));
}

#[test]
fn a_count_of_refused_actions_distinguishes_outcomes() {
    let t = Tb::default()
        .action(1.0, "start", ActionStatus::Started)
        .action(1.5, "start", ActionStatus::Refused)
        .action(2.0, "start", ActionStatus::Started)
        .action(2.5, "start", ActionStatus::Ok)
        .build();
    let refused = |n| {
        Check::count(
            "start refused",
            &["R8"],
            Counted::Actions {
                name: "start".into(),
                status: Some(ActionStatus::Refused),
            },
            None,
            Cmp::Eq,
            n,
        )
    };
    assert!(refused(1).evaluate(&t).passed);
    assert!(!refused(0).evaluate(&t).passed);
}

#[test]
fn predicates_on_conditions_containers_and_restarts_read_the_latest_state() {
    let t = Tb::default().pod(0.0, "p", "u1", "Failed", 4).build();
    let pod = || Selector::named("Pod", "p");
    let check = |p: Predicate| {
        Check::eventually("p", &["R14"], p, Anchor::RunStart, Duration::from_secs(1))
            .evaluate(&t)
            .passed
    };
    assert!(check(Predicate::Condition {
        object: pod(),
        type_: "Ready".into(),
        status: Some("False".into()),
        reason: Some("PodFailed".into()),
    }));
    assert!(!check(Predicate::Condition {
        object: pod(),
        type_: "Ready".into(),
        status: Some("True".into()),
        reason: None,
    }));
    assert!(check(Predicate::ContainerTerminated {
        object: pod(),
        container: Some("agent".into()),
        exit_code: Some(1),
    }));
    assert!(check(Predicate::ConditionMentions {
        object: pod(),
        type_: "Ready".into(),
        any_of: vec!["nothing".into(), "podfailed".into()],
    }));
    assert!(!check(Predicate::ConditionMentions {
        object: pod(),
        type_: "Ready".into(),
        any_of: vec!["certificate".into()],
    }));
    assert!(!check(Predicate::ContainerTerminated {
        object: pod(),
        container: Some("agent".into()),
        exit_code: Some(0),
    }));
    assert!(check(Predicate::RestartsAbove {
        object: pod(),
        max: 3
    }));
    assert!(!check(Predicate::RestartsAbove {
        object: pod(),
        max: 4
    }));
    assert!(check(Predicate::Exists { object: pod() }));
    assert!(!check(Predicate::Absent { object: pod() }));
    assert!(check(Predicate::All {
        predicates: vec![
            Predicate::Exists { object: pod() },
            Predicate::phase(pod(), &["Failed"]).negate().negate(),
        ]
    }));
    assert!(!check(Predicate::Any {
        predicates: vec![Predicate::phase(pod(), &["Running"])]
    }));
}

#[test]
fn absence_holds_once_the_last_matching_object_is_deleted() {
    let t = Tb::default()
        .pod(0.0, "p", "u1", "Running", 0)
        .deleted(5.0, "Pod", Some("openshell"), "p")
        .build();
    let c = Check::eventually(
        "no leaked pods",
        &["R13"],
        Predicate::Absent {
            object: Selector::kind("Pod").with_prefix("p"),
        },
        Anchor::RunStart,
        Duration::from_secs(10),
    );
    let o = c.evaluate(&t);
    assert!(o.passed, "{}", o.diagnosis());
    assert_eq!(o.message, "held at 5s, 5s after run start");
}

fn ledger_check() -> Check {
    Check::sentinels("workspace sentinels retained", &["R6"])
}

#[test]
fn sentinels_read_back_intact_are_stable_with_recovery_time() {
    let t = Tb::default()
        .sentinel(
            1.0,
            "s1",
            SentinelOp::Write,
            SentinelResult::Ok("t1".into()),
        )
        .sentinel(2.0, "s1", SentinelOp::Read, SentinelResult::Ok("t1".into()))
        .outage(10.0, 40.0)
        .sentinel(
            41.0,
            "s1",
            SentinelOp::Read,
            SentinelResult::Failed("not ready".into()),
        )
        .sentinel(
            47.0,
            "s1",
            SentinelOp::Read,
            SentinelResult::Ok("t1".into()),
        )
        .build();
    let o = ledger_check().evaluate(&t);
    assert!(o.passed, "{}", o.diagnosis());
    let s = &Ledger::from_timeline(&t).summaries()[0];
    assert_eq!(s.class, SentinelClass::Stable);
    assert_eq!(s.recovery_ms, Some(7_000));
    assert_eq!(s.failed_reads, 1);
}

#[test]
fn sentinels_are_classified_lost_corrupt_and_never_read() {
    let t = Tb::default()
        .sentinel(
            1.0,
            "lost",
            SentinelOp::Write,
            SentinelResult::Ok("a".into()),
        )
        .sentinel(
            1.0,
            "corrupt",
            SentinelOp::Write,
            SentinelResult::Ok("b".into()),
        )
        .sentinel(
            1.0,
            "unread",
            SentinelOp::Write,
            SentinelResult::Ok("c".into()),
        )
        .sentinel(
            1.0,
            "unacked",
            SentinelOp::Write,
            SentinelResult::Failed("exec refused".into()),
        )
        .outage(10.0, 40.0)
        .sentinel(50.0, "lost", SentinelOp::Read, SentinelResult::Missing)
        .sentinel(
            50.0,
            "corrupt",
            SentinelOp::Read,
            SentinelResult::Ok("B".into()),
        )
        .sentinel(
            50.0,
            "unread",
            SentinelOp::Read,
            SentinelResult::Failed("no".into()),
        )
        .build();
    let classes: Vec<(String, SentinelClass)> = Ledger::from_timeline(&t)
        .summaries()
        .into_iter()
        .map(|s| (s.key, s.class))
        .collect();
    assert_eq!(
        classes,
        vec![
            ("corrupt".to_string(), SentinelClass::Corrupt),
            ("lost".to_string(), SentinelClass::Lost),
            ("unread".to_string(), SentinelClass::NeverRead),
        ]
    );
    let o = ledger_check().evaluate(&t);
    assert!(!o.passed);
    assert!(
        o.message.starts_with("3 of 3 sentinels not intact"),
        "{}",
        o.message
    );
    assert!(o.message.contains("a:lost LOST"), "{}", o.message);
    assert!(
        o.message
            .contains("first bad read at 50s: read \"B\", wrote \"b\""),
        "{}",
        o.message
    );
}

#[test]
fn a_run_that_wrote_no_sentinel_fails_the_ledger_check() {
    let o = ledger_check().evaluate(&Tb::default().mark(0.0, "x").build());
    assert!(!o.passed);
    assert_eq!(o.message, "no sentinel was written");
}

#[test]
fn checks_survive_a_round_trip_through_json() {
    let checks = vec![
        ready_within(60),
        ready_error_sequence(),
        ledger_check(),
        Check::never(
            "n",
            &["R1"],
            Predicate::Any {
                predicates: vec![Predicate::Absent {
                    object: Selector::kind("Pod").with_label("a", "b"),
                }],
            },
            Window::new(
                Anchor::marker(&Marker::new("m")),
                Anchor::ActionEnd {
                    name: "x".into(),
                    nth: 2,
                },
            ),
        ),
    ];
    let text = serde_json::to_string(&checks).unwrap();
    let back: Vec<Check> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, checks);
}

/// The state an observer records for a sandbox while its gateway cannot be reached.
fn unreachable(name: &str) -> Event {
    Event::Object(crate::target::SandboxView::unreachable_state(
        name,
        "Connection refused",
    ))
}

#[test]
fn a_sandbox_whose_gateway_cannot_be_reached_is_not_ready_at_that_instant() {
    let t = Tb::default()
        .phase(0.0, "a", Phase::Ready)
        .outage(10.0, 40.0)
        .push(10.0, unreachable("a"))
        .mark(60.0, "verified")
        .build();
    let c = Check::eventually(
        "still Ready when recovery is verified",
        &["R1"],
        Predicate::phase(sandbox(), &[Phase::Ready]),
        Anchor::Marker {
            label: "verified".into(),
            nth: 1,
        },
        Duration::ZERO,
    );
    let o = c.evaluate(&t);
    assert!(
        !o.passed,
        "judged Ready on an unknown phase: {}",
        o.diagnosis()
    );
    assert!(
        o.last_seen.iter().any(|s| s.unobserved()),
        "the verdict shows the unknown state: {:?}",
        o.last_seen
    );
}

#[test]
fn a_sandbox_ready_only_long_after_the_gateway_returns_is_not_ready_at_once() {
    let t = Tb::default()
        .phase(0.0, "a", Phase::Ready)
        .outage(10.0, 40.0)
        .push(10.0, unreachable("a"))
        .phase(145.0, "a", Phase::Ready)
        .build();
    let c = Check::eventually(
        "Ready again within 30s of the gateway's return",
        &["R5"],
        Predicate::phase(sandbox(), &[Phase::Ready]),
        Anchor::fault_end(&FaultKey::new("f1")),
        Duration::from_secs(30),
    );
    let o = c.evaluate(&t);
    assert!(!o.passed, "{}", o.diagnosis());
}

#[test]
fn a_phase_sequence_treats_an_unreachable_gateway_as_a_gap_not_a_phase() {
    let t = Tb::default()
        .phase(0.0, "a", Phase::Provisioning)
        .push(2.0, unreachable("a"))
        .phase(5.0, "a", Phase::Provisioning)
        .phase(30.0, "a", Phase::Ready)
        .build();
    let o = ready_error_sequence().evaluate(&t);
    assert!(o.passed, "{}", o.diagnosis());
    assert_eq!(o.message, "observed Provisioning@0s -> Ready@30s");
}

#[test]
fn a_never_check_over_sampled_states_states_the_sampling_interval_in_its_verdict() {
    let never_error = Check::never(
        "no Error",
        &["R9"],
        Predicate::phase(sandbox(), &[Phase::Error]),
        Window::whole_run(),
    );
    let streamed = Tb::default().phase(0.0, "a", Phase::Ready).build();
    assert_eq!(never_error.evaluate(&streamed).message, "it never held");
    let sampled = Tb::default()
        .push(
            0.0,
            Event::Observation {
                key: crate::timeline::SAMPLING_INTERVAL_KEY.into(),
                subject: Some(GATEWAY_SANDBOX_KIND.into()),
                value: serde_json::json!(2000),
            },
        )
        .phase(0.0, "a", Phase::Ready)
        .build();
    let o = never_error.evaluate(&sampled);
    assert!(o.passed, "{}", o.diagnosis());
    assert_eq!(
        o.message,
        "it never held (OpenShellSandbox states were sampled every 2s: a shorter excursion may be unseen)"
    );
}

/// The state a Kubernetes watcher records for a pod once it has lost the API server.
fn api_unreachable_pod(name: &str, uid: &str) -> Event {
    let mut last = ObjectState::new("Pod", Some("openshell"), name);
    last.uid = Some(uid.to_string());
    Event::Object(last.api_unreachable())
}

#[test]
fn a_pod_whose_api_server_cannot_be_reached_is_not_running_at_that_instant() {
    let t = Tb::default()
        .pod(0.0, "p", "u1", "Running", 0)
        .push(10.0, api_unreachable_pod("p", "u1"))
        .mark(60.0, "verified")
        .build();
    let pod = Selector::named("Pod", "p");
    for predicate in [
        Predicate::phase(pod.clone(), &["Running"]),
        Predicate::Condition {
            object: pod.clone(),
            type_: "Ready".into(),
            status: Some("True".into()),
            reason: None,
        },
    ] {
        let c = Check::eventually(
            "still running when verified",
            &["R1"],
            predicate,
            Anchor::Marker {
                label: "verified".into(),
                nth: 1,
            },
            Duration::ZERO,
        );
        let o = c.evaluate(&t);
        assert!(
            !o.passed,
            "judged on the last state seen before the API server was lost: {}",
            o.diagnosis()
        );
        assert!(
            o.last_seen.iter().any(|s| s.unobserved()),
            "the verdict shows the unknown state: {:?}",
            o.last_seen
        );
    }
}

#[test]
fn a_pod_seen_again_after_the_api_server_returns_satisfies_the_predicate_again() {
    let t = Tb::default()
        .pod(0.0, "p", "u1", "Running", 0)
        .push(10.0, api_unreachable_pod("p", "u1"))
        .mark(10.0, "lost")
        .pod(50.0, "p", "u1", "Running", 0)
        .build();
    let c = Check::eventually(
        "running again within 45s of the loss",
        &["R1"],
        Predicate::phase(Selector::named("Pod", "p"), &["Running"]),
        Anchor::Marker {
            label: "lost".into(),
            nth: 1,
        },
        Duration::from_secs(45),
    );
    let o = c.evaluate(&t);
    assert!(o.passed, "{}", o.diagnosis());
}

#[test]
fn a_phase_sequence_treats_a_lost_api_server_as_a_gap_not_a_phase() {
    let t = Tb::default()
        .pod(0.0, "p", "u1", "Pending", 0)
        .push(2.0, api_unreachable_pod("p", "u1"))
        .pod(5.0, "p", "u1", "Pending", 0)
        .pod(30.0, "p", "u1", "Running", 0)
        .build();
    let c = Check::phase_sequence(
        "pod starts",
        &["R1"],
        Selector::named("Pod", "p"),
        Window::whole_run(),
        &["Pending", "Running"],
        &[] as &[&str],
    );
    let o = c.evaluate(&t);
    assert!(o.passed, "{}", o.diagnosis());
    assert_eq!(o.message, "observed Pending@0s -> Running@30s");
}

fn starts_of(sandbox: &str, during: Option<Window>, cmp: Cmp, n: u64) -> Check {
    Check::count(
        "starts",
        &["R7"],
        Counted::MainProcessStarts {
            sandbox: sandbox.into(),
        },
        during,
        cmp,
        n,
    )
}

#[test]
fn main_process_starts_are_counted_from_what_the_target_reported_in_the_window() {
    let t = Tb::default()
        .reports_starts()
        .started(1.0, "a", serde_json::json!(1))
        .started(1.0, "b", serde_json::json!(1))
        .mark(10.0, "before")
        .started(20.0, "a", serde_json::json!(2))
        .started(30.0, "a", serde_json::json!(3))
        .mark(30.0, "after")
        .build();
    let upto = |m: &str| Window::new(Anchor::RunStart, Anchor::marker(&Marker::owned(m.into())));
    assert!(starts_of("a", None, Cmp::Eq, 3).evaluate(&t).passed);
    assert!(starts_of("b", None, Cmp::Eq, 1).evaluate(&t).passed);
    assert!(
        starts_of("a", Some(upto("before")), Cmp::Eq, 1)
            .evaluate(&t)
            .passed
    );
    // A start stamped in the marker's millisecond counts, whichever was recorded first.
    assert!(
        starts_of("a", Some(upto("after")), Cmp::Eq, 3)
            .evaluate(&t)
            .passed
    );
    let between = Window::new(
        Anchor::marker(&Marker::owned("before".into())),
        Anchor::marker(&Marker::owned("after".into())),
    );
    let o = starts_of("a", Some(between), Cmp::Eq, 2).evaluate(&t);
    assert!(o.passed, "{}", o.diagnosis());
    // A sandbox whose main process never started: none reported, and the target reports.
    let o = starts_of("c", None, Cmp::Eq, 0).evaluate(&t);
    assert!(o.passed, "{}", o.diagnosis());
}

#[test]
fn main_process_starts_a_target_does_not_report_are_unknown_never_zero() {
    let silent = Tb::default().mark(0.0, "x").build();
    let o = starts_of("a", None, Cmp::Eq, 0).evaluate(&silent);
    assert!(!o.passed, "an unreported count passed as 0");
    assert!(
        o.message
            .starts_with("not known: the target does not report"),
        "{}",
        o.message
    );
    let lost = Tb::default()
        .reports_starts()
        .started(1.0, "a", serde_json::json!(1))
        .started(2.0, "a", serde_json::Value::Null)
        .build();
    let o = starts_of("a", None, Cmp::AtMost, 1).evaluate(&lost);
    assert!(!o.passed);
    assert!(o.message.contains("could no longer tell"), "{}", o.message);
}

#[test]
fn starts_without_a_mark_in_the_workspace_fail_the_workspace_check_not_the_count() {
    let marks_kept = |marked: u64| {
        Tb::default()
            .reports_starts()
            .started(1.0, "a", serde_json::json!(1))
            .started(50.0, "a", serde_json::json!(2))
            .observed(60.0, "start-marks:a", serde_json::json!(marked))
            .build()
    };
    let c = Check::count(
        "marks",
        &["R6"],
        Counted::UnmarkedStarts {
            sandbox: "a".into(),
            marks: "start-marks:a".into(),
        },
        None,
        Cmp::Eq,
        0,
    );
    let o = c.evaluate(&marks_kept(2));
    assert!(o.passed, "{}", o.diagnosis());
    // A workspace that lost the first start's mark: the count of starts is still right.
    let damaged = marks_kept(1);
    let o = c.evaluate(&damaged);
    assert!(!o.passed);
    assert_eq!(
        o.message,
        "counted 1: the target reported 2 starts by then, the workspace held 1 marks"
    );
    assert!(starts_of("a", None, Cmp::Eq, 2).evaluate(&damaged).passed);
    let o = c.evaluate(&Tb::default().reports_starts().build());
    assert!(!o.passed, "marks never read is not a pass");
}

// ---- not evaluated, and Ready means usable ------------------------------------------------

impl Tb {
    fn exec(self, at_s: f64, id: u64, sandbox: &str, status: ActionStatus) -> Self {
        self.push(
            at_s,
            Event::Action(ActionRecord {
                id,
                name: "exec".into(),
                subject: Some(sandbox.into()),
                status,
                detail: (status == ActionStatus::Refused).then(|| "relay not up".to_string()),
            }),
        )
    }

    fn stage(self, at_s: f64, stage: &str, status: crate::timeline::StageStatus) -> Self {
        self.push(
            at_s,
            Event::Stage(crate::timeline::StageRecord {
                stage: stage.into(),
                status,
                message: Some(
                    "[R11] gave up waiting for sandbox a to be Ready after 5m; last seen: x".into(),
                ),
                step: Some("create a Ready sandbox".into()),
                requirements: vec!["R11".into()],
            }),
        )
    }
}

fn usable(within_s: u64) -> Check {
    Check::usable_once_ready(
        "usable",
        &["R11"],
        "a",
        Anchor::action_end("create"),
        Duration::from_secs(within_s),
    )
}

#[test]
fn a_shell_that_works_at_ready_is_usable_and_says_how_soon() {
    let t = Tb::default()
        .action(0.0, "create", ActionStatus::Ok)
        .phase(2.0, "a", Phase::Ready)
        .exec(2.5, 7, "a", ActionStatus::Started)
        .exec(2.6, 7, "a", ActionStatus::Ok)
        .t;
    let o = usable(5).evaluate(&t);
    assert_eq!(o.status(), CheckStatus::Passed, "{}", o.diagnosis());
    assert!(o.message.contains("0.500s after Ready"), "{}", o.message);
}

#[test]
fn a_shell_that_refuses_past_the_bound_after_ready_fails_naming_ready_but_not_usable() {
    let mut tb =
        Tb::default()
            .action(0.0, "create", ActionStatus::Ok)
            .phase(2.0, "a", Phase::Ready);
    for n in 0..20 {
        let at = 2.0 + n as f64;
        tb = tb
            .exec(at, n, "a", ActionStatus::Started)
            .exec(at, n, "a", ActionStatus::Refused);
    }
    let t = tb
        .exec(22.0, 99, "a", ActionStatus::Started)
        .exec(22.0, 99, "a", ActionStatus::Ok)
        .t;
    let o = usable(5).evaluate(&t);
    assert_eq!(o.status(), CheckStatus::Failed, "{}", o.diagnosis());
    for said in [
        "Ready at 2s",
        "started at 22s, 20s after Ready",
        "refused 20 command(s) before, the first at 2s: relay not up",
        "Ready, but not usable",
    ] {
        assert!(o.message.contains(said), "{said}: {}", o.message);
    }
    // A shell that never works after Ready fails too; exec on another sandbox does not count.
    let never = Tb::default()
        .action(0.0, "create", ActionStatus::Ok)
        .phase(2.0, "a", Phase::Ready)
        .exec(3.0, 1, "a", ActionStatus::Refused)
        .exec(4.0, 2, "b", ActionStatus::Ok)
        .t;
    let o = usable(5).evaluate(&never);
    assert_eq!(o.status(), CheckStatus::Failed, "{}", o.diagnosis());
    assert!(o.message.contains("no command worked"), "{}", o.message);
}

#[test]
fn a_ready_reached_again_is_judged_from_its_own_turn_and_a_ready_held_through_the_anchor_from_the_anchor()
 {
    let again = |worked_s: f64| {
        Check::usable_once_ready(
            "usable again",
            &["R11"],
            "a",
            Anchor::marker(&Marker::new("fault-over")),
            Duration::from_secs(5),
        )
        .evaluate(
            &Tb::default()
                .phase(1.0, "a", Phase::Ready)
                .mark(10.0, "fault-over")
                // Refused while the sandbox recovers: not Ready, so not counted.
                .exec(11.0, 1, "a", ActionStatus::Started)
                .phase(11.5, "a", Phase::Provisioning)
                .exec(12.0, 1, "a", ActionStatus::Refused)
                .phase(30.0, "a", Phase::Ready)
                .exec(worked_s - 1.0, 2, "a", ActionStatus::Started)
                .exec(worked_s - 1.0, 2, "a", ActionStatus::Refused)
                .exec(worked_s, 3, "a", ActionStatus::Started)
                .exec(worked_s, 3, "a", ActionStatus::Ok)
                .t,
        )
    };
    let o = again(32.0);
    assert_eq!(o.status(), CheckStatus::Passed, "{}", o.diagnosis());
    assert!(o.message.contains("Ready at 30s"), "{}", o.message);
    let o = again(50.0);
    assert_eq!(o.status(), CheckStatus::Failed, "{}", o.diagnosis());
    for said in [
        "Ready at 30s",
        "20s after Ready",
        "refused 1 command(s) before, the first at 49s",
    ] {
        assert!(o.message.contains(said), "{said}: {}", o.message);
    }
    // Ready through the anchor and never left: counted from the anchor, not from 1 s.
    let held = Check::usable_once_ready(
        "usable again",
        &["R11"],
        "a",
        Anchor::marker(&Marker::new("fault-over")),
        Duration::from_secs(5),
    )
    .evaluate(
        &Tb::default()
            .phase(1.0, "a", Phase::Ready)
            .mark(10.0, "fault-over")
            .exec(12.0, 1, "a", ActionStatus::Started)
            .exec(12.0, 1, "a", ActionStatus::Ok)
            .t,
    );
    assert_eq!(held.status(), CheckStatus::Passed, "{}", held.diagnosis());
    assert!(held.message.contains("Ready at 10s"), "{}", held.message);
}

#[test]
fn a_sandbox_never_ready_leaves_ready_means_usable_not_evaluated_whatever_the_steps_did() {
    let t = Tb::default()
        .action(0.0, "create", ActionStatus::Ok)
        .phase(2.0, "a", Phase::Provisioning)
        .t;
    let o = usable(5).evaluate(&t);
    assert_eq!(o.status(), CheckStatus::NotEvaluated, "{}", o.diagnosis());
    assert!(
        o.not_evaluated.as_deref().unwrap().contains("never Ready"),
        "{}",
        o.diagnosis()
    );
}

#[test]
fn a_check_whose_anchor_a_failed_step_never_reached_is_not_evaluated_naming_the_step() {
    use crate::timeline::StageStatus;
    let verified = Anchor::marker(&Marker::new("verified"));
    let check = Check::eventually(
        "ready again",
        &["R9"],
        Predicate::phase(Selector::named(GATEWAY_SANDBOX_KIND, "a"), &[Phase::Ready]),
        verified,
        Duration::from_secs(1),
    );
    let base = Tb::default().phase(1.0, "a", Phase::Provisioning);
    // Every step ran, yet the anchor is missing: the scenario broke its promise, a failure.
    let o = check.evaluate(&base.t.clone());
    assert_eq!(o.status(), CheckStatus::Failed, "{}", o.diagnosis());
    // A step failed before the anchor: nothing to judge, and the reason names the step.
    let t = Tb { t: base.t }.stage(300.0, "seed", StageStatus::Failed).t;
    let o = check.evaluate(&t);
    assert_eq!(o.status(), CheckStatus::NotEvaluated, "{}", o.diagnosis());
    assert!(!o.failed() && !o.passed);
    let why = o.not_evaluated.as_deref().unwrap();
    assert!(
        why.starts_with("step 'create a Ready sandbox' (stage seed) failed: [R11] gave up waiting")
            && !why.contains("last seen")
            && why.contains("marker 'verified' never happened"),
        "{why}"
    );
    assert!(
        o.diagnosis().contains("[R9] not evaluated: step"),
        "{}",
        o.diagnosis()
    );
}

#[test]
fn after_a_failed_step_missing_evidence_is_not_evaluated_but_evidence_against_still_fails() {
    use crate::timeline::StageStatus;
    let shell = Check::count(
        "shell",
        &["R9"],
        Counted::Observed {
            key: "shell-usable:a".into(),
        },
        None,
        Cmp::Eq,
        1,
    );
    let stopped = Tb::default()
        .sentinel(1.0, "s", SentinelOp::Write, SentinelResult::Ok("v".into()))
        .stage(2.0, "seed", StageStatus::Failed);
    let t = stopped.t.clone();
    // Never observed, never read: not evaluated.
    assert_eq!(shell.evaluate(&t).status(), CheckStatus::NotEvaluated);
    assert_eq!(
        Check::sentinels("s", &["R6"]).evaluate(&t).status(),
        CheckStatus::NotEvaluated
    );
    // Observed 0 and a sentinel read back missing are evidence: they fail.
    let t = Tb { t }
        .observed(3.0, "shell-usable:a", serde_json::json!(0))
        .sentinel(3.0, "s", SentinelOp::Read, SentinelResult::Missing)
        .t;
    assert_eq!(shell.evaluate(&t).status(), CheckStatus::Failed);
    assert_eq!(
        Check::sentinels("s", &["R6"]).evaluate(&t).status(),
        CheckStatus::Failed
    );
    // A write the product refused is evidence too, step or no step.
    let refused = Tb::default()
        .sentinel(
            1.0,
            "s",
            SentinelOp::Write,
            SentinelResult::Failed("exit 1".into()),
        )
        .stage(2.0, "seed", StageStatus::Failed)
        .t;
    let o = Check::sentinels("s", &["R6"]).evaluate(&refused);
    assert_eq!(o.status(), CheckStatus::Failed, "{}", o.diagnosis());
    assert!(
        o.message.contains("the writes failed: a:s exit 1"),
        "{}",
        o.message
    );
}

mod capped_backoff {
    use super::*;
    use crate::retries::{ATTEMPTS_KEY, Attempt, RetryOp};

    fn check() -> Check {
        Check::capped_backoff(
            "session back-off",
            &["R5"],
            "s1",
            RetryOp::Session,
            Duration::from_secs(30),
            Duration::from_secs(10),
            Duration::from_secs(1),
        )
    }

    /// Session attempts failing at these seconds, then one success.
    fn attempts(failed_at: &[u64], ok_at: u64) -> serde_json::Value {
        let at = |s: u64, ok| Attempt {
            op: RetryOp::Session,
            at_unix_ms: 1_000_000 + s * 1000,
            ok,
        };
        let mut a: Vec<Attempt> = failed_at.iter().map(|s| at(*s, false)).collect();
        a.push(at(ok_at, true));
        serde_json::to_value(a).unwrap()
    }

    fn judged(value: serde_json::Value) -> CheckOutcome {
        let t = Tb::default()
            .push(
                1.0,
                Event::Observation {
                    key: ATTEMPTS_KEY.into(),
                    subject: Some("s1".into()),
                    value,
                },
            )
            .t;
        check().evaluate(&t)
    }

    #[test]
    fn reconnects_that_grow_to_the_cap_and_stay_there_pass() {
        let o = judged(attempts(&[0, 1, 3, 7, 15, 31, 61, 91], 121));
        assert!(o.passed, "{}", o.message);
        assert!(o.message.contains("longest 30s"), "{}", o.message);
    }

    #[test]
    fn a_back_off_that_keeps_doubling_past_the_cap_fails_naming_the_gap() {
        let o = judged(attempts(&[0, 1, 3, 7, 15, 31, 63], 127));
        assert!(!o.passed);
        // 1, 2, 4, 8 and 16 s are within the cap; the 32 s after 31 s, before a retry that was
        // refused again, are not.
        assert!(
            o.message.contains(
                "failed 31s after the first logged attempt was not followed by a retry, refused \
                 again, until 32s later, more than 31s"
            ),
            "{}",
            o.message
        );
    }

    #[test]
    fn a_sleep_2_s_over_the_cap_fails_before_a_refused_retry_and_passes_before_a_success() {
        // 30 s sleeps, then one of 32 s: a refused retry takes a round trip, not an attempt.
        let o = judged(attempts(&[0, 30, 60, 92], 122));
        assert!(!o.passed);
        assert!(
            o.message.contains("until 32s later, more than 31s"),
            "{}",
            o.message
        );
        // The same 32 s before the attempt that worked may be a 30 s sleep and a 2 s attempt.
        let o = judged(attempts(&[0, 30, 60], 92));
        assert!(o.passed, "{}", o.message);
    }

    #[test]
    fn a_slow_recovery_after_the_last_failure_fails_even_within_the_cap() {
        // The sleeps are capped, but the attempt after the gateway came back took 45 s.
        let o = judged(attempts(&[0, 1, 3], 48));
        assert!(!o.passed);
        assert!(o.message.contains("until 45s later"), "{}", o.message);
    }

    #[test]
    fn attempts_never_read_or_unreadable_are_not_a_pass() {
        let o = check().evaluate(&Tb::default().phase(1.0, "s1", Phase::Ready).t);
        assert!(!o.passed);
        assert!(o.message.contains("never read"), "{}", o.message);
        let o = judged(serde_json::json!({"unavailable": "logs are forbidden"}));
        assert!(!o.passed);
        assert!(o.message.contains("logs are forbidden"), "{}", o.message);
    }

    #[test]
    fn other_operations_and_a_supervisor_that_never_failed_leave_nothing_to_judge() {
        let bootstrap_only = serde_json::to_value(vec![
            Attempt {
                op: RetryOp::Bootstrap,
                at_unix_ms: 0,
                ok: false,
            },
            Attempt {
                op: RetryOp::Bootstrap,
                at_unix_ms: 600_000,
                ok: false,
            },
        ])
        .unwrap();
        let o = judged(bootstrap_only);
        assert!(o.passed, "{}", o.message);
        assert!(
            o.message.contains("no failed session attempt"),
            "{}",
            o.message
        );
    }
}
