//! Options of the real-cluster path: a `clap::Args` struct the CLI flattens into `run`,
//! `doctor`, `cluster up|down` and `restore`, and the resolved [`RealOptions`] the library uses.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

use crate::pins;
use conformance_core::error::{Error, Result};

/// Which cluster to run against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Provider {
    /// Create (or reuse) a kind cluster from `kind-config.yaml`.
    Kind,
    /// Create (or reuse) a k3d cluster from `k3d-config.yaml`.
    K3d,
    /// A cluster you already have: a kubeconfig and a context.
    Existing,
}

impl Provider {
    pub fn name(self) -> &'static str {
        match self {
            Self::Kind => "kind",
            Self::K3d => "k3d",
            Self::Existing => "existing",
        }
    }
}

/// What to do with leftovers of earlier runs on a reused cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LeftoverPolicy {
    /// Report them and stop before changing anything.
    Stop,
    /// Report them, delete them, and go on.
    Sweep,
}

/// When to write a diagnostics bundle for a case.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DiagnosticsPolicy {
    /// When a check or stage failed (before teardown removes the evidence).
    #[default]
    OnFailure,
    Always,
    Never,
}

/// The spellings a boolean accepts from its environment variable.
pub const BOOL_SPELLINGS: &str = "1/0, true/false, yes/no, on/off";

/// The value parser of a boolean flag that also comes from the environment variable `var`:
/// the usual spellings, any case, and an error that names the variable and what it accepts
/// (clap's own parser takes only true/false and names the flag, not the variable).
pub fn env_bool(
    var: &'static str,
) -> impl Fn(&str) -> std::result::Result<bool, String> + Clone + Send + Sync + 'static {
    move |s: &str| match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("{var}={s} is not a boolean; use {BOOL_SPELLINGS}")),
    }
}

/// Flags of the real-cluster path. Flatten into a subcommand with `#[command(flatten)]`.
#[derive(Clone, Debug, Default, Args)]
pub struct RealArgs {
    /// Kubeconfig file (default: $KUBECONFIG or ~/.kube/config; kind and k3d clusters get a
    /// private one under the run directory).
    #[arg(long, env = "OPENSHELL_CONFORMANCE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (kind: `kind-<cluster>`, k3d: `k3d-<cluster>`; required for existing).
    #[arg(long, env = "OPENSHELL_CONFORMANCE_CONTEXT")]
    pub context: Option<String>,
    /// Allow fault injection into this context although it is not named `kind-*` or `k3d-*`.
    /// Repeatable. Only for disposable clusters.
    #[arg(long = "allow-context", value_name = "NAME")]
    pub allow_context: Vec<String>,
    /// kind or k3d cluster name to create or reuse.
    #[arg(long, env = "OPENSHELL_CONFORMANCE_CLUSTER_NAME", default_value = pins::CLUSTER_NAME)]
    pub cluster_name: String,
    /// OCI chart reference.
    #[arg(long, env = "OPENSHELL_CONFORMANCE_CHART", default_value = pins::CHART_REF)]
    pub chart: String,
    /// Chart version (for the OCI chart; also selects the topology's helm values).
    #[arg(long, env = "OPENSHELL_CONFORMANCE_CHART_VERSION", default_value = pins::chart_version())]
    pub chart_version: String,
    /// A local chart directory instead of the OCI chart (its Chart.yaml version selects values).
    #[arg(long, env = "OPENSHELL_CONFORMANCE_CHART_PATH")]
    pub chart_path: Option<PathBuf>,
    /// Extra helm values files, applied after the topology's values, in order.
    #[arg(long = "values", short = 'f', value_name = "FILE")]
    pub values: Vec<PathBuf>,
    /// Extra helm `--set` overrides, applied last.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Gateway image repository override (a local build).
    #[arg(long, env = "OPENSHELL_CONFORMANCE_IMAGE_REPOSITORY")]
    pub image_repository: Option<String>,
    /// Gateway image tag override.
    #[arg(long, env = "OPENSHELL_CONFORMANCE_IMAGE_TAG")]
    pub image_tag: Option<String>,
    /// Supervisor image repository override.
    #[arg(long, env = "OPENSHELL_CONFORMANCE_SUPERVISOR_IMAGE_REPOSITORY")]
    pub supervisor_image_repository: Option<String>,
    /// Supervisor image tag override.
    #[arg(long, env = "OPENSHELL_CONFORMANCE_SUPERVISOR_IMAGE_TAG")]
    pub supervisor_image_tag: Option<String>,
    /// Local images to load into the kind or k3d cluster before installing.
    #[arg(long = "load-image", value_name = "IMAGE")]
    pub load_images: Vec<String>,
    /// Agent Sandbox release to install (`auto`: the one for the chart's OpenShell release,
    /// v0.5.0 for 0.0.x, v1.0.9 for 0.1.x).
    #[arg(
        long,
        env = "OPENSHELL_CONFORMANCE_AGENT_SANDBOX_VERSION",
        default_value = "auto"
    )]
    pub agent_sandbox_version: String,
    /// A local Agent Sandbox manifest (a release's `manifest.yaml` or `sandbox.yaml`) instead
    /// of the release download.
    #[arg(long, env = "OPENSHELL_CONFORMANCE_AGENT_SANDBOX_MANIFEST")]
    pub agent_sandbox_manifest: Option<PathBuf>,
    /// Keep the release (and the kind/k3d cluster) after the run.
    #[arg(long, env = "OPENSHELL_CONFORMANCE_KEEP", value_parser = env_bool("OPENSHELL_CONFORMANCE_KEEP"))]
    pub keep: bool,
    /// Sweep leftovers of earlier runs instead of stopping.
    #[arg(long, env = "OPENSHELL_CONFORMANCE_SWEEP_LEFTOVERS", value_parser = env_bool("OPENSHELL_CONFORMANCE_SWEEP_LEFTOVERS"))]
    pub sweep_leftovers: bool,
    /// The openshell CLI binary.
    #[arg(
        long,
        env = "OPENSHELL_CONFORMANCE_OPENSHELL_BIN",
        default_value = DEFAULT_OPENSHELL_BIN
    )]
    pub openshell_bin: String,
    /// When to collect a diagnostics bundle per case (into <run-dir>/diagnostics/).
    #[arg(long, env = "OPENSHELL_CONFORMANCE_DIAGNOSTICS", value_enum, default_value_t = DiagnosticsPolicy::OnFailure)]
    pub diagnostics: DiagnosticsPolicy,
    /// Where the run keeps its helm values, restore journal and diagnostics (`run`: the
    /// artifacts directory).
    #[arg(long, env = "OPENSHELL_CONFORMANCE_RUN_DIR")]
    pub run_dir: Option<PathBuf>,
    /// Where the run keeps credentials (the kind/k3d kubeconfig, the gateway's client
    /// certificate, the CLI's configuration), mode 0700; never inside the artifacts. Default: a
    /// directory per run under the system's temporary directory.
    /// It must be new, or an empty directory of this user that no other user can enter (its mode
    /// is never changed); the run clears it when it ends unless --keep-private-dir.
    #[arg(long, env = "OPENSHELL_CONFORMANCE_PRIVATE_DIR")]
    pub private_dir: Option<PathBuf>,
    /// Leave the private directory and the credentials in it after the run.
    #[arg(long, env = "OPENSHELL_CONFORMANCE_KEEP_PRIVATE_DIR", value_parser = env_bool("OPENSHELL_CONFORMANCE_KEEP_PRIVATE_DIR"))]
    pub keep_private_dir: bool,
}

