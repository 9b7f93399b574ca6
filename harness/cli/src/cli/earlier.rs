//! What an earlier run left where this run writes: its timelines, diagnostics bundles, JUnit
//! and HTML. They are removed before the cases start, so no file of that run stays beside this
//! run's; the restore journal stays, since it may hold faults a killed run left behind.
//!
//! Only what a run of ours wrote is removed, recognised by its shape: a timeline is a `.jsonl`
//! file whose first line is our opening record, a diagnostics bundle a `<topology>-<ms>`
//! directory and its `.tar.gz`. Anything else in `timelines/` or `diagnostics/` is the user's:
//! the run refuses the directory, naming it, before anything starts or is deleted.
//!
//! The removal is ordered so that a kill at any moment leaves the earlier run's files whole or
//! gone, never a JUnit beside part of its timelines: the JUnit and the HTML go first (one
//! unlink each), then `timelines/` and `diagnostics/` are each moved whole (one rename) into a
//! hidden directory, which is deleted last. A hidden directory a killed run left is deleted by
//! the next run.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};

use super::args::RunArgs;
use conformance_core::error::Error;

/// The prefix of the hidden directory the earlier run's directories are moved into.
const ASIDE_PREFIX: &str = ".openshell-conformance-earlier-";
/// The prefix of the temporary files the run writes and renames (`crate::junit::replace`).
const TEMP_PREFIX: &str = ".openshell-conformance-";
/// The directories of the artifacts a run writes whole.
const DIRS: [&str; 2] = ["timelines", "diagnostics"];

/// One step of the removal, each atomic on its own.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Step {
    /// Unlink a report file.
    Remove(PathBuf),
    /// Rename a directory of the artifacts into the hidden directory.
    MoveAside(PathBuf),
    /// Delete the hidden directories, this run's and any a killed run left.
    DeleteAside,
}

/// The earlier run's files found in the artifacts directory.
#[derive(Debug)]
pub(super) struct EarlierRun {
    artifacts: PathBuf,
    reports: Vec<PathBuf>,
    /// `timelines/` and `diagnostics/`, with how many entries each holds.
    dirs: Vec<(&'static str, usize)>,
    /// Hidden directories of earlier removals a kill cut short.
    stale: Vec<PathBuf>,
}

impl EarlierRun {
    /// Finds what an earlier run left where `args` writes, refusing (exit 2) a `timelines/` or
    /// `diagnostics/` that holds anything a run did not write, naming each such entry.
    pub(super) fn find(args: &RunArgs) -> Result<Self, Error> {
        let artifacts = args.artifacts.clone();
        let mut foreign = Vec::new();
        let mut dirs = Vec::new();
        let builtin = conformance_core::topology::Topologies::builtin();
        let topologies = builtin.names();
        for sub in DIRS {
            let path = artifacts.join(sub);
            match std::fs::symlink_metadata(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(cannot_read(&path, e)),
                Ok(m) if !m.is_dir() => {
                    foreign.push(format!("{sub} (not a directory)"));
                    continue;
                }
                Ok(_) => {}
            }
            let mut n = 0;
            for entry in std::fs::read_dir(&path).map_err(|e| cannot_read(&path, e))? {
                let entry = entry.map_err(|e| cannot_read(&path, e))?;
                n += 1;
                if !is_ours(sub, &entry.path(), &topologies) {
                    foreign.push(format!("{sub}/{}", entry.file_name().to_string_lossy()));
                }
            }
            dirs.push((sub, n));
        }
        if !foreign.is_empty() {
            foreign.sort();
            return Err(Error::usage(format!(
                "--artifacts {}: {} not written by openshell-conformance; a run replaces the \
                 timelines/ and diagnostics/ of the earlier run there, so move {} elsewhere or \
                 give another --artifacts directory",
                artifacts.display(),
                foreign.join(", "),
                if foreign.len() == 1 { "it" } else { "them" },
            )));
        }
        let reports = [args.junit_path(), args.html_path()]
            .into_iter()
            .filter(|p| p.is_file())
            .collect();
        let stale = match std::fs::read_dir(&artifacts) {
            Ok(d) => d
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(ASIDE_PREFIX))
                .map(|e| e.path())
                .collect(),
            Err(_) => Vec::new(),
        };
        Ok(Self {
            artifacts,
            reports,
            dirs,
            stale,
        })
    }

    /// The removal's steps, in the order that keeps the earlier run whole or gone.
    pub(super) fn steps(&self) -> Vec<Step> {
        let mut steps: Vec<Step> = self.reports.iter().cloned().map(Step::Remove).collect();
        steps.extend(
            self.dirs
                .iter()
                .map(|(sub, _)| Step::MoveAside(self.artifacts.join(sub))),
        );
        if !self.dirs.is_empty() || !self.stale.is_empty() {
            steps.push(Step::DeleteAside);
        }
        steps
    }

