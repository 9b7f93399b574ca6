//! What every handler of the API works on: the store (with the signal that it changed) and the
//! registries beside it (exec and port-forward handlers, shell hooks, volumes, logs, issued
//! tokens). It is cheap to clone; every clone is the same cluster. `Cluster` is the public face
//! over it; the handlers (HTTP routing, watch, exec, logs, port-forward, tokens, volumes) take a
//! `Backend` and never the `Cluster`.

use crate::clock::Clock;
use crate::error::ApiResult;
use crate::plugin::{ExecHandler, PortForwardHandler};
use crate::registry::{LogStore, TokenRegistry, Volumes};
use crate::resources::ResourceRef;
use crate::store::State;
use crate::sync::watch;
use emulator_shell::{ShellHooks, Volume};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

/// Construction parameters of a cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Unix seconds that tokio's start instant maps to (the clock is epoch + elapsed tokio time).
    pub epoch_unix: u64,
    /// The nanoseconds past `epoch_unix` of that instant, so a served cluster's clock can start
    /// exactly at the wall clock (its log timestamps are compared with other clocks).
    pub epoch_subsec_nanos: u32,
    /// Watch events retained per resource; a watch from an older resourceVersion gets 410 Expired.
    pub event_window: usize,
    /// CustomResourceDefinitions installed at start (JSON objects, as `kubectl apply` sends).
    pub crds: Vec<Value>,
    /// Namespaces that exist at start.
    pub namespaces: Vec<String>,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// The server-side end of a watch that did not ask for `timeoutSeconds` (the real server
    /// picks between 30 and 60 minutes at random; here it is fixed for determinism).
    pub default_watch_timeout: Duration,
}

/// 2026-01-01T00:00:00Z.
pub const DEFAULT_EPOCH_UNIX: u64 = 1_767_225_600;

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            epoch_unix: DEFAULT_EPOCH_UNIX,
            epoch_subsec_nanos: 0,
            event_window: 1000,
            crds: Vec::new(),
            namespaces: ["default", "kube-system", "kube-public", "kube-node-lease"]
                .map(String::from)
                .to_vec(),
            bookmark_interval: Duration::from_secs(60),
            default_watch_timeout: Duration::from_secs(1800),
        }
    }
}

type ExecRegistry = BTreeMap<(String, String, String), Arc<dyn ExecHandler>>;
type PortRegistry = BTreeMap<(String, String, u16), Arc<dyn PortForwardHandler>>;

pub(crate) struct Inner {
    pub state: Mutex<State>,
    pub changes: watch::Sender<u64>,
    pub config: ClusterConfig,
    pub exec: Mutex<ExecRegistry>,
    pub hooks: Mutex<BTreeMap<(String, String), Arc<dyn ShellHooks>>>,
    pub volumes: Mutex<Volumes>,
    pub logs: Mutex<LogStore>,
    pub log_changes: watch::Sender<u64>,
    pub ports: Mutex<PortRegistry>,
    pub tokens: Mutex<TokenRegistry>,
}

/// The cluster's state and registries, shared (see the module docs).
#[derive(Clone)]
pub(crate) struct Backend {
    pub(crate) inner: Arc<Inner>,
}

