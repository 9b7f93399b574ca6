#![warn(unreachable_pub)]
//! Models of the Kubernetes side of a cluster, running against the emulated API server in
//! virtual time: the kubelet ([`kubelet`]: scheduler, worker, status), the StatefulSet,
//! Deployment and ReplicaSet controllers ([`workloads`]), the Job controller ([`jobs`]), the
//! Agent Sandbox controller ([`agent_sandbox`]), processes and signals ([`procs`]) and the
//! in-process network of Services ([`network`]). Nothing here knows OpenShell: it plugs in
//! through two seams, [`program`] (what runs inside a container, started and stopped by the
//! kubelet) and [`network`] (connections to pod ports, available only while a ready pod backs
//! them). Start at [`kube::KubeModels::start`]; every timing and version switch is named data
//! in [`kube_config::KubeConfig`].

pub mod agent_sandbox;
pub mod jobs;
pub mod kube;
pub mod kube_config;
pub mod kubelet;
pub mod network;
pub mod procs;
pub mod program;
pub mod workloads;

pub use kube::KubernetesModels;

#[cfg(test)]
mod tests;
