//! Every pinned version of the real-cluster path, in one place. The kind and k3d config files at
//! the repository root carry the same node images; a test keeps them in step. What comes with
//! an OpenShell release (its chart version, the Agent Sandbox release installed with it) is
//! the release's data in `fixtures/releases/` ([`conformance_core::release`]).

use conformance_core::release::Releases;

/// The kind node image: Kubernetes 1.33 matches k8s-openapi's `v1_33` API level, the oldest
/// kube 5 supports (docs/dependencies.md D1). Pinned by the digest kind v0.29.0's release notes
/// list for it, as kind asks (a tag alone can be re-pushed; docs/upstream-facts.md F10.6).
pub(crate) const KIND_NODE_IMAGE: &str =
    "kindest/node:v1.33.1@sha256:050072256b9a903bd914c0b2866828150cb229cea0efe5892e2b644d5dd3b34f";

/// The k3s image k3d-config.yaml pins, the same Kubernetes minor as the kind node.
#[cfg(test)]
pub(crate) const K3S_IMAGE: &str = "rancher/k3s:v1.33.1-k3s1";

/// The cluster name kind and k3d create or reuse (`kind-<name>` / `k3d-<name>` contexts).
pub(crate) const CLUSTER_NAME: &str = "openshell-conformance";

/// The Agent Sandbox release installed when neither the user nor the chart's version says
/// otherwise: that of the release installed by default (`installed_by_default`).
pub(crate) fn default_agent_sandbox() -> &'static str {
    agent_sandbox_for(None)
}

/// The Agent Sandbox release to install with an OpenShell release (`None`: unknown, e.g. an
/// unreleased chart), when the user names none: the `agent_sandbox.install` of the release of
/// that series (docs/upstream-facts.md F8.1 for 0.0.x, F8.6 for 0.1.x).
pub(crate) fn agent_sandbox_for(openshell: Option<&semver::Version>) -> &'static str {
    Releases::builtin().agent_sandbox_to_install(openshell)
}

/// The core release asset of an Agent Sandbox version: `manifest.yaml` up to v0.5.1,
/// `sandbox.yaml` from v0.5.2 on (docs/upstream-facts.md F8.6). None for a version that is not
/// `vX.Y.Z`.
pub(crate) fn agent_sandbox_asset(version: &str) -> Option<&'static str> {
    let v = semver::Version::parse(version.strip_prefix('v').unwrap_or(version)).ok()?;
    Some(if v <= semver::Version::new(0, 5, 1) {
        "manifest.yaml"
    } else {
        "sandbox.yaml"
    })
}

/// The release manifest of an Agent Sandbox version (docs/upstream-facts.md F8.1, F8.6).
pub(crate) fn agent_sandbox_manifest_url(version: &str) -> String {
    agent_sandbox_manifest_url_at(AGENT_SANDBOX_RELEASES, version)
}

/// Where Agent Sandbox publishes its release assets.
pub(crate) const AGENT_SANDBOX_RELEASES: &str =
    "https://github.com/kubernetes-sigs/agent-sandbox/releases/download";

/// The release manifest of a version under `base` (the releases, or a test's server).
pub(crate) fn agent_sandbox_manifest_url_at(base: &str, version: &str) -> String {
    let asset = agent_sandbox_asset(version).unwrap_or("sandbox.yaml");
    format!("{}/{version}/{asset}", base.trim_end_matches('/'))
}

/// The OpenShell chart's OCI reference.
pub(crate) const CHART_REF: &str = "oci://ghcr.io/nvidia/openshell/helm-chart";

/// The chart version installed when none is named: that of the release installed by default
/// (`installed_by_default` in `fixtures/releases/`, the release the upstream facts were read
/// at, docs/upstream-facts.md F0.1).
pub(crate) fn chart_version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        Releases::builtin()
            .installed_by_default()
            .chart
            .version
            .to_string()
    })
}

