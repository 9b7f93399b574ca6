//! Pod networking (stub: API only; being implemented).
#![allow(unused_variables, clippy::unused_async)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use crate::{NetNs, NodeError};

/// Why pod networks cannot be made here (not root, no `ip`, no network namespaces).
pub fn unsupported() -> Option<String> {
    unimplemented!()
}

/// One node's network: a network namespace of its own holding a bridge with the node's address,
/// so several served clusters on one machine never share addresses or ports.
#[derive(Clone)]
pub struct NodeNetwork {}

impl NodeNetwork {
    /// A node namespace with a bridge at `node_ip/prefix` (e.g. 10.244.0.1/24).
    pub fn create(node_ip: Ipv4Addr, prefix: u8) -> Result<Self, NodeError> {
        unimplemented!()
    }
    pub fn node_ip(&self) -> Ipv4Addr {
        unimplemented!()
    }
    /// A listener inside the node namespace (the API server for pods, Service addresses).
    pub fn listen(&self, addr: SocketAddr) -> Result<tokio::net::TcpListener, NodeError> {
        unimplemented!()
    }
    /// A connection made from inside the node namespace (to pod IPs, for port-forward and
    /// Service proxying).
    pub async fn connect(&self, addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
        unimplemented!()
    }
    /// Makes `ip` a local address of the node namespace (a Service's ClusterIP).
    pub fn add_address(&self, ip: Ipv4Addr) -> Result<(), NodeError> {
        unimplemented!()
    }
    /// A pod's network namespace: loopback up, `eth0` with `ip` on the bridge, default route
    /// via the node. Removed when the returned value is dropped.
    pub fn add_pod(&self, ip: Ipv4Addr) -> Result<PodNetwork, NodeError> {
        unimplemented!()
    }
}

pub struct PodNetwork {}

impl PodNetwork {
    pub fn ip(&self) -> Ipv4Addr {
        unimplemented!()
    }
    pub fn netns(&self) -> Arc<NetNs> {
        unimplemented!()
    }
}
