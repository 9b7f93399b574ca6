//! Deletion: preconditions, pod grace periods, the foreground and orphan finalizers that
//! propagation sets, and removal from the store (a CRD takes its custom resources with it).

use super::{
    DeleteOptions, EventType, FINALIZER_FOREGROUND, FINALIZER_ORPHAN, Gr, NsName, PendingGrace,
    State, finalizers, is_deleting, meta, meta_mut,
};
use crate::clock::{format_unix, parse_unix};
use crate::error::{ApiError, ApiResult};
use crate::pointer::Pointer;
use crate::resources::ResourceDef;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

impl State {
    /// Deletes (or starts deleting) an object. Returns the object and whether it is gone now
    /// (`false`: it stays with a deletionTimestamp for finalizers or a grace period; HTTP 202).
    pub(crate) fn delete(
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

    /// Deletes without settling: checks the preconditions, then either updates an object already
    /// being deleted or starts deleting it.
    pub(super) fn delete_inner(
        &mut self,
        gr: &Gr,
        key: &NsName,
        opts: &DeleteOptions,
    ) -> ApiResult<(Value, bool)> {
        let old = self
            .get_raw(gr, key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&gr.0, &gr.1, &key.1))?;
        check_preconditions(gr, &key.1, &old, opts)?;
        let is_pod = *gr == (String::new(), "pods".to_string());
        let req = DeleteRequest {
            grace: if is_pod { pod_grace(&old, opts) } else { 0 },
            finalizers: finalizers_with_propagation(&old, opts),
            now_secs: self.clock.now_unix() as i64,
        };
        Ok(if is_deleting(&old) {
            self.redelete(gr, key, old, req)
        } else {
            self.start_deletion(gr, key, old, req)
        })
    }

