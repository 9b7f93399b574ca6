//! The running OpenShell model: what the gateway, the supervisors, the client and the target
//! share inside one emulated cluster. It holds the selection and the rules it implies, the
//! constants, the topology, the harness's fault switches, and the in-container process tables
//! (a main process and a supervisor process are not Kubernetes objects, so the target reaches
//! them here, like `kill` inside the container would).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use conformance_kube_models::program::Signal;
use kube_emulator::sync::watch;

use crate::spec::{Behaviour, Selection, Timings};
use conformance_core::target::{BootstrapMaterial, sandbox_resource_name, workspace_pvc_name};
use conformance_core::topology::Topology;

pub(crate) use conformance_upstream::{GATEWAY_ENDPOINT, GATEWAY_SERVICE_HOST, NAMESPACE};
/// Workspace of every sandbox the harness creates (`--workspace`, default `default`; F6.1).
pub(crate) const WORKSPACE: &str = conformance_core::scenario::DEFAULT_WORKSPACE;
pub(crate) const GATEWAY_IMAGE_REPO: &str = "ghcr.io/nvidia/openshell/gateway";
pub(crate) const SUPERVISOR_IMAGE_REPO: &str = "ghcr.io/nvidia/openshell/supervisor";
pub(crate) const SANDBOX_IMAGE_REPO: &str = "ghcr.io/nvidia/openshell-community/sandboxes/base";
pub(crate) const GRPC_PORT: u16 = conformance_upstream::GATEWAY_GRPC_PORT;

/// CR (and pod) name of a sandbox the harness creates: [`sandbox_resource_name`] in its workspace.
pub(crate) fn cr_name(name: &str) -> String {
    sandbox_resource_name(WORKSPACE, name)
}

/// The sandbox name of a CR the harness created ([`cr_name`] backwards).
pub(crate) fn sandbox_name(cr: &str) -> Option<&str> {
    cr.strip_prefix(WORKSPACE)?.strip_prefix("--")
}

/// The workspace PVC of a sandbox the harness creates (F3.2).
pub(crate) fn pvc_name(name: &str) -> String {
    workspace_pvc_name(&cr_name(name))
}

/// The main process as its container sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MainStatus {
    #[default]
    NotStarted,
    Running,
    Exited(i32),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MainState {
    /// The workload pod this state belongs to (a new pod starts from scratch).
    pub pod_uid: String,
    /// Increases with every launch in this pod.
    pub instance: u64,
    pub status: MainStatus,
    /// When the current status began (tokio time).
    pub since: Option<tokio::time::Instant>,
    /// The boundary decided the exit is final (0.0.111: the supervisor then exits too).
    pub terminal: bool,
}

/// The in-pod link between the boundary (policy, session, exit reports) and the process side
/// (main process), wherever the topology puts them: one process (combined), the control socket
/// (sidecar), or across pods (supervisor-pod, gateway).
pub struct Link {
    pub main: watch::Sender<MainState>,
    /// Set by the boundary once token exchange and policy fetch succeeded (0: not yet).
    pub bootstrapped: watch::Sender<u64>,
    /// Incremented by the boundary to relaunch the main process (restart policy, replay).
    pub relaunch: watch::Sender<u64>,
    /// The boundary process is alive (false when its container exited).
    pub boundary_alive: watch::Sender<bool>,
    /// The sidecar control channel's process end: the uid of the pod whose process supervisor
    /// holds it, and whether it is still open (F2.12).
    pub process_control: watch::Sender<(String, bool)>,
}

impl Default for Link {
    fn default() -> Self {
        Self {
            main: watch::channel(MainState::default()).0,
            bootstrapped: watch::channel(0).0,
            relaunch: watch::channel(0).0,
            boundary_alive: watch::channel(false).0,
            process_control: watch::channel((String::new(), false)).0,
        }
    }
}

type Kill = tokio::sync::mpsc::UnboundedSender<()>;
/// Signals a sandbox's main process: a fault's SIGKILL, or the SIGTERM its supervisor forwards.
type MainSignal = tokio::sync::mpsc::UnboundedSender<Signal>;

#[derive(Default)]
struct Tables {
    links: BTreeMap<String, Arc<Link>>,
    faults: BTreeMap<String, BTreeSet<BootstrapMaterial>>,
    /// Kill switches of main processes, by CR name.
    mains: BTreeMap<String, MainSignal>,
    /// Kill switches of supervisor processes, by CR name.
    supervisors: BTreeMap<String, Kill>,
    /// Main-process starts so far, by CR name, over all the sandbox's pods.
    starts: BTreeMap<String, u64>,
}

