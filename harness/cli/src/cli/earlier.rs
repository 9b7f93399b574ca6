//! What an earlier run left where this run writes, and the manifest that says what that is.
//!
//! At its end a run writes `<artifacts>/.openshell-conformance-manifest.json`, naming every file
//! it wrote (its timelines, the diagnostics bundles under the artifacts directory, the JUnit and
//! the HTML) with its size and SHA-256. Before the cases start the next run removes exactly the
//! files listed there whose size and digest still match, so no file of that run stays beside
//! this run's; nothing is removed for its name or shape. The restore journal is never listed: it
//! may hold faults a killed run left behind.
//!
//! Anything else stays. The run refuses (exit 2), naming them, before anything starts or is
//! removed: a file in `timelines/` or `diagnostics/` no manifest lists, or one changed since the
//! run that listed it wrote it (so `check artifacts/timelines/*` judges one run), and any file
//! at a path this run writes (its JUnit, HTML or a timeline) that is not the earlier run's. A
//! listed file that changed elsewhere is kept and named. A run killed before its end wrote no
//! manifest: the next run names its files and refuses until they are moved or deleted.
//!
//! The removal is ordered so that a kill at any moment leaves the earlier run's files whole or
//! gone, never a JUnit beside part of its timelines: the reports go first (one unlink each);
//! then a hidden directory is made with a copy of the manifest, `timelines/` and `diagnostics/`
//! are each moved into it whole (one rename), the manifest is removed, and last the hidden
//! directory is emptied by its copy of the manifest. A hidden directory a kill left is emptied
//! the same way by the next run; what its manifest does not list stays, named.

use std::collections::BTreeSet;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

use super::args::RunArgs;
use conformance_core::error::Error;

/// The manifest's name in the artifacts directory.
pub(super) const MANIFEST: &str = ".openshell-conformance-manifest.json";
/// The prefix of the hidden directory the earlier run's directories are moved into.
const ASIDE_PREFIX: &str = ".openshell-conformance-earlier-";
/// The directories of the artifacts a run writes whole.
const DIRS: [&str; 2] = ["timelines", "diagnostics"];
/// What `written_by` says in a manifest of ours.
const WRITTEN_BY: &str = "openshell-conformance";
/// The largest manifest read: one entry is about 150 bytes.
const MANIFEST_CAP: u64 = 16 << 20;

/// What a run wrote, as its manifest lists it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    written_by: String,
    files: Vec<Entry>,
}

/// One file a run wrote: its path relative to the artifacts directory (or absolute, for a
/// report written outside it), its size and its SHA-256 in hex.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    path: String,
    size: u64,
    sha256: String,
}

/// Writes the manifest of the files a run wrote (atomically, like the reports), each read back
/// for its digest. `written` may name a file twice or one that is not there; each file is
/// listed once.
pub(super) fn write_manifest(artifacts: &Path, written: &[PathBuf]) -> Result<(), Error> {
    let base = absolute(artifacts);
    let mut files = Vec::new();
    let mut seen = BTreeSet::new();
    for path in written {
        let abs = absolute(path);
        if !seen.insert(abs.clone()) {
            continue;
        }
        let name = match abs.strip_prefix(&base) {
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => abs.to_string_lossy().into_owned(),
        };
        let Some((size, sha256)) = digest(path)
            .map_err(|e| Error::usage_from(format!("cannot read {}", path.display()), e))?
        else {
            continue;
        };
        files.push(Entry {
            path: name,
            size,
            sha256,
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let manifest = Manifest {
        written_by: WRITTEN_BY.into(),
        files,
    };
    let json = serde_json::to_string_pretty(&manifest)
        .map_err(|e| Error::infra_from("the run's manifest", e))?;
    super::files::write_file(&artifacts.join(MANIFEST), &json)
}

/// The size and SHA-256 of a regular file (not followed if a symbolic link); None if there is
/// no regular file at `path`.
fn digest(path: &Path) -> std::io::Result<Option<(u64, String)>> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
        Ok(m) if !m.is_file() => return Ok(None),
        Ok(_) => {}
    }
    let mut file = std::fs::File::open(path)?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0; 1 << 16];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        ctx.update(&buf[..n]);
    }
    let hex = ctx
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(Some((size, hex)))
}

