//! Flags of `run` that mean something on some targets only. One given on the command line for a
//! target it does not apply to is refused (exit 2) before anything starts, naming the flag and
//! where it applies: silently ignored, `run --context prod --kubeconfig /nonexistent` on the
//! emulated target looked like a run against that cluster. The same setting from an
//! `OPENSHELL_CONFORMANCE_*` variable is not refused here (a CI job's environment serves several
//! commands and targets); the settings that would change what a target runs are refused from
//! either source where the target is chosen (`run.rs`, `served.rs`).

use clap::ArgMatches;
use clap::parser::ValueSource;

use super::args::TargetKind::{self, Emulated, Existing, K3d, Kind, Served};
use conformance_core::error::Error;

const REAL: &[TargetKind] = &[Kind, K3d, Existing, Served];
const CLUSTERS: &[TargetKind] = &[Kind, K3d, Existing];
const LOCAL_CLUSTERS: &[TargetKind] = &[Kind, K3d];

/// The targets the flag with clap id `id` applies to; `None` for a flag that applies to all.
fn targets_of(id: &str) -> Option<&'static [TargetKind]> {
    Some(match id {
        "model" | "defects" => &[Emulated, Served],
        "agent_sandbox" => &[Emulated],
        "openshell_binaries" => &[Served],
        // The served target writes its own kubeconfig and allows its own context; its cluster
        // ends with the run (nothing to keep) and starts empty (no leftovers to sweep).
        "kubeconfig" | "context" | "allow_context" | "keep" | "sweep_leftovers" => CLUSTERS,
        "cluster_name" | "load_images" => LOCAL_CLUSTERS,
        "chart"
        | "chart_version"
        | "chart_path"
        | "values"
        | "set"
        | "image_repository"
        | "image_tag"
        | "supervisor_image_repository"
        | "supervisor_image_tag"
        | "agent_sandbox_version"
        | "agent_sandbox_manifest"
        | "openshell_bin"
        | "diagnostics"
        | "run_dir"
        | "private_dir"
        | "keep_private_dir" => REAL,
        _ => return None,
    })
}

/// What to use instead, where the target has a flag of its own for the same thing.
fn instead(id: &str, target: TargetKind) -> Option<&'static str> {
    match (id, target) {
        ("agent_sandbox_version" | "agent_sandbox_manifest", Emulated) => Some(
            "on the emulated target the Agent Sandbox release is --agent-sandbox (e.g. --agent-sandbox v0.5.0)",
        ),
        ("kubeconfig" | "context" | "allow_context", Served) => Some(
            "the served target starts its own cluster and writes its kubeconfig (use --target existing for a cluster you serve yourself)",
        ),
        _ => None,
    }
}

fn name(t: TargetKind) -> &'static str {
    match t {
        Emulated => "emulated",
        Kind => "kind",
        K3d => "k3d",
        Existing => "existing",
        Served => "served",
    }
}

/// Refuses the first flag of `run` (its matches `run`) given on the command line that does
/// not apply to `target`.
pub(super) fn refuse_foreign_flags(
    command: &clap::Command,
    run: &ArgMatches,
    target: TargetKind,
) -> Result<(), Error> {
    for id in run.ids() {
        let id = id.as_str();
        if run.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        let Some(targets) = targets_of(id) else {
            continue;
        };
        if targets.contains(&target) {
            continue;
        }
        let flag = command
            .get_arguments()
            .find(|a| a.get_id() == id)
            .and_then(|a| a.get_long())
            .unwrap_or(id);
        let applies: Vec<&str> = targets.iter().map(|t| name(*t)).collect();
        return Err(Error::usage(format!(
            "--{flag} does not apply to --target {}: it is for --target {}{}",
            name(target),
            applies.join("|"),
            instead(id, target)
                .map(|i| format!("; {i}"))
                .unwrap_or_default()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    fn refusal(argv: &[&str]) -> Option<String> {
        let cli = super::super::args::Cli::command();
        let m = cli
            .clone()
            .try_get_matches_from(
                std::iter::once("openshell-conformance").chain(argv.iter().copied()),
            )
            .unwrap();
        let parsed = super::super::args::Cli::from_arg_matches(&m).unwrap();
        let super::super::args::Command::Run(args) = parsed.command else {
            panic!("not run")
        };
        let (_, run) = m.subcommand().unwrap();
        let run_cmd = cli.find_subcommand("run").unwrap();
        refuse_foreign_flags(run_cmd, run, args.target)
            .err()
            .map(|e| e.to_string())
    }

    #[test]
    fn a_flag_for_another_target_is_refused_naming_it_and_where_it_applies() {
        let why = refusal(&["run", "--context", "prod"]).unwrap();
        assert!(
            why.contains("--context does not apply to --target emulated: it is for --target kind|k3d|existing"),
            "{why}"
        );
        let why = refusal(&["run", "--target", "served", "--keep"]).unwrap();
        assert!(
            why.contains("--keep does not apply to --target served"),
            "{why}"
        );
        let why = refusal(&["run", "--target", "kind", "--model", "contract"]).unwrap();
        assert!(
            why.contains("--model does not apply to --target kind"),
            "{why}"
        );
        let why = refusal(&["run", "--target", "served", "--cluster-name", "x"]).unwrap();
        assert!(why.contains("--cluster-name does not apply"), "{why}");
    }

    #[test]
    fn flags_of_the_chosen_target_and_flags_of_every_target_pass() {
        assert_eq!(
            refusal(&["run", "--model", "contract", "--defect", "x", "--seed", "3"]),
            None
        );
        assert_eq!(
            refusal(&[
                "run",
                "--target",
                "existing",
                "--context",
                "c",
                "--keep",
                "--values",
                "v"
            ]),
            None
        );
        assert_eq!(
            refusal(&[
                "run",
                "--target",
                "served",
                "--openshell-binaries",
                "d",
                "--chart-path",
                "c"
            ]),
            None
        );
    }

    #[test]
    fn every_flag_of_run_is_either_for_every_target_or_in_the_table() {
        // A new flag is for every target unless listed; this names the ones that are, so a
        // flag that should be listed is a decision, not an accident.
        let cli = super::super::args::Cli::command();
        let run = cli.find_subcommand("run").unwrap();
        let everywhere: Vec<&str> = run
            .get_arguments()
            .map(|a| a.get_id().as_str())
            .filter(|id| targets_of(id).is_none())
            .collect();
        for id in &everywhere {
            assert!(
                [
                    "target",
                    "topologies",
                    "scenarios",
                    "outage",
                    "seed",
                    "jobs",
                    "junit",
                    "html",
                    "artifacts",
                    "expectations",
                    "keep_on_failure",
                    "dry_run",
                    "help",
                    "time_scale",
                ]
                .contains(id),
                "--{id} applies to every target? list it in targets_of if not"
            );
        }
    }
}
