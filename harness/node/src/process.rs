//! Containers as processes (stub: API only; being implemented).
#![allow(unused_variables, clippy::unused_async)]

use std::path::PathBuf;
use std::sync::Arc;

use crate::{NetNs, NodeError};

/// Why containers cannot run as processes here (not root, no mount or PID namespaces).
pub fn unsupported() -> Option<String> {
    unimplemented!()
}

/// A host path made visible inside the container.
#[derive(Clone, Debug)]
pub struct Bind {
    /// A host file or directory.
    pub host: PathBuf,
    /// Where the container sees it (absolute).
    pub target: PathBuf,
    pub read_only: bool,
}

/// What to run and what it sees.
#[derive(Clone, Debug, Default)]
pub struct ContainerSpec {
    /// Program and arguments; `argv[0]` is looked up in the container's `PATH` if not absolute.
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Working directory inside the container (`/` when unset).
    pub workdir: Option<PathBuf>,
    pub hostname: Option<String>,
    /// The container's own writable layer on the host: a directory the caller creates and
    /// removes. Everything the container writes outside its binds lands here.
    pub layer: PathBuf,
    /// Host directories that form the image's base system (for example `/bin`, `/usr`, `/lib`,
    /// `/etc`), seen read-only with the container's writes going to `layer`.
    pub base: Vec<PathBuf>,
    /// Volumes and image files, mounted in order (a later bind may sit inside an earlier one).
    pub binds: Vec<Bind>,
    /// The pod's network namespace (the host's when unset).
    pub netns: Option<Arc<NetNs>>,
    /// `uid:gid` to run as (root when unset).
    pub user: Option<(u32, u32)>,
}

/// Which standard streams of a process are piped to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stdio {
    /// stdout and stderr piped (a container's main process: its log); stdin is /dev/null.
    Log,
    /// stdin, stdout and stderr piped (`kubectl exec`).
    Interactive,
}

/// A running container process (PID 1 of its own PID namespace).
pub struct Process {
    pub stdin: Option<tokio::net::unix::pipe::Sender>,
    pub stdout: Option<tokio::net::unix::pipe::Receiver>,
    pub stderr: Option<tokio::net::unix::pipe::Receiver>,
}

impl Process {
    /// Starts a container's main process in new mount, PID and UTS namespaces.
    pub fn spawn(spec: &ContainerSpec, stdio: Stdio) -> Result<Process, NodeError> {
        unimplemented!()
    }
    /// Starts another process inside the namespaces of the running container `of` (`exec`).
    pub fn exec_in(
        of: &Process,
        argv: &[String],
        env: &[(String, String)],
        workdir: Option<&std::path::Path>,
        stdio: Stdio,
    ) -> Result<Process, NodeError> {
        unimplemented!()
    }
    /// Host PID of the container's PID 1.
    pub fn pid(&self) -> u32 {
        unimplemented!()
    }
    /// Graceful stop: SIGTERM to the container's PID 1.
    pub fn terminate(&self) {
        unimplemented!()
    }
    /// SIGKILL to every process of the container (its PID namespace).
    pub fn kill(&self) {
        unimplemented!()
    }
    /// The exit code (128 + signal number when killed by a signal).
    pub async fn wait(&mut self) -> i32 {
        unimplemented!()
    }
}

/// Starts another process inside the namespaces of the running container whose PID 1 is
/// host PID `pid` (`kubectl exec`).
pub fn exec_in(
    pid: u32,
    argv: &[String],
    env: &[(String, String)],
    workdir: Option<&std::path::Path>,
    stdio: Stdio,
) -> Result<Process, NodeError> {
    unimplemented!()
}
