//! `kind-config.yaml` and `k3d-config.yaml` are valid for their tools: parsed against the
//! schemas kind (`kind.x-k8s.io/v1alpha4` Cluster) and k3d (`k3d.io/v1alpha5` Simple) accept,
//! with unknown fields rejected as the tools do, and pinned images.

// The structs list every field the tools accept so that `deny_unknown_fields` rejects exactly
// what the tools reject; the tests read only some of them.
#![allow(dead_code)]

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

fn read(name: &str) -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../").to_string() + name)
        .unwrap()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KindCluster {
    kind: String,
    api_version: String,
    name: Option<String>,
    nodes: Vec<KindNode>,
    networking: Option<Value>,
    feature_gates: Option<BTreeMap<String, bool>>,
    runtime_config: Option<BTreeMap<String, String>>,
    kubeadm_config_patches: Option<Vec<String>>,
    containerd_config_patches: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KindNode {
    role: String,
    image: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    extra_mounts: Option<Vec<Value>>,
    extra_port_mappings: Option<Vec<Value>>,
    kubeadm_config_patches: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct K3dSimple {
    api_version: String,
    kind: String,
    metadata: K3dMeta,
    servers: Option<u32>,
    agents: Option<u32>,
    #[serde(rename = "kubeAPI")]
    kube_api: Option<Value>,
    image: Option<String>,
    network: Option<String>,
    subnet: Option<String>,
    token: Option<String>,
    volumes: Option<Vec<Value>>,
    ports: Option<Vec<Value>>,
    env: Option<Vec<Value>>,
    registries: Option<Value>,
    host_aliases: Option<Vec<Value>>,
    options: Option<K3dOptions>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct K3dMeta {
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct K3dOptions {
    k3d: Option<Value>,
    k3s: Option<K3sOptions>,
    kubeconfig: Option<Value>,
    runtime: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct K3sOptions {
    extra_args: Option<Vec<K3sArg>>,
    node_labels: Option<Vec<Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct K3sArg {
    arg: String,
    node_filters: Option<Vec<String>>,
}

/// `repo:tag` (optionally `@sha256:...`), never `latest`: a pinned image.
fn pinned(image: &str) -> bool {
    let (name, tag) = image
        .split('@')
        .next()
        .unwrap()
        .rsplit_once(':')
        .unwrap_or((image, ""));
    !name.is_empty() && !tag.is_empty() && tag != "latest" && !tag.contains('/')
}

#[test]
fn kind_config_is_a_valid_kind_cluster_with_pinned_node_images() {
    let c: KindCluster = serde_saphyr::from_str(&read("kind-config.yaml")).unwrap();
    assert_eq!(c.kind, "Cluster");
    assert_eq!(c.api_version, "kind.x-k8s.io/v1alpha4");
    assert!(c.name.is_some());
    assert!(!c.nodes.is_empty());
    assert!(c.nodes.iter().any(|n| n.role == "control-plane"));
    for n in &c.nodes {
        assert!(
            ["control-plane", "worker"].contains(&n.role.as_str()),
            "{n:?}"
        );
        let image = n.image.as_deref().expect("every node pins its image");
        assert!(
            image.starts_with("kindest/node:") && pinned(image),
            "{image}"
        );
    }
}

#[test]
fn k3d_config_is_a_valid_k3d_simple_config_with_a_pinned_image() {
    let c: K3dSimple = serde_saphyr::from_str(&read("k3d-config.yaml")).unwrap();
    assert_eq!(c.api_version, "k3d.io/v1alpha5");
    assert_eq!(c.kind, "Simple");
    assert!(!c.metadata.name.is_empty());
    assert!(c.servers.unwrap_or(1) >= 1);
    let image = c.image.as_deref().expect("the k3s image is pinned");
    assert!(
        image.starts_with("rancher/k3s:") && pinned(image),
        "{image}"
    );
    for a in c
        .options
        .and_then(|o| o.k3s)
        .and_then(|k| k.extra_args)
        .unwrap_or_default()
    {
        assert!(a.arg.starts_with("--"), "{a:?}");
    }
}

#[test]
fn an_unknown_field_is_rejected_as_the_tools_would() {
    let bad = read("kind-config.yaml").replace("nodes:", "nodez:");
    assert!(serde_saphyr::from_str::<KindCluster>(&bad).is_err());
    assert!(!pinned("kindest/node:latest"));
    assert!(!pinned("kindest/node"));
}
