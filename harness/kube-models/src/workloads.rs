//! Workload controllers: StatefulSet → pods (+ PVCs from `volumeClaimTemplates`) and
//! Deployment → ReplicaSet → pods. Level-triggered: every change on the cluster re-runs one
//! reconcile pass over all workloads (no polling, no timers); writes happen only when
//! something differs, so the loop settles.
//!
//! Models (docs/upstream-facts.md F10.3): StatefulSet pods `<name>-<ordinal>` with the template
//! labels plus `statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index` and
//! `controller-revision-hash`, `hostname`/`subdomain`, a controller ownerRef, and PVC volumes
//! `<vct>-<name>-<ordinal>`; PVCs are created before the pod and kept on scale-down and on
//! StatefulSet deletion (default retention policy `Retain`); `OrderedReady` (default: one pod
//! at a time, each waiting for the lower ordinals to be Running and Ready; scale-down from the
//! highest ordinal, one at a time, graceful) and `Parallel`; a deleted or terminal pod is
//! recreated with the same name. Deployments: one ReplicaSet `<name>-<pod-template-hash>` per
//! template; a template change scales old ReplicaSets to 0 at once (no surge accounting);
//! ReplicaSets create pods with `generateName: <rs>-` (the store's deterministic 5-character
//! suffixes) and delete surplus ones not-ready first.
//! StatefulSet RollingUpdate (with partition) replaces outdated pods one at a time, highest
//! ordinal first, each once all replicas are ready; `OnDelete` leaves them.
//! Not modelled: Deployment surge accounting, rollbacks, `minReadySeconds`, the PVC retention
//! policy `Delete`, ControllerRevision objects, Deployment progress deadlines.

use kube_emulator::Pointer;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;

use crate::network::is_ready;
use kube_emulator::{Cluster, DeleteOptions, ListOptions, ResourceRef};

pub fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.at(ptr).and_then(Value::as_str)
}

fn statefulsets() -> ResourceRef {
    ResourceRef::new("apps", "v1", "statefulsets")
}
fn deployments() -> ResourceRef {
    ResourceRef::new("apps", "v1", "deployments")
}
fn replicasets() -> ResourceRef {
    ResourceRef::new("apps", "v1", "replicasets")
}
fn pvcs() -> ResourceRef {
    ResourceRef::new("", "v1", "persistentvolumeclaims")
}

/// FNV-1a 32-bit (the hash Kubernetes and Agent Sandbox use for names).
pub(crate) fn fnv1a32(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// `rand.SafeEncodeString` of a hash's decimal digits (no vowels, no look-alikes), as
/// `pod-template-hash` and `controller-revision-hash` are rendered.
pub(crate) fn safe_encode(n: u32) -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    n.to_string()
        .bytes()
        .map(|b| ALPHA[usize::from(b) % ALPHA.len()] as char)
        .collect()
}

fn template_hash(template: Option<&Value>) -> String {
    // An absent template hashes as `{}`.
    let text = template.map_or_else(|| "{}".to_string(), Value::to_string);
    safe_encode(fnv1a32(text.as_bytes()))
}

pub(crate) fn is_deleting(v: &Value) -> bool {
    v.at("/metadata/deletionTimestamp").is_some()
}

pub fn is_terminal(p: &Value) -> bool {
    matches!(s(p, "/status/phase"), Some("Succeeded" | "Failed"))
}

/// What the workload controllers read of a pod.
struct PodView {
    name: String,
    /// The uid of its controller ownerRef.
    owner: Option<String>,
    created: String,
    deleting: bool,
    terminal: bool,
    ready: bool,
    /// Its `controller-revision-hash` label (StatefulSet pods).
    revision: Option<String>,
}

