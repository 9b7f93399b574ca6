//! What the catalog's test binaries share.

use conformance_core::engine::CaseReport;

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
