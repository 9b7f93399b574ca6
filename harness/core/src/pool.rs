//! How a set of cases runs. Three pools:
//! - [`run_paused`]: every case gets its own target and its own current-thread runtime in
//!   paused (virtual) time, so cases are independent and `jobs` threads run them side by side;
//! - [`run_shared`]: real time against one shared cluster, where a fault on the gateway reaches
//!   every sandbox on it, so cases that declare such a fault ([`Case::touches_shared_gateway`])
//!   run alone, after the others ran `jobs` at a time;
//! - [`run_isolated`]: real time, every case running at once on a cluster of its own (served
//!   clusters), `jobs` at a time.
//!
//! Both return the reports in the order of the cases given.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use crate::engine::{CaseReport, Engine, EngineOptions};
use crate::scenario::Case;
use crate::target::TargetFactory;

/// Told when each case starts and ends (progress displays, benchmarks).
pub trait CaseObserver: Send + Sync {
    fn started(&self, _case_id: &str) {}
    fn finished(&self, _report: &CaseReport) {}
}

/// Observes nothing.
impl CaseObserver for () {}

/// Runs each case on its own current-thread runtime in paused time, `jobs` at once (at least
/// one). Blocks the calling thread; from async code, call it through `spawn_blocking`.
pub fn run_paused(
    factory: Arc<dyn TargetFactory>,
    opts: EngineOptions,
    cases: Vec<Case>,
    jobs: usize,
    observer: &dyn CaseObserver,
) -> Vec<CaseReport> {
    let work = cases.into_iter().map(|c| (factory.clone(), c)).collect();
    run_paused_mixed(work, opts, jobs, observer)
}

/// As [`run_paused`], each case on the target factory paired with it: one pool for several
/// models or defect switches (the whole proof), so no thread idles while one selection's last
/// long case runs. Reports come back in the order given.
pub fn run_paused_mixed(
    work: Vec<(Arc<dyn TargetFactory>, Case)>,
    opts: EngineOptions,
    jobs: usize,
    observer: &dyn CaseObserver,
) -> Vec<CaseReport> {
    let n = work.len();
    let mut work: Vec<_> = work.into_iter().enumerate().collect();
    longest_first(&mut work, |(_, (_, case))| case);
    let queue = Mutex::new(work.into_iter().collect::<VecDeque<_>>());
    let results = Mutex::new(Vec::with_capacity(n));
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, n.max(1)) {
            s.spawn(|| {
                loop {
                    let next = queue
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .pop_front();
                    let Some((i, (factory, case))) = next else {
                        break;
                    };
                    observer.started(&case.id());
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .start_paused(true)
                        .build()
                        .expect("a current-thread runtime builds");
                    let engine = Engine::new(factory, opts.clone());
                    let report = rt.block_on(engine.run_case(&case));
                    // The case's cluster and tasks go with its runtime, before the next starts.
                    drop(rt);
                    observer.finished(&report);
                    results
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((i, report));
                }
            });
        }
    });
    in_order(results.into_inner().unwrap_or_else(PoisonError::into_inner))
}

/// Orders work longest case first (stably), so that no worker is left with one long case while
/// the others idle at the end. The time a case's faults are planned to hold is what sets its
/// length: a seeded sweep's twenty minutes of outages cost several times what a single fault's
/// case does.
fn longest_first<T>(work: &mut [T], case: impl Fn(&T) -> &Case) {
    work.sort_by_key(|w| std::cmp::Reverse(case(w).params.requested_holds()));
}

