//! The node's host side. On a served cluster whose images map to local binaries (the real
//! OpenShell gateway and supervisor), the kubelet model runs those containers as Linux
//! processes: each pod gets a network namespace wired to the node's bridge ([`net`]), each
//! container a mount and PID namespace with its volumes at their mount paths ([`process`]).
//! Everything here needs root (namespaces, mounts, veth pairs); [`unsupported`] says why a
//! machine cannot, so callers skip with a reason instead of failing.

pub mod clock;
mod error;
pub mod net;
pub mod process;

pub use error::NodeError;
pub use net::NetNs;

/// Why containers cannot run as processes on this machine, or `None` when they can.
pub fn unsupported() -> Option<String> {
    net::unsupported().or_else(process::unsupported)
}