    /// Already terminating: a shorter grace period may bring the end forward.
    fn redelete(&mut self, gr: &Gr, key: &NsName, old: Value, req: DeleteRequest) -> (Value, bool) {
        let DeleteRequest {
            grace,
            finalizers: fins,
            now_secs,
        } = req;
        let is_pod = *gr == (String::new(), "pods".to_string());
        let mut new = old.clone();
        let cur_grace = old
            .at("/metadata/deletionGracePeriodSeconds")
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
                self.schedule_grace(key, &old, grace);
            }
        }
        if fins != finalizers(&old) {
            meta_mut(&mut new).insert("finalizers".into(), json!(fins));
        }
        if new != old {
            let def = self.resources.get_gr(&gr.0, &gr.1).cloned();
            if let Some(def) = def {
                self.write(&def, key, new, Arc::new(old.clone()));
            }
        }
        let cur = self.get_raw(gr, key).cloned();
        match cur {
            Some(c) => (c, false),
            None => (self.last_deleted(gr, key).unwrap_or(old), true),
        }
    }

    /// Removes the object at once when nothing holds it (no finalizer, no grace period, no
    /// namespace finalizer); otherwise marks it deleting (a namespace becomes Terminating).
    fn start_deletion(
        &mut self,
        gr: &Gr,
        key: &NsName,
        old: Value,
        req: DeleteRequest,
    ) -> (Value, bool) {
        let DeleteRequest {
            grace,
            finalizers: fins,
            now_secs,
        } = req;
        let is_ns = *gr == (String::new(), "namespaces".to_string());
        let mut new = old.clone();
        let spec_fins = is_ns
            && new
                .at("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
        if fins.is_empty() && grace == 0 && !spec_fins {
            let gone = self.remove(gr, key, None);
            return (gone, true);
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
            self.schedule_grace(key, &old, grace);
        }
        let rv = self.next_rv();
        meta_mut(&mut new).insert("resourceVersion".into(), json!(rv.to_string()));
        let stored = Arc::new(new.clone());
        self.objects
            .entry(gr.clone())
            .or_default()
            .insert(key.clone(), Arc::clone(&stored));
        self.emit(gr, EventType::Modified, stored, Some(Arc::new(old)));
        (new, false)
    }

    /// A grace timer for the server to start once the lock is released.
    fn schedule_grace(&mut self, key: &NsName, pod: &Value, grace: i64) {
        self.pending_grace.push(PendingGrace {
            namespace: key.0.clone(),
            name: key.1.clone(),
            uid: meta(pod, "uid").unwrap_or_default(),
            after: Duration::from_secs(grace as u64),
        });
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
            .map(|e| (*e.object).clone())
    }

    /// Removes an object from the store and emits DELETED.
    pub(super) fn remove(&mut self, gr: &Gr, key: &NsName, last: Option<Value>) -> Value {
        let stored = self.objects.get_mut(gr).and_then(|m| m.remove(key));
        let mut obj = last
            .or_else(|| stored.map(Arc::unwrap_or_clone))
            .unwrap_or(Value::Null);
        let rv = self.next_rv();
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let uid = meta(&obj, "uid").unwrap_or_default();
        self.uids.remove(&uid);
        if *gr == (String::new(), "pods".to_string()) {
            self.removed_pods.push((key.0.clone(), key.1.clone(), uid));
        } else if *gr == (String::new(), "persistentvolumeclaims".to_string()) {
            self.removed_claims.push(key.clone());
        }
        self.emit(gr, EventType::Deleted, Arc::new(obj.clone()), None);
        if *gr
            == (
                "apiextensions.k8s.io".to_string(),
                "customresourcedefinitions".to_string(),
            )
        {
            // Deleting a CRD deletes its custom resources and stops serving them.
            let group = obj
                .at("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let plural = obj
                .at("/spec/names/plural")
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
    pub(crate) fn grace_elapsed(&mut self, ns: &str, name: &str, uid: &str) {
        let gr: Gr = (String::new(), "pods".into());
        let key = (ns.to_string(), name.to_string());
        let Some(pod) = self.get_raw(&gr, &key).cloned() else {
            return;
        };
        if meta(&pod, "uid").as_deref() != Some(uid) || !is_deleting(&pod) {
            return;
        }
        let due = pod
            .at("/metadata/deletionTimestamp")
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
}

/// What a delete call asks of an object.
struct DeleteRequest {
    /// Seconds until a graceful (pod) deletion ends; 0 for immediate.
    grace: i64,
    /// The object's finalizers with the one its propagation policy adds.
    finalizers: Vec<String>,
    now_secs: i64,
}

fn check_preconditions(gr: &Gr, name: &str, old: &Value, opts: &DeleteOptions) -> ApiResult<()> {
    if let Some(u) = &opts.precondition_uid
        && Some(u) != meta(old, "uid").as_ref()
    {
        return Err(ApiError::conflict(
            &gr.0,
            &gr.1,
            name,
            &format!(
                "Precondition failed: UID in precondition: {u}, UID in object meta: {}",
                meta(old, "uid").unwrap_or_default()
            ),
        ));
    }
    if let Some(rv) = &opts.precondition_resource_version
        && Some(rv) != meta(old, "resourceVersion").as_ref()
    {
        return Err(ApiError::conflict(
            &gr.0,
            &gr.1,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta(old, "resourceVersion").unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

/// Graceful deletion applies to pods bound to a node and not yet terminated: the requested
/// period, else the pod's own, else 30 seconds.
fn pod_grace(pod: &Value, opts: &DeleteOptions) -> i64 {
    let bound = pod
        .at("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = pod
        .at("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    if bound && !matches!(phase, "Succeeded" | "Failed") {
        opts.grace_period_seconds
            .or_else(|| {
                pod.at("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30)
            .max(0)
    } else {
        0
    }
}

/// Foreground and Orphan propagation add their finalizer, unless the object is already being
/// deleted.
fn finalizers_with_propagation(old: &Value, opts: &DeleteOptions) -> Vec<String> {
    let mut fins = finalizers(old);
    match opts.propagation_policy.as_deref() {
        Some("Foreground")
            if !fins.iter().any(|f| f == FINALIZER_FOREGROUND) && !is_deleting(old) =>
        {
            fins.push(FINALIZER_FOREGROUND.into())
        }
        Some("Orphan") if !fins.iter().any(|f| f == FINALIZER_ORPHAN) && !is_deleting(old) => {
            fins.push(FINALIZER_ORPHAN.into())
        }
        _ => {}
    }
    fins
}
