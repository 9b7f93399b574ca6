//! Benchmark: the whole catalog on the emulated `contract` model, on every topology. Reports the
//! wall time, the virtual time the scenarios covered, and their ratio. Run it with
//! `cargo bench -p conformance-catalog` (a plain bench binary; no timing assertions).

use std::sync::Arc;
use std::time::Instant;

use conformance_catalog::catalog::{Selection as Pick, cases};
use conformance_core::engine::{EngineOptions, Outcome};
use conformance_core::pool;
use conformance_core::target::TargetFactory;
use conformance_core::topology::Topologies;
use conformance_models::spec::Selection;
use conformance_models::target::EmulatedFactory;

fn main() {
    let topologies: Vec<_> = Topologies::builtin().all().cloned().collect();
    let cases = cases(&topologies, &Pick::default());
    let factory: Arc<dyn TargetFactory> = Arc::new(EmulatedFactory::new(Selection::contract()));
    // Wall time is what this measures, so std's clock is right here (never in harness logic).
    // One job: the figure is the cost of a case, not of the machine's parallelism.
    let wall = Instant::now();
    let reports = pool::run_paused(factory, EngineOptions::default(), cases, 1, &());
    let virtual_ms: u64 = reports.iter().map(|r| r.virtual_ms).sum();
    let passed = reports
        .iter()
        .filter(|r| r.outcome == Outcome::Passed)
        .count();
    let wall = wall.elapsed();
    println!(
        "catalog on contract: {} cases ({passed} passed), wall {:.3} s, virtual {:.1} s, virtual/wall {:.0}x, {:.1} ms per case",
        reports.len(),
        wall.as_secs_f64(),
        virtual_ms as f64 / 1000.0,
        virtual_ms as f64 / 1000.0 / wall.as_secs_f64(),
        wall.as_secs_f64() * 1000.0 / reports.len() as f64
    );
}
