//! Directories that runs killed by SIGKILL left under the system's temporary directory, found
//! and removed by the next run. A run removes its own when it ends, whatever its exit, but a
//! SIGKILL runs no code: without this they piled up, each with keys or tokens in it.
//!
//! Each kind is named with the process id of the run that made it, so a directory is a
//! leftover only when that process is gone (a live run's, or another user's, is never touched):
//! - a node's state directory (the pods' Secrets and ServiceAccount tokens; served runs with
//!   real binaries), whose cluster died with its run;
//! - `emulate serve`'s private directory (the served kubeconfig), likewise;
//! - a run's own private directory (client keys, the CLI's configuration). One that holds a
//!   kubeconfig of a kind or k3d cluster, which outlives the run, is kept: a restore journal
//!   may need it. It is named instead, to be removed after `restore`.

use std::path::{Path, PathBuf};

/// What [`sweep`] found.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Swept {
    pub(crate) removed: Vec<PathBuf>,
    /// Private directories of killed runs that hold a cluster's kubeconfig.
    pub(crate) kept: Vec<PathBuf>,
    /// Leftovers that could not be removed, with why.
    pub(crate) failed: Vec<String>,
}

impl Swept {
    /// Lines for stderr: what was removed, kept and why.
    pub(crate) fn report(&self) -> Vec<String> {
        let names = |v: &[PathBuf]| {
            v.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut lines = Vec::new();
        if !self.removed.is_empty() {
            lines.push(format!(
                "removed {} director{} left by killed runs: {}",
                self.removed.len(),
                if self.removed.len() == 1 { "y" } else { "ies" },
                names(&self.removed)
            ));
        }
        if !self.kept.is_empty() {
            lines.push(format!(
                "kept the private directories of killed runs that hold a cluster's kubeconfig, which `openshell-conformance restore --journal` may need; remove them once restored: {}",
                names(&self.kept)
            ));
        }
        for f in &self.failed {
            lines.push(format!("warning: {f}"));
        }
        lines
    }
}

/// The process id in the name of one of our directories, if `name` has one of their shapes.
fn owner(name: &str) -> Option<(u32, Kind)> {
    use conformance_models::host::STATE_DIR_PREFIX;
    let pid_then_random = |rest: &str| rest.split_once('-').and_then(|(p, _)| p.parse().ok());
    if let Some(rest) = name.strip_prefix(STATE_DIR_PREFIX) {
        return pid_then_random(rest).map(|p| (p, Kind::Ending));
    }
    if let Some(rest) = name.strip_prefix(crate::serve::PRIVATE_DIR_PREFIX) {
        return pid_then_random(rest).map(|p| (p, Kind::Ending));
    }
    // `openshell-conformance-<secs>-<pid>-<random>-private` (conformance_real::options); older
    // runs wrote no random part.
    use conformance_real::options::{PRIVATE_DIR_END, PRIVATE_DIR_START};
    let run_id = name
        .strip_prefix(PRIVATE_DIR_START)?
        .strip_suffix(PRIVATE_DIR_END)?;
    let mut parts = run_id.splitn(3, '-');
    parts.next()?.parse::<u64>().ok()?;
    let pid = parts.next()?.parse().ok()?;
    if parts
        .next()
        .is_some_and(|r| !r.chars().all(|c| c.is_ascii_hexdigit()))
    {
        return None;
    }
    Some((pid, Kind::Private))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// Holds nothing that outlives the run's cluster.
    Ending,
    /// A run's private directory: kept while it holds a kind or k3d kubeconfig.
    Private,
}

fn alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Sweeps the system's temporary directory (see [`sweep`]) and says on stderr what it did.
pub(crate) fn sweep_temp_dir() {
    for line in sweep(&std::env::temp_dir()).report() {
        tell!("{line}");
    }
}

/// Removes the leftovers of killed runs of this user under `tmp`.
pub(crate) fn sweep(tmp: &Path) -> Swept {
    let mut swept = Swept::default();
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return swept;
    };
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((pid, kind)) = owner(&name) else {
            continue;
        };
        let path = e.path();
        let ours = std::fs::symlink_metadata(&path).is_ok_and(|m| {
            m.is_dir()
                && me
                    .as_ref()
                    .is_ok_and(|uid| *uid == std::os::unix::fs::MetadataExt::uid(&m))
        });
        if !ours || pid == std::process::id() || alive(pid) {
            continue;
        }
        // kind and k3d write the cluster's kubeconfig here (`kubeconfig`); a served run's
        // (`served-kubeconfig-*`) names a cluster that died with it.
        if kind == Kind::Private && path.join("kubeconfig").exists() {
            swept.kept.push(path);
            continue;
        }
        match std::fs::remove_dir_all(&path) {
            Ok(()) => swept.removed.push(path),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => swept.failed.push(format!(
                "could not remove {}, left by a killed run: {err}",
                path.display()
            )),
        }
    }
    swept.removed.sort();
    swept.kept.sort();
    swept
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The id of a process that has ended.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn the_directories_of_killed_runs_are_removed_and_live_ones_and_strangers_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dead = dead_pid();
        let live = std::process::id();
        let make = |name: &str, files: &[&str]| {
            let d = tmp.path().join(name);
            std::fs::create_dir(&d).unwrap();
            for f in files {
                std::fs::write(d.join(f), "-----BEGIN PRIVATE KEY-----").unwrap();
            }
            d
        };
        let node_dead = make(
            &format!("openshell-conformance-node-{dead}-AbC123"),
            &["tls.key"],
        );
        let node_live = make(
            &format!("openshell-conformance-node-{live}-XyZ789"),
            &["tls.key"],
        );
        let serve_dead = make(
            &format!("openshell-conformance-serve-{dead}-q1w2e3"),
            &["kubeconfig"],
        );
        let private_dead = make(
            &format!("openshell-conformance-1764770000-{dead}-private"),
            &["served-kubeconfig-combined"],
        );
        let kind_dead = make(
            &format!("openshell-conformance-1764770001-{dead}-private"),
            &["kubeconfig"],
        );
        let private_live = make(
            &format!("openshell-conformance-1764770002-{live}-private"),
            &[],
        );
        let stranger = make("openshell-conformance-notes", &["x"]);
        let old_shape = make("openshell-conformance-node-L2RZoz", &["tls.key"]);

        let swept = sweep(tmp.path());

        let mut removed = vec![node_dead.clone(), serve_dead.clone(), private_dead.clone()];
        removed.sort();
        assert_eq!(swept.removed, removed);
        assert_eq!(swept.kept, vec![kind_dead.clone()]);
        assert!(swept.failed.is_empty(), "{:?}", swept.failed);
        for gone in [&node_dead, &serve_dead, &private_dead] {
            assert!(!gone.exists(), "{} is left", gone.display());
        }
        for kept in [&node_live, &kind_dead, &private_live, &stranger, &old_shape] {
            assert!(kept.exists(), "{} was removed", kept.display());
        }
        let report = swept.report().join("\n");
        assert!(
            report.contains("removed 3 directories left by killed runs"),
            "{report}"
        );
        assert!(
            report.contains(&kind_dead.display().to_string()),
            "{report}"
        );
    }

    #[test]
    fn the_names_the_producers_use_are_the_names_the_sweep_reads() {
        // Each producer's own naming, with this process's id: a change to one of them that the
        // sweep no longer recognises fails here.
        let pid = std::process::id();
        let run_id = conformance_real::options::new_run_id();
        for name in [
            format!("{}{pid}-r4nd0m", conformance_models::host::STATE_DIR_PREFIX),
            format!("{}{pid}-r4nd0m", crate::serve::PRIVATE_DIR_PREFIX),
            conformance_real::options::default_private_dir_name(&run_id).unwrap(),
        ] {
            assert_eq!(owner(&name).map(|(p, _)| p), Some(pid), "{name}");
        }
    }
}
