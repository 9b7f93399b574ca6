//! The Kubernetes models in one call: [`KubeModels::start`] runs the kubelet, the workload
//! controllers (StatefulSet, Deployment → ReplicaSet), the Job controller and the Agent Sandbox
//! controller on a [`Cluster`], and [`KubeConfig`] holds every timing constant and version switch they use as
//! named data (sources: docs/upstream-facts.md sections 3-5 and 10).

use tokio::task::JoinHandle;

use crate::agent_sandbox::AgentSandboxController;
pub use crate::kube_config::KubeConfig;
use crate::kubelet::Kubelet;
use crate::network::Network;
use crate::program::Programs;
use crate::workloads::WorkloadControllers;
use kube_emulator::Cluster;

/// The Kubernetes models alone (kubelet, workload, Job and Agent Sandbox controllers), with no
/// OpenShell program registered: every image runs as the kubelet's default program does (the
/// emulated shell, or a process that does nothing for an executable it does not know). What
/// `emulate serve` runs without `--model`. Dropping it stops them.
pub struct KubernetesModels {
    _models: KubeModels,
}

impl KubernetesModels {
    /// Starts them on `cluster`; call inside a tokio runtime.
    pub fn start(cluster: &Cluster) -> Self {
        Self {
            _models: KubeModels::start(
                cluster,
                &Network::new(),
                Programs::new(),
                KubeConfig::default(),
            ),
        }
    }
}

/// The running Kubernetes models. Dropping it stops them (their tasks are aborted); programs
/// already running in containers are stopped with them.
pub struct KubeModels {
    kubelet: Kubelet,
    tasks: Vec<JoinHandle<()>>,
}

impl KubeModels {
    /// Starts the kubelet, the workload and Job controllers and the Agent Sandbox controller. Call it
    /// inside a tokio runtime (paused time works: everything waits on tokio time or on changes).
    pub fn start(
        cluster: &Cluster,
        network: &Network,
        programs: Programs,
        config: KubeConfig,
    ) -> Self {
        let kubelet = Kubelet::new(cluster.clone(), network.clone(), programs, config.clone());
        let mut tasks = vec![
            kubelet.spawn(),
            WorkloadControllers::new(cluster.clone()).spawn(),
            crate::jobs::JobController::new(cluster.clone()).spawn(),
        ];
        if config.agent_sandbox_in_process {
            tasks.push(
                AgentSandboxController::new(cluster.clone(), config.agent_sandbox_version).spawn(),
            );
        }
        Self { kubelet, tasks }
    }

    #[cfg(test)]
    /// The kubelet: signal or kill one container of a pod, look at its programs.
    pub fn kubelet(&self) -> &Kubelet {
        &self.kubelet
    }
}

impl Drop for KubeModels {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.kubelet.stop_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_restart_back_off_is_immediate_then_ten_seconds_doubling_to_five_minutes() {
        let c = KubeConfig::default();
        let d: Vec<u64> = (1..=9).map(|n| c.restart_delay(n).as_secs()).collect();
        assert_eq!(d, [0, 10, 20, 40, 80, 160, 300, 300, 300]);
        let c = KubeConfig {
            first_restart_immediate: false,
            ..KubeConfig::default()
        };
        assert_eq!(c.restart_delay(1).as_secs(), 10);
        assert_eq!(c.restart_delay(2).as_secs(), 20);
    }
}
