//! Services for process pods: a ClusterIP becomes a local address of the node's network
//! namespace with a listener per port that forwards each connection to a ready pod behind the
//! Service (what kube-proxy does with rules), and names resolve through the pod's `/etc/hosts`
//! (the cluster has no DNS server; glibc reads hosts first).

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};

use conformance_core::timeline::READY_CONDITION as READY;
use conformance_node::net::NodeNetwork;
use kube_emulator::{Cluster, ListOptions, Pointer, ResourceRef, WeakCluster};
use serde_json::Value;
use tokio::task::JoinHandle;

/// The cluster's DNS domain.
pub(crate) const CLUSTER_DOMAIN: &str = "cluster.local";

fn services() -> ResourceRef {
    ResourceRef::new("", "v1", "services")
}

/// Every Service with a ClusterIP: (name, namespace, address).
fn cluster_ips(cluster: &Cluster) -> Vec<(String, String, Ipv4Addr, std::sync::Arc<Value>)> {
    let list = cluster
        .list_shared(&services(), None, &ListOptions::default())
        .map(|l| l.0)
        .unwrap_or_default();
    list.into_iter()
        .filter_map(|svc| {
            let name = svc
                .at("/metadata/name")
                .and_then(Value::as_str)?
                .to_string();
            let ns = svc
                .at("/metadata/namespace")
                .and_then(Value::as_str)?
                .to_string();
            // Headless Services ("None") have no address.
            let ip = svc
                .at("/spec/clusterIP")
                .and_then(Value::as_str)?
                .parse()
                .ok()?;
            Some((name, ns, ip, svc))
        })
        .collect()
}

/// `/etc/hosts` for a pod: localhost, the pod itself, and every Service with a ClusterIP
/// under its short (same namespace), `name.ns`, `name.ns.svc` and full names.
pub(crate) fn hosts(cluster: &Cluster, ns: &str, pod: &str, pod_ip: Option<&str>) -> String {
    let mut out = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    if let Some(ip) = pod_ip {
        out.push_str(&format!("{ip}\t{pod}\n"));
    }
    for (name, sns, ip, _) in cluster_ips(cluster) {
        let full = format!("{name}.{sns}.svc.{CLUSTER_DOMAIN}");
        let mut names = vec![full, format!("{name}.{sns}.svc"), format!("{name}.{sns}")];
        if sns == ns {
            names.push(name.clone());
        }
        out.push_str(&format!("{ip}\t{}\n", names.join(" ")));
    }
    out
}

/// `/etc/resolv.conf`: Kubernetes' search path for the pod's namespace.
pub(crate) fn resolv_conf(ns: &str) -> String {
    format!(
        "search {ns}.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\nnameserver 127.0.0.1\noptions ndots:5\n"
    )
}

fn labels_match(selector: &serde_json::Map<String, Value>, pod: &Value) -> bool {
    let labels = pod.at("/metadata/labels").and_then(Value::as_object);
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

fn ready(pod: &Value) -> bool {
    pod.at("/metadata/deletionTimestamp").is_none()
        && pod
            .at("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                c.get("type").and_then(Value::as_str) == Some(READY)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
}

/// The container port a Service port's `targetPort` names on `pod`.
fn target_port(pod: &Value, target: &Value) -> Option<u16> {
    if let Some(n) = target.as_u64() {
        return u16::try_from(n).ok();
    }
    let name = target.as_str()?;
    pod.at("/spec/containers")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(|c| c.get("ports").and_then(Value::as_array))
        .flatten()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
        .and_then(|p| p.get("containerPort").and_then(Value::as_u64))
        .and_then(|n| u16::try_from(n).ok())
}

/// Where a connection to `service` port `port` goes now: a ready pod's IP and port.
fn endpoint(cluster: &Cluster, ns: &str, service: &str, port: u16) -> Option<SocketAddr> {
    let svc = cluster.get(&services(), Some(ns), service).ok()?;
    let selector = svc.at("/spec/selector").and_then(Value::as_object)?.clone();
    let target = svc
        .at("/spec/ports")
        .and_then(Value::as_array)?
        .iter()
        .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))?
        .get("targetPort")
        .cloned()
        .unwrap_or(Value::from(port));
    let pods = cluster
        .list_shared(&ResourceRef::pods(), Some(ns), &ListOptions::default())
        .ok()?
        .0;
    pods.iter()
        .filter(|p| labels_match(&selector, p) && ready(p))
        .find_map(|p| {
            let ip = p
                .at("/status/podIP")
                .and_then(Value::as_str)?
                .parse()
                .ok()?;
            Some(SocketAddr::new(ip, target_port(p, &target)?))
        })
}

