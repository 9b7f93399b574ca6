//! The `Cluster` handle, the emulated cluster's public face: the object API, watches, exec,
//! and the registries models plug into (exec handlers, pod logs, port-forward handlers, volumes,
//! shell hooks). It wires the layers below: the [`Backend`] (store and registries) that every
//! handler works on, the HTTP router over it and the in-memory transport. It is cheap to clone;
//! every clone is the same cluster. HTTP clients reach it through [`Cluster::client`]
//! (in-memory, paused-time safe) or `serve` (TCP); in-process controllers may also call the
//! methods here, which go through exactly the same semantics (one store, one resourceVersion
//! sequence).

use crate::backend::{Backend, ClusterConfig, Inner, lock};
use crate::error::ApiResult;
use crate::exec;
use crate::patch::{PatchBody, PatchKind};
use crate::plugin::{ExecHandler, ExecRequest, PortForwardHandler};
use crate::resources::ResourceRef;
use crate::store::{DeleteOptions, ListOptions, Subresource};
use crate::sync::watch;
use crate::tokens::TokenRequest;
use crate::transport::InMemory;
use crate::volumes::MountFailure;
use crate::watch::{WatchEvent, WatchParams, watch_stream};
use emulator_shell::{ExecOutput, Mounts, ShellHooks, Volume};
use futures::Stream;
use serde_json::{Value, json};
use std::sync::{Arc, Weak};

/// The emulated cluster. Create it inside a tokio runtime (its clock starts at creation).
#[derive(Clone)]
pub struct Cluster {
    pub(crate) backend: Backend,
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
        self.0.upgrade().map(|inner| Cluster {
            backend: Backend { inner },
        })
    }
}

impl Cluster {
    pub fn new(config: ClusterConfig) -> Self {
        Self {
            backend: Backend::new(config),
        }
    }

    /// A `kube::Client` over the in-memory transport (default namespace `default`).
    pub fn client(&self) -> kube::Client {
        kube::Client::new(InMemory::new(self.backend.clone()), "default")
    }

    /// The axum router serving this cluster's API (for custom transports).
    pub fn router(&self) -> axum::Router {
        crate::server::router(self.backend.clone())
    }

    pub fn config(&self) -> &ClusterConfig {
        self.backend.config()
    }

    /// Cluster time (epoch + elapsed tokio time), Unix seconds.
    pub fn now_unix(&self) -> u64 {
        self.backend.now_unix()
    }

    /// Cluster time as a `metav1.Time` string.
    pub fn now_rfc3339(&self) -> String {
        self.backend.now_rfc3339()
    }

