//! Progress while a run goes: on a terminal, an overall bar plus one line per running case;
//! otherwise plain, timestamped lines (CI logs).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::engine::CaseReport;

#[derive(Clone)]
pub struct Progress {
    inner: Arc<Inner>,
}

struct Inner {
    start: std::time::SystemTime,
    fancy: Option<(MultiProgress, ProgressBar)>,
    running: Mutex<BTreeMap<String, ProgressBar>>,
}

impl Progress {
    pub fn new(total: usize) -> Self {
        let fancy = std::io::stderr().is_terminal().then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let bar = multi.add(ProgressBar::new(total as u64));
            bar.set_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} cases {elapsed}")
                    .expect("a valid template"),
            );
            (multi, bar)
        });
        Self {
            inner: Arc::new(Inner {
                start: std::time::SystemTime::now(),
                fancy,
                running: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    fn stamp(&self) -> String {
        let s = self.inner.start.elapsed().unwrap_or_default().as_secs_f64();
        format!("[{s:7.1}s]")
    }

    pub fn start(&self, case: &str) {
        match &self.inner.fancy {
            Some((multi, _)) => {
                let line = multi.add(ProgressBar::new_spinner());
                line.set_message(format!("{case}: running"));
                line.enable_steady_tick(std::time::Duration::from_millis(200));
                self.inner
                    .running
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(case.to_string(), line);
            }
            None => eprintln!("{} start {case}", self.stamp()),
        }
    }

    pub fn done(&self, r: &CaseReport) {
        let text = format!(
            "{}: {} (virtual {}, wall {} ms)",
            r.case_id,
            r.outcome.name(),
            crate::checks::fmt_ms(r.virtual_ms),
            r.wall_ms
        );
        match &self.inner.fancy {
            Some((multi, bar)) => {
                if let Some(line) = self
                    .inner
                    .running
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&r.case_id)
                {
                    line.finish_and_clear();
                    multi.remove(&line);
                }
                let _ = multi.println(text);
                bar.inc(1);
            }
            None => eprintln!("{} done  {text}", self.stamp()),
        }
    }

    pub fn finish(&self) {
        if let Some((_, bar)) = &self.inner.fancy {
            bar.finish_and_clear();
        }
    }
}
