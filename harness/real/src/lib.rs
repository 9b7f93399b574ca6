#![warn(unreachable_pub)]
//! The real-cluster path: kind, k3d or an existing cluster, Agent Sandbox and OpenShell
//! installed with helm, the gateway reached through an in-process port-forward, sandboxes
//! driven through the `openshell` CLI, faults through the Kubernetes API with a restore
//! journal, diagnostics bundles and a doctor.
//!
//! Everything that shells out goes through [`command::CommandRunner`], so plans can be printed
//! (`run --dry-run`, [`plan::dry_run`]) and tests replay recorded outputs; Kubernetes access
//! goes through `kube::Client`, so the same code runs against the emulated API server.
//!
//! Entry points for the CLI: [`options::RealArgs`] (flatten into `run`, `doctor`, `cluster`,
//! `restore`), [`plan::dry_run`], [`doctor::run`], [`target::RealFactory`],
//! [`cluster::provider`] (`cluster up|down`), [`journal::restore_from`] and
//! [`diagnostics::collect`].

mod apiclient;
mod cli;
pub mod clock_skew;
pub mod cluster;
pub mod command;
pub mod completeness;
mod diagnostics;
/// The reports link the diagnostics bundle a case's timeline names.
pub use diagnostics::bundle_of;
pub mod doctor;
mod faults;
pub mod fetch;
mod gateway;
mod gateway_log;
mod install;
mod interlock;
pub mod journal;
#[cfg(feature = "k3s")]
pub mod k3s;
mod kexec;
mod leftovers;
pub mod options;
mod pins;
pub mod plan;
mod portforward;
mod private;
mod reads;
mod realtime;
mod scaled_race;
mod steps;
pub mod target;
mod watch;
mod workspace;

#[cfg(test)]
mod tests;
