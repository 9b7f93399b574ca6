//! `run` (and the real-cluster commands `doctor`, `cluster`, `restore`).
//!
//! On the emulated target every case gets its own cluster in its own tokio runtime with paused
//! (virtual) time, so the whole catalog runs in seconds and `--jobs` spreads cases over threads.
//! Real targets run in real time against one cluster, one case at a time; the served target
//! runs up to `--jobs` cases at once, each on a served cluster of its own.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::args::{ProviderArgs, RestoreArgs, RunArgs, TargetKind, real_options};
use super::earlier::EarlierRun;
use super::files::write_file;
use super::progress::Progress;
use super::served;
use super::summary;
use conformance_catalog::catalog::{self, Selection};
use conformance_catalog::expectations::Expectations;
use conformance_core::case_verdict::CaseVerdict;
use conformance_core::engine::{CaseReport, EngineOptions, Interrupt};
use conformance_core::error::{Error, ExitStatus};
use conformance_core::pool;
use conformance_core::scenario::Case;
use conformance_core::target::{TargetFactory, TargetInfo};
use conformance_core::topology::{Topologies, Topology};

/// Refuses, before the first case, report paths the run could not write at its end, naming
/// each (exit 2): a long run must not end in "cannot write" with its verdicts unseen.
fn check_outputs(args: &RunArgs) -> Result<(), Error> {
    let (junit, html) = (args.junit_path(), args.html_path());
    let mut inputs = Vec::new();
    if let Some(e) = &args.expectations {
        inputs.push(("the --expectations file", e.as_path()));
    }
    super::files::refuse_unsafe_outputs(
        &[("--junit", junit.as_path()), ("--html", html.as_path())],
        &inputs,
    )?;
    let dir = &args.artifacts;
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::usage_from(
            format!("--artifacts {}: cannot create the directory", dir.display()),
            e,
        )
    })?;
    let probe = dir.join(format!(
        ".openshell-conformance-probe-{}",
        std::process::id()
    ));
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| {
            Error::usage_from(
                format!("--artifacts {}: cannot write there", dir.display()),
                e,
            )
        })?;
    for (flag, path) in [("--junit", junit), ("--html", html)] {
        probe_file(&path).map_err(|e| {
            Error::usage_from(format!("{flag} {}: cannot write it", path.display()), e)
        })?;
    }
    // Refuses files in the way that no earlier run's manifest lists, before anything starts.
    EarlierRun::find(args, &[])?;
    Ok(())
}

/// Checks that the run's end can write `path` the way it will (a temporary file beside it,
/// renamed over it; see [`crate::junit::replace`]), without changing a file that is there.
fn probe_file(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    if path.is_dir() {
        return Err(std::io::Error::other("it is a directory"));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // Dropped at once, so removed again.
    tempfile::Builder::new()
        .prefix(".openshell-conformance-probe-")
        .tempfile_in(dir)?;
    Ok(())
}

/// The run's private directory, cleared when the run ends whatever its exit (a SIGKILL leaves
/// it, with the restore journal that may need its kubeconfig), unless `--keep-private-dir`.
enum PrivateDir {
    /// Made by the run (the default, or a `--private-dir` that did not exist): removed.
    Whole(std::path::PathBuf),
    /// An empty directory of the user's (`--private-dir`): emptied again, left in place.
    Contents(std::path::PathBuf),
}

impl PrivateDir {
    /// Called before the run makes anything there, so an existing `dir` is the user's (checked
    /// empty and private by the options).
    fn of_run(args: &RunArgs, dir: &Path) -> Option<Self> {
        if args.real.keep_private_dir {
            return None;
        }
        let dir = dir.to_path_buf();
        Some(if args.real.private_dir.is_some() && dir.exists() {
            Self::Contents(dir)
        } else {
            Self::Whole(dir)
        })
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let (dir, removed) = match self {
            Self::Whole(dir) => (&*dir, std::fs::remove_dir_all(&*dir)),
            Self::Contents(dir) => (&*dir, empty_dir(dir)),
        };
        if let Err(e) = removed
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tell!(
                "warning: could not remove the credentials in the run's private directory {}: {e}",
                dir.display()
            );
        }
    }
}

