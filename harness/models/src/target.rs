//! The `emulated` target: a fresh in-process cluster per case, the Kubernetes models, and an
//! OpenShell model installed on it. Scenarios see it only through [`Target`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::client::OpenShellClient;
use crate::gateway::GatewayProgram;
use crate::model::{
    GATEWAY_IMAGE_REPO, NAMESPACE, OpenShellModel, SANDBOX_IMAGE_REPO, SUPERVISOR_IMAGE_REPO,
    WORKSPACE, cr_name,
};
use crate::spec::Selection;
use crate::supervisor::SupervisorProgram;
use conformance_core::effect::{FaultEffect, Process, SandboxLayout, label_selector};
use conformance_core::target::{
    ExecResult, Fault, Observers, SandboxSpec, SandboxView, Target, TargetError, TargetFactory,
    TargetInfo, TargetResult,
};
use conformance_core::timeline::{
    Event, MAIN_PROCESS_STARTS_KEY, MAIN_PROCESS_STARTS_SOURCE_KEY, ObjectState, Recorder,
};
use conformance_core::topology::Topology;
use conformance_kube_models::network::{Network, is_ready};
use conformance_kube_models::program::Programs;
use conformance_observe::{self as observe, ObserveSpec, sandbox_resource};
use kube_emulator::{Cluster, ClusterConfig, ResourceRef};

/// Deadlines of the target's own waits (install, faults), and how often they poll.
#[derive(Clone, Debug)]
pub struct TargetTimings {
    pub install_deadline: Duration,
    pub fault_deadline: Duration,
    pub poll: Duration,
    /// The gateway view is recorded this often while the gateway answers.
    pub view_poll: Duration,
}

impl Default for TargetTimings {
    fn default() -> Self {
        Self {
            install_deadline: Duration::from_secs(300),
            fault_deadline: Duration::from_secs(300),
            poll: Duration::from_millis(250),
            view_poll: Duration::from_secs(1),
        }
    }
}

/// Makes emulated targets for one model selection.
pub struct EmulatedFactory {
    pub selection: Selection,
}

impl EmulatedFactory {
    pub fn new(selection: Selection) -> Self {
        Self { selection }
    }
}

fn info_for(sel: &Selection) -> TargetInfo {
    let mut versions = BTreeMap::new();
    let openshell = sel.model.openshell();
    versions.insert(
        "openshell".to_string(),
        openshell
            .as_ref()
            .map_or_else(|| "contract".to_string(), |v| v.to_string()),
    );
    versions.insert(
        "agent-sandbox".to_string(),
        sel.agent_sandbox.name().to_string(),
    );
    // What the release offers (docs/upstream-facts.md F1.14: no restart policy at v0.0.111).
    let capabilities = sel.model.capabilities();
    TargetInfo {
        kind: "emulated".into(),
        model: Some(sel.model.name().to_string()),
        defects: sel.defect_names(),
        openshell,
        versions,
        capabilities,
    }
}

#[async_trait]
impl TargetFactory for EmulatedFactory {
    fn info(&self) -> TargetInfo {
        info_for(&self.selection)
    }

    async fn provision(
        &self,
        topology: &Topology,
        _rec: &Recorder,
    ) -> TargetResult<Arc<dyn Target>> {
        Ok(Arc::new(EmulatedTarget::start(
            self.selection.clone(),
            topology,
        )))
    }
}

/// One emulated cluster with an OpenShell model on it.
pub struct EmulatedTarget {
    pub cluster: Cluster,
    pub network: Network,
    pub model: Arc<OpenShellModel>,
    pub client: OpenShellClient,
    pub timings: TargetTimings,
    kube: Mutex<Option<conformance_kube_models::kube::KubeModels>>,
    /// StatefulSet replicas before a GatewayStop.
    saved_replicas: Mutex<Option<i32>>,
    /// Whether `teardown` leaves the Kubernetes models running (a served cluster goes on
    /// reconciling after its case).
    keep_models: std::sync::atomic::AtomicBool,
}

impl EmulatedTarget {
    /// Where this target's sandboxes put their parts (the models' workspace and topology).
    fn layout(&self) -> SandboxLayout {
        SandboxLayout::of(&self.model.topology, WORKSPACE)
    }

