//! The kubelet's shared state: the node's pods (one worker each), the address and PID counters,
//! and the small helpers every part of the kubelet uses.

use kube_emulator::Pointer;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::kube_config::KubeConfig;
use crate::network::Network;
use crate::procs::{NodePods, PodShared};
use crate::program::Programs;
use kube_emulator::{Cluster, ResourceRef};

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.at(ptr).and_then(Value::as_str)
}

pub(super) fn pvcs() -> ResourceRef {
    ResourceRef::new("", "v1", "persistentvolumeclaims")
}

pub(crate) struct Inner {
    pub(super) cluster: Cluster,
    pub(super) network: Network,
    pub(super) programs: Programs,
    pub(super) config: KubeConfig,
    /// Pod workers by pod uid.
    pub(super) pods: Mutex<BTreeMap<String, PodEntry>>,
    pub(super) next_ip: AtomicU32,
    /// The next host PID on the node.
    pub(super) next_pid: AtomicU32,
}

pub(super) struct PodEntry {
    pub(super) ns: String,
    pub(super) name: String,
    pub(super) cmds: mpsc::UnboundedSender<Cmd>,
    pub(super) shared: Arc<PodShared>,
    pub(super) task: JoinHandle<()>,
    /// The deletionTimestamp last told to the worker.
    pub(super) deletion: Option<String>,
}

pub(super) enum Cmd {
    /// The pod has (or has a new) deletionTimestamp.
    Deleting,
}

impl NodePods for Inner {
    /// Every pod this kubelet runs now (what a `hostPID` pod sees of the node).
    fn all_pods(&self) -> Vec<Arc<PodShared>> {
        lock(&self.pods)
            .values()
            .map(|e| e.shared.clone())
            .collect()
    }
}