/// Release and namespace, so the workload is `StatefulSet/openshell` and the pod `openshell-0`
/// (docs/upstream-facts.md F5.1).
pub(crate) const RELEASE: &str = "openshell";
pub(crate) const NAMESPACE: &str = "openshell";

/// The Agent Sandbox controller (docs/upstream-facts.md F8.1).
pub(crate) const AGENT_SANDBOX_NAMESPACE: &str = "agent-sandbox-system";
pub(crate) const AGENT_SANDBOX_CONTROLLER: &str = "agent-sandbox-controller";
pub(crate) const SANDBOX_CRD: &str = "sandboxes.agents.x-k8s.io";

/// The gateway's gRPC/HTTP port (docs/upstream-facts.md F5.2; health is on 8081).
pub(crate) const GATEWAY_GRPC_PORT: u16 = 8080;

/// The claim template of the gateway StatefulSet's SQLite volume (docs/upstream-facts.md F5.10).
pub(crate) const GATEWAY_DATA_CLAIM: &str = "openshell-data";

/// The label every object the harness creates carries, with the run id as value, so leftovers
/// of earlier runs can be found and swept.
pub(crate) const RUN_LABEL: &str = "openshell-conformance.io/run";
/// The value of [`RUN_LABEL`] on objects a fault creates (a NetworkPolicy, a Secret).
pub(crate) const FAULT_LABEL_VALUE: &str = "fault";

/// The image of the node-access pod that kills a PID-1 supervisor on an existing cluster:
/// busybox, because it is small, widely mirrored, and has every tool the kill needs (`sh`,
/// `grep`, `tr`, `kill`) in one static binary, and Kubernetes' node-debugging guide uses it.
/// Pinned by tag: no registry that lists its digest is reachable from where this was written.
pub(crate) const NODE_ACCESS_IMAGE: &str = "busybox:1.37.0";

/// The label of node-access pods (value: the fault), so a run killed while one existed finds
/// it among the leftovers.
pub(crate) const NODE_ACCESS_LABEL: &str = "openshell-conformance.io/node-access";

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_file(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn the_agent_sandbox_asset_is_manifest_yaml_up_to_0_5_1_and_sandbox_yaml_after() {
        assert_eq!(agent_sandbox_asset("v0.5.0"), Some("manifest.yaml"));
        assert_eq!(agent_sandbox_asset("v0.5.1"), Some("manifest.yaml"));
        assert_eq!(agent_sandbox_asset("v0.5.2"), Some("sandbox.yaml"));
        assert_eq!(agent_sandbox_asset("v1.0.9"), Some("sandbox.yaml"));
        assert_eq!(agent_sandbox_asset("latest"), None);
        assert!(agent_sandbox_manifest_url("v0.5.4").ends_with("/v0.5.4/sandbox.yaml"));
    }

    #[test]
    fn each_openshell_release_gets_its_agent_sandbox() {
        let v = |s: &str| semver::Version::parse(s).unwrap();
        assert_eq!(agent_sandbox_for(Some(&v("0.0.111"))), "v0.5.0");
        assert_eq!(agent_sandbox_for(Some(&v("0.1.6"))), "v1.0.9");
        assert_eq!(agent_sandbox_for(None), "v0.5.0");
        assert_eq!(default_agent_sandbox(), "v0.5.0");
        assert_eq!(chart_version(), "0.0.111");
    }

    #[test]
    fn the_kind_and_k3d_config_files_use_the_pinned_images_and_cluster_name() {
        let kind = repo_file("kind-config.yaml");
        assert!(
            kind.contains(&format!("image: {KIND_NODE_IMAGE}")),
            "{kind}"
        );
        assert!(kind.contains(&format!("name: {CLUSTER_NAME}")), "{kind}");
        let k3d = repo_file("k3d-config.yaml");
        assert!(k3d.contains(&format!("image: {K3S_IMAGE}")), "{k3d}");
        assert!(k3d.contains(&format!("name: {CLUSTER_NAME}")), "{k3d}");
    }
}
