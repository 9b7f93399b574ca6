//! Container programs: what runs "inside" an emulated container. The kubelet starts one
//! [`ContainerProgram`] per container (chosen by image), hands it a [`ContainerCtx`], and turns
//! its exit code into the container's terminated state. Programs wait only through
//! `tokio::time` and the context's signals, so whole pod lifetimes run in virtual time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use kube_emulator::sync::watch;

use crate::network::Network;
use kube_emulator::Cluster;
use kube_emulator::shell::{DefaultHooks, Mounts};

/// A signal the kubelet (or a fault) delivers to a container's main process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Signal {
    /// Graceful stop (pod deletion, suspend); the program should exit soon.
    Term,
    /// Immediate stop (grace period over, or `kill -9`): the program is dropped.
    Kill,
}

impl Signal {
    /// Exit code of a process ended by this signal (128 + signal number).
    pub fn exit_code(self) -> i32 {
        match self {
            Self::Term => 143,
            Self::Kill => 137,
        }
    }
}

/// Everything a program can see and use from inside its container.
pub struct ContainerCtx {
    pub cluster: Cluster,
    pub network: Network,
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub container: String,
    /// The container's image as the pod spec names it (tag included).
    pub image: String,
    /// The container's `command` followed by its `args`.
    pub argv: Vec<String>,
    /// Literal `env` entries of the container.
    pub env: BTreeMap<String, String>,
    /// The container's filesystem: its root plus its volume mounts.
    pub mounts: Mounts,
    /// How many times the kubelet restarted this container before this run.
    pub restart_count: u32,
    /// The pod's `restartPolicy` (`Always`, `OnFailure` or `Never`).
    pub restart_policy: String,
    /// The pod's IP (set by the kubelet before any container starts).
    pub pod_ip: Option<String>,
    /// The container's entry in the pod spec (command and args apart, ports, probes, mounts).
    pub spec: serde_json::Value,
    pub signals: watch::Receiver<Option<Signal>>,
    pub ready: Arc<AtomicBool>,
    /// Woken when `ready` flips, so the kubelet updates the pod status without polling.
    pub ready_changed: Arc<tokio::sync::Notify>,
}

impl ContainerCtx {
    /// Builds a context by hand (the kubelet does this; tests of programs may too). Returns the
    /// sender that delivers signals and the readiness flag the program sets.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cluster: Cluster,
        network: Network,
        namespace: &str,
        pod: &str,
        pod_uid: &str,
        container: &str,
        argv: Vec<String>,
        env: BTreeMap<String, String>,
        mounts: Mounts,
    ) -> (Self, watch::Sender<Option<Signal>>, Arc<AtomicBool>) {
        let (tx, rx) = watch::channel(None);
        let ready = Arc::new(AtomicBool::new(false));
        (
            Self {
                cluster,
                network,
                namespace: namespace.to_string(),
                pod: pod.to_string(),
                pod_uid: pod_uid.to_string(),
                container: container.to_string(),
                image: String::new(),
                argv,
                env,
                mounts,
                restart_count: 0,
                restart_policy: "Always".into(),
                pod_ip: None,
                spec: serde_json::Value::Null,
                signals: rx,
                ready: ready.clone(),
                ready_changed: Arc::new(tokio::sync::Notify::new()),
            },
            tx,
            ready,
        )
    }

    /// Appends a line to this container's log (what `kubectl logs` shows).
    pub fn log(&self, line: &str) {
        self.cluster
            .append_log(&self.namespace, &self.pod, &self.container, line);
    }

    /// Reports readiness (the container's `ready` flag and the pod's Ready condition).
    pub fn set_ready(&self, ready: bool) {
        if self.ready.swap(ready, Ordering::SeqCst) != ready {
            self.ready_changed.notify_one();
        }
    }

    /// Resolves when a signal arrives (at once if one already has).
    pub async fn signalled(&mut self) -> Signal {
        loop {
            if let Some(s) = *self.signals.borrow_and_update() {
                return s;
            }
            if self.signals.changed().await.is_err() {
                // The kubelet is gone: treat as killed.
                return Signal::Kill;
            }
        }
    }

    /// A clonable receiver for signals, for programs that spawn helper tasks.
    pub fn signals(&self) -> watch::Receiver<Option<Signal>> {
        self.signals.clone()
    }

    pub fn env(&self, key: &str) -> Option<&str> {
        self.env.get(key).map(String::as_str)
    }
}

