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
