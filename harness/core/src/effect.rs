//! What a fault does, in Kubernetes terms, worked out once from the fault and where the
//! topology puts a sandbox's parts. Every target carries out the same effect its own way (the
//! emulated one on its models, the real one through the API with a restore journal), so which
//! pod a supervisor kill hits or which container it reaches is decided here, once.

use std::collections::BTreeMap;

use crate::target::{BootstrapMaterial, Fault, sandbox_resource_name};
use crate::topology::{SupervisorPlacement, Topology};

/// Where a sandbox's parts are on the cluster: enough to aim a fault at them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxLayout {
    /// The OpenShell workspace the harness creates sandboxes in.
    pub workspace: String,
    /// The sandbox pod's workload container.
    pub workload_container: String,
    pub supervisor: SupervisorPlacement,
}

impl SandboxLayout {
    pub fn of(topology: &Topology, workspace: &str) -> Self {
        Self {
            workspace: workspace.to_string(),
            workload_container: topology.workload.container.clone(),
            supervisor: topology.supervisor.clone(),
        }
    }
}

/// Where a sandbox's supervisor runs: to kill it, or to read its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SupervisorAt {
    /// A container of the sandbox's own pod.
    Container { pod: String, container: String },
    /// The container of the pods matching `labels` (the sandbox's own supervisor pod, replaced
    /// with its own name each time, or the pods of the supervisor every sandbox shares).
    Labelled {
        labels: BTreeMap<String, String>,
        container: String,
    },
}

impl SandboxLayout {
    /// Where `sandbox`'s supervisor runs, and whether it serves that sandbox alone.
    pub fn supervisor_of(&self, sandbox: &str) -> (SupervisorAt, bool) {
        let pod = sandbox_resource_name(&self.workspace, sandbox);
        match &self.supervisor {
            SupervisorPlacement::WorkloadContainer => (
                SupervisorAt::Container {
                    pod,
                    container: self.workload_container.clone(),
                },
                true,
            ),
            SupervisorPlacement::SidecarContainer { container } => (
                SupervisorAt::Container {
                    pod,
                    container: container.clone(),
                },
                true,
            ),
            SupervisorPlacement::DedicatedPod {
                selector,
                sandbox_label,
                container,
                ..
            } => {
                let mut labels = selector.clone();
                labels.insert(sandbox_label.clone(), pod);
                (
                    SupervisorAt::Labelled {
                        labels,
                        container: container.clone(),
                    },
                    true,
                )
            }
            SupervisorPlacement::SharedDeployment {
                selector,
                container,
                ..
            } => (
                SupervisorAt::Labelled {
                    labels: selector.clone(),
                    container: container.clone(),
                },
                false,
            ),
        }
    }

    /// Where `sandbox`'s supervisor logs: its own, or the one that serves every sandbox (whose
    /// lines say which sandbox they are for, [`crate::retries::parse_attempts_of`]).
    pub fn supervisor_log(&self, sandbox: &str) -> SupervisorAt {
        self.supervisor_of(sandbox).0
    }
}

/// Which process a kill ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Process {
    /// The OpenShell supervisor (in the workload container, or its own sidecar container).
    Supervisor,
    /// The sandbox's main process.
    Main,
}

/// What a fault does to the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultEffect {
    /// The gateway's workload is scaled to zero and its pods are gone; restoring scales it back
    /// and waits until it is ready.
    GatewayScaledDown,
    /// The gateway's pods are deleted; their controller replaces them, and restoring waits until
    /// the replacements are ready.
    GatewayPodsDeleted,
    /// The sandbox's pod is deleted; the Agent Sandbox controller creates a replacement, which
    /// bootstraps again.
    SandboxPodDeleted { pod: String },
    /// A process in a container of the sandbox's pod is killed; nothing is put back (pods run
    /// with `restartPolicy: Never`).
    ProcessKilled {
        pod: String,
        container: String,
        process: Process,
    },
    /// The pods matching `labels` (a sandbox's own supervisor pod, or the shared supervisor's)
    /// are deleted; their controller replaces them.
    PodsDeleted {
        labels: BTreeMap<String, String>,
        what: &'static str,
    },
    /// The sandbox's bootstrap material is made wrong until restored.
    BootstrapBroken {
        resource: String,
        material: BootstrapMaterial,
    },
}

