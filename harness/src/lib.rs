//! openshell-conformance: an end-to-end conformance and chaos harness for NVIDIA OpenShell on
//! Kubernetes. The library holds the domain (topologies, scenarios, targets, timelines, checks),
//! the engine that runs cases and the reporters; the `emulate` module is the embedded Kubernetes
//! API server and `models` the OpenShell-on-Kubernetes behaviour that runs on it.

pub mod checks;
pub mod cli;
pub mod emulate;
pub mod engine;
pub mod error;
pub mod junit;
pub mod models;
pub mod observe;
pub mod real;
pub mod report;
pub mod scenario;
pub mod schedule;
pub mod target;
pub mod timeline;
pub mod topology;

/// The conformance catalog (requirements, scenarios, expectations). Its sources live in
/// `suites/src/` beside the catalog's own proof tests; they are compiled here so that the
/// `openshell-conformance` binary can run them without a dependency cycle.
#[path = "../../suites/src/suites.rs"]
pub mod suites;
