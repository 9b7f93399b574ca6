//! Whether the gateway runs on the harness's clock, measured rather than trusted.
//!
//! Each line of the gateway's log that the harness reads carries two timestamps: the kubelet's,
//! stamped when the line was read (the cluster's clock: on a served cluster, the harness's),
//! and, on real OpenShell's lines, the gateway's own (tracing's). On one clock the two differ
//! by the log's latency; a gateway on a clock of its own is off by however far its clock has
//! drifted (with a scaled clock (`--time-scale`), whose shared reference it could not read,
//! minutes at ×10: docs/upstream-facts.md F13.2). The case records the skew on its timeline,
//! and a gateway off the clock makes it an infrastructure error naming it: its waits and
//! timeouts ran at another speed than the scenario's, so no verdict may come from them.

use conformance_core::target::TargetError;
use conformance_core::timeline::{Event, Recorder};

use crate::completeness::GatewayLogRead;

/// Key of the observation with the skew of the gateway's own clock against the kubelet's.
pub const SKEW_KEY: &str = "gateway_clock_skew_ms";

/// The largest skew one clock allows at `scale`, in the clock's milliseconds: a log's latency
/// (tens of real milliseconds, measured 15-35 ms on a loaded 2-core machine) scaled, with room
/// to spare. A process whose clock started even one real second later is (scale - 1) seconds
/// off.
pub(crate) fn bound_ms(scale: u32) -> i64 {
    5_000 + 100 * i64::from(scale.max(1))
}

/// For each line stamped twice: the kubelet's stamp minus the process's own, in ms.
pub(crate) fn skews<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<i64> {
    let stamp = |w: &str| {
        let t = humantime::parse_rfc3339_weak(w.trim_end_matches('Z')).ok()?;
        Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64)
    };
    lines
        .into_iter()
        .filter_map(|line| {
            let plain = crate::completeness::strip_ansi(line);
            let mut words = plain.split_whitespace();
            let kubelet = words.next().and_then(stamp)?;
            let own = words.next().and_then(stamp)?;
            Some(kubelet - own)
        })
        .collect()
}

/// Records the gateway's clock skew on the timeline; Err when it is off the clock.
pub(crate) fn check(rec: &Recorder, log: &GatewayLogRead, scale: u32) -> Result<(), TargetError> {
    check_process(rec, "the gateway", SKEW_KEY, None, log.text.lines(), scale)
}

/// Key of the observation with the skew of a sandbox's supervisor's clock against the
/// kubelet's (its subject: the sandbox).
pub const SUPERVISOR_SKEW_KEY: &str = "supervisor_clock_skew_ms";

/// Records the clock skew of sandbox `sandbox`'s supervisor from its log (`lines`, read with
/// the kubelet's timestamps); Err when it is off the clock.
pub(crate) fn check_supervisor(
    rec: &Recorder,
    sandbox: &str,
    lines: &[String],
    scale: u32,
) -> Result<(), TargetError> {
    check_process(
        rec,
        &format!("the supervisor of sandbox {sandbox}"),
        SUPERVISOR_SKEW_KEY,
        Some(sandbox),
        lines.iter().map(String::as_str),
        scale,
    )
}

