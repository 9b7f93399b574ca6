//! A lossy phase observer can never pass a case. A whole case runs through the engine against
//! a test double of the real target: the gateway stand-in of `watch.rs` (logging each phase it
//! commits, as the gateway does), the real WatchSandbox observer through a relay that a gateway
//! restart cuts, and the real completeness check over the stand-in's log. When the stand-in's
//! stream drops the first event after a reconnect (bug 5 of issue 30: the Ready -> Provisioning
//! of the restart never reached the timeline, and every check passed), the case is an
//! infrastructure error naming the missed commit; with every event delivered it passes.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use conformance_core::checks::{Anchor, Check, Predicate, Selector, Window};
use conformance_core::engine::{Engine, EngineOptions, Outcome};
use conformance_core::keys::FaultKey;
use conformance_core::phase::Phase;
use conformance_core::scenario::{Case, CaseInfo, Ctx, Params, Scenario, Stage, Step, StepResult};
use conformance_core::target::{
    Capability, ExecResult, Fault, Observers, SandboxSpec, SandboxView, Target, TargetError,
    TargetFactory, TargetInfo, TargetResult,
};
use conformance_core::timeline::{Event, GATEWAY_SANDBOX_KIND, ObjectState, Recorder};
use conformance_core::topology::{Topologies, Topology};
use conformance_openshell_api::v1::SandboxPhase;
use futures::future::BoxFuture;

use super::notes;
use super::watch::{Gateway, LABEL, RUN, Relay, fast, marking_fallback, sandbox, serve, until};
use crate::completeness::GatewayLogRead;
use crate::watch::{Expected, GatewayEndpoint, observe_phases};

/// The real target's parts that observe and judge observation, on a gateway stand-in.
struct Double {
    gw: Gateway,
    relay: Arc<Relay>,
    rec: Recorder,
    expected: Expected,
    created: Mutex<BTreeSet<String>>,
}

fn view(name: &str, phase: SandboxPhase) -> SandboxView {
    SandboxView {
        name: name.into(),
        phase: crate::watch::phase_of(phase as i32),
        ..SandboxView::default()
    }
}

#[async_trait]
impl Target for Double {
    fn info(&self) -> TargetInfo {
        info()
    }

    async fn install(&self, _t: &Topology) -> TargetResult<()> {
        Ok(())
    }

    async fn observe(&self, rec: Recorder) -> TargetResult<Observers> {
        rec.record(Event::Observation {
            key: crate::completeness::WALL_CLOCK_KEY.into(),
            subject: None,
            value: serde_json::json!(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as u64
            ),
        });
        let mut obs = Observers::default();
        obs.push(tokio::spawn(observe_phases(
            GatewayEndpoint {
                port: self.relay.port,
                tls: None,
            },
            RUN.to_string(),
            rec.clone(),
            fast(),
            self.expected.clone(),
            marking_fallback(&rec),
        )));
        Ok(obs)
    }

    async fn snapshot(&self) -> TargetResult<Vec<ObjectState>> {
        Ok(Vec::new())
    }

    /// Provisioning at once, Ready once its supervisor connects.
    async fn create_sandbox(&self, spec: &SandboxSpec) -> TargetResult<SandboxView> {
        self.created.lock().unwrap().insert(spec.name.clone());
        self.expected.expect(&spec.name);
        self.gw
            .put(sandbox(&spec.name, &LABEL, SandboxPhase::Provisioning));
        let (gw, name) = (self.gw.clone(), spec.name.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            gw.set_phase(&name, SandboxPhase::Ready);
        });
        Ok(view(&spec.name, SandboxPhase::Provisioning))
    }

    async fn get_sandbox(&self, name: &str) -> TargetResult<Option<SandboxView>> {
        let phase = self
            .gw
            .sandboxes
            .lock()
            .unwrap()
            .get(name)
            .map(|s| SandboxPhase::try_from(s.status.as_ref().unwrap().phase).unwrap());
        Ok(phase.map(|p| view(name, p)))
    }

    async fn exec(&self, _s: &str, _a: &[String]) -> TargetResult<ExecResult> {
        Err(TargetError::Unsupported("no exec in this double".into()))
    }

    async fn probe_exec(&self, _s: &str, _a: &[String]) -> TargetResult<ExecResult> {
        Err(TargetError::Unsupported("no exec in this double".into()))
    }

    async fn read_workspace(&self, _s: &str, _p: &str) -> TargetResult<Option<String>> {
        Ok(None)
    }

    async fn stop_sandbox(&self, _n: &str) -> TargetResult<()> {
        Ok(())
    }

    async fn start_sandbox(&self, _n: &str) -> TargetResult<()> {
        Ok(())
    }

    async fn delete_sandbox(&self, _n: &str) -> TargetResult<()> {
        Ok(())
    }

    /// The gateway goes away; the one that comes back has no supervisor session yet, so it
    /// commits Provisioning before the observer can reach it.
    async fn inject(&self, _f: &Fault) -> TargetResult<()> {
        self.relay.cut();
        let name = self.created.lock().unwrap().first().cloned().unwrap();
        until(
            "the observer records the outage",
            || super::watch::phases(&self.rec, &name),
            |p| p.last().map(String::as_str) == Some("unreachable"),
        )
        .await;
        self.gw.set_phase(&name, SandboxPhase::Provisioning);
        Ok(())
    }

    /// The gateway is reachable again; its sandbox turns Ready once the stream is back.
    async fn restore(&self, _f: &Fault) -> TargetResult<()> {
        self.relay.heal();
        let name = self.created.lock().unwrap().first().cloned().unwrap();
        until(
            "the stream is back",
            || notes(&self.rec),
            |n| {
                n.iter()
                    .any(|m| m.starts_with(&format!("the WatchSandbox stream of {name} is back")))
            },
        )
        .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.gw.set_phase(&name, SandboxPhase::Ready);
        Ok(())
    }

    async fn verify_observation(&self) -> TargetResult<()> {
        let log = GatewayLogRead {
            text: self.gw.log.lock().unwrap().join("\n"),
            unreadable: Vec::new(),
        };
        let created = self.created.lock().unwrap().clone();
        crate::completeness::verify(&self.rec, &log, &created, Duration::from_secs(2)).await
    }

    async fn teardown(&self) -> TargetResult<()> {
        Ok(())
    }
}