    /// What is removed, for the message the run prints; None when there is nothing.
    pub(super) fn describe(&self) -> Option<String> {
        let mut removed: Vec<String> = self
            .dirs
            .iter()
            .map(|(sub, n)| format!("{sub}/ ({n} entries)"))
            .collect();
        removed.extend(self.reports.iter().map(|p| p.display().to_string()));
        (!removed.is_empty()).then(|| removed.join(", "))
    }

    /// Removes the earlier run's files, step by step.
    pub(super) fn clear(&self) -> Result<(), Error> {
        let aside = self
            .artifacts
            .join(format!("{ASIDE_PREFIX}{}", std::process::id()));
        for step in self.steps() {
            self.take(&step, &aside)?;
        }
        Ok(())
    }

    /// Carries out one step; `aside` is this run's hidden directory.
    pub(super) fn take(&self, step: &Step, aside: &Path) -> Result<(), Error> {
        let cannot = |p: &Path, e| Error::usage_from(format!("cannot remove {}", p.display()), e);
        match step {
            Step::Remove(path) => match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(cannot(path, e)),
                _ => Ok(()),
            },
            Step::MoveAside(path) => {
                std::fs::create_dir_all(aside).map_err(|e| cannot(path, e))?;
                let name = path.file_name().unwrap_or(path.as_os_str());
                std::fs::rename(path, aside.join(name)).map_err(|e| cannot(path, e))
            }
            Step::DeleteAside => {
                for dir in self.stale.iter().map(PathBuf::as_path).chain([aside]) {
                    match std::fs::remove_dir_all(dir) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                            return Err(cannot(dir, e));
                        }
                        _ => {}
                    }
                }
                Ok(())
            }
        }
    }
}

fn cannot_read(path: &Path, e: std::io::Error) -> Error {
    Error::usage_from(format!("cannot read {}", path.display()), e)
}

/// Whether an entry of `timelines/` or `diagnostics/` is one a run writes.
fn is_ours(sub: &str, path: &Path, topologies: &[&str]) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let meta = std::fs::symlink_metadata(path);
    let is_file = meta.as_ref().is_ok_and(|m| m.is_file());
    let is_dir = meta.as_ref().is_ok_and(|m| m.is_dir());
    // A temporary file a killed run left before renaming it into place.
    if name.starts_with(TEMP_PREFIX) {
        return is_file;
    }
    match sub {
        "timelines" => is_file && name.ends_with(".jsonl") && opens_like_a_timeline(path),
        _ => match name.strip_suffix(".tar.gz") {
            Some(bundle) => is_file && is_bundle_name(bundle, topologies),
            None => is_dir && is_bundle_name(name, topologies),
        },
    }
}

