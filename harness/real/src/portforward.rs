//! An in-process port-forward to the gateway that re-resolves the gateway pod for every new
//! connection, so access survives gateway restarts and scale-downs. (`kubectl port-forward`
//! binds one pod and dies with it; upstream's e2e names that as the blocker for restart tests,
//! docs/upstream-facts.md F8.3.)

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

use crate::gateway::{self, Workload};
use conformance_core::target::{TargetError, TargetResult};

/// Forwarding statistics, for diagnostics and tests.
#[derive(Debug, Default)]
pub(crate) struct ForwardStats {
    pub connections: AtomicU64,
    /// Connections closed because no gateway pod was ready in time.
    pub refused: AtomicU64,
    pub last_pod: std::sync::Mutex<Option<String>>,
}

/// Forwards one client connection to a ready gateway pod, resolved now. Generic over the
/// stream so paused-time tests can use in-memory pipes.
pub(crate) async fn forward_connection<S>(
    client: &Client,
    workload: &Workload,
    port: u16,
    resolve_wait: Duration,
    stats: &ForwardStats,
    mut conn: S,
) -> TargetResult<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    stats.connections.fetch_add(1, Ordering::Relaxed);
    // A short wait rides over a rollout; a stopped gateway refuses connections like a real
    // outage would, instead of hanging the CLI.
    let pod = match gateway::await_ready_pod(
        client,
        workload,
        "port-forward: resolve a ready gateway pod",
        resolve_wait,
    )
    .await
    {
        Ok(p) => p,
        Err(e) => {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
    };
    *stats.last_pod.lock().expect("stats lock") = Some(pod.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &workload.namespace);
    let mut pf = pods
        .portforward(&pod, &[port])
        .await
        .map_err(|e| TargetError::infra_from(format!("port-forward to {pod}:{port}"), e))?;
    let upstream = pf.take_stream(port).ok_or_else(|| {
        TargetError::infra(format!(
            "port-forward to {pod}:{port}: no stream for the port"
        ))
    })?;
    pipe(&mut conn, upstream, CLOSE_GRACE).await;
    pf.abort();
    Ok(())
}

/// How long a connection whose client closed its side still carries the gateway's answer.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(30);

/// Copies both ways. The port-forward protocol has no half-close, so a client's EOF is not
/// passed on (it would end the whole stream before the answer); instead the answer is carried
/// for up to `grace` after the client closed, and the connection ends when the gateway side
/// closes.
async fn pipe<S, U>(conn: &mut S, upstream: U, grace: Duration)
where
    S: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    let (mut cr, mut cw) = tokio::io::split(conn);
    let (mut ur, mut uw) = tokio::io::split(upstream);
    let down = async {
        // A reset when the gateway pod goes away is the expected end of a connection.
        if let Err(e) = tokio::io::copy(&mut ur, &mut cw).await {
            tracing::debug!(error = %e, "port-forward: gateway side ended");
        }
        let _ = cw.shutdown().await;
    };
    tokio::pin!(down);
    tokio::select! {
        _ = &mut down => {}
        _ = tokio::io::copy(&mut cr, &mut uw) => {
            let _ = uw.flush().await;
            let _ = tokio::time::timeout(grace, &mut down).await;
        }
    }
}

/// A running forward from a local TCP port. Dropping it stops accepting and ends the
/// connections.
pub(crate) struct GatewayForward {
    pub local_addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl GatewayForward {
    /// Listens on `bind` (port 0 for a free one) and forwards each connection to `port` of a
    /// ready pod of the workload.
    pub(crate) async fn start(
        client: Client,
        workload: Workload,
        port: u16,
        bind: SocketAddr,
        resolve_wait: Duration,
    ) -> TargetResult<Self> {
        let listener = TcpListener::bind(bind)
            .await
            .map_err(|e| TargetError::infra_from(format!("port-forward: bind {bind}"), e))?;
        let local_addr = listener.local_addr().map_err(|e| {
            TargetError::infra_from(format!("port-forward: local address of {bind}"), e)
        })?;
        let st = Arc::new(ForwardStats::default());
        let task = tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    continue;
                };
                // gRPC's small frames (a WatchSandbox event) must not wait for a delayed ACK.
                let _ = sock.set_nodelay(true);
                let (client, workload, st) = (client.clone(), workload.clone(), st.clone());
                tokio::spawn(async move {
                    if let Err(e) =
                        forward_connection(&client, &workload, port, resolve_wait, &st, sock).await
                    {
                        tracing::debug!(error = %e, "port-forward connection refused");
                    }
                });
            }
        });
        Ok(Self { local_addr, task })
    }

    pub(crate) fn port(&self) -> u16 {
        self.local_addr.port()
    }
}

impl Drop for GatewayForward {
    fn drop(&mut self) {
        self.task.abort();
    }
}
