//! The catalog expands as documented. (The proof that it catches the bugs runs every scenario on
//! the emulated models in `matrix.rs`.)

use conformance_catalog::catalog::{Selection, cases};
use conformance_core::topology::Topologies;

#[test]
fn the_catalog_is_reachable_from_the_harness_library() {
    let topologies: Vec<_> = Topologies::builtin().all().cloned().collect();
    assert_eq!(cases(&topologies, &Selection::default()).len(), 76);
}
