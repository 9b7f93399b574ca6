//! The kubelet of the single emulated node (plus the scheduler's part of it: scheduling gates,
//! binding, PVC binding). It follows every pod through the cluster's change channel (no
//! polling), runs each container as a [`ContainerProgram`] chosen by image, and writes pod
//! status the way a real kubelet does (docs/upstream-facts.md F10.2).
//!
//! What it models: scheduling gates (`PodScheduled=False/SchedulingGated`), a missing PVC
//! (`Unschedulable`), binding, a start delay, init containers in order, containers
//! concurrently, readiness from the program (`ContainerCtx::set_ready`; no probes), restart
//! policies with CrashLoopBackOff, graceful deletion (Term, grace period, Kill, final grace-0
//! delete), pod IPs, literal/fieldRef/secretKeyRef/configMapKeyRef env.
//! It registers its node once, Ready (docs/upstream-facts.md F12.1).
//! What it does not: probes, resources, image pulls, eviction, node heartbeats and leases,
//! sidecar (restartable init) containers, ephemeral containers.
//!
//! **Processes** as `kubectl exec` sees them (the pod's [`ShellHooks`], `/proc` and `kill`): every
//! container run is a process with a node-wide PID (its host PID) and, like every pod, a pause
//! process; see [`crate::procs`] for the PID namespaces, `/proc` files and which signals arrive.

use conformance_core::timeline::READY_CONDITION;
use kube_emulator::Pointer;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::kube::{KubeConfig, VolumeBinding};
use crate::network::Network;
use crate::procs::{PodProcs, Proc, ProcsHooks};
use crate::program::{ContainerCtx, Programs, Signal};
use kube_emulator::container_mounts;
use kube_emulator::{Cluster, DeleteOptions, ExecRequest, ListOptions, PatchKind, ResourceRef};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.at(ptr).and_then(Value::as_str)
}

fn pvcs() -> ResourceRef {
    ResourceRef::new("", "v1", "persistentvolumeclaims")
}

/// The kubelet handle (cheap to clone).
#[derive(Clone)]
pub(crate) struct Kubelet {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    cluster: Cluster,
    network: Network,
    programs: Programs,
    config: KubeConfig,
    /// Pod workers by pod uid.
    pods: Mutex<BTreeMap<String, PodEntry>>,
    next_ip: AtomicU32,
    /// The next host PID on the node.
    next_pid: AtomicU32,
}

struct PodEntry {
    ns: String,
    name: String,
    cmds: mpsc::UnboundedSender<Cmd>,
    shared: Arc<PodShared>,
    task: JoinHandle<()>,
    /// The deletionTimestamp last told to the worker.
    deletion: Option<String>,
}

enum Cmd {
    /// The pod has (or has a new) deletionTimestamp.
    Deleting,
}

/// What a pod's worker shares with signal senders (the handle, shell hooks).
pub(crate) struct PodShared {
    pub(crate) procs: Mutex<BTreeMap<String, Proc>>,
    exits: mpsc::UnboundedSender<Exit>,
    /// The pod's PID namespace and cgroups.
    pub(crate) info: PodProcs,
}

struct Exit {
    container: String,
    run: u64,
    code: i32,
}

impl PodShared {
    /// Delivers `sig` to the process with host PID `host_pid`, if it still runs as container
    /// `container` (not a later run of it).
    pub(crate) fn deliver_to(&self, container: &str, host_pid: u32, sig: Signal) -> bool {
        if lock(&self.procs)
            .get(container)
            .is_none_or(|p| p.host_pid != host_pid)
        {
            return false;
        }
        self.deliver(container, sig)
    }

    fn deliver(&self, container: &str, sig: Signal) -> bool {
        let mut procs = lock(&self.procs);
        match sig {
            Signal::Term => procs
                .get(container)
                .map(|p| p.signals.send_replace(Some(Signal::Term)))
                .is_some(),
            Signal::Kill => match procs.remove(container) {
                Some(p) => {
                    p.signals.send_replace(Some(Signal::Kill));
                    p.task.abort();
                    let _ = self.exits.send(Exit {
                        container: container.to_string(),
                        run: p.run,
                        code: Signal::Kill.exit_code(),
                    });
                    true
                }
                None => false,
            },
        }
    }

    fn kill_all(&self) {
        for (_, p) in std::mem::take(&mut *lock(&self.procs)) {
            p.task.abort();
        }
    }
}

