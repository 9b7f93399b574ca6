//! The in-process network: programs bind endpoints on their pod's ports, clients connect
//! through Services. A connection succeeds only while a Running, Ready, non-terminating pod
//! selected by the Service has the port bound, so scaling the gateway to zero makes it
//! unreachable at once (docs/upstream-facts.md F1.16, F5.2), and a blocked Service
//! black-holes connections like an egress NetworkPolicy would.

use conformance_core::timeline::READY_CONDITION;
use kube_emulator::Pointer;
use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use kube_emulator::{Cluster, ListOptions, ResourceRef};

type Endpoint = Arc<dyn Any + Send + Sync>;

/// Looked up by borrowed names on every connect (13 k a run), so kept as short lists searched
/// in place rather than maps keyed by owned strings: a network holds a handful of each.
#[derive(Default)]
struct Inner {
    endpoints: Vec<((String, String, u16), Endpoint)>,
    blocked: BTreeSet<(String, String)>,
    /// What `(namespace, service, port)` resolved to in the store at a resourceVersion: the
    /// models connect on nearly every step, mostly while the store has not changed, and
    /// resolving reads the Service and scans the namespace's pods. Keyed by resourceVersion
    /// alone, which holds because a network serves one cluster (every caller builds it so).
    resolved: Vec<((String, String, u16), u64, Resolved)>,
}

/// Whether an owned `(namespace, name, port)` key is the one named by borrowed parts.
fn is_key(key: &(String, String, u16), ns: &str, name: &str, port: u16) -> bool {
    key.0 == ns && key.1 == name && key.2 == port
}

impl Inner {
    fn endpoint(&self, ns: &str, pod: &str, port: u16) -> Option<&Endpoint> {
        self.endpoints
            .iter()
            .find(|(key, _)| is_key(key, ns, pod, port))
            .map(|(_, ep)| ep)
    }

    fn cached(&self, ns: &str, svc: &str, port: u16, rv: u64) -> Option<&Resolved> {
        self.resolved
            .iter()
            .find(|(key, at, _)| is_key(key, ns, svc, port) && *at == rv)
            .map(|(_, _, r)| r)
    }

    fn remember(&mut self, ns: &str, svc: &str, port: u16, rv: u64, r: Resolved) {
        match self
            .resolved
            .iter_mut()
            .find(|(key, _, _)| is_key(key, ns, svc, port))
        {
            Some(entry) => (entry.1, entry.2) = (rv, r),
            None => self
                .resolved
                .push(((ns.to_string(), svc.to_string(), port), rv, r)),
        }
    }

    /// The endpoint of the first backend, by name, that listens on its port.
    fn pick<T: Send + Sync + 'static>(
        &self,
        r: &Resolved,
        ns: &str,
        host: &str,
        port: u16,
    ) -> Result<Arc<T>, NetError> {
        let backends = match r {
            Resolved::Backends(b) => b,
            Resolved::NoSuchHost => return Err(NetError::NoSuchHost(host.to_string())),
            Resolved::Refused => return Err(NetError::Refused(format!("{host}:{port}"))),
        };
        backends
            .iter()
            .find_map(|(name, pod_port)| {
                self.endpoint(ns, name, *pod_port)?
                    .clone()
                    .downcast::<T>()
                    .ok()
            })
            .ok_or_else(|| NetError::Refused(format!("{host}:{port}")))
    }
}

/// A Service port resolved against the store: the ready backing pods by name with the pod port
/// the target resolves to, or why there are none.
#[derive(Clone)]
enum Resolved {
    Backends(Vec<(String, u16)>),
    NoSuchHost,
    Refused,
}

#[derive(Clone, Default)]
pub struct Network {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    /// DNS: no such Service.
    #[error("dns error: failed to lookup address information: {0}")]
    NoSuchHost(String),
    /// No ready pod behind the Service, or none listening on the port.
    #[error("tcp connect error: Connection refused (os error 111) connecting to {0}")]
    Refused(String),
    /// Packets are dropped (a NetworkPolicy): the caller waits its own connect timeout.
    #[error("connection to {0} timed out")]
    Blackholed(String),
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Network {
    pub fn new() -> Self {
        Self::default()
    }

    /// Listens on a pod port with an endpoint object (any type; clients ask for that type).
    pub fn bind<T: Send + Sync + 'static>(&self, ns: &str, pod: &str, port: u16, endpoint: Arc<T>) {
        let mut inner = lock(&self.inner);
        inner
            .endpoints
            .retain(|(key, _)| !is_key(key, ns, pod, port));
        inner
            .endpoints
            .push(((ns.to_string(), pod.to_string(), port), endpoint));
    }

