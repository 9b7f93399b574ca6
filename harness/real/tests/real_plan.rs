//! Golden tests of `run --target kind|k3d|existing --dry-run`: the full command plan and the
//! files it would write, computed without touching anything. Regenerate after an intended change
//! with `UPDATE_GOLDEN=1 cargo nextest run -p openshell-conformance real_plan`.

use std::path::{Path, PathBuf};

use clap::Parser;
use conformance_core::error::ExitStatus;
use conformance_core::topology::Topologies;
use conformance_real::options::{Provider, RealArgs};
use conformance_real::plan::{Step, dry_run};
use rstest::rstest;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    real: RealArgs,
}

fn args(extra: &[&str]) -> RealArgs {
    let private: &[&str] = if extra.contains(&"--private-dir") {
        &[]
    } else {
        &["--private-dir", "/private"]
    };
    let base = ["x", "--run-dir", "/run-dir"];
    let base: Vec<&str> = base.iter().chain(private).copied().collect();
    Cli::try_parse_from(base.iter().chain(extra.iter()).copied())
        .unwrap()
        .real
}

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/golden")
        .join(name)
}

fn check_golden(name: &str, actual: &str) {
    let path = golden(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "the plan differs from {}; if intended, regenerate with UPDATE_GOLDEN=1",
        path.display()
    );
}

#[rstest]
#[case::kind(Provider::Kind, &[] as &[&str], "plan-kind.txt")]
#[case::k3d(Provider::K3d, &["--load-image", "local/gateway:dev", "--image-repository", "local/gateway", "--image-tag", "dev"], "plan-k3d.txt")]
#[case::existing(Provider::Existing, &["--context", "staging-scratch", "--allow-context", "staging-scratch", "--kubeconfig", "/home/me/.kube/config", "--sweep-leftovers", "--set", "server.disableTls=true", "--chart-version", "0.1.6"], "plan-existing.txt")]
fn the_dry_run_plan_matches_its_golden_file(
    #[case] provider: Provider,
    #[case] extra: &[&str],
    #[case] file: &str,
) {
    let opts = args(extra).resolve(provider, "golden", "/repo").unwrap();
    let topologies = Topologies::builtin();
    // kind: what `run --target kind --dry-run` plans without flags, every topology.
    let topos: Vec<_> = match provider {
        Provider::Kind => topologies.all().collect(),
        Provider::Existing => vec![
            topologies.get("combined").unwrap(),
            topologies.get("gateway").unwrap(),
        ],
        _ => vec![
            topologies.get("combined").unwrap(),
            topologies.get("sidecar").unwrap(),
        ],
    };
    let plan = dry_run(&opts, &topos).unwrap();
    check_golden(file, &plan.to_string());
}

#[test]
fn the_kind_plan_creates_from_the_built_in_config_with_the_pinned_image_and_installs_the_pinned_releases()
 {
    let opts = args(&[]).resolve(Provider::Kind, "r", "/repo").unwrap();
    let t = Topologies::builtin();
    let plan = dry_run(&opts, &[t.get("combined").unwrap()]).unwrap();
    let lines: Vec<String> = plan.commands().iter().map(|c| c.line()).collect();
    assert!(lines.iter().any(|l| l.starts_with("kind create cluster --name openshell-conformance --config /run-dir/kind-config.yaml --image kindest/node:v1.33.1@sha256:")), "{lines:#?}");
    assert!(lines.iter().any(|l| l.contains("https://github.com/kubernetes-sigs/agent-sandbox/releases/download/v0.5.0/manifest.yaml")), "{lines:#?}");
    assert!(lines.iter().any(|l| l.starts_with("helm upgrade --install openshell oci://ghcr.io/nvidia/openshell/helm-chart --version 0.0.111 --namespace openshell")), "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("helm uninstall openshell")),
        "{lines:#?}"
    );
    // Every CLI call runs from the run's private home, never the user's, and outside the
    // artifacts.
    let cli_calls: Vec<_> = plan
        .commands()
        .into_iter()
        .filter(|c| c.program == "openshell")
        .collect();
    assert!(!cli_calls.is_empty());
    for c in cli_calls {
        assert_eq!(c.env["HOME"], "/private/cli-combined", "{c}");
        for var in [
            "XDG_CONFIG_HOME",
            "XDG_STATE_HOME",
            "XDG_DATA_HOME",
            "XDG_CACHE_HOME",
            "OPENSHELL_LOCAL_TLS_DIR",
            "OPENSHELL_SYSTEM_GATEWAY_DIR",
        ] {
            assert!(
                c.env[var].starts_with("/private/cli-combined/"),
                "{var} in {c}"
            );
        }
        assert!(c.env_remove.contains("OPENSHELL_GATEWAY_ENDPOINT"), "{c}");
    }
    // kubectl and helm use the run's private kubeconfig, which is not in the artifacts.
    for c in plan
        .commands()
        .into_iter()
        .filter(|c| c.program == "kubectl" || c.program == "helm")
    {
        assert!(c.line().contains("--kubeconfig /private/kubeconfig"), "{c}");
    }
}

