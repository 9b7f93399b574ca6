//! `openshell-conformance emulate serve`: the emulated cluster over real TCP in real time, with a
//! kubeconfig so `kubectl` can watch a scenario live. Loopback only (this workplace forbids
//! traffic to other addresses).

use super::cluster::{Cluster, ClusterConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tokio::net::TcpListener;

/// Arguments of `emulate serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on; must be a loopback address (e.g. 127.0.0.1:8001, or port 0 for any).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Where to write a kubeconfig for the emulated cluster.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
}

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

/// A kubeconfig pointing at `http://addr` with one context, `openshell-emulated`.
pub fn kubeconfig(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: openshell-emulated\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: openshell-emulated\n  context:\n    cluster: openshell-emulated\n    user: openshell-emulated\n    namespace: default\ncurrent-context: openshell-emulated\nusers:\n- name: openshell-emulated\n  user: {{}}\n"
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
    axum::serve(listener, cluster.router())
        .await
        .map_err(ServeError::Serve)
}

/// The `emulate serve` command: a fresh default cluster, a kubeconfig, then serve forever.
pub async fn run(args: ServeArgs) -> Result<(), ServeError> {
    let listener = bind(args.listen).await?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::Bind(args.listen, e))?;
    // Real time for a person watching: the cluster clock starts at the wall clock.
    let epoch_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let cluster = Cluster::new(ClusterConfig {
        epoch_unix,
        ..ClusterConfig::default()
    });
    println!("emulated Kubernetes API listening on http://{addr}");
    if let Some(path) = &args.kubeconfig_out {
        write_kubeconfig(path, addr)?;
        println!("kubeconfig written to {}", path.display());
        println!("try: kubectl --kubeconfig {} get pods -A", path.display());
    } else {
        println!("try: kubectl --server http://{addr} get pods -A");
    }
    serve_on(listener, cluster).await
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