    pub fn unbind(&self, ns: &str, pod: &str, port: u16) {
        lock(&self.inner)
            .endpoints
            .retain(|(key, _)| !is_key(key, ns, pod, port));
    }

    /// Drops every endpoint of a pod (its containers stopped or it was deleted).
    pub(crate) fn unbind_pod(&self, ns: &str, pod: &str) {
        lock(&self.inner)
            .endpoints
            .retain(|((n, p, _), _)| !(n == ns && p == pod));
    }

    /// Forgets every endpoint: the programs behind them hold the network, so a network that
    /// is done with must let them go or the two keep each other (and their cluster) alive.
    pub fn unbind_all(&self) {
        lock(&self.inner).endpoints.clear();
    }

    /// Black-holes connections to a Service until [`Network::unblock`].
    pub fn block(&self, ns: &str, service: &str) {
        lock(&self.inner)
            .blocked
            .insert((ns.to_string(), service.to_string()));
    }

    #[cfg(test)]
    pub(crate) fn unblock(&self, ns: &str, service: &str) {
        lock(&self.inner)
            .blocked
            .remove(&(ns.to_string(), service.to_string()));
    }

    /// Connects to `host:port` where host is `svc`, `svc.ns`, `svc.ns.svc` or
    /// `svc.ns.svc.cluster.local` (resolved from `from_ns` when it has no namespace), and returns
    /// the endpoint of the first ready backing pod, by name, that listens on the target port.
    pub fn connect<T: Send + Sync + 'static>(
        &self,
        cluster: &Cluster,
        from_ns: &str,
        host: &str,
        port: u16,
    ) -> Result<Arc<T>, NetError> {
        let mut parts = host.split('.');
        let svc = parts.next().unwrap_or_default();
        let ns = parts.next().unwrap_or(from_ns);
        let rv = cluster.resource_version();
        {
            let inner = lock(&self.inner);
            if inner.blocked.iter().any(|(n, s)| n == ns && s == svc) {
                return Err(NetError::Blackholed(format!("{host}:{port}")));
            }
            // Resolved from the cache while the store's resourceVersion is the one it was
            // resolved at.
            if let Some(r) = inner.cached(ns, svc, port, rv) {
                return inner.pick(r, ns, host, port);
            }
        }
        let r = resolve_in(cluster, ns, svc, port);
        let mut inner = lock(&self.inner);
        let picked = inner.pick(&r, ns, host, port);
        // Cached only if nothing was written while it was read.
        if cluster.resource_version() == rv {
            inner.remember(ns, svc, port, rv, r);
        }
        picked
    }
}

/// Reads the Service in place and scans the namespace's pods (see [`Network::connect`]).
fn resolve_in(cluster: &Cluster, ns: &str, svc: &str, port: u16) -> Resolved {
    let Ok((selector, target)) = cluster.inspect(
        &ResourceRef::new("", "v1", "services"),
        Some(ns),
        svc,
        |service| {
            let selector: BTreeMap<String, String> = service
                .at("/spec/selector")
                .and_then(Value::as_object)
                .and_then(|m| {
                    m.iter()
                        .map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default();
            let target = service
                .at("/spec/ports")
                .and_then(Value::as_array)
                .and_then(|ps| {
                    ps.iter()
                        .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))
                })
                .map(|p| p.get("targetPort").cloned().unwrap_or(Value::from(port)));
            (selector, target)
        },
    ) else {
        return Resolved::NoSuchHost;
    };
    let Some(target) = target else {
        return Resolved::Refused;
    };
    if selector.is_empty() {
        return Resolved::Refused;
    }
    // The ready backing pods, by name, with the port the service's target resolves to.
    Resolved::Backends(
        cluster
            .scan(
                &ResourceRef::pods(),
                Some(ns),
                &ListOptions::default(),
                |pod| {
                    if !(selects(&selector, pod) && is_ready(pod)) {
                        return None;
                    }
                    let name = pod.at("/metadata/name").and_then(Value::as_str)?;
                    Some((name.to_string(), resolve_port(pod, &target)?))
                },
            )
            .unwrap_or_default(),
    )
}

fn selects(selector: &BTreeMap<String, String>, pod: &Value) -> bool {
    selector.iter().all(|(k, v)| {
        pod.at("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
            == Some(v.as_str())
    })
}

/// Ready as an EndpointSlice controller sees it: Running, Ready condition True, not terminating.
pub fn is_ready(pod: &Value) -> bool {
    pod.at("/metadata/deletionTimestamp").is_none()
        && pod.at("/status/phase").and_then(Value::as_str) == Some("Running")
        && pod
            .at("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some(READY_CONDITION)
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            })
}

