//! Files the user names, read bounded: a regular file only (a FIFO or device would block or
//! never end: `/dev/zero` as a values file grew the process by gigabytes), at most a size cap per
//! kind of file (stated in the README), so a wrong path is a usage error (exit 2) at once.

use crate::error::{Error, Result};
use std::io::Read;
use std::path::Path;

const MIB: u64 = 1 << 20;

/// The kinds of file the user names, each with its size cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `--expectations`: a few entries per release.
    Expectations,
    /// `--values`, `--agent-sandbox-manifest`: helm values and release manifests (CRDs are large).
    Manifest,
    /// `--kubeconfig`.
    Kubeconfig,
    /// A restore journal: one entry per fault of a run.
    Journal,
    /// A saved timeline (`check`, `report`): the whole catalog's longest is well under this.
    Timeline,
}

impl Kind {
    /// The largest file of this kind that is read.
    pub fn cap(self) -> u64 {
        match self {
            Self::Expectations | Self::Kubeconfig => 4 * MIB,
            Self::Manifest | Self::Journal => 16 * MIB,
            Self::Timeline => 256 * MIB,
        }
    }
}

/// Why `path` is not a file of `kind` the harness will read, if it is not: not a regular file
/// (after following symbolic links), or larger than the kind's cap. `what` names it for the
/// user (`--values x.yaml`).
pub fn refusal(path: &Path, kind: Kind, what: &str) -> Result<()> {
    let meta = std::fs::metadata(path)
        .map_err(|e| Error::usage_from(format!("{what}: cannot read it"), e))?;
    if !meta.is_file() {
        return Err(Error::usage(format!(
            "{what}: not a regular file (a directory, FIFO or device cannot be read as one)"
        )));
    }
    if meta.len() > kind.cap() {
        return Err(Error::usage(format!(
            "{what}: {} bytes, more than the {} MiB {} may have",
            meta.len(),
            kind.cap() / MIB,
            kind.noun()
        )));
    }
    Ok(())
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Self::Expectations => "an expectations file",
            Self::Manifest => "a values file or manifest",
            Self::Kubeconfig => "a kubeconfig",
            Self::Journal => "a restore journal",
            Self::Timeline => "a timeline",
        }
    }
}

/// Opens `path` for reading after [`refusal`] found nothing: what is read through it stops at
/// the kind's cap (the file may grow after the check).
pub fn open(path: &Path, kind: Kind, what: &str) -> Result<std::io::Take<std::fs::File>> {
    refusal(path, kind, what)?;
    let file = std::fs::File::open(path)
        .map_err(|e| Error::usage_from(format!("{what}: cannot read it"), e))?;
    Ok(file.take(kind.cap()))
}

/// Reads `path` whole, bounded (see [`open`]).
pub fn read(path: &Path, kind: Kind, what: &str) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open(path, kind, what)?
        .read_to_end(&mut bytes)
        .map_err(|e| Error::usage_from(format!("{what}: cannot read it"), e))?;
    Ok(bytes)
}

/// Reads `path` whole as text, bounded (see [`open`]).
pub fn read_to_string(path: &Path, kind: Kind, what: &str) -> Result<String> {
    String::from_utf8(read(path, kind, what)?)
        .map_err(|_| Error::usage(format!("{what}: not a text file")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_a_fifo_and_a_directory_are_refused_without_reading() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        for path in [Path::new("/dev/zero"), fifo.as_path(), dir.path()] {
            let err = read_to_string(path, Kind::Manifest, "--values x")
                .unwrap_err()
                .to_string();
            assert!(err.contains("--values x: not a regular file"), "{err}");
        }
    }

    #[test]
    fn a_file_over_its_kinds_cap_is_refused_naming_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.yaml");
        // Sparse: no disk is used for the size.
        std::fs::File::create(&big)
            .unwrap()
            .set_len(Kind::Expectations.cap() + 1)
            .unwrap();
        let err = read_to_string(&big, Kind::Expectations, "--expectations big.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("more than the 4 MiB an expectations file may have"),
            "{err}"
        );
        std::fs::write(&big, "a: 1\n").unwrap();
        assert_eq!(
            read_to_string(&big, Kind::Expectations, "x").unwrap(),
            "a: 1\n"
        );
    }
}
