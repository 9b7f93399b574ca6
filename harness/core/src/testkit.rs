//! A scripted in-memory target and a small outage scenario, for testing the engine, checks and
//! reporters without a cluster (the engine's and the reports' tests use it).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::checks::{Anchor, Check, Predicate, Selector, Window};
use crate::engine::{Engine, EngineOptions};
use crate::keys::FaultKey;
use crate::phase::Phase;
use crate::scenario::{Case, CaseInfo, Ctx, Params, Scenario, Stage, Step, StepResult};
use crate::target::{
    Capability, ExecResult, Fault, Observers, SandboxSpec, SandboxView, Target, TargetError,
    TargetFactory, TargetInfo, TargetResult,
};
use crate::timeline::{Event, FaultPhase, GATEWAY_SANDBOX_KIND, ObjectState, Recorder, Timeline};
use crate::topology::{Topologies, Topology};
use async_trait::async_trait;
use futures::future::BoxFuture;

/// How the fake misbehaves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Quirk {
    None,
    /// A gateway outage makes Ready sandboxes Error for good (the reported bug).
    ErrorOnOutage,
    /// Workspace files vanish when the gateway comes back.
    LosesFiles,
    /// Installation fails (a missing tool, say).
    InstallFails,
    /// Ready sandboxes do not run commands: the shell exits non-zero.
    ShellBroken,
    /// Like OpenShell v0.0.111's supervisor on a loaded machine (docs/upstream-facts.md
    /// F2.14): a write reports exit 1 with no output, having written (`true`) or not.
    WriteStatusLost {
        took_effect: bool,
    },
    /// Restoring the gateway reports success but leaves it down.
    RestoreHasNoEffect,
    /// Like OpenShell v0.0.111 (docs/upstream-facts.md F1.18): the gateway keeps its record
    /// through the outage and, once back, answers it as stored (Ready, the same resource
    /// version) until it rewrites it a moment later; the sandbox's shell works only once it is
    /// Ready again.
    AnswersStoredRecord,
    /// Like OpenShell v0.0.111's CLI (docs/upstream-facts.md F6.3): create returns only once the
    /// sandbox is Ready, and fails if the gateway goes away first; bootstrap takes 20 s.
    CreateWaitsForReady,
    /// The gateway refuses this call (`create`, `stop` or `start`) with FailedPrecondition.
    Refuses(&'static str),
}

#[derive(Default)]
struct Sandbox {
    phase: Phase,
    files: BTreeMap<String, String>,
    /// Bumped on every write of the record, as the gateway's resource version is.
    version: u64,
    /// The record says Ready but no supervisor session serves the shell (a stored record).
    stale: bool,
}

impl Sandbox {
    fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
        self.version += 1;
        self.stale = false;
    }
}

struct FakeState {
    gateway_up: bool,
    sandboxes: BTreeMap<String, Sandbox>,
}

/// A target whose sandboxes become Ready 2 s after create and 5 s after the gateway returns.
struct Fake {
    quirk: Quirk,
    /// Its observers miss a phase its own record holds (a lossy observer).
    misses_a_phase: bool,
    state: Arc<Mutex<FakeState>>,
    restores: Arc<AtomicUsize>,
}

impl Fake {
    /// The refusal of `call` under [`Quirk::Refuses`] it.
    fn refuses(&self, call: &str) -> TargetResult<()> {
        match self.quirk {
            Quirk::Refuses(c) if c == call => Err(TargetError::refused(
                "FailedPrecondition",
                format!("{call} refused"),
            )),
            _ => Ok(()),
        }
    }

    fn view(&self, name: &str) -> Option<SandboxView> {
        let st = self.state.lock().unwrap();
        st.sandboxes.get(name).map(|s| SandboxView {
            name: name.to_string(),
            phase: s.phase.clone(),
            resource_version: Some(s.version.to_string()),
            ..SandboxView::default()
        })
    }

    fn set_phase_later(&self, name: String, after: Duration, from: Phase, to: Phase) {
        let state = self.state.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let mut st = state.lock().unwrap();
            if let Some(s) = st.sandboxes.get_mut(&name)
                && s.phase == from
            {
                s.set_phase(to);
            }
        });
    }

    fn states(&self) -> Vec<ObjectState> {
        let st = self.state.lock().unwrap();
        let mut out: Vec<ObjectState> = st
            .sandboxes
            .iter()
            .map(|(name, s)| {
                // Like a real observer: a gateway that cannot be asked shows no phase.
                if !st.gateway_up {
                    return SandboxView::unreachable_state(name, "connection refused");
                }
                let mut o = ObjectState::new(GATEWAY_SANDBOX_KIND, None, name);
                o.phase = Some(s.phase.name().to_string());
                o.resource_version = Some(s.version.to_string());
                o
            })
            .collect();
        let mut gw = ObjectState::new("StatefulSet", Some("openshell"), "openshell");
        gw.replicas = Some(crate::timeline::Replicas {
            desired: u32::from(st.gateway_up),
            ready: u32::from(st.gateway_up),
        });
        out.push(gw);
        out
    }
}

