//! The errors the shell's public API returns. Inside the interpreter they become what a real
//! shell prints (the strerror text, `kill: (PID) - ...`), so their `Display` is that text.

/// Why a file-system operation failed. Displays as the strerror text coreutils prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsError {
    NotFound,
    NotADirectory,
    IsADirectory,
    Exists,
    ReadOnly,
    Busy,
}

impl FsError {
    /// The strerror text, as the shell's messages embed it.
    pub(crate) fn message(self) -> &'static str {
        match self {
            FsError::NotFound => "No such file or directory",
            FsError::NotADirectory => "Not a directory",
            FsError::IsADirectory => "Is a directory",
            FsError::Exists => "File exists",
            FsError::ReadOnly => "Read-only file system",
            FsError::Busy => "Device or resource busy",
        }
    }
}

impl std::fmt::Display for FsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for FsError {}

/// A file that exists but cannot be read ([`Mounts::read_file`](crate::Mounts::read_file)):
/// `PATH: strerror`, as a program reading it would report.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {kind}")]
pub struct ReadError {
    pub(crate) path: String,
    pub(crate) kind: FsError,
}

impl ReadError {
    /// The path as it was asked for.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Why it could not be read (a directory, or a path through a file).
    pub fn kind(&self) -> FsError {
        self.kind
    }
}

/// Why a [`ShellHooks::kill`](crate::ShellHooks::kill) did not signal the process; the shell
/// prints it to stderr and `kill` exits 1.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KillError {
    /// No process with that PID in the container's view (or not a number).
    #[error("kill: ({pid}) - No such process")]
    NoSuchProcess { pid: String },
    /// The process exists but may not be signalled.
    #[error("kill: ({pid}) - Operation not permitted")]
    NotPermitted { pid: String },
}