/// `--openshell-bin` when not given: the CLI's name, looked up on `PATH`.
pub const DEFAULT_OPENSHELL_BIN: &str = "openshell";

/// Resolved options: defaults filled in, the provider chosen, paths fixed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RealOptions {
    pub provider: Provider,
    pub cluster_name: String,
    pub kubeconfig: Option<PathBuf>,
    pub context: String,
    pub allow_contexts: Vec<String>,
    pub chart: ChartSource,
    pub values_files: Vec<PathBuf>,
    pub set: Vec<String>,
    pub image_repository: Option<String>,
    pub image_tag: Option<String>,
    pub supervisor_image_repository: Option<String>,
    pub supervisor_image_tag: Option<String>,
    pub load_images: Vec<String>,
    pub agent_sandbox: AgentSandboxSource,
    pub keep: bool,
    pub leftovers: LeftoverPolicy,
    pub diagnostics: DiagnosticsPolicy,
    pub openshell_bin: String,
    pub run_dir: PathBuf,
    /// Credentials only (see [`RealArgs::private_dir`]).
    pub private_dir: PathBuf,
    /// The run id, the value of [`pins::RUN_LABEL`] on what this run creates.
    pub run_id: String,
    /// The cluster lives in this process and ends with it (`run --target served`): the restore
    /// journal says so, since a killed run leaves nothing to restore.
    pub cluster_ends_with_run: bool,
    pub namespace: String,
    pub release: String,
    /// The repository root, where `kind-config.yaml` and `k3d-config.yaml` are.
    pub repo_root: PathBuf,
    pub timeouts: Timeouts,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "kebab-case")]
pub enum ChartSource {
    Oci {
        reference: String,
        version: String,
        /// The chart, pulled into the private directory before the run started (see
        /// [`crate::fetch::chart`]); helm installs this directory, not the reference.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pulled: Option<PathBuf>,
    },
    Local {
        path: PathBuf,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "kebab-case")]
pub enum AgentSandboxSource {
    Release {
        version: String,
        /// The release manifest, downloaded before the run started (see
        /// [`crate::fetch::agent_sandbox_manifest`]); kubectl applies this file, not the URL.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        downloaded: Option<PathBuf>,
    },
    File {
        path: PathBuf,
    },
}

impl AgentSandboxSource {
    /// What `kubectl apply -f` gets: the release URL or the local file.
    pub fn manifest(&self) -> String {
        match self {
            Self::Release {
                downloaded: Some(path),
                ..
            } => path.display().to_string(),
            Self::Release { version, .. } => pins::agent_sandbox_manifest_url(version),
            Self::File { path } => path.display().to_string(),
        }
    }