/// Reads a manifest: None when there is none; an error (exit 2) when the file there is not one
/// of ours, since then nothing says what may be removed.
fn read_manifest(path: &Path) -> Result<Option<Manifest>, Error> {
    let bad = |why: String| {
        Error::usage(format!(
            "{}: {why}; it is not a manifest a run of openshell-conformance wrote, so nothing \
             says which files there are the earlier run's: move it (and the earlier run's \
             files) elsewhere",
            path.display()
        ))
    };
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(cannot_read(path, e)),
        Ok(m) => m,
    };
    if !meta.is_file() {
        return Err(bad("not a regular file".into()));
    }
    if meta.len() > MANIFEST_CAP {
        return Err(bad(format!("{} bytes is too large", meta.len())));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MANIFEST_CAP).read_to_end(&mut bytes))
        .map_err(|e| cannot_read(path, e))?;
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if manifest.written_by != WRITTEN_BY {
        return Err(bad(format!("written by {:?}", manifest.written_by)));
    }
    Ok(Some(manifest))
}

/// The path a manifest entry names under `base`: a relative path of plain names only. An
/// absolute one (a report written outside the artifacts directory) only when it is one of
/// `reports`, which this run replaces anyway; anything else names nothing to remove.
fn entry_path(base: &Path, entry: &str, reports: &[PathBuf]) -> Option<PathBuf> {
    let p = Path::new(entry);
    if p.is_absolute() {
        return reports.iter().find(|r| r.as_path() == p).cloned();
    }
    let plain =
        p.components().count() > 0 && p.components().all(|c| matches!(c, Component::Normal(_)));
    plain.then(|| base.join(p))
}

/// The listed files under `base` whose size and digest match (`ours`), and the listed ones
/// there that changed (`changed`), by `manifest`.
fn matching(
    base: &Path,
    manifest: &Manifest,
    reports: &[PathBuf],
) -> Result<(BTreeSet<PathBuf>, BTreeSet<PathBuf>), Error> {
    let mut ours = BTreeSet::new();
    let mut changed = BTreeSet::new();
    for e in &manifest.files {
        let Some(path) = entry_path(base, &e.path, reports) else {
            continue;
        };
        match std::fs::symlink_metadata(&path) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(cannot_read(&path, err)),
            Ok(_) => {}
        }
        let found = digest(&path).map_err(|err| cannot_read(&path, err))?;
        if found
            .as_ref()
            .is_some_and(|(size, sha)| *size == e.size && *sha == e.sha256)
        {
            ours.insert(path);
        } else {
            changed.insert(path);
        }
    }
    Ok((ours, changed))
}

/// Every file (and empty directory) under `dir`, symbolic links not followed.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let mut empty = true;
    for entry in std::fs::read_dir(dir).map_err(|e| cannot_read(dir, e))? {
        let entry = entry.map_err(|e| cannot_read(dir, e))?;
        empty = false;
        let path = entry.path();
        let is_dir = entry
            .file_type()
            .map_err(|e| cannot_read(&path, e))?
            .is_dir();
        if is_dir {
            walk(&path, out)?;
        } else {
            out.push(path);
        }
    }
    if empty {
        out.push(dir.to_path_buf());
    }
    Ok(())
}

/// One step of the removal, each atomic on its own.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Step {
    /// Unlink a file the manifest lists.
    Remove(PathBuf),
    /// Make the hidden directory, with a copy of the manifest.
    MakeAside,
    /// Rename a directory of the artifacts into the hidden directory.
    MoveAside(PathBuf),
    /// Unlink the manifest.
    RemoveManifest,
    /// Empty and remove the hidden directories by their manifests, this run's and any a killed
    /// run left.
    ClearAside,
}