impl Kubelet {
    pub(crate) fn new(
        cluster: Cluster,
        network: Network,
        programs: Programs,
        config: KubeConfig,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                cluster,
                network,
                programs,
                config,
                pods: Mutex::default(),
                next_ip: AtomicU32::new(2),
                // Below are the node's own processes (init, containerd, the kubelet).
                next_pid: AtomicU32::new(1000),
            }),
        }
    }

    /// Registers the node object, Ready (best effort), and runs the kubelet until the task is
    /// aborted.
    pub(crate) fn spawn(&self) -> JoinHandle<()> {
        let k = self.inner.clone();
        k.register_node();
        let mut changes = k.cluster.subscribe();
        tokio::spawn(async move {
            loop {
                k.sync();
                if changes.changed().await.is_err() {
                    return;
                }
            }
        })
    }

    #[cfg(test)]
    /// Delivers a signal to the running program of one container (Term: the program decides;
    /// Kill: the program is dropped and the container exits 137, then its restart policy
    /// applies). Returns false when no such container program runs.
    pub(crate) fn signal(&self, ns: &str, pod: &str, container: &str, sig: Signal) -> bool {
        let shared = lock(&self.inner.pods)
            .values()
            .filter(|e| e.ns == ns && e.name == pod)
            .map(|e| e.shared.clone())
            .collect::<Vec<_>>();
        shared.iter().any(|s| s.deliver(container, sig))
    }

    #[cfg(test)]
    /// `signal(…, Signal::Kill)`.
    pub(crate) fn kill_container(&self, ns: &str, pod: &str, container: &str) -> bool {
        self.signal(ns, pod, container, Signal::Kill)
    }

    #[cfg(test)]
    /// Names of the containers of a pod whose programs run now.
    pub(crate) fn running_containers(&self, ns: &str, pod: &str) -> Vec<String> {
        lock(&self.inner.pods)
            .values()
            .filter(|e| e.ns == ns && e.name == pod)
            .flat_map(|e| lock(&e.shared.procs).keys().cloned().collect::<Vec<_>>())
            .collect()
    }

    /// Stops every pod worker and program (the node is gone; objects stay as they are).
    pub(crate) fn stop_all(&self) {
        for (_, e) in std::mem::take(&mut *lock(&self.inner.pods)) {
            e.shared.kill_all();
            e.task.abort();
        }
    }
}

impl Inner {
    /// Every pod this kubelet runs now (what a `hostPID` pod sees of the node).
    pub(crate) fn all_pods(&self) -> Vec<Arc<PodShared>> {
        lock(&self.pods)
            .values()
            .map(|e| e.shared.clone())
            .collect()
    }

