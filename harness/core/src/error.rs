//! Errors that end a command, and the exit codes they map to.

use std::path::PathBuf;

/// Process exit codes. Scripts and CI rely on them, so they never change meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExitStatus {
    /// Everything passed, or failed exactly as expected.
    Success = 0,
    /// The product broke a requirement.
    ProductFailure = 1,
    /// Bad flags, values or configuration files.
    Usage = 2,
    /// The harness or the infrastructure could not run the cases.
    Infrastructure = 3,
}

impl ExitStatus {
    pub fn code(self) -> u8 {
        self as u8
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad flag or value; the message says what to do instead.
    #[error("{0}")]
    Usage(String),
    /// A configuration file that does not parse or validate.
    #[error("{}: field `{field}`: {message}", file.display())]
    Config {
        file: PathBuf,
        field: String,
        message: String,
    },
    /// The environment cannot run the cases: missing tool, unreachable cluster, I/O.
    #[error("{0}")]
    Infra(String),
}

impl Error {
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            Self::Usage(_) | Self::Config { .. } => ExitStatus::Usage,
            Self::Infra(_) => ExitStatus::Infrastructure,
        }
    }

    pub fn config(
        file: impl Into<PathBuf>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::Config {
            file: file.into(),
            field: field.into(),
            message: message.into(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