/// The earlier run's files found in the artifacts directory.
#[derive(Debug)]
pub(super) struct EarlierRun {
    artifacts: PathBuf,
    /// Whether a manifest is there.
    manifest: bool,
    /// Listed files outside `timelines/` and `diagnostics/` that match: the reports.
    reports: Vec<PathBuf>,
    /// `timelines/` and `diagnostics/` when they hold listed files, with how many.
    dirs: Vec<(&'static str, usize)>,
    /// Listed files that changed since, which stay.
    kept: Vec<PathBuf>,
    /// Hidden directories of earlier removals a kill cut short.
    stale: Vec<PathBuf>,
}

impl EarlierRun {
    /// Finds what an earlier run left where `args` writes. `writes` are the files this run
    /// will write besides its reports (its timelines). Refuses (exit 2), naming each, a file in
    /// `timelines/` or `diagnostics/` that is not a listed file of the earlier run as it wrote
    /// it, and any such file at a path this run writes.
    pub(super) fn find(args: &RunArgs, writes: &[PathBuf]) -> Result<Self, Error> {
        let artifacts = args.artifacts.clone();
        let manifest_path = artifacts.join(MANIFEST);
        let manifest = read_manifest(&manifest_path)?;
        let report_paths = [args.junit_path(), args.html_path()];
        let abs_reports: Vec<PathBuf> = report_paths.iter().map(|p| absolute(p)).collect();
        let (ours, changed) = match &manifest {
            // Absolute entries are compared with the reports' absolute paths, relative ones
            // joined to the directory as given.
            Some(m) => {
                let (mut ours, mut changed) = matching(&artifacts, m, &abs_reports)?;
                // Back to the paths as this run names them.
                for (abs, given) in abs_reports.iter().zip(&report_paths) {
                    if ours.remove(abs) {
                        ours.insert(given.clone());
                    }
                    if changed.remove(abs) {
                        changed.insert(given.clone());
                    }
                }
                (ours, changed)
            }
            None => (BTreeSet::new(), BTreeSet::new()),
        };
        let ours_abs: BTreeSet<PathBuf> = ours.iter().map(|p| absolute(p)).collect();
        let is_ours = |p: &Path| ours_abs.contains(&absolute(p));
        let mut refused: BTreeSet<PathBuf> = BTreeSet::new();
        let mut dirs = Vec::new();
        for sub in DIRS {
            let path = artifacts.join(sub);
            match std::fs::symlink_metadata(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(cannot_read(&path, e)),
                Ok(m) if !m.is_dir() => {
                    refused.insert(path);
                    continue;
                }
                Ok(_) => {}
            }
            let mut found = Vec::new();
            walk(&path, &mut found)?;
            let mut n = 0;
            for f in found {
                if is_ours(&f) {
                    n += 1;
                } else if f != path {
                    refused.insert(f);
                }
            }
            if n > 0 {
                dirs.push((sub, n));
            }
        }
        for path in report_paths.iter().chain(writes) {
            if std::fs::symlink_metadata(path).is_ok() && !is_ours(path) {
                refused.insert(path.clone());
            }
        }
        if !refused.is_empty() {
            let names: Vec<String> = refused
                .iter()
                .map(|p| {
                    let name = shown(&artifacts, p);
                    if changed.contains(p) {
                        format!("{name} (changed since the earlier run wrote it)")
                    } else {
                        name
                    }
                })
                .collect();
            let whose = if manifest.is_some() {
                format!("not files of the earlier run as its manifest ({MANIFEST}) lists them")
            } else {
                format!(
                    "not files of an earlier run: no run left a manifest ({MANIFEST}) there \
                     (a run of an older openshell-conformance, or one that was killed, leaves \
                     none)"
                )
            };
            return Err(Error::usage(format!(
                "--artifacts {}: {} {whose}; a run writes timelines/, diagnostics/ and its \
                 reports there and removes only the files a manifest lists, so move {} \
                 elsewhere or give another --artifacts directory (or --junit/--html path)",
                artifacts.display(),
                names.join(", "),
                if names.len() == 1 { "it" } else { "them" },
            )));
        }
        let in_dirs = |p: &Path| DIRS.iter().any(|sub| p.starts_with(artifacts.join(sub)));
        let reports = ours.iter().filter(|p| !in_dirs(p)).cloned().collect();
        let kept = changed.into_iter().collect();
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
            manifest: manifest.is_some(),
            reports,
            dirs,
            kept,
            stale,
        })
    }

    /// The removal's steps, in the order that keeps the earlier run whole or gone.
    pub(super) fn steps(&self) -> Vec<Step> {
        let mut steps: Vec<Step> = self.reports.iter().cloned().map(Step::Remove).collect();
        if !self.dirs.is_empty() {
            steps.push(Step::MakeAside);
        }
        steps.extend(
            self.dirs
                .iter()
                .map(|(sub, _)| Step::MoveAside(self.artifacts.join(sub))),
        );
        if self.manifest {
            steps.push(Step::RemoveManifest);
        }
        if !self.dirs.is_empty() || !self.stale.is_empty() {
            steps.push(Step::ClearAside);
        }
        steps
    }

    /// What is removed, for the message the run prints; None when there is nothing.
    pub(super) fn describe(&self) -> Option<String> {
        let mut removed: Vec<String> = self
            .dirs
            .iter()
            .map(|(sub, n)| format!("{sub}/ ({n} files)"))
            .collect();
        removed.extend(self.reports.iter().map(|p| p.display().to_string()));
        (!removed.is_empty()).then(|| removed.join(", "))
    }

    /// The earlier run's files that stay because they changed since it wrote them.
    pub(super) fn kept(&self) -> Vec<String> {
        self.kept
            .iter()
            .map(|p| shown(&self.artifacts, p))
            .collect()
    }

    /// Removes the earlier run's files, step by step; returns what stays in hidden directories
    /// a kill left, which no manifest there lists.
    pub(super) fn clear(&self) -> Result<Vec<PathBuf>, Error> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let aside = self
            .artifacts
            .join(format!("{ASIDE_PREFIX}{}-{stamp}", std::process::id()));
        let mut left = Vec::new();
        for step in self.steps() {
            left.extend(self.take(&step, &aside)?);
        }
        Ok(left)
    }

    /// Carries out one step; `aside` is this run's hidden directory. Returns what a hidden
    /// directory kept.
    pub(super) fn take(&self, step: &Step, aside: &Path) -> Result<Vec<PathBuf>, Error> {
        let cannot = |p: &Path, e| Error::usage_from(format!("cannot remove {}", p.display()), e);
        let manifest = self.artifacts.join(MANIFEST);
        match step {
            Step::Remove(path) => remove_file(path).map_err(|e| cannot(path, e))?,
            Step::MakeAside => {
                std::fs::create_dir(aside).map_err(|e| cannot(aside, e))?;
                let copy = std::fs::read(&manifest).map_err(|e| cannot_read(&manifest, e))?;
                crate::junit::replace(&aside.join(MANIFEST), &copy)
                    .map_err(|e| cannot(aside, e))?;
            }
            Step::MoveAside(path) => {
                let name = path.file_name().unwrap_or(path.as_os_str());
                std::fs::rename(path, aside.join(name)).map_err(|e| cannot(path, e))?;
            }
            Step::RemoveManifest => remove_file(&manifest).map_err(|e| cannot(&manifest, e))?,
            Step::ClearAside => {
                let mut left = Vec::new();
                for dir in self.stale.iter().map(PathBuf::as_path).chain([aside]) {
                    if dir.exists() {
                        left.extend(clear_aside(dir)?);
                    }
                }
                return Ok(left);
            }
        }
        Ok(Vec::new())
    }
}

