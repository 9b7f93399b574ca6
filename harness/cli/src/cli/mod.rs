//! The `openshell-conformance` command line. Flags also come from `OPENSHELL_CONFORMANCE_*`
//! environment variables, so the Makefile and CI pass settings the usual way. Exit codes: 0 all
//! passed or failed as expected, 1 product failures, 2 usage or configuration errors, 3
//! infrastructure errors. One kind of mistake has one code in every command: a path the user
//! named that cannot be read or written (a report, a journal, a kubeconfig's directory) is 2.

mod check;
mod list;
mod progress;
mod run;
mod served;
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

/// Whether log lines on stderr carry ANSI colours: only when stderr is a terminal, and never
/// when `NO_COLOR` is set to a non-empty value (no-color.org), so piped logs stay plain text.
pub fn log_colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
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
            // A kubeconfig path that cannot be written is the user's path: 2, as everywhere.
            Server::Kubeconfig(path, io) => {
                Error::usage_from(format!("cannot write kubeconfig {}", path.display()), io)
            }
            Server::Serve(io) => Error::infra_from("server failed", io),
        },
        crate::serve::ServeError::Host(h) => Error::infra(h.to_string()),
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
    let title = crate::report::title_of(&timelines.iter().collect::<Vec<_>>());
    let html = crate::report::render(&title, &views);
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

#[cfg(test)]
mod tests {
    use super::log_colour;
    use std::ffi::OsStr;

    #[test]
    fn logs_are_coloured_only_on_a_terminal_and_never_with_no_color() {
        assert!(log_colour(true, None));
        assert!(!log_colour(false, None), "a pipe gets plain text");
        assert!(!log_colour(true, Some(OsStr::new("1"))), "NO_COLOR wins");
        assert!(
            log_colour(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset (no-color.org)"
        );
    }
}
