//! The `openshell-conformance` command line. Flags also come from `OPENSHELL_CONFORMANCE_*`
//! environment variables, so the Makefile and CI pass settings the usual way. Exit codes: 0 all
//! passed or failed as expected, 1 product failures, 2 usage or configuration errors, 3
//! infrastructure errors. One kind of mistake has one code in every command: a path the user
//! named that cannot be read or written (a report, a journal, a kubeconfig's directory) is 2.

mod applies;
mod args;
mod check;
mod compare;
mod earlier;
mod files;
mod leftovers;
mod list;
mod progress;
mod run;
mod served;
mod summary;

use conformance_core::error::{Error, ExitStatus};

pub use args::{
    CheckArgs, Cli, ClusterCommand, Command, CompareArgs, CompareFormat, EmulateCommand, Format,
    ListArgs, ListWhat, LogFormat, ProviderArgs, ReportArgs, RestoreArgs, RunArgs, TargetKind,
};
pub use compare::render_markdown as render_comparison_markdown;
use files::{load_timeline, write_file};

/// Whether log lines on stderr carry ANSI colours: only when stderr is a terminal, and never
/// when `NO_COLOR` is set to a non-empty value (no-color.org), so piped logs stay plain text.
pub fn log_colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Runs a parsed command line (`matches`, what clap parsed it from, tells which flags the user
/// typed); returns the process exit status.
pub async fn run(cli: Cli, matches: &clap::ArgMatches) -> ExitStatus {
    let result = match cli.command {
        Command::Run(args) => match refuse_foreign_run_flags(matches, args.target) {
            Ok(()) => run::run(*args).await,
            Err(e) => Err(e),
        },
        Command::List(args) => list::list(&args),
        Command::Check(args) => check::check(&args),
        Command::Report(args) => report(&args),
        Command::Compare(args) => compare::compare(&args),
        Command::Doctor(args) => run::doctor(*args).await,
        Command::Cluster { command } => match command {
            ClusterCommand::Up(args) => run::cluster(*args, true).await,
            ClusterCommand::Down(args) => run::cluster(*args, false).await,
        },
        Command::Emulate {
            command: EmulateCommand::Serve(args),
        } => {
            leftovers::sweep_temp_dir();
            crate::serve::run(args).await
        }
        .map(|()| ExitStatus::Success)
        .map_err(Error::from),
        Command::Restore(args) => run::restore(&args).await,
    };
    match result {
        Ok(status) => status,
        Err(e) => {
            tell!("{}", conformance_core::error::report(&e));
            e.exit_status()
        }
    }
}

/// Refuses a flag of `run` the user typed that does not apply to `target` (see [`applies`]).
fn refuse_foreign_run_flags(matches: &clap::ArgMatches, target: TargetKind) -> Result<(), Error> {
    let command = <Cli as clap::CommandFactory>::command();
    match (matches.subcommand(), command.find_subcommand("run")) {
        (Some(("run", typed)), Some(run_command)) => {
            applies::refuse_foreign_flags(run_command, typed, target)
        }
        _ => Ok(()),
    }
}

/// `report`: renders saved timelines as HTML.
fn report(args: &ReportArgs) -> Result<ExitStatus, Error> {
    let inputs: Vec<(&str, &std::path::Path)> = args
        .timelines
        .iter()
        .map(|t| ("a timeline", t.as_path()))
        .collect();
    files::refuse_unsafe_outputs(&[("--html", args.html.as_path())], &inputs)?;
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
    say!("wrote {}", args.html.display());
    Ok(ExitStatus::Success)
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
