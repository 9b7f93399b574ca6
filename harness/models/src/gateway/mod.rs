//! The OpenShell gateway model: a container program (image `ghcr.io/nvidia/openshell/gateway`)
//! that keeps sandbox records in a store on its PVC, derives phases, serves the client and
//! supervisor RPCs on port 8080 through [`conformance_kube_models::network::Network`], drives Sandbox CRs
//! through the Kubernetes driver, and holds the supervisor sessions in memory.
//!
//! Parts, lower first: [`store`] (durable rows), [`phase`] (derivation), [`rpc`] (types),
//! [`core`] (the rules over one record), [`state`] (one running gateway: the struct and what
//! every part builds on), [`driver`] (Kubernetes objects), [`startup`] (the startup sweep),
//! `client_rpc` and `supervisor_rpc` (the two RPC surfaces), [`config`] (the chart's
//! `gateway.toml`), [`grpc`] (the gRPC listener on port 8080), `program` (the container
//! program that wires them). No part imports one above it (`.ci/layering.py`).
//! `Fn.n` in comments are items of docs/upstream-facts.md.

mod client_rpc;
pub(crate) mod config;
pub(crate) mod core;
pub(crate) mod driver;
pub(crate) mod grpc;
mod identity;
pub(crate) mod phase;
mod program;
pub(crate) mod rpc;
pub(crate) mod startup;
pub(crate) mod state;
pub(crate) mod store;
mod supervisor_rpc;

pub(crate) use program::GatewayProgram;
pub(crate) use state::Gateway;