/// Runs the cases in real time, each on a target of its own (the factory gives every case
/// running at once a cluster of its own, as `run --target served` does), `jobs` at once,
/// longest first (see [`longest_first`]). After a topology's last case ended the factory
/// releases it ([`TargetFactory::release`]); a release that fails makes that case an error, if
/// it had passed, as in [`run_shared`]. Nothing one case does reaches another, so cases that
/// stop the gateway run side by side too.
pub async fn run_isolated(
    factory: Arc<dyn TargetFactory>,
    opts: EngineOptions,
    cases: Vec<Case>,
    jobs: usize,
    observer: &dyn CaseObserver,
) -> Vec<CaseReport> {
    use futures::StreamExt;
    let engine = Engine::new(factory.clone(), opts);
    let mut left = std::collections::BTreeMap::<String, usize>::new();
    for c in &cases {
        *left.entry(c.topology.name.clone()).or_default() += 1;
    }
    let left = Mutex::new(left);
    let mut work: Vec<(usize, Case)> = cases.into_iter().enumerate().collect();
    longest_first(&mut work, |(_, case)| case);
    let run = |(i, case): (usize, Case)| {
        let (engine, factory, left) = (&engine, &factory, &left);
        async move {
            observer.started(&case.id());
            let mut report = engine.run_case(&case).await;
            observer.finished(&report);
            let last = {
                let mut left = left.lock().unwrap_or_else(PoisonError::into_inner);
                let n = left.entry(case.topology.name.clone()).or_default();
                *n = n.saturating_sub(1);
                *n == 0
            };
            if last && let Err(e) = factory.release(&case.topology).await {
                release_failed(&mut report, &case.topology, &e);
            }
            (i, report)
        }
    };
    let out: Vec<(usize, CaseReport)> = futures::stream::iter(work.into_iter().map(run))
        .buffer_unordered(jobs.max(1))
        .collect()
        .await;
    in_order(out)
}

/// Makes the last case of a topology whose release failed say so: its teardown stage whatever
/// its verdict, and its outcome if it had passed (the run left something behind; the verdict of
/// a case the product failed stays the product's).
fn release_failed(
    last: &mut CaseReport,
    topology: &crate::topology::Topology,
    e: &crate::target::TargetError,
) {
    let e = format!(
        "releasing topology {} after its last case: {}",
        topology.name,
        crate::error::one_line(e)
    );
    if let Some(t) = last
        .stages
        .iter_mut()
        .find(|s| s.stage == crate::scenario::Stage::Teardown)
    {
        t.status = crate::timeline::StageStatus::Error;
        t.message = Some(e.clone());
    }
    if matches!(last.outcome, crate::engine::Outcome::Passed) {
        last.outcome = crate::engine::Outcome::Error(e);
    }
}

/// Runs the cases in real time against one shared target, a topology at a time (in the order
/// its first case was given), so what the target sets up once per topology serves all its cases:
/// within a topology, the cases that leave the gateway alone `jobs` at a time, then those that
/// touch it one by one; after a topology's last case the factory releases it
/// ([`TargetFactory::release`]). A release that fails makes that last case an error, if it had
/// passed: the run left something behind.
pub async fn run_shared(
    factory: Arc<dyn TargetFactory>,
    opts: EngineOptions,
    cases: Vec<Case>,
    jobs: usize,
    observer: &dyn CaseObserver,
) -> Vec<CaseReport> {
    let engine = Engine::new(factory.clone(), opts);
    let mut by_topology: Vec<(crate::topology::Topology, Vec<(usize, Case)>)> = Vec::new();
    for (i, c) in cases.into_iter().enumerate() {
        match by_topology
            .iter_mut()
            .find(|(t, _)| t.name == c.topology.name)
        {
            Some((_, v)) => v.push((i, c)),
            None => by_topology.push((c.topology.clone(), vec![(i, c)])),
        }
    }
    let run = |i: usize, case: Case| {
        let engine = &engine;
        async move {
            observer.started(&case.id());
            let report = engine.run_case(&case).await;
            observer.finished(&report);
            (i, report)
        }
    };
    let mut out = Vec::new();
    for (topology, cases) in by_topology {
        let (alone, side_by_side): (Vec<_>, Vec<_>) = cases
            .into_iter()
            .partition(|(_, c)| c.touches_shared_gateway());
        let mut side_by_side = side_by_side.into_iter().peekable();
        while side_by_side.peek().is_some() {
            let batch = side_by_side.by_ref().take(jobs.max(1));
            out.extend(futures::future::join_all(batch.map(|(i, c)| run(i, c))).await);
        }
        for (i, case) in alone {
            out.push(run(i, case).await);
        }
        if let Err(e) = factory.release(&topology).await
            && let Some((_, last)) = out.last_mut()
        {
            release_failed(last, &topology, &e);
        }
    }
    in_order(out)
}