    pub fn version(&self) -> String {
        match self {
            Self::Release { version, .. } => version.clone(),
            Self::File { path } => format!("file:{}", path.display()),
        }
    }
}

/// Deadlines of the stages that wait. Defaults follow upstream's budgets (docs/upstream-facts.md
/// F8.4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeouts {
    #[serde(with = "humantime_serde_secs")]
    pub cluster_create: Duration,
    #[serde(with = "humantime_serde_secs")]
    pub crd_established: Duration,
    #[serde(with = "humantime_serde_secs")]
    pub controller_ready: Duration,
    #[serde(with = "humantime_serde_secs")]
    pub helm: Duration,
    #[serde(with = "humantime_serde_secs")]
    pub gateway_ready: Duration,
    #[serde(with = "humantime_serde_secs")]
    pub cli_call: Duration,
    /// `sandbox create` and `start` wait for Ready inside the CLI (300 s idle timeout,
    /// docs/upstream-facts.md F6.3), so the call gets more.
    #[serde(with = "humantime_serde_secs")]
    pub cli_lifecycle: Duration,
}

mod humantime_serde_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let t = String::deserialize(d)?;
        humantime::parse_duration(&t).map_err(serde::de::Error::custom)
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            cluster_create: Duration::from_secs(300),
            crd_established: Duration::from_secs(120),
            controller_ready: Duration::from_secs(300),
            helm: Duration::from_secs(300),
            gateway_ready: Duration::from_secs(300),
            cli_call: Duration::from_secs(60),
            cli_lifecycle: Duration::from_secs(330),
        }
    }
}

/// The name of a run's own private directory (no `--private-dir`), under the system's temporary
/// directory: `<run id>-<128 random bits>-private`. The process id in the run id lets a later run
/// tell one a killed run left; the random part keeps another user from creating it first.
pub fn default_private_dir_name(run_id: &str) -> std::io::Result<String> {
    let nonce = crate::private::unguessable()?;
    Ok(format!(
        "{PRIVATE_DIR_START}{run_id}-{nonce}{PRIVATE_DIR_END}"
    ))
}

/// What a [`default_private_dir_name`] starts and ends with, around the run id.
pub const PRIVATE_DIR_START: &str = "openshell-conformance-";
pub const PRIVATE_DIR_END: &str = "-private";

/// A fresh run id: seconds since the epoch and the process id, valid as a label value.
pub fn new_run_id() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{secs}-{}", std::process::id())
}

impl RealArgs {
    /// Resolves the flags for a provider. `run_id` labels what the run creates; `repo_root`
    /// locates the cluster config files.
    pub fn resolve(
        &self,
        provider: Provider,
        run_id: &str,
        repo_root: impl Into<PathBuf>,
    ) -> Result<RealOptions> {
        let context = match (provider, &self.context) {
            (_, Some(c)) if c.trim().is_empty() => {
                return Err(Error::usage("--context must not be empty"));
            }
            (_, Some(c)) => c.clone(),
            (Provider::Kind, None) => format!("kind-{}", self.cluster_name),
            (Provider::K3d, None) => format!("k3d-{}", self.cluster_name),
            (Provider::Existing, None) => {
                return Err(Error::usage(
                    "--target existing needs --context NAME (the kubeconfig context of the cluster to test)",
                ));
            }
        };
        if matches!(provider, Provider::Kind | Provider::K3d)
            && self.context.is_some()
            && !context.ends_with(&self.cluster_name)
        {
            return Err(Error::usage(format!(
                "--context {context} does not name the {} cluster `{}`; drop --context or use --target existing",
                provider.name(),
                self.cluster_name
            )));
        }
        for s in &self.set {
            if !s.contains('=') {
                return Err(Error::usage(format!(
                    "--set {s}: expected KEY=VALUE, as helm takes it"
                )));
            }
        }
        if !self.chart_version.is_empty() && semver::Version::parse(&self.chart_version).is_err() {
            return Err(Error::usage(format!(
                "--chart-version {}: not a semantic version such as {}",
                self.chart_version,
                pins::chart_version()
            )));
        }
        let chart = match &self.chart_path {
            Some(path) => ChartSource::Local { path: path.clone() },
            None => ChartSource::Oci {
                reference: self.chart.clone(),
                version: self.chart_version.clone(),
                pulled: None,
            },
        };
        let agent_sandbox = match &self.agent_sandbox_manifest {
            Some(path) if !path.is_file() => {
                return Err(Error::usage(format!(
                    "--agent-sandbox-manifest {}: no such file",
                    path.display()
                )));
            }
            Some(path) => AgentSandboxSource::File { path: path.clone() },
            None if matches!(self.agent_sandbox_version.as_str(), "" | "auto") => {
                let openshell = openshell_release(&chart).ok().flatten();
                AgentSandboxSource::Release {
                    version: pins::agent_sandbox_for(openshell.as_ref()).to_string(),
                    downloaded: None,
                }
            }
            None => {
                let version = self.agent_sandbox_version.clone();
                if pins::agent_sandbox_asset(&version).is_none() {
                    return Err(Error::usage(format!(
                        "--agent-sandbox-version {version}: not a release such as {}",
                        pins::default_agent_sandbox()
                    )));
                }
                AgentSandboxSource::Release {
                    version,
                    downloaded: None,
                }
            }
        };
        let run_dir = self.run_dir.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("openshell-conformance-{run_id}"))
        });
        // Absolute: the tools the run starts (the openshell CLI's configuration, kubectl's
        // kubeconfig) are handed this path, and a relative one would not name the same place
        // for all of them.
        let private_dir = match &self.private_dir {
            Some(dir) => std::path::absolute(dir)
                .map_err(|e| Error::usage_from(format!("--private-dir {}", dir.display()), e))?,
            None => std::env::temp_dir().join(
                default_private_dir_name(run_id)
                    .map_err(|e| Error::infra_from("a name for the run's private directory", e))?,
            ),
        };
        refuse_inside(&private_dir, &run_dir)?;
        // kind and k3d write their context to a private kubeconfig, so the user's own is never
        // edited and no credential lands in the artifacts.
        let kubeconfig = match provider {
            Provider::Existing => self.kubeconfig.clone(),
            _ => Some(
                self.kubeconfig
                    .clone()
                    .unwrap_or_else(|| private_dir.join("kubeconfig")),
            ),
        };
        Ok(RealOptions {
            provider,
            cluster_name: self.cluster_name.clone(),
            kubeconfig,
            context,
            allow_contexts: self.allow_context.clone(),
            chart,
            values_files: self.values.clone(),
            set: self.set.clone(),
            image_repository: self.image_repository.clone(),
            image_tag: self.image_tag.clone(),
            supervisor_image_repository: self.supervisor_image_repository.clone(),
            supervisor_image_tag: self.supervisor_image_tag.clone(),
            load_images: self.load_images.clone(),
            agent_sandbox,
            keep: self.keep,
            leftovers: if self.sweep_leftovers {
                LeftoverPolicy::Sweep
            } else {
                LeftoverPolicy::Stop
            },
            diagnostics: self.diagnostics,
            openshell_bin: self.openshell_bin.clone(),
            run_dir,
            private_dir,
            run_id: run_id.to_string(),
            cluster_ends_with_run: false,
            namespace: pins::NAMESPACE.to_string(),
            release: pins::RELEASE.to_string(),
            repo_root: repo_root.into(),
            timeouts: Timeouts::default(),
        })
    }
}

