//! The emulated cluster over real TCP, in real time, with a kubeconfig so `kubectl`, `helm` and
//! kube-rs clients can use it. Loopback only: the server has no authentication.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::net::TcpListener;

use crate::cluster::Cluster;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--listen {0}: only loopback addresses (127.0.0.0/8, ::1) are allowed")]
    NotLoopback(SocketAddr),
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("cannot write kubeconfig {0}: {1}")]
    Kubeconfig(PathBuf, std::io::Error),
    #[error("server failed: {0}")]
    Serve(std::io::Error),
}

/// A kubeconfig pointing at `http://addr` with one context, `kube-emulator`.
pub fn kubeconfig(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-emulator\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: kube-emulator\n  context:\n    cluster: kube-emulator\n    user: kube-emulator\n    namespace: default\ncurrent-context: kube-emulator\nusers:\n- name: kube-emulator\n  user: {{}}\n"
    )
}

pub fn write_kubeconfig(path: &Path, addr: SocketAddr) -> Result<(), ServeError> {
    std::fs::write(path, kubeconfig(addr))
        .map_err(|e| ServeError::Kubeconfig(path.to_path_buf(), e))
}

/// Binds a loopback listener (refusing any other address).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    if !addr.ip().is_loopback() {
        return Err(ServeError::NotLoopback(addr));
    }
    TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::Bind(addr, e))
}

/// Serves `cluster` on `listener` until the task is dropped or the listener fails.
pub async fn serve_on(listener: TcpListener, cluster: Cluster) -> Result<(), ServeError> {
    use axum::serve::ListenerExt;
    // Watch events and port-forward frames are small writes: with Nagle's algorithm one waits
    // for the client's delayed ACK (about 40 ms) behind the one before.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, cluster.router())
        .await
        .map_err(ServeError::Serve)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serve_refuses_non_loopback_addresses() {
        let err = bind("0.0.0.0:0".parse().unwrap()).await.unwrap_err();
        assert!(matches!(err, ServeError::NotLoopback(_)));
        assert!(err.to_string().contains("only loopback"));
    }
}
