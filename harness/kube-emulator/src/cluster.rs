//! The `Cluster` handle: the emulated cluster's store plus the registries that cluster models use
//! (exec handlers, pod logs, port-forward handlers, volumes, shell hooks). It is cheap to clone;
//! every clone is the same cluster. HTTP clients reach it through [`Cluster::client`] (in-memory,
//! paused-time safe) or [`crate::serve`] (TCP); in-process controllers may also call the methods
//! here, which go through exactly the same semantics (one store, one resourceVersion sequence).

use crate::clock::Clock;
use crate::error::ApiResult;
use crate::exec::{ExecHandler, ExecRequest};
use crate::logs::LogStore;
use crate::patch::{PatchBody, PatchKind};
use crate::portforward::PortForwardHandler;
use crate::store::{DeleteOptions, ListOptions, State, Subresource};
use crate::sync::watch;
use crate::watch::{WatchEvent, WatchParams, watch_stream};
use emulator_shell::{ExecOutput, ShellHooks, Volume};
use futures::Stream;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

/// Identifies a served resource in one version: ("", "v1", "pods"), ("apps", "v1", "statefulsets").
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceRef {
    pub group: String,
    pub version: String,
    pub plural: String,
}

impl ResourceRef {
    pub fn new(group: &str, version: &str, plural: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
        }
    }

    /// The resource of a k8s-openapi type, e.g. `ResourceRef::of::<Pod>()`.
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        Self::new(K::GROUP, K::VERSION, K::URL_PATH_SEGMENT)
    }

    pub fn pods() -> Self {
        Self::new("", "v1", "pods")
    }
}

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

#[derive(Default)]
pub(crate) struct Volumes {
    pub pvc: BTreeMap<(String, String), Volume>,
    pub empty_dir: BTreeMap<(String, String), Volume>,
    pub root: BTreeMap<(String, String), Volume>,
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
    pub tokens: Mutex<crate::tokens::TokenRegistry>,
}

/// The emulated cluster. Create it inside a tokio runtime (its clock starts at creation).
#[derive(Clone)]
pub struct Cluster {
    pub(crate) inner: Arc<Inner>,
}

/// A handle that does not keep the cluster alive: [`WeakCluster::is_alive`] tells whether
/// anything still holds it (a case must free its cluster when it ends).
#[derive(Clone)]
pub struct WeakCluster(Weak<Inner>);

impl WeakCluster {
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }

    /// The cluster, while something else still holds it.
    pub fn upgrade(&self) -> Option<Cluster> {
        self.0.upgrade().map(|inner| Cluster { inner })
    }
}