/// Empties a hidden directory by the manifest copied into it: the files it lists that match,
/// then the directories left empty, then the manifest and the directory. What it does not list
/// stays, and is returned.
fn clear_aside(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let cannot = |p: &Path, e| Error::usage_from(format!("cannot remove {}", p.display()), e);
    let copy = dir.join(MANIFEST);
    // A copy a kill cut short, or none: nothing says what the directory holds.
    let manifest = read_manifest(&copy).ok().flatten();
    if let Some(m) = &manifest {
        let (ours, _) = matching(dir, m, &[])?;
        for path in &ours {
            remove_file(path).map_err(|e| cannot(path, e))?;
        }
    }
    // `walk` names the empty directories; each is removed with the ones above it it empties.
    let mut found = Vec::new();
    walk(dir, &mut found)?;
    for path in found.iter().filter(|p| p.as_path() != dir && p.is_dir()) {
        prune_empty(path, dir);
    }
    let mut left = Vec::new();
    walk(dir, &mut left)?;
    left.retain(|p| p != dir && !(manifest.is_some() && p == &copy));
    if left.is_empty() {
        remove_file(&copy).map_err(|e| cannot(&copy, e))?;
        std::fs::remove_dir(dir).map_err(|e| cannot(dir, e))?;
    }
    Ok(left)
}

