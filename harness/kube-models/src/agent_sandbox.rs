//! The Agent Sandbox controller (kubernetes-sigs/agent-sandbox), per release: Sandbox CR →
//! workspace PVCs + one pod named like the CR, and the CR's status conditions with the exact
//! reasons, messages and order of each release (docs/upstream-facts.md section 4).
//!
//! Triggers like the real controller (F4.6): a Sandbox is reconciled when it changes or when its
//! pod (name = CR name, carrying the name-hash label) changes or disappears; PVC changes do not
//! trigger (F4.6). One reconcile = PVCs, pod, conditions, one status write if anything
//! changed (F4.9). No finalizers: deleting the CR removes it at once and the store's garbage
//! collector removes pod and PVCs through the controller ownerRefs (F4.7).
//! Reads and writes `agents.x-k8s.io/v1beta1`; a v1alpha1 `spec.replicas: 0` also counts as
//! suspended. Not modelled: `spec.service` (headless Service), `shutdownTime` expiry, adoption
//! of unowned PVCs, v0.5.6's PodScheduled mirror, v0.4.6 (v1alpha1-only) semantics.

use conformance_core::timeline::READY_CONDITION;
use kube_emulator::Pointer;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;

use crate::workloads::fnv1a32;
use conformance_upstream::{
    NAME_HASH_LABEL, POD_NAME_ANNOTATION, PROPAGATED_ANNOTATIONS, PROPAGATED_LABELS,
    SANDBOX_API_VERSION, SANDBOX_GROUP, SANDBOX_KIND, SANDBOX_PLURAL,
};
use kube_emulator::{Cluster, DeleteOptions, ListOptions, PatchKind, ResourceRef};

/// Which Agent Sandbox release to model (F0.2, F4.4, F4.5). The one type for the release:
/// the controller runs it, selections parse it and reports print it, so what a report names is
/// what ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AgentSandboxVersion {
    /// Failed pod → `Ready=False DependenciesNotReady "Pod exists with phase: Failed"` +
    /// `Finished=True PodFailed`; `Suspended=True` written as soon as the pod delete is issued and
    /// never removed; status written with Update.
    V0_5_0,
    /// As v0.5.0 but a failed pod gives `Ready=False PodFailed "Pod failed"` (succeeded:
    /// `PodSucceeded "Pod completed successfully"`).
    V0_5_1,
    /// As v0.5.1 plus a persistent `Suspended` condition (NotSuspended / PodTerminating /
    /// PodTerminated "…Sandbox is suspended"), the terminating pod reported until gone, status
    /// written with a merge patch.
    V0_5_4,
}

impl AgentSandboxVersion {
    /// Every modeled release, oldest first.
    pub const ALL: [Self; 3] = [Self::V0_5_0, Self::V0_5_1, Self::V0_5_4];

    /// The release tag, as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Self::V0_5_0 => "v0.5.0",
            Self::V0_5_1 => "v0.5.1",
            Self::V0_5_4 => "v0.5.4",
        }
    }

    /// A release tag, with or without the `v`. `v0.5.1+` ("v0.5.1 or later"), the spelling
    /// from when one choice stood for every release after v0.5.0, still means what it ran
    /// then: the newest modeled release.
    pub fn parse(s: &str) -> Option<Self> {
        if s == "v0.5.1+" {
            return Some(Self::V0_5_4);
        }
        let tag = s.strip_prefix('v').unwrap_or(s);
        Self::ALL.into_iter().find(|v| &v.name()[1..] == tag)
    }
}

impl std::fmt::Display for AgentSandboxVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `NameHash`: FNV-1a 32 of the CR name as 8 lowercase hex digits (F4.8).
pub(crate) fn name_hash(name: &str) -> String {
    format!("{:08x}", fnv1a32(name.as_bytes()))
}

fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.at(ptr).and_then(Value::as_str)
}