#[test]
fn a_private_directory_inside_the_artifacts_is_a_usage_error() {
    let err = args(&["--private-dir", "/run-dir/secrets"])
        .resolve(Provider::Kind, "r", "/repo")
        .unwrap_err();
    assert_eq!(err.exit_status(), ExitStatus::Usage);
    assert!(err.to_string().contains("out of the artifacts"), "{err}");
}

#[test]
fn topologies_the_default_chart_cannot_run_are_named_as_skipped_with_the_reason() {
    let opts = args(&[]).resolve(Provider::Kind, "r", "/repo").unwrap();
    let t = Topologies::builtin();
    let plan = dry_run(&opts, &t.all().collect::<Vec<_>>()).unwrap();
    let stages: Vec<&str> = plan.stages.iter().map(|s| s.name.as_str()).collect();
    assert!(
        stages.contains(&"openshell [combined]") && stages.contains(&"openshell [sidecar]"),
        "{stages:?}"
    );
    assert!(
        !stages
            .iter()
            .any(|s| s.contains("gateway]") || s.contains("supervisor-pod]")),
        "{stages:?}"
    );
    for name in ["gateway", "supervisor-pod"] {
        assert!(
            plan.header.iter().any(|h| h == &format!("skipped: topology {name} needs OpenShell 0.1.5 or newer; the chart installs 0.0.111")),
            "{:#?}",
            plan.header
        );
    }
}

#[test]
fn keep_replaces_the_uninstall_in_the_plan() {
    let opts = args(&["--keep"])
        .resolve(Provider::Kind, "r", "/repo")
        .unwrap();
    let t = Topologies::builtin();
    let plan = dry_run(&opts, &[t.get("combined").unwrap()]).unwrap();
    assert!(
        plan.commands()
            .iter()
            .all(|c| !c.line().contains("helm uninstall"))
    );
}

#[test]
fn a_dry_run_against_a_production_context_is_refused_with_no_plan() {
    let opts = args(&["--context", "prod-us-east-1"])
        .resolve(Provider::Existing, "r", "/repo")
        .unwrap();
    let t = Topologies::builtin();
    let err = dry_run(&opts, &[t.get("combined").unwrap()]).unwrap_err();
    assert_eq!(err.exit_status(), ExitStatus::Usage);
    assert!(
        err.to_string()
            .contains("refusing to touch context `prod-us-east-1`"),
        "{err}"
    );
}

#[test]
fn loading_images_into_an_existing_cluster_is_a_usage_error() {
    let opts = args(&["--context", "kind-x", "--load-image", "a:b"])
        .resolve(Provider::Existing, "r", "/repo")
        .unwrap();
    let t = Topologies::builtin();
    let err = dry_run(&opts, &[t.get("combined").unwrap()]).unwrap_err();
    assert!(
        err.to_string()
            .contains("--load-image needs --target kind or k3d"),
        "{err}"
    );
}

#[test]
fn the_plan_writes_the_topology_values_file_it_passes_to_helm() {
    let opts = args(&[]).resolve(Provider::Kind, "r", "/repo").unwrap();
    let t = Topologies::builtin();
    let plan = dry_run(&opts, &[t.get("sidecar").unwrap()]).unwrap();
    let write = plan
        .stages
        .iter()
        .flat_map(|s| &s.steps)
        .find_map(|s| match s {
            Step::Write { path, contents } if path.ends_with("values-sidecar.yaml") => {
                Some((path.clone(), contents.clone()))
            }
            _ => None,
        })
        .expect("a values file");
    // In the private directory: a file of the user's at the run directory's
    // `values-sidecar.yaml` is never written over (issue 44 item 9).
    assert_eq!(write.0, PathBuf::from("/private/values-sidecar.yaml"));
    assert!(write.1.contains("topology: sidecar"), "{}", write.1);
    let helm = plan
        .commands()
        .into_iter()
        .find(|c| c.program == "helm" && c.args[0] == "upgrade")
        .unwrap();
    assert!(helm.line().contains("-f /private/values-sidecar.yaml"));
}
