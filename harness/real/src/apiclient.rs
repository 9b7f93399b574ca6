//! The Kubernetes client of the real path: kube's own stack, but over connections that send
//! small writes at once (`TCP_NODELAY`).
//!
//! kube 5 dials with Nagle's algorithm on. The harness's port-forward relays each chunk the
//! `openshell` CLI writes as one WebSocket message on such a connection, and a gRPC call is a
//! few small writes: the second waited for the API server's delayed ACK, 40 ms per call on
//! Linux. Every CLI action went through it (docs/dependencies.md D1).
//!
//! [`client_for`] makes one for a kubeconfig context: the target, the journal's restore and the
//! doctor all connect through it.

use std::path::Path;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tower::{BoxError, ServiceBuilder, retry::RetryLayer};

use conformance_core::error::{Error, Result};

/// A client for `cfg` with the layers kube's `Client::try_from` stacks (base URI, retry of
/// server errors when the config asks, authentication, extra headers, a trace span per
/// request) and its timeouts, over `TCP_NODELAY` connections. A config that goes through a
/// proxy keeps kube's own client, which knows how to tunnel.
pub(crate) fn client(cfg: Config) -> kube::Result<Client> {
    if cfg.proxy_url.is_some() {
        return Client::try_from(cfg);
    }
    let https = cfg.rustls_https_connector_with_connector(connector())?;
    let mut timed = hyper_timeout::TimeoutConnector::new(https);
    timed.set_connect_timeout(cfg.connect_timeout);
    timed.set_read_timeout(cfg.read_timeout);
    timed.set_write_timeout(cfg.write_timeout);
    timed.set_reset_reader_on_write(cfg.reset_reader_on_write);
    let http_client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build::<_, kube::client::Body>(timed);
    let service = ServiceBuilder::new()
        .layer(cfg.base_uri_layer())
        .option_layer(
            cfg.default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(cfg.auth_layer()?)
        .layer(cfg.extra_headers_layer()?)
        // `RUST_LOG=tower_http=debug` shows each request, as kube's `HTTP` spans do.
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .map_err(BoxError::from)
        .service(http_client);
    Ok(Client::new(service, cfg.default_namespace))
}

/// kube's connector (any scheme; TLS is layered on top) with `TCP_NODELAY`.
fn connector() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http
}

/// A client for a kubeconfig context. An unknown context is a usage error; an unreadable
/// kubeconfig an infrastructure one.
pub(crate) async fn client_for(kubeconfig: Option<&Path>, context: &str) -> Result<Client> {
    let kc = match kubeconfig {
        Some(p) => Kubeconfig::read_from(p)
            .map_err(|e| Error::infra_from(format!("kubeconfig {}", p.display()), e))?,
        None => Kubeconfig::read().map_err(|e| Error::infra_from("default kubeconfig", e))?,
    };
    if !kc.contexts.iter().any(|c| c.name == context) {
        let known: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
        return Err(Error::usage(format!(
            "context `{context}` is not in the kubeconfig; known contexts: {}",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )));
    }
    let opts = KubeConfigOptions {
        context: Some(context.to_string()),
        ..Default::default()
    };
    let cfg = Config::from_custom_kubeconfig(kc, &opts)
        .await
        .map_err(|e| Error::infra_from(format!("context {context}"), e))?;
    client(cfg).map_err(|e| Error::infra_from(format!("context {context}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[tokio::test]
    async fn the_connections_to_the_api_server_send_small_writes_at_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: http::Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let conn = connector().oneshot(uri).await.expect("a connection");
        assert!(conn.inner().nodelay().unwrap(), "Nagle's algorithm is on");
    }
}
