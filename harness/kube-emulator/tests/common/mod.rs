//! `emulate serve` for tests that drive it with real tools over TCP, in real time: the served
//! cluster, its kubeconfig, and tool runs with a private home and a deadline.

#![allow(dead_code)] // each test binary uses its own part

use kube_emulator::serve::bind;
use kube_emulator::{Cluster, ClusterConfig};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A cluster served on a local port until dropped.
pub struct Served {
    pub cluster: Cluster,
    /// Holds the kubeconfig, the tools' private home and any file a test writes.
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// What a tool printed and how it exited.
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub async fn serve(config: ClusterConfig) -> Served {
    let cluster = Cluster::new(config);
    let endpoint = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    endpoint.write_kubeconfig(&kubeconfig).unwrap();
    let c = cluster.clone();
    let server = tokio::spawn(async move {
        let _ = endpoint.serve(c).await;
    });
    Served {
        cluster,
        dir,
        kubeconfig,
        server,
    }
}

impl Served {
    /// `tool args` against this cluster, with a private home (helm's and kubectl's caches), so
    /// nothing of the user's is read or written; killed when dropped.
    pub fn command(&self, tool: &Path, args: &[&str]) -> tokio::process::Command {
        let home = self.dir.path().join("home");
        let mut cmd = tokio::process::Command::new(tool);
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &home)
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .kill_on_drop(true);
        cmd
    }

    /// Runs `tool args` (with `env` added) to completion within 60 s.
    pub async fn run(&self, tool: &Path, args: &[&str], env: &[(&str, &str)]) -> Out {
        let mut cmd = self.command(tool, args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("{} {args:?} did not finish within 60 s", tool.display()))
            .unwrap();
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}
