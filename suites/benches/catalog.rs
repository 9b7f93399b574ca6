//! Benchmark: the whole catalog on the emulated `contract` model, on every topology. Reports the
//! wall time, the virtual time the scenarios covered, and their ratio. Run it with
//! `cargo bench -p openshell-conformance-suites` (a plain bench binary; no timing assertions).

use std::sync::Arc;
use std::time::Instant;

use conformance_catalog::catalog::{Selection as Pick, cases};
use conformance_core::engine::{Engine, EngineOptions, Outcome};
use conformance_core::target::TargetFactory;
use conformance_core::topology::Topologies;
use conformance_models::spec::Selection;
use conformance_models::target::EmulatedFactory;

fn main() {
    let topologies: Vec<_> = Topologies::builtin().all().cloned().collect();
    let cases = cases(&topologies, &Pick::default());
    let factory: Arc<dyn TargetFactory> = Arc::new(EmulatedFactory::new(Selection::contract()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    // Wall time is what this measures, so std's clock is right here (never in harness logic).
    let wall = Instant::now();
    let mut virtual_ms = 0u64;
    let mut passed = 0;
    for case in &cases {
        let r = rt.block_on(Engine::new(factory.clone(), EngineOptions::default()).run_case(case));
        virtual_ms += r.virtual_ms;
        passed += usize::from(r.outcome == Outcome::Passed);
    }
    let wall = wall.elapsed();
    println!(
        "catalog on contract: {} cases ({passed} passed), wall {:.3} s, virtual {:.1} s, virtual/wall {:.0}x, {:.1} ms per case",
        cases.len(),
        wall.as_secs_f64(),
        virtual_ms as f64 / 1000.0,
        virtual_ms as f64 / 1000.0 / wall.as_secs_f64(),
        wall.as_secs_f64() * 1000.0 / cases.len() as f64
    );
}
