//! Which tools run on real time under the harness's scaled clock (`--time-scale`).
//!
//! libfaketime reaches a process through the dynamic loader (`LD_PRELOAD`); a statically
//! linked program (helm and kubectl are static Go binaries) has no loader and keeps the real
//! clock. The harness's bound on such a call is meant in real time, so it is stretched by the
//! scale: a six-minute `helm upgrade --wait` keeps six real minutes at ×200 instead of
//! 1.8 seconds (docs/architecture.md, "The scaled clock").

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The bound on a call of `program`, on this process's clock at `scale`: `bound` itself when
/// the program follows the clock, `bound` real time when it does not.
pub(crate) fn bound_for(
    program: &str,
    path_var: Option<&str>,
    bound: Duration,
    scale: u32,
) -> Duration {
    if scale <= 1 || !runs_on_real_time(program, path_var) {
        return bound;
    }
    conformance_core::clock::real_time_bound(bound, scale)
}

/// Whether `program` (looked up in `path_var` as `execvp` would) cannot follow the scaled
/// clock: an ELF without an interpreter. A program that cannot be found or read counts as real
/// time too: a bound too long only delays the report of a hang, one too short makes a failure.
pub(crate) fn runs_on_real_time(program: &str, path_var: Option<&str>) -> bool {
    match resolve(program, path_var) {
        Some(path) => !has_interpreter(&path).unwrap_or(false),
        None => true,
    }
}

fn resolve(program: &str, path_var: Option<&str>) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    path_var?
        .split(':')
        .map(|dir| Path::new(if dir.is_empty() { "." } else { dir }).join(program))
        .find(|p| p.is_file())
}

/// Whether a 64-bit ELF file names a program interpreter (`PT_INTERP`): whether the dynamic
/// loader, and so a preload, runs it. `None` when it is no 64-bit ELF or cannot be read.
fn has_interpreter(path: &Path) -> Option<bool> {
    use std::io::{Read, Seek, SeekFrom};
    const PT_INTERP: u32 = 3;
    let mut f = std::fs::File::open(path).ok()?;
    let mut header = [0u8; 64];
    f.read_exact(&mut header).ok()?;
    // \x7fELF, 64-bit class, little-endian (the machines the node runs on).
    if header[..4] != *b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let phoff = u64::from_le_bytes(header[0x20..0x28].try_into().ok()?);
    let phentsize = u64::from(u16::from_le_bytes(header[0x36..0x38].try_into().ok()?));
    let phnum = u16::from_le_bytes(header[0x38..0x3a].try_into().ok()?);
    for n in 0..u64::from(phnum) {
        f.seek(SeekFrom::Start(phoff + n * phentsize)).ok()?;
        let mut kind = [0u8; 4];
        f.read_exact(&mut kind).ok()?;
        if u32::from_le_bytes(kind) == PT_INTERP {
            return Some(true);
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamically_linked_program_follows_the_clock() {
        // The shell of every Debian machine is dynamically linked.
        assert!(!runs_on_real_time("sh", Some("/usr/bin:/bin")));
        let bound = Duration::from_secs(60);
        assert_eq!(bound_for("/bin/sh", None, bound, 10), bound);
    }

    #[test]
    fn a_static_program_keeps_its_real_time_bound_at_every_scale() {
        let test = "a_static_program_keeps_its_real_time_bound_at_every_scale";
        let Some(helm) = conformance_testtools::require(conformance_testtools::Tool::Helm, test)
        else {
            return;
        };
        let helm = helm.to_string_lossy().into_owned();
        assert!(runs_on_real_time(&helm, None), "helm is a static Go binary");
        let bound = Duration::from_secs(360);
        assert_eq!(bound_for(&helm, None, bound, 1), bound);
        assert_eq!(bound_for(&helm, None, bound, 200), bound * 200);
    }

    #[test]
    fn a_program_that_cannot_be_found_gets_the_longer_bound() {
        assert!(runs_on_real_time("no-such-program", Some("/nonexistent")));
        assert!(runs_on_real_time("/etc/hostname", None), "not an ELF");
    }
}
