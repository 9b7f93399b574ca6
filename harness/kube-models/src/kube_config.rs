//! Every timing constant and version switch of the Kubernetes models as named data, with
//! defaults that follow upstream (docs/upstream-facts.md sections 3-5 and 10).

use std::time::Duration;

use crate::agent_sandbox::AgentSandboxVersion;

/// How PersistentVolumeClaims get bound (docs/upstream-facts.md F10.1: kind and k3d use
/// `WaitForFirstConsumer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VolumeBinding {
    /// Bound when the first pod that uses the claim is scheduled (the default, as kind/k3d).
    WaitForFirstConsumer,
    /// Bound as soon as the kubelet sees the claim.
    Immediate,
}

/// Every constant of the Kubernetes models, with defaults that follow upstream.
#[derive(Clone, Debug)]
pub struct KubeConfig {
    /// The single node's name (`spec.nodeName` of every scheduled pod).
    pub node_name: String,
    /// The node's address (`status.hostIP`).
    pub host_ip: String,
    /// Pod IPs are `<pod_ip_prefix><n>`, n = 2, 3, … in start order (deterministic).
    pub pod_ip_prefix: String,
    /// From scheduling to the pod sandbox being ready (image pull + sandbox creation); the
    /// containers start after it. Default 1 s.
    pub pod_start_delay: Duration,
    /// CrashLoopBackOff: the first back-off (kubelet `initialBackOff`, 10 s).
    pub restart_backoff_initial: Duration,
    /// CrashLoopBackOff cap (kubelet `MaxContainerBackOff`, 300 s).
    pub restart_backoff_max: Duration,
    /// A container that ran at least this long restarts with the initial back-off again
    /// (kubelet resets the back-off after 2 × max = 10 min without a crash).
    pub restart_backoff_reset: Duration,
    /// The kubelet restarts a container the first time it exits without waiting (its back-off
    /// entry only exists from then on), then waits initial, 2 × initial, … up to max.
    /// Set to false to wait the initial back-off before the first restart too.
    pub first_restart_immediate: bool,
    /// PVC binding mode (see [`VolumeBinding`]).
    pub volume_binding: VolumeBinding,
    /// `storageClassName` given to claims that have none (the default class of kind/k3d).
    pub storage_class: String,
    /// Which Agent Sandbox controller release to model (docs/upstream-facts.md F0.2). Default
    /// v0.5.0, the OpenShell CI default.
    pub agent_sandbox_version: AgentSandboxVersion,
    /// Whether the Agent Sandbox controller runs in-process from the start. False where it runs
    /// only as the program of its image's pod (the manifest's Deployment installs it).
    pub agent_sandbox_in_process: bool,
    /// The first retry after a failed volume set-up; doubled on each failure up to
    /// `mount_retry_max` (the kubelet's operation back-off: 500 ms to 2 min, F10.7).
    pub mount_retry_initial: Duration,
    pub mount_retry_max: Duration,
}

impl Default for KubeConfig {
    fn default() -> Self {
        Self {
            node_name: "emulated-node".into(),
            host_ip: "172.18.0.2".into(),
            pod_ip_prefix: "10.244.0.".into(),
            pod_start_delay: Duration::from_secs(1),
            restart_backoff_initial: Duration::from_secs(10),
            restart_backoff_max: Duration::from_secs(300),
            restart_backoff_reset: Duration::from_secs(600),
            first_restart_immediate: true,
            volume_binding: VolumeBinding::WaitForFirstConsumer,
            storage_class: "standard".into(),
            agent_sandbox_version: AgentSandboxVersion::V0_5_0,
            agent_sandbox_in_process: true,
            mount_retry_initial: Duration::from_millis(500),
            mount_retry_max: Duration::from_secs(120),
        }
    }
}

impl KubeConfig {
    /// The wait after failed volume set-up number `failures` (0-based).
    pub fn mount_retry_delay(&self, failures: u32) -> Duration {
        let factor = 1u32.checked_shl(failures.min(31)).unwrap_or(u32::MAX);
        self.mount_retry_initial
            .saturating_mul(factor)
            .min(self.mount_retry_max)
    }

    /// The back-off before restart number `restart` (1-based) of a container.
    pub fn restart_delay(&self, restart: u32) -> Duration {
        let steps = if self.first_restart_immediate {
            if restart <= 1 {
                return Duration::ZERO;
            }
            restart - 2
        } else {
            restart.saturating_sub(1)
        };
        let factor = 1u32.checked_shl(steps.min(31)).unwrap_or(u32::MAX);
        self.restart_backoff_initial
            .saturating_mul(factor)
            .min(self.restart_backoff_max)
    }
}