/// Whether the file's first line is the record a run's timeline opens with.
fn opens_like_a_timeline(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut line = Vec::new();
    // The opening record is a few hundred bytes; a longer line is not ours.
    let limit = 1 << 20;
    if std::io::BufReader::new(std::io::Read::take(file, limit))
        .read_until(b'\n', &mut line)
        .is_err()
    {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(&line).is_ok_and(|v| {
        v.get("seq") == Some(&serde_json::json!(1))
            && v.get("type") == Some(&serde_json::json!("run_started"))
    })
}

/// `<topology>-<milliseconds>`, the name the real target gives a case's diagnostics bundle.
fn is_bundle_name(name: &str, topologies: &[&str]) -> bool {
    name.rsplit_once('-').is_some_and(|(topology, ms)| {
        !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit()) && topologies.contains(&topology)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn args(artifacts: &Path) -> RunArgs {
        let cli = super::super::Cli::try_parse_from([
            "openshell-conformance",
            "run",
            "--artifacts",
            artifacts.to_str().unwrap(),
        ])
        .unwrap();
        match cli.command {
            super::super::Command::Run(r) => *r,
            other => panic!("not run: {other:?}"),
        }
    }

    const HEADER: &str = r#"{"seq":1,"at_ms":0,"type":"run_started","scenario":"provisioning"}"#;

    /// What an earlier run of ours leaves: three timelines, a diagnostics bundle, the reports.
    fn earlier_run(art: &Path) {
        std::fs::create_dir_all(art.join("timelines")).unwrap();
        for case in [
            "provisioning_combined_",
            "provisioning_sidecar_",
            "gateway-outage_x_",
        ] {
            std::fs::write(
                art.join(format!("timelines/{case}.jsonl")),
                format!("{HEADER}\n{{\"seq\":2}}\n"),
            )
            .unwrap();
        }
        std::fs::create_dir_all(art.join("diagnostics/combined-1234/openshell")).unwrap();
        std::fs::write(
            art.join("diagnostics/combined-1234/openshell/pods.yaml"),
            "x",
        )
        .unwrap();
        std::fs::write(art.join("diagnostics/combined-1234.tar.gz"), "gz").unwrap();
        std::fs::write(art.join("junit.xml"), "EARLIER RUN").unwrap();
        std::fs::write(art.join("report.html"), "EARLIER RUN").unwrap();
        std::fs::write(art.join(conformance_real::journal::FILE_NAME), "{}").unwrap();
    }

    /// Every file under `dir` but the hidden ones, by path under `dir`, with its bytes.
    fn visible(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
        let mut out = std::collections::BTreeMap::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                if e.file_name().to_string_lossy().starts_with('.') {
                    continue;
                }
                let p = e.path();
                if p.is_dir() {
                    todo.push(p);
                } else {
                    let rel = p.strip_prefix(dir).unwrap().display().to_string();
                    out.insert(rel, std::fs::read(&p).unwrap());
                }
            }
        }
        out
    }

    #[test]
    fn a_directory_with_files_the_run_did_not_write_is_refused_naming_them_and_nothing_is_removed()
    {
        let dir = tempfile::tempdir().unwrap();
        let art = dir.path().join("proj");
        earlier_run(&art);
        std::fs::write(art.join("timelines/mydata.txt"), "mine").unwrap();
        std::fs::write(art.join("timelines/notes.jsonl"), "{\"mine\":1}\n").unwrap();
        std::fs::write(art.join("diagnostics/notes.txt"), "mine").unwrap();
        std::fs::create_dir_all(art.join("diagnostics/mybundle-1")).unwrap();
        let before = visible(&art);
        let err = EarlierRun::find(&args(&art)).unwrap_err();
        assert_eq!(
            err.exit_status(),
            conformance_core::error::ExitStatus::Usage
        );
        let msg = err.to_string();
        for name in [
            "timelines/mydata.txt",
            "timelines/notes.jsonl",
            "diagnostics/notes.txt",
            "diagnostics/mybundle-1",
        ] {
            assert!(msg.contains(name), "{name} is not named: {msg}");
        }
        assert!(msg.contains("move them elsewhere"), "{msg}");
        assert_eq!(visible(&art), before, "something was removed");
    }

    #[test]
    fn an_earlier_run_of_ours_is_removed_whole_and_the_restore_journal_stays() {
        let dir = tempfile::tempdir().unwrap();
        let art = dir.path().join("artifacts");
        earlier_run(&art);
        // A hidden directory a removal cut short by a kill left.
        std::fs::create_dir_all(art.join(format!("{ASIDE_PREFIX}1/timelines"))).unwrap();
        let earlier = EarlierRun::find(&args(&art)).unwrap();
        assert_eq!(
            earlier.describe().unwrap(),
            format!(
                "timelines/ (3 entries), diagnostics/ (2 entries), {}, {}",
                art.join("junit.xml").display(),
                art.join("report.html").display()
            )
        );
        earlier.clear().unwrap();
        let left: Vec<String> = std::fs::read_dir(&art)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, [conformance_real::journal::FILE_NAME]);
    }

    #[test]
    fn a_removal_cut_at_any_step_leaves_the_earlier_run_whole_or_no_report_beside_part_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let art = dir.path().join("artifacts");
        earlier_run(&art);
        let whole = visible(&art);
        let timelines: Vec<&String> = whole
            .keys()
            .filter(|k| k.starts_with("timelines/"))
            .collect();
        let bundle: Vec<&String> = whole
            .keys()
            .filter(|k| k.starts_with("diagnostics/"))
            .collect();
        let steps = EarlierRun::find(&args(&art)).unwrap().steps();
        for cut in 0..=steps.len() {
            std::fs::remove_dir_all(&art).unwrap();
            earlier_run(&art);
            let earlier = EarlierRun::find(&args(&art)).unwrap();
            let aside = art.join(format!("{ASIDE_PREFIX}test"));
            // A kill after `cut` steps.
            for step in &steps[..cut] {
                earlier.take(step, &aside).unwrap();
            }
            let now = visible(&art);
            for (path, bytes) in &now {
                assert_eq!(Some(bytes), whole.get(path), "cut {cut}: {path} changed");
            }
            let has = |set: &[&String]| set.iter().filter(|k| now.contains_key(**k)).count();
            // Each of the earlier run's parts is whole or gone.
            for (what, set) in [("timelines", &timelines), ("diagnostics", &bundle)] {
                let n = has(set);
                assert!(n == 0 || n == set.len(), "cut {cut}: {n} of the {what}");
            }
            // Its reports claim its verdicts only beside all of them.
            for report in ["junit.xml", "report.html"] {
                if now.contains_key(report) {
                    assert_eq!(has(&timelines), timelines.len(), "cut {cut}: {report}");
                }
            }
            if cut == steps.len() {
                assert_eq!(
                    now.keys().collect::<Vec<_>>(),
                    [conformance_real::journal::FILE_NAME]
                );
                assert!(!aside.exists(), "the hidden directory stays");
            }
        }
    }
}
