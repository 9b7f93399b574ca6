//! The `openshell-conformance` command line. Flags also come from `OPENSHELL_CONFORMANCE_*`
//! environment variables, so the Makefile and CI pass settings the usual way. Exit codes: 0 all
//! passed or failed as expected, 1 product failures, 2 usage or configuration errors, 3
//! infrastructure errors.

mod check;
mod list;
mod progress;
mod run;
mod summary;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use conformance_core::error::{Error, ExitStatus};

pub use run::RunArgs;

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

/// Runs a parsed command line; returns the process exit status.
pub async fn run(cli: Cli) -> ExitStatus {
    let result = match cli.command {
        Command::Run(args) => run::run(*args).await,
        Command::List(args) => list::list(&args),
        Command::Check(args) => check::check(&args),
        Command::Report(args) => report(&args),
        Command::Doctor(args) => run::doctor(*args).await,
        Command::Cluster { command } => match command {
            ClusterCommand::Up(args) => run::cluster(*args, true).await,
            ClusterCommand::Down(args) => run::cluster(*args, false).await,
        },
        Command::Emulate {
            command: EmulateCommand::Serve(args),
        } => crate::serve::run(args)
            .await
            .map(|()| ExitStatus::Success)
            .map_err(serve_error),
        Command::Restore(args) => run::restore(&args).await,
    };
    match result {
        Ok(status) => status,
        Err(e) => {
            eprintln!("{}", conformance_core::error::report(&e));
            e.exit_status()
        }
    }
}

/// `emulate serve` failures: a non-loopback address is a usage error, the rest are
/// infrastructure errors that keep their I/O cause.
fn serve_error(e: crate::serve::ServeError) -> Error {
    use kube_emulator::serve::ServeError as Server;
    match e {
        crate::serve::ServeError::Usage(m) => Error::usage(m),
        crate::serve::ServeError::Server(s) => match s {
            Server::NotLoopback(_) => Error::usage(s.to_string()),
            Server::Bind(addr, io) => Error::infra_from(format!("cannot listen on {addr}"), io),
            Server::Kubeconfig(path, io) => {
                Error::infra_from(format!("cannot write kubeconfig {}", path.display()), io)
            }
            Server::Serve(io) => Error::infra_from("server failed", io),
        },
    }
}

fn load_timeline(path: &std::path::Path) -> Result<conformance_core::timeline::Timeline, Error> {
    let file = std::fs::File::open(path)
        .map_err(|e| Error::usage_from(format!("cannot open timeline {}", path.display()), e))?;
    conformance_core::timeline::Timeline::read_jsonl(std::io::BufReader::new(file))
        .map_err(|e| Error::usage_from(format!("cannot read timeline {}", path.display()), e))
}

/// `report`: renders saved timelines as HTML.
fn report(args: &ReportArgs) -> Result<ExitStatus, Error> {
    let timelines = args
        .timelines
        .iter()
        .map(|p| {
            let t = load_timeline(p)?;
            // The report shows what `check` can judge, and refuses the rest the same way.
            match check::unjudgeable(&t) {
                Some(why) => Err(Error::usage(format!(
                    "{} cannot be reported: {why}",
                    p.display()
                ))),
                None => Ok(t),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let views: Vec<crate::report::CaseView<'_>> = timelines
        .iter()
        .map(|t| crate::report::CaseView {
            timeline: t,
            links: Vec::new(),
        })
        .collect();
    let html = crate::report::render("openshell-conformance report", &views);
    write_file(&args.html, &html)?;
    println!("wrote {}", args.html.display());
    Ok(ExitStatus::Success)
}

pub(crate) fn write_file(path: &std::path::Path, content: &str) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::usage_from(format!("cannot create {}", dir.display()), e))?;
    }
    std::fs::write(path, content)
        .map_err(|e| Error::usage_from(format!("cannot write {}", path.display()), e))
}
