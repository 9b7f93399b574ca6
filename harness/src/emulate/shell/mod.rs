//! A small POSIX shell subset over in-memory volumes (filled in by the shell work).
//!
//! TEMPORARY STAND-IN (emulate branch): the agreed API surface with trivial behaviour, so the
//! API server builds before the `shell` branch lands. Replaced wholesale by that branch's module.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
}

#[allow(dead_code)]
#[derive(Debug, Clone, Default)]
pub struct Volume(Arc<Mutex<BTreeMap<String, Vec<u8>>>>);

impl Volume {
    pub fn new() -> Self {
        Self::default()
    }
}

#[derive(Clone, Default)]
pub struct Mounts(Vec<(String, Volume, bool)>);

impl Mounts {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn mount(&mut self, path: &str, volume: Volume, read_only: bool) {
        self.0.push((path.to_string(), volume, read_only));
    }
}

pub trait ShellHooks: Send + Sync {
    fn now_unix(&self) -> u64;
    fn kill(&self, pid: &str, signal: &str) -> Result<(), String>;
}

pub struct DefaultHooks(u64);

impl DefaultHooks {
    pub fn new(epoch_unix: u64) -> Self {
        Self(epoch_unix)
    }
}

impl ShellHooks for DefaultHooks {
    fn now_unix(&self) -> u64 {
        self.0
    }
    fn kill(&self, pid: &str, _signal: &str) -> Result<(), String> {
        Err(format!("kill: ({pid}) - No such process"))
    }
}

pub async fn run(
    argv: &[String],
    _stdin: &[u8],
    _env: &BTreeMap<String, String>,
    _workdir: &str,
    _mounts: &Mounts,
    _hooks: &dyn ShellHooks,
) -> ExecOutput {
    ExecOutput {
        stdout: vec![],
        stderr: format!("{}: not found\n", argv.join(" ")).into_bytes(),
        exit_code: 127,
    }
}