/// Removes what is in `dir`, not `dir` itself.
fn empty_dir(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

fn emulated_factory(args: &RunArgs) -> Result<Arc<dyn TargetFactory>, Error> {
    let model = args.model.as_deref().unwrap_or("contract");
    let selection = conformance_models::spec::Selection::parse(
        model,
        &args.defects,
        args.agent_sandbox.as_deref(),
    )
    .map_err(|e| Error::usage(e.to_string()))?;
    Ok(Arc::new(conformance_models::target::EmulatedFactory::new(
        selection,
    )))
}

fn topologies_for(args: &RunArgs, info: &TargetInfo) -> Result<Vec<Topology>, Error> {
    let all = Topologies::builtin();
    // On a real cluster every topology is planned, so the ones the chart cannot run show up as
    // skipped cases with the reason (summary and JUnit) instead of silently missing.
    if args.topologies.is_empty() && args.provider().is_some() {
        return Ok(all.all().cloned().collect());
    }
    if args.topologies.is_empty() {
        return Ok(all
            .all()
            .filter(|t| info.skip_reason(t, &[]).is_none())
            .cloned()
            .collect());
    }
    args.topologies
        .iter()
        .map(|n| all.get(n).cloned())
        .collect()
}

fn select_cases(args: &RunArgs, topologies: &[Topology]) -> Result<Vec<Case>, Error> {
    let sel = Selection {
        patterns: args.scenarios.clone(),
        outage: args.outage,
        seed: args.seed,
    };
    let cases = catalog::cases(topologies, &sel);
    if cases.is_empty() {
        return Err(Error::usage(format!(
            "no case matches --scenario {}; `openshell-conformance list scenarios` shows the ids",
            args.scenarios.join(", ")
        )));
    }
    Ok(cases)
}

fn expectations_for(args: &RunArgs, info: &TargetInfo) -> Result<Expectations, Error> {
    if let Some(path) = &args.expectations {
        return Expectations::load(path);
    }
    let name = info
        .model
        .clone()
        .or_else(|| info.openshell.as_ref().map(|v| format!("openshell-{v}")))
        .unwrap_or_default();
    Ok(Expectations::shipped(&name))
}

pub(super) async fn run(args: RunArgs) -> Result<ExitStatus, Error> {
    let pause_at_start = test_pause(PAUSE_AT_START)?;
    if !pause_at_start.is_zero() {
        tell!("{PAUSE_AT_START}: pausing before anything is checked");
        tokio::time::sleep(pause_at_start).await;
    }
    // Journals of killed served runs: found now, removed with the earlier run's other files
    // once every check has passed.
    let mut ended_journals = Vec::new();
    if !args.dry_run {
        check_outputs(&args)?;
        if args.provider().is_some() {
            ended_journals = check_earlier_journal(&args).await?;
        }
    }
    if args.openshell_binaries.is_some() && args.target != TargetKind::Served {
        return Err(Error::usage(
            "--openshell-binaries runs the real OpenShell binaries as pods of a served cluster; use it with --target served",
        ));
    }
    // A private directory the run made for itself (no --private-dir) holds client keys and
    // kubeconfigs: it is removed when the run ends, whatever its exit. A killed run leaves it,
    // with the restore journal that may need its kubeconfig.
    let mut _private: Option<PrivateDir> = None;
    let (factory, info): (Arc<dyn TargetFactory>, TargetInfo) = match args.provider() {
        None => {
            if args.real.keep || !args.real.set.is_empty() || !args.real.values.is_empty() {
                return Err(Error::usage(
                    "--keep, --set and --values apply to real targets (--target kind|k3d|existing)",
                ));
            }
            // The emulated target models the Agent Sandbox release `--agent-sandbox` names; the
            // real targets' flags would be ignored here, and the verdicts can differ by release.
            if args.real.agent_sandbox_version != "auto"
                || args.real.agent_sandbox_manifest.is_some()
            {
                return Err(Error::usage(
                    "--agent-sandbox-version and --agent-sandbox-manifest apply to real and served targets; on the emulated target the Agent Sandbox release is --agent-sandbox (e.g. --agent-sandbox v0.5.0)",
                ));
            }
            let f = emulated_factory(&args)?;
            let info = f.info();
            (f, info)
        }
        Some(_) if args.target == TargetKind::Served => {
            let plan = served::plan(&args)?;
            _private = PrivateDir::of_run(&args, &plan.opts.private_dir);
            if args.dry_run {
                put!("{}", plan.header());
                let chosen = chosen_topologies(&args)?;
                let chosen: Vec<&Topology> = chosen.iter().collect();
                let opts = plan.dry_run_options(&chosen);
                put!("{}", conformance_real::plan::dry_run(&opts, &chosen)?);
                return Ok(ExitStatus::Success);
            }
            let mut plan = plan;
            check_before_start(&args, &mut plan.opts).await?;
            let f: Arc<dyn TargetFactory> = Arc::new(plan.factory()?);
            let info = f.info();
            (f, info)
        }
        Some(provider) => {
            if args.model.is_some() || !args.defects.is_empty() || args.agent_sandbox.is_some() {
                return Err(Error::usage(
                    "--model, --defect and --agent-sandbox apply to the emulated target only",
                ));
            }
            reject_parallel_jobs(&args)?;
            let opts = real_options(&args.real, provider, &args.artifacts)?;
            _private = PrivateDir::of_run(&args, &opts.private_dir);
            if args.dry_run {
                let chosen = chosen_topologies(&args)?;
                let chosen: Vec<&Topology> = chosen.iter().collect();
                let plan = conformance_real::plan::dry_run(&opts, &chosen)?;
                put!("{plan}");
                return Ok(ExitStatus::Success);
            }
            let mut opts = opts;
            check_before_start(&args, &mut opts).await?;
            let runner: Arc<dyn conformance_real::command::CommandRunner> =
                Arc::new(conformance_real::command::SystemRunner);
            let f = conformance_real::target::RealFactory::new(opts, runner)?;
            f.prepare().await?;
            let f: Arc<dyn TargetFactory> = Arc::new(f);
            let info = f.info();
            (f, info)
        }
    };
    let topologies = topologies_for(&args, &info)?;
    let cases = select_cases(&args, &topologies)?;
    let expectations = expectations_for(&args, &info)?;
    if args.dry_run {
        say!("{} cases on {}:", cases.len(), info.label());
        for c in &cases {
            say!("  {}", c.id());
        }
        return Ok(ExitStatus::Success);
    }
    let pause = pause_after_case()?;
    // From here SIGINT and SIGTERM no longer kill the process: they interrupt the run. Caught
    // before the earlier run's files are removed, so a signal cannot cut the removal short;
    // it is seen once they are gone, and the run then starts interrupted.
    let signals = Signals::install()?;
    let pause_before_clear = test_pause(PAUSE_BEFORE_CLEAR)?;
    if !pause_before_clear.is_zero() {
        tell!("{PAUSE_BEFORE_CLEAR}: pausing before the earlier run's files are removed");
        tokio::time::sleep(pause_before_clear).await;
    }
    // What killed runs left under the temporary directory (keys, tokens) goes now.
    super::leftovers::sweep_temp_dir();
    // Found again: the directory may have changed since check_outputs looked, and now the
    // timelines this run writes are known.
    let timelines: Vec<PathBuf> = cases
        .iter()
        .map(|c| timeline_path(&args, &c.id()))
        .collect();
    let earlier = EarlierRun::find(&args, &timelines)?;
    remove_ended_journals(ended_journals).await?;
    let left = earlier.clear()?;
    if let Some(removed) = earlier.describe() {
        tell!(
            "removed the files of an earlier run from {}: {removed}",
            args.artifacts.display()
        );
    }
    let kept = earlier.kept();
    if !kept.is_empty() {
        tell!(
            "kept in {}, changed since the earlier run wrote them: {}",
            args.artifacts.display(),
            kept.join(", ")
        );
    }
    if !left.is_empty() {
        let left: Vec<String> = left.iter().map(|p| p.display().to_string()).collect();
        tell!(
            "kept {}: left by a removal a kill cut short, and listed in no manifest there",
            left.join(", ")
        );
    }
    let progress = Progress::new(cases.len());
    let interrupt = Interrupt::default();
    let opts = EngineOptions {
        seed: args.seed,
        keep_on_failure: args.keep_on_failure,
        listener: Some(progress.listener()),
        interrupt: interrupt.clone(),
        // Each case's timeline records the known failures that name it, so its verdict is the
        // same whether the run, `check` or `report` gives it.
        expected: Some({
            let e = expectations.clone();
            std::sync::Arc::new(move |case_id: &str| e.for_case(case_id))
        }),
        ..EngineOptions::default()
    };
    let journal = (args.target != TargetKind::Served).then(|| journal_path(&args));
    // Held while the results are written: a second signal then waits for them, so the
    // directory never holds part of this run's reports (timelines without their JUnit).
    let writing = Arc::new(std::sync::Mutex::new(()));
    // Set by a second signal that waits for the results: the run then exits as interrupted
    // whichever of the two ends the process first.
    let second_while_writing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = tokio::spawn(signals.interrupt(
        interrupt.clone(),
        journal,
        writing.clone(),
        second_while_writing.clone(),
    ));
    let wall = std::time::SystemTime::now();
    let real = crate::clock::RealStopwatch::start();
    let jobs = args.jobs();
    let reports = if args.provider().is_none() {
        let observer = Paced {
            inner: progress.clone(),
            pause,
            interrupt: interrupt.clone(),
        };
        tokio::task::spawn_blocking(move || pool::run_paused(factory, opts, cases, jobs, &observer))
            .await
            .map_err(|e| Error::infra_from("the case pool stopped", e))?
    } else if args.target == TargetKind::Served && jobs > 1 {
        // Each case on a served cluster of its own: nothing one case does reaches another.
        pool::run_isolated(factory, opts, cases, jobs, &progress).await
    } else {
        pool::run_shared(factory, opts, cases, jobs, &progress).await
    };
    progress.finish();
    let wall = wall.elapsed().unwrap_or_default();
    let status = {
        let _writing = writing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        finish(&args, &info, &reports, wall, interrupt.raised())
    };
    let status = match interrupt.raised() {
        Some(first) if second_while_writing.load(std::sync::atomic::Ordering::SeqCst) => {
            status.map(|_| interrupted_status(first))
        }
        _ => status,
    };
    if let Some(line) = real.summary(wall) {
        say!("{line}");
    }
    // A signal arriving while the results are written still ends the process the second time.
    if interrupt.raised().is_none() {
        watcher.abort();
    }
    status
}

/// What a real or served run can only check by running or downloading it, checked before
/// anything of an earlier run is removed or started: the openshell CLI answers as one, and the
/// Agent Sandbox release manifest is downloaded (a release that does not exist: exit 2; a
/// download that fails: exit 3, with the earlier run's files still in place).
async fn check_before_start(
    args: &RunArgs,
    opts: &mut conformance_real::options::RealOptions,
) -> Result<(), Error> {
    conformance_real::fetch::openshell_cli(&opts.openshell_bin).await?;
    let typed = !matches!(args.real.agent_sandbox_version.as_str(), "" | "auto");
    conformance_real::fetch::agent_sandbox_manifest(opts, typed).await?;
    conformance_real::fetch::chart(opts, &conformance_real::command::SystemRunner).await
}

/// Cases share one OpenShell release per topology and each case's teardown checks the gateway
/// it left, so cases running side by side on one cluster would judge each other's doing.
fn reject_parallel_jobs(args: &RunArgs) -> Result<(), Error> {
    if args.jobs.is_some_and(|n| n > 1) {
        return Err(Error::usage(
            "--jobs above 1 applies to the emulated and served targets only: on a kind, k3d or existing cluster the cases of a topology share one OpenShell release, so cases run one at a time",
        ));
    }
    Ok(())
}

/// The topologies a real target's `--dry-run` plans: `--topology`, or every one.
fn chosen_topologies(args: &RunArgs) -> Result<Vec<Topology>, Error> {
    let topologies = Topologies::builtin();
    if args.topologies.is_empty() {
        return Ok(topologies.all().cloned().collect());
    }
    args.topologies
        .iter()
        .map(|n| topologies.get(n).cloned())
        .collect()
}

/// Test knob: `OPENSHELL_CONFORMANCE_TEST_PAUSE_AFTER_CASE` (a duration) makes the emulated
/// pool wait that long on the wall clock after each case, so a test can interrupt a run that
/// would otherwise end within a second of virtual time. Not for ordinary use.
pub(crate) const PAUSE_AFTER_CASE: &str = "OPENSHELL_CONFORMANCE_TEST_PAUSE_AFTER_CASE";

/// Test knob: `OPENSHELL_CONFORMANCE_TEST_PAUSE_BEFORE_CLEAR` (a duration) makes the run wait
/// that long on the wall clock just before it removes the earlier run's files, so a test can
/// signal it at that moment. Not for ordinary use.
pub(crate) const PAUSE_BEFORE_CLEAR: &str = "OPENSHELL_CONFORMANCE_TEST_PAUSE_BEFORE_CLEAR";

/// Test knob: `OPENSHELL_CONFORMANCE_TEST_PAUSE_AT_START` (a duration) makes `run` wait that
/// long first, before its own signal handling, so a test can signal it then. Not for ordinary
/// use.
pub(crate) const PAUSE_AT_START: &str = "OPENSHELL_CONFORMANCE_TEST_PAUSE_AT_START";

/// Test knob: `OPENSHELL_CONFORMANCE_TEST_PAUSE_WHILE_WRITING` (a duration) makes the run wait
/// that long after it wrote the timelines and before the JUnit, so a test can signal it while
/// its results are half written. Not for ordinary use.
pub(crate) const PAUSE_WHILE_WRITING: &str = "OPENSHELL_CONFORMANCE_TEST_PAUSE_WHILE_WRITING";

fn pause_after_case() -> Result<Duration, Error> {
    test_pause(PAUSE_AFTER_CASE)
}

fn test_pause(knob: &str) -> Result<Duration, Error> {
    match std::env::var(knob) {
        Err(_) => Ok(Duration::ZERO),
        Ok(v) => humantime::parse_duration(&v).map_err(|e| {
            Error::usage(format!(
                "{knob}={v} is not a duration ({e}); write it like 500ms or 2s"
            ))
        }),
    }
}

/// The progress display, and after each case the test pause ([`PAUSE_AFTER_CASE`]), cut short
/// by an interrupt.
struct Paced {
    inner: Progress,
    pause: Duration,
    interrupt: Interrupt,
}

impl pool::CaseObserver for Paced {
    fn started(&self, case_id: &str) {
        pool::CaseObserver::started(&self.inner, case_id);
    }

    fn finished(&self, report: &CaseReport) {
        pool::CaseObserver::finished(&self.inner, report);
        // A pool thread outside any runtime: a plain sleep in short slices, so an interrupt
        // ends the pause within 50 ms.
        let until = std::time::Instant::now() + self.pause;
        while self.interrupt.raised().is_none() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// SIGINT and SIGTERM, caught from the moment they are installed.
struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Self, Error> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let int = signal(SignalKind::interrupt())
                .map_err(|e| Error::infra_from("cannot catch SIGINT", e))?;
            let term = signal(SignalKind::terminate())
                .map_err(|e| Error::infra_from("cannot catch SIGTERM", e))?;
            crate::early_signals::run_catches();
            Ok(Self { int, term })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            // Biased: when both are pending, SIGINT wins, so the exit code does not depend
            // on which branch tokio happens to poll first.
            tokio::select! {
                biased;
                _ = self.int.recv() => "SIGINT",
                _ = self.term.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }

    /// The first signal interrupts the run (cases restore their faults, results are written);
    /// a second one ends the process at once, leaving what is not restored to the journal.
    /// `journal`: where faults left active are, unless the cluster ends with this process.
    async fn interrupt(
        mut self,
        interrupt: Interrupt,
        journal: Option<PathBuf>,
        writing: Arc<std::sync::Mutex<()>>,
        second_while_writing: Arc<std::sync::atomic::AtomicBool>,
    ) {
        let first = self.next().await;
        tell!(
            "{first}: interrupting the run; restoring faults and writing the results of the \
             finished cases (a second signal exits at once)"
        );
        interrupt.raise(first);
        let second = self.next().await;
        let being_written = match writing.try_lock() {
            // Kept locked: the results cannot start being written while the process exits.
            Ok(guard) => {
                std::mem::forget(guard);
                false
            }
            Err(_) => true,
        };
        if being_written {
            second_while_writing.store(true, std::sync::atomic::Ordering::SeqCst);
            tell!("{second}, a second signal: exiting once the results being written are written");
            let _ = tokio::task::spawn_blocking(move || {
                drop(writing.lock());
            })
            .await;
            std::process::exit(interrupted_status(first).code().into());
        }
        match journal {
            Some(journal) => tell!(
                "{second}, a second signal: exiting at once without writing results; faults still active are in {} \
                 (`openshell-conformance restore --journal {}` undoes them on a real cluster)",
                journal.display(),
                journal.display()
            ),
            None => tell!(
                "{second}, a second signal: exiting at once without writing results; the served cluster ends with this process"
            ),
        }
        std::process::exit(interrupted_status(first).code().into());
    }
}

fn interrupted_status(signal: &str) -> ExitStatus {
    if signal == "SIGTERM" {
        ExitStatus::Terminated
    } else {
        ExitStatus::Interrupted
    }
}

/// Where the real path keeps its restore journal: the run directory (`--run-dir`, by default
/// the artifacts directory), as the target writes it.
fn journal_path(args: &RunArgs) -> PathBuf {
    args.real
        .run_dir
        .as_deref()
        .unwrap_or(&args.artifacts)
        .join(conformance_real::journal::FILE_NAME)
}

/// Refuses a restore journal with faults an earlier run left on a cluster that outlived it, and
/// returns a served run's (see [`conformance_real::journal::earlier`]) for the run to remove
/// once every other check passed: in the run directory, where this run writes its own, and in
/// the artifacts directory, where a run without `--run-dir` kept it, so neither directory hides
/// active faults from the other.
async fn check_earlier_journal(args: &RunArgs) -> Result<Vec<(PathBuf, usize)>, Error> {
    let mut paths = vec![journal_path(args)];
    let in_artifacts = args.artifacts.join(conformance_real::journal::FILE_NAME);
    if conformance_real::options::resolved(&in_artifacts)
        != conformance_real::options::resolved(&paths[0])
    {
        paths.push(in_artifacts);
    }
    let mut ended = Vec::new();
    for path in paths {
        if let conformance_real::journal::Earlier::Ended(n) =
            conformance_real::journal::earlier(&path).await?
        {
            ended.push((path, n));
        }
    }
    Ok(ended)
}

/// Removes the journals of killed served runs [`check_earlier_journal`] found, saying so.
async fn remove_ended_journals(ended: Vec<(PathBuf, usize)>) -> Result<(), Error> {
    for (path, n) in ended {
        conformance_real::journal::remove_ended(&path).await?;
        tell!(
            "removed {}, the restore journal of a killed served run ({n} fault(s) on its cluster, which ended with it)",
            path.display()
        );
    }
    Ok(())
}

/// Where the run writes a case's timeline.
fn timeline_path(args: &RunArgs, case_id: &str) -> PathBuf {
    args.artifacts
        .join("timelines")
        .join(format!("{}.jsonl", sanitize(case_id)))
}

fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.=,".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes timelines, JUnit and HTML, prints the summary, and decides the exit status.
fn finish(
    args: &RunArgs,
    info: &TargetInfo,
    reports: &[CaseReport],
    wall: Duration,
    interrupted: Option<&'static str>,
) -> Result<ExitStatus, Error> {
    let verdicts: Vec<CaseVerdict> = reports.iter().map(CaseReport::verdict).collect();
    let dir = &args.artifacts;
    let tl_dir = dir.join("timelines");
    // Only finished cases have a timeline `check` can judge; the JUnit names every case.
    let finished: Vec<&CaseReport> = reports
        .iter()
        .filter(|r| !r.outcome.is_interrupted())
        .collect();
    let mut links = Vec::new();
    for r in &finished {
        let mut l = vec![("timeline".to_string(), timeline_path(args, &r.case_id))];
        // The bundle the case's timeline names (real targets write `<topology>-<ms>.tar.gz`;
        // the report looked for one named after the case, so it never linked one).
        if let Some(bundle) = conformance_real::bundle_of(&r.timeline).filter(|b| b.exists()) {
            l.push(("diagnostics".into(), bundle));
        }
        links.push(l);
    }
    let junit = args.junit_path();
    let html_path = args.html_path();
    let views: Vec<crate::report::CaseView<'_>> = finished
        .iter()
        .zip(links)
        .map(|(r, links)| crate::report::CaseView {
            timeline: &r.timeline,
            links: links
                .into_iter()
                .map(|(label, path)| (label, relative_to(&html_path, &path)))
                .collect(),
        })
        .collect();
    let mut title = crate::report::title(&info.kind, info.model.as_deref(), &info.defects);
    if let Some(why) = interrupted {
        title.push_str(&format!(" (interrupted by {why})"));
    }
    // The HTML report renders on a thread of its own while the timelines and the JUnit are
    // written: the run's cases are done, so the machine's other cores are idle.
    let pause_while_writing = test_pause(PAUSE_WHILE_WRITING)?;
    let html = std::thread::scope(|s| -> Result<String, Error> {
        let render = s.spawn(|| crate::report::render(&title, &views));
        for r in &finished {
            write_file(&timeline_path(args, &r.case_id), &r.timeline.to_jsonl())?;
        }
        if !pause_while_writing.is_zero() {
            tell!("{PAUSE_WHILE_WRITING}: pausing between the timelines and the JUnit");
            std::thread::sleep(pause_while_writing);
        }
        crate::junit::write(&junit, "openshell-conformance", reports, &verdicts)
            .map_err(|e| Error::usage_from(format!("cannot write {}", junit.display()), e))?;
        Ok(render
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })?;
    write_file(&html_path, &html)?;
    // What the next run may remove: everything written here, and the diagnostics bundles the
    // cases wrote under the artifacts directory.
    let mut written: Vec<PathBuf> = finished
        .iter()
        .map(|r| timeline_path(args, &r.case_id))
        .collect();
    written.extend([junit.clone(), html_path.clone()]);
    for r in reports {
        if let Some(archive) = conformance_real::bundle_of(&r.timeline) {
            if let Some(dir) = archive.to_str().and_then(|a| a.strip_suffix(".tar.gz")) {
                files_under(Path::new(dir), &mut written);
            }
            written.push(archive);
        }
    }
    // Bundles in a `--run-dir` elsewhere are not the artifacts directory's to list.
    let base = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
    written.retain(|p| {
        *p == junit || *p == html_path || std::path::absolute(p).is_ok_and(|a| a.starts_with(&base))
    });
    super::earlier::write_manifest(dir, &written)?;

    put!("{}", summary::table(reports, &verdicts, wall));
    say!(
        "reports: {} (JUnit), {} (HTML), {} (timelines)",
        junit.display(),
        html_path.display(),
        tl_dir.display()
    );
    if let Some(why) = interrupted {
        say!(
            "interrupted by {why}: {} of {} cases finished; the JUnit marks the others as \
             interrupted errors",
            finished.len(),
            reports.len()
        );
        return Ok(interrupted_status(why));
    }
    let status = if verdicts
        .iter()
        .any(|v| matches!(v, CaseVerdict::Error { .. }))
    {
        ExitStatus::Infrastructure
    } else if verdicts.iter().all(CaseVerdict::acceptable) {
        ExitStatus::Success
    } else {
        ExitStatus::ProductFailure
    };
    Ok(status)
}

/// The files under `dir` (none if it is not a directory), symbolic links not followed.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        match e.file_type() {
            Ok(t) if t.is_dir() => files_under(&e.path(), out),
            Ok(t) if t.is_file() => out.push(e.path()),
            _ => {}
        }
    }
}

