//! k3d: `k3d-config.yaml` at the repository root, image import, a private kubeconfig.

use std::path::Path;

use async_trait::async_trait;

use super::provider::{ClusterProvider, ClusterUp, create_or_reuse, infra, private_kubeconfig};
use crate::command::{Cmd, CommandRunner, run_ok};
use crate::options::{Provider, RealOptions};
use crate::steps::Step;
use conformance_core::error::{Error, Result};

pub(crate) struct K3d {
    name: String,
    context: String,
    config: std::path::PathBuf,
    /// The built-in config to write to `config` first, when the repository's is not at hand.
    builtin_config: Option<&'static str>,
    kubeconfig: std::path::PathBuf,
    create_timeout: std::time::Duration,
}

impl K3d {
    pub(crate) fn new(opts: &RealOptions) -> Self {
        Self {
            name: opts.cluster_name.clone(),
            context: opts.context.clone(),
            config: super::provider::cluster_config(opts, "k3d-config.yaml").0,
            builtin_config: super::provider::cluster_config(opts, "k3d-config.yaml").1,
            kubeconfig: private_kubeconfig(opts),
            create_timeout: opts.timeouts.cluster_create,
        }
    }

    pub(crate) fn list_cmd(&self) -> Cmd {
        Cmd::new("k3d").args(["cluster", "list", "-o", "json"])
    }

    pub(crate) fn create_cmd(&self) -> Cmd {
        // The positional name wins over the config's, so --cluster-name works with one file.
        // The default kubeconfig is left alone; the context goes to the private one below.
        Cmd::new("k3d")
            .args(["cluster", "create", &self.name, "--config"])
            .arg(self.config.display().to_string())
            .args([
                "--kubeconfig-update-default=false",
                "--kubeconfig-switch-context=false",
            ])
            .timeout(self.create_timeout + std::time::Duration::from_secs(60))
    }

    pub(crate) fn write_kubeconfig_cmd(&self) -> Cmd {
        Cmd::new("k3d")
            .args(["kubeconfig", "write", &self.name, "--output"])
            .arg(self.kubeconfig.display().to_string())
    }

    pub(crate) fn delete_cmd(&self) -> Cmd {
        Cmd::new("k3d").args(["cluster", "delete", &self.name])
    }

    pub(crate) fn import_cmd(&self, images: &[String]) -> Cmd {
        Cmd::new("k3d")
            .args(["image", "import"])
            .args(images.iter().cloned())
            .args(["--cluster", &self.name, "--mode", "direct"])
    }

    /// k3d has no log export; the server node is a container whose log holds k3s's.
    pub(crate) fn server_logs_cmd(&self) -> Cmd {
        Cmd::new("docker").args([
            "logs",
            "--timestamps",
            &format!("k3d-{}-server-0", self.name),
        ])
    }

    /// Whether `k3d cluster list -o json` lists this cluster.
    pub(crate) fn listed(&self, json: &str) -> Result<bool> {
        let v: serde_json::Value = serde_json::from_str(json).map_err(|e| {
            Error::infra_from("cluster up: `k3d cluster list -o json` printed no JSON", e)
        })?;
        Ok(v.as_array()
            .into_iter()
            .flatten()
            .any(|c| c.get("name").and_then(|n| n.as_str()) == Some(self.name.as_str())))
    }
}

#[async_trait]
impl ClusterProvider for K3d {
    fn provider(&self) -> Provider {
        Provider::K3d
    }

    fn context(&self) -> &str {
        &self.context
    }

    fn up_plan(&self) -> Vec<Step> {
        super::provider::local_up_plan(
            (&self.config, self.builtin_config),
            &self.name,
            self.list_cmd(),
            self.create_cmd(),
            self.write_kubeconfig_cmd(),
        )
    }

    async fn up(&self, runner: &dyn CommandRunner) -> Result<ClusterUp> {
        create_or_reuse(
            runner,
            &self.list_cmd(),
            |out| self.listed(out),
            (&self.config, self.builtin_config),
            &self.create_cmd(),
            &self.write_kubeconfig_cmd(),
            &self.context,
            &self.kubeconfig,
        )
        .await
    }

    fn down_plan(&self) -> Vec<Step> {
        vec![Step::run(self.delete_cmd())]
    }

    async fn down(&self, runner: &dyn CommandRunner) -> Result<()> {
        run_ok(runner, &self.delete_cmd())
            .await
            .map_err(|e| infra("cluster down", e))?;
        Ok(())
    }

    fn load_images_plan(&self, images: &[String]) -> Result<Vec<Step>> {
        Ok(vec![Step::run(self.import_cmd(images))])
    }

    async fn load_images(&self, runner: &dyn CommandRunner, images: &[String]) -> Result<()> {
        if images.is_empty() {
            return Ok(());
        }
        run_ok(runner, &self.import_cmd(images))
            .await
            .map_err(|e| infra("load images", e))?;
        Ok(())
    }

    async fn export_logs(&self, runner: &dyn CommandRunner, dir: &Path) -> Result<()> {
        let out = run_ok(runner, &self.server_logs_cmd())
            .await
            .map_err(|e| infra("export logs", e))?;
        let path = dir.join(format!("k3d-{}-server-0.log", self.name));
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| Error::infra_from(format!("export logs: {}", dir.display()), e))?;
        // docker prints the container's stderr on its own stderr; keep both.
        tokio::fs::write(&path, format!("{}{}", out.stdout, out.stderr))
            .await
            .map_err(|e| Error::infra_from(format!("export logs: {}", path.display()), e))?;
        Ok(())
    }
}
