//! The object store and the API semantics every writer goes through (HTTP clients and in-process
//! controllers alike): admission defaults, uid/creationTimestamp/generation, a cluster-wide
//! monotonic resourceVersion, optimistic concurrency, the status and scale subresources,
//! deletion (grace periods, finalizers, propagation) and the built-in controllers that must act
//! for the API to be faithful (garbage collector, namespace lifecycle, PVC protection).
//!
//! Built-in controllers run synchronously after each write ("settle"), so a sequence of
//! operations always yields the same sequence of watch events and resourceVersions.

use crate::clock::{Clock, format_unix, parse_unix};
use crate::error::{ApiError, ApiResult, qualified};
use crate::patch::{PatchKind, apply_patch};
use crate::resources::{ResourceDef, Resources, apply_schema_defaults};
use crate::selectors::{FieldSelector, LabelSelector};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// (group, plural): the identity of a resource, independent of the version it is served in.
pub type Gr = (String, String);
/// (namespace or "", name).
pub type NsName = (String, String);

pub const FINALIZER_FOREGROUND: &str = "foregroundDeletion";
pub const FINALIZER_ORPHAN: &str = "orphan";
pub const FINALIZER_PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One retained change, as watchers replay it.
#[derive(Debug, Clone)]
pub struct EventRecord {
    pub rv: u64,
    pub type_: EventType,
    pub object: Value,
    /// The object before a MODIFIED, so selector-filtered watches can turn a change that leaves
    /// (or enters) the selection into DELETED (or ADDED), as the real watch cache does.
    pub prev: Option<Value>,
}

#[derive(Debug, Default, Clone)]
pub struct EventLog {
    pub events: VecDeque<Arc<EventRecord>>,
    /// The resourceVersion of the newest evicted event: a watch from an older version cannot be
    /// served (410 Expired).
    pub evicted_upto: u64,
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
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
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
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
pub struct PendingGrace {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub after: Duration,
}

#[derive(Clone)]
pub struct State {
    pub rv: u64,
    uid_counter: u64,
    name_counter: u64,
    ip_counter: u32,
    pub resources: Resources,
    objects: BTreeMap<Gr, BTreeMap<NsName, Value>>,
    uids: BTreeMap<String, (Gr, NsName)>,
    pub logs: BTreeMap<Gr, EventLog>,
    pub window: usize,
    pub clock: Clock,
    /// Grace timers to start once the lock is released.
    pub pending_grace: Vec<PendingGrace>,
    /// Pods removed from the store: (namespace, name, uid), for the exec/log/volume registries.
    pub removed_pods: Vec<(String, String, String)>,
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
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// Strips what does not count as a spec change for `metadata.generation`.
fn spec_part(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    o
}

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Base64 (standard alphabet, padded) for `Secret.stringData`.
fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

enum Action {
    Delete(Gr, NsName, DeleteOptions),
    RemoveOwnerRefs(Gr, NsName, Vec<String>),
    RemoveFinalizer(Gr, NsName, &'static str),
    FinalizeNamespace(String),
}

impl State {
    pub fn new(clock: Clock, window: usize) -> Self {
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
        }
    }

