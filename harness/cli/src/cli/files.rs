//! Timelines read and reports written: a path the user named that cannot be read or written is
//! a usage error (exit 2), in every command.

use conformance_core::error::Error;

/// Reads a timeline file (JSON lines) written by `run`.
pub(super) fn load_timeline(
    path: &std::path::Path,
) -> Result<conformance_core::timeline::Timeline, Error> {
    let file = std::fs::File::open(path)
        .map_err(|e| Error::usage_from(format!("cannot open timeline {}", path.display()), e))?;
    conformance_core::timeline::Timeline::read_jsonl(std::io::BufReader::new(file))
        .map_err(|e| Error::usage_from(format!("cannot read timeline {}", path.display()), e))
}

/// Writes `content` to `path`, making its directory.
pub(super) fn write_file(path: &std::path::Path, content: &str) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::usage_from(format!("cannot create {}", dir.display()), e))?;
    }
    crate::junit::replace(path, content.as_bytes())
        .map_err(|e| Error::usage_from(format!("cannot write {}", path.display()), e))
}
