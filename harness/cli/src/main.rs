//! The openshell-conformance command line; everything lives in `openshell_conformance::cli`.

use std::io::IsTerminal;

use clap::{CommandFactory, FromArgMatches};
use conformance_core::error::Error;
use openshell_conformance::cli::{Cli, LogFormat, log_colour, run};

// The emulated target's cases allocate and free JSON trees all the time; glibc's allocator
// spent about a third of the proof's CPU on that (docs/dependencies.md D12).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // clap exits with status 2 on bad flags and values, after saying what is wrong. The matches
    // are kept: they tell which flags were typed, not defaulted or taken from the environment.
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // As early as it can be: a run started with SIGINT ignored still stops on it.
    #[cfg(unix)]
    if matches!(cli.command, openshell_conformance::cli::Command::Run(_)) {
        openshell_conformance::early_signals::install();
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(log_colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ));
    match cli.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    // Before any thread starts: at a scale above 1 this re-executes the process onto the clock.
    if let Err(e) = scale_of(&cli).and_then(openshell_conformance::clock::enter) {
        openshell_conformance::tell!("{}", conformance_core::error::report(&e));
        return std::process::ExitCode::from(e.exit_status().code());
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let e = Error::infra_from("cannot start the async runtime", e);
            openshell_conformance::tell!("{}", conformance_core::error::report(&e));
            return std::process::ExitCode::from(e.exit_status().code());
        }
    };
    let status = rt.block_on(run(cli, &matches));
    drop(rt);
    openshell_conformance::clock::leave();
    std::process::ExitCode::from(status.code())
}

/// The scale a command line asks for: `--time-scale` of `run --target served` and `emulate
/// serve`. Another target takes only 1: a real cluster's clock is not the harness's to scale.
fn scale_of(cli: &Cli) -> Result<u32, Error> {
    use openshell_conformance::cli::{Command, EmulateCommand, TargetKind};
    match &cli.command {
        Command::Run(args) if args.time_scale > 1 && args.target != TargetKind::Served => {
            Err(Error::usage(format!(
                "--time-scale {} needs --target served: only a cluster the run serves itself runs on the harness's clock",
                args.time_scale
            )))
        }
        Command::Run(args) => Ok(args.time_scale),
        Command::Emulate {
            command: EmulateCommand::Serve(args),
        } => Ok(args.time_scale),
        _ => Ok(1),
    }
}