/// The Sandbox resource in `version` (`agents.x-k8s.io/<version>`).
pub fn sandboxes_in(version: &str) -> ResourceRef {
    ResourceRef::new(SANDBOX_GROUP, version, SANDBOX_PLURAL)
}

fn sandboxes() -> ResourceRef {
    sandboxes_in("v1beta1")
}

/// The Sandbox CRD as the v0.5.x releases install it (v1beta1 and the deprecated v1alpha1),
/// reduced to what the API server acts on; `fixtures/crds/` holds it. Parsed once per process:
/// every emulated cluster installs it.
pub fn crd() -> Value {
    static CRD: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    CRD.get_or_init(|| {
        serde_saphyr::from_str(include_str!(
            "../../../fixtures/crds/sandboxes.agents.x-k8s.io.yaml"
        ))
        .expect("the Sandbox CRD fixture is valid YAML")
    })
    .clone()
}

fn pvcs() -> ResourceRef {
    ResourceRef::new("", "v1", "persistentvolumeclaims")
}

fn controller_uid(v: &Value) -> Option<&str> {
    v.at("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|r| r.get("uid"))
        .and_then(Value::as_str)
}

fn obj_map(v: Option<&Value>) -> Map<String, Value> {
    v.and_then(Value::as_object).cloned().unwrap_or_default()
}

/// What a reconcile was triggered by: the CR's resourceVersion and its pod's (if any).
type TriggerKey = (String, Option<String>);

/// What one reconcile works from: the CR's identity and mode, and the release's behaviour.
struct Reconciling {
    ns: String,
    name: String,
    uid: String,
    hash: String,
    /// `spec.operatingMode: Suspended`, or the v1alpha1 `spec.replicas: 0`.
    suspended: bool,
    /// v0.5.4+ behaviour (see [`AgentSandboxVersion::V0_5_4`]).
    v5_4: bool,
}

/// The pod as the pod step leaves it: the one status reports, and whether a pod of the CR's name
/// belongs to someone else.
struct PodSeen {
    returned: Option<Arc<Value>>,
    not_owned: bool,
}

pub(crate) struct AgentSandboxController {
    cluster: Cluster,
    version: AgentSandboxVersion,
}

impl AgentSandboxController {
    pub(crate) fn new(cluster: Cluster, version: AgentSandboxVersion) -> Self {
        Self { cluster, version }
    }

    /// Runs until the task is aborted.
    pub(crate) fn spawn(self) -> JoinHandle<()> {
        let mut changes = self.cluster.subscribe();
        tokio::spawn(async move {
            let mut seen: BTreeMap<(String, String), TriggerKey> = BTreeMap::new();
            loop {
                self.pass(&mut seen);
                if changes.changed().await.is_err() {
                    return;
                }
            }
        })
    }

    /// Reconciles every Sandbox whose CR or pod changed since the last pass.
    fn pass(&self, seen: &mut BTreeMap<(String, String), TriggerKey>) {
        // Read in place which Sandboxes changed; copy only those (this runs on every change).
        let Ok(items) = self
            .cluster
            .scan(&sandboxes(), None, &ListOptions::default(), |sb| {
                let field = |p| s(sb, p).unwrap_or_default().to_string();
                Some((
                    field("/metadata/namespace"),
                    field("/metadata/name"),
                    field("/metadata/resourceVersion"),
                ))
            })
        else {
            return;
        };
        let mut live = BTreeMap::new();
        for (ns, name, rv) in items {
            let key = (rv, self.watched_pod_version(&ns, &name));
            let k = (ns, name);
            if seen.get(&k) != Some(&key) {
                let Ok(sb) = self.cluster.get_shared(&sandboxes(), Some(&k.0), &k.1) else {
                    continue;
                };
                self.reconcile(sb);
                // Record what we reconciled against; our own writes trigger one more (no-op) pass.
                live.insert(k, key);
            } else {
                live.insert(k.clone(), seen[&k].clone());
            }
        }
        *seen = live;
    }

    /// The resourceVersion of the pod as the controller's pod watch sees it (only pods with
    /// the name-hash label).
    fn watched_pod_version(&self, ns: &str, name: &str) -> Option<String> {
        self.cluster
            .inspect(&ResourceRef::pods(), Some(ns), name, |p| {
                p.at("/metadata/labels")
                    .and_then(|l| l.get(NAME_HASH_LABEL))
                    .and(s(p, "/metadata/resourceVersion"))
                    .map(String::from)
            })
            .ok()
            .flatten()
    }

    fn patch_annotation(&self, sb: &mut Arc<Value>, value: Option<&str>) {
        let cur = sb
            .at("/metadata/annotations")
            .and_then(|a| a.get(POD_NAME_ANNOTATION))
            .and_then(Value::as_str);
        if cur == value {
            return;
        }
        let ns = s(sb, "/metadata/namespace").map(String::from);
        let name = s(sb, "/metadata/name").unwrap_or_default().to_string();
        let patch = json!({"metadata": {"annotations": {POD_NAME_ANNOTATION: value}}});
        if let Ok(v) =
            self.cluster
                .patch(&sandboxes(), ns.as_deref(), &name, PatchKind::Merge, &patch)
        {
            *sb = v;
        }
    }

    /// One reconcile, in the real controller's order: PVCs, pod, conditions, one status write.
    /// `sb` is shared with the store until the controller writes it (no copy per pass).
    fn reconcile(&self, sb: Arc<Value>) {
        if sb.at("/metadata/deletionTimestamp").is_some() {
            return; // F4.7
        }
        let mut sb = sb;
        let name = s(&sb, "/metadata/name").unwrap_or_default().to_string();
        let r = Reconciling {
            ns: s(&sb, "/metadata/namespace")
                .unwrap_or_default()
                .to_string(),
            uid: s(&sb, "/metadata/uid").unwrap_or_default().to_string(),
            hash: name_hash(&name),
            suspended: s(&sb, "/spec/operatingMode") == Some("Suspended")
                || sb.at("/spec/replicas").and_then(Value::as_i64) == Some(0),
            v5_4: self.version >= AgentSandboxVersion::V0_5_4,
            name,
        };
        let vcts: Vec<Value> = sb
            .at("/spec/volumeClaimTemplates")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut error = self.ensure_pvcs(&sb, &r, &vcts);
        let pod = self.reconcile_pod(&mut sb, &r, &vcts, &mut error);
        let conds = self.conditions(&sb, &r, &pod, error.as_deref());
        self.write_status(&sb, &r, pod.returned.as_deref(), conds);
    }

    /// (a) PVCs (F4.10): created if missing, never deleted. Returns the last error seen.
    fn ensure_pvcs(&self, sb: &Value, r: &Reconciling, vcts: &[Value]) -> Option<String> {
        let Reconciling {
            ns,
            name,
            uid,
            hash,
            ..
        } = r;
        let mut error = None;
        for vct in vcts {
            let claim = format!("{}-{name}", s(vct, "/metadata/name").unwrap_or_default());
            match self.cluster.get(&pvcs(), Some(ns), &claim) {
                Ok(existing) => {
                    if controller_uid(&existing).is_some_and(|u| u != uid) {
                        error = Some(format!(
                            "persistentvolumeclaim {claim:?} is not owned by sandbox {name:?}"
                        ));
                    }
                }
                Err(_) => {
                    let mut labels = obj_map(vct.at("/metadata/labels"));
                    labels.insert(NAME_HASH_LABEL.into(), json!(hash));
                    let mut md = json!({"name": claim, "labels": labels,
                        "ownerReferences": self.owner_ref(sb)});
                    if let Some(a) = vct.at("/metadata/annotations") {
                        md["annotations"] = a.clone();
                    }
                    let pvc = json!({"metadata": md, "spec": vct.get("spec").cloned().unwrap_or(json!({}))});
                    if let Err(e) = self.cluster.create(&pvcs(), Some(ns), pvc) {
                        error = Some(e.to_string());
                    }
                }
            }
        }
        error
    }

    /// (b) the pod (F4.11, F4.12, F4.14): deleted when suspended, created when missing (and
    /// no PVC error), with the pod-name annotation following it.
    fn reconcile_pod(
        &self,
        sb: &mut Arc<Value>,
        r: &Reconciling,
        vcts: &[Value],
        error: &mut Option<String>,
    ) -> PodSeen {
        let pod = self
            .cluster
            .get_shared(&ResourceRef::pods(), Some(&r.ns), &r.name)
            .ok();
        if r.suspended {
            self.suspend_pod(sb, r, pod)
        } else {
            PodSeen {
                returned: self.ensure_pod(sb, r, pod, vcts, error),
                not_owned: false,
            }
        }
    }

    /// Suspended: deletes an owned pod (reported until gone from v0.5.4), refuses one it does
    /// not own.
    fn suspend_pod(
        &self,
        sb: &mut Arc<Value>,
        r: &Reconciling,
        pod: Option<Arc<Value>>,
    ) -> PodSeen {
        let Reconciling {
            ns,
            name,
            uid,
            v5_4,
            ..
        } = r;
        let owned = |p: &Value| controller_uid(p) == Some(uid.as_str());
        let mut not_owned = false;
        let returned = match pod {
            Some(p) if owned(&p) => {
                if p.at("/metadata/deletionTimestamp").is_none() {
                    let _ = self.cluster.delete(
                        &ResourceRef::pods(),
                        Some(ns),
                        name,
                        &DeleteOptions::default(),
                    );
                }
                self.patch_annotation(sb, None);
                if *v5_4 {
                    // v0.5.4+ reports the terminating pod until it is gone.
                    self.cluster
                        .get_shared(&ResourceRef::pods(), Some(ns), name)
                        .ok()
                } else {
                    None
                }
            }
            Some(p) => {
                not_owned = true;
                Some(p)
            }
            None => {
                self.patch_annotation(sb, None);
                None
            }
        };
        PodSeen {
            returned,
            not_owned,
        }
    }

    /// Running: keeps the existing pod (annotating it if owned) or creates it.
    fn ensure_pod(
        &self,
        sb: &mut Arc<Value>,
        r: &Reconciling,
        pod: Option<Arc<Value>>,
        vcts: &[Value],
        error: &mut Option<String>,
    ) -> Option<Arc<Value>> {
        let Reconciling {
            ns,
            name,
            uid,
            hash,
            ..
        } = r;
        let owned = |p: &Value| controller_uid(p) == Some(uid.as_str());
        match pod {
            Some(p) => {
                if owned(&p) {
                    self.patch_annotation(sb, Some(name));
                }
                Some(p)
            }
            None if error.is_none() => {
                self.patch_annotation(sb, None);
                match self.cluster.create(
                    &ResourceRef::pods(),
                    Some(ns),
                    self.pod_for(sb, hash, vcts),
                ) {
                    Ok(p) => {
                        self.patch_annotation(sb, Some(name));
                        Some(p)
                    }
                    Err(e) => {
                        *error = Some(e.to_string());
                        None
                    }
                }
            }
            None => None,
        }
    }

    /// (d) conditions (F4.2, F4.3): Suspended?, Finished?, Ready; new types are appended.
    fn conditions(
        &self,
        sb: &Value,
        r: &Reconciling,
        pod: &PodSeen,
        error: Option<&str>,
    ) -> Vec<Value> {
        let Reconciling {
            suspended, v5_4, ..
        } = *r;
        let PodSeen {
            returned,
            not_owned,
        } = pod;
        let not_owned = *not_owned;
        let generation = sb.at("/metadata/generation").cloned().unwrap_or(json!(1));
        let now = self.cluster.now_rfc3339();
        let mut conds: Vec<Value> = sb
            .at("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut set = |t: &str, ok: bool, reason: &str, message: &str| {
            let new = json!({"type": t, "status": if ok { "True" } else { "False" },
                "reason": reason, "message": message, "observedGeneration": generation});
            set_condition(&mut conds, new, &now);
        };
        if v5_4 {
            match (returned, suspended) {
                (_, false) => set(
                    "Suspended",
                    false,
                    "NotSuspended",
                    "Sandbox is not suspended",
                ),
                (Some(_), true) if not_owned => set(
                    "Suspended",
                    false,
                    "PodNotOwned",
                    "Refused to delete pod because it is not owned by this sandbox",
                ),
                (Some(_), true) => set(
                    "Suspended",
                    false,
                    "PodTerminating",
                    "Pod is terminating. Sandbox is suspending",
                ),
                (None, true) => set(
                    "Suspended",
                    true,
                    "PodTerminated",
                    "Pod has been terminated. Sandbox is suspended",
                ),
            }
        } else if suspended && returned.is_none() {
            set(
                "Suspended",
                true,
                "PodTerminated",
                "Pod has been terminated. Sandbox is not operational.",
            );
        }
        let pod_phase = returned
            .as_ref()
            .map(|p| s(p, "/status/phase").unwrap_or("Pending").to_string());
        match pod_phase.as_deref() {
            Some("Failed") => set("Finished", true, "PodFailed", "Pod failed"),
            Some("Succeeded") => set(
                "Finished",
                true,
                "PodSucceeded",
                "Pod completed successfully",
            ),
            _ => {}
        }
        let (ok, reason, message) =
            self.ready_condition(error, suspended, returned.as_deref(), pod_phase.as_deref());
        set(READY_CONDITION, ok, reason, &message);
        if !matches!(pod_phase.as_deref(), Some("Failed" | "Succeeded")) {
            // Finished is the one condition removed when the pod is absent or not terminal.
            conds.retain(|c| c["type"] != json!("Finished"));
        }
        conds
    }

    /// The `Ready` condition: status, reason and message, per release.
    fn ready_condition(
        &self,
        error: Option<&str>,
        suspended: bool,
        returned: Option<&Value>,
        pod_phase: Option<&str>,
    ) -> (bool, &'static str, String) {
        let v5_1 = self.version >= AgentSandboxVersion::V0_5_1;
        if let Some(e) = error {
            (false, "ReconcilerError", format!("Error seen: {e}"))
        } else if suspended {
            let m = if returned.is_some() {
                "Sandbox is suspending"
            } else {
                "Sandbox is suspended"
            };
            (false, "SandboxSuspended", m.into())
        } else {
            match (returned, pod_phase) {
                (None, _) => (false, "DependenciesNotReady", "Pod does not exist".into()),
                (Some(_), Some("Failed")) if v5_1 => (false, "PodFailed", "Pod failed".into()),
                (Some(_), Some("Succeeded")) if v5_1 => {
                    (false, "PodSucceeded", "Pod completed successfully".into())
                }
                (Some(p), Some("Running")) => {
                    let pod_ready = p
                        .at("/status/conditions")
                        .and_then(Value::as_array)
                        .is_some_and(|cs| {
                            cs.iter().any(|c| {
                                c["type"] == json!(READY_CONDITION) && c["status"] == json!("True")
                            })
                        });
                    let ips = p
                        .at("/status/podIPs")
                        .and_then(Value::as_array)
                        .is_some_and(|a| !a.is_empty());
                    match (pod_ready, ips) {
                        (true, true) => (true, "DependenciesReady", "Pod is Ready".into()),
                        (true, false) => (
                            false,
                            "DependenciesNotReady",
                            "Pod is Ready but has no podIPs yet".into(),
                        ),
                        _ => (
                            false,
                            "DependenciesNotReady",
                            "Pod is Running but not Ready".into(),
                        ),
                    }
                }
                (Some(_), phase) => (
                    false,
                    "DependenciesNotReady",
                    format!("Pod exists with phase: {}", phase.unwrap_or("Pending")),
                ),
            }
        }
    }

    /// (e) one status write if anything changed: a merge patch from v0.5.4, an Update before.
    fn write_status(
        &self,
        sb: &Value,
        r: &Reconciling,
        returned: Option<&Value>,
        conds: Vec<Value>,
    ) {
        let Reconciling {
            ns,
            name,
            hash,
            v5_4,
            ..
        } = r;
        let old = obj_map(sb.get("status"));
        let st = desired_status(&old, hash, returned, conds);
        if st == old {
            return;
        }
        if *v5_4 {
            let mut patch = st.clone();
            for k in old.keys() {
                if !st.contains_key(k) {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            let _ = self.cluster.patch_status(
                &sandboxes(),
                Some(ns),
                name,
                PatchKind::Merge,
                &json!({"status": patch}),
            );
        } else {
            let mut body = sb.clone();
            body["status"] = Value::Object(st);
            // Update with the resourceVersion read (a concurrent write gives 409; the change
            // that caused it triggers the next reconcile).
            let _ = self
                .cluster
                .update_status(&sandboxes(), Some(ns), name, body);
        }
    }

    fn owner_ref(&self, sb: &Value) -> Value {
        json!([{
            "apiVersion": SANDBOX_API_VERSION, "kind": SANDBOX_KIND,
            "name": s(sb, "/metadata/name").unwrap_or_default(),
            "uid": s(sb, "/metadata/uid").unwrap_or_default(),
            "controller": true, "blockOwnerDeletion": true,
        }])
    }

    /// The pod of F4.11.
    fn pod_for(&self, sb: &Value, hash: &str, vcts: &[Value]) -> Value {
        let name = s(sb, "/metadata/name").unwrap_or_default();
        let tmpl = sb.at("/spec/podTemplate").cloned().unwrap_or(json!({}));
        let tmpl_labels = obj_map(tmpl.at("/metadata/labels"));
        let tmpl_annotations = obj_map(tmpl.at("/metadata/annotations"));
        let mut labels: Map<String, Value> = tmpl_labels
            .iter()
            .filter(|(k, _)| !k.starts_with("agents.x-k8s.io/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.insert(NAME_HASH_LABEL.into(), json!(hash));
        let mut annotations = tmpl_annotations.clone();
        let join = |m: &Map<String, Value>| m.keys().cloned().collect::<Vec<_>>().join(",");
        if !tmpl_labels.is_empty() {
            annotations.insert(PROPAGATED_LABELS.into(), json!(join(&tmpl_labels)));
        }
        if !tmpl_annotations.is_empty() {
            annotations.insert(
                PROPAGATED_ANNOTATIONS.into(),
                json!(join(&tmpl_annotations)),
            );
        }
        let mut spec = tmpl.get("spec").cloned().unwrap_or(json!({}));
        if !vcts.is_empty() {
            let mut volumes: Vec<Value> = spec
                .get("volumes")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for vct in vcts {
                let v = s(vct, "/metadata/name").unwrap_or_default();
                volumes.retain(|x| s(x, "/name") != Some(v));
                volumes.push(json!({"name": v, "persistentVolumeClaim": {"claimName": format!("{v}-{name}")}}));
            }
            spec["volumes"] = Value::Array(volumes);
        }
        json!({
            "metadata": {"name": name, "labels": labels, "annotations": annotations,
                "ownerReferences": self.owner_ref(sb)},
            "spec": spec,
        })
    }
}

/// The CR's status as this reconcile sees it: `old` with the selector, conditions, pod IPs and
/// node name replaced.
fn desired_status(
    old: &Map<String, Value>,
    hash: &str,
    returned: Option<&Value>,
    conds: Vec<Value>,
) -> Map<String, Value> {
    let mut st = old.clone();
    st.insert(
        "selector".into(),
        json!(format!("{NAME_HASH_LABEL}={hash}")),
    );
    st.insert("conditions".into(), Value::Array(conds));
    let ips: Vec<Value> = returned
        .and_then(|p| p.at("/status/podIPs"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|i| i.get("ip").cloned()).collect())
        .unwrap_or_default();
    if ips.is_empty() {
        st.remove("podIPs");
    } else {
        st.insert("podIPs".into(), Value::Array(ips));
    }
    match returned
        .and_then(|p| s(p, "/spec/nodeName"))
        .filter(|n| !n.is_empty())
    {
        Some(n) => {
            st.insert("nodeName".into(), json!(n));
        }
        None => {
            st.remove("nodeName");
        }
    }
    st
}

/// `meta.SetStatusCondition`: `lastTransitionTime` changes only when `status` flips; reason,
/// message and observedGeneration are updated in place; a new type is appended.
fn set_condition(conds: &mut Vec<Value>, mut new: Value, now: &str) {
    match conds.iter_mut().find(|c| c["type"] == new["type"]) {
        Some(cur) => {
            new["lastTransitionTime"] = if cur["status"] == new["status"] {
                cur.get("lastTransitionTime").cloned().unwrap_or(json!(now))
            } else {
                json!(now)
            };
            *cur = new;
        }
        None => {
            new["lastTransitionTime"] = json!(now);
            conds.push(new);
        }
    }
}

/// The controller's image repository in the release manifest (docs/upstream-facts.md F8.8).
pub const CONTROLLER_IMAGE_REPO: &str = "registry.k8s.io/agent-sandbox/agent-sandbox-controller";

/// The controller image: runs the controller model of the release its tag names, for as long
/// as the container runs. A tag with no model logs one line and reconciles nothing.
pub struct ControllerProgram;

/// Stops the controller when the program ends or is dropped (a kill drops it).
struct Running(JoinHandle<()>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[async_trait::async_trait]
impl crate::program::ContainerProgram for ControllerProgram {
    async fn run(&self, mut ctx: crate::program::ContainerCtx) -> i32 {
        let version = crate::program::tag(&ctx.image).and_then(AgentSandboxVersion::parse);
        let _running = match version {
            Some(v) => {
                ctx.log(&format!("starting the Agent Sandbox controller model {v}"));
                Some(Running(
                    AgentSandboxController::new(ctx.cluster.clone(), v).spawn(),
                ))
            }
            None => {
                ctx.log(&format!(
                    "no Agent Sandbox controller model for image {} (modelled: {}); reconciling nothing",
                    ctx.image,
                    AgentSandboxVersion::ALL.map(|v| v.name()).join(", ")
                ));
                None
            }
        };
        // No readiness probe in the manifest: the running container is ready.
        ctx.set_ready(true);
        ctx.signalled().await.exit_code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_parses_from_its_tag_with_or_without_the_v_and_prints_as_that_tag() {
        for v in AgentSandboxVersion::ALL {
            assert_eq!(AgentSandboxVersion::parse(v.name()), Some(v));
            assert_eq!(AgentSandboxVersion::parse(&v.name()[1..]), Some(v));
            assert_eq!(v.to_string(), v.name());
        }
        assert_eq!(
            AgentSandboxVersion::parse("v0.5.1"),
            Some(AgentSandboxVersion::V0_5_1)
        );
        assert_eq!(AgentSandboxVersion::parse("v0.5.2"), None);
    }

    #[test]
    fn the_old_spelling_v0_5_1_plus_still_selects_the_newest_modeled_release() {
        assert_eq!(
            AgentSandboxVersion::parse("v0.5.1+"),
            Some(AgentSandboxVersion::V0_5_4)
        );
    }

    #[test]
    fn the_name_hash_is_fnv1a_32_in_8_hex_digits() {
        assert_eq!(name_hash("default--demo"), "523e82a3");
    }
}