fn info() -> TargetInfo {
    TargetInfo {
        kind: "double".into(),
        capabilities: [Capability::GatewayRestart].into(),
        ..TargetInfo::default()
    }
}

struct Factory {
    gw: Gateway,
    relay: Arc<Relay>,
}

#[async_trait]
impl TargetFactory for Factory {
    fn info(&self) -> TargetInfo {
        info()
    }

    async fn provision(&self, _t: &Topology, rec: &Recorder) -> TargetResult<Arc<dyn Target>> {
        Ok(Arc::new(Double {
            gw: self.gw.clone(),
            relay: self.relay.clone(),
            rec: rec.clone(),
            expected: Expected::default(),
            created: Default::default(),
        }))
    }
}

const RESTART: FaultKey = FaultKey::new("restart");

fn seed(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name("main");
        ctx.create_sandbox(&SandboxSpec {
            name: name.clone(),
            ..SandboxSpec::default()
        })
        .await?;
        ctx.wait_phase(&name, &[Phase::Ready], Duration::from_secs(20))
            .await?;
        Ok(())
    })
}

fn restart(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        ctx.inject(&RESTART, Fault::GatewayRestart).await?;
        ctx.restore(&RESTART).await?;
        Ok(())
    })
}

/// Only the observer looks: a read of the sandbox here would record what the stream dropped.
fn settle(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        ctx.sleep(Duration::from_millis(500)).await;
        Ok(())
    })
}

fn checks(case: &CaseInfo) -> Vec<Check> {
    let main = Selector::named(GATEWAY_SANDBOX_KIND, &case.sandbox_name("main"));
    vec![
        Check::eventually(
            "Ready again after the restart",
            &["R9"],
            Predicate::phase(main.clone(), &[Phase::Ready]),
            Anchor::fault_end(&RESTART),
            Duration::from_secs(10),
        ),
        Check::never(
            "never Error",
            &["R9"],
            Predicate::phase(main, &[Phase::Error]),
            Window::whole_run(),
        ),
    ]
}

async fn run(lossy: bool) -> (conformance_core::engine::CaseReport, String) {
    let gw = Gateway::default();
    gw.drops_first_event_after_reconnect
        .store(lossy, Ordering::SeqCst);
    let addr = serve(gw.clone(), None).await;
    let factory = Factory {
        gw,
        relay: Arc::new(Relay::start(addr).await),
    };
    let scenario = Arc::new(Scenario {
        id: "lossy-observer".into(),
        title: "A gateway restart seen through a WatchSandbox stream".into(),
        requirements: vec!["R9".into()],
        requires: vec![Capability::GatewayRestart],
        steps: vec![
            Step::new(Stage::Seed, "create", seed),
            Step::new(Stage::Fault, "gateway restart", restart),
            Step::new(Stage::Verify, "settle", settle),
        ],
        checks,
    });
    let case = Case::new(
        scenario,
        Topologies::builtin().get("combined").unwrap().clone(),
        Params::default(),
    );
    let name = case.info(info()).sandbox_name("main");
    let engine = Engine::new(Arc::new(factory), EngineOptions::default());
    (engine.run_case(&case).await, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_drops_the_first_event_after_a_reconnect_makes_the_case_an_infrastructure_error_naming_the_missed_commit()
 {
    let (r, name) = run(true).await;
    // Every check passed: the timeline shows Ready on both sides of the outage.
    assert!(r.checks.iter().all(|c| c.passed), "{:#?}", r.checks);
    let Outcome::Error(reason) = &r.outcome else {
        panic!("expected an infrastructure error, got {:?}", r.outcome)
    };
    let want = format!(
        "observer missed 1 of the 4 phase commits the gateway logged for this case's sandboxes (phase observer: WatchSandbox stream): Ready -> Provisioning of sandbox {name}, logged by the gateway at "
    );
    assert!(reason.starts_with(&want), "{reason}");
    assert!(
        reason.contains(", inside the gap the timeline notes from "),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_delivers_every_event_passes_the_same_case() {
    let (r, name) = run(false).await;
    assert_eq!(r.outcome, Outcome::Passed, "{:#?}", r.timeline.to_jsonl());
    assert!(
        notes_of(&r.timeline).contains(&format!(
            "all 4 phase commits the gateway logged for this case's sandboxes ({name}) are on the timeline"
        )),
        "{:?}",
        notes_of(&r.timeline)
    );
}

fn notes_of(t: &conformance_core::timeline::Timeline) -> Vec<String> {
    t.entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Note { message } => Some(message.clone()),
            _ => None,
        })
        .collect()
}
