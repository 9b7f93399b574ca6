//! Timelines read and reports written: a path the user named that cannot be read or written is
//! a usage error (exit 2), in every command.

use conformance_core::error::Error;

/// Reads a timeline file (JSON lines) written by `run`.
pub(super) fn load_timeline(
    path: &std::path::Path,
) -> Result<conformance_core::timeline::Timeline, Error> {
    use conformance_core::user_file::{Kind, open};
    std::fs::metadata(path)
        .map_err(|e| Error::usage_from(format!("cannot open timeline {}", path.display()), e))?;
    // A FIFO would block the command and a huge file eat the machine's memory: bounded.
    let file = open(
        path,
        Kind::Timeline,
        &format!("timeline {}", path.display()),
    )?;
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

/// Refuses, before anything runs, report paths the command must not write (exit 2): a report
/// is written only to a regular file or a new path. Writing renames a new file over the path,
/// so a device (as root, `/dev/null`), a FIFO or a symbolic link would be replaced by a regular
/// file, an input of the same command overwritten before it is read, and two reports on one
/// path would leave one of them.
pub(super) fn refuse_unsafe_outputs(
    outputs: &[(&str, &std::path::Path)],
    inputs: &[(&str, &std::path::Path)],
) -> Result<(), Error> {
    use conformance_real::options::resolved;
    for (i, (flag, path)) in outputs.iter().enumerate() {
        // A path that cannot be looked at is new or unwritable: the write probe says which.
        if let Ok(meta) = std::fs::symlink_metadata(path)
            && !meta.is_file()
        {
            return Err(Error::usage(format!(
                "{flag} {}: it is {}; reports are written only to a regular file or a new path",
                path.display(),
                kind_of(&meta)
            )));
        }
        let here = resolved(path);
        if let Some((other, _)) = outputs[..i].iter().find(|(_, p)| resolved(p) == here) {
            return Err(Error::usage(format!(
                "{flag} {} is also the path of {other}: two reports cannot share one file",
                path.display()
            )));
        }
        if let Some((what, _)) = inputs.iter().find(|(_, p)| resolved(p) == here) {
            return Err(Error::usage(format!(
                "{flag} {} is {what}, which this command reads: writing there would replace it",
                path.display()
            )));
        }
    }
    Ok(())
}

/// What a path that is not a regular file is, in words.
fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}
