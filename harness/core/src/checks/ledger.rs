//! The sentinel ledger, in the spirit of Jepsen's set-full checker: every sentinel written and
//! every read of it, each sentinel classified from the whole history rather than from the last
//! read alone, with the time from the end of the last fault to its first intact read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::timeline::{Event, FaultPhase, SentinelOp, SentinelResult, Timeline};
use crate::verdict::fmt_ms;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum SentinelClass {
    /// Read back at least once, and every read that ran returned what was written.
    Stable,
    /// A read ran and the file was gone.
    Lost,
    /// A read returned something other than what was written.
    Corrupt,
    /// No read ever ran (each attempt failed, or none was made).
    NeverRead,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SentinelSummary {
    pub sandbox: String,
    pub key: String,
    pub class: SentinelClass,
    pub intact_reads: usize,
    pub missing_reads: usize,
    pub corrupt_reads: usize,
    /// Reads that could not run, such as an exec refused while the sandbox was not Ready.
    pub failed_reads: usize,
    /// Time from the end of the last fault before the final read to the first intact read
    /// after it.
    pub recovery_ms: Option<u64>,
    /// The first bad read, for the diagnosis.
    pub first_bad: Option<String>,
}

impl SentinelSummary {
    pub(crate) fn describe(&self) -> String {
        let class = match self.class {
            SentinelClass::Stable => "stable",
            SentinelClass::Lost => "LOST",
            SentinelClass::Corrupt => "CORRUPT",
            SentinelClass::NeverRead => "NEVER READ",
        };
        let mut s = format!(
            "{}:{} {class} ({} intact, {} missing, {} corrupt, {} failed reads)",
            self.sandbox,
            self.key,
            self.intact_reads,
            self.missing_reads,
            self.corrupt_reads,
            self.failed_reads
        );
        if let Some(ms) = self.recovery_ms {
            s.push_str(&format!(
                ", first intact {} after the fault ended",
                fmt_ms(ms)
            ));
        }
        if let Some(b) = &self.first_bad {
            s.push_str(&format!(", first bad read {b}"));
        }
        s
    }
}

#[derive(Default)]
struct History {
    /// Acknowledged content, if a write succeeded.
    written: Option<String>,
    intact: usize,
    missing: usize,
    corrupt: usize,
    failed: usize,
    intact_at: Vec<u64>,
    first_bad: Option<String>,
}

/// Every sentinel of a run with its history.
pub(crate) struct Ledger {
    sentinels: BTreeMap<(String, String), History>,
    fault_ends: Vec<u64>,
    last_read_at: Option<u64>,
}

impl Ledger {
    pub(crate) fn from_timeline(t: &Timeline) -> Self {
        let mut sentinels: BTreeMap<(String, String), History> = BTreeMap::new();
        let mut fault_ends = Vec::new();
        let mut last_read_at = None;
        for e in &t.entries {
            match &e.event {
                Event::Fault(f) if f.phase == FaultPhase::Ended => fault_ends.push(e.at_ms),
                Event::Sentinel(s) => {
                    let key = (s.sandbox.clone(), s.key.clone());
                    match (s.op, &s.result) {
                        (SentinelOp::Write, SentinelResult::Ok(v)) => {
                            sentinels.entry(key).or_default().written = Some(v.clone());
                        }
                        // A write that was not acknowledged promises nothing.
                        (SentinelOp::Write, _) => {}
                        (SentinelOp::Read, result) => {
                            let Some(h) = sentinels.get_mut(&key) else {
                                continue;
                            };
                            let Some(written) = h.written.clone() else {
                                continue;
                            };
                            last_read_at = Some(e.at_ms);
                            let when = fmt_ms(e.at_ms);
                            match result {
                                SentinelResult::Ok(v) if *v == written => {
                                    h.intact += 1;
                                    h.intact_at.push(e.at_ms);
                                }
                                SentinelResult::Ok(v) => {
                                    h.corrupt += 1;
                                    h.first_bad.get_or_insert(format!(
                                        "at {when}: read {v:?}, wrote {written:?}"
                                    ));
                                }
                                SentinelResult::Missing => {
                                    h.missing += 1;
                                    h.first_bad
                                        .get_or_insert(format!("at {when}: file missing"));
                                }
                                SentinelResult::Failed(_) => h.failed += 1,
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Self {
            sentinels,
            fault_ends,
            last_read_at,
        }
    }

    pub(crate) fn summaries(&self) -> Vec<SentinelSummary> {
        // The fault that matters for recovery is the last one to end before the final read.
        let fault_end = self
            .fault_ends
            .iter()
            .rev()
            .find(|&&f| self.last_read_at.is_some_and(|r| f <= r))
            .copied();
        self.sentinels
            .iter()
            .filter(|(_, h)| h.written.is_some())
            .map(|((sandbox, key), h)| {
                let class = if h.corrupt > 0 {
                    SentinelClass::Corrupt
                } else if h.missing > 0 {
                    SentinelClass::Lost
                } else if h.intact == 0 {
                    SentinelClass::NeverRead
                } else {
                    SentinelClass::Stable
                };
                let recovery_ms = fault_end
                    .and_then(|f| h.intact_at.iter().find(|&&at| at >= f).map(|at| at - f));
                SentinelSummary {
                    sandbox: sandbox.clone(),
                    key: key.clone(),
                    class,
                    intact_reads: h.intact,
                    missing_reads: h.missing,
                    corrupt_reads: h.corrupt,
                    failed_reads: h.failed,
                    recovery_ms,
                    first_bad: h.first_bad.clone(),
                }
            })
            .collect()
    }
}
