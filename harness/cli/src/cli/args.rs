//! The command line's words: every command and flag (flags also come from
//! `OPENSHELL_CONFORMANCE_*` variables), and the real path's options they resolve to. Parsing
//! only: what a command does is in its own module.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use conformance_core::error::Error;
use conformance_real::options::{
    Provider, RealArgs, RealOptions, env_bool, new_run_id, refuse_inside,
};

#[derive(Debug, Parser)]
#[command(
    name = "openshell-conformance",
    version,
    about = "Conformance and chaos harness for NVIDIA OpenShell on Kubernetes",
    long_about = "Conformance and chaos harness for NVIDIA OpenShell on Kubernetes.\n\n\
        `openshell-conformance run` with no arguments runs the whole catalog on the embedded \
        emulated target (model `contract`) in virtual time and prints a summary.\n\n\
        Exit codes: 0 all passed or failed as expected, 1 product failures, 2 usage or \
        configuration errors, 3 infrastructure errors."
)]
pub struct Cli {
    /// Log format on stderr (`RUST_LOG` sets the level).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "OPENSHELL_CONFORMANCE_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// `compare`'s output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompareFormat {
    Table,
    Json,
    /// A Markdown table, a row per case.
    Markdown,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the conformance catalog against a target.
    Run(Box<RunArgs>),
    /// List scenarios, requirements, topologies, models and defects.
    List(ListArgs),
    /// Re-run the checks of saved timelines, offline.
    Check(CheckArgs),
    /// Render saved timelines as an HTML report.
    Report(ReportArgs),
    /// Compare two runs case by case and check by check.
    Compare(CompareArgs),
    /// Check the tools, the cluster and the permissions a real run needs.
    Doctor(Box<ProviderArgs>),
    /// Create or delete the kind or k3d cluster.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// The embedded emulated Kubernetes cluster.
    Emulate {
        #[command(subcommand)]
        command: EmulateCommand,
    },
    /// Undo faults a killed run left behind, from its restore journal.
    Restore(RestoreArgs),
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Create (or reuse) the cluster.
    Up(Box<ProviderArgs>),
    /// Delete the cluster.
    Down(Box<ProviderArgs>),
}

/// A real-cluster provider and its options.
#[derive(Debug, Args)]
pub struct ProviderArgs {
    #[arg(
        long,
        value_enum,
        default_value = "kind",
        env = "OPENSHELL_CONFORMANCE_PROVIDER"
    )]
    pub provider: conformance_real::options::Provider,
    #[command(flatten)]
    pub real: conformance_real::options::RealArgs,
}

