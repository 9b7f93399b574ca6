//! Benchmark: the whole catalog on the emulated `contract` model, then the whole proof (the
//! catalog on `contract`, on both upstream models and on every defect switch) as one pool.
//! For each: wall time, CPU time, the virtual time the scenarios covered, virtual/wall, and the
//! peak memory of the process. Run it with `cargo bench -p conformance-catalog` (a plain bench
//! binary; no timing assertions). `--jobs N` sets the pool size (default: the machine's
//! available parallelism, as `run` on the emulated target).

use std::sync::Arc;
use std::time::{Duration, Instant};

use conformance_catalog::catalog::{Selection as Pick, cases};
use conformance_core::engine::{CaseReport, EngineOptions, Outcome};
use conformance_core::pool;
use conformance_core::scenario::Case;
use conformance_core::target::TargetFactory;
use conformance_core::topology::Topologies;
use conformance_models::spec::{DEFECTS, Model, Selection};
use conformance_models::target::EmulatedFactory;

// As the binary's (docs/dependencies.md D12): the figures are the ones `run` gives.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The selections of the proof: the three models, then each defect switch on `contract`.
fn proof_selections() -> Vec<Selection> {
    [
        Selection::contract(),
        Selection::model(Model::named("openshell-0.0.111")),
        Selection::model(Model::named("openshell-0.1.6-reported")),
    ]
    .into_iter()
    .chain(
        DEFECTS
            .iter()
            .map(|d| Selection::contract().with_defect(d.defect)),
    )
    .collect()
}

/// The process's CPU time (user + system, all threads, ended ones included), on Linux.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at state (field 3);
    // utime and stime are fields 14 and 15, in clock ticks of USER_HZ (100 on Linux).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// The peak resident memory since the last reset, on Linux (`VmHWM`).
fn peak_memory_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// Starts a new peak-memory measurement (Linux 4.0+; elsewhere the peak stays the process's).
fn reset_peak_memory() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn measure(what: &str, jobs: usize, run: impl FnOnce() -> Vec<CaseReport>) {
    reset_peak_memory();
    let cpu0 = cpu_time();
    // Wall time is what this measures, so std's clock is right here (never in harness logic).
    let wall = Instant::now();
    let reports = run();
    let wall = wall.elapsed().as_secs_f64();
    let cpu = cpu0.zip(cpu_time()).map_or("n/a".to_string(), |(a, b)| {
        format!("{:.2} s", (b - a).as_secs_f64())
    });
    let peak = peak_memory_mib().map_or("n/a".to_string(), |m| format!("{m:.0} MiB"));
    let virtual_s = reports.iter().map(|r| r.virtual_ms).sum::<u64>() as f64 / 1000.0;
    let passed = reports
        .iter()
        .filter(|r| r.outcome == Outcome::Passed)
        .count();
    println!(
        "{what}: {} cases ({passed} passed), {jobs} jobs: wall {wall:.2} s, CPU {cpu}, \
         virtual {virtual_s:.0} s, virtual/wall {:.0}x, peak memory {peak}",
        reports.len(),
        virtual_s / wall,
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    while let Some(a) = args.next() {
        if a == "--jobs"
            && let Some(n) = args.next().and_then(|n| n.parse().ok())
        {
            jobs = n;
        }
    }
    let topologies: Vec<_> = Topologies::builtin().all().cloned().collect();
    let catalog = cases(&topologies, &Pick::default());
    let factory: Arc<dyn TargetFactory> = Arc::new(EmulatedFactory::new(Selection::contract()));
    measure("catalog on contract", jobs, || {
        pool::run_paused(
            factory,
            EngineOptions::default(),
            catalog.clone(),
            jobs,
            &(),
        )
    });
    // The whole proof as one job: every selection's cases on one pool. A selection runs what
    // its target supports (the upstream 0.0.111 model: two topologies), as `run` does.
    let mut work: Vec<(Arc<dyn TargetFactory>, Case)> = Vec::new();
    for selection in proof_selections() {
        let factory: Arc<dyn TargetFactory> = Arc::new(EmulatedFactory::new(selection));
        let supported: Vec<_> = topologies
            .iter()
            .filter(|t| factory.info().skip_reason(t, &[]).is_none())
            .cloned()
            .collect();
        work.extend(
            cases(&supported, &Pick::default())
                .into_iter()
                .map(|c| (factory.clone(), c)),
        );
    }
    let selections = proof_selections().len();
    measure(
        &format!("whole proof ({selections} selections)"),
        jobs,
        || pool::run_paused_mixed(work, EngineOptions::default(), jobs, &()),
    );
}