/// `path` as the filesystem sees it: absolute, with the symbolic links of the part that exists
/// resolved, so two spellings of one directory compare equal even before it is made.
pub fn resolved(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut rest = Vec::new();
    let mut cur = abs.as_path();
    loop {
        if let Ok(real) = std::fs::canonicalize(cur) {
            return rest.iter().rev().fold(real, |p, name| p.join(name));
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return abs,
        }
    }
}

/// Refuses a private directory inside `artifacts` (the run directory or `--artifacts`): what
/// a CI job uploads must hold no credential.
pub fn refuse_inside(private_dir: &Path, artifacts: &Path) -> Result<()> {
    if resolved(private_dir).starts_with(resolved(artifacts)) {
        return Err(Error::usage(format!(
            "--private-dir {} is inside {}: credentials must stay out of the artifacts; give a \
             directory outside it",
            private_dir.display(),
            artifacts.display()
        )));
    }
    Ok(())
}

impl RealArgs {
    /// Checks every file and directory the flags name, before anything starts: each is there
    /// and is what the run will read it as (a chart, YAML, an executable, a directory the run
    /// can create). Exit 2, naming the flag and the path.
    pub fn check_paths(&self) -> Result<()> {
        if let Some(dir) = &self.chart_path {
            let file = dir.join("Chart.yaml");
            let bad = |why: String| {
                Error::usage(format!(
                    "--chart-path {}: {why}; give the directory of an unpacked OpenShell chart",
                    dir.display()
                ))
            };
            if !file.is_file() {
                return Err(bad("no Chart.yaml there".into()));
            }
            let chart = ChartSource::Local { path: dir.clone() };
            let check = |r: Result<()>| r.map_err(|e| bad(conformance_core::error::one_line(&e)));
            check(openshell_release(&chart).map(drop))?;
            check(local_chart_version(dir).map(drop))?;
        }
        if let Some(path) = &self.agent_sandbox_manifest {
            check_agent_sandbox_manifest(path)?;
        }
        if let Some(path) = &self.kubeconfig {
            check_kubeconfig(path)?;
        }
        for path in &self.values {
            check_yaml(path, "--values", false)?;
        }
        let bin = Path::new(&self.openshell_bin);
        if bin.components().count() > 1 {
            check_executable(bin)?;
        }
        if let Some(dir) = &self.run_dir {
            check_creatable(dir).map_err(|e| {
                Error::usage_from(
                    format!(
                        "--run-dir {}: the run cannot make its directory there",
                        dir.display()
                    ),
                    e,
                )
            })?;
        }
        if let Some(dir) = &self.private_dir {
            let unusable = crate::private::unusable_private_dir(dir)
                .map_err(|e| Error::usage_from(format!("--private-dir {}", dir.display()), e))?;
            if let Some(why) = unusable {
                return Err(Error::usage(format!("--private-dir: {why}")));
            }
            check_creatable(dir).map_err(|e| {
                Error::usage_from(
                    format!(
                        "--private-dir {}: the run cannot make its directory there",
                        dir.display()
                    ),
                    e,
                )
            })?;
        }
        Ok(())
    }
}

