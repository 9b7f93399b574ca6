//! What models plug into the cluster: the program an exec into a container runs
//! ([`ExecHandler`]) and what answers connections to a pod port ([`PortForwardHandler`]). The
//! cluster keeps them by name (`Cluster::register_exec`, `Cluster::register_port`).

use emulator_shell::ExecOutput;
use futures::future::BoxFuture;
use std::collections::BTreeMap;
use tokio::io::DuplexStream;

/// One exec into a container, as a handler receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecRequest {
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub container: String,
    pub argv: Vec<String>,
    /// All of stdin (read until the client closes it), empty when stdin was not requested.
    pub stdin: Vec<u8>,
    /// The container's `env` entries with literal values.
    pub env: BTreeMap<String, String>,
    /// The container's `workingDir`, or "/".
    pub workdir: String,
    pub tty: bool,
}

/// A program "inside" a container. Closures `Fn(ExecRequest) -> impl Future<Output = ExecOutput>`
/// are handlers too.
pub trait ExecHandler: Send + Sync + 'static {
    fn exec(&self, req: ExecRequest) -> BoxFuture<'static, ExecOutput>;
}

impl<F, Fut> ExecHandler for F
where
    F: Fn(ExecRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ExecOutput> + Send + 'static,
{
    fn exec(&self, req: ExecRequest) -> BoxFuture<'static, ExecOutput> {
        Box::pin(self(req))
    }
}

/// What answers connections to a pod port; it receives one stream per connection (and usually
/// spawns a task to serve it).
pub trait PortForwardHandler: Send + Sync + 'static {
    fn connect(&self, stream: DuplexStream);
}

impl<F> PortForwardHandler for F
where
    F: Fn(DuplexStream) + Send + Sync + 'static,
{
    fn connect(&self, stream: DuplexStream) {
        self(stream)
    }
}
