//! What the emulated target's observers put on the timeline: every change of the gateway's
//! sandbox record, however brief, and an unknown phase while the gateway cannot be reached.

use std::time::Duration;

use crate::spec::Selection;
use crate::target::EmulatedTarget;
use conformance_core::checks::{Anchor, Check, Predicate, Selector, Window};
use conformance_core::engine::recheck;
use conformance_core::phase::Phase;
use conformance_core::target::{Fault, SandboxSpec, Target};
use conformance_core::timeline::{Event, GATEWAY_SANDBOX_KIND, Recorder, Timeline};

const NAME: &str = "seen";

/// An installed contract target on the combined topology, observed into a fresh recorder, with
/// one sandbox that has become Ready.
async fn ready_sandbox() -> (
    EmulatedTarget,
    Recorder,
    conformance_core::target::Observers,
) {
    let topos = conformance_core::topology::Topologies::builtin();
    let topo = topos.get("combined").unwrap();
    let t = EmulatedTarget::start(Selection::contract(), topo);
    t.install(topo).await.unwrap();
    let rec = Recorder::new();
    let obs = t.observe(rec.clone()).await.unwrap();
    t.create_sandbox(&SandboxSpec {
        name: NAME.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let view = t.get_sandbox(NAME).await.unwrap();
        if view.as_ref().is_some_and(|v| v.phase == Phase::Ready) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "create: sandbox not Ready after 120s; last seen: {view:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    (t, rec, obs)
}

fn sandbox() -> Selector {
    Selector::named(GATEWAY_SANDBOX_KIND, NAME)
}

/// The verdicts of `checks` over what `rec` holds now.
fn judge(rec: &Recorder, checks: Vec<Check>) -> Vec<(bool, String)> {
    rec.record(Event::CheckPlan { checks });
    let t: Timeline = rec.snapshot();
    recheck(&t)
        .outcomes
        .into_iter()
        .map(|o| (o.passed, o.message))
        .collect()
}

fn gateway_phases(rec: &Recorder) -> Vec<String> {
    rec.snapshot()
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Object(o) if o.kind == GATEWAY_SANDBOX_KIND => o.phase.clone(),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_ready_error_ready_excursion_in_one_instant_is_on_the_timeline_and_fails_a_never_error_check()
 {
    let (t, rec, _obs) = ready_sandbox().await;
    // Two writes of the record with no time and no await between them: no sampler can see
    // the Error in between, only a hook on the store can.
    {
        let gw = t.client.connect().unwrap();
        let mut core = gw.core();
        gw.commit(&mut core, NAME, |_, r| r.phase = Phase::Error);
        gw.commit(&mut core, NAME, |_, r| r.phase = Phase::Ready);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let phases = gateway_phases(&rec);
    assert!(
        phases.windows(3).any(|w| w == ["Ready", "Error", "Ready"]),
        "the excursion is missing from the timeline: {phases:?}"
    );
    let verdicts = judge(
        &rec,
        vec![Check::never(
            "the sandbox never turns Error",
            &["R1"],
            Predicate::phase(sandbox(), &[Phase::Error]),
            Window::whole_run(),
        )],
    );
    assert!(!verdicts[0].0, "never Error passed: {verdicts:?}");
}

#[tokio::test(start_paused = true)]
async fn while_the_gateway_is_held_at_zero_replicas_the_sandbox_is_not_judged_ready_on_its_last_known_phase()
 {
    let (t, rec, _obs) = ready_sandbox().await;
    t.inject(&Fault::GatewayStop).await.unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    rec.mark("verified");
    let last = rec
        .snapshot()
        .entries
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::Object(o) if o.kind == GATEWAY_SANDBOX_KIND => Some(o.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(last.phase.as_deref(), Some("Unknown"), "{}", last.summary());
    assert!(last.unobserved(), "{}", last.summary());
    let at_verified = Check::eventually(
        "the sandbox is still Ready when recovery is verified",
        &["R1"],
        Predicate::phase(sandbox(), &[Phase::Ready]),
        Anchor::Marker {
            label: "verified".into(),
            nth: 1,
        },
        Duration::ZERO,
    );
    let verdicts = judge(&rec, vec![at_verified]);
    assert!(
        !verdicts[0].0,
        "judged Ready while the gateway is unreachable: {verdicts:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn once_the_gateway_is_back_the_sandbox_is_ready_again_only_when_the_gateway_says_so() {
    let (t, rec, _obs) = ready_sandbox().await;
    t.inject(&Fault::GatewayStop).await.unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    t.restore(&Fault::GatewayStop).await.unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let phases = gateway_phases(&rec);
    let unknown = phases.iter().position(|p| p == "Unknown");
    assert!(
        unknown.is_some_and(|i| phases[i..].iter().any(|p| p == "Ready")),
        "expected Ready, then Unknown during the outage, then Ready again: {phases:?}"
    );
}