/// A link from the report to a file beside it, relative when both are under one directory.
fn relative_to(report: &Path, target: &Path) -> String {
    let base = report.parent().unwrap_or(Path::new(""));
    match target.strip_prefix(base) {
        Ok(rel) => rel.display().to_string(),
        Err(_) => std::fs::canonicalize(target)
            .map(|p| format!("file://{}", p.display()))
            .unwrap_or_else(|_| target.display().to_string()),
    }
}

pub(super) async fn doctor(args: ProviderArgs) -> Result<ExitStatus, Error> {
    let opts = real_options(&args.real, args.provider, Path::new("artifacts"))?;
    let report =
        conformance_real::doctor::run_for(&opts, &conformance_real::command::SystemRunner).await;
    put!("{report}");
    Ok(report.exit_status())
}

pub(super) async fn cluster(args: ProviderArgs, up: bool) -> Result<ExitStatus, Error> {
    let opts = real_options(&args.real, args.provider, Path::new("artifacts"))?;
    let p = conformance_real::cluster::provider(&opts);
    let runner = conformance_real::command::SystemRunner;
    if up {
        conformance_real::cluster::create_private_dir(&opts)?;
        let c = p.up(&runner).await?;
        say!(
            "cluster ready: context {}{}{}",
            c.context,
            c.kubeconfig
                .as_ref()
                .map(|k| format!(", kubeconfig {}", k.display()))
                .unwrap_or_default(),
            if c.reused { " (reused)" } else { "" }
        );
    } else {
        p.down(&runner).await?;
        say!("cluster {} deleted", opts.cluster_name);
    }
    Ok(ExitStatus::Success)
}

