//! Readiness of a process container from its `readinessProbe` (httpGet or tcpSocket), as the
//! kubelet's prober checks it: from the node, against the pod's IP, every `periodSeconds`,
//! ready after `successThreshold` successes, not ready after `failureThreshold` failures. A
//! container without a readiness probe is ready once it runs.

use std::net::SocketAddr;
use std::time::Duration;

use conformance_node::net::NodeNetwork;
use kube_emulator::Pointer;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    Http { port: u16, path: String },
    Tcp { port: u16 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Probe {
    pub check: Check,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

fn port_of(container: &Value, port: &Value) -> Option<u16> {
    if let Some(n) = port.as_u64() {
        return u16::try_from(n).ok();
    }
    let name = port.as_str()?;
    container
        .get("ports")
        .and_then(Value::as_array)?
        .iter()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
        .and_then(|p| p.get("containerPort").and_then(Value::as_u64))
        .and_then(|n| u16::try_from(n).ok())
}

fn secs(p: &Value, field: &str, default: u64) -> Duration {
    Duration::from_secs(p.get(field).and_then(Value::as_u64).unwrap_or(default))
}

impl Probe {
    /// The container's readiness probe, or None (ready once running). Exec probes are not
    /// run for process containers; they count as absent.
    pub(crate) fn readiness(container: &Value) -> Option<Self> {
        let p = container.get("readinessProbe")?;
        let check = if let Some(h) = p.get("httpGet") {
            Check::Http {
                port: port_of(container, h.get("port")?)?,
                path: h
                    .get("path")
                    .and_then(Value::as_str)
                    .unwrap_or("/")
                    .to_string(),
            }
        } else {
            Check::Tcp {
                port: port_of(container, p.at("/tcpSocket/port")?)?,
            }
        };
        Some(Self {
            check,
            initial_delay: secs(p, "initialDelaySeconds", 0),
            period: secs(p, "periodSeconds", 10).max(Duration::from_secs(1)),
            timeout: secs(p, "timeoutSeconds", 1).max(Duration::from_secs(1)),
            success_threshold: p
                .get("successThreshold")
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .max(1) as u32,
            failure_threshold: p
                .get("failureThreshold")
                .and_then(Value::as_u64)
                .unwrap_or(3)
                .max(1) as u32,
        })
    }

    /// One check against `ip`: true on a TCP connect (tcpSocket) or an HTTP status 200–399.
    pub(crate) async fn check_once(&self, node: &NodeNetwork, ip: std::net::IpAddr) -> bool {
        let run = async {
            match &self.check {
                Check::Tcp { port } => node.connect(SocketAddr::new(ip, *port)).await.is_ok(),
                Check::Http { port, path } => {
                    let Ok(mut s) = node.connect(SocketAddr::new(ip, *port)).await else {
                        return false;
                    };
                    let req = format!(
                        "GET {path} HTTP/1.1\r\nHost: {ip}:{port}\r\nUser-Agent: kube-probe/1.33\r\nConnection: close\r\n\r\n"
                    );
                    if s.write_all(req.as_bytes()).await.is_err() {
                        return false;
                    }
                    let mut head = [0u8; 12];
                    if s.read_exact(&mut head).await.is_err() {
                        return false;
                    }
                    http_ok(&head)
                }
            }
        };
        tokio::time::timeout(self.timeout, run)
            .await
            .unwrap_or(false)
    }
}

/// `HTTP/1.x NNN` with 200 ≤ NNN < 400.
fn http_ok(head: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(head) else {
        return false;
    };
    text.starts_with("HTTP/1.")
        && text
            .get(9..12)
            .and_then(|c| c.parse::<u16>().ok())
            .is_some_and(|c| (200..400).contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_http_readiness_probe_on_a_named_port_is_read_with_kubernetes_defaults() {
        let c = json!({"ports": [{"name": "health", "containerPort": 8081}],
                       "readinessProbe": {"httpGet": {"path": "/readyz", "port": "health"}}});
        let p = Probe::readiness(&c).unwrap();
        assert_eq!(
            p.check,
            Check::Http {
                port: 8081,
                path: "/readyz".into()
            }
        );
        assert_eq!(
            (p.period, p.failure_threshold, p.success_threshold),
            (Duration::from_secs(10), 3, 1)
        );
    }

    #[test]
    fn a_container_without_a_readiness_probe_has_none() {
        assert_eq!(Probe::readiness(&json!({"name": "x"})), None);
    }

    #[test]
    fn only_statuses_from_200_to_399_pass() {
        assert!(http_ok(b"HTTP/1.1 200 "));
        assert!(http_ok(b"HTTP/1.1 302 "));
        assert!(!http_ok(b"HTTP/1.1 503 "));
        assert!(!http_ok(b"garbage-----"));
    }
}
