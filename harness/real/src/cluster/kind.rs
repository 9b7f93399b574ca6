//! kind: `kind-config.yaml` at the repository root, the pinned node image, a private kubeconfig.

use std::path::Path;

use async_trait::async_trait;

use super::provider::{ClusterProvider, ClusterUp, create_or_reuse, infra, private_kubeconfig};
use crate::command::{Cmd, CommandRunner, run_ok};
use crate::options::{Provider, RealOptions};
use crate::pins;
use crate::steps::Step;
use conformance_core::error::Result;

pub(crate) struct Kind {
    name: String,
    context: String,
    config: std::path::PathBuf,
    /// The built-in config to write to `config` first, when the repository's is not at hand.
    builtin_config: Option<&'static str>,
    kubeconfig: std::path::PathBuf,
    create_timeout: std::time::Duration,
}

impl Kind {
    pub(crate) fn new(opts: &RealOptions) -> Self {
        Self {
            name: opts.cluster_name.clone(),
            context: opts.context.clone(),
            config: super::provider::cluster_config(opts, "kind-config.yaml").0,
            builtin_config: super::provider::cluster_config(opts, "kind-config.yaml").1,
            kubeconfig: private_kubeconfig(opts),
            create_timeout: opts.timeouts.cluster_create,
        }
    }

    pub(crate) fn list_cmd(&self) -> Cmd {
        Cmd::new("kind").args(["get", "clusters"])
    }

    pub(crate) fn create_cmd(&self) -> Cmd {
        // kind parses a Go duration: whole seconds, never humantime's "1m 30s".
        let wait = format!("{}s", self.create_timeout.as_secs());
        Cmd::new("kind")
            .args(["create", "cluster", "--name", &self.name, "--config"])
            .arg(self.config.display().to_string())
            .args(["--image", pins::KIND_NODE_IMAGE, "--kubeconfig"])
            .arg(self.kubeconfig.display().to_string())
            .args(["--wait", &wait])
            // kind's own --wait bounds the control plane; the call gets a minute more.
            .timeout(self.create_timeout + std::time::Duration::from_secs(60))
    }

    pub(crate) fn export_kubeconfig_cmd(&self) -> Cmd {
        Cmd::new("kind")
            .args(["export", "kubeconfig", "--name", &self.name, "--kubeconfig"])
            .arg(self.kubeconfig.display().to_string())
    }

    pub(crate) fn delete_cmd(&self) -> Cmd {
        Cmd::new("kind").args(["delete", "cluster", "--name", &self.name])
    }

    pub(crate) fn load_cmd(&self, image: &str) -> Cmd {
        Cmd::new("kind").args(["load", "docker-image", image, "--name", &self.name])
    }

    pub(crate) fn export_logs_cmd(&self, dir: &Path) -> Cmd {
        Cmd::new("kind")
            .args(["export", "logs"])
            .arg(dir.display().to_string())
            .args(["--name", &self.name])
    }
}

#[async_trait]
impl ClusterProvider for Kind {
    fn provider(&self) -> Provider {
        Provider::Kind
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
            self.export_kubeconfig_cmd(),
        )
    }

    async fn up(&self, runner: &dyn CommandRunner) -> Result<ClusterUp> {
        let name = self.name.clone();
        create_or_reuse(
            runner,
            &self.list_cmd(),
            |out| Ok(out.lines().any(|l| l.trim() == name)),
            (&self.config, self.builtin_config),
            &self.create_cmd(),
            &self.export_kubeconfig_cmd(),
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
        Ok(images.iter().map(|i| Step::run(self.load_cmd(i))).collect())
    }

    async fn load_images(&self, runner: &dyn CommandRunner, images: &[String]) -> Result<()> {
        for i in images {
            run_ok(runner, &self.load_cmd(i))
                .await
                .map_err(|e| infra("load images", e))?;
        }
        Ok(())
    }

    async fn export_logs(&self, runner: &dyn CommandRunner, dir: &Path) -> Result<()> {
        run_ok(runner, &self.export_logs_cmd(&dir.join("kind")))
            .await
            .map_err(|e| infra("export logs", e))?;
        Ok(())
    }
}