    /// The newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.backend.resource_version()
    }

    /// A handle that does not keep the cluster alive.
    pub fn downgrade(&self) -> WeakCluster {
        WeakCluster(Arc::downgrade(&self.backend.inner))
    }

    /// Wakes on every change to the store: controllers wait on it instead of polling.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.backend.subscribe()
    }

    // ---------------------------------------------------------------------------------------
    // object API (the same semantics as HTTP)
    // ---------------------------------------------------------------------------------------

    pub fn create(&self, r: &ResourceRef, ns: Option<&str>, obj: Value) -> ApiResult<Arc<Value>> {
        self.backend.create(r, ns, obj)
    }

    pub fn get(&self, r: &ResourceRef, ns: Option<&str>, name: &str) -> ApiResult<Value> {
        self.backend.get(r, ns, name)
    }

    /// Lists objects (all namespaces when `ns` is `None`) and the collection resourceVersion.
    pub fn list(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> ApiResult<(Vec<Value>, u64)> {
        self.backend.read(|s| {
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
        self.backend.read(|s| {
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
        self.backend.get_shared(r, ns, name)
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
        self.backend.read(|s| {
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
        self.backend.read(|s| {
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
        self.backend.with_state(|s| {
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
        self.backend.with_state(|s| {
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
        self.backend.with_state(|s| {
            let def = s.def(&r.group, &r.version, &r.plural)?;
            s.delete(&def, &r.version, ns, name, opts)
        })
    }

    pub fn get_scale(&self, r: &ResourceRef, ns: Option<&str>, name: &str) -> ApiResult<Value> {
        self.backend.read(|s| {
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
        self.backend.with_state(|s| {
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
        self.backend.with_state(|s| s.bind_pod(ns, name, node))
    }

    /// A watch with the HTTP semantics (replay from `resource_version`, 410, bookmarks, timeout).
    pub fn watch(
        &self,
        r: &ResourceRef,
        ns: Option<&str>,
        params: WatchParams,
    ) -> ApiResult<impl Stream<Item = WatchEvent> + Send + 'static> {
        let def = self
            .backend
            .read(|s| s.def(&r.group, &r.version, &r.plural))?;
        Ok(watch_stream(
            self.backend.clone(),
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
        lock(&self.backend.inner.exec)
            .insert((ns.into(), pod.into(), container.into()), Arc::new(handler));
    }

    pub fn unregister_exec(&self, ns: &str, pod: &str, container: &str) {
        lock(&self.backend.inner.exec).remove(&(
            ns.to_string(),
            pod.to_string(),
            container.to_string(),
        ));
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
        let req = exec::prepare(&self.backend, ns, pod, container, argv.to_vec(), false)?;
        Ok(exec::run(
            &self.backend,
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
        lock(&self.backend.inner.hooks).insert((ns.into(), pod.into()), hooks);
    }

    /// The volume backing PVC `claim` in `ns`; it outlives pods (like a bound PersistentVolume)
    /// and goes with the claim.
    pub fn pvc_volume(&self, ns: &str, claim: &str) -> Volume {
        self.backend.pvc_volume(ns, claim)
    }

    /// The emptyDir `volume` of the pod with `pod_uid`; it is dropped when the pod is removed.
    pub fn empty_dir(&self, pod_uid: &str, volume: &str) -> Volume {
        self.backend.empty_dir(pod_uid, volume)
    }

    /// The root filesystem ("/") of a pod's container; dropped when the pod is removed.
    pub fn container_root(&self, pod_uid: &str, container: &str) -> Volume {
        self.backend.container_root(pod_uid, container)
    }

    // ---------------------------------------------------------------------------------------
    // logs
    // ---------------------------------------------------------------------------------------

    /// Appends output to a container's current log (split into lines; stamped with cluster time).
    pub fn append_log(&self, ns: &str, pod: &str, container: &str, text: &str) {
        let ts = self.backend.read(|s| s.clock.now_nanos());
        self.backend.logs().append(ns, pod, container, text, ts);
        self.backend.log_changed();
    }

    /// Marks a container restart: the current log becomes the previous one (`previous=true`).
    pub fn restart_container_log(&self, ns: &str, pod: &str, container: &str) {
        self.backend.logs().restart(ns, pod, container);
        self.backend.log_changed();
    }

    // ---------------------------------------------------------------------------------------
    // port-forward
    // ---------------------------------------------------------------------------------------

    /// Registers what answers connections to `port` of pod `pod` (by name; survives replacement).
    pub fn register_port(&self, ns: &str, pod: &str, port: u16, handler: impl PortForwardHandler) {
        lock(&self.backend.inner.ports).insert((ns.into(), pod.into(), port), Arc::new(handler));
    }

    pub fn unregister_port(&self, ns: &str, pod: &str, port: u16) {
        lock(&self.backend.inner.ports).remove(&(ns.to_string(), pod.to_string(), port));
    }

    // ---------------------------------------------------------------------------------------
    // ServiceAccount tokens
    // ---------------------------------------------------------------------------------------

    /// Issues a bound ServiceAccount token. The checks a `TokenRequest` makes first (the account
    /// exists, the bound object exists with that uid) are the API's; the kubelet model calls
    /// this directly for its projected volumes, with the uid of the account if it exists.
    pub fn issue_token(&self, req: &TokenRequest) -> String {
        self.backend.issue_token(req)
    }

    /// The uid of a ServiceAccount, if it exists.
    pub fn service_account_uid(&self, namespace: &str, name: &str) -> Option<String> {
        self.backend.service_account_uid(namespace, name)
    }

    /// The `status` of a `TokenReview` of `token` for `audiences` (empty: the API server's),
    /// as the API server's ServiceAccount token authenticator answers it (F12.7, F12.11): the
    /// token must be one this cluster issued, unexpired (unless the kubelet keeps it fresh),
    /// share an audience with the review, name a ServiceAccount that still exists with the same
    /// uid, and be bound to an object that still exists with the same uid.
    pub fn review_token(&self, token: &str, audiences: &[String]) -> Value {
        self.backend.review_token(token, audiences)
    }
}

impl Default for Cluster {
    fn default() -> Self {
        Self::new(ClusterConfig::default())
    }
}

/// The container's filesystem: an ephemeral root plus its `volumeMounts`, resolved through the
/// pod's `volumes` (PVC: per claim, outlives the pod; anything else: per pod uid and volume,
/// where secret, configMap, projected and downwardAPI volumes hold the files the kubelet wrote
/// at container start).
pub fn container_mounts(cluster: &Cluster, req: &ExecRequest) -> Mounts {
    exec::container_mounts(&cluster.backend, req)
}

/// Writes the files of a pod's API-backed volumes (secret, configMap, projected, downwardAPI)
/// as the kubelet does when a container starts.
pub fn populate_volumes(cluster: &Cluster, pod: &Value) -> Result<(), MountFailure> {
    crate::volumes::populate_volumes(&cluster.backend, pod)
}
