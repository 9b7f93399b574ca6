//! The object store and the API semantics every writer goes through (HTTP clients and in-process
//! controllers alike): uid/creationTimestamp/generation, a cluster-wide monotonic
//! resourceVersion, optimistic concurrency and the status subresource. The rest of the API lives
//! in submodules: admission defaults and validation ([`admission`]), the scale and binding
//! subresources ([`subresources`]), deletion with grace periods, finalizers and propagation
//! ([`deletion`]) and the built-in controllers that must act for the API to be faithful
//! (garbage collector, namespace lifecycle, PVC protection; [`controllers`]).
//!
//! Built-in controllers run synchronously after each write ("settle"), so a sequence of
//! operations always yields the same sequence of watch events and resourceVersions.

use crate::clock::Clock;
use crate::error::{ApiError, ApiResult, qualified};
use crate::patch::{PatchBody, PatchKind};
use crate::pointer::Pointer;
use crate::resources::{ResourceDef, Resources, apply_schema_defaults};
use crate::selectors::{FieldSelector, LabelSelector};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

mod admission;
mod controllers;
mod deletion;
mod names;
mod subresources;

/// (group, plural): the identity of a resource, independent of the version it is served in.
pub(crate) type Gr = (String, String);
/// (namespace or "", name).
pub(crate) type NsName = (String, String);

pub(crate) const FINALIZER_FOREGROUND: &str = "foregroundDeletion";
pub(crate) const FINALIZER_ORPHAN: &str = "orphan";
pub(crate) const FINALIZER_PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One retained change, as watchers replay it. The objects are the store's own, shared: an
/// event costs a reference count, not a copy of the object.
#[derive(Debug, Clone)]
pub(crate) struct EventRecord {
    pub rv: u64,
    pub type_: EventType,
    pub object: Arc<Value>,
    /// The object before a MODIFIED, so selector-filtered watches can turn a change that leaves
    /// (or enters) the selection into DELETED (or ADDED), as the real watch cache does.
    pub prev: Option<Arc<Value>>,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct EventLog {
    pub events: VecDeque<Arc<EventRecord>>,
    /// The resourceVersion of the newest evicted event: a watch from an older version cannot be
    /// served (410 Expired).
    pub evicted_upto: u64,
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subresource {
    Main,
    Status,
}

/// `metav1.DeleteOptions`, the fields the API honours.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    /// `Background` (the default here, as for all apps/v1 and core kinds), `Foreground` or `Orphan`.
    pub propagation_policy: Option<String>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
}

impl DeleteOptions {
    pub fn from_json(v: &Value) -> Self {
        let s = |p: &str| v.at(p).and_then(Value::as_str).map(str::to_string);
        let mut o = Self {
            grace_period_seconds: v.get("gracePeriodSeconds").and_then(Value::as_i64),
            propagation_policy: s("/propagationPolicy"),
            precondition_uid: s("/preconditions/uid"),
            precondition_resource_version: s("/preconditions/resourceVersion"),
        };
        if o.propagation_policy.is_none()
            && v.get("orphanDependents").and_then(Value::as_bool) == Some(true)
        {
            o.propagation_policy = Some("Orphan".into());
        }
        o
    }
}

/// List filtering.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub label_selector: Option<LabelSelector>,
    pub field_selector: Option<FieldSelector>,
}

impl ListOptions {
    pub fn matches(&self, obj: &Value) -> bool {
        self.label_selector.as_ref().is_none_or(|s| s.matches(obj))
            && self.field_selector.as_ref().is_none_or(|s| s.matches(obj))
    }
}

/// A graceful pod deletion whose grace period the server must time out.
#[derive(Debug, Clone)]
pub(crate) struct PendingGrace {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub after: Duration,
}

