//! The in-memory transport: a `tower::Service` that hands each request to the cluster's router
//! without a socket. Requests that upgrade the connection (exec, attach, port-forward) are
//! served over their own `tokio::io::duplex` pair with hyper, which is what carries the upgrade;
//! every other request (gets, lists, watches, writes) goes to the router directly, its body
//! passed through: encoding and parsing HTTP/1 between two halves of one process cost 6 % of an
//! emulated run's instructions. With no sockets involved, tokio's paused clock only advances
//! when every task is idle, so watches and timers behave exactly in virtual time (see
//! docs/dependencies.md D2).

use crate::backend::Backend;
use axum::body::Body;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower::ServiceExt;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A tower service that reaches the cluster's router without a socket.
#[derive(Clone)]
pub(crate) struct InMemory {
    router: axum::Router,
}

impl InMemory {
    pub(crate) fn new(cluster: Backend) -> Self {
        Self {
            router: crate::server::router(cluster),
        }
    }
}

impl tower::Service<http::Request<kube::client::Body>> for InMemory {
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let router = self.router.clone();
        if !req.headers().contains_key(http::header::UPGRADE) {
            return Box::pin(async move { Ok(router.oneshot(req.map(Body::new)).await?) });
        }
        Box::pin(async move {
            let (client_io, server_io) = tokio::io::duplex(64 * 1024);
            tokio::spawn(async move {
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(server_io), TowerToHyperService::new(router))
                    .with_upgrades();
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "in-memory connection ended with an error");
                }
            });
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(client_io)).await?;
            tokio::spawn(async move {
                let _ = conn.with_upgrades().await;
            });
            // The upgrade travels in the response's extensions, which `map` keeps.
            Ok(sender.send_request(req).await?.map(Body::new))
        })
    }
}