    /// Carries out a fault's effect: `inject` of every fault. A scaled-down gateway keeps its
    /// replicas for [`Self::put_back`].
    async fn carry_out(&self, effect: FaultEffect) -> TargetResult<()> {
        let kc = self.cluster.client();
        let infra = |e: kube::Error| TargetError::infra_from("the emulated cluster's API", e);
        let pods: Api<Pod> = Api::namespaced(kc.clone(), NAMESPACE);
        match effect {
            FaultEffect::GatewayScaledDown => {
                // Through the kube client: the scale subresource, as kubectl scale does.
                let sts: Api<StatefulSet> = Api::namespaced(kc, NAMESPACE);
                let cur = sts.get_scale("openshell").await.map_err(infra)?;
                let replicas = cur.spec.and_then(|s| s.replicas).unwrap_or(1);
                self.saved_replicas
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(replicas);
                sts.patch_scale(
                    "openshell",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": 0}})),
                )
                .await
                .map_err(infra)?;
                self.wait("pod openshell-0 to be gone", |t| {
                    match t.pod("openshell-0") {
                        None => Ok(()),
                        p => Err(format!("pod openshell-0 {}", Self::pod_summary(p.as_ref()))),
                    }
                })
                .await
            }
            FaultEffect::GatewayPodsDeleted => {
                pods.delete("openshell-0", &DeleteParams::default())
                    .await
                    .map_err(infra)?;
                Ok(())
            }
            FaultEffect::SandboxPodDeleted { pod: name } => {
                let old = self.pod(&name).and_then(|p| {
                    p.pointer("/metadata/uid")
                        .and_then(|u| u.as_str())
                        .map(String::from)
                });
                pods.delete(&name, &DeleteParams::default())
                    .await
                    .map_err(infra)?;
                self.wait(&format!("pod {name} to be replaced"), |t| {
                    let p = t.pod(&name);
                    let uid = p
                        .as_ref()
                        .and_then(|p| p.pointer("/metadata/uid").and_then(|u| u.as_str()));
                    if uid.is_some() && uid != old.as_deref() {
                        Ok(())
                    } else {
                        Err(format!("pod {name} {}", Self::pod_summary(p.as_ref())))
                    }
                })
                .await
            }
            // The models run the processes themselves: the container name is not needed.
            FaultEffect::ProcessKilled { pod, process, .. } => {
                let killed = match process {
                    Process::Supervisor => self.model.kill_supervisor(&pod),
                    Process::Main => self.model.kill_main(&pod),
                };
                match (killed, process) {
                    (true, _) => Ok(()),
                    // Nothing to kill (the supervisor has exited, for example after the main
                    // process finished): the case cannot test a restart.
                    (false, Process::Supervisor) => Err(TargetError::Unsupported(format!(
                        "no supervisor process runs for sandbox {pod}, so it cannot be restarted"
                    ))),
                    (false, Process::Main) => Err(TargetError::infra(format!(
                        "no main process runs for sandbox {pod}"
                    ))),
                }
            }
            FaultEffect::PodsDeleted { labels, what } => {
                let list = pods
                    .list(&ListParams::default().labels(&label_selector(&labels)))
                    .await
                    .map_err(infra)?;
                if list.items.is_empty() {
                    return Err(TargetError::infra(format!("{what}: no pod found")));
                }
                for p in list.items {
                    let name = p.metadata.name.unwrap_or_default();
                    pods.delete(&name, &DeleteParams::default())
                        .await
                        .map_err(infra)?;
                }
                Ok(())
            }
            FaultEffect::BootstrapBroken { resource, material } => {
                self.model.set_fault(&resource, material, true);
                Ok(())
            }
        }
    }

    /// Undoes a fault's effect: `restore` of every fault.
    async fn put_back(&self, effect: FaultEffect) -> TargetResult<()> {
        let infra = |e: kube::Error| TargetError::infra_from("the emulated cluster's API", e);
        match effect {
            FaultEffect::GatewayScaledDown => {
                let replicas = self
                    .saved_replicas
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .unwrap_or(1);
                let sts: Api<StatefulSet> = Api::namespaced(self.cluster.client(), NAMESPACE);
                sts.patch_scale(
                    "openshell",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                )
                .await
                .map_err(infra)?;
                self.wait("StatefulSet openshell readyReplicas", Self::gateway_ready)
                    .await
            }
            FaultEffect::GatewayPodsDeleted => {
                self.wait(
                    "the replacement gateway pod to be ready",
                    Self::gateway_ready,
                )
                .await
            }
            FaultEffect::BootstrapBroken { resource, material } => {
                self.model.set_fault(&resource, material, false);
                Ok(())
            }
            // Replaced pods and killed processes heal by themselves.
            FaultEffect::SandboxPodDeleted { .. }
            | FaultEffect::ProcessKilled { .. }
            | FaultEffect::PodsDeleted { .. } => Ok(()),
        }
    }