/// The volume under `(a, b)`, created empty on first use.
fn volume(map: &mut BTreeMap<(String, String), Volume>, a: &str, b: &str) -> Volume {
    map.entry((a.into(), b.into())).or_default().clone()
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock must not take every later request down with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Backend {
    pub(crate) fn new(config: ClusterConfig) -> Self {
        let clock = Clock::new(config.epoch_unix, config.epoch_subsec_nanos);
        let state = State::new(clock, config.event_window);
        let backend = Self {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                changes: watch::channel(0).0,
                config: config.clone(),
                exec: Mutex::default(),
                hooks: Mutex::default(),
                volumes: Mutex::default(),
                logs: Mutex::default(),
                log_changes: watch::channel(0).0,
                ports: Mutex::default(),
                tokens: Mutex::default(),
            }),
        };
        let ns = ResourceRef::new("", "v1", "namespaces");
        for n in &config.namespaces {
            let _ = backend.create(&ns, None, json!({"metadata": {"name": n}}));
        }
        let crds = ResourceRef::new("apiextensions.k8s.io", "v1", "customresourcedefinitions");
        for crd in &config.crds {
            let _ = backend.create(&crds, None, crd.clone());
        }
        backend
    }

    pub(crate) fn config(&self) -> &ClusterConfig {
        &self.inner.config
    }

    /// Cluster time (epoch + elapsed tokio time), Unix seconds.
    pub(crate) fn now_unix(&self) -> u64 {
        lock(&self.inner.state).clock.now_unix()
    }

    /// Cluster time as a `metav1.Time` string.
    pub(crate) fn now_rfc3339(&self) -> String {
        lock(&self.inner.state).clock.now_rfc3339()
    }

    /// The newest resourceVersion.
    pub(crate) fn resource_version(&self) -> u64 {
        lock(&self.inner.state).rv
    }

    /// Runs `f` on the store, then publishes changes to watchers and starts grace timers.
    pub(crate) fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut s = lock(&self.inner.state);
        let r = f(&mut s);
        self.publish(s);
        r
    }

    /// Not generic on purpose: grace timers call back into it (a generic would recurse when
    /// instantiated).
    fn publish(&self, mut s: MutexGuard<'_, State>) {
        let (rv, grace, removed, claims) = (
            s.rv,
            std::mem::take(&mut s.pending_grace),
            std::mem::take(&mut s.removed_pods),
            std::mem::take(&mut s.removed_claims),
        );
        drop(s);
        self.inner.changes.send_if_modified(|cur| {
            let changed = *cur != rv;
            *cur = rv;
            changed
        });
        for g in grace {
            let weak: Weak<Inner> = Arc::downgrade(&self.inner);
            tokio::spawn(async move {
                tokio::time::sleep(g.after).await;
                if let Some(inner) = weak.upgrade() {
                    let c = Backend { inner };
                    let mut s = lock(&c.inner.state);
                    s.grace_elapsed(&g.namespace, &g.name, &g.uid);
                    c.publish(s);
                }
            });
        }
        for (ns, name, uid) in removed {
            self.forget_pod(&ns, &name, &uid);
        }
        if !claims.is_empty() {
            // Dynamically provisioned volumes are reclaimed with their claim (the default
            // StorageClass's `Delete` policy, docs/upstream-facts.md F10.10): a new claim of the
            // same name starts empty.
            let mut v = lock(&self.inner.volumes);
            for key in claims {
                v.pvc.remove(&key);
            }
        }
    }

    /// Reads the store without publishing anything.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&lock(&self.inner.state))
    }

    /// Wakes on every change to the store: controllers wait on it instead of polling.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Drops what dies with a pod: its logs, emptyDirs and container root filesystems.
    fn forget_pod(&self, ns: &str, name: &str, uid: &str) {
        lock(&self.inner.logs).forget_pod(ns, name);
        let mut v = lock(&self.inner.volumes);
        v.empty_dir.retain(|(u, _), _| u != uid);
        v.root.retain(|(u, _), _| u != uid);
        self.inner.log_changes.send_modify(|n| *n += 1);
    }

    pub(crate) fn create(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        obj: Value,
    ) -> ApiResult<Arc<Value>> {
        self.with_state(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            s.create(&def, &r.version, ns, obj)
        })
    }

    pub(crate) fn get(&self, r: &ResourceRef, ns: Option<&str>, name: &str) -> ApiResult<Value> {
        self.read(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            s.get(&def, &r.version, ns, name).map(Arc::unwrap_or_clone)
        })
    }

    /// As `get`, but shared: the object as stored, behind the store's own reference count.
    pub(crate) fn get_shared(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        name: &str,
    ) -> ApiResult<Arc<Value>> {
        self.read(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            s.get(&def, &r.version, ns, name)
        })
    }

    pub(crate) fn exec_handler(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
    ) -> Option<Arc<dyn ExecHandler>> {
        lock(&self.inner.exec)
            .get(&(ns.to_string(), pod.to_string(), container.to_string()))
            .cloned()
    }

    pub(crate) fn pod_hooks(&self, ns: &str, pod: &str) -> Option<Arc<dyn ShellHooks>> {
        lock(&self.inner.hooks)
            .get(&(ns.to_string(), pod.to_string()))
            .cloned()
    }

    /// The volume backing PVC `claim` in `ns`; it outlives pods (like a bound PersistentVolume)
    /// and goes with the claim.
    pub(crate) fn pvc_volume(&self, ns: &str, claim: &str) -> Volume {
        volume(&mut lock(&self.inner.volumes).pvc, ns, claim)
    }

    /// The emptyDir `volume` of the pod with `pod_uid`; it is dropped when the pod is removed.
    pub(crate) fn empty_dir(&self, pod_uid: &str, volume: &str) -> Volume {
        self::volume(&mut lock(&self.inner.volumes).empty_dir, pod_uid, volume)
    }

    /// The root filesystem ("/") of a pod's container; dropped when the pod is removed.
    pub(crate) fn container_root(&self, pod_uid: &str, container: &str) -> Volume {
        volume(&mut lock(&self.inner.volumes).root, pod_uid, container)
    }

    pub(crate) fn port_handler(
        &self,
        ns: &str,
        pod: &str,
        port: u16,
    ) -> Option<Arc<dyn PortForwardHandler>> {
        lock(&self.inner.ports)
            .get(&(ns.to_string(), pod.to_string(), port))
            .cloned()
    }

    /// The container logs, locked.
    pub(crate) fn logs(&self) -> MutexGuard<'_, LogStore> {
        lock(&self.inner.logs)
    }

    /// Wakes log followers: a line was appended, a container restarted or a pod went.
    pub(crate) fn log_changed(&self) {
        self.inner.log_changes.send_modify(|n| *n += 1);
    }
}