#[derive(Debug, Subcommand)]
pub enum EmulateCommand {
    /// Serve the emulated cluster over TCP (real time) and write a kubeconfig for kubectl.
    Serve(crate::serve::ServeArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// What to list (default: everything).
    #[arg(value_enum)]
    pub what: Option<ListWhat>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ListWhat {
    Scenarios,
    Requirements,
    Topologies,
    Models,
    Defects,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Timeline files (JSON lines) written by `run --artifacts DIR`.
    #[arg(required = true)]
    pub timelines: Vec<PathBuf>,
    /// Judge the cases against this expectations file instead of the known failures each
    /// timeline recorded (those of the run that wrote it).
    #[arg(long, value_name = "FILE")]
    pub expectations: Option<PathBuf>,
    /// `table`: a block of text per file; `json`: one JSON object per file, for tools.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Side A: a run's artifacts directory (its `timelines/`), a directory of timelines, or
    /// one timeline file.
    pub a: PathBuf,
    /// Side B, as side A.
    pub b: PathBuf,
    /// The differences that are understood (YAML: `known_differences:`, each with `case`,
    /// optional `check`, `reason` and `fact`).
    #[arg(long, value_name = "FILE")]
    pub known_differences: Option<PathBuf>,
    /// `table`: a block of text per case; `json`: one JSON object, for tools; `markdown`: a
    /// table with a row per case.
    #[arg(long, value_enum, default_value = "table")]
    pub format: CompareFormat,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Timeline files (JSON lines) written by `run --artifacts DIR`.
    #[arg(required = true)]
    pub timelines: Vec<PathBuf>,
    /// Where to write the HTML report.
    #[arg(long)]
    pub html: PathBuf,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The restore journal (`<artifacts>/restore-journal.json` of the killed run).
    #[arg(long, env = "OPENSHELL_CONFORMANCE_JOURNAL")]
    pub journal: PathBuf,
    /// Allow restoring into this context although it is not named `kind-*` or `k3d-*`.
    #[arg(long = "allow-context", value_name = "NAME")]
    pub allow_context: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TargetKind {
    /// The embedded emulated cluster with a reference model (no Docker, no cluster).
    Emulated,
    Kind,
    K3d,
    /// A disposable cluster you already have (`--context`).
    Existing,
    /// The real path (helm, kubectl, the chart, the manifest, the `openshell` CLI) against an
    /// emulated cluster this run serves on a loopback port, its images running `--model`.
    Served,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Where to run.
    #[arg(
        long,
        value_enum,
        default_value = "emulated",
        env = "OPENSHELL_CONFORMANCE_TARGET"
    )]
    pub target: TargetKind,
    /// Emulated and served targets: the model (`list models`; served default openshell-0.0.111).
    #[arg(long, env = "OPENSHELL_CONFORMANCE_MODEL")]
    pub model: Option<String>,
    /// Emulated and served targets: a defect switch on the contract model (`list defects`);
    /// repeatable.
    #[arg(
        long = "defect",
        value_name = "NAME",
        env = "OPENSHELL_CONFORMANCE_DEFECTS",
        value_delimiter = ','
    )]
    pub defects: Vec<String>,
    /// Emulated target only, model openshell-0.0.111: the Agent Sandbox release to model,
    /// v0.5.0, v0.5.1 or v0.5.4 (default; `v0.5.1+` is an old spelling of it).
    #[arg(
        long,
        value_name = "VERSION",
        env = "OPENSHELL_CONFORMANCE_EMULATED_AGENT_SANDBOX"
    )]
    pub agent_sandbox: Option<String>,
    /// Served target: run the OpenShell gateway and supervisor images as the real binaries in
    /// this directory (`openshell-gateway`, `openshell-sandbox` of one release), each container
    /// a process in its own namespaces, instead of `--model`'s; the model's expected failures
    /// stay the expectations the verdicts are put next to. Needs root and iproute2's `ip`.
    #[arg(
        long,
        value_name = "DIR",
        env = "OPENSHELL_CONFORMANCE_OPENSHELL_BINARIES"
    )]
    pub openshell_binaries: Option<PathBuf>,
    /// Topology to run on; repeatable (default: every topology the target supports).
    #[arg(
        long = "topology",
        value_name = "NAME",
        env = "OPENSHELL_CONFORMANCE_TOPOLOGY",
        value_delimiter = ','
    )]
    pub topologies: Vec<String>,
    /// Scenario or case id glob (`*` matches anything); repeatable (default: all). No value
    /// delimiter: case ids contain commas (`gateway-outage[sidecar,outage=30s]`).
    #[arg(
        long = "scenario",
        value_name = "PATTERN",
        env = "OPENSHELL_CONFORMANCE_SCENARIO"
    )]
    pub scenarios: Vec<String>,
    /// Replace every scenario's outage length (humantime: 30s, 2m30s, 5m; 1s to 7d).
    #[arg(long, value_parser = parse_duration, env = "OPENSHELL_CONFORMANCE_OUTAGE")]
    pub outage: Option<Duration>,
    /// Seed of the fault sweep's schedule.
    #[arg(long, env = "OPENSHELL_CONFORMANCE_SEED")]
    pub seed: Option<u64>,
    /// Cases run at once (default: emulated, the machine's available parallelism, since its
    /// cases share nothing; served 4, each case on a served cluster of its own, longest first
    /// (measured on 2 cores: 4 at once keep every verdict); kind, k3d and existing 1, the only
    /// value they take: the cases of a topology share one release and each checks the gateway it
    /// leaves).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64), env = "OPENSHELL_CONFORMANCE_JOBS")]
    pub jobs: Option<u16>,
    /// JUnit report path (default: <artifacts>/junit.xml).
    #[arg(long, env = "OPENSHELL_CONFORMANCE_JUNIT")]
    pub junit: Option<PathBuf>,
    /// HTML timeline report path (default: <artifacts>/report.html).
    #[arg(long, env = "OPENSHELL_CONFORMANCE_HTML")]
    pub html: Option<PathBuf>,
    /// Directory for timelines, reports, diagnostics and the restore journal.
    #[arg(
        long,
        default_value = "artifacts",
        env = "OPENSHELL_CONFORMANCE_ARTIFACTS"
    )]
    pub artifacts: PathBuf,
    /// Known failures (default: the shipped file for the model or OpenShell version, if any).
    #[arg(long, env = "OPENSHELL_CONFORMANCE_EXPECTATIONS")]
    pub expectations: Option<PathBuf>,
    /// Leave the sandboxes of failed cases in place for inspection.
    #[arg(
        long,
        env = "OPENSHELL_CONFORMANCE_KEEP_ON_FAILURE",
        value_parser = env_bool("OPENSHELL_CONFORMANCE_KEEP_ON_FAILURE")
    )]
    pub keep_on_failure: bool,
    /// Print what would run (real targets: the full command plan and manifests) and stop.
    #[arg(long)]
    pub dry_run: bool,
    /// Served target: run the harness, the served cluster, the `openshell` CLI and every
    /// process the node starts on one clock N times as fast as the real one (1 to 1000; 1 is
    /// real time). Needs Debian's libfaketime above 1.
    #[arg(long, value_name = "N", default_value = "1", value_parser = crate::clock::parse_scale, env = "OPENSHELL_CONFORMANCE_TIME_SCALE")]
    pub time_scale: u32,
    #[command(flatten)]
    pub real: RealArgs,
}