/// Removes `path` and the directories above it up to `top` (not included) while they are empty.
fn prune_empty(path: &Path, top: &Path) {
    let mut at = Some(path);
    while let Some(p) = at.filter(|p| *p != top && p.starts_with(top)) {
        if std::fs::remove_dir(p).is_err() {
            break;
        }
        at = p.parent();
    }
}

fn remove_file(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// `path` under the artifacts directory as the user sees it there, else as given.
fn shown(artifacts: &Path, path: &Path) -> String {
    path.strip_prefix(artifacts)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

/// `path` made absolute without touching the file system; as given if that fails.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn cannot_read(path: &Path, e: std::io::Error) -> Error {
    Error::usage_from(format!("cannot read {}", path.display()), e)
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
        let mut written = Vec::new();
        walk(&art.join("timelines"), &mut written).unwrap();
        walk(&art.join("diagnostics"), &mut written).unwrap();
        written.extend([art.join("junit.xml"), art.join("report.html")]);
        write_manifest(art, &written).unwrap();
    }

    /// The run's refusal of `art`, checked to be a usage error that removed nothing.
    fn refusal(art: &Path, writes: &[PathBuf]) -> String {
        let before = visible(art);
        let had_manifest = art.join(MANIFEST).exists();
        let err = EarlierRun::find(&args(art), writes).unwrap_err();
        assert_eq!(
            err.exit_status(),
            conformance_core::error::ExitStatus::Usage
        );
        assert_eq!(visible(art), before, "something was removed");
        assert_eq!(
            art.join(MANIFEST).exists(),
            had_manifest,
            "the manifest was removed"
        );
        err.to_string()
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
        let msg = refusal(&art, &[]);
        for name in [
            "timelines/mydata.txt",
            "timelines/notes.jsonl",
            "diagnostics/notes.txt",
            "diagnostics/mybundle-1",
        ] {
            assert!(msg.contains(name), "{name} is not named: {msg}");
        }
        assert!(msg.contains("move them elsewhere"), "{msg}");
    }

    #[test]
    fn a_users_junit_xml_where_the_run_writes_its_junit_survives_and_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let art = dir.path().join("artifacts");
        std::fs::create_dir_all(&art).unwrap();
        std::fs::write(art.join("junit.xml"), "MINE").unwrap();
        let msg = refusal(&art, &[]);
        assert!(
            msg.contains("junit.xml not files of an earlier run: no run left a manifest"),
            "{msg}"
        );
        // Beside an earlier run of ours whose manifest does not list it, the same.
        std::fs::remove_file(art.join("junit.xml")).unwrap();
        earlier_run(&art);
        std::fs::remove_file(art.join("junit.xml")).unwrap();
        let mut written = Vec::new();
        walk(&art.join("timelines"), &mut written).unwrap();
        walk(&art.join("diagnostics"), &mut written).unwrap();
        written.push(art.join("report.html"));
        write_manifest(&art, &written).unwrap();
        std::fs::write(art.join("junit.xml"), "MINE").unwrap();
        let msg = refusal(&art, &[]);
        assert!(
            msg.contains("artifacts: junit.xml not files of the earlier run"),
            "{msg}"
        );
    }

    #[test]
    fn a_file_that_looks_like_a_timeline_but_no_manifest_lists_survives_and_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let art = dir.path().join("artifacts");
        earlier_run(&art);
        std::fs::write(art.join("timelines/copied_.jsonl"), format!("{HEADER}\n")).unwrap();
        let msg = refusal(&art, &[]);
        assert!(
            msg.contains("timelines/copied_.jsonl not files of the earlier run"),
            "{msg}"
        );
        for listed in ["provisioning_combined_", "junit.xml"] {
            assert!(!msg.contains(listed), "{listed} is named: {msg}");
        }
    }

    #[test]
    fn without_a_manifest_files_shaped_like_a_runs_are_not_removed_but_named() {
        let dir = tempfile::tempdir().unwrap();
        let art = dir.path().join("artifacts");
        earlier_run(&art);
        std::fs::remove_file(art.join(MANIFEST)).unwrap();
        let before = visible(&art);
        let err = EarlierRun::find(&args(&art), &[]).unwrap_err();
        let msg = err.to_string();
        for name in [
            "timelines/provisioning_combined_.jsonl",
            "diagnostics/combined-1234.tar.gz",
            "junit.xml",
            "report.html",
        ] {
            assert!(msg.contains(name), "{name} is not named: {msg}");
        }
        assert_eq!(visible(&art), before, "something was removed");
    }

    #[test]
    fn an_edited_listed_file_survives_and_is_named_as_changed() {
        let dir = tempfile::tempdir().unwrap();
        let art = dir.path().join("artifacts");
        earlier_run(&art);
        // Same size, other bytes: the digest tells.
        std::fs::write(
            art.join("timelines/provisioning_sidecar_.jsonl"),
            format!("{HEADER}\n{{\"seq\":3}}\n"),
        )
        .unwrap();
        let msg = refusal(&art, &[]);
        assert!(
            msg.contains(
                "timelines/provisioning_sidecar_.jsonl (changed since the earlier run wrote it)"
            ),
            "{msg}"
        );
        // A listed report elsewhere than this run writes its own stays, named as kept.
        std::fs::write(
            art.join("timelines/provisioning_sidecar_.jsonl"),
            format!("{HEADER}\n{{\"seq\":2}}\n"),
        )
        .unwrap();
        std::fs::write(art.join("report.html"), "EDITED").unwrap();
        let mut a = args(&art);
        a.html = Some(art.join("elsewhere.html"));
        let earlier = EarlierRun::find(&a, &[]).unwrap();
        assert_eq!(earlier.kept(), ["report.html"]);
        earlier.clear().unwrap();
        assert_eq!(std::fs::read(art.join("report.html")).unwrap(), b"EDITED");
        assert!(!art.join("timelines").exists());
        assert!(!art.join("junit.xml").exists());
    }

    #[test]
    fn an_earlier_run_of_ours_is_removed_whole_and_the_restore_journal_stays() {
        let dir = tempfile::tempdir().unwrap();
        let art = dir.path().join("artifacts");
        earlier_run(&art);
        // A hidden directory a removal cut short by a kill left.
        std::fs::create_dir_all(art.join(format!("{ASIDE_PREFIX}1/timelines"))).unwrap();
        let earlier = EarlierRun::find(&args(&art), &[]).unwrap();
        assert_eq!(
            earlier.describe().unwrap(),
            format!(
                "timelines/ (3 files), diagnostics/ (2 files), {}, {}",
                art.join("junit.xml").display(),
                art.join("report.html").display()
            )
        );
        assert_eq!(earlier.clear().unwrap(), Vec::<PathBuf>::new());
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
        let steps = EarlierRun::find(&args(&art), &[]).unwrap().steps();
        for cut in 0..=steps.len() {
            std::fs::remove_dir_all(&art).unwrap();
            earlier_run(&art);
            let earlier = EarlierRun::find(&args(&art), &[]).unwrap();
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
            // The next run removes the rest, the hidden directory the kill left included.
            let next = EarlierRun::find(&args(&art), &[]).unwrap();
            assert_eq!(next.clear().unwrap(), Vec::<PathBuf>::new(), "cut {cut}");
            let all: Vec<String> = std::fs::read_dir(&art)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(all, [conformance_real::journal::FILE_NAME], "cut {cut}");
        }
    }
}
