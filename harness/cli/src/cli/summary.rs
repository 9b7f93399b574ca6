//! The summary table printed at the end of a run: scenario (with its parameters) by topology,
//! each cell a verdict with the case's virtual and wall durations, then the totals, then every
//! failure's reason.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use conformance_core::case_verdict::{CaseVerdict as Verdict, Totals};
use conformance_core::checks::{CheckStatus, fmt_ms};
use conformance_core::engine::CaseReport;

fn cell(v: &Verdict) -> &'static str {
    match v {
        Verdict::Passed => "pass",
        Verdict::Failed { .. } => "FAIL",
        Verdict::ExpectedFailure { .. } => "xfail",
        Verdict::UnexpectedPass { .. } => "XPASS",
        Verdict::Error { .. } => "ERROR",
        Verdict::Skipped { .. } => "skip",
        Verdict::Interrupted { .. } => "interrupted",
    }
}

/// The row label of a case: its id without the topology.
fn row_of(r: &CaseReport) -> String {
    let params: Vec<String> = r
        .params
        .iter()
        .filter(|(k, _)| *k != "schedule")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if params.is_empty() {
        r.scenario.clone()
    } else {
        format!("{} [{}]", r.scenario, params.join(","))
    }
}

pub(super) fn table(reports: &[CaseReport], verdicts: &[Verdict], wall: Duration) -> String {
    let mut topologies: Vec<String> = Vec::new();
    let mut rows: Vec<String> = Vec::new();
    let mut cells: BTreeMap<(String, String), String> = BTreeMap::new();
    for (r, v) in reports.iter().zip(verdicts) {
        if !topologies.contains(&r.topology) {
            topologies.push(r.topology.clone());
        }
        let row = row_of(r);
        if !rows.contains(&row) {
            rows.push(row.clone());
        }
        cells.insert(
            (row, r.topology.clone()),
            format!("{} {} / {}ms", cell(v), fmt_ms(r.virtual_ms), r.wall_ms),
        );
    }
    let w0 = rows.iter().map(|r| r.len()).max().unwrap_or(8).max(30);
    let widths: Vec<usize> = topologies
        .iter()
        .map(|t| {
            rows.iter()
                .filter_map(|r| cells.get(&(r.clone(), t.clone())))
                .map(String::len)
                .max()
                .unwrap_or(0)
                .max(t.len())
        })
        .collect();
    let mut s = String::new();
    let _ = write!(s, "\n{:<w0$}", "scenario (virtual / wall time)");
    for (t, w) in topologies.iter().zip(&widths) {
        let _ = write!(s, "  {t:<w$}");
    }
    s.push('\n');
    for row in &rows {
        let _ = write!(s, "{row:<w0$}");
        for (t, w) in topologies.iter().zip(&widths) {
            let c = cells
                .get(&(row.clone(), t.clone()))
                .map_or("-", String::as_str);
            let _ = write!(s, "  {c:<w$}");
        }
        s.push('\n');
    }
    let virtual_ms: u64 = reports.iter().map(|r| r.virtual_ms).sum();
    let _ = writeln!(
        s,
        "\n{}; virtual time {}, wall time {:.2}s",
        Totals::of(verdicts),
        fmt_ms(virtual_ms),
        wall.as_secs_f64()
    );
    let unjudged = |r: &CaseReport| {
        r.checks
            .iter()
            .filter(|c| c.status() == CheckStatus::NotEvaluated)
            .count()
    };
    let (checks, cases) = reports
        .iter()
        .map(unjudged)
        .filter(|n| *n > 0)
        .fold((0, 0), |(checks, cases), n| (checks + n, cases + 1));
    if checks > 0 {
        let _ = writeln!(
            s,
            "{checks} checks not evaluated in {cases} cases: a step they depended on stopped the case (the JUnit and HTML reports name it)"
        );
    }
    for (r, v) in reports.iter().zip(verdicts) {
        // Failures, errors and unexpected passes get a line each; expected failures are
        // listed by the expectations file, interruptions by the run's closing lines.
        if !matches!(
            v,
            Verdict::Failed { .. } | Verdict::Error { .. } | Verdict::UnexpectedPass { .. }
        ) {
            continue;
        }
        let Some(why) = v.explanation() else { continue };
        let unjudged = match unjudged(r) {
            0 => String::new(),
            n => format!(" ({n} checks not evaluated)"),
        };
        let _ = writeln!(s, "{} {}: {why}{unjudged}", cell(v), r.case_id);
    }
    s
}