pub(super) async fn restore(args: &RestoreArgs) -> Result<ExitStatus, Error> {
    let report = conformance_real::journal::restore(
        &args.journal,
        &args.allow_context,
        Duration::from_secs(600),
    )
    .await?;
    put!("{report}");
    Ok(if report.failed.is_empty() {
        ExitStatus::Success
    } else {
        ExitStatus::Infrastructure
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use clap::Parser;

    fn jobs(args: &[&str]) -> usize {
        let cli = Cli::try_parse_from(["openshell-conformance", "run"].iter().chain(args))
            .expect("the arguments parse");
        match cli.command {
            Command::Run(run) => run.jobs(),
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn without_jobs_the_emulated_target_uses_the_machines_parallelism_served_its_default_and_real_targets_one()
     {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get().min(64));
        assert_eq!(jobs(&[]), cores);
        assert_eq!(jobs(&["--target", "kind"]), 1);
        assert_eq!(jobs(&["--jobs", "3"]), 3);
        assert_eq!(jobs(&["--target", "k3d", "--jobs", "1"]), 1);
        assert_eq!(
            jobs(&["--target", "served"]),
            super::super::args::SERVED_JOBS
        );
        assert_eq!(jobs(&["--target", "served", "--jobs", "1"]), 1);
    }
}
