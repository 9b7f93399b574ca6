//! The Agent Sandbox controller (kubernetes-sigs/agent-sandbox), per release.

/// Which Agent Sandbox release to model (k8s-objects.md §1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AgentSandboxVersion {
    /// Failed pod → `Ready=False DependenciesNotReady "Pod exists with phase: Failed"`.
    V0_5_0,
    /// Failed pod → `Ready=False PodFailed "Pod failed"`.
    V0_5_1,
    /// Persistent `Suspended` condition, `PodTerminating`, merge-patch status writes.
    V0_5_4,
}