/// The volume under `(a, b)`, created empty on first use.
fn volume(map: &mut BTreeMap<(String, String), Volume>, a: &str, b: &str) -> Volume {
    map.entry((a.into(), b.into())).or_default().clone()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock must not take every later request down with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cluster {
    pub fn new(config: ClusterConfig) -> Self {
        let clock = Clock::new(config.epoch_unix, config.epoch_subsec_nanos);
        let state = State::new(clock, config.event_window);
        let cluster = Self {
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
            let _ = cluster.create(&ns, None, json!({"metadata": {"name": n}}));
        }
        let crds = ResourceRef::new("apiextensions.k8s.io", "v1", "customresourcedefinitions");
        for crd in &config.crds {
            let _ = cluster.create(&crds, None, crd.clone());
        }
        cluster
    }

    /// A `kube::Client` over the in-memory transport (default namespace `default`).
    pub fn client(&self) -> kube::Client {
        kube::Client::new(crate::transport::InMemory::new(self.clone()), "default")
    }

    /// The axum router serving this cluster's API (for custom transports).
    pub fn router(&self) -> axum::Router {
        crate::server::router(self.clone())
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.inner.config
    }

    /// Cluster time (epoch + elapsed tokio time), Unix seconds.
    pub fn now_unix(&self) -> u64 {
        lock(&self.inner.state).clock.now_unix()
    }

    /// Cluster time as a `metav1.Time` string.
    pub fn now_rfc3339(&self) -> String {
        lock(&self.inner.state).clock.now_rfc3339()
    }

    /// The newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
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
                    let c = Cluster { inner };
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

    /// A handle that does not keep the cluster alive.
    pub fn downgrade(&self) -> WeakCluster {
        WeakCluster(Arc::downgrade(&self.inner))
    }

    /// Wakes on every change to the store: controllers wait on it instead of polling.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
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

    // ---------------------------------------------------------------------------------------
    // object API (the same semantics as HTTP)
    // ---------------------------------------------------------------------------------------

    pub fn create(&self, r: &ResourceRef, ns: Option<&str>, obj: Value) -> ApiResult<Arc<Value>> {
        self.with_state(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            s.create(&def, &r.version, ns, obj)
        })
    }

    pub fn get(&self, r: &ResourceRef, ns: Option<&str>, name: &str) -> ApiResult<Value> {
        self.read(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            s.get(&def, &r.version, ns, name).map(Arc::unwrap_or_clone)
        })
    }

    /// Lists objects (all namespaces when `ns` is `None`) and the collection resourceVersion.
    pub fn list(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> ApiResult<(Vec<Value>, u64)> {
        self.read(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            let items = s.list(&def, &r.version, ns, opts);
            Ok((items.into_iter().map(Arc::unwrap_or_clone).collect(), s.rv))
        })
    }

    /// As [`Cluster::list`], but shared: the objects as stored, behind the store's own reference
    /// counts, instead of deep copies (a copy is made only for an object stored in another
    /// version). In-process controllers list on every change to the store; copying every object
    /// they list was most of what a reconcile pass cost.
    pub fn list_shared(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> ApiResult<(Vec<Arc<Value>>, u64)> {
        self.read(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            Ok((s.list(&def, &r.version, ns, opts), s.rv))
        })
    }

    /// As [`Cluster::get`], but shared, as [`Cluster::list_shared`].
    pub fn get_shared(
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

    /// Reads the objects a [`Cluster::list`] would return in place, without copying them: `f`
    /// sees each as stored (`apiVersion` is the version it was last written in) and keeps what
    /// it returns. In-process controllers poll the store on every change; copying whole objects
    /// to read a few fields was most of their cost. `f` runs under the store's lock: it must not
    /// call the cluster.
    pub fn scan<T>(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        opts: &ListOptions,
        f: impl FnMut(&Value) -> Option<T>,
    ) -> ApiResult<Vec<T>> {
        self.read(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            Ok(s.list_raw(&def, ns, opts).filter_map(f).collect())
        })
    }

    /// Reads one object in place, as [`Cluster::scan`] does (404 when it does not exist).
    pub fn inspect<T>(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        name: &str,
        f: impl FnOnce(&Value) -> T,
    ) -> ApiResult<T> {
        self.read(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            s.get_ref(&def, ns, name).map(f)
        })
    }

    /// PUT: optimistic concurrency applies when `obj` carries `metadata.resourceVersion`.
    pub fn update(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        name: &str,
        obj: Value,
    ) -> ApiResult<Arc<Value>> {
        self.update_sub(r, ns, name, obj, Subresource::Main)
    }

    /// PUT to `/status`: only `.status` changes.
    pub fn update_status(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        name: &str,
        obj: Value,
    ) -> ApiResult<Arc<Value>> {
        self.update_sub(r, ns, name, obj, Subresource::Status)
    }

    fn update_sub(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        name: &str,
        obj: Value,
        sub: Subresource,
    ) -> ApiResult<Arc<Value>> {
        self.with_state(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            s.update(&def, &r.version, ns, name, obj, sub)
        })
    }

    /// PATCH with a JSON body (`kind` is merge, JSON, strategic or apply).
    pub fn patch(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        patch: &Value,
    ) -> ApiResult<Arc<Value>> {
        self.patch_sub(r, ns, name, kind, patch, Subresource::Main)
    }

    pub fn patch_status(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        patch: &Value,
    ) -> ApiResult<Arc<Value>> {
        self.patch_sub(r, ns, name, kind, patch, Subresource::Status)
    }

    fn patch_sub(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        patch: &Value,
        sub: Subresource,
    ) -> ApiResult<Arc<Value>> {
        self.with_state(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            s.patch(
                &def,
                &r.version,
                ns,
                name,
                kind,
                PatchBody::Value(patch),
                sub,
            )
        })
    }

    /// DELETE. Returns the object and whether it is gone (`false`: it stays terminating).
    pub fn delete(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<(Value, bool)> {
        self.with_state(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            s.delete(&def, &r.version, ns, name, opts)
        })
    }

    pub fn get_scale(&self, r: &ResourceRef, ns: Option<&str>, name: &str) -> ApiResult<Value> {
        self.read(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            s.get_scale(&def, &r.version, ns, name)
        })
    }

    /// Sets `spec.replicas` through the scale subresource.
    pub fn scale(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        name: &str,
        replicas: i64,
    ) -> ApiResult<Value> {
        self.with_state(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            s.update_scale(
                &def,
                &r.version,
                ns,
                name,
                json!({"spec": {"replicas": replicas}}),
            )
        })
    }

    /// `pods/binding`: what a scheduler does (sets `spec.nodeName` and PodScheduled).
    pub fn bind_pod(&self, ns: &str, name: &str, node: &str) -> ApiResult<()> {
        self.with_state(|s| s.bind_pod(ns, name, node))
    }

    /// A watch with the HTTP semantics (replay from `resource_version`, 410, bookmarks, timeout).
    pub fn watch(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        params: WatchParams,
    ) -> ApiResult<impl Stream<Item = WatchEvent> + Send + 'static> {
        let def = self.read(|s| s.def(&r.group, &r.version, &r.plural))?;
        Ok(watch_stream(
            self.clone(),
            def,
            r.version.clone(),
            ns.map(str::to_string),
            params,
        ))
    }

    // ---------------------------------------------------------------------------------------
    // exec
    // ---------------------------------------------------------------------------------------

    /// Registers the program that runs when someone execs into (namespace, pod, container).
    /// The registration is by name, so it also serves a replacement pod of the same name.
    pub fn register_exec(&self, ns: &str, pod: &str, container: &str, handler: impl ExecHandler) {
        lock(&self.inner.exec).insert((ns.into(), pod.into(), container.into()), Arc::new(handler));
    }

    pub fn unregister_exec(&self, ns: &str, pod: &str, container: &str) {
        lock(&self.inner.exec).remove(&(ns.to_string(), pod.to_string(), container.to_string()));
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

    /// Runs a command in a container as `pods/exec` would, without the WebSocket (for probes and
    /// in-process callers). Fails like the API when the pod or container is not running.
    pub async fn exec(
        &self,
        ns: &str,
        pod: &str,
        container: Option<&str>,
        argv: &[String],
        stdin: &[u8],
    ) -> ApiResult<ExecOutput> {
        let req = crate::exec::prepare(self, ns, pod, container, argv.to_vec(), false)?;
        Ok(crate::exec::run(
            self,
            ExecRequest {
                stdin: stdin.to_vec(),
                ..req
            },
        )
        .await)
    }

    /// Sets the hooks (clock, `kill`) the default shell uses for a pod's containers. The cluster
    /// holds them: hooks that need the cluster keep a [`WeakCluster`], or the two keep each
    /// other alive after the last user let go.
    pub fn set_pod_hooks(&self, ns: &str, pod: &str, hooks: Arc<dyn ShellHooks>) {
        lock(&self.inner.hooks).insert((ns.into(), pod.into()), hooks);
    }

    pub(crate) fn pod_hooks(&self, ns: &str, pod: &str) -> Option<Arc<dyn ShellHooks>> {
        lock(&self.inner.hooks)
            .get(&(ns.to_string(), pod.to_string()))
            .cloned()
    }

    /// The volume backing PVC `claim` in `ns`; it outlives pods (like a bound PersistentVolume)
    /// and goes with the claim.
    pub fn pvc_volume(&self, ns: &str, claim: &str) -> Volume {
        volume(&mut lock(&self.inner.volumes).pvc, ns, claim)
    }

    /// The emptyDir `volume` of the pod with `pod_uid`; it is dropped when the pod is removed.
    pub fn empty_dir(&self, pod_uid: &str, volume: &str) -> Volume {
        self::volume(&mut lock(&self.inner.volumes).empty_dir, pod_uid, volume)
    }

    /// The root filesystem ("/") of a pod's container; dropped when the pod is removed.
    pub fn container_root(&self, pod_uid: &str, container: &str) -> Volume {
        volume(&mut lock(&self.inner.volumes).root, pod_uid, container)
    }

    // ---------------------------------------------------------------------------------------
    // logs
    // ---------------------------------------------------------------------------------------

    /// Appends output to a container's current log (split into lines; stamped with cluster time).
    pub fn append_log(&self, ns: &str, pod: &str, container: &str, text: &str) {
        let ts = self.read(|s| s.clock.now_nanos());
        lock(&self.inner.logs).append(ns, pod, container, text, ts);
        self.inner.log_changes.send_modify(|n| *n += 1);
    }

    /// Marks a container restart: the current log becomes the previous one (`previous=true`).
    pub fn restart_container_log(&self, ns: &str, pod: &str, container: &str) {
        lock(&self.inner.logs).restart(ns, pod, container);
        self.inner.log_changes.send_modify(|n| *n += 1);
    }

    // ---------------------------------------------------------------------------------------
    // port-forward
    // ---------------------------------------------------------------------------------------

    /// Registers what answers connections to `port` of pod `pod` (by name; survives replacement).
    pub fn register_port(&self, ns: &str, pod: &str, port: u16, handler: impl PortForwardHandler) {
        lock(&self.inner.ports).insert((ns.into(), pod.into(), port), Arc::new(handler));
    }

    pub fn unregister_port(&self, ns: &str, pod: &str, port: u16) {
        lock(&self.inner.ports).remove(&(ns.to_string(), pod.to_string(), port));
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
}

pub(crate) fn lock_logs(c: &Cluster) -> MutexGuard<'_, LogStore> {
    lock(&c.inner.logs)
}

impl Default for Cluster {
    fn default() -> Self {
        Self::new(ClusterConfig::default())
    }
}