/// Told the sandbox's name and its main-process starts so far each time a supervisor starts a
/// main process (see [`OpenShellModel::on_main_start`]).
pub(crate) type StartHook = Arc<dyn Fn(&str, u64) + Send + Sync>;

/// Shared by every part of one model instance.
pub struct OpenShellModel {
    pub selection: Selection,
    pub behaviour: Behaviour,
    pub timings: Timings,
    /// The topology's description: every part reads where the supervisor runs, the workload
    /// container and the scheduling gate from it.
    pub topology: Topology,
    /// The OpenShell version images are tagged with.
    pub version: String,
    /// Told of every write of any gateway's store (see [`crate::gateway::store::ViewHook`]).
    pub(crate) views: crate::gateway::store::ViewSink,
    starts: Mutex<Option<StartHook>>,
    tables: Mutex<Tables>,
}

impl OpenShellModel {
    pub fn new(selection: Selection, topology: Topology) -> Arc<Self> {
        let behaviour = selection.behaviour();
        let version = selection.model.release().chart.version.to_string();
        Arc::new(Self {
            selection,
            behaviour,
            timings: Timings::default(),
            topology,
            version,
            views: Default::default(),
            starts: Mutex::default(),
            tables: Mutex::default(),
        })
    }

    /// Calls `hook` with the gateway's view of every sandbox each time a gateway writes its
    /// store, replacing any earlier hook.
    pub(crate) fn on_gateway_views(&self, hook: crate::gateway::store::ViewHook) {
        *self.views.lock().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    /// Calls `hook` each time a supervisor starts a sandbox's main process, replacing any
    /// earlier hook: the supervisor knows when it launches the main process, so the target
    /// reports starts without reading anything the workload wrote.
    pub(crate) fn on_main_start(&self, hook: StartHook) {
        *self.starts.lock().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    /// A supervisor starts the main process of the sandbox with CR `cr`.
    pub(crate) fn main_started(&self, cr: &str) {
        let n = {
            let mut t = self.tables();
            let n = t.starts.entry(cr.to_string()).or_default();
            *n += 1;
            *n
        };
        let hook = self
            .starts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let (Some(hook), Some(name)) = (hook, sandbox_name(cr)) {
            hook(name, n);
        }
    }

    /// Drops the hook and every table (links, kill switches): they hold gateways and clients
    /// that hold this model, and the cycle would outlive the case.
    pub(crate) fn release(&self) {
        *self.views.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *self.starts.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *self.tables() = Tables::default();
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn link(&self, cr: &str) -> Arc<Link> {
        self.tables()
            .links
            .entry(cr.to_string())
            .or_default()
            .clone()
    }

    pub fn set_fault(&self, cr: &str, f: BootstrapMaterial, on: bool) {
        let mut t = self.tables();
        let set = t.faults.entry(cr.to_string()).or_default();
        if on {
            set.insert(f);
        } else {
            set.remove(&f);
        }
    }

    pub(crate) fn has_fault(&self, cr: &str, f: BootstrapMaterial) -> bool {
        self.tables().faults.get(cr).is_some_and(|s| s.contains(&f))
    }

    pub(crate) fn register_main(&self, cr: &str, kill: MainSignal) {
        self.tables().mains.insert(cr.to_string(), kill);
    }

    pub(crate) fn register_supervisor(&self, cr: &str, kill: Kill) {
        self.tables().supervisors.insert(cr.to_string(), kill);
    }

    /// SIGKILLs the sandbox's main process; false if none runs.
    pub(crate) fn kill_main(&self, cr: &str) -> bool {
        self.signal_main(cr, Signal::Kill)
    }

    /// Sends `sig` to the sandbox's main process; false if none runs.
    pub(crate) fn signal_main(&self, cr: &str, sig: Signal) -> bool {
        self.tables()
            .mains
            .get(cr)
            .is_some_and(|k| k.send(sig).is_ok())
    }

    /// SIGKILLs the supervisor process of a sandbox container; false if none runs.
    pub fn kill_supervisor(&self, cr: &str) -> bool {
        self.tables()
            .supervisors
            .get(cr)
            .is_some_and(|k| k.send(()).is_ok())
    }
}
