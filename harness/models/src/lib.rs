#![warn(unreachable_pub)]
//! Reference models of OpenShell on Kubernetes, running against the emulated API server in
//! virtual time: the Kubernetes parts (kubelet, workload controllers, the Agent Sandbox
//! controller) and the OpenShell parts (gateway, supervisors per topology, client), selectable
//! by model name and defect switches. Together with [`kube_emulator`] they form the `emulated`
//! target.
//!
//! Two seams keep the parts independent: [`program`] (what runs inside a container, started and
//! stopped by the kubelet) and [`network`] (in-process connections to pod ports through
//! Services, available only while a ready pod backs them).

mod agent_sandbox;
mod certgen;
mod client;
mod gateway;
pub mod host;
pub mod install;
mod jobs;
mod kube;
mod kube_config;
mod kubelet;
mod model;
mod network;
mod placement;
mod procs;
mod program;
pub mod spec;
mod supervisor;
pub mod target;
mod workloads;

pub use kube::KubernetesModels;
pub use spec::{DEFECTS, Defect, MODELS, Model, Selection};

#[cfg(test)]
mod tests;
