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

mod node;
mod scheduler;
mod status;
mod worker;

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

use crate::kube_config::KubeConfig;
use crate::network::Network;
use crate::program::Programs;
#[cfg(test)]
use crate::program::Signal;
use kube_emulator::Cluster;
use node::{Inner, lock};

/// The kubelet handle (cheap to clone).
#[derive(Clone)]
pub struct Kubelet {
    inner: Arc<Inner>,
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
    pub fn signal(&self, ns: &str, pod: &str, container: &str, sig: Signal) -> bool {
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