    pub fn def(&self, group: &str, version: &str, plural: &str) -> ApiResult<ResourceDef> {
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

    fn emit(&mut self, gr: &Gr, type_: EventType, object: Value, prev: Option<Value>) {
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

    /// The object as served in `version` (custom resources are stored once, served in all versions).
    pub fn present(def: &ResourceDef, version: &str, obj: &Value) -> Value {
        let mut o = obj.clone();
        if let Some(m) = o.as_object_mut() {
            m.insert("apiVersion".into(), json!(def.api_version(version)));
            m.insert("kind".into(), json!(def.kind));
        }
        o
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

    pub fn get_raw(&self, gr: &Gr, key: &NsName) -> Option<&Value> {
        self.objects.get(gr).and_then(|m| m.get(key))
    }

    pub fn get(
        &self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
    ) -> ApiResult<Value> {
        self.get_raw(&def.gr(), &Self::key(def, ns, name))
            .map(|o| Self::present(def, version, o))
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))
    }

    /// Objects of a resource (in one namespace or all), sorted by namespace and name like etcd keys.
    pub fn list(
        &self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Vec<Value> {
        let Some(m) = self.objects.get(&def.gr()) else {
            return vec![];
        };
        m.iter()
            .filter(|((ons, _), _)| ns.is_none_or(|n| !def.namespaced || n == ons))
            .filter(|(_, o)| opts.matches(o))
            .map(|(_, o)| Self::present(def, version, o))
            .collect()
    }

    pub fn namespace_phase(&self, ns: &str) -> Option<String> {
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

    pub fn create(
        &mut self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        body: Value,
    ) -> ApiResult<Value> {
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
    ) -> ApiResult<Value> {
        let mut obj = body;
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
        let ns_in_body = meta(&obj, "namespace");
        let ns = if def.namespaced {
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
            Some(n)
        } else {
            None
        };
        let mut name = meta(&obj, "name").unwrap_or_default();
        if name.is_empty() {
            match meta(&obj, "generateName") {
                Some(g) if !g.is_empty() => name = format!("{g}{}", self.next_suffix()),
                _ => {
                    return Err(ApiError::invalid(
                        &def.group,
                        &def.kind,
                        "",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    ));
                }
            }
        }
        let label_names = matches!(
            (def.group.as_str(), def.plural.as_str()),
            ("", "namespaces") | ("", "services")
        );
        let (valid, msg) = if label_names {
            (is_dns_label(&name), DNS1123_LABEL_MSG)
        } else {
            (is_dns_subdomain(&name), DNS1123_SUBDOMAIN_MSG)
        };
        if !valid {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                &name,
                "metadata.name",
                &format!("Invalid value: {name:?}: {msg}"),
            ));
        }
        if let Some(n) = &ns {
            match self.namespace_phase(n).as_deref() {
                None => return Err(ApiError::not_found("", "namespaces", n)),
                Some("Terminating") => {
                    return Err(ApiError::forbidden(format!(
                        "{} \"{name}\" is forbidden: unable to create new content in namespace {n} because it is being terminated",
                        qualified(&def.group, &def.plural)
                    )));
                }
                _ => {}
            }
        }
        let key = Self::key(def, ns.as_deref(), &name);
        let gr = def.gr();
        if self.get_raw(&gr, &key).is_some() {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        self.admit_create(def, version, &name, &mut obj)?;
        let uid = self.next_uid();
        let now = self.clock.now_rfc3339();
        let rv = self.next_rv();
        {
            let m = meta_mut(&mut obj);
            m.insert("name".into(), json!(name));
            match &ns {
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
        self.objects
            .entry(gr.clone())
            .or_default()
            .insert(key.clone(), obj.clone());
        self.uids.insert(uid, (gr.clone(), key));
        self.emit(&gr, EventType::Added, obj.clone(), None);
        self.after_create(def, &obj);
        Ok(Self::present(def, version, &obj))
    }

    /// Defaults and validation the real admission chain and registry strategies apply on create.
    fn admit_create(
        &mut self,
        def: &ResourceDef,
        version: &str,
        name: &str,
        obj: &mut Value,
    ) -> ApiResult<()> {
        if def.has_status(version) {
            // Status is not settable on create when the status subresource exists.
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
        if def.custom {
            if let Some(schema) = def.version(version).and_then(|v| v.schema.clone()) {
                apply_schema_defaults(&schema, obj);
            }
            return Ok(());
        }
        match (def.group.as_str(), def.plural.as_str()) {
            ("", "namespaces") => {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                obj["status"] = json!({"phase": "Active"});
                let m = meta_mut(obj);
                let labels = m.entry("labels").or_insert_with(|| json!({}));
                labels["kubernetes.io/metadata.name"] = json!(name);
            }
            ("", "pods") => admit_pod(def, name, obj)?,
            ("", "persistentvolumeclaims") => {
                let m = meta_mut(obj);
                let f = m.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(a) = f.as_array_mut()
                    && !a.iter().any(|x| x == FINALIZER_PVC_PROTECTION)
                {
                    a.push(json!(FINALIZER_PVC_PROTECTION));
                }
                let spec = obj.get_mut("spec").and_then(Value::as_object_mut);
                let Some(spec) = spec else {
                    return Err(ApiError::invalid(
                        "",
                        &def.kind,
                        name,
                        "spec.accessModes",
                        "Required value",
                    ));
                };
                spec.entry("volumeMode").or_insert(json!("Filesystem"));
                obj["status"] = json!({"phase": "Pending"});
            }
            ("", "services") => {
                let spec = obj
                    .get_mut("spec")
                    .and_then(Value::as_object_mut)
                    .ok_or_else(|| {
                        ApiError::invalid("", &def.kind, name, "spec.ports", "Required value")
                    })?;
                let type_ = spec
                    .entry("type")
                    .or_insert(json!("ClusterIP"))
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                spec.entry("sessionAffinity").or_insert(json!("None"));
                if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        let port = p.get("port").cloned().unwrap_or(Value::Null);
                        if let Some(pm) = p.as_object_mut() {
                            pm.entry("protocol").or_insert(json!("TCP"));
                            pm.entry("targetPort").or_insert(port);
                        }
                    }
                }
                if type_ != "ExternalName"
                    && spec
                        .get("clusterIP")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                {
                    self.ip_counter += 1;
                    let n = self.ip_counter + 9;
                    let ip = format!("10.96.{}.{}", n / 256, n % 256);
                    spec.insert("clusterIP".into(), json!(ip));
                    spec.insert("clusterIPs".into(), json!([ip]));
                }
                obj["status"] = json!({"loadBalancer": {}});
            }
            ("", "secrets") => {
                if obj.get("type").is_none() {
                    obj["type"] = json!("Opaque");
                }
                if let Some(Value::Object(sd)) =
                    obj.as_object_mut().and_then(|m| m.remove("stringData"))
                {
                    let data = obj
                        .as_object_mut()
                        .expect("object")
                        .entry("data")
                        .or_insert_with(|| json!({}));
                    for (k, v) in sd {
                        data[k] = json!(base64(v.as_str().unwrap_or_default().as_bytes()));
                    }
                }
            }
            ("apps", "statefulsets" | "deployments" | "replicasets") => {
                let spec = obj
                    .get_mut("spec")
                    .and_then(Value::as_object_mut)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "apps",
                            &def.kind,
                            name,
                            "spec.selector",
                            "Required value",
                        )
                    })?;
                if spec.get("selector").is_none() {
                    return Err(ApiError::invalid(
                        "apps",
                        &def.kind,
                        name,
                        "spec.selector",
                        "Required value",
                    ));
                }
                spec.entry("replicas").or_insert(json!(1));
                if def.plural == "statefulsets" {
                    spec.entry("podManagementPolicy")
                        .or_insert(json!("OrderedReady"));
                }
            }
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                let names = obj.pointer("/spec/names").cloned().unwrap_or(json!({}));
                let group = obj
                    .pointer("/spec/group")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let plural = names
                    .get("plural")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if name != format!("{plural}.{group}") {
                    return Err(ApiError::invalid(
                        "apiextensions.k8s.io",
                        &def.kind,
                        name,
                        "metadata.name",
                        &format!(
                            "Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"
                        ),
                    ));
                }
                let now = self.clock.now_rfc3339();
                obj["status"] = json!({
                    "acceptedNames": names,
                    "storedVersions": obj.pointer("/spec/versions").and_then(Value::as_array)
                        .map(|vs| vs.iter().filter(|v| v.get("storage") == Some(&json!(true)))
                            .filter_map(|v| v.get("name").cloned()).collect::<Vec<_>>()).unwrap_or_default(),
                    "conditions": [
                        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                         "message": "no conflicts found", "lastTransitionTime": now},
                        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                         "message": "the initial names have been accepted", "lastTransitionTime": now}
                    ]
                });
            }
            _ => {}
        }
        Ok(())
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