/// A YAML file the run hands to a tool: readable text, YAML, each document a mapping (a helm
/// values file is one document; a manifest may be several).
fn check_yaml(path: &Path, flag: &str, documents: bool) -> Result<Vec<serde_json::Value>> {
    let bad = |why: String| Error::usage(format!("{flag} {}: {why}", path.display()));
    let text = conformance_core::user_file::read_to_string(
        path,
        conformance_core::user_file::Kind::Manifest,
        &format!("{flag} {}", path.display()),
    )?;
    let docs: Vec<serde_json::Value> = if documents {
        serde_saphyr::from_multiple(&text)
    } else {
        serde_saphyr::from_str::<Option<serde_json::Value>>(&text).map(|d| d.into_iter().collect())
    }
    .map_err(|e| bad(format!("not YAML: {e}")))?;
    if docs.iter().any(|d| !(d.is_object() || d.is_null())) {
        return Err(bad("a YAML document that is not a mapping".into()));
    }
    Ok(docs)
}

/// `--agent-sandbox-manifest`: YAML that defines the Sandbox CRD, as every Agent Sandbox release
/// manifest does (the install waits for it to be Established); anything else would be applied
/// and fail later, after the run started.
fn check_agent_sandbox_manifest(path: &Path) -> Result<()> {
    let flag = "--agent-sandbox-manifest";
    let docs = check_yaml(path, flag, true)?;
    if !docs.iter().any(is_sandbox_crd) {
        return Err(Error::usage(format!(
            "{flag} {}: it does not define the CustomResourceDefinition {}; give an Agent Sandbox \
             release's manifest.yaml (up to v0.5.1) or sandbox.yaml",
            path.display(),
            pins::SANDBOX_CRD
        )));
    }
    Ok(())
}

fn is_sandbox_crd(d: &serde_json::Value) -> bool {
    d.get("kind").and_then(|k| k.as_str()) == Some("CustomResourceDefinition")
        && d.pointer("/metadata/name").and_then(|n| n.as_str()) == Some(pins::SANDBOX_CRD)
}

/// A downloaded release manifest: YAML defining the Sandbox CRD, else why not.
pub(crate) fn defines_sandbox_crd(text: &str) -> std::result::Result<(), String> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| format!("not YAML: {e}"))?;
    if docs.iter().any(is_sandbox_crd) {
        Ok(())
    } else {
        Err(format!(
            "it does not define the CustomResourceDefinition {}",
            pins::SANDBOX_CRD
        ))
    }
}

/// `--kubeconfig`: a kubeconfig the run can read (bounded: `/dev/zero` never ended), checked
/// before anything starts, so a wrong path is the user's mistake (exit 2), not the cluster's.
fn check_kubeconfig(path: &Path) -> Result<()> {
    if !path.exists() {
        return Err(Error::usage(format!(
            "kubeconfig {} does not exist (--kubeconfig)",
            path.display()
        )));
    }
    let what = format!("--kubeconfig {}", path.display());
    let bytes = conformance_core::user_file::read(
        path,
        conformance_core::user_file::Kind::Kubeconfig,
        &what,
    )?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::usage(format!("{what}: not a kubeconfig (not text)")))?;
    kube::config::Kubeconfig::from_yaml(&text)
        .map_err(|e| Error::usage(format!("{what}: not a kubeconfig ({e})")))?;
    Ok(())
}

/// `--openshell-bin` given as a path: a file the run can execute.
fn check_executable(bin: &Path) -> Result<()> {
    let meta = std::fs::metadata(bin).map_err(|e| {
        Error::usage_from(
            format!("--openshell-bin {}: no such file", bin.display()),
            e,
        )
    })?;
    #[cfg(unix)]
    let executable = {
        use std::os::unix::fs::PermissionsExt as _;
        meta.permissions().mode() & 0o111 != 0
    };
    #[cfg(not(unix))]
    let executable = true;
    if !meta.is_file() || !executable {
        return Err(Error::usage(format!(
            "--openshell-bin {}: not an executable file; give the openshell CLI binary",
            bin.display()
        )));
    }
    Ok(())
}

/// A directory that is there, or one that can be made where it is named: probed by making and
/// removing a directory in its nearest existing ancestor, so nothing is left.
fn check_creatable(dir: &Path) -> std::io::Result<()> {
    let dir = std::path::absolute(dir)?;
    let existing = dir
        .ancestors()
        .find(|a| std::fs::symlink_metadata(a).is_ok())
        .unwrap_or(Path::new("/"));
    if !existing.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a directory",
            existing.display()
        )));
    }
    tempfile::Builder::new()
        .prefix(".openshell-conformance-probe-")
        .tempdir_in(existing)
        .map(drop)
}

