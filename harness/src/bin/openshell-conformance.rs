//! The openshell-conformance command line.

use clap::{Parser, Subcommand};
use openshell_conformance::emulate::serve::{ServeArgs, run};

#[derive(Debug, Parser)]
#[command(
    name = "openshell-conformance",
    version,
    about = "Conformance and chaos harness for NVIDIA OpenShell on Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The embedded emulated Kubernetes cluster.
    Emulate {
        #[command(subcommand)]
        command: EmulateCommand,
    },
}

#[derive(Debug, Subcommand)]
enum EmulateCommand {
    /// Serve the emulated cluster over TCP (real time) and write a kubeconfig for kubectl.
    Serve(ServeArgs),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Emulate {
                command: EmulateCommand::Serve(args),
            } => run(args).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
