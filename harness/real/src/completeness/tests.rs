use super::*;
use conformance_core::target::SandboxView;

/// A commit line as our gateway model logs it, read with the kubelet's timestamp.
const MODEL_LINE: &str = "2026-12-03T18:50:01.835001234Z INFO openshell_server::compute: Sandbox phase changed sandbox_id=5f2c sandbox_name=main-gw-1a2b3c4d old_phase=Ready new_phase=Provisioning reason=\"supervisor session ended\"";

/// The same commit as real OpenShell v0.0.111 logs it (tracing's default format, with its
/// colour codes), read with the kubelet's timestamp.
const REAL_LINE: &str = "2026-12-03T18:50:01.835001234Z \u{1b}[2m2026-12-03T18:50:01.834963Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mopenshell_server::compute\u{1b}[0m\u{1b}[2m:\u{1b}[0m Sandbox phase changed \u{1b}[3msandbox_id\u{1b}[0m\u{1b}[2m=\u{1b}[0m5f2c \u{1b}[3msandbox_name\u{1b}[0m\u{1b}[2m=\u{1b}[0mmain-gw-1a2b3c4d \u{1b}[3mold_phase\u{1b}[0m\u{1b}[2m=\u{1b}[0mReady \u{1b}[3mnew_phase\u{1b}[0m\u{1b}[2m=\u{1b}[0mProvisioning";

fn commit(sandbox: &str, from: Phase, to: Phase, at: i64) -> PhaseCommit {
    PhaseCommit {
        logged_unix_ms: Some(at),
        sandbox: sandbox.into(),
        from,
        to,
    }
}

#[test]
fn the_models_and_real_openshells_commit_lines_read_as_the_same_commit() {
    let want = vec![commit(
        "main-gw-1a2b3c4d",
        Phase::Ready,
        Phase::Provisioning,
        1_796_323_801_835,
    )];
    assert_eq!(phase_commits(MODEL_LINE), want);
    assert_eq!(phase_commits(REAL_LINE), want);
    // Without the kubelet's stamp the gateway's own is taken.
    let own = REAL_LINE.split_once(' ').unwrap().1;
    assert_eq!(
        phase_commits(own)[0].logged_unix_ms,
        Some(1_796_323_801_834)
    );
    // Other lines are no commits.
    let log = format!(
        "{MODEL_LINE}\n2026-12-03T18:50:02Z INFO x: supervisor session: accepted sandbox_id=5f2c\n"
    );
    assert_eq!(phase_commits(&log).len(), 1);
}

/// A recorder with the wall-clock observation at 0 ms = `zero` (ms since the epoch).
fn recorder(zero: i64) -> Recorder {
    let rec = Recorder::new();
    rec.record(Event::Observation {
        key: crate::completeness::WALL_CLOCK_KEY.into(),
        subject: None,
        value: serde_json::json!(zero),
    });
    rec
}

fn seen(rec: &Recorder, name: &str, phase: Phase) {
    rec.observe(
        SandboxView {
            name: name.into(),
            phase,
            ..SandboxView::default()
        }
        .to_state(),
    );
}

#[test]
fn every_logged_commit_in_order_among_the_recorded_phases_is_complete_and_a_skipped_one_is_missed()
{
    let rec = recorder(0);
    for p in [Phase::Provisioning, Phase::Ready] {
        seen(&rec, "a", p);
    }
    rec.observe(SandboxView::unreachable_state("a", "connection refused"));
    seen(&rec, "a", Phase::Ready);
    let t = rec.snapshot();
    let before = [
        commit("a", Phase::Unspecified, Phase::Provisioning, 1),
        commit("a", Phase::Provisioning, Phase::Ready, 2),
    ];
    assert!(missed_commits(&t, &before).is_empty());
    // The gateway left Ready and came back while the stream was down; the timeline shows Ready
    // on both sides of the gap and nothing between.
    let all = [
        before[0].clone(),
        before[1].clone(),
        commit("a", Phase::Ready, Phase::Provisioning, 3),
        commit("a", Phase::Provisioning, Phase::Ready, 4),
    ];
    assert_eq!(missed_commits(&t, &all), [&all[2]]);
}

