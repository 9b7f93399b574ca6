//! The catalog expands as documented. (The proof that it catches the bugs runs every scenario on
//! the emulated models in `proof.rs`.)

use conformance_catalog::catalog::{Selection, cases, entries};
use conformance_core::topology::Topologies;

#[test]
fn the_catalog_is_reachable_from_the_harness_library_with_every_variant_on_every_topology() {
    let topologies: Vec<_> = Topologies::builtin().all().cloned().collect();
    let variants: usize = entries().iter().map(|e| e.variants.len()).sum();
    assert!(
        variants > entries().len(),
        "some scenarios run several variants"
    );
    assert!(topologies.len() > 1, "the catalog ships several topologies");
    assert_eq!(
        cases(&topologies, &Selection::default()).len(),
        variants * topologies.len()
    );
}

/// No product failure goes without a named requirement: every step of every case names the
/// requirements of the behaviours it waits for (a wait that gives up, or a refusal the step
/// cannot go on from, fails one of them), and every check names those it verifies, each a row
/// of REQUIREMENTS.md. Walked for every scenario and variant, on every topology, against every
/// release the emulated target models, since a case's checks are built from all three.
#[test]
fn every_step_and_check_of_every_case_on_every_release_names_a_known_requirement() {
    use conformance_catalog::requirements;
    use conformance_core::target::TargetFactory as _;
    use conformance_models::spec::{MODELS, Selection as Model};
    use conformance_models::target::EmulatedFactory;

    let topologies: Vec<_> = Topologies::builtin().all().cloned().collect();
    let unnamed = |what: String, named: &[String]| {
        if named.is_empty() {
            Some(format!("{what} names no requirement"))
        } else {
            named
                .iter()
                .find(|r| requirements::find(r).is_none())
                .map(|r| format!("{what} names {r}, which REQUIREMENTS.md does not list"))
        }
    };
    let mut bad = Vec::new();
    let mut walked = 0;
    for model in MODELS.iter() {
        let selection = Model::parse(model.name, &[], None).unwrap();
        let target = EmulatedFactory::new(selection).info();
        for case in cases(&topologies, &Selection::default()) {
            let id = format!("{} on {}", case.id(), model.name);
            for step in &case.scenario.steps {
                bad.extend(unnamed(
                    format!("{id}: step '{}'", step.name),
                    &step.requirements,
                ));
            }
            for check in (case.scenario.checks)(&case.info(target.clone())) {
                bad.extend(unnamed(
                    format!("{id}: check '{}'", check.name),
                    &check.requirements,
                ));
            }
            walked += 1;
        }
    }
    assert!(walked > MODELS.len(), "the walk saw every case");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
