//! What the catalog's test binaries share.

use std::sync::Arc;

use conformance_core::engine::{CaseReport, EngineOptions};
use conformance_core::pool;
use conformance_core::scenario::Case;
use conformance_core::target::TargetFactory;
use conformance_models::spec::Selection;
use conformance_models::target::EmulatedFactory;

/// Runs cases on a model through the engine's paused-time pool, `jobs` at a time; reports come
/// back in the order given.
pub fn run(selection: &Selection, cases: Vec<Case>, jobs: usize) -> Vec<CaseReport> {
    let factory: Arc<dyn TargetFactory> = Arc::new(EmulatedFactory::new(selection.clone()));
    pool::run_paused(factory, EngineOptions::default(), cases, jobs, &())
}

/// Panics naming the first case whose timeline differs, and the first line where it does.
pub fn assert_same_timelines(what: &str, a: &[CaseReport], b: &[CaseReport]) {
    assert_eq!(a.len(), b.len(), "{what}: a different number of cases");
    let mut differing = Vec::new();
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.case_id, y.case_id, "{what}: cases in another order");
        let (jx, jy) = (x.timeline.to_jsonl(), y.timeline.to_jsonl());
        if jx == jy {
            continue;
        }
        let first = jx
            .lines()
            .zip(jy.lines())
            .enumerate()
            .find(|(_, (l, r))| l != r)
            .map_or_else(
                || "one is a prefix of the other".to_string(),
                |(i, (l, r))| format!("first at line {}:\n  {l}\n  {r}", i + 1),
            );
        differing.push(format!("{}: {first}", x.case_id));
    }
    assert!(
        differing.is_empty(),
        "{what}: {} of {} timelines differ:\n{}",
        differing.len(),
        a.len(),
        differing.join("\n")
    );
}