    /// Checks, without waiting, that an effect was undone: `verify_restored` of every fault.
    fn check_back(&self, effect: FaultEffect) -> TargetResult<()> {
        match effect {
            FaultEffect::GatewayScaledDown | FaultEffect::GatewayPodsDeleted => self
                .gateway_ready()
                .map_err(|last| TargetError::infra(format!("the gateway is not back: {last}"))),
            FaultEffect::BootstrapBroken { resource, material } => {
                if self.model.has_fault(&resource, material) {
                    Err(TargetError::infra(format!(
                        "the {material} of {resource} are still broken"
                    )))
                } else {
                    Ok(())
                }
            }
            // A replaced pod was replaced before `inject` returned; killed processes have
            // nothing to put back.
            FaultEffect::SandboxPodDeleted { .. }
            | FaultEffect::ProcessKilled { .. }
            | FaultEffect::PodsDeleted { .. } => Ok(()),
        }
    }

    /// A fresh cluster, network and Kubernetes models running the selection's programs, with
    /// OpenShell shaped as `topology` describes.
    pub fn start(selection: Selection, topology: &Topology) -> Self {
        Self::start_with(selection, topology, ClusterConfig::default())
    }

    /// As [`EmulatedTarget::start`] on a cluster built from `cfg` (e.g. a wall-clock epoch).
    pub fn start_with(selection: Selection, topology: &Topology, mut cfg: ClusterConfig) -> Self {
        if !cfg.namespaces.iter().any(|n| n == NAMESPACE) {
            cfg.namespaces.push(NAMESPACE.to_string());
        }
        cfg.crds.push(conformance_kube_models::agent_sandbox::crd());
        Self::start_on(selection, topology, cfg, true, None)
    }

    /// A cluster where images mean models and nothing is pre-installed: no OpenShell namespace
    /// or objects and no Sandbox CRD. The kubelet runs the gateway image as the gateway model
    /// (or as `generate-certs` for the chart's hook), the supervisor and sandbox images as the
    /// supervisor models, and the Agent Sandbox controller image as the controller model of its
    /// tag; the real chart and manifest install everything else. Not a target to run cases on
    /// in-process (nothing is installed); serve it and use the real path.
    pub fn start_images(selection: Selection, topology: &Topology, cfg: ClusterConfig) -> Self {
        Self::start_on(selection, topology, cfg, false, None)
    }

    /// [`Self::start_images`], except that the images `host` knows (the real OpenShell
    /// gateway and supervisor) run as processes on this machine instead of as models; the
    /// runtime serves the cluster's API and Services to them. The model's gateway and
    /// supervisors are then never started.
    pub fn start_host(
        selection: Selection,
        topology: &Topology,
        cfg: ClusterConfig,
        host: &crate::host::HostRuntime,
    ) -> Result<Self, crate::host::HostError> {
        host.check_topology(topology)?;
        let target = Self::start_on(selection, topology, cfg, false, Some(host));
        host.attach(&target.cluster)?;
        Ok(target)
    }