/// Follows the cluster's Services and serves their ClusterIPs in the node namespace until the
/// returned task is aborted (or the cluster is gone).
pub(crate) fn start(cluster: &Cluster, node: NodeNetwork) -> JoinHandle<()> {
    let weak: WeakCluster = cluster.downgrade();
    let mut changes = cluster.subscribe();
    tokio::spawn(async move {
        let mut served: BTreeSet<(String, String, u16)> = BTreeSet::new();
        let mut listeners: Vec<JoinHandle<()>> = vec![];
        loop {
            let Some(cluster) = weak.upgrade() else { break };
            for (name, ns, ip, svc) in cluster_ips(&cluster) {
                for port in svc
                    .at("/spec/ports")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.get("port").and_then(Value::as_u64))
                    .filter_map(|p| u16::try_from(p).ok())
                {
                    let key = (ns.clone(), name.clone(), port);
                    if served.contains(&key) {
                        continue;
                    }
                    match listen(&node, &weak, ip, key.clone()) {
                        Ok(task) => {
                            listeners.push(task);
                            served.insert(key);
                        }
                        Err(e) => {
                            tracing::warn!(service = %name, namespace = %ns, %port, "cannot serve ClusterIP {ip}: {e}");
                            served.insert(key);
                        }
                    }
                }
            }
            drop(cluster);
            if changes.changed().await.is_err() {
                break;
            }
        }
        for l in listeners {
            l.abort();
        }
    })
}

fn listen(
    node: &NodeNetwork,
    weak: &WeakCluster,
    ip: Ipv4Addr,
    (ns, name, port): (String, String, u16),
) -> Result<JoinHandle<()>, conformance_node::NodeError> {
    node.add_address(ip)?;
    let listener = node.listen(SocketAddr::from((ip, port)))?;
    let node = node.clone();
    let weak = weak.clone();
    Ok(tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                break;
            };
            let Some(to) = weak.upgrade().and_then(|c| endpoint(&c, &ns, &name, port)) else {
                // No ready endpoint: refused, as kube-proxy's REJECT rule does.
                drop(inbound);
                continue;
            };
            let node = node.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = node.connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_named_target_port_is_the_pods_container_port_of_that_name() {
        let pod =
            json!({"spec": {"containers": [{"ports": [{"name": "grpc", "containerPort": 8080}]}]}});
        assert_eq!(target_port(&pod, &json!("grpc")), Some(8080));
        assert_eq!(target_port(&pod, &json!(9000)), Some(9000));
        assert_eq!(target_port(&pod, &json!("metrics")), None);
    }

    #[tokio::test]
    async fn every_service_with_a_cluster_ip_is_named_in_the_pods_hosts_file() {
        let cluster = Cluster::new(kube_emulator::ClusterConfig::default());
        for (name, ip) in [("api", None), ("headless", Some("None"))] {
            let mut svc = json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}});
            if let Some(ip) = ip {
                svc["spec"]["clusterIP"] = json!(ip);
            }
            cluster.create(&services(), Some("default"), svc).unwrap();
        }
        let ip = cluster_ips(&cluster)[0].2;
        let hosts = hosts(&cluster, "default", "p", Some("10.244.0.7"));
        assert!(hosts.contains("10.244.0.7\tp\n"), "{hosts}");
        assert!(
            hosts.contains(&format!(
                "{ip}\tapi.default.svc.cluster.local api.default.svc api.default api\n"
            )),
            "{hosts}"
        );
        assert!(
            !hosts.contains("headless"),
            "a headless Service has no address: {hosts}"
        );
        let other = super::hosts(&cluster, "openshell", "p", None);
        assert!(
            !other.contains(" api\n"),
            "short names only in the Service's namespace: {other}"
        );
    }

    #[test]
    fn the_resolver_searches_the_pods_namespace_first() {
        assert!(
            resolv_conf("openshell")
                .starts_with("search openshell.svc.cluster.local svc.cluster.local")
        );
    }
}
