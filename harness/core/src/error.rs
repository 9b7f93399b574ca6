//! Errors that end a command, and the exit codes they map to.

use std::path::PathBuf;

/// `plain(message)` and `from(context, source)` constructors for a `{ message, source }`
/// variant, so every error type with a cause builds it the same way.
macro_rules! error_constructors {
    ($variant:ident, $plain:ident, $from:ident, $what:literal) => {
        #[doc = concat!("A ", $what, " that needs no further cause.")]
        pub fn $plain(message: impl Into<String>) -> Self {
            Self::$variant {
                message: message.into(),
                source: None,
            }
        }

        #[doc = concat!("A ", $what, " caused by `source`; `context` says what was being done.")]
        pub fn $from(
            context: impl Into<String>,
            source: impl std::error::Error + Send + Sync + 'static,
        ) -> Self {
            Self::$variant {
                message: context.into(),
                source: Some($crate::error::cause(source)),
            }
        }
    };
}
pub(crate) use error_constructors;

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
    /// The run was interrupted by SIGINT (128 + 2, as shells report it).
    Interrupted = 130,
    /// The run was ended by SIGTERM (128 + 15).
    Terminated = 143,
}

impl ExitStatus {
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// The underlying error a harness error was caused by, kept so messages show the whole chain.
/// Shared (`Arc`) so errors that are cloned onto timelines keep it too; boxed because core
/// cannot name the error types of kube, the command runner or other crates above it.
pub(crate) type Cause = std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Wraps an error as a [`Cause`].
pub fn cause(e: impl std::error::Error + Send + Sync + 'static) -> Cause {
    std::sync::Arc::new(e)
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad flag, value or input file; the message says what to do instead.
    #[error("{message}")]
    Usage {
        message: String,
        #[source]
        source: Option<Cause>,
    },
    /// A configuration file that does not parse or validate.
    #[error("{}: field `{field}`: {message}", file.display())]
    Config {
        file: PathBuf,
        field: String,
        message: String,
    },
    /// The environment cannot run the cases: missing tool, unreachable cluster, I/O. The message
    /// says what was being done; `source`, when present, why it failed.
    #[error("{message}")]
    Infra {
        message: String,
        #[source]
        source: Option<Cause>,
    },
}

impl Error {
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            Self::Usage { .. } | Self::Config { .. } => ExitStatus::Usage,
            Self::Infra { .. } => ExitStatus::Infrastructure,
        }
    }

    error_constructors!(Usage, usage, usage_from, "usage error");
    error_constructors!(Infra, infra, infra_from, "infrastructure error");

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

/// Parses one of the project's YAML files (a topology, a release, an expectations file); a
/// parse error becomes a [`Error::Config`] naming the file and the field the parser named.
pub fn parse_yaml<T: serde::de::DeserializeOwned>(
    text: &str,
    origin: &std::path::Path,
) -> Result<T> {
    serde_saphyr::from_str(text).map_err(|e| {
        let message = e.to_string();
        // The parser quotes the field it refused in backticks.
        let field = message
            .split('`')
            .nth(1)
            .unwrap_or("(document)")
            .to_string();
        Error::config(origin, field, message)
    })
}

/// A file named after what it defines (`fixtures/<kind>/<name>.yaml`) must say that name, so
/// the name a user types and the file a newcomer edits cannot drift apart.
pub fn name_matches_file(name: &str, origin: &std::path::Path) -> Result<()> {
    if name.trim().is_empty() {
        return Err(Error::config(origin, "name", "must not be empty"));
    }
    match origin.file_stem().and_then(|s| s.to_str()) {
        Some(stem) if stem != name => Err(Error::config(
            origin,
            "name",
            format!("is `{name}` but the file is named `{stem}.yaml`; they must agree"),
        )),
        _ => Ok(()),
    }
}

/// Every message in an error's chain, the error's own first, then each cause in turn.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
    std::iter::successors(Some(e), |e| e.source())
        .map(ToString::to_string)
        .collect()
}

/// The whole chain on one line (`context: cause: cause`), for timelines, logs and reports that
/// keep one message per failure.
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    chain(e).join(": ")
}

/// The whole chain as the command line prints it: `error: X`, then a `  caused by: Y` line for
/// each cause, so the user sees every level.
pub fn report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut levels = chain(e).into_iter();
    let mut out = format!("error: {}", levels.next().unwrap_or_default());
    for l in levels {
        out.push_str("\n  caused by: ");
        out.push_str(&l);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unreadable() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::PermissionDenied, "permission denied")
    }

    #[test]
    fn an_error_from_a_cause_shows_the_context_alone_and_keeps_the_cause_as_its_source() {
        let e = Error::infra_from("restore journal j.json", unreadable());
        assert_eq!(e.to_string(), "restore journal j.json");
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(source.to_string(), "permission denied");
        assert_eq!(e.exit_status(), ExitStatus::Infrastructure);
    }

    #[test]
    fn the_report_names_every_level_of_the_chain_in_order() {
        let inner = Error::infra_from("read kubeconfig", unreadable());
        let outer = Error::infra_from("k3s: cluster up", inner);
        assert_eq!(
            report(&outer),
            "error: k3s: cluster up\n  caused by: read kubeconfig\n  caused by: permission denied"
        );
        assert_eq!(
            one_line(&outer),
            "k3s: cluster up: read kubeconfig: permission denied"
        );
    }

    #[test]
    fn a_target_failure_carried_into_a_command_error_and_back_keeps_its_message_and_cause() {
        use crate::target::TargetError;
        let t = TargetError::infra_from("port-forward to openshell-0:8080", unreadable());
        let e = Error::from(t.clone());
        assert_eq!(e.exit_status(), ExitStatus::Infrastructure);
        assert_eq!(
            one_line(&e),
            "port-forward to openshell-0:8080: permission denied"
        );
        assert_eq!(TargetError::infra_of(e), t);
        assert_ne!(t, TargetError::infra("port-forward to openshell-0:8080"));
    }

    #[test]
    fn an_error_without_a_cause_reports_one_line_and_keeps_its_exit_status() {
        let e = Error::usage("no case matches --scenario x");
        assert_eq!(report(&e), "error: no case matches --scenario x");
        assert_eq!(e.exit_status(), ExitStatus::Usage);
        assert_eq!(
            Error::usage_from("cannot write j.xml", unreadable()).exit_status(),
            ExitStatus::Usage
        );
    }
}
