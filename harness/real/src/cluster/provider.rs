//! What every cluster provider is ([`ClusterProvider`]), and what kind and k3d share: the
//! private kubeconfig, the built-in config files, and creating or reusing a cluster.

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use crate::command::{Cmd, CmdError, CommandRunner, run_ok};
use crate::options::{Provider, RealOptions};
use crate::steps::Step;
use conformance_core::error::{Error, Result};

/// What `up` found or did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterUp {
    pub context: String,
    /// The kubeconfig to use; None means the default lookup.
    pub kubeconfig: Option<PathBuf>,
    /// True when an existing cluster was reused (then it is checked for leftovers).
    pub reused: bool,
}

#[async_trait]
pub trait ClusterProvider: Send + Sync {
    fn provider(&self) -> Provider;
    fn context(&self) -> &str;
    /// The steps `up` takes, for plans.
    fn up_plan(&self) -> Vec<Step>;
    /// Creates the cluster, or reuses it when one of that name exists.
    async fn up(&self, runner: &dyn CommandRunner) -> Result<ClusterUp>;
    fn down_plan(&self) -> Vec<Step>;
    /// Deletes the cluster (kind, k3d); does nothing for an existing cluster.
    async fn down(&self, runner: &dyn CommandRunner) -> Result<()>;
    fn load_images_plan(&self, images: &[String]) -> Result<Vec<Step>>;
    /// Makes local images available to the cluster's nodes.
    async fn load_images(&self, runner: &dyn CommandRunner, images: &[String]) -> Result<()>;
    /// Writes the cluster's own logs (nodes, kubelet) under `dir`, best effort.
    async fn export_logs(&self, runner: &dyn CommandRunner, dir: &Path) -> Result<()>;
}

/// The kubeconfig a kind or k3d run writes its context into: the user's choice, else a private
/// file in the private directory (so the user's own kubeconfig is never edited and no
/// credential lands in the artifacts).
pub(crate) fn private_kubeconfig(opts: &RealOptions) -> PathBuf {
    opts.kubeconfig
        .clone()
        .unwrap_or_else(|| opts.private_dir.join("kubeconfig"))
}

/// The cluster configuration files, built in so a run works from any directory.
const KIND_CONFIG: &str = include_str!("../../../../kind-config.yaml");
const K3D_CONFIG: &str = include_str!("../../../../k3d-config.yaml");

/// Where a kind or k3d config file is: `<repo>/<file>` when the run starts inside the
/// repository (so an edited file is used), else the built-in copy, written to the run directory
/// first (the second value). Looking it up in the working directory alone named a file that
/// did not exist when run from elsewhere.
pub(crate) fn cluster_config(opts: &RealOptions, file: &str) -> (PathBuf, Option<&'static str>) {
    let in_repo = opts.repo_root.join(file);
    if in_repo.is_file() {
        return (in_repo, None);
    }
    let builtin = if file == "k3d-config.yaml" {
        K3D_CONFIG
    } else {
        KIND_CONFIG
    };
    (opts.run_dir.join(file), Some(builtin))
}

/// Writes a built-in cluster config where [`cluster_config`] said.
pub(crate) fn write_cluster_config(path: &Path, contents: Option<&str>) -> Result<()> {
    let Some(text) = contents else {
        return Ok(());
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::infra_from(format!("cluster up: create {}", dir.display()), e))?;
    }
    std::fs::write(path, text)
        .map_err(|e| Error::infra_from(format!("cluster up: write {}", path.display()), e))
}

/// The plan step that writes a built-in cluster config, if one is used.
pub(crate) fn config_plan(path: &Path, contents: Option<&str>) -> Option<Step> {
    contents.map(|c| Step::Write {
        path: path.to_path_buf(),
        contents: c.to_string(),
    })
}

/// The plan of a local cluster's `up` (kind and k3d): list the clusters, write the built-in
/// config if used and create the named one unless listed, then write its kubeconfig.
pub(crate) fn local_up_plan(
    config: (&Path, Option<&str>),
    name: &str,
    list: Cmd,
    create: Cmd,
    kubeconfig: Cmd,
) -> Vec<Step> {
    std::iter::once(Step::run(list))
        .chain(config_plan(config.0, config.1))
        .chain([
            Step::run_when(
                create,
                &format!("if `{name}` is not listed; else it is reused"),
            ),
            Step::run(kubeconfig),
        ])
        .collect()
}

/// Creates the run's private directory (mode 0700) before anything writes a credential to it.
pub fn create_private_dir(opts: &RealOptions) -> Result<()> {
    crate::private::create_private_dir(&opts.private_dir).map_err(|e| {
        Error::infra_from(
            format!("private directory {}", opts.private_dir.display()),
            e,
        )
    })
}

/// Maps a tool failure during a cluster stage to an infrastructure error naming the stage.
pub fn infra(stage: &str, e: CmdError) -> Error {
    Error::infra_from(stage, e)
}

/// The `up` of kind and k3d: reuse the cluster when the tool's listing shows it (`listed`
/// reads the listing), create it otherwise, then write its private kubeconfig.
/// The built-in config (`config`, if used) is written only to create the cluster, after the
/// listing showed the tool works: a machine without kind gets nothing written.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn create_or_reuse(
    runner: &dyn CommandRunner,
    list: &Cmd,
    listed: impl Fn(&str) -> Result<bool>,
    config: (&Path, Option<&str>),
    create: &Cmd,
    write_kubeconfig: &Cmd,
    context: &str,
    kubeconfig: &Path,
) -> Result<ClusterUp> {
    let step = |e| infra("cluster up", e);
    let out = run_ok(runner, list).await.map_err(step)?;
    let reused = listed(&out.stdout)?;
    if !reused {
        write_cluster_config(config.0, config.1)?;
        run_ok(runner, create).await.map_err(step)?;
    }
    run_ok(runner, write_kubeconfig).await.map_err(step)?;
    Ok(ClusterUp {
        context: context.to_string(),
        kubeconfig: Some(kubeconfig.to_path_buf()),
        reused,
    })
}
