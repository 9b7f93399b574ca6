//! Optional (cargo feature `k3s`): a k3s cluster in a container started with testcontainers,
//! for users who have Docker but neither kind nor k3d. It is disposable by construction (the
//! container goes when the value is dropped), so its context `k3s-testcontainers` is allowed
//! by the interlock through [`K3sCluster::allow`]. Nothing here runs in this project's CI
//! (no Docker daemon); the feature is compiled by `cargo clippy --all-features`.

use std::path::{Path, PathBuf};

use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, ImageExt};
use testcontainers_modules::k3s::{K3s, KUBE_SECURE_PORT};

use conformance_core::error::{Error, Result};

/// The context name written into the kubeconfig of the container.
pub const CONTEXT: &str = "k3s-testcontainers";

pub struct K3sCluster {
    _container: ContainerAsync<K3s>,
    pub kubeconfig: PathBuf,
}

impl K3sCluster {
    /// Starts k3s (privileged, host user namespace, as the module requires) and writes a
    /// kubeconfig for it under `run_dir/k3s/`. The kubeconfig is a credential: pass the run's
    /// private directory ([`crate::options::RealOptions::private_dir`]), not the artifacts.
    pub async fn start(run_dir: &Path) -> Result<Self> {
        let conf = run_dir.join("k3s");
        std::fs::create_dir_all(&conf)
            .map_err(|e| Error::infra_from(format!("k3s: create {}", conf.display()), e))?;
        let container = K3s::default()
            .with_conf_mount(&conf)
            .with_privileged(true)
            .with_userns_mode("host")
            .start()
            .await
            .map_err(|e| Error::infra_from("k3s: start the container (is Docker running?)", e))?;
        let port = container
            .get_host_port_ipv4(KUBE_SECURE_PORT)
            .await
            .map_err(|e| Error::infra_from("k3s: find the API server's host port", e))?;
        let raw = container
            .image()
            .read_kube_config()
            .map_err(|e| Error::infra_from("k3s: read kubeconfig", e))?;
        let kubeconfig = run_dir.join("kubeconfig-k3s");
        std::fs::write(&kubeconfig, rewrite_kubeconfig(&raw, port))
            .map_err(|e| Error::infra_from(format!("k3s: write {}", kubeconfig.display()), e))?;
        Ok(Self {
            _container: container,
            kubeconfig,
        })
    }

    /// Adds this cluster's context to an allow list (it is disposable: the harness made it).
    pub fn allow(&self, allowed: &mut Vec<String>) {
        if !allowed.iter().any(|a| a == CONTEXT) {
            allowed.push(CONTEXT.to_string());
        }
    }
}

/// Points k3s's kubeconfig at the mapped host port and renames its `default` context, cluster
/// and user so they cannot be mistaken for anything else.
pub fn rewrite_kubeconfig(raw: &str, port: u16) -> String {
    raw.replace(
        "https://127.0.0.1:6443",
        &format!("https://127.0.0.1:{port}"),
    )
    .replace("name: default", &format!("name: {CONTEXT}"))
    .replace("cluster: default", &format!("cluster: {CONTEXT}"))
    .replace("user: default", &format!("user: {CONTEXT}"))
    .replace(
        "current-context: default",
        &format!("current-context: {CONTEXT}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_k3s_kubeconfig_points_at_the_mapped_port_under_its_own_context_name() {
        let raw = "apiVersion: v1\nclusters:\n- cluster:\n    server: https://127.0.0.1:6443\n  name: default\ncontexts:\n- context:\n    cluster: default\n    user: default\n  name: default\ncurrent-context: default\nusers:\n- name: default\n";
        let out = rewrite_kubeconfig(raw, 32768);
        assert!(out.contains("server: https://127.0.0.1:32768"));
        assert!(out.contains("current-context: k3s-testcontainers"));
        assert!(!out.contains("default"), "{out}");
    }
}