/// Records the skew of `process`'s clock, read from its log `lines`, as observation `key`; Err
/// naming `process` when it is off the clock.
fn check_process<'a>(
    rec: &Recorder,
    process: &str,
    key: &str,
    subject: Option<&str>,
    lines: impl IntoIterator<Item = &'a str>,
    scale: u32,
) -> Result<(), TargetError> {
    let mut skews = skews(lines);
    if skews.is_empty() {
        return Ok(());
    }
    skews.sort_unstable();
    let (min, max) = (skews[0], skews[skews.len() - 1]);
    let bound = bound_ms(scale);
    rec.record(Event::Observation {
        key: key.into(),
        subject: subject.map(str::to_string),
        value: serde_json::json!({
            "lines": skews.len(),
            "min": min,
            "median": skews[skews.len() / 2],
            "max": max,
            "bound": bound,
            "time_scale": scale,
        }),
    });
    let worst = if max.abs() >= min.abs() { max } else { min };
    if worst.abs() <= bound {
        return Ok(());
    }
    let message = format!(
        "{process} runs off the harness's clock: its own timestamps are up to {worst} ms from the kubelet's on its {} log lines (one clock at ×{scale} allows {bound} ms), so its waits ran at another speed than the scenario's",
        skews.len()
    );
    rec.note(message.clone());
    Err(TargetError::infra(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real gateway's line: the kubelet's stamp, then tracing's own (coloured), `own_ms`
    /// after it.
    fn line(kubelet_s: u64, own_ms: i64) -> String {
        let kubelet = std::time::UNIX_EPOCH + std::time::Duration::from_secs(kubelet_s);
        let own = std::time::UNIX_EPOCH
            + std::time::Duration::from_millis((kubelet_s as i64 * 1000 + own_ms) as u64);
        format!(
            "{} \u{1b}[2m{}\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m openshell_server: Sandbox phase changed",
            humantime::format_rfc3339_nanos(kubelet),
            humantime::format_rfc3339_micros(own)
        )
    }

    fn read(lines: &[String]) -> GatewayLogRead {
        GatewayLogRead {
            text: lines.join("\n"),
            unreadable: vec![],
        }
    }

    fn skew_observation(rec: &Recorder) -> Option<serde_json::Value> {
        rec.snapshot().entries.iter().find_map(|e| match &e.event {
            Event::Observation { key, value, .. } if key == SKEW_KEY => Some(value.clone()),
            _ => None,
        })
    }

    #[test]
    fn a_gateway_on_the_harness_clock_passes_with_its_skew_on_the_timeline() {
        let rec = Recorder::new();
        // Measured at x10: the gateway's own stamps 0.15-0.35 s ahead of the kubelet's.
        let log = read(&[line(1000, 330), line(1010, 242), line(1020, 153)]);
        assert!(check(&rec, &log, 10).is_ok());
        let seen = skew_observation(&rec).expect("the skew is recorded");
        assert_eq!(seen["lines"], 3);
        assert_eq!(seen["min"], -330);
        assert_eq!(seen["max"], -153);
        assert_eq!(seen["time_scale"], 10);
    }

    #[test]
    fn a_gateway_on_a_clock_of_its_own_makes_the_case_an_infrastructure_error_naming_it() {
        let rec = Recorder::new();
        // Measured at x10 with the shared reference readable by its owner only: the gateway
        // (user 1000) kept a clock of its own, 37-351 s behind.
        let log = read(&[line(1000, -36_657), line(1100, -351_405)]);
        let err = check(&rec, &log, 10).expect_err("off the clock");
        assert!(matches!(err, TargetError::Infra { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("the gateway runs off the harness's clock") && text.contains("351405"),
            "{text}"
        );
        assert_eq!(skew_observation(&rec).expect("recorded")["max"], 351_405);
    }

    #[test]
    fn a_supervisor_on_a_clock_of_its_own_is_named_with_its_sandbox() {
        let rec = Recorder::new();
        let err =
            check_supervisor(&rec, "demo", &[line(1000, -40_000)], 10).expect_err("off the clock");
        assert!(
            err.to_string()
                .contains("the supervisor of sandbox demo runs off the harness's clock"),
            "{err}"
        );
        let on = check_supervisor(&rec, "other", &[line(1000, 200)], 10);
        assert!(on.is_ok(), "{on:?}");
        let subjects: Vec<Option<String>> = rec
            .snapshot()
            .entries
            .iter()
            .filter_map(|e| match &e.event {
                Event::Observation { key, subject, .. } if key == SUPERVISOR_SKEW_KEY => {
                    Some(subject.clone())
                }
                _ => None,
            })
            .collect();
        assert_eq!(subjects, [Some("demo".into()), Some("other".into())]);
    }

    #[test]
    fn lines_without_the_processes_own_timestamps_measure_nothing() {
        let rec = Recorder::new();
        let log = read(&["2026-12-07T02:52:46.895383648Z Sandbox phase changed".into()]);
        assert!(check(&rec, &log, 10).is_ok());
        assert_eq!(skew_observation(&rec), None);
    }
}
