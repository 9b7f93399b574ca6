//! The determinism promise on the emulated target: the same model, defects, seed and selection
//! give byte-identical timelines, whatever the number of cases run at once and however often.

use conformance_catalog::catalog::{self, Selection as Pick};
use conformance_core::engine::Outcome;
use conformance_core::topology::{Topologies, Topology};
use conformance_models::spec::{Model, Selection};
use rstest::rstest;

mod common;
use common::{assert_same_timelines, run};

// These tests run the catalog over a thousand times; the binary's allocator (docs/dependencies.md
// D12) makes that about a tenth cheaper.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn all_topologies() -> Vec<Topology> {
    Topologies::builtin().all().cloned().collect()
}

/// Runs the whole catalog on every topology once with one case at a time and once with
/// several, and compares every timeline byte for byte (which also shows two runs agree).
#[rstest]
#[case::contract(Selection::contract())]
#[case::upstream_0_0_111(Selection::model(Model::named("openshell-0.0.111")))]
#[case::upstream_0_1_6_reported(Selection::model(Model::named("openshell-0.1.6-reported")))]
fn the_whole_catalog_gives_byte_identical_timelines_with_one_job_or_several(
    #[case] selection: Selection,
) {
    let pick = Pick {
        seed: Some(7),
        ..Pick::default()
    };
    let cases = || catalog::cases(&all_topologies(), &pick);
    let one = run(&selection, cases(), 1);
    let several = run(&selection, cases(), 2);
    assert!(one.len() > 50, "the whole catalog, not {} cases", one.len());
    assert_same_timelines(&format!("{selection:?}, --jobs 1 vs 2"), &one, &several);
}

/// 0.0.111 on Agent Sandbox v0.5.0 takes other paths through the models than the
/// whole-catalog runs above (it stays provisioning forever after a bootstrap outage): the same
/// timelines with one job or two, on one topology where the gateway runs the sandbox and one
/// where the supervisor lives in the sandbox pod. Each defect switch's paths (give-ups, crash
/// loops, sticky errors) are checked the same way by the proof's detection matrix
/// (`tests/proof.rs`), which reuses its own run of the whole catalog for it.
#[test]
fn upstream_0_0_111_on_agent_sandbox_v0_5_0_gives_byte_identical_timelines_with_one_job_or_two() {
    let topologies: Vec<Topology> = ["gateway", "supervisor-pod"]
        .into_iter()
        .map(|n| Topologies::builtin().get(n).unwrap().clone())
        .collect();
    let pick = Pick {
        seed: Some(7),
        ..Pick::default()
    };
    let cases = || catalog::cases(&topologies, &pick);
    let selection = Selection::parse("openshell-0.0.111", &[], Some("v0.5.0")).unwrap();
    let one = run(&selection, cases(), 1);
    let two = run(&selection, cases(), 2);
    assert!(!one.is_empty(), "{selection:?}: no cases");
    assert_same_timelines(&format!("{selection:?}, --jobs 1 vs 2"), &one, &two);
}

/// The case that differed most often before wake-ups were ordered: the supervisor pod is
/// created by the gateway while the Agent Sandbox controller creates the PVC and the pod.
#[test]
fn one_case_run_twenty_times_gives_twenty_byte_identical_timelines() {
    let pick = Pick {
        patterns: vec!["provisioning".into()],
        ..Pick::default()
    };
    let topo = Topologies::builtin().get("supervisor-pod").unwrap().clone();
    let case = catalog::cases(&[topo], &pick);
    assert_eq!(case.len(), 1);
    let selection = Selection::contract();
    let first = run(&selection, case.clone(), 1);
    assert_eq!(first[0].outcome, Outcome::Passed);
    // Twenty runs in all, two at a time, each on its own runtime.
    let rest = run(
        &selection,
        std::iter::repeat_n(case[0].clone(), 19).collect(),
        2,
    );
    for (i, r) in rest.iter().enumerate() {
        assert_same_timelines(&format!("run {}", i + 2), &first, std::slice::from_ref(r));
    }
}

/// Where `select!` may pick among ready branches at random, two runs can take different paths.
/// Every `select!` of the crates a run on the emulated target goes through must say `biased;`
/// first, so the first ready branch in source order wins. Every crate is scanned (a new one too)
/// but the real-cluster path (`harness/real`: real clusters are not deterministic, and nothing
/// of it runs on the emulated target) and the tests' tool finder (`harness/testtools`). kube's
/// own exec client (`kube-client`'s `remote_command`) has an unbiased `select!` too; the
/// emulated target does not exec through it (docs/architecture.md, "Determinism").
#[test]
fn every_select_on_the_emulated_path_is_biased() {
    const NOT_ON_THE_EMULATED_PATH: [&str; 2] = ["real", "testtools"];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut unbiased = Vec::new();
    let mut seen = 0;
    let mut dirs: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("harness"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            p.join("Cargo.toml").is_file() && !NOT_ON_THE_EMULATED_PATH.contains(&name.as_str())
        })
        .map(|p| p.join("src"))
        .collect();
    dirs.push(root.join("suites/src"));
    dirs.sort();
    assert!(
        dirs.iter().any(|d| d.ends_with("harness/kube-models/src")),
        "the scan must see every crate of the emulated path: {dirs:?}"
    );
    for dir in dirs {
        let mut stack = vec![dir];
        while let Some(p) = stack.pop() {
            if p.is_dir() {
                let mut entries: Vec<_> = std::fs::read_dir(&p)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .collect();
                entries.sort();
                stack.extend(entries);
                continue;
            }
            if p.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            for (i, _) in text.match_indices("select! {") {
                seen += 1;
                let body = text[i + "select! {".len()..].trim_start();
                if !body.starts_with("biased;") {
                    let line = text[..i].lines().count();
                    let file = p.strip_prefix(&root).unwrap_or(&p).display().to_string();
                    unbiased.push(format!("{file}:{line}"));
                }
            }
        }
    }
    assert!(
        seen > 10,
        "the scan found only {seen} select! uses: is it looking in the right place?"
    );
    assert!(
        unbiased.is_empty(),
        "select! without `biased;`: {unbiased:#?}"
    );
}
