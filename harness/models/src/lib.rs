#![warn(unreachable_pub)]
//! Reference models of OpenShell on Kubernetes, running against the emulated API server in
//! virtual time: the gateway, the supervisors per topology, the certificate generator, the
//! client and the install, selectable by release and defect switch ([`spec`]). They run on the
//! Kubernetes models of [`conformance_kube_models`] and plug in through its two seams: a
//! program per image (`conformance_kube_models::program`) and ports on its in-process network
//! (`conformance_kube_models::network`). Together with [`kube_emulator`] they form the
//! `emulated` target ([`target`]).

mod certgen;
mod client;
mod gateway;
pub mod host;
pub mod install;
mod model;
mod placement;
pub mod spec;
mod supervisor;
pub mod target;

pub use conformance_kube_models::KubernetesModels;
pub use spec::{DEFECTS, Defect, MODELS, Model, Selection};

#[cfg(test)]
mod tests;