#[async_trait]
impl Target for Fake {
    fn info(&self) -> TargetInfo {
        info()
    }

    async fn install(&self, _t: &Topology) -> TargetResult<()> {
        if self.quirk == Quirk::InstallFails {
            return Err(TargetError::infra("helm not found on PATH; install helm 3"));
        }
        tokio::time::sleep(Duration::from_secs(20)).await;
        Ok(())
    }

    async fn observe(&self, rec: Recorder) -> TargetResult<Observers> {
        let me = Fake {
            quirk: self.quirk,
            misses_a_phase: self.misses_a_phase,
            state: self.state.clone(),
            restores: self.restores.clone(),
        };
        let mut obs = Observers::default();
        obs.push(tokio::spawn(async move {
            loop {
                for s in me.states() {
                    rec.observe(s);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }));
        Ok(obs)
    }

    async fn snapshot(&self) -> TargetResult<Vec<ObjectState>> {
        Ok(self.states())
    }

    async fn create_sandbox(&self, spec: &SandboxSpec) -> TargetResult<SandboxView> {
        self.refuses("create")?;
        self.state.lock().unwrap().sandboxes.insert(
            spec.name.clone(),
            Sandbox {
                phase: Phase::Provisioning,
                version: 1,
                ..Sandbox::default()
            },
        );
        let waits = self.quirk == Quirk::CreateWaitsForReady;
        let bootstrap = Duration::from_secs(if waits { 20 } else { 2 });
        self.set_phase_later(
            spec.name.clone(),
            bootstrap,
            Phase::Provisioning,
            Phase::Ready,
        );
        if waits {
            loop {
                {
                    let st = self.state.lock().unwrap();
                    if !st.gateway_up {
                        return Err(TargetError::infra("the create's watch stream broke"));
                    }
                    if st.sandboxes.get(&spec.name).map(|s| &s.phase) == Some(&Phase::Ready) {
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(self.view(&spec.name).unwrap())
    }

    async fn get_sandbox(&self, name: &str) -> TargetResult<Option<SandboxView>> {
        if !self.state.lock().unwrap().gateway_up {
            return Err(TargetError::infra(
                "gateway unreachable: connection refused",
            ));
        }
        Ok(self.view(name))
    }

    async fn exec(&self, sandbox: &str, argv: &[String]) -> TargetResult<ExecResult> {
        let mut st = self.state.lock().unwrap();
        let s = st
            .sandboxes
            .get_mut(sandbox)
            .ok_or_else(|| TargetError::refused("NotFound", "sandbox not found"))?;
        if s.phase != Phase::Ready || s.stale {
            return Err(TargetError::refused(
                "FailedPrecondition",
                "sandbox is not ready",
            ));
        }
        if self.quirk == Quirk::ShellBroken {
            return Ok(ExecResult {
                exit_code: 126,
                stdout: String::new(),
                stderr: "sh: cannot execute: permission denied".into(),
            });
        }
        // Just enough shell for sentinels: `... printf %s 'V' > PATH` and `cat PATH`, the
        // latter also after `echo WORD && `.
        let (said, script) = match argv[2].split_once(" && cat ") {
            Some((echo, path)) if echo.starts_with("echo ") => (
                format!("{}\n", &echo["echo ".len()..]),
                format!("cat {path}"),
            ),
            _ => (String::new(), argv[2].clone()),
        };
        if let Some((_, rest)) = script.split_once("printf %s '") {
            let (value, path) = rest.split_once("' > ").unwrap();
            if let Quirk::WriteStatusLost { took_effect } = self.quirk {
                if took_effect {
                    s.files.insert(path.to_string(), value.to_string());
                }
                return Ok(ExecResult {
                    exit_code: 1,
                    ..ExecResult::default()
                });
            }
            s.files.insert(path.to_string(), value.to_string());
            return Ok(ExecResult::default());
        }
        if let Some(path) = script.strip_prefix("cat ") {
            return Ok(match s.files.get(path) {
                Some(v) => ExecResult {
                    exit_code: 0,
                    stdout: format!("{said}{v}"),
                    stderr: String::new(),
                },
                None => ExecResult {
                    exit_code: 1,
                    stdout: said,
                    stderr: format!("cat: {path}: No such file or directory"),
                },
            });
        }
        Ok(ExecResult {
            exit_code: 127,
            stdout: String::new(),
            stderr: "sh: 1: unknown: not found".into(),
        })
    }

    async fn probe_exec(&self, sandbox: &str, argv: &[String]) -> TargetResult<ExecResult> {
        // The fake has no Kubernetes underneath; the gateway path stands in for it.
        self.exec(sandbox, argv).await
    }

    async fn read_workspace(&self, sandbox: &str, path: &str) -> TargetResult<Option<String>> {
        let st = self.state.lock().unwrap();
        Ok(st
            .sandboxes
            .get(sandbox)
            .and_then(|s| s.files.get(&format!("/sandbox/{path}")).cloned()))
    }

    async fn stop_sandbox(&self, _name: &str) -> TargetResult<()> {
        self.refuses("stop")?;
        Err(TargetError::Unsupported("stop".into()))
    }

    async fn start_sandbox(&self, _name: &str) -> TargetResult<()> {
        self.refuses("start")?;
        Err(TargetError::Unsupported("start".into()))
    }

    async fn delete_sandbox(&self, name: &str) -> TargetResult<()> {
        self.state.lock().unwrap().sandboxes.remove(name);
        Ok(())
    }

    async fn inject(&self, fault: &Fault) -> TargetResult<()> {
        match fault {
            Fault::GatewayStop => {
                // The reported bug: the gateway marks Ready sandboxes Error as it goes down,
                // while it can still be seen doing so.
                let set_ready_to = |to: Phase| {
                    let mut st = self.state.lock().unwrap();
                    for s in st.sandboxes.values_mut() {
                        if s.phase == Phase::Ready {
                            s.set_phase(to.clone());
                        }
                    }
                };
                if self.quirk == Quirk::ErrorOnOutage {
                    set_ready_to(Phase::Error);
                }
                tokio::time::sleep(Duration::from_secs(5)).await; // pods terminating
                self.state.lock().unwrap().gateway_up = false;
                if self.quirk == Quirk::AnswersStoredRecord {
                    // The record stays as stored; the sessions end with the gateway.
                    for s in self.state.lock().unwrap().sandboxes.values_mut() {
                        s.stale = s.phase == Phase::Ready;
                    }
                } else {
                    set_ready_to(Phase::Provisioning);
                }
                Ok(())
            }
            other => Err(TargetError::Unsupported(other.kind().into())),
        }
    }

    async fn restore(&self, fault: &Fault) -> TargetResult<()> {
        assert_eq!(fault, &Fault::GatewayStop);
        tokio::time::sleep(Duration::from_secs(3)).await; // gateway becoming ready
        self.restores.fetch_add(1, Ordering::SeqCst);
        if self.quirk == Quirk::RestoreHasNoEffect {
            return Ok(());
        }
        let names: Vec<String> = {
            let mut st = self.state.lock().unwrap();
            st.gateway_up = true;
            if self.quirk == Quirk::LosesFiles {
                for s in st.sandboxes.values_mut() {
                    s.files.clear();
                }
            }
            st.sandboxes.keys().cloned().collect()
        };
        for n in names {
            if self.quirk == Quirk::AnswersStoredRecord {
                // Rewritten by the first reconcile a moment after the gateway serves again.
                self.set_phase_later(
                    n.clone(),
                    Duration::from_millis(10),
                    Phase::Ready,
                    Phase::Provisioning,
                );
            }
            self.set_phase_later(n, Duration::from_secs(5), Phase::Provisioning, Phase::Ready);
        }
        Ok(())
    }

    async fn verify_restored(&self, fault: &Fault) -> TargetResult<()> {
        match fault {
            Fault::GatewayStop if !self.state.lock().unwrap().gateway_up => Err(
                TargetError::infra("StatefulSet openshell has 0 of 1 replicas ready"),
            ),
            _ => Ok(()),
        }
    }

    async fn logs(&self, sandbox: &str) -> TargetResult<Vec<crate::timeline::LogExcerpt>> {
        Ok(vec![crate::timeline::LogExcerpt {
            pod: crate::target::sandbox_resource_name(crate::scenario::DEFAULT_WORKSPACE, sandbox),
            container: "agent".into(),
            previous: false,
            lines: vec!["Policy fetch failed, retrying attempt=1 max_attempts=5".into()],
        }])
    }

    async fn verify_observation(&self) -> TargetResult<()> {
        if self.misses_a_phase {
            return Err(TargetError::infra(MISSED_PHASE));
        }
        Ok(())
    }

    async fn teardown(&self) -> TargetResult<()> {
        self.state.lock().unwrap().sandboxes.clear();
        Ok(())
    }
}

/// What a [`Factory::missing_a_phase`] target says its observers missed.
pub const MISSED_PHASE: &str =
    "observer missed the phase commit Ready -> Provisioning of sandbox demo";

pub fn info() -> TargetInfo {
    TargetInfo {
        kind: "fake".into(),
        model: Some("in-test".into()),
        capabilities: [Capability::GatewayStop].into(),
        versions: [("openshell".to_string(), "0.0.111".to_string())].into(),
        ..TargetInfo::default()
    }
}

pub struct Factory {
    pub quirk: Quirk,
    pub restores: Arc<AtomicUsize>,
    misses_a_phase: bool,
}

impl Factory {
    pub fn new(quirk: Quirk) -> Arc<Self> {
        Arc::new(Self {
            quirk,
            restores: Arc::new(AtomicUsize::new(0)),
            misses_a_phase: false,
        })
    }

    /// Targets with `quirk` whose observers miss a phase their own record holds.
    pub fn missing_a_phase(quirk: Quirk) -> Arc<Self> {
        Arc::new(Self {
            misses_a_phase: true,
            ..Arc::into_inner(Self::new(quirk)).expect("not shared yet")
        })
    }
}

#[async_trait]
impl TargetFactory for Factory {
    fn info(&self) -> TargetInfo {
        info()
    }

    async fn provision(&self, _t: &Topology, _rec: &Recorder) -> TargetResult<Arc<dyn Target>> {
        Ok(Arc::new(Fake {
            quirk: self.quirk,
            misses_a_phase: self.misses_a_phase,
            state: Arc::new(Mutex::new(FakeState {
                gateway_up: true,
                sandboxes: BTreeMap::new(),
            })),
            restores: self.restores.clone(),
        }))
    }
}

// ---- the scenario under test ------------------------------------------------------------

pub fn seed(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name("main");
        ctx.create_sandbox(&SandboxSpec {
            name: name.clone(),
            ..SandboxSpec::default()
        })
        .await?;
        ctx.wait_phase("R11", &name, &[Phase::Ready], Duration::from_secs(60))
            .await?;
        ctx.write_sentinel(&name, "s1").await?;
        Ok(())
    })
}

/// The scenario's one fault.
pub const OUTAGE: FaultKey = FaultKey::new("outage");

pub fn outage(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let hold = ctx.params().outage.unwrap();
        ctx.outage(&OUTAGE, hold).await?;
        Ok(())
    })
}

pub fn verify(ctx: &mut Ctx) -> BoxFuture<'_, StepResult> {
    Box::pin(async move {
        let name = ctx.sandbox_name("main");
        ctx.wait_phase("R9", &name, &[Phase::Ready], Duration::from_secs(120))
            .await?;
        ctx.read_sentinel(&name, "s1").await;
        Ok(())
    })
}

pub fn checks(case: &CaseInfo) -> Vec<Check> {
    let sandbox = Selector::named(GATEWAY_SANDBOX_KIND, &case.sandbox_name("main"));
    vec![
        Check::eventually(
            "sandbox returns to Ready after the outage",
            &["R9"],
            Predicate::phase(sandbox.clone(), &[Phase::Ready]),
            Anchor::fault_end(&OUTAGE),
            Duration::from_secs(60),
        ),
        Check::never(
            "sandbox never Error during the outage",
            &["R9"],
            Predicate::phase(sandbox, &[Phase::Error]),
            Window::fault(&OUTAGE),
        ),
        Check::sentinels("workspace sentinels retained", &["R6"]),
    ]
}

pub fn scenario(steps: Vec<Step>, requires: Vec<Capability>) -> Arc<Scenario> {
    Arc::new(Scenario {
        id: "outage-demo".into(),
        title: "A Ready sandbox through a gateway outage".into(),
        requirements: vec!["R6".into(), "R9".into()],
        requires,
        steps,
        checks,
    })
}

pub fn standard_steps() -> Vec<Step> {
    vec![
        Step::new(Stage::Seed, "create and seed", seed),
        Step::new(Stage::Fault, "gateway outage", outage),
        Step::new(Stage::Verify, "read back", verify),
    ]
}

pub fn topology() -> Topology {
    Topologies::builtin().get("combined").unwrap().clone()
}

pub fn case(steps: Vec<Step>) -> Case {
    Case::new(
        scenario(steps, vec![Capability::GatewayStop]),
        topology(),
        Params::default().with_outage(Duration::from_secs(30)),
    )
}

pub fn engine(f: Arc<Factory>) -> Engine {
    Engine::new(f, EngineOptions::default())
}

pub fn fault_phases(t: &Timeline) -> Vec<(u64, FaultPhase)> {
    t.entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Fault(f) => Some((e.at_ms, f.phase)),
            _ => None,
        })
        .collect()
}
