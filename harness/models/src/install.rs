//! What `helm install openshell` and the Agent Sandbox release create (docs/upstream-facts.md
//! section 5): namespace, ServiceAccounts, ConfigMap, Secrets, Service `openshell`
//! (grpc 8080, metrics 9090), StatefulSet `openshell` with the `openshell-data` claim template,
//! and what the topology's placement adds (a shared supervisor Deployment). The Sandbox CRDs
//! come with the emulated cluster (the Agent Sandbox release).

use serde_json::{Value, json};

use crate::model::{GATEWAY_IMAGE_REPO, NAMESPACE, OpenShellModel};
use kube_emulator::{ApiError, Cluster, ResourceRef};

fn labels() -> Value {
    json!({"app.kubernetes.io/name": "openshell", "app.kubernetes.io/instance": "openshell",
           "app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "openshell"})
}

/// The rendered `gateway.toml` (docs/upstream-facts.md F5.8). Plaintext: the emulated
/// install's TLS Secrets hold no real certificates, and its client connects in process.
pub(crate) fn gateway_toml(model: &OpenShellModel) -> String {
    // The key moved between chart versions; the release names its chart's.
    let topo_key = &model.selection.model.release().chart.topology_key;
    format!(
        "[openshell.gateway]\nbind = \"0.0.0.0:8080\"\nhealth = \"0.0.0.0:8081\"\nmetrics = \"0.0.0.0:9090\"\n\
         disable_tls = true\nsandbox_namespace = \"{NAMESPACE}\"\n\n[openshell.drivers.kubernetes]\nworkspace_mode = \"shared\"\n\
         gateway_id = \"openshell\"\ngrpc_endpoint = \"{}\"\nservice_account_name = \"openshell-sandbox\"\n\
         {topo_key} = \"{}\"\n",
        crate::model::GATEWAY_ENDPOINT,
        model.topology.name
    )
}

/// Every object of the release, in creation order.
pub fn objects(model: &OpenShellModel) -> Vec<(ResourceRef, Value)> {
    let v = &model.version;
    let core = |plural: &str| ResourceRef::new("", "v1", plural);
    let mut out = vec![
        (
            core("serviceaccounts"),
            json!({"metadata": {"name": "openshell", "labels": labels()}}),
        ),
        (
            core("serviceaccounts"),
            json!({"metadata": {"name": "openshell-sandbox", "labels": labels()}}),
        ),
        (
            core("configmaps"),
            json!({"metadata": {"name": "openshell-config", "labels": labels()},
            "data": {"gateway.toml": gateway_toml(model)}}),
        ),
        (
            core("secrets"),
            json!({"metadata": {"name": "openshell-server-tls"}, "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": "emulated", "tls.key": "emulated", "ca.crt": "emulated-ca"}}),
        ),
        (
            core("secrets"),
            json!({"metadata": {"name": conformance_upstream::CLIENT_TLS_SECRET}, "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": "emulated", "tls.key": "emulated", "ca.crt": "emulated-ca"}}),
        ),
        (
            core("secrets"),
            json!({"metadata": {"name": "openshell-jwt-keys"}, "stringData": {"signing.pem": "emulated"}}),
        ),
        (
            core("secrets"),
            json!({"metadata": {"name": "openshell-credential-storage-key-encryption-key",
            "annotations": {"helm.sh/resource-policy": "keep"}}, "stringData": {"key-encryption-key": "emulated"}}),
        ),
        (
            core("services"),
            json!({"metadata": {"name": "openshell", "labels": labels()},
            "spec": {"type": "ClusterIP",
                "selector": {"app.kubernetes.io/name": "openshell", "app.kubernetes.io/instance": "openshell"},
                "ports": [{"name": "grpc", "port": 8080, "targetPort": "grpc", "protocol": "TCP", "appProtocol": "grpc"},
                          {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]}}),
        ),
        (
            ResourceRef::new("apps", "v1", "statefulsets"),
            json!({
                "metadata": {"name": "openshell", "labels": labels()},
                "spec": {
                    "serviceName": "openshell",
                    "replicas": 1,
                    "selector": {"matchLabels": {"app.kubernetes.io/name": "openshell", "app.kubernetes.io/instance": "openshell"}},
                    "template": {
                        "metadata": {"labels": labels()},
                        "spec": {
                            "terminationGracePeriodSeconds": 5,
                            "serviceAccountName": "openshell",
                            "securityContext": {"fsGroup": 1000},
                            "containers": [{
                                "name": "openshell-gateway",
                                "image": format!("{GATEWAY_IMAGE_REPO}:{v}"),
                                "args": ["--config", "/etc/openshell/gateway.toml", "--db-url", "sqlite:/var/openshell/openshell.db"],
                                "ports": [{"name": "grpc", "containerPort": 8080}, {"name": "health", "containerPort": 8081},
                                          {"name": "metrics", "containerPort": 9090}],
                                "readinessProbe": {"httpGet": {"path": "/readyz", "port": "health"}, "periodSeconds": 2},
                                "volumeMounts": [{"name": "openshell-data", "mountPath": "/var/openshell"},
                                                 {"name": "gateway-config", "mountPath": "/etc/openshell", "readOnly": true}],
                            }],
                            "volumes": [{"name": "gateway-config", "configMap": {"name": "openshell-config"}}],
                        },
                    },
                    "volumeClaimTemplates": [{"metadata": {"name": "openshell-data"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
                },
            }),
        ),
    ];
    out.extend(crate::placement::release_objects(model));
    out
}

/// Creates the namespace and every object (already existing ones are kept, like an upgrade).
pub fn install(cluster: &Cluster, model: &OpenShellModel) -> Result<(), ApiError> {
    let ns = ResourceRef::new("", "v1", "namespaces");
    match cluster.create(&ns, None, json!({"metadata": {"name": NAMESPACE}})) {
        Ok(_) => {}
        Err(e) if e.code == 409 => {}
        Err(e) => return Err(e),
    }
    for (r, obj) in objects(model) {
        match cluster.create(&r, Some(NAMESPACE), obj) {
            Ok(_) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
