//! An existing cluster: a kubeconfig and a context. The harness never creates, deletes or loads
//! images into it; the interlock still decides whether it may be changed at all.

use std::path::Path;

use async_trait::async_trait;

use super::provider::{ClusterProvider, ClusterUp};
use crate::command::CommandRunner;
use crate::options::{Provider, RealOptions};
use crate::steps::Step;
use conformance_core::error::{Error, Result};

pub(crate) struct Existing {
    context: String,
    kubeconfig: Option<std::path::PathBuf>,
}

impl Existing {
    pub(crate) fn new(opts: &RealOptions) -> Self {
        Self {
            context: opts.context.clone(),
            kubeconfig: opts.kubeconfig.clone(),
        }
    }
}

#[async_trait]
impl ClusterProvider for Existing {
    fn provider(&self) -> Provider {
        Provider::Existing
    }

    fn context(&self) -> &str {
        &self.context
    }

    fn up_plan(&self) -> Vec<Step> {
        vec![Step::kube(format!(
            "connect to context {} ({}) and read the API server version (reachability)",
            self.context,
            self.kubeconfig
                .as_ref()
                .map(|k| k.display().to_string())
                .unwrap_or_else(|| "default kubeconfig".into())
        ))]
    }

    async fn up(&self, _runner: &dyn CommandRunner) -> Result<ClusterUp> {
        Ok(ClusterUp {
            context: self.context.clone(),
            kubeconfig: self.kubeconfig.clone(),
            // An existing cluster may hold anything: always check it for leftovers.
            reused: true,
        })
    }

    fn down_plan(&self) -> Vec<Step> {
        Vec::new()
    }

    async fn down(&self, _runner: &dyn CommandRunner) -> Result<()> {
        Err(Error::usage(format!(
            "`cluster down` deletes only clusters the harness creates (kind, k3d); context {} is an existing cluster and is left alone",
            self.context
        )))
    }

    fn load_images_plan(&self, images: &[String]) -> Result<Vec<Step>> {
        if images.is_empty() {
            Ok(Vec::new())
        } else {
            Err(load_refused())
        }
    }

    async fn load_images(&self, _runner: &dyn CommandRunner, images: &[String]) -> Result<()> {
        if images.is_empty() {
            Ok(())
        } else {
            Err(load_refused())
        }
    }

    async fn export_logs(&self, _runner: &dyn CommandRunner, _dir: &Path) -> Result<()> {
        Ok(())
    }
}

fn load_refused() -> Error {
    Error::usage(
        "--load-image needs --target kind or k3d; for an existing cluster push the images to a registry it can pull from and pass --image-repository/--image-tag",
    )
}