/// The uid of the object's controller ownerRef.
pub(crate) fn controller_uid(v: &Value) -> Option<&str> {
    v.at("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|r| r.get("uid"))
        .and_then(Value::as_str)
}

pub(crate) fn owner_ref(api_version: &str, kind: &str, owner: &Value) -> Value {
    json!([{
        "apiVersion": api_version, "kind": kind,
        "name": s(owner, "/metadata/name").unwrap_or_default(),
        "uid": s(owner, "/metadata/uid").unwrap_or_default(),
        "controller": true, "blockOwnerDeletion": true,
    }])
}

/// Shared, not copied: the controllers list on every change to the store.
pub fn list(cluster: &Cluster, r: &ResourceRef) -> Vec<Arc<Value>> {
    cluster
        .list_shared(r, None, &ListOptions::default())
        .map(|(items, _)| items)
        .unwrap_or_default()
}

/// Writes `.status` when it differs from the stored one.
pub(crate) fn write_status(cluster: &Cluster, r: &ResourceRef, obj: &Value, status: Value) {
    if obj.get("status") == Some(&status) {
        return;
    }
    let ns = s(obj, "/metadata/namespace");
    let name = s(obj, "/metadata/name").unwrap_or_default();
    let body = json!({"metadata": {"name": name}, "status": status});
    let _ = cluster.update_status(r, ns, name, body);
}

/// Sets a condition like `meta.SetStatusCondition` / the apps controllers do: the transition
/// time changes only when the status flips; the update time when anything changes.
pub(crate) fn set_condition(conds: &mut Vec<Value>, mut new: Value, now: &str) {
    let t = new["type"].clone();
    match conds.iter_mut().find(|c| c["type"] == t) {
        Some(cur) => {
            let same = |k: &str| cur.get(k) == new.get(k);
            let transition = if same("status") {
                cur.get("lastTransitionTime").cloned()
            } else {
                None
            };
            let update = if same("status") && same("reason") && same("message") {
                cur.get("lastUpdateTime").cloned()
            } else {
                None
            };
            new["lastTransitionTime"] = transition.unwrap_or(json!(now));
            new["lastUpdateTime"] = update.unwrap_or(json!(now));
            *cur = new;
        }
        None => {
            new["lastTransitionTime"] = json!(now);
            new["lastUpdateTime"] = json!(now);
            conds.push(new);
        }
    }
}

fn obj_map(v: Option<&Value>) -> Map<String, Value> {
    v.and_then(Value::as_object).cloned().unwrap_or_default()
}

/// The StatefulSet, Deployment and ReplicaSet controllers.
pub(crate) struct WorkloadControllers {
    cluster: Cluster,
    /// Template hashes by workload uid, with the generation they were computed at.
    hashes: Mutex<HashMap<String, (i64, String)>>,
}

impl WorkloadControllers {
    pub(crate) fn new(cluster: Cluster) -> Self {
        Self {
            cluster,
            hashes: Mutex::default(),
        }
    }

    /// The workload's template hash, computed once per generation: the template is spec, which
    /// changes only with a new generation, and hashing serialises the whole template (every
    /// pass hashed every workload, 2 % of the proof's instructions).
    fn template_hash_of(&self, workload: &Value) -> String {
        let template = workload.at("/spec/template");
        let (Some(uid), Some(generation)) = (
            s(workload, "/metadata/uid"),
            workload.at("/metadata/generation").and_then(Value::as_i64),
        ) else {
            return template_hash(template);
        };
        let mut hashes = self.hashes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, hash)) = hashes.get(uid)
            && *at == generation
        {
            return hash.clone();
        }
        let hash = template_hash(template);
        hashes.insert(uid.to_string(), (generation, hash.clone()));
        hash
    }

    /// Runs until the task is aborted.
    pub(crate) fn spawn(self) -> JoinHandle<()> {
        let mut changes = self.cluster.subscribe();
        tokio::spawn(async move {
            loop {
                self.reconcile_all();
                if changes.changed().await.is_err() {
                    return;
                }
            }
        })
    }

    /// One pass over every workload.
    pub(crate) fn reconcile_all(&self) {
        for sts in list(&self.cluster, &statefulsets()) {
            if !is_deleting(&sts) {
                self.statefulset(&sts);
            }
        }
        for d in list(&self.cluster, &deployments()) {
            if !is_deleting(&d) {
                self.deployment(&d);
            }
        }
        for rs in list(&self.cluster, &replicasets()) {
            if !is_deleting(&rs) {
                self.replicaset(&rs);
            }
        }
    }

    /// The pods of a namespace by name, as much of each as the controllers read. Read in place:
    /// the controllers run on every change to the store, and sandbox pods are large.
    fn pods_in(&self, ns: &str) -> BTreeMap<String, PodView> {
        self.cluster
            .scan(
                &ResourceRef::pods(),
                Some(ns),
                &ListOptions::default(),
                |p| {
                    let view = PodView {
                        name: s(p, "/metadata/name").unwrap_or_default().to_string(),
                        owner: controller_uid(p).map(str::to_string),
                        created: s(p, "/metadata/creationTimestamp")
                            .unwrap_or_default()
                            .to_string(),
                        deleting: is_deleting(p),
                        terminal: is_terminal(p),
                        ready: is_ready(p),
                        revision: s(p, "/metadata/labels/controller-revision-hash")
                            .map(str::to_string),
                    };
                    Some((view.name.clone(), view))
                },
            )
            .unwrap_or_default()
            .into_iter()
            .collect()
    }

    fn statefulset(&self, sts: &Value) {
        let ns = s(sts, "/metadata/namespace").unwrap_or_default();
        let name = s(sts, "/metadata/name").unwrap_or_default();
        let uid = s(sts, "/metadata/uid").unwrap_or_default();
        let replicas = sts
            .at("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(0);
        let ordered = s(sts, "/spec/podManagementPolicy") != Some("Parallel");
        let revision = format!("{name}-{}", self.template_hash_of(sts));
        let pods = self.pods_in(ns);
        let owned = |p: &PodView| p.owner.as_deref() == Some(uid);
        let ordinal = |pname: &str| -> Option<i64> {
            pname
                .strip_prefix(name)?
                .strip_prefix('-')?
                .parse::<i64>()
                .ok()
        };
        // Scale up / replace, lowest ordinal first.
        for ord in 0..replicas {
            let pod_name = format!("{name}-{ord}");
            match pods.get(&pod_name) {
                None => {
                    self.create_sts_pod(sts, ord, &pod_name, &revision);
                    if ordered {
                        break;
                    }
                }
                Some(p) if !owned(p) => {}
                Some(p) if p.deleting => {
                    if ordered {
                        break;
                    }
                }
                Some(p) if p.terminal => {
                    // A failed or succeeded pod is deleted and created again (same name).
                    let _ = self.cluster.delete(
                        &ResourceRef::pods(),
                        Some(ns),
                        &pod_name,
                        &DeleteOptions::default(),
                    );
                    if ordered {
                        break;
                    }
                }
                Some(p) => {
                    if ordered && !p.ready {
                        break;
                    }
                }
            }
        }
        // Scale down, highest ordinal first.
        let mut surplus: Vec<(i64, &PodView)> = pods
            .iter()
            .filter(|(_, p)| owned(p))
            .filter_map(|(n, p)| ordinal(n).map(|o| (o, p)))
            .filter(|(o, _)| *o >= replicas)
            .collect();
        surplus.sort_by_key(|(o, _)| std::cmp::Reverse(*o));
        let terminating = surplus.iter().any(|(_, p)| p.deleting);
        for (o, p) in &surplus {
            if p.deleting {
                continue;
            }
            if ordered && terminating {
                break;
            }
            let _ = self.cluster.delete(
                &ResourceRef::pods(),
                Some(ns),
                &format!("{name}-{o}"),
                &DeleteOptions::default(),
            );
            if ordered {
                break;
            }
        }
        // Status (and the rolling update, from the same listing; what it deletes shows next pass).
        let pods = self.pods_in(ns);
        self.rolling_update(sts, &pods, &ordinal, &revision);
        let live: Vec<&PodView> = pods.values().filter(|p| owned(p) && !p.deleting).collect();
        let ready = live.iter().filter(|p| p.ready).count() as i64;
        let updated = live
            .iter()
            .filter(|p| p.revision.as_deref() == Some(revision.as_str()))
            .count() as i64;
        // The current revision is the one the pods ran before an update; it becomes the update
        // revision once every replica runs it.
        let current = match s(sts, "/status/currentRevision") {
            Some(c) if updated < replicas || live.len() as i64 != replicas => c.to_string(),
            _ => revision.clone(),
        };
        let current_n = live
            .iter()
            .filter(|p| p.revision.as_deref() == Some(current.as_str()))
            .count() as i64;
        let mut st = obj_map(sts.get("status"));
        st.insert(
            "observedGeneration".into(),
            sts["metadata"]["generation"].clone(),
        );
        st.insert("replicas".into(), json!(live.len()));
        st.insert("availableReplicas".into(), json!(ready));
        for (k, v) in [
            ("readyReplicas", ready),
            ("currentReplicas", current_n),
            ("updatedReplicas", updated),
        ] {
            if v > 0 {
                st.insert(k.into(), json!(v));
            } else {
                st.remove(k);
            }
        }
        st.insert("currentRevision".into(), json!(current));
        st.insert("updateRevision".into(), json!(revision));
        st.insert("collisionCount".into(), json!(0));
        write_status(&self.cluster, &statefulsets(), sts, Value::Object(st));
    }

    /// The RollingUpdate strategy (the default, F12.3): once every replica exists, none is
    /// terminating and all are ready, the highest ordinal at or above the partition that runs
    /// an older revision is deleted (and recreated at the update revision by the next pass),
    /// one pod at a time. `OnDelete` leaves pods alone.
    fn rolling_update(
        &self,
        sts: &Value,
        pods: &BTreeMap<String, PodView>,
        ordinal: &dyn Fn(&str) -> Option<i64>,
        revision: &str,
    ) {
        if s(sts, "/spec/updateStrategy/type").unwrap_or("RollingUpdate") != "RollingUpdate" {
            return;
        }
        let ns = s(sts, "/metadata/namespace").unwrap_or_default();
        let uid = s(sts, "/metadata/uid").unwrap_or_default();
        let replicas = sts
            .at("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(0);
        let partition = sts
            .at("/spec/updateStrategy/rollingUpdate/partition")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let mut mine: Vec<(i64, &PodView)> = pods
            .iter()
            .filter(|(_, p)| p.owner.as_deref() == Some(uid))
            .filter_map(|(n, p)| ordinal(n).map(|o| (o, p)))
            .filter(|(o, _)| *o < replicas)
            .collect();
        let settled =
            mine.len() as i64 == replicas && mine.iter().all(|(_, p)| !p.deleting && p.ready);
        if !settled {
            return;
        }
        mine.sort_by_key(|(o, _)| std::cmp::Reverse(*o));
        if let Some((_, p)) = mine
            .iter()
            .find(|(o, p)| *o >= partition && p.revision.as_deref() != Some(revision))
        {
            let _ = self.cluster.delete(
                &ResourceRef::pods(),
                Some(ns),
                &p.name,
                &DeleteOptions::default(),
            );
        }
    }

    fn create_sts_pod(&self, sts: &Value, ord: i64, pod_name: &str, revision: &str) {
        let ns = s(sts, "/metadata/namespace").unwrap_or_default();
        let name = s(sts, "/metadata/name").unwrap_or_default();
        let selector = obj_map(sts.at("/spec/selector/matchLabels"));
        let vcts: Vec<Value> = sts
            .at("/spec/volumeClaimTemplates")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut volumes: Vec<Value> = sts
            .at("/spec/template/spec/volumes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for vct in &vcts {
            let vname = s(vct, "/metadata/name").unwrap_or_default();
            let claim = format!("{vname}-{name}-{ord}");
            if self.cluster.get(&pvcs(), Some(ns), &claim).is_err() {
                let mut labels = obj_map(vct.at("/metadata/labels"));
                labels.extend(selector.clone());
                let mut md = json!({"name": claim, "labels": labels});
                if let Some(a) = vct.at("/metadata/annotations") {
                    md["annotations"] = a.clone();
                }
                let pvc =
                    json!({"metadata": md, "spec": vct.get("spec").cloned().unwrap_or(json!({}))});
                if self.cluster.create(&pvcs(), Some(ns), pvc).is_err() {
                    return;
                }
            }
            volumes.retain(|v| s(v, "/name") != Some(vname));
            volumes.push(json!({"name": vname, "persistentVolumeClaim": {"claimName": claim}}));
        }
        let template = sts.at("/spec/template").cloned().unwrap_or(json!({}));
        let mut labels = obj_map(template.at("/metadata/labels"));
        labels.insert("statefulset.kubernetes.io/pod-name".into(), json!(pod_name));
        labels.insert(
            "apps.kubernetes.io/pod-index".into(),
            json!(ord.to_string()),
        );
        labels.insert("controller-revision-hash".into(), json!(revision));
        let mut spec = template.get("spec").cloned().unwrap_or(json!({}));
        spec["hostname"] = json!(pod_name);
        if let Some(svc) = s(sts, "/spec/serviceName").filter(|x| !x.is_empty()) {
            spec["subdomain"] = json!(svc);
        }
        if !volumes.is_empty() {
            spec["volumes"] = Value::Array(volumes);
        }
        let mut md = json!({
            "name": pod_name, "labels": labels,
            "ownerReferences": owner_ref("apps/v1", "StatefulSet", sts),
        });
        if let Some(a) = template.at("/metadata/annotations") {
            md["annotations"] = a.clone();
        }
        let _ = self.cluster.create(
            &ResourceRef::pods(),
            Some(ns),
            json!({"metadata": md, "spec": spec}),
        );
    }

    fn deployment(&self, d: &Value) {
        let ns = s(d, "/metadata/namespace").unwrap_or_default();
        let name = s(d, "/metadata/name").unwrap_or_default();
        let uid = s(d, "/metadata/uid").unwrap_or_default();
        let replicas = d
            .at("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(0);
        let hash = self.template_hash_of(d);
        let rs_name = format!("{name}-{hash}");
        let owned: Vec<Arc<Value>> = self
            .cluster
            .list_shared(&replicasets(), Some(ns), &ListOptions::default())
            .map(|(i, _)| i)
            .unwrap_or_default()
            .into_iter()
            .filter(|rs| controller_uid(rs) == Some(uid))
            .collect();
        let revision = owned.len()
            + usize::from(
                !owned
                    .iter()
                    .any(|rs| s(rs, "/metadata/name") == Some(&rs_name)),
            );
        match owned
            .iter()
            .find(|rs| s(rs, "/metadata/name") == Some(&rs_name))
        {
            None => {
                let template = d.at("/spec/template").cloned().unwrap_or(json!({}));
                let mut labels = obj_map(template.at("/metadata/labels"));
                labels.insert("pod-template-hash".into(), json!(hash));
                let mut selector = d.at("/spec/selector").cloned().unwrap_or(json!({}));
                selector["matchLabels"]["pod-template-hash"] = json!(hash);
                let mut tmpl = template.clone();
                tmpl["metadata"]["labels"] = Value::Object(labels.clone());
                let rs = json!({
                    "metadata": {"name": rs_name, "labels": labels,
                        "annotations": {
                            "deployment.kubernetes.io/desired-replicas": replicas.to_string(),
                            "deployment.kubernetes.io/max-replicas": replicas.to_string(),
                            "deployment.kubernetes.io/revision": revision.to_string()},
                        "ownerReferences": owner_ref("apps/v1", "Deployment", d)},
                    "spec": {"replicas": replicas, "selector": selector, "template": tmpl},
                });
                let _ = self.cluster.create(&replicasets(), Some(ns), rs);
            }
            Some(rs) => {
                if rs.at("/spec/replicas").and_then(Value::as_i64) != Some(replicas) {
                    let _ = self
                        .cluster
                        .scale(&replicasets(), Some(ns), &rs_name, replicas);
                }
            }
        }
        for rs in &owned {
            let n = s(rs, "/metadata/name").unwrap_or_default();
            if n != rs_name && rs.at("/spec/replicas").and_then(Value::as_i64) != Some(0) {
                let _ = self.cluster.scale(&replicasets(), Some(ns), n, 0);
            }
        }
        // Status from the ReplicaSets' statuses.
        let owned: Vec<Arc<Value>> = self
            .cluster
            .list_shared(&replicasets(), Some(ns), &ListOptions::default())
            .map(|(i, _)| i)
            .unwrap_or_default()
            .into_iter()
            .filter(|rs| controller_uid(rs) == Some(uid))
            .collect();
        let sum = |k: &str| -> i64 {
            owned
                .iter()
                .filter_map(|rs| rs.at(&format!("/status/{k}")).and_then(Value::as_i64))
                .sum()
        };
        let updated = owned
            .iter()
            .find(|rs| s(rs, "/metadata/name") == Some(&rs_name))
            .and_then(|rs| rs.at("/status/replicas").and_then(Value::as_i64))
            .unwrap_or(0);
        let (total, ready, available) = (
            sum("replicas"),
            sum("readyReplicas"),
            sum("availableReplicas"),
        );
        let now = self.cluster.now_rfc3339();
        let mut st = obj_map(d.get("status"));
        st.insert(
            "observedGeneration".into(),
            d["metadata"]["generation"].clone(),
        );
        for (k, v) in [
            ("replicas", total),
            ("updatedReplicas", updated),
            ("readyReplicas", ready),
            ("availableReplicas", available),
            ("unavailableReplicas", (total - available).max(0)),
        ] {
            if v > 0 {
                st.insert(k.into(), json!(v));
            } else {
                st.remove(k);
            }
        }
        let mut conds: Vec<Value> = st
            .get("conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let avail = available >= replicas;
        set_condition(
            &mut conds,
            json!({"type": "Available", "status": if avail { "True" } else { "False" },
                "reason": if avail { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                "message": if avail { "Deployment has minimum availability." } else { "Deployment does not have minimum availability." }}),
            &now,
        );
        let done = updated == replicas && available >= replicas && total == replicas;
        set_condition(
            &mut conds,
            json!({"type": "Progressing", "status": "True",
                "reason": if done { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" },
                "message": if done { format!("ReplicaSet \"{rs_name}\" has successfully progressed.") }
                           else { format!("ReplicaSet \"{rs_name}\" is progressing.") }}),
            &now,
        );
        st.insert("conditions".into(), Value::Array(conds));
        write_status(&self.cluster, &deployments(), d, Value::Object(st));
    }

    fn replicaset(&self, rs: &Value) {
        let ns = s(rs, "/metadata/namespace").unwrap_or_default();
        let name = s(rs, "/metadata/name").unwrap_or_default();
        let uid = s(rs, "/metadata/uid").unwrap_or_default();
        let replicas = rs
            .at("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(0);
        let pods = self.pods_in(ns);
        let mut active: Vec<&PodView> = pods
            .values()
            .filter(|p| p.owner.as_deref() == Some(uid) && !p.deleting && !p.terminal)
            .collect();
        let diff = replicas - active.len() as i64;
        if diff > 0 {
            let template = rs.at("/spec/template").cloned().unwrap_or(json!({}));
            for _ in 0..diff {
                let mut md = json!({
                    "generateName": format!("{name}-"),
                    "labels": template.at("/metadata/labels").cloned().unwrap_or(json!({})),
                    "ownerReferences": owner_ref("apps/v1", "ReplicaSet", rs),
                });
                if let Some(a) = template.at("/metadata/annotations") {
                    md["annotations"] = a.clone();
                }
                let spec = template.get("spec").cloned().unwrap_or(json!({}));
                let _ = self.cluster.create(
                    &ResourceRef::pods(),
                    Some(ns),
                    json!({"metadata": md, "spec": spec}),
                );
            }
        } else if diff < 0 {
            // Not-ready pods go first, then the newest.
            active.sort_by_key(|p| {
                (
                    p.ready,
                    std::cmp::Reverse(p.created.clone()),
                    std::cmp::Reverse(p.name.clone()),
                )
            });
            for p in active.iter().take((-diff) as usize) {
                let _ = self.cluster.delete(
                    &ResourceRef::pods(),
                    Some(ns),
                    &p.name,
                    &DeleteOptions::default(),
                );
            }
        }
        let pods = self.pods_in(ns);
        let live: Vec<&PodView> = pods
            .values()
            .filter(|p| p.owner.as_deref() == Some(uid) && !p.deleting && !p.terminal)
            .collect();
        let ready = live.iter().filter(|p| p.ready).count() as i64;
        let mut st = obj_map(rs.get("status"));
        st.insert(
            "observedGeneration".into(),
            rs["metadata"]["generation"].clone(),
        );
        st.insert("replicas".into(), json!(live.len()));
        for (k, v) in [
            ("fullyLabeledReplicas", live.len() as i64),
            ("readyReplicas", ready),
            ("availableReplicas", ready),
        ] {
            if v > 0 {
                st.insert(k.into(), json!(v));
            } else {
                st.remove(k);
            }
        }
        write_status(&self.cluster, &replicasets(), rs, Value::Object(st));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a32_matches_the_reference_vector_of_agent_sandbox() {
        // docs/upstream-facts.md F4.8: NameHash("default--demo") = 523e82a3.
        assert_eq!(format!("{:08x}", fnv1a32(b"default--demo")), "523e82a3");
    }
}