    fn start_on(
        selection: Selection,
        topology: &Topology,
        cfg: ClusterConfig,
        agent_sandbox_in_process: bool,
        host: Option<&crate::host::HostRuntime>,
    ) -> Self {
        let cluster = Cluster::new(cfg);
        let network = Network::new();
        let agent = selection.agent_sandbox;
        let model = OpenShellModel::new(selection, topology.clone());
        let mut programs = Programs::new();
        programs.register(
            GATEWAY_IMAGE_REPO,
            Arc::new(GatewayProgram {
                model: model.clone(),
            }),
        );
        let sup = Arc::new(SupervisorProgram {
            model: model.clone(),
        });
        programs.register(SUPERVISOR_IMAGE_REPO, sup.clone());
        programs.register(SANDBOX_IMAGE_REPO, sup);
        if !agent_sandbox_in_process {
            programs.register(
                conformance_kube_models::agent_sandbox::CONTROLLER_IMAGE_REPO,
                Arc::new(conformance_kube_models::agent_sandbox::ControllerProgram),
            );
        }
        if let Some(host) = host {
            let program = host.program();
            for repo in host.images().repositories() {
                programs.register(repo, program.clone());
            }
        }
        let kube = conformance_kube_models::kube::KubeModels::start(
            &cluster,
            &network,
            programs,
            conformance_kube_models::kube::KubeConfig {
                agent_sandbox_version: agent,
                agent_sandbox_in_process,
                ..Default::default()
            },
        );
        Self {
            client: OpenShellClient::new(cluster.clone(), network.clone()),
            cluster,
            network,
            model,
            timings: TargetTimings::default(),
            kube: Mutex::new(Some(kube)),
            saved_replicas: Mutex::new(None),
            keep_models: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Makes `teardown` leave the Kubernetes models (kubelet, controllers) running, so the
    /// cluster keeps reconciling after a case; they stop when the target is dropped.
    pub fn keep_models_after_teardown(&self) {
        self.keep_models
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn spec(&self) -> ObserveSpec {
        ObserveSpec {
            namespace: NAMESPACE.into(),
            sandbox_resource: sandbox_resource("v1beta1"),
        }
    }

    fn pod(&self, name: &str) -> Option<serde_json::Value> {
        self.cluster
            .get(&ResourceRef::pods(), Some(NAMESPACE), name)
            .ok()
    }

    /// Polls `cond` until it holds or the deadline passes; the error names what was awaited
    /// and the last state seen.
    async fn wait(
        &self,
        what: &str,
        mut cond: impl FnMut(&Self) -> Result<(), String>,
    ) -> TargetResult<()> {
        let deadline = tokio::time::Instant::now() + self.timings.fault_deadline;
        let mut changes = self.cluster.subscribe();
        loop {
            match cond(self) {
                Ok(()) => return Ok(()),
                Err(last) if tokio::time::Instant::now() >= deadline => {
                    return Err(TargetError::infra(format!(
                        "gave up waiting for {what} after {}s; last seen: {last}",
                        self.timings.fault_deadline.as_secs()
                    )));
                }
                Err(_) => next_change(&mut changes, self.timings.poll).await,
            }
        }
    }

    fn pod_summary(p: Option<&serde_json::Value>) -> String {
        match p {
            None => "absent".into(),
            Some(p) => format!(
                "uid={} phase={} ready={} deleting={}",
                p.pointer("/metadata/uid")
                    .and_then(|v| v.as_str())
                    .unwrap_or("?"),
                p.pointer("/status/phase")
                    .and_then(|v| v.as_str())
                    .unwrap_or("?"),
                is_ready(p),
                p.pointer("/metadata/deletionTimestamp").is_some()
            ),
        }
    }

    fn gateway_ready(&self) -> Result<(), String> {
        let sts = self
            .cluster
            .get_shared(
                &ResourceRef::new("apps", "v1", "statefulsets"),
                Some(NAMESPACE),
                "openshell",
            )
            .map_err(|e| e.message)?;
        let want = sts
            .pointer("/spec/replicas")
            .and_then(|v| v.as_i64())
            .unwrap_or(1);
        let ready = sts
            .pointer("/status/readyReplicas")
            .and_then(|v| v.as_i64())
            .unwrap_or(0);
        let reachable = self.client.connect().is_ok();
        if ready >= want && reachable {
            Ok(())
        } else {
            Err(format!(
                "StatefulSet openshell readyReplicas={ready}/{want}, gateway reachable={reachable}, pod openshell-0 {}",
                Self::pod_summary(self.pod("openshell-0").as_ref())
            ))
        }
    }

    /// The gateway's views of every sandbox it knows, as timeline states.
    pub(crate) fn gateway_views(&self) -> Vec<ObjectState> {
        self.client
            .list()
            .map(|vs| vs.iter().map(SandboxView::to_state).collect())
            .unwrap_or_default()
    }
}

#[async_trait]
impl Target for EmulatedTarget {
    fn info(&self) -> TargetInfo {
        info_for(&self.model.selection)
    }

    async fn install(&self, _topology: &Topology) -> TargetResult<()> {
        crate::install::install(&self.cluster, &self.model)
            .map_err(|e| TargetError::infra(format!("install: {}", e.message)))?;
        let deadline = tokio::time::Instant::now() + self.timings.install_deadline;
        let mut changes = self.cluster.subscribe();
        loop {
            match self.gateway_ready() {
                Ok(()) => return Ok(()),
                Err(last) if tokio::time::Instant::now() >= deadline => {
                    return Err(TargetError::infra(format!(
                        "install: gave up waiting for the gateway to be ready after {}s; last seen: {last}",
                        self.timings.install_deadline.as_secs()
                    )));
                }
                Err(_) => next_change(&mut changes, self.timings.poll).await,
            }
        }
    }

    async fn observe(&self, rec: Recorder) -> TargetResult<Observers> {
        let mut obs = observe::spawn(self.cluster.client(), &self.spec())(rec.clone());
        // The supervisors say when they start a main process; nothing the workload wrote in
        // its workspace is read for it.
        rec.record_watched(Event::Observation {
            key: MAIN_PROCESS_STARTS_SOURCE_KEY.into(),
            subject: None,
            value: json!("the supervisor model launching the main process"),
        });
        {
            let rec = rec.clone();
            self.model
                .on_main_start(Arc::new(move |sandbox: &str, n: u64| {
                    rec.record_watched(Event::Observation {
                        key: MAIN_PROCESS_STARTS_KEY.into(),
                        subject: Some(sandbox.to_string()),
                        value: json!(n),
                    });
                }));
        }
        let views = GatewayViews::new(rec);
        // Every write of the gateway's store is recorded as it happens, so a phase held for no
        // time at all (Ready -> Error -> Ready in one reconcile) is still on the timeline.
        {
            let client = self.client.clone();
            let views = views.clone();
            self.model
                .on_gateway_views(Arc::new(move |vs: &[SandboxView]| {
                    // What a client could not have read is not what the gateway showed; it is
                    // listed once the gateway can be reached again.
                    if client.connect().is_ok() {
                        views.seen(vs);
                    } else {
                        views.missed.store(true, Ordering::Relaxed);
                    }
                }));
        }
        // Whether the gateway can be reached follows its pod's readiness (a store change, so
        // wake on each) and network faults (the tick). While it stays reachable the hook has
        // recorded every write, so the gateway is listed only when it becomes reachable or a
        // write went unrecorded: listing on every store change was a top item of the proof's
        // profile.
        let client = self.client.clone();
        let mut changes = self.cluster.subscribe();
        let every = self.timings.view_poll;
        obs.push(tokio::spawn(async move {
            let mut current = false;
            loop {
                let missed = views.missed.swap(false, Ordering::Relaxed);
                let listed = match client.connect() {
                    Ok(_) if current && !missed => Ok(()),
                    Ok(_) => client.list().map(|vs| views.seen(&vs)),
                    Err(e) => Err(e),
                };
                current = match listed {
                    Ok(()) => true,
                    Err(e) => {
                        views.unreachable(&e.to_string());
                        false
                    }
                };
                next_change(&mut changes, every).await;
            }
        }));
        Ok(obs)
    }

    async fn snapshot(&self) -> TargetResult<Vec<ObjectState>> {
        let mut out = observe::snapshot(self.cluster.client(), &self.spec())
            .await
            .map_err(|e| TargetError::infra_from("snapshot: list the observed objects", e))?;
        out.extend(self.gateway_views());
        Ok(out)
    }

    async fn create_sandbox(&self, spec: &SandboxSpec) -> TargetResult<SandboxView> {
        self.client.create(spec)
    }

    async fn get_sandbox(&self, name: &str) -> TargetResult<Option<SandboxView>> {
        self.client.get(name)
    }

    async fn exec(&self, sandbox: &str, argv: &[String]) -> TargetResult<ExecResult> {
        self.client.exec(sandbox, argv).await
    }

    async fn probe_exec(&self, sandbox: &str, argv: &[String]) -> TargetResult<ExecResult> {
        let out = self
            .cluster
            .exec(
                NAMESPACE,
                &cr_name(sandbox),
                Some(&self.model.topology.workload.container),
                argv,
                &[],
            )
            .await
            .map_err(|e| TargetError::refused("KubernetesExec", e.message))?;
        Ok(ExecResult {
            exit_code: out.exit_code,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    async fn read_workspace(&self, sandbox: &str, path: &str) -> TargetResult<Option<String>> {
        // The PVC's volume, as a reader pod mounting `workspace-<cr>` would see it.
        let vol = self
            .cluster
            .pvc_volume(NAMESPACE, &crate::model::pvc_name(sandbox));
        Ok(vol
            .read(&format!("/{}", path.trim_start_matches('/')))
            .map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    async fn stop_sandbox(&self, name: &str) -> TargetResult<()> {
        self.client.stop(name)
    }

    async fn start_sandbox(&self, name: &str) -> TargetResult<()> {
        self.client.start(name)
    }

    async fn delete_sandbox(&self, name: &str) -> TargetResult<()> {
        self.client.delete(name)
    }

    async fn inject(&self, fault: &Fault) -> TargetResult<()> {
        self.carry_out(FaultEffect::of(fault, &self.layout())).await
    }

    async fn restore(&self, fault: &Fault) -> TargetResult<()> {
        self.put_back(FaultEffect::of(fault, &self.layout())).await
    }

    async fn verify_restored(&self, fault: &Fault) -> TargetResult<()> {
        self.check_back(FaultEffect::of(fault, &self.layout()))
    }

    async fn supervisor_log(&self, sandbox: &str) -> TargetResult<Option<Vec<String>>> {
        let at = self.layout().supervisor_log(sandbox);
        conformance_observe::timestamped_log(&self.cluster.client(), NAMESPACE, &at)
            .await
            .map(Some)
            .map_err(|e| TargetError::infra_from("reading the supervisor's log", e))
    }

    async fn teardown(&self) -> TargetResult<()> {
        if let Ok(views) = self.client.list() {
            for v in views {
                let _ = self.client.delete(&v.name);
            }
        }
        if !self.keep_models.load(std::sync::atomic::Ordering::SeqCst) {
            drop(self.kube.lock().unwrap_or_else(|p| p.into_inner()).take());
        }
        Ok(())
    }
}

/// A case ends with its target: what its models hold of each other (gateways and programs
/// behind network endpoints, the view hook, kill switches) is let go, so the cluster and every
/// object in it is freed with the case rather than kept alive by a cycle.
impl Drop for EmulatedTarget {
    fn drop(&mut self) {
        drop(self.kube.lock().unwrap_or_else(|p| p.into_inner()).take());
        self.network.unbind_all();
        self.model.release();
    }
}

/// Records the gateway's views of sandboxes: every state it shows, the disappearance of a
/// sandbox it no longer lists, and, while it cannot be reached, an `Unknown` phase for every
/// sandbox it listed (not the last phase seen).
#[derive(Clone)]
struct GatewayViews {
    rec: Recorder,
    known: Arc<Mutex<BTreeSet<String>>>,
    /// A write of the gateway's store went unrecorded (the gateway could not be reached).
    missed: Arc<AtomicBool>,
}

impl GatewayViews {
    fn new(rec: Recorder) -> Self {
        Self {
            rec,
            known: Arc::default(),
            missed: Arc::default(),
        }
    }

    fn seen(&self, views: &[SandboxView]) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let now: BTreeSet<String> = views.iter().map(|v| v.name.clone()).collect();
        for v in views {
            self.rec.observe(v.to_state());
        }
        for gone in known.difference(&now) {
            let mut st = SandboxView::unreachable_state(gone, "");
            if let Some(last) = self.rec.last_state(&st.object_ref()) {
                st = last;
            }
            st.deleted = true;
            self.rec.observe(st);
        }
        *known = now;
    }

    fn unreachable(&self, detail: &str) {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        for name in known.iter() {
            self.rec
                .observe(SandboxView::unreachable_state(name, detail));
        }
    }
}

/// Until the store changes, or `every` passes (for what the store does not show, such as the
/// network). Waking on the change itself makes a wait end at the instant its condition holds,
/// whatever order the models' tasks ran in within that instant.
async fn next_change(changes: &mut kube_emulator::sync::watch::Receiver<u64>, every: Duration) {
    tokio::select! {
        biased;
        r = changes.changed() => {
            if r.is_err() {
                tokio::time::sleep(every).await;
            }
        }
        () = tokio::time::sleep(every) => {}
    }
}