impl FaultEffect {
    pub fn of(fault: &Fault, layout: &SandboxLayout) -> Self {
        let resource = |sandbox: &str| sandbox_resource_name(&layout.workspace, sandbox);
        match fault {
            Fault::GatewayStop => Self::GatewayScaledDown,
            Fault::GatewayRestart => Self::GatewayPodsDeleted,
            Fault::SandboxPodReplace { sandbox } => Self::SandboxPodDeleted {
                pod: resource(sandbox),
            },
            Fault::MainProcessKill { sandbox } => Self::ProcessKilled {
                pod: resource(sandbox),
                container: layout.workload_container.clone(),
                process: Process::Main,
            },
            Fault::BootstrapCredentials { sandbox, what } => Self::BootstrapBroken {
                resource: resource(sandbox),
                material: *what,
            },
            Fault::SupervisorKill { sandbox } => match layout.supervisor_of(sandbox) {
                (SupervisorAt::Container { pod, container }, _) => Self::ProcessKilled {
                    pod,
                    container,
                    process: Process::Supervisor,
                },
                (SupervisorAt::Labelled { labels, .. }, own) => Self::PodsDeleted {
                    labels,
                    what: if own {
                        "the sandbox's supervisor pod"
                    } else {
                        "the shared supervisor's pods"
                    },
                },
            },
        }
    }
}

/// `k=v,k2=v2`, as a Kubernetes label selector.
pub fn label_selector(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topologies;

    fn layout(topology: &str) -> SandboxLayout {
        SandboxLayout::of(Topologies::builtin().get(topology).unwrap(), "default")
    }

    fn kill(topology: &str) -> FaultEffect {
        FaultEffect::of(
            &Fault::SupervisorKill {
                sandbox: "demo".into(),
            },
            &layout(topology),
        )
    }

    #[test]
    fn a_supervisor_kill_reaches_the_process_where_the_topology_runs_it_in_the_sandbox_pod() {
        assert_eq!(
            kill("combined"),
            FaultEffect::ProcessKilled {
                pod: "default--demo".into(),
                container: "agent".into(),
                process: Process::Supervisor,
            }
        );
        let FaultEffect::ProcessKilled { container, .. } = kill("sidecar") else {
            panic!("a sidecar's supervisor is a process in the sandbox pod");
        };
        assert_ne!(
            container, "agent",
            "the sidecar's own container, not the workload's"
        );
    }

    #[test]
    fn a_supervisor_kill_deletes_the_sandbox_s_own_supervisor_pod_or_the_shared_one() {
        let FaultEffect::PodsDeleted { labels, .. } = kill("supervisor-pod") else {
            panic!("a dedicated supervisor is a pod");
        };
        assert!(labels.values().any(|v| v == "default--demo"), "{labels:?}");
        let FaultEffect::PodsDeleted { labels, .. } = kill("gateway") else {
            panic!("a shared supervisor is a Deployment's pods");
        };
        assert!(!labels.values().any(|v| v == "default--demo"), "{labels:?}");
    }

    #[test]
    fn the_other_faults_aim_at_the_gateway_or_the_sandbox_s_own_objects() {
        let l = layout("sidecar");
        assert_eq!(
            FaultEffect::of(&Fault::GatewayStop, &l),
            FaultEffect::GatewayScaledDown
        );
        assert_eq!(
            FaultEffect::of(&Fault::GatewayRestart, &l),
            FaultEffect::GatewayPodsDeleted
        );
        assert_eq!(
            FaultEffect::of(
                &Fault::SandboxPodReplace {
                    sandbox: "demo".into()
                },
                &l
            ),
            FaultEffect::SandboxPodDeleted {
                pod: "default--demo".into()
            }
        );
        assert_eq!(
            FaultEffect::of(
                &Fault::MainProcessKill {
                    sandbox: "demo".into()
                },
                &l
            ),
            FaultEffect::ProcessKilled {
                pod: "default--demo".into(),
                container: "agent".into(),
                process: Process::Main,
            }
        );
    }

    #[test]
    fn a_label_selector_lists_every_label_in_order() {
        let labels = BTreeMap::from([("b".to_string(), "2".to_string()), ("a".into(), "1".into())]);
        assert_eq!(label_selector(&labels), "a=1,b=2");
    }
}