    /// The node this kubelet plays, with the status a healthy kubelet posts (F12.1): Ready, no
    /// pressure, its address, capacity and versions.
    fn register_node(&self) {
        let nodes = ResourceRef::new("", "v1", "nodes");
        let name = &self.config.node_name;
        let pod_cidr = format!("{}0/24", self.config.pod_ip_prefix);
        let created = self.cluster.create(
            &nodes,
            None,
            json!({
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                    "beta.kubernetes.io/arch": "amd64"}},
                "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
            }),
        );
        let Ok(node) = created else {
            return;
        };
        let now = self.cluster.now_rfc3339();
        let cond = |type_: &str, status: &str, reason: &str, message: &str| {
            json!({"type": type_, "status": status, "reason": reason, "message": message,
                   "lastHeartbeatTime": now, "lastTransitionTime": now})
        };
        let resources = json!({"cpu": "8", "memory": "16Gi", "pods": "110",
                               "ephemeral-storage": "100Gi", "hugepages-2Mi": "0"});
        let mut status = Arc::unwrap_or_clone(node);
        status["status"] = json!({
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": self.config.host_ip},
                          {"type": "Hostname", "address": name}],
            "capacity": resources, "allocatable": resources,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "",
                "kernelVersion": "6.8.0", "osImage": "emulated", "containerRuntimeVersion": "containerd://2.0.0",
                "kubeletVersion": "v1.33.0", "kubeProxyVersion": "v1.33.0",
                "operatingSystem": "linux", "architecture": "amd64"},
        });
        let _ = self.cluster.update_status(&nodes, None, name, status);
    }

    /// One pass over all pods: forget removed pods, schedule, start workers, report deletions.
    fn sync(self: &Arc<Self>) {
        // Shared with the store: this pass runs on every change to the cluster.
        let Ok((pods, _)) =
            self.cluster
                .list_shared(&ResourceRef::pods(), None, &ListOptions::default())
        else {
            return;
        };
        // Pods whose objects are gone: their programs die with them (first, so a replacement
        // with the same name never sees the old endpoints).
        {
            let present: std::collections::BTreeSet<&str> =
                pods.iter().filter_map(|p| s(p, "/metadata/uid")).collect();
            let mut entries = lock(&self.pods);
            let gone: Vec<String> = entries
                .keys()
                .filter(|u| !present.contains(u.as_str()))
                .cloned()
                .collect();
            for uid in gone {
                if let Some(e) = entries.remove(&uid) {
                    e.shared.kill_all();
                    e.task.abort();
                    self.network.unbind_pod(&e.ns, &e.name);
                }
            }
        }
        if self.config.volume_binding == VolumeBinding::Immediate {
            self.bind_all_claims();
        }
        for pod in &pods {
            let ns = s(pod, "/metadata/namespace").unwrap_or_default();
            let name = s(pod, "/metadata/name").unwrap_or_default();
            let uid = s(pod, "/metadata/uid").unwrap_or_default();
            let deleting = pod.at("/metadata/deletionTimestamp").is_some();
            let node = s(pod, "/spec/nodeName").unwrap_or_default();
            if node.is_empty() {
                if !deleting {
                    self.schedule(pod, ns, name);
                }
                continue;
            }
            if node != self.config.node_name {
                continue;
            }
            let mut entries = lock(&self.pods);
            match entries.get_mut(uid) {
                Some(e) => {
                    let dts = s(pod, "/metadata/deletionTimestamp").map(str::to_string);
                    if dts.is_some() && dts != e.deletion {
                        e.deletion = dts;
                        let _ = e.cmds.send(Cmd::Deleting);
                    }
                }
                None => {
                    let phase = s(pod, "/status/phase").unwrap_or("Pending");
                    if matches!(phase, "Succeeded" | "Failed") {
                        continue;
                    }
                    let e = self.start_worker(Arc::clone(pod));
                    entries.insert(uid.to_string(), e);
                }
            }
        }
    }

    /// The scheduler: gates, missing claims, then `pods/binding` (and WaitForFirstConsumer).
    fn schedule(&self, pod: &Value, ns: &str, name: &str) {
        let gates = pod
            .at("/spec/schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(|g| !g.is_empty());
        if gates {
            self.set_unscheduled(
                pod,
                "SchedulingGated",
                "Scheduling is blocked due to non-empty scheduling gates",
            );
            return;
        }
        let claims = claim_names(pod);
        for c in &claims {
            if self.cluster.get(&pvcs(), Some(ns), c).is_err() {
                self.set_unscheduled(
                    pod,
                    "Unschedulable",
                    &format!("0/1 nodes are available: persistentvolumeclaim \"{c}\" not found."),
                );
                return;
            }
        }
        if self
            .cluster
            .bind_pod(ns, name, &self.config.node_name)
            .is_ok()
        {
            for c in &claims {
                self.bind_claim(ns, c);
            }
        }
    }

    /// `PodScheduled=False` with a reason, written only when it changes.
    fn set_unscheduled(&self, pod: &Value, reason: &str, message: &str) {
        let cur = pod
            .at("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type") == Some(&json!("PodScheduled")))
            });
        if cur.is_some_and(|c| {
            c.get("status") == Some(&json!("False"))
                && c.get("reason") == Some(&json!(reason))
                && c.get("message") == Some(&json!(message))
        }) {
            return;
        }
        let ns = s(pod, "/metadata/namespace").unwrap_or_default();
        let name = s(pod, "/metadata/name").unwrap_or_default();
        let patch = json!({"status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": reason, "message": message,
            "lastProbeTime": null, "lastTransitionTime": self.cluster.now_rfc3339()}]}});
        let _ = self.cluster.patch_status(
            &ResourceRef::pods(),
            Some(ns),
            name,
            PatchKind::Merge,
            &patch,
        );
    }

    fn bind_all_claims(&self) {
        let Ok((claims, _)) = self
            .cluster
            .list_shared(&pvcs(), None, &ListOptions::default())
        else {
            return;
        };
        for c in claims {
            if s(&c, "/status/phase") == Some("Pending") {
                let ns = s(&c, "/metadata/namespace").unwrap_or_default();
                let name = s(&c, "/metadata/name").unwrap_or_default();
                self.bind_claim(ns, name);
            }
        }
    }

    /// Binds a Pending claim to a fresh volume `pvc-<uid>` (what the provisioner and the PV
    /// controller do together): spec `volumeName` and `storageClassName`, status Bound.
    fn bind_claim(&self, ns: &str, name: &str) {
        let Ok(pvc) = self.cluster.get(&pvcs(), Some(ns), name) else {
            return;
        };
        if s(&pvc, "/status/phase") != Some("Pending") {
            return;
        }
        let uid = s(&pvc, "/metadata/uid").unwrap_or_default();
        let mut new = pvc.clone();
        new["spec"]["volumeName"] = json!(format!("pvc-{uid}"));
        if new.at("/spec/storageClassName").is_none() {
            new["spec"]["storageClassName"] = json!(self.config.storage_class);
        }
        let ann = new["metadata"]
            .as_object_mut()
            .expect("metadata")
            .entry("annotations")
            .or_insert_with(|| json!({}));
        ann["pv.kubernetes.io/bind-completed"] = json!("yes");
        ann["pv.kubernetes.io/bound-by-controller"] = json!("yes");
        ann["volume.kubernetes.io/selected-node"] = json!(self.config.node_name);
        let Ok(updated) = self.cluster.update(&pvcs(), Some(ns), name, new) else {
            return;
        };
        let mut status = Arc::unwrap_or_clone(updated);
        status["status"] = json!({
            "phase": "Bound",
            "accessModes": pvc.at("/spec/accessModes").cloned().unwrap_or(json!(["ReadWriteOnce"])),
            "capacity": {"storage": pvc.at("/spec/resources/requests/storage").cloned().unwrap_or(json!("1Gi"))},
        });
        let _ = self.cluster.update_status(&pvcs(), Some(ns), name, status);
    }

    fn start_worker(self: &Arc<Self>, pod: Arc<Value>) -> PodEntry {
        let ns = s(&pod, "/metadata/namespace")
            .unwrap_or_default()
            .to_string();
        let name = s(&pod, "/metadata/name").unwrap_or_default().to_string();
        let (exits_tx, exits_rx) = mpsc::unbounded_channel();
        let (cmds_tx, cmds_rx) = mpsc::unbounded_channel();
        let containers = |list: &str| -> Vec<Value> {
            pod.at(&format!("/spec/{list}"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let shared = Arc::new(PodShared {
            procs: Mutex::default(),
            exits: exits_tx,
            info: PodProcs::of(&pod, self.next_pid.fetch_add(1, Ordering::SeqCst)),
        });
        self.cluster.set_pod_hooks(
            &ns,
            &name,
            Arc::new(ProcsHooks::new(
                self.cluster.downgrade(),
                Arc::downgrade(self),
                Arc::downgrade(&shared),
            )),
        );
        let mk = |c: &Value, init: bool| Ctr::new(c, init, &self.programs);
        let worker = Worker {
            k: self.clone(),
            ns: ns.clone(),
            name: name.clone(),
            uid: s(&pod, "/metadata/uid").unwrap_or_default().to_string(),
            restart_policy: s(&pod, "/spec/restartPolicy")
                .unwrap_or("Always")
                .to_string(),
            init: containers("initContainers")
                .iter()
                .map(|c| mk(c, true))
                .collect(),
            main: containers("containers")
                .iter()
                .map(|c| mk(c, false))
                .collect(),
            pod,
            shared: shared.clone(),
            exits: exits_rx,
            cmds: cmds_rx,
            ready_changed: Arc::new(Notify::new()),
            stage: Stage::Creating(Instant::now() + self.config.pod_start_delay),
            pod_ip: None,
            start_time: self.cluster.now_rfc3339(),
            deadline: None,
            transitions: BTreeMap::new(),
            runs: 0,
            mount_failures: 0,
        };
        let task = tokio::spawn(worker.run());
        PodEntry {
            ns,
            name,
            cmds: cmds_tx,
            shared,
            task,
            deletion: None,
        }
    }
}

/// The claim names of a pod's PVC volumes.
pub(crate) fn claim_names(pod: &Value) -> Vec<String> {
    pod.at("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| s(v, "/persistentVolumeClaim/claimName").map(String::from))
        .collect()
}

#[derive(Clone, Debug, PartialEq)]
enum CState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started: String,
    },
    Terminated {
        code: i32,
        started: String,
        finished: String,
    },
}

struct Ctr {
    spec: Value,
    name: String,
    image: String,
    init: bool,
    program: Arc<dyn crate::program::ContainerProgram>,
    state: CState,
    last: Option<Value>,
    restarts: u32,
    /// Restarts counted by the back-off (reset after a long enough run).
    backoff_n: u32,
    ready: Arc<AtomicBool>,
    restart_at: Option<Instant>,
    run: u64,
    ran_since: Option<Instant>,
    container_id: Option<String>,
}

impl Ctr {
    fn new(spec: &Value, init: bool, programs: &Programs) -> Self {
        let image = s(spec, "/image").unwrap_or_default().to_string();
        Self {
            name: s(spec, "/name").unwrap_or_default().to_string(),
            program: programs.for_image(&image),
            image,
            init,
            spec: spec.clone(),
            state: CState::Waiting {
                reason: "ContainerCreating".into(),
                message: None,
            },
            last: None,
            restarts: 0,
            backoff_n: 0,
            ready: Arc::new(AtomicBool::new(false)),
            restart_at: None,
            run: 0,
            ran_since: None,
            container_id: None,
        }
    }

    fn is_running(&self) -> bool {
        matches!(self.state, CState::Running { .. })
    }

    fn exit_code(&self) -> Option<i32> {
        match self.state {
            CState::Terminated { code, .. } => Some(code),
            _ => None,
        }
    }

    fn terminated_json(&self) -> Option<Value> {
        match &self.state {
            CState::Terminated {
                code,
                started,
                finished,
            } => Some(json!({"terminated": {
                "exitCode": code,
                "reason": if *code == 0 { "Completed" } else { "Error" },
                "startedAt": started,
                "finishedAt": finished,
                "containerID": self.container_id,
            }})),
            _ => None,
        }
    }

    fn status(&self, pending_init: bool) -> Value {
        let state = match &self.state {
            CState::Waiting { reason, message } => {
                let reason = if pending_init && reason == "ContainerCreating" {
                    "PodInitializing"
                } else {
                    reason
                };
                let mut w = json!({"reason": reason});
                if let Some(m) = message {
                    w["message"] = json!(m);
                }
                json!({"waiting": w})
            }
            CState::Running { started } => json!({"running": {"startedAt": started}}),
            CState::Terminated { .. } => self.terminated_json().expect("terminated"),
        };
        let mut st = json!({
            "name": self.name,
            "image": self.image,
            "imageID": if self.container_id.is_some() { image_id(&self.image) } else { String::new() },
            "ready": self.is_running() && self.ready.load(Ordering::SeqCst),
            "started": self.is_running(),
            "restartCount": self.restarts,
            "state": state,
            "lastState": self.last.clone().unwrap_or(json!({})),
        });
        if let Some(id) = &self.container_id {
            st["containerID"] = json!(id);
        }
        st
    }
}

fn fnv64(data: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn hex64(seed: &str) -> String {
    (0..4)
        .map(|i| format!("{:016x}", fnv64(&format!("{i}/{seed}"))))
        .collect()
}

/// A deterministic `imageID` (`<repository>@sha256:<64 hex>`).
fn image_id(image: &str) -> String {
    let repo = crate::program::repository(image);
    let repo = if repo.contains('/') {
        repo.to_string()
    } else {
        format!("docker.io/library/{repo}")
    };
    format!("{repo}@sha256:{}", hex64(image))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Stage {
    /// Waiting for the pod sandbox (until the instant).
    Creating(Instant),
    /// Running init container N.
    Init(usize),
    Main,
    /// Nothing runs or will run again (terminal phase, or finalized).
    Done,
}

struct Worker {
    k: Arc<Inner>,
    ns: String,
    name: String,
    uid: String,
    restart_policy: String,
    /// The pod as last written, shared with the store.
    pod: Arc<Value>,
    init: Vec<Ctr>,
    main: Vec<Ctr>,
    shared: Arc<PodShared>,
    exits: mpsc::UnboundedReceiver<Exit>,
    cmds: mpsc::UnboundedReceiver<Cmd>,
    ready_changed: Arc<Notify>,
    stage: Stage,
    pod_ip: Option<String>,
    start_time: String,
    /// Set while the pod is being deleted: when the grace period ends.
    deadline: Option<Instant>,
    /// Condition type → (status, lastTransitionTime).
    transitions: BTreeMap<&'static str, (bool, String)>,
    runs: u64,
    /// Failed volume set-ups so far (the retry back-off grows with it).
    mount_failures: u32,
}

impl Worker {
    async fn run(mut self) {
        loop {
            if self.step() {
                return;
            }
            self.write_status();
            let next = self.next_timer();
            tokio::select! {
                biased;
                Some(cmd) = self.cmds.recv() => match cmd {
                    Cmd::Deleting => self.on_deleting(),
                },
                Some(exit) = self.exits.recv() => self.on_exit(exit),
                () = self.ready_changed.notified() => {}
                () = sleep_until_opt(next) => {}
            }
        }
    }

    fn next_timer(&self) -> Option<Instant> {
        let mut t: Vec<Instant> = self
            .init
            .iter()
            .chain(&self.main)
            .filter_map(|c| c.restart_at)
            .collect();
        if let Stage::Creating(at) = self.stage {
            t.push(at);
        }
        t.extend(self.deadline);
        t.into_iter().min()
    }

    /// Advances the pod; true when the worker is finished (the pod was finalized).
    fn step(&mut self) -> bool {
        let now = Instant::now();
        if let Some(deadline) = self.deadline {
            if now >= deadline {
                self.kill_running();
            }
            if lock(&self.shared.procs).is_empty() {
                self.finalize();
                return true;
            }
            return false;
        }
        if let Stage::Creating(at) = self.stage {
            if now < at {
                return false;
            }
            // Volumes are set up before the pod sandbox: a missing Secret or ConfigMap keeps
            // the pod ContainerCreating, retried with the volume manager's back-off (F10.7).
            if let Err(failure) = kube_emulator::populate_volumes(&self.k.cluster, &self.pod) {
                self.mount_failed(&failure);
                let delay = self.k.config.mount_retry_delay(self.mount_failures);
                self.mount_failures += 1;
                self.stage = Stage::Creating(now + delay);
                return false;
            }
            let n = self.k.next_ip.fetch_add(1, Ordering::SeqCst);
            let n = (n - 2) % 253 + 2;
            self.pod_ip = Some(format!("{}{n}", self.k.config.pod_ip_prefix));
            self.stage = Stage::Init(0);
            if let Some(c) = self.init.first_mut() {
                c.restart_at = Some(now);
            }
        }
        // Restarts (and first starts) that are due.
        for i in 0..self.init.len() + self.main.len() {
            let c = self.ctr(i);
            if c.restart_at.is_some_and(|t| t <= now) {
                self.start(i);
            }
        }
        if let Stage::Init(i) = self.stage {
            let mut i = i;
            while i < self.init.len() && self.init[i].exit_code() == Some(0) {
                i += 1;
                if i < self.init.len() {
                    self.start(i);
                }
            }
            if i == self.init.len() {
                self.stage = Stage::Main;
                for j in 0..self.main.len() {
                    self.start(self.init.len() + j);
                }
            } else {
                self.stage = Stage::Init(i);
                let c = &self.init[i];
                if c.exit_code().is_some_and(|e| e != 0) && c.restart_at.is_none() {
                    self.stage = Stage::Done; // restartPolicy Never: the pod fails.
                }
            }
        }
        if self.stage == Stage::Main
            && self
                .main
                .iter()
                .all(|c| c.exit_code().is_some() && c.restart_at.is_none())
        {
            self.stage = Stage::Done;
        }
        false
    }

    fn ctr(&self, i: usize) -> &Ctr {
        if i < self.init.len() {
            &self.init[i]
        } else {
            &self.main[i - self.init.len()]
        }
    }

    fn ctr_mut(&mut self, i: usize) -> &mut Ctr {
        let n = self.init.len();
        if i < n {
            &mut self.init[i]
        } else {
            &mut self.main[i - n]
        }
    }

    /// Posts (or counts again) the kubelet's `FailedMount` warning on the pod.
    fn mount_failed(&self, failure: &kube_emulator::MountFailure) {
        let events = ResourceRef::new("", "v1", "events");
        let now = self.k.cluster.now_rfc3339();
        let name = format!("{}.failedmount.{}", self.name, failure.volume);
        if let Ok(mut ev) = self.k.cluster.get(&events, Some(&self.ns), &name) {
            let count = ev.get("count").and_then(Value::as_u64).unwrap_or(1) + 1;
            ev["count"] = json!(count);
            ev["lastTimestamp"] = json!(now);
            ev["message"] = json!(failure.message);
            let _ = self.k.cluster.update(&events, Some(&self.ns), &name, ev);
            return;
        }
        let ev = json!({
            "metadata": {"name": name, "namespace": self.ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": self.name,
                               "namespace": self.ns, "uid": self.uid},
            "reason": "FailedMount",
            "message": failure.message,
            "type": "Warning",
            "source": {"component": "kubelet", "host": self.k.config.node_name},
            "reportingComponent": "kubelet",
            "reportingInstance": self.k.config.node_name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        let _ = self.k.cluster.create(&events, Some(&self.ns), ev);
    }

    /// Starts (or restarts) container `i` (init containers first, then containers).
    fn start(&mut self, i: usize) {
        // A fresh snapshot of the API-backed volumes for the new container; if an object has
        // gone since, the files stay as they were (the kubelet keeps the last contents).
        let _ = kube_emulator::populate_volumes(&self.k.cluster, &self.pod);
        self.runs += 1;
        let run = self.runs;
        let k = self.k.clone();
        let (ns, pod, uid) = (self.ns.clone(), self.name.clone(), self.uid.clone());
        let env = self.env_of(i);
        let host_pid = k.next_pid.fetch_add(1, Ordering::SeqCst);
        let ns_pid = self.shared.info.next_ns_pid();
        let ready_changed = self.ready_changed.clone();
        let exits = self.shared.exits.clone();
        let now = k.cluster.now_rfc3339();
        let restart_policy = self.restart_policy.clone();
        let pod_ip = self.pod_ip.clone();
        let c = self.ctr_mut(i);
        c.restart_at = None;
        if c.run > 0 {
            // A restart: the count goes up as the new container starts (during a back-off the
            // status shows the old count and the crash in lastState), the log becomes previous.
            if let Some(t) = c.terminated_json() {
                c.last = Some(t);
            }
            c.restarts += 1;
            k.cluster.restart_container_log(&ns, &pod, &c.name);
        }
        c.run = run;
        c.ran_since = Some(Instant::now());
        c.container_id = Some(format!(
            "containerd://{}",
            hex64(&format!("{uid}/{}/{run}", c.name))
        ));
        c.state = CState::Running { started: now };
        c.ready.store(false, Ordering::SeqCst);
        let argv: Vec<String> = ["command", "args"]
            .iter()
            .filter_map(|f| c.spec.get(*f).and_then(Value::as_array))
            .flatten()
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        // The image's own entrypoint is not known here: its repository stands in for it.
        let cmdline = if argv.is_empty() {
            vec![crate::program::repository(&c.image).to_string()]
        } else {
            argv.clone()
        };
        let environ: Vec<(String, String)> =
            env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let container_id = c.container_id.clone().unwrap_or_default();
        let req = ExecRequest {
            namespace: ns.clone(),
            pod: pod.clone(),
            pod_uid: uid.clone(),
            container: c.name.clone(),
            argv: vec![],
            stdin: vec![],
            env: BTreeMap::new(),
            workdir: "/".into(),
            tty: false,
        };
        let mounts = container_mounts(&k.cluster, &req);
        let (mut ctx, signals, ready) = ContainerCtx::new(
            k.cluster.clone(),
            k.network.clone(),
            &ns,
            &pod,
            &uid,
            &c.name,
            argv,
            env,
            mounts,
        );
        ctx.restart_count = c.restarts;
        ctx.restart_policy = restart_policy;
        ctx.image = c.image.clone();
        ctx.spec = c.spec.clone();
        ctx.pod_ip = pod_ip;
        ctx.ready_changed = ready_changed;
        c.ready = ready;
        let program = c.program.clone();
        program.on_start(&ctx);
        let name = c.name.clone();
        let task = tokio::spawn({
            let name = name.clone();
            async move {
                let code = program.run(ctx).await;
                let _ = exits.send(Exit {
                    container: name,
                    run,
                    code,
                });
            }
        });
        lock(&self.shared.procs).insert(
            name,
            Proc {
                run,
                signals,
                task: task.abort_handle(),
                host_pid,
                ns_pid,
                cmdline,
                environ,
                container_id,
            },
        );
    }

    /// Environment of container `i`: literal values and the downward API / Secret / ConfigMap
    /// references that resolve now (unresolvable ones are left out).
    fn env_of(&self, i: usize) -> BTreeMap<String, String> {
        let spec = &self.ctr(i).spec;
        let mut env = BTreeMap::new();
        for e in spec
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(name) = s(e, "/name") else { continue };
            let value = if let Some(v) = s(e, "/value") {
                Some(v.to_string())
            } else if let Some(f) = s(e, "/valueFrom/fieldRef/fieldPath") {
                match f {
                    "status.podIP" => self.pod_ip.clone(),
                    "status.hostIP" => Some(self.k.config.host_ip.clone()),
                    "spec.nodeName" => Some(self.k.config.node_name.clone()),
                    _ => f
                        .strip_prefix("metadata.")
                        .or_else(|| f.strip_prefix("spec."))
                        .and_then(|_| s(&self.pod, &format!("/{}", f.replace('.', "/"))))
                        .map(String::from),
                }
            } else if let Some(r) = e.at("/valueFrom/secretKeyRef") {
                let secret = self.k.cluster.get(
                    &ResourceRef::new("", "v1", "secrets"),
                    Some(&self.ns),
                    s(r, "/name").unwrap_or_default(),
                );
                secret.ok().and_then(|sec| {
                    let key = s(r, "/key")?;
                    sec.at("/data")
                        .and_then(|d| d.get(key))
                        .and_then(Value::as_str)
                        .and_then(base64_decode)
                        .or_else(|| {
                            sec.at("/stringData")
                                .and_then(|d| d.get(key))
                                .and_then(Value::as_str)
                                .map(String::from)
                        })
                })
            } else if let Some(r) = e.at("/valueFrom/configMapKeyRef") {
                let cm = self.k.cluster.get(
                    &ResourceRef::new("", "v1", "configmaps"),
                    Some(&self.ns),
                    s(r, "/name").unwrap_or_default(),
                );
                cm.ok().and_then(|cm| {
                    cm.at("/data")
                        .and_then(|d| d.get(s(r, "/key")?))
                        .and_then(Value::as_str)
                        .map(String::from)
                })
            } else {
                None
            };
            if let Some(v) = value {
                env.insert(name.to_string(), v);
            }
        }
        env
    }

    fn on_exit(&mut self, exit: Exit) {
        let Some(i) = (0..self.init.len() + self.main.len()).find(|&i| {
            let c = self.ctr(i);
            c.name == exit.container && c.run == exit.run && c.is_running()
        }) else {
            return;
        };
        {
            let mut procs = lock(&self.shared.procs);
            if procs
                .get(&exit.container)
                .is_some_and(|p| p.run == exit.run)
            {
                procs.remove(&exit.container);
            }
        }
        let now = self.k.cluster.now_rfc3339();
        let deleting = self.deadline.is_some();
        let policy = self.restart_policy.clone();
        let cfg = self.k.config.clone();
        let (ns, pod, uid) = (self.ns.clone(), self.name.clone(), self.uid.clone());
        let c = self.ctr_mut(i);
        let started = match &c.state {
            CState::Running { started } => started.clone(),
            _ => now.clone(),
        };
        c.state = CState::Terminated {
            code: exit.code,
            started,
            finished: now,
        };
        let restart = !deleting
            && match policy.as_str() {
                "Never" => false,
                // Init containers restart only on failure (OnFailure and Always alike).
                "OnFailure" => exit.code != 0,
                _ => !c.init || exit.code != 0,
            };
        if !restart {
            return;
        }
        if c.ran_since
            .is_some_and(|t| t.elapsed() >= cfg.restart_backoff_reset)
        {
            c.backoff_n = 0;
        }
        c.backoff_n += 1;
        let delay = cfg.restart_delay(c.backoff_n);
        c.restart_at = Some(Instant::now() + delay);
        if !delay.is_zero() {
            // The terminated state moves to lastState while the back-off runs.
            c.last = c.terminated_json();
            c.state = CState::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: Some(format!(
                    "back-off {}s restarting failed container={} pod={pod}_{ns}({uid})",
                    delay.as_secs(),
                    c.name
                )),
            };
        }
    }

    fn on_deleting(&mut self) {
        let Ok(pod) = self
            .k
            .cluster
            .get(&ResourceRef::pods(), Some(&self.ns), &self.name)
        else {
            return;
        };
        if s(&pod, "/metadata/uid") != Some(self.uid.as_str()) {
            return;
        }
        let due = s(&pod, "/metadata/deletionTimestamp")
            .and_then(kube_emulator::parse_unix)
            .unwrap_or(0);
        let left = (due - self.k.cluster.now_unix() as i64).max(0) as u64;
        let deadline = Instant::now() + Duration::from_secs(left);
        if self.deadline.is_none() {
            for c in self.init.iter_mut().chain(self.main.iter_mut()) {
                c.restart_at = None;
            }
            let names: Vec<String> = lock(&self.shared.procs).keys().cloned().collect();
            for n in names {
                self.shared.deliver(&n, Signal::Term);
            }
        }
        self.deadline = Some(self.deadline.map_or(deadline, |d| d.min(deadline)));
    }

    /// The grace period is over: programs still running are dropped (exit 137).
    fn kill_running(&mut self) {
        let names: Vec<String> = lock(&self.shared.procs).keys().cloned().collect();
        for n in names {
            self.shared.deliver(&n, Signal::Kill);
        }
        while let Ok(exit) = self.exits.try_recv() {
            self.on_exit(exit);
        }
    }

    /// Containers stopped: last status, endpoints gone, then the final grace-0 delete.
    fn finalize(&mut self) {
        while let Ok(exit) = self.exits.try_recv() {
            self.on_exit(exit);
        }
        self.stage = Stage::Done;
        self.write_status();
        self.k.network.unbind_pod(&self.ns, &self.name);
        for c in self.init.iter().chain(&self.main) {
            c.program.pod_finished(&self.uid);
        }
        let _ = self.k.cluster.delete(
            &ResourceRef::pods(),
            Some(&self.ns),
            &self.name,
            &DeleteOptions {
                grace_period_seconds: Some(0),
                precondition_uid: Some(self.uid.clone()),
                ..Default::default()
            },
        );
    }

    fn phase(&self) -> &'static str {
        if self.deadline.is_some() && self.stage == Stage::Done {
            // Stopped for deletion: terminal like a 1.27+ kubelet reports it.
            return if self.main.iter().all(|c| c.exit_code() == Some(0)) {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        match self.stage {
            Stage::Creating(_) | Stage::Init(_) => "Pending",
            Stage::Done if self.main.iter().all(|c| c.run == 0) => {
                // Never got past the init containers (or never started).
                if self
                    .init
                    .iter()
                    .any(|c| c.exit_code().is_some_and(|e| e != 0))
                {
                    "Failed"
                } else {
                    "Pending"
                }
            }
            Stage::Main | Stage::Done => {
                if self
                    .main
                    .iter()
                    .any(|c| c.is_running() || c.restart_at.is_some())
                {
                    "Running"
                } else if self.main.iter().all(|c| c.exit_code() == Some(0)) {
                    "Succeeded"
                } else {
                    "Failed"
                }
            }
        }
    }

    fn condition(
        &mut self,
        type_: &'static str,
        ok: bool,
        reason: Option<(&str, String)>,
    ) -> Value {
        let now = self.k.cluster.now_rfc3339();
        let entry = self
            .transitions
            .entry(type_)
            .or_insert_with(|| (ok, now.clone()));
        if entry.0 != ok {
            *entry = (ok, now);
        }
        let mut c = json!({
            "type": type_,
            "status": if ok { "True" } else { "False" },
            "lastProbeTime": null,
            "lastTransitionTime": entry.1,
        });
        if let (false, Some((r, m))) = (ok, reason) {
            c["reason"] = json!(r);
            if !m.is_empty() {
                c["message"] = json!(m);
            }
        }
        c
    }

    fn build_status(&mut self) -> Map<String, Value> {
        let phase = self.phase();
        let sandbox = !matches!(self.stage, Stage::Creating(_));
        let initialized = self.init.iter().all(|c| c.exit_code() == Some(0));
        let unready: Vec<&str> = self
            .main
            .iter()
            .filter(|c| !(c.is_running() && c.ready.load(Ordering::SeqCst)))
            .map(|c| c.name.as_str())
            .collect();
        let incomplete: Vec<&str> = self
            .init
            .iter()
            .filter(|c| c.exit_code() != Some(0))
            .map(|c| c.name.as_str())
            .collect();
        let ready = phase == "Running" && unready.is_empty();
        let ready_reason = match phase {
            "Failed" => ("PodFailed", String::new()),
            "Succeeded" => ("PodCompleted", String::new()),
            _ => (
                "ContainersNotReady",
                format!("containers with unready status: [{}]", unready.join(" ")),
            ),
        };
        let init_reason = (
            "ContainersNotInitialized",
            format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            ),
        );
        let scheduled = self
            .pod
            .at("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type") == Some(&json!("PodScheduled")))
            })
            .cloned()
            .unwrap_or_else(
                || json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null}),
            );
        let conditions = vec![
            self.condition("PodReadyToStartContainers", sandbox, None),
            self.condition("Initialized", initialized, Some(init_reason)),
            self.condition(READY_CONDITION, ready, Some(ready_reason.clone())),
            self.condition("ContainersReady", ready, Some(ready_reason)),
            scheduled,
        ];
        let pending_init = !initialized;
        let mut st = Map::new();
        st.insert("phase".into(), json!(phase));
        st.insert("conditions".into(), Value::Array(conditions));
        st.insert("hostIP".into(), json!(self.k.config.host_ip));
        st.insert("hostIPs".into(), json!([{"ip": self.k.config.host_ip}]));
        if let Some(ip) = &self.pod_ip {
            st.insert("podIP".into(), json!(ip));
            st.insert("podIPs".into(), json!([{"ip": ip}]));
        }
        st.insert("startTime".into(), json!(self.start_time));
        if !self.init.is_empty() {
            st.insert(
                "initContainerStatuses".into(),
                Value::Array(self.init.iter().map(|c| c.status(false)).collect()),
            );
        }
        st.insert(
            "containerStatuses".into(),
            Value::Array(self.main.iter().map(|c| c.status(pending_init)).collect()),
        );
        st
    }

    /// Writes the status if it differs from the stored one (same uid only).
    fn write_status(&mut self) {
        let mine = self.build_status();
        // Compared in place: the worker runs on every store change and most of them leave its
        // pod's status as it is; copying the whole pod to find that out was a top item of the
        // proof's profile.
        let merged =
            self.k
                .cluster
                .inspect(&ResourceRef::pods(), Some(&self.ns), &self.name, |cur| {
                    if s(cur, "/metadata/uid") != Some(self.uid.as_str()) {
                        return None;
                    }
                    let stored = cur.get("status").and_then(Value::as_object);
                    if stored.is_some_and(|st| mine.iter().all(|(k, v)| st.get(k) == Some(v))) {
                        return None;
                    }
                    let mut status = stored.cloned().unwrap_or_default();
                    status.extend(mine);
                    Some(Value::Object(status))
                });
        let Ok(Some(status)) = merged else {
            return;
        };
        let body = json!({"metadata": {"name": self.name, "namespace": self.ns}, "status": status});
        if let Ok(p) =
            self.k
                .cluster
                .update_status(&ResourceRef::pods(), Some(&self.ns), &self.name, body)
        {
            self.pod = p;
        }
    }
}

async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Standard base64 (Secret `data`), None when malformed.
fn base64_decode(text: &str) -> Option<String> {
    const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in text
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'=')
    {
        let v = ALPHA.iter().position(|&a| a == b)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_data_decodes_from_standard_base64() {
        assert_eq!(base64_decode("aGVsbG8=").as_deref(), Some("hello"));
        assert_eq!(base64_decode("a2V5").as_deref(), Some("key"));
        assert_eq!(base64_decode("!!"), None);
    }
}
