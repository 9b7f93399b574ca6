//! Progress while a run goes: on a terminal, an overall bar plus one line per running case with
//! its stage and, during a fault window, a countdown; otherwise plain, timestamped lines (CI
//! logs). Fed by the engine's timeline listener.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use conformance_core::engine::CaseReport;
use conformance_core::timeline::{Entry, Event, FaultPhase, StageStatus};

#[derive(Clone)]
pub(super) struct Progress {
    inner: Arc<Inner>,
}

/// What one running case is doing.
struct Line {
    bar: Option<ProgressBar>,
    stage: String,
    /// A fault in effect: its kind, and when its requested hold ends on the wall clock.
    fault: Option<(String, Option<SystemTime>)>,
}

struct Inner {
    // Progress is shown against the wall clock: it is for a person watching.
    start: SystemTime,
    fancy: Option<(MultiProgress, ProgressBar)>,
    running: Mutex<BTreeMap<String, Line>>,
}

fn message(case: &str, line: &Line) -> String {
    match &line.fault {
        Some((kind, Some(until))) => {
            let left = until.duration_since(SystemTime::now()).unwrap_or_default();
            format!(
                "{case}: {} - fault {kind}, {} left",
                line.stage,
                humantime::format_duration(Duration::from_secs(left.as_secs()))
            )
        }
        Some((kind, None)) => format!("{case}: {} - fault {kind}", line.stage),
        None => format!("{case}: {}", line.stage),
    }
}

impl Progress {
    pub(super) fn new(total: usize) -> Self {
        let fancy = std::io::stderr().is_terminal().then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let bar = multi.add(ProgressBar::new(total as u64));
            bar.set_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} cases {elapsed}")
                    .expect("a valid template"),
            );
            (multi, bar)
        });
        let p = Self {
            inner: Arc::new(Inner {
                start: SystemTime::now(),
                fancy,
                running: Mutex::new(BTreeMap::new()),
            }),
        };
        if p.inner.fancy.is_some() {
            // Countdowns move even when nothing is recorded.
            let weak = Arc::downgrade(&p.inner);
            std::thread::spawn(move || {
                while let Some(inner) = weak.upgrade() {
                    for (case, line) in inner
                        .running
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .iter()
                    {
                        if let (Some(bar), Some(_)) = (&line.bar, &line.fault) {
                            bar.set_message(message(case, line));
                        }
                    }
                    drop(inner);
                    std::thread::sleep(Duration::from_millis(500)); // display refresh, not a wait in harness logic
                }
            });
        }
        p
    }

    fn stamp(&self) -> String {
        let s = self.inner.start.elapsed().unwrap_or_default().as_secs_f64();
        format!("[{s:7.1}s]")
    }

    pub(super) fn start(&self, case: &str) {
        let bar = self.inner.fancy.as_ref().map(|(multi, _)| {
            let b = multi.add(ProgressBar::new_spinner());
            b.set_message(format!("{case}: starting"));
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        if bar.is_none() {
            tell!("{} start {case}", self.stamp());
        }
        self.inner
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                case.to_string(),
                Line {
                    bar,
                    stage: "starting".into(),
                    fault: None,
                },
            );
    }

    /// The engine's listener: stages and fault windows of every running case.
    pub(super) fn listener(&self) -> conformance_core::engine::CaseListener {
        let me = self.clone();
        Arc::new(move |case: &str, e: &Entry| me.on_entry(case, e))
    }

    fn on_entry(&self, case: &str, e: &Entry) {
        let mut running = self.inner.running.lock().unwrap_or_else(|p| p.into_inner());
        let Some(line) = running.get_mut(case) else {
            return;
        };
        let plain = match &e.event {
            Event::Stage(s) if s.status == StageStatus::Started => {
                line.stage = format!("stage {}", s.stage);
                Some(line.stage.clone())
            }
            Event::Fault(f) if f.phase == FaultPhase::Requested => {
                let until = f
                    .requested_ms
                    .map(|ms| SystemTime::now() + Duration::from_millis(ms));
                line.fault = Some((f.kind.clone(), until));
                Some(format!(
                    "fault {} {} requested{}",
                    f.id,
                    f.kind,
                    f.requested_ms
                        .map(|ms| format!(
                            " for {}",
                            humantime::format_duration(Duration::from_millis(ms))
                        ))
                        .unwrap_or_default()
                ))
            }
            Event::Fault(f) if matches!(f.phase, FaultPhase::Ended | FaultPhase::RestoreFailed) => {
                line.fault = None;
                Some(format!("fault {} {} {:?}", f.id, f.kind, f.phase).to_lowercase())
            }
            _ => None,
        };
        match (&line.bar, plain) {
            (Some(bar), Some(_)) => bar.set_message(message(case, line)),
            (None, Some(text)) => tell!("{} {case}: {text}", self.stamp()),
            _ => {}
        }
    }

    pub(super) fn done(&self, r: &CaseReport) {
        let text = format!(
            "{}: {} (virtual {}, wall {} ms)",
            r.case_id,
            r.outcome.name(),
            conformance_core::checks::fmt_ms(r.virtual_ms),
            r.wall_ms
        );
        let line = self
            .inner
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&r.case_id);
        match &self.inner.fancy {
            Some((multi, bar)) => {
                if let Some(b) = line.and_then(|l| l.bar) {
                    b.finish_and_clear();
                    multi.remove(&b);
                }
                let _ = multi.println(text);
                bar.inc(1);
            }
            None => tell!("{} done  {text}", self.stamp()),
        }
    }

    pub(super) fn finish(&self) {
        if let Some((_, bar)) = &self.inner.fancy {
            bar.finish_and_clear();
        }
    }
}

impl conformance_core::pool::CaseObserver for Progress {
    fn started(&self, case_id: &str) {
        self.start(case_id);
    }

    fn finished(&self, report: &CaseReport) {
        self.done(report);
    }
}