#[tokio::test(start_paused = true)]
async fn a_missed_commit_is_an_error_naming_it_where_it_falls_on_the_timeline_and_the_gap() {
    let rec = recorder(1_000_000);
    seen(&rec, "a", Phase::Ready);
    tokio::time::sleep(Duration::from_secs(2)).await;
    rec.observe(SandboxView::unreachable_state("a", "connection refused"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    seen(&rec, "a", Phase::Ready);
    let log = GatewayLogRead {
        text: [
            "1970-01-01T00:16:43.000Z INFO c: Sandbox phase changed sandbox_name=a old_phase=Ready new_phase=Provisioning",
            "1970-01-01T00:16:44.000Z INFO c: Sandbox phase changed sandbox_name=a old_phase=Provisioning new_phase=Ready",
        ]
        .join("\n"),
        unreadable: vec![],
    };
    let sandboxes = BTreeSet::from(["a".to_string()]);
    let e = verify(&rec, &log, &sandboxes, Duration::from_secs(1))
        .await
        .unwrap_err();
    let want = "observer missed 1 of the 2 phase commits the gateway logged for this case's sandboxes: Ready -> Provisioning of sandbox a, logged by the gateway at 1970-01-01T00:16:43.000Z (3.000s on the timeline, inside the gap the timeline notes from 2.000s to 4.000s)";
    assert_eq!(conformance_core::error::one_line(&e), want);
    assert!(noted_missed(&rec.snapshot()), "the timeline says so too");
}

#[tokio::test(start_paused = true)]
async fn a_commit_the_observer_records_late_is_waited_for_and_all_commits_seen_is_noted() {
    let rec = recorder(0);
    seen(&rec, "a", Phase::Provisioning);
    let log = GatewayLogRead {
        text: "1970-01-01T00:00:01Z INFO c: Sandbox phase changed sandbox_name=a old_phase=Provisioning new_phase=Ready".into(),
        unreadable: vec![],
    };
    let late = rec.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        seen(&late, "a", Phase::Ready);
    });
    let sandboxes = BTreeSet::from(["a".to_string()]);
    verify(&rec, &log, &sandboxes, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(
        crate::tests::notes(&rec).contains(
            &"all 1 phase commits the gateway logged for this case's sandboxes (a) are on the timeline"
                .to_string()
        ),
        "{:?}",
        crate::tests::notes(&rec)
    );
}

#[tokio::test(start_paused = true)]
async fn a_gateway_that_logs_no_commit_is_said_on_the_timeline_not_passed_silently() {
    let rec = recorder(0);
    seen(&rec, "a", Phase::Ready);
    let log = GatewayLogRead {
        text: String::new(),
        unreadable: vec!["openshell/openshell-0/gateway: 403 Forbidden".into()],
    };
    let sandboxes = BTreeSet::from(["a".to_string()]);
    verify(&rec, &log, &sandboxes, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        crate::tests::notes(&rec),
        [
            "the gateway logged no phase commit (`Sandbox phase changed`) of this case's sandboxes (a); parts of the gateway's log could not be read: openshell/openshell-0/gateway: 403 Forbidden: whether the observer missed one is not checked"
        ]
    );
}

/// Records that `name`'s WatchSandbox stream went `state` (connected or disconnected).
fn stream(rec: &Recorder, name: &str, state: &str) {
    rec.record(Event::Observation {
        key: crate::watch::STREAM_STATE_KEY.into(),
        subject: Some(format!("{GATEWAY_SANDBOX_KIND}/{name}")),
        value: serde_json::json!(state),
    });
}

#[tokio::test(start_paused = true)]
async fn a_commit_logged_inside_a_gap_is_not_matched_by_a_phase_recorded_before_the_gap_but_taken_from_the_log()
 {
    // Creation records Provisioning twice (its conditions changed) before Ready; the gateway
    // logs no commit for Ready at creation. Then the stream is down from 2 s to 4 s, and a
    // restarted gateway commits Ready -> Provisioning -> Ready inside that gap; the stream, back,
    // sends Ready, which the timeline already shows.
    let rec = recorder(0);
    for message in ["pod scheduled", "supervisor connecting"] {
        rec.observe(
            SandboxView {
                name: "a".into(),
                phase: Phase::Provisioning,
                message: Some(message.into()),
                ..SandboxView::default()
            }
            .to_state(),
        );
    }
    seen(&rec, "a", Phase::Ready);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stream(&rec, "a", crate::watch::DISCONNECTED);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stream(&rec, "a", crate::watch::CONNECTED);
    seen(&rec, "a", Phase::Ready);
    let commits = [
        commit("a", Phase::Unspecified, Phase::Provisioning, 0),
        commit("a", Phase::Ready, Phase::Provisioning, 3_000),
        commit("a", Phase::Provisioning, Phase::Ready, 3_500),
    ];
    let t = rec.snapshot();
    assert_eq!(
        missed_commits(&t, &commits),
        [&commits[1], &commits[2]],
        "the phases recorded at creation are no record of those committed in the gap"
    );
    let log = GatewayLogRead {
        text: [
            "1970-01-01T00:00:00.000Z INFO c: Sandbox phase changed sandbox_name=a old_phase=Unspecified new_phase=Provisioning",
            "1970-01-01T00:00:03.000Z INFO c: Sandbox phase changed sandbox_name=a old_phase=Ready new_phase=Provisioning",
            "1970-01-01T00:00:03.500Z INFO c: Sandbox phase changed sandbox_name=a old_phase=Provisioning new_phase=Ready",
        ]
        .join("\n"),
        unreadable: vec![],
    };
    let sandboxes = BTreeSet::from(["a".to_string()]);
    verify(&rec, &log, &sandboxes, Duration::from_secs(1))
        .await
        .unwrap();
    let t = rec.snapshot();
    let from_log: Vec<u64> = t
        .entries
        .iter()
        .filter(|e| {
            matches!(&e.event, Event::Object(o)
                if o.conditions.iter().any(|c| c.reason.as_deref() == Some(FROM_LOG_REASON)))
        })
        .map(|e| e.at_ms)
        .collect();
    assert_eq!(
        from_log,
        [3_000, 3_500],
        "the gap's commits, when they were logged"
    );
}

#[tokio::test(start_paused = true)]
async fn the_state_the_stream_sends_when_back_follows_the_commits_taken_from_the_log() {
    // A restarted gateway commits Ready -> Provisioning while the stream is down (2 s to 4 s)
    // and is Ready again through its supervisor's session, which it logs no commit for; the
    // stream, back, sends Ready. Taken from the log, the Provisioning must not become the last
    // word on the timeline: the Ready sent when the stream was back follows it.
    let rec = recorder(0);
    seen(&rec, "a", Phase::Provisioning);
    seen(&rec, "a", Phase::Ready);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stream(&rec, "a", crate::watch::DISCONNECTED);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stream(&rec, "a", crate::watch::CONNECTED);
    assert!(
        rec.observe_after_gap(
            SandboxView {
                name: "a".into(),
                phase: Phase::Ready,
                ..SandboxView::default()
            }
            .to_state()
        ),
        "recorded though unchanged"
    );
    let log = GatewayLogRead {
        text: [
            "1970-01-01T00:00:00.000Z INFO c: Sandbox phase changed sandbox_name=a old_phase=Unspecified new_phase=Provisioning",
            "1970-01-01T00:00:03.000Z INFO c: Sandbox phase changed sandbox_name=a old_phase=Ready new_phase=Provisioning",
        ]
        .join("\n"),
        unreadable: vec![],
    };
    let sandboxes = BTreeSet::from(["a".to_string()]);
    verify(&rec, &log, &sandboxes, Duration::from_secs(1))
        .await
        .unwrap();
    let phases: Vec<(u64, String)> = rec
        .snapshot()
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Object(o) => Some((e.at_ms, o.phase.clone().unwrap_or_default())),
            _ => None,
        })
        .collect();
    let want: Vec<(u64, String)> = [
        (0, "Provisioning"),
        (0, "Ready"),
        (3_000, "Provisioning"),
        (4_000, "Ready"),
    ]
    .map(|(at, p)| (at, p.to_string()))
    .to_vec();
    assert_eq!(phases, want);
}