#[derive(Clone)]
pub(crate) struct State {
    pub rv: u64,
    uid_counter: u64,
    name_counter: u64,
    ip_counter: u32,
    pub resources: Resources,
    /// Stored objects are immutable once stored and shared with readers and the event log
    /// (copying them on every read was the top item of the proof's profile); a write replaces
    /// the whole `Arc`.
    objects: BTreeMap<Gr, BTreeMap<NsName, Arc<Value>>>,
    uids: BTreeMap<String, (Gr, NsName)>,
    pub logs: BTreeMap<Gr, EventLog>,
    pub window: usize,
    pub clock: Clock,
    /// Grace timers to start once the lock is released.
    pub pending_grace: Vec<PendingGrace>,
    /// Pods removed from the store: (namespace, name, uid), for the exec/log/volume registries.
    pub removed_pods: Vec<(String, String, String)>,
    /// PersistentVolumeClaims removed from the store: (namespace, name), whose data goes with
    /// them.
    pub removed_claims: Vec<(String, String)>,
    /// The uids of the objects being deleted (a deletionTimestamp set).
    deleting: BTreeSet<String>,
    /// Whether a change since the emulated controllers last settled may have left them work
    /// beyond what `deleting` shows: an object removed (its dependents may dangle now), or one
    /// written with an owner that is absent or being deleted.
    unsettled: bool,
}

fn meta(obj: &Value, key: &str) -> Option<String> {
    obj.get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj.at("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn is_deleting(obj: &Value) -> bool {
    obj.at("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// Whether two objects differ in what counts as a spec change for `metadata.generation`
/// (everything but metadata, status, apiVersion and kind). Compared in place: every update
/// asks, and copying both objects to strip four keys was a top item of the proof's profile.
fn same_spec(a: &Value, b: &Value) -> bool {
    const NOT_SPEC: [&str; 4] = ["metadata", "status", "apiVersion", "kind"];
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let spec = |m: &'_ Map<String, Value>| {
        m.iter()
            .filter(|(k, _)| !NOT_SPEC.contains(&k.as_str()))
            .count()
    };
    spec(a) == spec(b)
        && a.iter()
            .filter(|(k, _)| !NOT_SPEC.contains(&k.as_str()))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// A create body must be an object of the resource's kind (or of no kind).
fn check_create_body(def: &ResourceDef, obj: &Value) -> ApiResult<()> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be an object",
        ));
    }
    if let Some(k) = obj.get("kind").and_then(Value::as_str)
        && !k.is_empty()
        && k != def.kind
    {
        return Err(ApiError::bad_request(format!(
            "the object kind {k:?} does not match the resource {:?} (kind {:?})",
            def.plural, def.kind
        )));
    }
    Ok(())
}

/// The namespace of a new object: the request's, else the body's, else `default`; the two must
/// agree. `None` for cluster-scoped resources.
fn create_namespace(def: &ResourceDef, ns: Option<&str>, obj: &Value) -> ApiResult<Option<String>> {
    if !def.namespaced {
        return Ok(None);
    }
    let ns_in_body = meta(obj, "namespace");
    let n = ns
        .map(str::to_string)
        .or(ns_in_body.clone())
        .unwrap_or_else(|| "default".into());
    if let Some(b) = ns_in_body
        && !b.is_empty()
        && b != n
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(Some(n))
}

