//! What the cluster keeps beside its store: container logs, the tokens it issued, and the
//! volumes behind claims, emptyDirs and container root filesystems.

use emulator_shell::Volume;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub(crate) struct LogLine {
    pub ts_nanos: i128,
    pub text: String,
}

#[derive(Debug, Default)]
struct ContainerLog {
    current: Vec<LogLine>,
    previous: Option<Vec<LogLine>>,
    /// Bumped on each restart, so a follower of the old instance stops.
    restarts: u64,
}

/// Logs per (namespace, pod, container).
#[derive(Debug, Default)]
pub(crate) struct LogStore {
    logs: BTreeMap<(String, String, String), ContainerLog>,
}

impl LogStore {
    pub(crate) fn append(
        &mut self,
        ns: &str,
        pod: &str,
        container: &str,
        text: &str,
        ts_nanos: i128,
    ) {
        let log = self
            .logs
            .entry((ns.into(), pod.into(), container.into()))
            .or_default();
        let text = text.strip_suffix('\n').unwrap_or(text);
        for line in text.split('\n') {
            log.current.push(LogLine {
                ts_nanos,
                text: line.to_string(),
            });
        }
    }

    pub(crate) fn restart(&mut self, ns: &str, pod: &str, container: &str) {
        let log = self
            .logs
            .entry((ns.into(), pod.into(), container.into()))
            .or_default();
        log.previous = Some(std::mem::take(&mut log.current));
        log.restarts += 1;
    }

    pub(crate) fn forget_pod(&mut self, ns: &str, pod: &str) {
        self.logs.retain(|(n, p, _), _| !(n == ns && p == pod));
    }

    pub(crate) fn snapshot(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Option<(Vec<LogLine>, u64)> {
        let log = self
            .logs
            .get(&(ns.to_string(), pod.to_string(), container.to_string()))?;
        let lines = if previous {
            log.previous.clone()?
        } else {
            log.current.clone()
        };
        Some((lines, log.restarts))
    }
}

/// The tokens this cluster issued, by id, and whether the kubelet keeps each one fresh.
#[derive(Default)]
pub(crate) struct TokenRegistry {
    pub(crate) next: u64,
    pub(crate) issued: BTreeMap<String, Freshness>,
}

/// Whether a review checks a token's expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// A projected volume's token: a real kubelet replaces it before it expires (at 80 % of its
    /// lifetime, F12.11); the kubelet model writes it once per container start, so the review
    /// treats it as the fresh one a rotating kubelet would hold.
    KubeletRotated,
    /// Any other token (`kubectl create token`, a client's TokenRequest): it expires.
    Expires,
}

/// The volumes by (namespace or pod uid, name); see `Backend::pvc_volume` and its siblings.
#[derive(Default)]
pub(crate) struct Volumes {
    pub pvc: BTreeMap<(String, String), Volume>,
    pub empty_dir: BTreeMap<(String, String), Volume>,
    pub root: BTreeMap<(String, String), Volume>,
}
