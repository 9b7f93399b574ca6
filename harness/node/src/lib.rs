//! The node's host side. On a served cluster whose images map to local binaries (the real
//! OpenShell gateway and supervisor), the kubelet model runs those containers as Linux
//! processes: each pod gets a network namespace wired to the node's bridge ([`net`]), each
//! container a mount and PID namespace with its volumes at their mount paths ([`process`]).
//! Everything here needs root (namespaces, mounts, veth pairs); [`unsupported`] says why a
//! machine cannot, so callers skip with a reason instead of failing.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

pub mod net;
pub mod process;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The machine cannot run containers as processes (not root, no namespaces, no `ip`).
    #[error("containers cannot run as processes here: {0}")]
    Unsupported(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A host command (`ip`) failed.
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
}

impl NodeError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}

/// A network namespace held open by a file descriptor: it lives while this value (or a process
/// in it) does, so nothing named is left behind if the harness is killed.
#[derive(Debug)]
pub struct NetNs(pub(crate) OwnedFd);

impl AsFd for NetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Why containers cannot run as processes on this machine, or `None` when they can.
pub fn unsupported() -> Option<String> {
    net::unsupported().or_else(process::unsupported)
}