    pub fn update(
        &mut self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
        body: Value,
        sub: Subresource,
    ) -> ApiResult<Value> {
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
    ) -> ApiResult<Value> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be an object",
            ));
        }
        let gr = def.gr();
        let key = Self::key(def, ns, name);
        let old = self
            .get_raw(&gr, &key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))?;
        if let Some(n) = meta(&body, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = meta(&body, "resourceVersion")
            && !rv.is_empty()
            && Some(&rv) != meta(&old, "resourceVersion").as_ref()
        {
            return Err(ApiError::stale(&def.group, &def.plural, name));
        }
        if let Some(uid) = meta(&body, "uid")
            && !uid.is_empty()
            && Some(&uid) != meta(&old, "uid").as_ref()
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta(&old, "uid").unwrap_or_default()
                ),
            ));
        }
        let mut new = match sub {
            Subresource::Status => {
                let mut n = old.clone();
                match body.get("status") {
                    Some(s) => n["status"] = s.clone(),
                    None => {
                        if let Some(m) = n.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                n
            }
            Subresource::Main => {
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
                self.validate_update(def, name, &old, &mut n)?;
                n
            }
        };
        if is_deleting(&old) {
            let of: BTreeSet<String> = finalizers(&old).into_iter().collect();
            if finalizers(&new).iter().any(|f| !of.contains(f)) {
                return Err(ApiError::invalid(
                    &def.group,
                    &def.kind,
                    name,
                    "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted",
                ));
            }
        }
        new["apiVersion"] = old["apiVersion"].clone();
        new["kind"] = json!(def.kind);
        meta_mut(&mut new).insert(
            "resourceVersion".into(),
            old["metadata"]["resourceVersion"].clone(),
        );
        if def.has_generation && spec_part(&new) != spec_part(&old) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        if new == old {
            // A no-op write is not persisted: no new resourceVersion, no watch event.
            return Ok(Self::present(def, version, &old));
        }
        self.write(def, &key, new.clone(), old);
        Ok(Self::present(
            def,
            version,
            self.get_raw(&gr, &key).unwrap_or(&new),
        ))
    }

    /// Stores a changed object (bumping the resourceVersion); an object being deleted whose last
    /// finalizer is gone and whose grace period is over is removed instead.
    fn write(&mut self, def: &ResourceDef, key: &NsName, mut new: Value, old: Value) {
        let gr = def.gr();
        let grace_over = new
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            == 0;
        let spec_finalizers_empty = new
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_none_or(|a| a.is_empty())
            || gr.1 != "namespaces";
        if is_deleting(&new) && finalizers(&new).is_empty() && grace_over && spec_finalizers_empty {
            self.remove(&gr, key, Some(new));
            return;
        }
        let rv = self.next_rv();
        meta_mut(&mut new).insert("resourceVersion".into(), json!(rv.to_string()));
        self.objects
            .entry(gr.clone())
            .or_default()
            .insert(key.clone(), new.clone());
        if gr
            == (
                "apiextensions.k8s.io".to_string(),
                "customresourcedefinitions".to_string(),
            )
        {
            self.resources.register_crd(&new);
        }
        self.emit(&gr, EventType::Modified, new, Some(old));
    }

    fn validate_update(
        &self,
        def: &ResourceDef,
        name: &str,
        old: &Value,
        new: &mut Value,
    ) -> ApiResult<()> {
        match (def.group.as_str(), def.plural.as_str()) {
            ("", "pods") => {
                // Pod specs are immutable but for images, activeDeadlineSeconds and tolerations.
                let strip = |v: &Value| {
                    let mut s = v.get("spec").cloned().unwrap_or(Value::Null);
                    for list in ["containers", "initContainers"] {
                        if let Some(cs) = s.get_mut(list).and_then(Value::as_array_mut) {
                            for c in cs {
                                if let Some(m) = c.as_object_mut() {
                                    m.remove("image");
                                }
                            }
                        }
                    }
                    if let Some(m) = s.as_object_mut() {
                        m.remove("activeDeadlineSeconds");
                        m.remove("tolerations");
                        m.remove("schedulingGates");
                    }
                    s
                };
                // Scheduling gates may only be removed (KEP-3521).
                let gates = |v: &Value| -> Vec<Value> {
                    v.pointer("/spec/schedulingGates")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                };
                let gates_added = gates(new).iter().any(|g| !gates(old).contains(g));
                if strip(old) != strip(new) || gates_added {
                    return Err(ApiError::invalid(
                        "",
                        "Pod",
                        name,
                        "spec",
                        "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
                    ));
                }
            }
            ("", "namespaces") => {
                // spec.finalizers changes only through the finalize subresource.
                new["spec"] = old.get("spec").cloned().unwrap_or(json!({}));
            }
            _ => {}
        }
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // patch and scale
    // ---------------------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        body: &[u8],
        sub: Subresource,
    ) -> ApiResult<Value> {
        if kind == PatchKind::Strategic && def.custom {
            return Err(ApiError::unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        let current = match self.get(def, version, ns, name) {
            Ok(c) => c,
            Err(e) if e.code == 404 && kind == PatchKind::Apply && sub == Subresource::Main => {
                // Server-side apply creates what does not exist yet.
                let mut obj = crate::patch::parse_apply_body(body)?;
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
        let patched = apply_patch(kind, &current, body)?;
        if !patched.is_object() {
            return Err(ApiError::bad_request("the patched object is not an object"));
        }
        self.update(def, version, ns, name, patched, sub)
    }

    /// The `autoscaling/v1 Scale` view of a workload.
    pub fn get_scale(
        &self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
    ) -> ApiResult<Value> {
        let paths = def
            .version(version)
            .and_then(|v| v.scale.clone())
            .ok_or_else(|| {
                ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )
            })?;
        let obj = self.get(def, version, ns, name)?;
        let ptr = |p: &str| format!("/{}", p.trim_start_matches('.').replace('.', "/"));
        let selector = paths
            .label_selector
            .as_ref()
            .and_then(|p| obj.pointer(&ptr(p)))
            .map(|s| match s {
                Value::String(s) => s.clone(),
                other => LabelSelector::from_object(other).to_string_form(),
            });
        let mut status = json!({"replicas": obj.pointer(&ptr(&paths.status_replicas)).and_then(Value::as_i64).unwrap_or(0)});
        if let Some(s) = selector {
            status["selector"] = json!(s);
        }
        let m = &obj["metadata"];
        let mut md = json!({"name": m["name"], "uid": m["uid"], "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"]});
        if def.namespaced {
            md["namespace"] = m["namespace"].clone();
        }
        Ok(json!({
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": md,
            "spec": {"replicas": obj.pointer(&ptr(&paths.spec_replicas)).and_then(Value::as_i64).unwrap_or(0)},
            "status": status,
        }))
    }

    /// Writes a Scale: sets the replicas of the workload (a spec change, so generation bumps).
    pub fn update_scale(
        &mut self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
        scale: Value,
    ) -> ApiResult<Value> {
        let paths = def
            .version(version)
            .and_then(|v| v.scale.clone())
            .ok_or_else(|| {
                ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )
            })?;
        let replicas = scale
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if replicas < 0 {
            return Err(ApiError::invalid(
                "autoscaling",
                "Scale",
                name,
                "spec.replicas",
                &format!("Invalid value: {replicas}: must be greater than or equal to 0"),
            ));
        }
        let mut obj = self.get(def, version, ns, name)?;
        if let Some(rv) = meta(&scale, "resourceVersion")
            && !rv.is_empty()
            && Some(&rv) != meta(&obj, "resourceVersion").as_ref()
        {
            return Err(ApiError::stale(&def.group, &def.plural, name));
        }
        let segs: Vec<&str> = paths
            .spec_replicas
            .trim_start_matches('.')
            .split('.')
            .collect();
        let mut cur = &mut obj;
        for s in &segs[..segs.len() - 1] {
            if !cur.get(*s).is_some_and(Value::is_object) {
                cur[*s] = json!({});
            }
            cur = cur.get_mut(*s).expect("just inserted");
        }
        cur[segs[segs.len() - 1]] = json!(replicas);
        self.update(def, version, ns, name, obj, Subresource::Main)?;
        self.get_scale(def, version, ns, name)
    }

    pub fn patch_scale(
        &mut self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        body: &[u8],
    ) -> ApiResult<Value> {
        let current = self.get_scale(def, version, ns, name)?;
        let patched = apply_patch(kind, &current, body)?;
        self.update_scale(def, version, ns, name, patched)
    }

    /// `pods/binding`: assigns a node, as the scheduler does.
    pub fn bind_pod(&mut self, ns: &str, name: &str, node: &str) -> ApiResult<()> {
        let def = self.def("", "v1", "pods")?;
        let key = (ns.to_string(), name.to_string());
        let old = self
            .get_raw(&def.gr(), &key)
            .cloned()
            .ok_or_else(|| ApiError::not_found("", "pods", name))?;
        if let Some(n) = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                "",
                "pods/binding",
                name,
                &format!("pod {name} is already assigned to node {n:?}"),
            ));
        }
        if is_deleting(&old) {
            return Err(ApiError::conflict(
                "",
                "pods/binding",
                name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        let mut new = old.clone();
        new["spec"]["nodeName"] = json!(node);
        let now = self.clock.now_rfc3339();
        let status = new
            .as_object_mut()
            .expect("object")
            .entry("status")
            .or_insert_with(|| json!({}));
        let conds = status
            .as_object_mut()
            .expect("status object")
            .entry("conditions")
            .or_insert_with(|| json!([]));
        if let Some(a) = conds.as_array_mut() {
            a.retain(|c| c.get("type") != Some(&json!("PodScheduled")));
            a.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}));
        }
        self.write(&def, &key, new, old);
        self.settle();
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // delete
    // ---------------------------------------------------------------------------------------

    /// Deletes (or starts deleting) an object. Returns the object and whether it is gone now
    /// (`false`: it stays with a deletionTimestamp for finalizers or a grace period; HTTP 202).
    pub fn delete(
        &mut self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<(Value, bool)> {
        let key = Self::key(def, ns, name);
        let (obj, gone) = self.delete_inner(&def.gr(), &key, opts)?;
        self.settle();
        Ok((Self::present(def, version, &obj), gone))
    }

    fn delete_inner(
        &mut self,
        gr: &Gr,
        key: &NsName,
        opts: &DeleteOptions,
    ) -> ApiResult<(Value, bool)> {
        let old = self
            .get_raw(gr, key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&gr.0, &gr.1, &key.1))?;
        let name = key.1.as_str();
        if let Some(u) = &opts.precondition_uid
            && Some(u) != meta(&old, "uid").as_ref()
        {
            return Err(ApiError::conflict(
                &gr.0,
                &gr.1,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {u}, UID in object meta: {}",
                    meta(&old, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_resource_version
            && Some(rv) != meta(&old, "resourceVersion").as_ref()
        {
            return Err(ApiError::conflict(
                &gr.0,
                &gr.1,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta(&old, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        let is_pod = *gr == (String::new(), "pods".to_string());
        let is_ns = *gr == (String::new(), "namespaces".to_string());
        // Graceful deletion applies to pods bound to a node and not yet terminated.
        let mut grace = 0;
        if is_pod {
            let bound = old
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            let phase = old
                .pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or("");
            if bound && !matches!(phase, "Succeeded" | "Failed") {
                grace = opts
                    .grace_period_seconds
                    .or_else(|| {
                        old.pointer("/spec/terminationGracePeriodSeconds")
                            .and_then(Value::as_i64)
                    })
                    .unwrap_or(30)
                    .max(0);
            }
        }
        let mut new = old.clone();
        let mut fins = finalizers(&old);
        match opts.propagation_policy.as_deref() {
            Some("Foreground")
                if !fins.iter().any(|f| f == FINALIZER_FOREGROUND) && !is_deleting(&old) =>
            {
                fins.push(FINALIZER_FOREGROUND.into())
            }
            Some("Orphan") if !fins.iter().any(|f| f == FINALIZER_ORPHAN) && !is_deleting(&old) => {
                fins.push(FINALIZER_ORPHAN.into())
            }
            _ => {}
        }
        let spec_fins = is_ns
            && new
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
        let now_secs = self.clock.now_unix() as i64;
        if is_deleting(&old) {
            // Already terminating: a shorter grace period may bring the end forward.
            let cur_grace = old
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if is_pod && grace < cur_grace {
                let m = meta_mut(&mut new);
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                m.insert(
                    "deletionTimestamp".into(),
                    json!(format_unix(now_secs + grace)),
                );
                if grace > 0 {
                    self.pending_grace.push(PendingGrace {
                        namespace: key.0.clone(),
                        name: key.1.clone(),
                        uid: meta(&old, "uid").unwrap_or_default(),
                        after: Duration::from_secs(grace as u64),
                    });
                }
            }
            if fins != finalizers(&old) {
                meta_mut(&mut new).insert("finalizers".into(), json!(fins));
            }
            if new != old {
                let def = self.resources.get_gr(&gr.0, &gr.1).cloned();
                if let Some(def) = def {
                    self.write(&def, key, new, old.clone());
                }
            }
            let cur = self.get_raw(gr, key).cloned();
            return Ok(match cur {
                Some(c) => (c, false),
                None => (self.last_deleted(gr, key).unwrap_or(old), true),
            });
        }
        if fins.is_empty() && grace == 0 && !spec_fins {
            let gone = self.remove(gr, key, None);
            return Ok((gone, true));
        }
        {
            let m = meta_mut(&mut new);
            m.insert(
                "deletionTimestamp".into(),
                json!(format_unix(now_secs + grace)),
            );
            m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            if !fins.is_empty() {
                m.insert("finalizers".into(), json!(fins));
            }
            if grace > 0
                && let Some(g) = m.get("generation").and_then(Value::as_i64)
            {
                m.insert("generation".into(), json!(g + 1));
            }
        }
        if is_ns {
            new["status"]["phase"] = json!("Terminating");
        }
        if grace > 0 {
            self.pending_grace.push(PendingGrace {
                namespace: key.0.clone(),
                name: key.1.clone(),
                uid: meta(&old, "uid").unwrap_or_default(),
                after: Duration::from_secs(grace as u64),
            });
        }
        let rv = self.next_rv();
        meta_mut(&mut new).insert("resourceVersion".into(), json!(rv.to_string()));
        self.objects
            .entry(gr.clone())
            .or_default()
            .insert(key.clone(), new.clone());
        self.emit(gr, EventType::Modified, new.clone(), Some(old));
        Ok((new, false))
    }

    fn last_deleted(&self, gr: &Gr, key: &NsName) -> Option<Value> {
        let log = self.logs.get(gr)?;
        log.events
            .iter()
            .rev()
            .find(|e| {
                e.type_ == EventType::Deleted
                    && meta(&e.object, "name").as_deref() == Some(key.1.as_str())
                    && meta(&e.object, "namespace").unwrap_or_default() == key.0
            })
            .map(|e| e.object.clone())
    }

    /// Removes an object from the store and emits DELETED.
    fn remove(&mut self, gr: &Gr, key: &NsName, last: Option<Value>) -> Value {
        let stored = self.objects.get_mut(gr).and_then(|m| m.remove(key));
        let mut obj = last.or(stored).unwrap_or(Value::Null);
        let rv = self.next_rv();
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let uid = meta(&obj, "uid").unwrap_or_default();
        self.uids.remove(&uid);
        if *gr == (String::new(), "pods".to_string()) {
            self.removed_pods.push((key.0.clone(), key.1.clone(), uid));
        }
        self.emit(gr, EventType::Deleted, obj.clone(), None);
        if *gr
            == (
                "apiextensions.k8s.io".to_string(),
                "customresourcedefinitions".to_string(),
            )
        {
            // Deleting a CRD deletes its custom resources and stops serving them.
            let group = obj
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let plural = obj
                .pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let cr_gr = (group.clone(), plural.clone());
            let keys: Vec<NsName> = self
                .objects
                .get(&cr_gr)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            for k in keys {
                self.remove(&cr_gr, &k, None);
            }
            self.resources.unregister(&group, &plural);
        }
        obj
    }

    /// Forces the end of a pod's grace period (what the kubelet's final delete does).
    pub fn grace_elapsed(&mut self, ns: &str, name: &str, uid: &str) {
        let gr: Gr = (String::new(), "pods".into());
        let key = (ns.to_string(), name.to_string());
        let Some(pod) = self.get_raw(&gr, &key).cloned() else {
            return;
        };
        if meta(&pod, "uid").as_deref() != Some(uid) || !is_deleting(&pod) {
            return;
        }
        let due = pod
            .pointer("/metadata/deletionTimestamp")
            .and_then(Value::as_str)
            .and_then(parse_unix)
            .unwrap_or(0);
        if (self.clock.now_unix() as i64) < due {
            return; // A later timer (after the period was changed) owns this pod.
        }
        let opts = DeleteOptions {
            grace_period_seconds: Some(0),
            precondition_uid: Some(uid.into()),
            ..Default::default()
        };
        let _ = self.delete_inner(&gr, &key, &opts);
        self.settle();
    }

    // ---------------------------------------------------------------------------------------
    // built-in controllers
    // ---------------------------------------------------------------------------------------

    /// Runs the garbage collector, namespace lifecycle and PVC protection until nothing changes.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            let actions = self.plan();
            if actions.is_empty() {
                return;
            }
            for a in actions {
                self.act(a);
            }
        }
        tracing::warn!("emulated controllers did not settle after 10000 rounds");
    }

    fn plan(&self) -> Vec<Action> {
        let mut actions = vec![];
        let all = || {
            self.objects
                .iter()
                .flat_map(|(gr, m)| m.iter().map(move |(k, o)| (gr, k, o)))
        };
        // Garbage collector: dependents of absent owners go; dependents of owners being deleted
        // in the foreground go first; dependents of orphaning owners lose their reference.
        for (gr, key, obj) in all() {
            let Some(refs) = obj
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
            else {
                continue;
            };
            if refs.is_empty() {
                continue;
            }
            let mut dangling = vec![];
            let mut orphaned = vec![];
            let mut foreground = false;
            for r in refs {
                let uid = r.get("uid").and_then(Value::as_str).unwrap_or_default();
                match self
                    .uids
                    .get(uid)
                    .and_then(|(ogr, ok)| self.get_raw(ogr, ok))
                {
                    None => dangling.push(uid.to_string()),
                    Some(owner) if is_deleting(owner) => {
                        let f = finalizers(owner);
                        if f.iter().any(|x| x == FINALIZER_ORPHAN) {
                            orphaned.push(uid.to_string());
                        } else if f.iter().any(|x| x == FINALIZER_FOREGROUND) {
                            foreground = true;
                        }
                    }
                    Some(_) => {}
                }
            }
            if dangling.len() == refs.len() {
                if !is_deleting(obj) {
                    actions.push(Action::Delete(
                        gr.clone(),
                        key.clone(),
                        DeleteOptions::default(),
                    ));
                }
            } else if !dangling.is_empty() || !orphaned.is_empty() {
                dangling.extend(orphaned);
                actions.push(Action::RemoveOwnerRefs(gr.clone(), key.clone(), dangling));
            } else if foreground && !is_deleting(obj) {
                let opts = DeleteOptions {
                    propagation_policy: Some("Foreground".into()),
                    ..Default::default()
                };
                actions.push(Action::Delete(gr.clone(), key.clone(), opts));
            }
        }
        let dependents_of = |uid: &str, blocking_only: bool| {
            all().any(|(_, _, o)| {
                o.pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|refs| {
                        refs.iter().any(|r| {
                            r.get("uid").and_then(Value::as_str) == Some(uid)
                                && (!blocking_only
                                    || r.get("blockOwnerDeletion").and_then(Value::as_bool)
                                        == Some(true))
                        })
                    })
            })
        };
        for (gr, key, obj) in all().filter(|(_, _, o)| is_deleting(o)) {
            let uid = meta(obj, "uid").unwrap_or_default();
            let f = finalizers(obj);
            if f.iter().any(|x| x == FINALIZER_FOREGROUND) && !dependents_of(&uid, true) {
                actions.push(Action::RemoveFinalizer(
                    gr.clone(),
                    key.clone(),
                    FINALIZER_FOREGROUND,
                ));
            }
            if f.iter().any(|x| x == FINALIZER_ORPHAN) && !dependents_of(&uid, false) {
                actions.push(Action::RemoveFinalizer(
                    gr.clone(),
                    key.clone(),
                    FINALIZER_ORPHAN,
                ));
            }
            // PVC protection: released once no non-terminated pod in the namespace uses the claim.
            if gr.1 == "persistentvolumeclaims"
                && gr.0.is_empty()
                && f.iter().any(|x| x == FINALIZER_PVC_PROTECTION)
            {
                let in_use = self
                    .objects
                    .get(&(String::new(), "pods".into()))
                    .is_some_and(|pods| {
                        pods.iter().any(|((pns, _), p)| {
                            *pns == key.0
                                && !matches!(
                                    p.pointer("/status/phase").and_then(Value::as_str),
                                    Some("Succeeded" | "Failed")
                                )
                                && p.pointer("/spec/volumes")
                                    .and_then(Value::as_array)
                                    .is_some_and(|vs| {
                                        vs.iter().any(|v| {
                                            v.pointer("/persistentVolumeClaim/claimName")
                                                .and_then(Value::as_str)
                                                == Some(key.1.as_str())
                                        })
                                    })
                        })
                    });
                if !in_use {
                    actions.push(Action::RemoveFinalizer(
                        gr.clone(),
                        key.clone(),
                        FINALIZER_PVC_PROTECTION,
                    ));
                }
            }
        }
        // Namespace lifecycle: a terminating namespace has its content deleted, then is finalized.
        if let Some(nss) = self.objects.get(&(String::new(), "namespaces".into())) {
            for ((_, ns), nso) in nss.iter().filter(|(_, o)| is_deleting(o)) {
                let mut any = false;
                for (gr, key, obj) in
                    all().filter(|(gr, k, _)| !k.0.is_empty() && k.0 == *ns && gr.1 != "namespaces")
                {
                    any = true;
                    if !is_deleting(obj) {
                        actions.push(Action::Delete(
                            gr.clone(),
                            key.clone(),
                            DeleteOptions::default(),
                        ));
                    }
                }
                let spec_fins = nso
                    .pointer("/spec/finalizers")
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty());
                if !any && spec_fins {
                    actions.push(Action::FinalizeNamespace(ns.clone()));
                }
            }
        }
        actions
    }

    fn act(&mut self, a: Action) {
        match a {
            Action::Delete(gr, key, opts) => {
                let _ = self.delete_inner(&gr, &key, &opts);
            }
            Action::RemoveOwnerRefs(gr, key, uids) => {
                self.modify(&gr, &key, |o| {
                    if let Some(refs) = o
                        .pointer_mut("/metadata/ownerReferences")
                        .and_then(Value::as_array_mut)
                    {
                        refs.retain(|r| {
                            !uids
                                .iter()
                                .any(|u| r.get("uid").and_then(Value::as_str) == Some(u))
                        });
                    }
                });
            }
            Action::RemoveFinalizer(gr, key, fin) => {
                self.modify(&gr, &key, |o| {
                    if let Some(f) = o
                        .pointer_mut("/metadata/finalizers")
                        .and_then(Value::as_array_mut)
                    {
                        f.retain(|x| x != fin);
                    }
                });
            }
            Action::FinalizeNamespace(ns) => {
                self.modify(
                    &(String::new(), "namespaces".into()),
                    &(String::new(), ns),
                    |o| {
                        o["spec"]["finalizers"] = json!([]);
                    },
                );
            }
        }
    }

    fn modify(&mut self, gr: &Gr, key: &NsName, f: impl FnOnce(&mut Value)) {
        let Some(old) = self.get_raw(gr, key).cloned() else {
            return;
        };
        let Some(def) = self.resources.get_gr(&gr.0, &gr.1).cloned() else {
            return;
        };
        let mut new = old.clone();
        f(&mut new);
        if new != old {
            self.write(&def, key, new, old);
        }
    }

    /// Retained events of a resource newer than `rv`, or `Err(oldest servable)` when some of
    /// them have been evicted.
    pub fn events_since(&self, gr: &Gr, rv: u64) -> Result<Vec<Arc<EventRecord>>, u64> {
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

/// Pod admission and defaults (the fields kubectl and controllers read back).
fn admit_pod(def: &ResourceDef, name: &str, obj: &mut Value) -> ApiResult<()> {
    let spec = obj
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| {
            ApiError::invalid("", &def.kind, name, "spec.containers", "Required value")
        })?;
    let containers = spec
        .get("containers")
        .and_then(Value::as_array)
        .map(|a| a.len())
        .unwrap_or(0);
    if containers == 0 {
        return Err(ApiError::invalid(
            "",
            &def.kind,
            name,
            "spec.containers",
            "Required value",
        ));
    }
    spec.entry("restartPolicy").or_insert(json!("Always"));
    spec.entry("terminationGracePeriodSeconds")
        .or_insert(json!(30));
    spec.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
    spec.entry("schedulerName")
        .or_insert(json!("default-scheduler"));
    spec.entry("securityContext").or_insert(json!({}));
    spec.entry("enableServiceLinks").or_insert(json!(true));
    spec.entry("preemptionPolicy")
        .or_insert(json!("PreemptLowerPriority"));
    spec.entry("priority").or_insert(json!(0));
    let sa = spec
        .get("serviceAccountName")
        .cloned()
        .unwrap_or(json!("default"));
    spec.insert("serviceAccountName".into(), sa.clone());
    spec.insert("serviceAccount".into(), sa);
    let mut qos_best_effort = true;
    for list in ["initContainers", "containers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for (i, c) in cs.iter_mut().enumerate() {
            let Some(cm) = c.as_object_mut() else {
                continue;
            };
            for f in ["name", "image"] {
                if cm.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                    return Err(ApiError::invalid(
                        "",
                        &def.kind,
                        name,
                        &format!("spec.{list}[{i}].{f}"),
                        "Required value",
                    ));
                }
            }
            let image = cm["image"].as_str().unwrap_or_default().to_string();
            let latest =
                !image.rsplit('/').next().unwrap_or("").contains(':') || image.ends_with(":latest");
            cm.entry("imagePullPolicy").or_insert(json!(if latest {
                "Always"
            } else {
                "IfNotPresent"
            }));
            cm.entry("terminationMessagePath")
                .or_insert(json!("/dev/termination-log"));
            cm.entry("terminationMessagePolicy")
                .or_insert(json!("File"));
            let res = cm.entry("resources").or_insert(json!({}));
            if res.as_object().is_some_and(|r| !r.is_empty()) {
                qos_best_effort = false;
            }
            if let Some(ports) = cm.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                    p.entry("protocol").or_insert(json!("TCP"));
                }
            }
        }
    }
    let node = spec.get("nodeName").cloned();
    let mut status = json!({"phase": "Pending", "qosClass": if qos_best_effort { "BestEffort" } else { "Burstable" }});
    if node.is_some() {
        status["conditions"] = json!([{"type": "PodScheduled", "status": "True"}]);
    }
    obj["status"] = status;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64(b"hello"), "aGVsbG8=");
        assert_eq!(base64(b"hi!"), "aGkh");
        assert_eq!(base64(b""), "");
    }

    #[test]
    fn names_follow_rfc_1123() {
        assert!(is_dns_subdomain("default--demo.x"));
        assert!(!is_dns_subdomain("Bad_Name"));
        assert!(is_dns_label("openshell"));
        assert!(!is_dns_label("a.b"));
    }
}