/// An update body names the object of the URL and, when it carries them, its current
/// resourceVersion and uid.
fn check_update_preconditions(
    def: &ResourceDef,
    name: &str,
    body: &Value,
    old: &Value,
) -> ApiResult<()> {
    if let Some(n) = meta(body, "name")
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    if let Some(rv) = meta(body, "resourceVersion")
        && !rv.is_empty()
        && Some(&rv) != meta(old, "resourceVersion").as_ref()
    {
        return Err(ApiError::stale(&def.group, &def.plural, name));
    }
    if let Some(uid) = meta(body, "uid")
        && !uid.is_empty()
        && Some(&uid) != meta(old, "uid").as_ref()
    {
        return Err(ApiError::conflict(
            &def.group,
            &def.plural,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta(old, "uid").unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

/// An update of the status subresource: the stored object with the body's status (moved out of
/// the body; the old status is not copied only to be replaced).
fn status_update(old: &Value, mut body: Value) -> Value {
    let status = body.as_object_mut().and_then(|b| b.remove("status"));
    let Some(om) = old.as_object() else {
        return old.clone();
    };
    let mut n: Map<String, Value> = om
        .iter()
        .filter(|(k, _)| k.as_str() != "status")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(s) = status {
        n.insert("status".into(), s);
    }
    Value::Object(n)
}

/// The parts of an object a status update reads: its metadata and its status.
fn status_part(obj: &Value) -> Value {
    let mut part = Map::new();
    for k in ["metadata", "status"] {
        if let Some(v) = obj.get(k) {
            part.insert(k.into(), v.clone());
        }
    }
    Value::Object(part)
}

/// Finalizers may only be removed from an object being deleted.
fn check_no_new_finalizers(
    def: &ResourceDef,
    name: &str,
    old: &Value,
    new: &Value,
) -> ApiResult<()> {
    if is_deleting(old) {
        let of: BTreeSet<String> = finalizers(old).into_iter().collect();
        if finalizers(new).iter().any(|f| !of.contains(f)) {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                name,
                "metadata.finalizers",
                "Forbidden: no new finalizers can be added if the object is being deleted",
            ));
        }
    }
    Ok(())
}

impl State {
    pub(crate) fn new(clock: Clock, window: usize) -> Self {
        Self {
            rv: 0,
            uid_counter: 0,
            name_counter: 0,
            ip_counter: 0,
            resources: Resources::builtin(),
            objects: BTreeMap::new(),
            uids: BTreeMap::new(),
            logs: BTreeMap::new(),
            window: window.max(1),
            clock,
            pending_grace: vec![],
            removed_pods: vec![],
            removed_claims: vec![],
            deleting: BTreeSet::new(),
            unsettled: false,
        }
    }

    pub(crate) fn def(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> ApiResult<Arc<ResourceDef>> {
        self.resources
            .get(group, version, plural)
            .cloned()
            .ok_or_else(|| {
                ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )
            })
    }

    fn next_uid(&mut self) -> String {
        self.uid_counter += 1;
        // Deterministic, UUID-shaped (version nibble 4, variant 8) so clients that parse uids accept it.
        let n = self.uid_counter;
        format!("00000000-0000-4000-8000-{n:012x}")
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// The random-looking suffix of `generateName`, from a counter (the real alphabet, no vowels).
    fn next_suffix(&mut self) -> String {
        const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        self.name_counter += 1;
        let mut n = self.name_counter * 7919 + 104_729;
        (0..5)
            .map(|_| {
                let c = ALPHA[(n % ALPHA.len() as u64) as usize] as char;
                n /= ALPHA.len() as u64;
                c
            })
            .collect()
    }

    fn emit(&mut self, gr: &Gr, type_: EventType, object: Arc<Value>, prev: Option<Arc<Value>>) {
        self.note_for_settle(type_, &object);
        let rv = self.rv;
        let window = self.window;
        let log = self.logs.entry(gr.clone()).or_default();
        log.events.push_back(Arc::new(EventRecord {
            rv,
            type_,
            object,
            prev,
        }));
        while log.events.len() > window {
            if let Some(e) = log.events.pop_front() {
                log.evicted_upto = e.rv;
            }
        }
    }

    /// Keeps what tells `settle` whether the emulated controllers can have work (every change
    /// passes here): garbage collection, finalizers and namespace lifecycle act only on objects
    /// being deleted, dependents of removed owners, or objects written with an owner absent or
    /// being deleted. Otherwise `settle` skips its scan of the whole store, which it did after
    /// every write (about 6 % of the proof's instructions, for nothing on most writes).
    fn note_for_settle(&mut self, type_: EventType, obj: &Value) {
        let uid = obj
            .at("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if type_ == EventType::Deleted {
            self.deleting.remove(uid);
            self.unsettled = true;
            return;
        }
        if is_deleting(obj) {
            self.deleting.insert(uid.to_string());
        } else {
            self.deleting.remove(uid);
        }
        let refs = obj
            .at("/metadata/ownerReferences")
            .and_then(Value::as_array);
        if refs.into_iter().flatten().any(|r| {
            let owner = r.get("uid").and_then(Value::as_str).unwrap_or_default();
            !self.uids.contains_key(owner) || self.deleting.contains(owner)
        }) {
            self.unsettled = true;
        }
    }

    /// The object as served in `version` (custom resources are stored once, served in all versions).
    pub(crate) fn present(def: &ResourceDef, version: &str, obj: &Value) -> Value {
        let mut o = obj.clone();
        if let Some(m) = o.as_object_mut() {
            m.insert("apiVersion".into(), json!(def.api_version(version)));
            m.insert("kind".into(), json!(def.kind));
        }
        o
    }

    /// As [`State::present`], but shared: the stored object itself when it is already in
    /// `version` (the common case: objects are read in the version they were written in), a
    /// presented copy otherwise.
    pub(crate) fn present_shared(def: &ResourceDef, version: &str, obj: &Arc<Value>) -> Arc<Value> {
        // `apiVersion == def.api_version(version)`, compared without building the string.
        let api_version_is = |a: &str| {
            if def.group.is_empty() {
                a == version
            } else {
                a.strip_prefix(def.group.as_str())
                    .and_then(|r| r.strip_prefix('/'))
                    == Some(version)
            }
        };
        let as_served = obj.get("kind").and_then(Value::as_str) == Some(def.kind.as_str())
            && obj
                .get("apiVersion")
                .and_then(Value::as_str)
                .is_some_and(api_version_is);
        if as_served {
            Arc::clone(obj)
        } else {
            Arc::new(Self::present(def, version, obj))
        }
    }

    fn key(def: &ResourceDef, ns: Option<&str>, name: &str) -> NsName {
        (
            if def.namespaced {
                ns.unwrap_or("").to_string()
            } else {
                String::new()
            },
            name.to_string(),
        )
    }

    pub(crate) fn get_raw(&self, gr: &Gr, key: &NsName) -> Option<&Value> {
        self.get_shared(gr, key).map(|o| &**o)
    }

    /// The stored object itself, shared.
    pub(crate) fn get_shared(&self, gr: &Gr, key: &NsName) -> Option<&Arc<Value>> {
        self.objects.get(gr).and_then(|m| m.get(key))
    }

    pub(crate) fn get(
        &self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
    ) -> ApiResult<Arc<Value>> {
        self.get_shared(&def.gr(), &Self::key(def, ns, name))
            .map(|o| Self::present_shared(def, version, o))
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))
    }

    /// Objects of a resource (in one namespace or all), sorted by namespace and name like etcd keys.
    pub(crate) fn list(
        &self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Vec<Arc<Value>> {
        let Some(m) = self.objects.get(&def.gr()) else {
            return vec![];
        };
        m.iter()
            .filter(|((ons, _), _)| ns.is_none_or(|n| !def.namespaced || n == ons))
            .filter(|(_, o)| opts.matches(o))
            .map(|(_, o)| Self::present_shared(def, version, o))
            .collect()
    }

    /// As [`State::list`], but the objects as stored (in the version last written), borrowed.
    pub(crate) fn list_raw<'a>(
        &'a self,
        def: &'a ResourceDef,
        ns: Option<&'a str>,
        opts: &'a ListOptions,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects
            .get(&def.gr())
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(move |((ons, _), _)| ns.is_none_or(|n| !def.namespaced || n == ons))
            .filter(move |(_, o)| opts.matches(o))
            .map(|(_, o)| &**o)
    }

    /// As [`State::get`], but the object as stored, borrowed.
    pub(crate) fn get_ref(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
    ) -> ApiResult<&Value> {
        self.get_raw(&def.gr(), &Self::key(def, ns, name))
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))
    }

    pub(crate) fn namespace_phase(&self, ns: &str) -> Option<String> {
        self.get_raw(
            &(String::new(), "namespaces".into()),
            &(String::new(), ns.into()),
        )
        .map(|n| {
            if is_deleting(n) {
                "Terminating".into()
            } else {
                "Active".into()
            }
        })
    }

    // ---------------------------------------------------------------------------------------
    // create
    // ---------------------------------------------------------------------------------------

    pub(crate) fn create(
        &mut self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        body: Value,
    ) -> ApiResult<Arc<Value>> {
        let out = self.create_inner(def, version, ns, body)?;
        self.settle();
        Ok(out)
    }

    fn create_inner(
        &mut self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        body: Value,
    ) -> ApiResult<Arc<Value>> {
        let mut obj = body;
        check_create_body(def, &obj)?;
        let ns = create_namespace(def, ns, &obj)?;
        let name = self.create_name(def, &obj)?;
        names::validate_name(def, &name)?;
        if let Some(n) = &ns {
            self.check_namespace_open(def, n, &name)?;
        }
        let key = Self::key(def, ns.as_deref(), &name);
        let gr = def.gr();
        if self.get_raw(&gr, &key).is_some() {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        self.admit_create(def, version, &name, &mut obj)?;
        let uid = self.stamp_new(def, version, ns.as_deref(), &name, &mut obj);
        crate::kinds::after_stamp(def, &mut obj);
        let obj = Arc::new(obj);
        self.objects
            .entry(gr.clone())
            .or_default()
            .insert(key.clone(), Arc::clone(&obj));
        self.uids.insert(uid, (gr.clone(), key));
        self.emit(&gr, EventType::Added, Arc::clone(&obj), None);
        self.after_create(def, &obj);
        Ok(Self::present_shared(def, version, &obj))
    }

    /// The name of a new object: its own, or its `generateName` with a suffix.
    fn create_name(&mut self, def: &ResourceDef, obj: &Value) -> ApiResult<String> {
        let name = meta(obj, "name").unwrap_or_default();
        if !name.is_empty() {
            return Ok(name);
        }
        match meta(obj, "generateName") {
            Some(g) if !g.is_empty() => Ok(format!("{g}{}", self.next_suffix())),
            _ => Err(ApiError::invalid(
                &def.group,
                &def.kind,
                "",
                "metadata.name",
                "Required value: name or generateName is required",
            )),
        }
    }

    /// New content needs an existing namespace that is not being terminated.
    fn check_namespace_open(&self, def: &ResourceDef, ns: &str, name: &str) -> ApiResult<()> {
        match self.namespace_phase(ns).as_deref() {
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some("Terminating") => Err(ApiError::forbidden(format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                qualified(&def.group, &def.plural)
            ))),
            _ => Ok(()),
        }
    }

    /// Sets what the server owns in a new object's metadata (uid, creationTimestamp, the next
    /// resourceVersion, generation 1) and its apiVersion and kind. Returns the uid.
    fn stamp_new(
        &mut self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
        obj: &mut Value,
    ) -> String {
        let uid = self.next_uid();
        let now = self.clock.now_rfc3339();
        let rv = self.next_rv();
        {
            let m = meta_mut(obj);
            m.insert("name".into(), json!(name));
            match ns {
                Some(n) => m.insert("namespace".into(), json!(n)),
                None => m.remove("namespace"),
            };
            m.insert("uid".into(), json!(uid));
            m.insert("creationTimestamp".into(), json!(now));
            m.insert("resourceVersion".into(), json!(rv.to_string()));
            for k in [
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "managedFields",
                "selfLink",
            ] {
                m.remove(k);
            }
            if def.has_generation {
                m.insert("generation".into(), json!(1));
            } else {
                m.remove("generation");
            }
        }
        obj["apiVersion"] = json!(def.api_version(version));
        obj["kind"] = json!(def.kind);
        uid
    }

    fn after_create(&mut self, def: &ResourceDef, obj: &Value) {
        match (def.group.as_str(), def.plural.as_str()) {
            ("", "namespaces") => {
                // The service-account controller's "default" account in every namespace.
                let ns = meta(obj, "name").unwrap_or_default();
                if let Ok(sa) = self.def("", "v1", "serviceaccounts") {
                    let _ = self.create_inner(
                        &sa,
                        "v1",
                        Some(&ns),
                        json!({"metadata": {"name": "default"}}),
                    );
                }
            }
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                self.resources.register_crd(obj);
            }
            _ => {}
        }
    }

    // ---------------------------------------------------------------------------------------
    // update
    // ---------------------------------------------------------------------------------------

    pub(crate) fn update(
        &mut self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
        body: Value,
        sub: Subresource,
    ) -> ApiResult<Arc<Value>> {
        let out = self.update_inner(def, version, ns, name, body, sub)?;
        self.settle();
        Ok(out)
    }

    fn update_inner(
        &mut self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
        body: Value,
        sub: Subresource,
    ) -> ApiResult<Arc<Value>> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be an object",
            ));
        }
        let gr = def.gr();
        let key = Self::key(def, ns, name);
        let old = self
            .get_shared(&gr, &key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))?;
        check_update_preconditions(def, name, &body, &old)?;
        let mut new = match sub {
            Subresource::Status => status_update(&old, body),
            Subresource::Main => self.main_update(def, version, name, &old, body)?,
        };
        check_no_new_finalizers(def, name, &old, &new)?;
        new["apiVersion"] = old["apiVersion"].clone();
        new["kind"] = json!(def.kind);
        meta_mut(&mut new).insert(
            "resourceVersion".into(),
            old["metadata"]["resourceVersion"].clone(),
        );
        if def.has_generation && !same_spec(&new, &old) {
            let g = old
                .at("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        if new == *old {
            // A no-op write is not persisted: no new resourceVersion, no watch event.
            return Ok(Self::present_shared(def, version, &old));
        }
        // The answer is the object as stored, shared with the store (callers in process write
        // on every reconcile and mostly drop the answer); `write` moves `new` into the store, or
        // removes it (its last finalizer gone) and then the answer is the update as written.
        match self.write(def, &key, new, old) {
            None => self
                .get_shared(&gr, &key)
                .map(|o| Self::present_shared(def, version, o))
                .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name)),
            Some(last) => Ok(Self::present_shared(def, version, &Arc::new(last))),
        }
    }

    /// An update of the main resource: the body, but for the metadata the server owns and the
    /// status (under a status subresource), with schema defaults and the kind's validation.
    fn main_update(
        &self,
        def: &ResourceDef,
        version: &str,
        name: &str,
        old: &Value,
        body: Value,
    ) -> ApiResult<Value> {
        let mut n = body;
        {
            let om = old.get("metadata").cloned().unwrap_or(json!({}));
            let m = meta_mut(&mut n);
            for k in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match om.get(k) {
                    Some(v) => m.insert(k.into(), v.clone()),
                    None => m.remove(k),
                };
            }
            m.remove("managedFields");
        }
        if def.has_status(version) {
            match old.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    if let Some(m) = n.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        if def.custom
            && let Some(schema) = def.version(version).and_then(|v| v.schema.clone())
        {
            apply_schema_defaults(&schema, &mut n);
        }
        self.validate_update(def, name, old, &mut n)?;
        Ok(n)
    }

    /// Stores a changed object (bumping the resourceVersion); an object being deleted whose last
    /// finalizer is gone and whose grace period is over is removed instead.
    /// Returns the written object when it was removed instead of stored.
    fn write(
        &mut self,
        def: &ResourceDef,
        key: &NsName,
        mut new: Value,
        old: Arc<Value>,
    ) -> Option<Value> {
        let gr = def.gr();
        let grace_over = new
            .at("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            == 0;
        let spec_finalizers_empty = new
            .at("/spec/finalizers")
            .and_then(Value::as_array)
            .is_none_or(|a| a.is_empty())
            || gr.1 != "namespaces";
        if is_deleting(&new) && finalizers(&new).is_empty() && grace_over && spec_finalizers_empty {
            let answer = new.clone();
            self.remove(&gr, key, Some(new));
            return Some(answer);
        }
        let rv = self.next_rv();
        meta_mut(&mut new).insert("resourceVersion".into(), json!(rv.to_string()));
        let new = Arc::new(new);
        self.objects
            .entry(gr.clone())
            .or_default()
            .insert(key.clone(), Arc::clone(&new));
        if gr
            == (
                "apiextensions.k8s.io".to_string(),
                "customresourcedefinitions".to_string(),
            )
        {
            self.resources.register_crd(&new);
        }
        self.emit(&gr, EventType::Modified, new, Some(old));
        None
    }

    // ---------------------------------------------------------------------------------------
    // patch
    // ---------------------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &mut self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        body: PatchBody<'_>,
        sub: Subresource,
    ) -> ApiResult<Arc<Value>> {
        if kind == PatchKind::Strategic && def.custom {
            return Err(ApiError::unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        let current = match self.get(def, version, ns, name) {
            Ok(c) => c,
            Err(e) if e.code == 404 && kind == PatchKind::Apply && sub == Subresource::Main => {
                // Server-side apply creates what does not exist yet.
                let mut obj = body.apply_object()?;
                if meta(&obj, "name").is_some_and(|n| n != name) {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({}) does not match the name on the URL ({name})",
                        meta(&obj, "name").unwrap_or_default()
                    )));
                }
                meta_mut(&mut obj).insert("name".into(), json!(name));
                return self.create(def, version, ns, obj);
            }
            Err(e) => return Err(e),
        };
        // A merge patch of the status subresource changes only the status, and a status update
        // reads no more of its body than the status and the metadata: patch those, not a copy
        // of the whole object.
        let patched = if sub == Subresource::Status && kind == PatchKind::Merge {
            body.apply(kind, &status_part(&current))?
        } else {
            body.apply(kind, &current)?
        };
        if !patched.is_object() {
            return Err(ApiError::bad_request("the patched object is not an object"));
        }
        self.update(def, version, ns, name, patched, sub)
    }

    /// Retained events of a resource newer than `rv`, or `Err(oldest servable)` when some of
    /// them have been evicted.
    pub(crate) fn events_since(&self, gr: &Gr, rv: u64) -> Result<Vec<Arc<EventRecord>>, u64> {
        let Some(log) = self.logs.get(gr) else {
            return Ok(vec![]);
        };
        if rv < log.evicted_upto {
            return Err(log.evicted_upto);
        }
        let start = log.events.partition_point(|e| e.rv <= rv);
        Ok(log.events.range(start..).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::{State, same_spec, status_part, status_update};
    use crate::resources::Resources;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn a_read_in_the_stored_version_shares_the_stored_object_and_another_version_gets_a_copy() {
        let r = Resources::builtin();
        let def = r
            .get("apps", "v1", "deployments")
            .expect("deployments")
            .clone();
        let stored = Arc::new(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                                     "metadata": {"name": "d"}, "spec": {"replicas": 1}}));
        assert!(Arc::ptr_eq(
            &State::present_shared(&def, "v1", &stored),
            &stored
        ));
        let other = State::present_shared(&def, "v2", &stored);
        assert!(!Arc::ptr_eq(&other, &stored));
        assert_eq!(other["apiVersion"], "apps/v2");
        assert_eq!(other["spec"], stored["spec"]);
        assert_eq!(stored["apiVersion"], "apps/v1");
        let core = r.get("", "v1", "pods").expect("pods").clone();
        let pod = Arc::new(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}));
        assert!(Arc::ptr_eq(&State::present_shared(&core, "v1", &pod), &pod));
        let kindless = Arc::new(json!({"apiVersion": "v1", "metadata": {"name": "p"}}));
        assert_eq!(State::present_shared(&core, "v1", &kindless)["kind"], "Pod");
    }

    #[test]
    fn a_status_update_takes_the_bodys_status_and_keeps_everything_else_stored() {
        let old =
            json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"phase": "Pending"}});
        let body =
            json!({"metadata": {"name": "b"}, "spec": {"x": 2}, "status": {"phase": "Running"}});
        assert_eq!(
            status_update(&old, body),
            json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"phase": "Running"}})
        );
        assert_eq!(
            status_update(&old, json!({"spec": {"x": 2}})),
            json!({"metadata": {"name": "a"}, "spec": {"x": 1}})
        );
        assert_eq!(
            status_update(&json!({"spec": {}}), json!({"status": {"p": 1}})),
            json!({"spec": {}, "status": {"p": 1}})
        );
    }

    #[test]
    fn the_status_part_of_an_object_is_its_metadata_and_status_only() {
        let o = json!({"apiVersion": "v1", "metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"s": 1}});
        assert_eq!(
            status_part(&o),
            json!({"metadata": {"name": "a"}, "status": {"s": 1}})
        );
        assert_eq!(status_part(&json!({"spec": {}})), json!({}));
    }

    #[test]
    fn metadata_status_api_version_and_kind_do_not_count_as_a_spec_change() {
        let a = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"},
                       "spec": {"x": 1}, "status": {"phase": "Pending"}});
        let b = json!({"apiVersion": "v2", "metadata": {"name": "a", "labels": {"l": "v"}},
                       "spec": {"x": 1}, "status": {"phase": "Running"}});
        assert!(same_spec(&a, &b));
    }

    #[test]
    fn a_changed_added_or_removed_top_level_field_counts_as_a_spec_change() {
        let a = json!({"metadata": {}, "spec": {"x": 1}});
        assert!(!same_spec(&a, &json!({"metadata": {}, "spec": {"x": 2}})));
        assert!(!same_spec(
            &a,
            &json!({"metadata": {}, "spec": {"x": 1}, "data": {}})
        ));
        assert!(!same_spec(&a, &json!({"metadata": {}})));
        assert!(!same_spec(&json!({"metadata": {}}), &a));
    }
}