/// The `version` of a local chart's `Chart.yaml`.
fn local_chart_version(path: &Path) -> Result<semver::Version> {
    let file = path.join("Chart.yaml");
    let text = std::fs::read_to_string(&file)
        .map_err(|e| Error::usage_from(format!("cannot read {}", file.display()), e))?;
    let v: serde_json::Value = serde_saphyr::from_str(&text)
        .map_err(|e| Error::config(&file, "(document)", e.to_string()))?;
    let text = v
        .get("version")
        .and_then(|v| v.as_str())
        .ok_or_else(|| Error::config(&file, "version", "missing"))?;
    semver::Version::parse(text).map_err(|e| Error::config(&file, "version", e.to_string()))
}

/// See [`RealOptions::openshell_version`].
fn openshell_release(chart: &ChartSource) -> Result<Option<semver::Version>> {
    let v = match chart {
        ChartSource::Oci { version, .. } => semver::Version::parse(version)
            .map_err(|e| Error::usage_from(format!("chart version {version}"), e))?,
        ChartSource::Local { path } => {
            let file = path.join("Chart.yaml");
            let text = std::fs::read_to_string(&file)
                .map_err(|e| Error::usage_from(format!("cannot read {}", file.display()), e))?;
            let doc: serde_json::Value = serde_saphyr::from_str(&text)
                .map_err(|e| Error::config(&file, "(document)", e.to_string()))?;
            let field = if doc.get("appVersion").is_some() {
                "appVersion"
            } else {
                "version"
            };
            let text = match doc.get(field) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => return Err(Error::config(&file, "version", "missing")),
            };
            semver::Version::parse(text.trim_start_matches('v'))
                .map_err(|e| Error::config(&file, field, e.to_string()))?
        }
    };
    Ok((v != semver::Version::new(0, 0, 0)).then_some(v))
}

impl RealOptions {
    /// The chart version the topology values are chosen for: the OCI version, or the version
    /// in a local chart's `Chart.yaml`.
    pub fn chart_version(&self) -> Result<semver::Version> {
        match &self.chart {
            ChartSource::Oci { version, .. } => semver::Version::parse(version)
                .map_err(|e| Error::usage_from(format!("chart version {version}"), e)),
            ChartSource::Local { path } => local_chart_version(path),
        }
    }

    /// The OpenShell release the chart installs, which decides the topologies a run can cover:
    /// a published chart's version and appVersion are both the release (upstream's release job
    /// patches them together, docs/upstream-facts.md F5.9). A local chart is read by its
    /// `appVersion`; an unpatched source tree (`0.0.0`) says nothing, so None.
    pub fn openshell_version(&self) -> Result<Option<semver::Version>> {
        openshell_release(&self.chart)
    }

    /// Why a topology cannot run with this chart, or None if it can: the release is older than
    /// the topology's `min_openshell`, or the fixture has no helm values for the chart version.
    pub fn topology_skip_reason(
        &self,
        topology: &conformance_core::topology::Topology,
    ) -> Result<Option<String>> {
        let chart = self.chart_version()?;
        if let Some(v) = self.openshell_version()?
            && !topology.supports(&v)
        {
            return Ok(Some(format!(
                "topology {} needs OpenShell {} or newer; the chart installs {v}",
                topology.name, topology.min_openshell
            )));
        }
        if topology.values_for(&chart).is_none() {
            return Ok(Some(format!(
                "topology {} has no helm values for chart {chart} (it needs OpenShell {} or newer)",
                topology.name, topology.min_openshell
            )));
        }
        Ok(None)
    }