/// A Service `targetPort`, numeric or named, as the pod's port number.
fn resolve_port(pod: &Value, target: &Value) -> Option<u16> {
    if let Some(n) = target.as_u64() {
        return u16::try_from(n).ok();
    }
    let name = target.as_str()?;
    if let Ok(n) = name.parse::<u16>() {
        return Some(n);
    }
    pod.at("/spec/containers")?
        .as_array()?
        .iter()
        .flat_map(|c| {
            c.get("ports")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
        .and_then(|p| p.get("containerPort").and_then(Value::as_u64))
        .and_then(|n| u16::try_from(n).ok())
}

/// Splits an endpoint URL such as `https://openshell.openshell.svc.cluster.local:8080` into
/// host and port (default 443 for https, 80 for http).
pub fn parse_endpoint(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let hostport = rest.split('/').next()?;
    match hostport.rsplit_once(':') {
        Some((h, p)) => Some((h.to_string(), p.parse().ok()?)),
        None => Some((
            hostport.to_string(),
            if scheme == "https" { 443 } else { 80 },
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug)]
    struct Gateway(&'static str);

    fn setup(ready: bool) -> (Cluster, Network) {
        let c = Cluster::new(kube_emulator::ClusterConfig::default());
        let svc = ResourceRef::new("", "v1", "services");
        c.create(
            &ResourceRef::new("", "v1", "namespaces"),
            None,
            json!({"metadata": {"name": "openshell"}}),
        )
        .unwrap();
        c.create(&svc, Some("openshell"), json!({
            "metadata": {"name": "openshell"},
            "spec": {"selector": {"app": "gw"}, "ports": [{"name": "grpc", "port": 8080, "targetPort": "grpc"}]}
        }))
        .unwrap();
        c.create(&ResourceRef::pods(), Some("openshell"), json!({
            "metadata": {"name": "openshell-0", "labels": {"app": "gw"}},
            "spec": {"containers": [{"name": "gw", "image": "gw", "ports": [{"name": "grpc", "containerPort": 8080}]}]},
        }))
        .unwrap();
        if ready {
            c.update_status(&ResourceRef::pods(), Some("openshell"), "openshell-0", json!({
                "metadata": {"name": "openshell-0"},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .unwrap();
        }
        (c, Network::new())
    }

    #[tokio::test]
    async fn a_ready_pod_behind_the_service_answers_on_its_named_target_port() {
        let (c, net) = setup(true);
        net.bind("openshell", "openshell-0", 8080, Arc::new(Gateway("gw-0")));
        let ep: Arc<Gateway> = net
            .connect(&c, "default", "openshell.openshell.svc.cluster.local", 8080)
            .unwrap();
        assert_eq!(ep.0, "gw-0");
    }

    #[tokio::test]
    async fn a_service_without_a_ready_pod_refuses_connections() {
        let (c, net) = setup(false);
        net.bind("openshell", "openshell-0", 8080, Arc::new(Gateway("gw-0")));
        let err = net
            .connect::<Gateway>(&c, "openshell", "openshell", 8080)
            .unwrap_err();
        assert!(matches!(err, NetError::Refused(_)), "{err}");
    }

    #[tokio::test]
    async fn an_unbound_port_unknown_service_and_blocked_service_each_fail_their_own_way() {
        let (c, net) = setup(true);
        assert!(matches!(
            net.connect::<Gateway>(&c, "openshell", "openshell", 8080),
            Err(NetError::Refused(_))
        ));
        net.bind("openshell", "openshell-0", 8080, Arc::new(Gateway("gw-0")));
        assert!(matches!(
            net.connect::<Gateway>(&c, "openshell", "nope", 8080),
            Err(NetError::NoSuchHost(_))
        ));
        net.block("openshell", "openshell");
        assert!(matches!(
            net.connect::<Gateway>(&c, "openshell", "openshell", 8080),
            Err(NetError::Blackholed(_))
        ));
        net.unblock("openshell", "openshell");
        assert!(
            net.connect::<Gateway>(&c, "openshell", "openshell", 8080)
                .is_ok()
        );
        net.unbind_pod("openshell", "openshell-0");
        assert!(matches!(
            net.connect::<Gateway>(&c, "openshell", "openshell", 8080),
            Err(NetError::Refused(_))
        ));
    }

    #[test]
    fn endpoint_urls_split_into_host_and_port() {
        assert_eq!(
            parse_endpoint("https://openshell.openshell.svc.cluster.local:8080"),
            Some(("openshell.openshell.svc.cluster.local".into(), 8080))
        );
        assert_eq!(parse_endpoint("http://gw"), Some(("gw".into(), 80)));
    }
}