impl RunArgs {
    /// Cases run at once: `--jobs`, or by default on the emulated target the machine's
    /// available parallelism (each case has its own cluster and runtime), on the served target
    /// [`SERVED_JOBS`], on real ones 1.
    pub fn jobs(&self) -> usize {
        match (self.jobs, self.provider()) {
            (Some(n), _) => usize::from(n),
            (None, None) => std::thread::available_parallelism().map_or(1, |n| n.get().min(64)),
            (None, Some(_)) if self.target == TargetKind::Served => SERVED_JOBS,
            (None, Some(_)) => 1,
        }
    }
}

/// Served cases run at once by default. They wait in real time most of the while (a case
/// uses a few percent of a core), so the count is what keeps every verdict on a 2-core machine,
/// measured (docs/performance.md), not the cores.
pub(crate) const SERVED_JOBS: usize = 4;

/// The shortest outage `--outage` takes; anything shorter (0 and 1ns alike) is refused with
/// the same message, since the fault could not be seen to start and end.
const MIN_OUTAGE: Duration = Duration::from_secs(1);

/// The longest outage `--outage` takes. The emulated target pays about 0.8 s of wall clock per
/// virtual day of outage, so an unbounded one (`10000y`) never ends; a week is longer than any
/// outage worth testing and keeps an emulated case within seconds.
pub(crate) const MAX_OUTAGE: Duration = Duration::from_secs(7 * 24 * 3600);

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("'{s}' is not a duration ({e}); write it like 30s, 2m30s or 5m"))?;
    if d < MIN_OUTAGE {
        return Err(format!(
            "'{s}' is shorter than the shortest outage; give at least {}",
            humantime::format_duration(MIN_OUTAGE)
        ));
    }
    if d > MAX_OUTAGE {
        return Err(format!(
            "'{s}' is longer than the longest outage; give at most {}d",
            MAX_OUTAGE.as_secs() / 86_400
        ));
    }
    Ok(d)
}

impl RunArgs {
    /// Where the JUnit goes: `--junit`, or `junit.xml` in the artifacts directory.
    pub(super) fn junit_path(&self) -> PathBuf {
        self.junit
            .clone()
            .unwrap_or_else(|| self.artifacts.join("junit.xml"))
    }

    /// Where the HTML report goes: `--html`, or `report.html` in the artifacts directory.
    pub(super) fn html_path(&self) -> PathBuf {
        self.html
            .clone()
            .unwrap_or_else(|| self.artifacts.join("report.html"))
    }

    pub(super) fn provider(&self) -> Option<Provider> {
        match self.target {
            TargetKind::Emulated => None,
            TargetKind::Kind => Some(Provider::Kind),
            TargetKind::K3d => Some(Provider::K3d),
            TargetKind::Existing | TargetKind::Served => Some(Provider::Existing),
        }
    }
}

/// The directory holding `kind-config.yaml`: the repository root when run from inside it.
fn repo_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    cwd.ancestors()
        .find(|d| d.join("kind-config.yaml").is_file())
        .map(Path::to_path_buf)
        .unwrap_or(cwd)
}

/// The real path's options from its flags; the run's files go to `artifacts` unless
/// `--run-dir` says otherwise.
pub(super) fn real_options(
    real: &RealArgs,
    provider: Provider,
    artifacts: &Path,
) -> Result<RealOptions, Error> {
    real.check_paths()?;
    let mut real = real.clone();
    if real.run_dir.is_none() {
        real.run_dir = Some(artifacts.to_path_buf());
    }
    let opts = real.resolve(provider, &new_run_id(), repo_root())?;
    // The run directory may be elsewhere (--run-dir); the artifacts are uploaded all the same.
    refuse_inside(&opts.private_dir, artifacts)?;
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::MAX_OUTAGE;
    use kube_emulator::shell;

    #[tokio::test(start_paused = true)]
    async fn the_sandbox_workload_outlasts_ten_times_the_longest_outage_the_command_line_takes() {
        let argv = conformance_catalog::catalog::workload_command();
        let mut mounts = shell::Mounts::new();
        mounts.mount("/sandbox", shell::Volume::new(), false);
        let hooks = shell::DefaultHooks::new(0);
        let env = Default::default();
        let run = shell::run(&argv, &[], &env, "/", &mounts, &hooks);
        let ended = tokio::time::timeout(MAX_OUTAGE * 10, run).await;
        assert!(
            ended.is_err(),
            "the workload ended on its own: {:?}",
            ended.map(|o| (o.exit_code, String::from_utf8_lossy(&o.stderr).into_owned()))
        );
    }
}