/// What runs in a container. Returns the exit code.
#[async_trait]
pub trait ContainerProgram: Send + Sync + 'static {
    async fn run(&self, ctx: ContainerCtx) -> i32;

    /// Called by the kubelet as it starts the container, before the container is reported
    /// running and before [`ContainerProgram::run`]: what must exist by the time a client
    /// can see the container running (an exec handler) is set up here.
    fn on_start(&self, _ctx: &ContainerCtx) {}

    /// The pod (by uid) is gone: release what the program kept for it beyond one container's
    /// run (a host network namespace). Called once per container of the pod; idempotent.
    fn pod_finished(&self, _pod_uid: &str) {}
}

/// The default program: runs the container's argv with the emulated shell (so `sleep 3600` or
/// `sh -c '...'` behave like a real image), ready while it runs, ended by signals like a
/// process without handlers. An image's own executable, which the shell cannot run and the
/// cluster has no model of, is a process that does nothing: in a pod that runs to completion
/// (`restartPolicy` OnFailure or Never, a Job's pod) it exits 0 at once; in a pod meant to keep
/// running it idles, ready, until stopped.
pub struct ShellProgram;

#[async_trait]
impl ContainerProgram for ShellProgram {
    async fn run(&self, mut ctx: ContainerCtx) -> i32 {
        let runs_to_completion = ctx.restart_policy != "Always";
        if !ctx.argv.is_empty() && !kube_emulator::shell::can_run(&ctx.argv, &ctx.mounts) {
            if runs_to_completion {
                return 0;
            }
            ctx.set_ready(true);
            return ctx.signalled().await.exit_code();
        }
        if ctx.argv.is_empty() {
            // An image with no command: idle like a pause container until stopped.
            ctx.set_ready(true);
            return ctx.signalled().await.exit_code();
        }
        ctx.set_ready(true);
        let hooks = DefaultHooks::new(ctx.cluster.now_unix());
        let workdir = "/".to_string();
        let argv = ctx.argv.clone();
        let env = ctx.env.clone();
        let mounts = ctx.mounts.clone();
        let run = kube_emulator::shell::run(&argv, &[], &env, &workdir, &mounts, &hooks);
        tokio::select! {
            biased;
            out = run => {
                if !out.stdout.is_empty() {
                    ctx.log(String::from_utf8_lossy(&out.stdout).trim_end());
                }
                if !out.stderr.is_empty() {
                    ctx.log(String::from_utf8_lossy(&out.stderr).trim_end());
                }
                out.exit_code
            }
            sig = ctx.signalled() => sig.exit_code(),
        }
    }
}

/// Programs by image. An image is matched by its repository (the part before `:` or `@`), so
/// tags do not matter; unknown images run [`ShellProgram`].
#[derive(Clone, Default)]
pub struct Programs {
    by_repository: BTreeMap<String, Arc<dyn ContainerProgram>>,
}

impl Programs {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, repository: &str, program: Arc<dyn ContainerProgram>) {
        self.by_repository.insert(repository.to_string(), program);
    }

    pub(crate) fn for_image(&self, image: &str) -> Arc<dyn ContainerProgram> {
        self.by_repository
            .get(repository(image))
            .cloned()
            .unwrap_or_else(|| Arc::new(ShellProgram))
    }
}

/// `ghcr.io/nvidia/openshell/gateway:0.0.111` → `ghcr.io/nvidia/openshell/gateway`.
pub fn repository(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    // A ':' after the last '/' starts the tag; one before it is a registry port.
    match no_digest.rfind(':') {
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    }
}

/// `registry.k8s.io/x/controller:v0.5.0` → `v0.5.0`; None without a tag.
pub fn tag(image: &str) -> Option<&str> {
    let no_digest = image.split('@').next().unwrap_or(image);
    let repo = repository(no_digest);
    no_digest[repo.len()..].strip_prefix(':')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_matched_by_its_repository_whatever_the_tag_or_digest() {
        assert_eq!(
            repository("ghcr.io/nvidia/openshell/gateway:0.0.111"),
            "ghcr.io/nvidia/openshell/gateway"
        );
        assert_eq!(
            repository("localhost:5000/gw@sha256:abc"),
            "localhost:5000/gw"
        );
        assert_eq!(repository("localhost:5000/gw"), "localhost:5000/gw");
        assert_eq!(repository("busybox"), "busybox");
        assert_eq!(tag("registry.k8s.io/a/b:v0.5.0"), Some("v0.5.0"));
        assert_eq!(tag("localhost:5000/gw@sha256:abc"), None);
        assert_eq!(tag("busybox"), None);
    }
}