fn in_order(mut reports: Vec<(usize, CaseReport)>) -> Vec<CaseReport> {
    reports.sort_by_key(|(i, _)| *i);
    reports.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Params;
    use crate::target::Capability;
    use crate::testkit::{Factory, Quirk, scenario, standard_steps, topology};

    /// Records the order cases start and end in.
    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);

    impl CaseObserver for Log {
        fn started(&self, id: &str) {
            self.0.lock().unwrap().push(format!("start {id}"));
        }
        fn finished(&self, r: &CaseReport) {
            self.0.lock().unwrap().push(format!("end {}", r.case_id));
        }
    }

    /// A case whose scenario declares no fault of the gateway.
    fn quiet_case(name: &str) -> Case {
        Case::new(
            scenario(standard_steps(), vec![]),
            topology(),
            Params::default()
                .with_outage(std::time::Duration::from_secs(30))
                .with("name", name),
        )
    }

    /// A case whose variant declares a gateway restart (its scenario does not).
    fn gateway_case(name: &str) -> Case {
        let mut c = quiet_case(name);
        c.params = c.params.requiring(Capability::GatewayRestart);
        c
    }

    #[test]
    fn paused_cases_come_back_in_the_order_given_whatever_the_jobs() {
        let cases: Vec<Case> = ["a", "b", "c", "d", "e"].map(quiet_case).to_vec();
        let ids: Vec<String> = cases.iter().map(Case::id).collect();
        for jobs in [0, 1, 2, 8] {
            let reports = run_paused(
                Factory::new(Quirk::None),
                EngineOptions::default(),
                cases.clone(),
                jobs,
                &(),
            );
            let got: Vec<String> = reports.iter().map(|r| r.case_id.clone()).collect();
            assert_eq!(got, ids, "jobs {jobs}");
        }
    }

    #[test]
    fn a_mixed_pool_runs_each_case_on_its_own_factory_and_reports_in_the_order_given() {
        let install_fails = Factory::new(Quirk::InstallFails);
        let fine = Factory::new(Quirk::None);
        let work: Vec<(Arc<dyn TargetFactory>, Case)> = ["a", "b", "c", "d"]
            .into_iter()
            .enumerate()
            .map(|(i, n)| {
                let f: Arc<dyn TargetFactory> = if i % 2 == 0 {
                    fine.clone()
                } else {
                    install_fails.clone()
                };
                (f, quiet_case(n))
            })
            .collect();
        let ids: Vec<String> = work.iter().map(|(_, c)| c.id()).collect();
        for jobs in [1, 3] {
            let reports = run_paused_mixed(work.clone(), EngineOptions::default(), jobs, &());
            let got: Vec<String> = reports.iter().map(|r| r.case_id.clone()).collect();
            assert_eq!(got, ids, "jobs {jobs}");
            let passed: Vec<bool> = reports
                .iter()
                .map(|r| r.outcome == crate::engine::Outcome::Passed)
                .collect();
            assert_eq!(passed, [true, false, true, false], "jobs {jobs}");
        }
    }

    /// Interrupts the run when the first case ends.
    struct InterruptAfterFirst(crate::engine::Interrupt);

    impl CaseObserver for InterruptAfterFirst {
        fn finished(&self, _r: &CaseReport) {
            self.0.raise("SIGINT");
        }
    }

    #[test]
    fn after_an_interrupt_the_paused_pool_starts_no_case_and_still_reports_every_case_in_order() {
        let cases: Vec<Case> = ["a", "b", "c"].map(quiet_case).to_vec();
        let opts = EngineOptions::default();
        let observer = InterruptAfterFirst(opts.interrupt.clone());
        let f = Factory::new(Quirk::None);
        let reports = run_paused(f, opts, cases.clone(), 1, &observer);
        let got: Vec<(String, bool)> = reports
            .iter()
            .map(|r| (r.case_id.clone(), r.outcome.is_interrupted()))
            .collect();
        let want: Vec<(String, bool)> = cases
            .iter()
            .zip([false, true, true])
            .map(|(c, i)| (c.id(), i))
            .collect();
        assert_eq!(got, want);
        assert_eq!(reports[0].outcome, crate::engine::Outcome::Passed);
        assert_eq!(
            reports[2].outcome.reason(),
            Some("interrupted by SIGINT: the case did not start")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn on_a_shared_cluster_cases_that_touch_the_gateway_run_alone_after_the_others() {
        let cases = vec![
            gateway_case("g1"),
            quiet_case("q1"),
            quiet_case("q2"),
            gateway_case("g2"),
            quiet_case("q3"),
        ];
        let log = Log::default();
        let reports = run_shared(
            Factory::new(Quirk::None),
            EngineOptions::default(),
            cases.clone(),
            2,
            &log,
        )
        .await;
        let id = |n: &str| format!("outage-demo[combined,outage=30s,name={n}]");
        let got: Vec<String> = reports.iter().map(|r| r.case_id.clone()).collect();
        assert_eq!(got, ["g1", "q1", "q2", "g2", "q3"].map(id));
        let order = log.0.into_inner().unwrap();
        // q1 and q2 run side by side (both start before either ends), then q3; each gateway
        // case starts only after the case before it ended.
        assert_eq!(
            order[..2],
            [format!("start {}", id("q1")), format!("start {}", id("q2"))]
        );
        let mut ends = order[2..4].to_vec();
        ends.sort();
        assert_eq!(
            ends,
            [format!("end {}", id("q1")), format!("end {}", id("q2"))]
        );
        assert_eq!(
            order[4..],
            [
                format!("start {}", id("q3")),
                format!("end {}", id("q3")),
                format!("start {}", id("g1")),
                format!("end {}", id("g1")),
                format!("start {}", id("g2")),
                format!("end {}", id("g2")),
            ]
        );
    }

    /// Logs each case's start and each release, and fails the release of `failing`.
    struct Releasing {
        inner: Arc<Factory>,
        log: Arc<Log>,
        failing: &'static str,
    }

    #[async_trait::async_trait]
    impl TargetFactory for Releasing {
        fn info(&self) -> crate::target::TargetInfo {
            self.inner.info()
        }
        async fn provision(
            &self,
            t: &crate::topology::Topology,
            rec: &crate::timeline::Recorder,
        ) -> crate::target::TargetResult<Arc<dyn crate::target::Target>> {
            self.inner.provision(t, rec).await
        }
        async fn release(&self, t: &crate::topology::Topology) -> crate::target::TargetResult<()> {
            self.log
                .0
                .lock()
                .unwrap()
                .push(format!("release {}", t.name));
            if t.name == self.failing {
                return Err(crate::target::TargetError::infra("helm uninstall failed"));
            }
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn on_a_shared_cluster_cases_run_a_topology_at_a_time_each_released_after_its_last_case()
    {
        let on = |name: &str, topology: &str| {
            let mut c = quiet_case(name);
            c.topology = crate::topology::Topologies::builtin()
                .get(topology)
                .unwrap()
                .clone();
            c
        };
        let cases = vec![
            on("a", "combined"),
            on("b", "sidecar"),
            on("c", "combined"),
            on("d", "sidecar"),
        ];
        let log = Arc::new(Log::default());
        let factory = Arc::new(Releasing {
            inner: Factory::new(Quirk::None),
            log: log.clone(),
            failing: "sidecar",
        });
        let reports = run_shared(factory, EngineOptions::default(), cases, 1, &*log).await;
        let names: Vec<String> = log
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|l| !l.starts_with("end "))
            .map(|l| match l.split_once("name=") {
                Some((_, n)) => format!("start {}", n.trim_end_matches(']')),
                None => l.clone(),
            })
            .collect();
        assert_eq!(
            names,
            [
                "start a",
                "start c",
                "release combined",
                "start b",
                "start d",
                "release sidecar"
            ]
        );
        // Reports stay in the order given; a failed release makes the topology's last case an
        // error that names it.
        let outcomes: Vec<(String, &str)> = reports
            .iter()
            .map(|r| (r.case_id.clone(), r.outcome.name()))
            .collect();
        assert_eq!(
            outcomes.iter().map(|(_, o)| *o).collect::<Vec<_>>(),
            ["passed", "passed", "passed", "error"]
        );
        assert!(outcomes[0].0.contains("name=a") && outcomes[3].0.contains("name=d"));
        assert_eq!(
            reports[3].outcome.reason(),
            Some("releasing topology sidecar after its last case: helm uninstall failed")
        );
    }

    /// A case whose variant stops the gateway (a fault the test factory can inject).
    fn stopping_case(name: &str) -> Case {
        let mut c = quiet_case(name);
        c.params = c.params.requiring(Capability::GatewayStop);
        c
    }

    #[tokio::test(start_paused = true)]
    async fn isolated_cases_run_jobs_at_once_longest_first_gateway_faults_too_reported_in_the_order_given()
     {
        let with_outage = |mut c: Case, secs: u64| {
            c.params = c.params.with_outage(std::time::Duration::from_secs(secs));
            c
        };
        let cases = vec![
            with_outage(quiet_case("short"), 10),
            with_outage(stopping_case("long"), 300),
            with_outage(quiet_case("middle"), 60),
        ];
        let ids: Vec<String> = cases.iter().map(Case::id).collect();
        let log = Log::default();
        let reports = run_isolated(
            Factory::new(Quirk::None),
            EngineOptions::default(),
            cases,
            2,
            &log,
        )
        .await;
        let got: Vec<String> = reports.iter().map(|r| r.case_id.clone()).collect();
        assert_eq!(got, ids);
        let outcomes: Vec<&str> = reports.iter().map(|r| r.outcome.name()).collect();
        assert_eq!(outcomes, ["passed"; 3]);
        assert!(reports[1].case_id.contains("name=long"));
        let order: Vec<String> = log
            .0
            .into_inner()
            .unwrap()
            .iter()
            .map(|l| {
                let (what, id) = l.split_once(' ').unwrap();
                let name = id.split("name=").nth(1).unwrap().trim_end_matches(']');
                format!("{what} {name}")
            })
            .collect();
        // The two longest start at once (the gateway case too: nothing is shared), the short
        // one when the first of them ends.
        assert_eq!(order[..2], ["start long", "start middle"]);
        assert_eq!(order[2..4], ["end middle", "start short"]);
    }

    #[tokio::test(start_paused = true)]
    async fn isolated_cases_release_each_topology_once_after_its_last_case_ended() {
        let on = |name: &str, topology: &str| {
            let mut c = quiet_case(name);
            c.topology = crate::topology::Topologies::builtin()
                .get(topology)
                .unwrap()
                .clone();
            c
        };
        let cases = vec![on("a", "combined"), on("b", "sidecar"), on("c", "combined")];
        let log = Arc::new(Log::default());
        let factory = Arc::new(Releasing {
            inner: Factory::new(Quirk::None),
            log: log.clone(),
            failing: "sidecar",
        });
        let reports = run_isolated(factory, EngineOptions::default(), cases, 3, &*log).await;
        let lines = log.0.lock().unwrap().clone();
        let released: Vec<&String> = lines.iter().filter(|l| l.starts_with("release")).collect();
        assert_eq!(released.len(), 2, "{lines:?}");
        // Each release comes after every case of its topology ended.
        for (topology, names) in [("combined", ["a", "c"].as_slice()), ("sidecar", &["b"])] {
            let at = |l: &str| lines.iter().position(|x| x == l).unwrap();
            let release = at(&format!("release {topology}"));
            for n in names {
                let end = lines
                    .iter()
                    .position(|l| l.starts_with("end ") && l.contains(&format!("name={n}]")))
                    .unwrap();
                assert!(end < release, "{lines:?}");
            }
        }
        let outcomes: Vec<&str> = reports.iter().map(|r| r.outcome.name()).collect();
        assert_eq!(outcomes, ["passed", "error", "passed"]);
        assert_eq!(
            reports[1].outcome.reason(),
            Some("releasing topology sidecar after its last case: helm uninstall failed")
        );
    }

    #[test]
    fn a_case_touches_the_shared_gateway_by_what_its_scenario_or_variant_declares() {
        assert!(!quiet_case("q").touches_shared_gateway());
        assert!(gateway_case("g").touches_shared_gateway());
        let declared = Case::new(
            scenario(standard_steps(), vec![Capability::GatewayStop]),
            topology(),
            Params::default(),
        );
        assert!(declared.touches_shared_gateway());
        let kill = Case::new(
            scenario(standard_steps(), vec![Capability::SupervisorKill]),
            topology(),
            Params::default(),
        );
        assert!(!kill.touches_shared_gateway());
    }
}
