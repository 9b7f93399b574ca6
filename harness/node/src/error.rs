//! Why the node's host side could not do what it was asked.

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The machine cannot run containers as processes (not root, no namespaces, no `ip`).
    #[error("containers cannot run as processes here: {0}")]
    Unsupported(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A host command (`ip`) failed.
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
}

impl NodeError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}