    /// kubectl and helm flags that select the cluster.
    pub(crate) fn kube_flags(&self, context_flag: &str) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(k) = &self.kubeconfig {
            v.push("--kubeconfig".into());
            v.push(k.display().to_string());
        }
        v.push(context_flag.into());
        v.push(self.context.clone());
        v
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        real: RealArgs,
    }

    fn args(v: &[&str]) -> RealArgs {
        Cli::try_parse_from(std::iter::once("x").chain(v.iter().copied()))
            .unwrap()
            .real
    }

    #[test]
    fn booleans_from_the_environment_take_the_usual_spellings_and_errors_name_the_variable() {
        let parse = env_bool("OPENSHELL_CONFORMANCE_KEEP");
        for yes in ["1", "true", "TRUE", "yes", "Yes", "on"] {
            assert_eq!(parse(yes), Ok(true), "{yes}");
        }
        for no in ["0", "false", "no", "OFF"] {
            assert_eq!(parse(no), Ok(false), "{no}");
        }
        let err = parse("maybe").unwrap_err();
        assert!(
            err.contains("OPENSHELL_CONFORMANCE_KEEP=maybe") && err.contains(BOOL_SPELLINGS),
            "{err}"
        );
    }

    #[test]
    fn the_keep_flag_still_works_as_a_flag_without_a_value() {
        assert!(args(&["--keep", "--sweep-leftovers"]).keep);
        assert!(!args(&[]).keep);
    }

    #[test]
    fn a_run_id_is_a_valid_label_value() {
        let id = new_run_id();
        assert!(
            id.len() <= 63 && id.chars().all(|c| c.is_ascii_digit() || c == '-'),
            "{id}"
        );
    }

    #[test]
    fn kind_and_k3d_contexts_follow_the_cluster_name() {
        let a = args(&[]);
        assert_eq!(
            a.resolve(Provider::Kind, "r1", ".").unwrap().context,
            "kind-openshell-conformance"
        );
        assert_eq!(
            a.resolve(Provider::K3d, "r1", ".").unwrap().context,
            "k3d-openshell-conformance"
        );
    }

    #[test]
    fn an_existing_cluster_without_a_context_is_a_usage_error() {
        let err = args(&[])
            .resolve(Provider::Existing, "r1", ".")
            .unwrap_err();
        assert_eq!(
            err.exit_status(),
            conformance_core::error::ExitStatus::Usage
        );
        assert!(err.to_string().contains("--context"), "{err}");
    }

    #[test]
    fn a_set_without_an_equals_sign_or_a_bad_chart_version_is_a_usage_error() {
        let err = args(&["--set", "image.tag"])
            .resolve(Provider::Kind, "r1", ".")
            .unwrap_err();
        assert!(err.to_string().contains("KEY=VALUE"), "{err}");
        let err = args(&["--chart-version", "latest"])
            .resolve(Provider::Kind, "r1", ".")
            .unwrap_err();
        assert!(err.to_string().contains("semantic version"), "{err}");
    }

    #[test]
    fn a_local_chart_selects_values_by_its_chart_yaml_version() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("Chart.yaml"),
            "apiVersion: v2\nname: openshell\nversion: 0.1.6-dev.3\nappVersion: 0.1.6\n",
        )
        .unwrap();
        let o = args(&["--chart-path", dir.path().to_str().unwrap()])
            .resolve(Provider::Kind, "r1", ".")
            .unwrap();
        assert_eq!(o.chart_version().unwrap().to_string(), "0.1.6-dev.3");
    }

    #[test]
    fn agent_sandbox_follows_the_chart_unless_named_and_a_missing_manifest_file_is_a_usage_error() {
        let o = args(&[]).resolve(Provider::Kind, "r1", ".").unwrap();
        assert_eq!(o.agent_sandbox.version(), "v0.5.0");
        let o = args(&["--chart-version", "0.1.6"])
            .resolve(Provider::Kind, "r1", ".")
            .unwrap();
        assert_eq!(o.agent_sandbox.version(), "v1.0.9");
        assert!(o.agent_sandbox.manifest().ends_with("/v1.0.9/sandbox.yaml"));
        let o = args(&["--agent-sandbox-version", "v0.5.1"])
            .resolve(Provider::Kind, "r1", ".")
            .unwrap();
        assert!(
            o.agent_sandbox
                .manifest()
                .ends_with("/v0.5.1/manifest.yaml")
        );
        let err = args(&["--agent-sandbox-version", "main"])
            .resolve(Provider::Kind, "r1", ".")
            .unwrap_err();
        assert!(err.to_string().contains("not a release"), "{err}");
        let err = args(&["--agent-sandbox-manifest", "/nonexistent/sandbox.yaml"])
            .resolve(Provider::Kind, "r1", ".")
            .unwrap_err();
        assert_eq!(
            err.exit_status(),
            conformance_core::error::ExitStatus::Usage
        );
        assert!(err.to_string().contains("no such file"), "{err}");
    }

    #[test]
    fn a_relative_private_dir_is_made_absolute_before_the_run_starts() {
        let o = args(&["--private-dir", "relpriv", "--run-dir", "/elsewhere"])
            .resolve(Provider::Kind, "r1", ".")
            .unwrap();
        assert!(o.private_dir.is_absolute(), "{}", o.private_dir.display());
        assert_eq!(
            o.private_dir,
            std::env::current_dir().unwrap().join("relpriv")
        );
        assert_eq!(o.kubeconfig, Some(o.private_dir.join("kubeconfig")));
    }

    #[test]
    fn a_private_dir_inside_the_artifacts_is_refused_however_either_is_spelled_made_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let cwd = std::env::current_dir().unwrap();
        let rel = |p: &str| cwd.join(p).display().to_string();
        for (run_dir, private) in [
            // Relative artifacts, absolute private directory, neither made yet.
            ("art2".to_string(), rel("art2/priv")),
            (rel("art2"), "art2/priv".to_string()),
            ("art2/.".to_string(), "./art2/x/../priv".to_string()),
            // One directory through a symbolic link and by its own name.
            (
                dir.path().join("link").display().to_string(),
                real.join("priv").display().to_string(),
            ),
            (
                real.display().to_string(),
                dir.path().join("link/new/priv").display().to_string(),
            ),
        ] {
            let err = args(&["--run-dir", &run_dir, "--private-dir", &private])
                .resolve(Provider::Kind, "r1", ".")
                .unwrap_err();
            assert_eq!(
                err.exit_status(),
                conformance_core::error::ExitStatus::Usage,
                "{run_dir} {private}"
            );
            assert!(
                err.to_string()
                    .contains("credentials must stay out of the artifacts"),
                "{err}"
            );
        }
        assert!(
            args(&["--run-dir", "art2", "--private-dir", "art2-private"])
                .resolve(Provider::Kind, "r1", ".")
                .is_ok(),
            "a sibling whose name starts alike is outside"
        );
    }

    #[test]
    fn every_file_and_directory_a_flag_names_is_checked_and_refused_naming_the_flag_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let chart = d.join("chart");
        std::fs::create_dir(&chart).unwrap();
        std::fs::write(chart.join("Chart.yaml"), "version: [unclosed\n").unwrap();
        let bad_version = d.join("chart2");
        std::fs::create_dir(&bad_version).unwrap();
        std::fs::write(
            bad_version.join("Chart.yaml"),
            "name: openshell\nversion: soon\n",
        )
        .unwrap();
        std::fs::write(d.join("bad.yaml"), "a: [unclosed\n").unwrap();
        std::fs::write(d.join("list.yaml"), "- a\n- b\n").unwrap();
        std::fs::write(d.join("binary.yaml"), [0xff, 0xfe, 0x00, 0x9c]).unwrap();
        std::fs::write(d.join("openshell"), "#!/bin/sh\n").unwrap();
        std::fs::write(d.join("empty.yaml"), "").unwrap();
        std::fs::write(
            d.join("other.yaml"),
            "kind: ConfigMap\nmetadata:\n  name: x\n",
        )
        .unwrap();
        let p = |n: &str| d.join(n).display().to_string();
        let cases: Vec<(Vec<String>, String)> = vec![
            // Issue 44 item 6: applied, then exit 3 after the earlier run's files were removed.
            (
                vec!["--agent-sandbox-manifest".into(), p("empty.yaml")],
                format!(
                    "--agent-sandbox-manifest {}: it does not define the CustomResourceDefinition sandboxes.agents.x-k8s.io",
                    p("empty.yaml")
                ),
            ),
            (
                vec!["--agent-sandbox-manifest".into(), p("other.yaml")],
                format!(
                    "--agent-sandbox-manifest {}: it does not define the CustomResourceDefinition",
                    p("other.yaml")
                ),
            ),
            (
                vec!["--chart-path".into(), p("chart")],
                format!("--chart-path {}", p("chart")),
            ),
            (
                vec!["--chart-path".into(), p("chart2")],
                format!("--chart-path {}", p("chart2")),
            ),
            (
                vec!["--agent-sandbox-manifest".into(), p("bad.yaml")],
                format!("--agent-sandbox-manifest {}: not YAML", p("bad.yaml")),
            ),
            (
                vec!["--agent-sandbox-manifest".into(), p("binary.yaml")],
                format!(
                    "--agent-sandbox-manifest {}: not a text file",
                    p("binary.yaml")
                ),
            ),
            (
                vec!["--values".into(), p("missing.yaml")],
                format!("--values {}: cannot read it", p("missing.yaml")),
            ),
            (
                vec!["--values".into(), p("bad.yaml")],
                format!("--values {}: not YAML", p("bad.yaml")),
            ),
            (
                vec!["--values".into(), p("list.yaml")],
                format!(
                    "--values {}: a YAML document that is not a mapping",
                    p("list.yaml")
                ),
            ),
            (
                vec!["--openshell-bin".into(), p("openshell")],
                format!("--openshell-bin {}: not an executable file", p("openshell")),
            ),
            (
                vec!["--openshell-bin".into(), p("chart")],
                format!("--openshell-bin {}: not an executable file", p("chart")),
            ),
            (
                vec!["--private-dir".into(), "/proc/priv".into()],
                "--private-dir /proc/priv: the run cannot make its directory there".into(),
            ),
            (
                vec!["--private-dir".into(), p("openshell/priv")],
                format!("--private-dir {}: the run cannot make", p("openshell/priv")),
            ),
        ];
        for (flags, says) in cases {
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let err = args(&flags).check_paths().unwrap_err();
            assert_eq!(
                err.exit_status(),
                conformance_core::error::ExitStatus::Usage,
                "{flags:?}"
            );
            assert!(err.to_string().contains(&says), "{flags:?}: {err}");
        }
        std::fs::write(d.join("values.yaml"), "# only a comment\n").unwrap();
        std::fs::write(
            d.join("manifest.yaml"),
            "kind: Namespace\n---\nkind: CustomResourceDefinition\nmetadata:\n  name: sandboxes.agents.x-k8s.io\n",
        )
        .unwrap();
        let private = d.join("new/private");
        args(&[
            "--values",
            &p("values.yaml"),
            "--agent-sandbox-manifest",
            &p("manifest.yaml"),
            "--private-dir",
            private.to_str().unwrap(),
        ])
        .check_paths()
        .unwrap();
        assert!(!d.join("new").exists(), "the probe left the directory");
    }

    #[test]
    fn a_kind_target_with_a_context_of_another_cluster_is_refused() {
        let err = args(&["--context", "prod-east"])
            .resolve(Provider::Kind, "r1", ".")
            .unwrap_err();
        assert!(err.to_string().contains("--target existing"), "{err}");
    }
}
