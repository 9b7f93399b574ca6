//! The built-in controllers the API depends on: garbage collector, namespace lifecycle and PVC
//! protection. Each round plans its actions from a snapshot, then applies them in plan order.

use super::{
    DeleteOptions, FINALIZER_FOREGROUND, FINALIZER_ORPHAN, FINALIZER_PVC_PROTECTION, Gr, NsName,
    State, finalizers, is_deleting, meta,
};
use crate::pointer::Pointer;
use serde_json::{Value, json};

#[derive(Debug)]
enum Action {
    Delete(Gr, NsName, DeleteOptions),
    RemoveOwnerRefs(Gr, NsName, Vec<String>),
    RemoveFinalizer(Gr, NsName, &'static str),
    FinalizeNamespace(String),
}

impl State {
    /// Runs the garbage collector, namespace lifecycle and PVC protection until nothing changes.
    pub(super) fn settle(&mut self) {
        if !self.unsettled && self.deleting.is_empty() {
            // The scan below would find nothing. Debug builds (every test run: the store's API
            // tests, the catalog's proof) scan anyway and fail loudly if it would have.
            #[cfg(debug_assertions)]
            assert!(
                self.plan().is_empty(),
                "settle skipped with work left: {:?}",
                self.plan()
            );
            return;
        }
        for _ in 0..10_000 {
            let actions = self.plan();
            if actions.is_empty() {
                self.unsettled = false;
                return;
            }
            for a in actions {
                self.act(a);
            }
        }
        tracing::warn!("emulated controllers did not settle after 10000 rounds");
    }

    /// One round's actions, in the order they apply: garbage collection, then finalizers whose
    /// condition is met, then namespace lifecycle.
    fn plan(&self) -> Vec<Action> {
        let mut actions = vec![];
        self.plan_garbage_collection(&mut actions);
        self.plan_finalizer_removal(&mut actions);
        self.plan_namespace_lifecycle(&mut actions);
        actions
    }

    /// Every stored object as (resource, key, object), in store order.
    fn all_objects(&self) -> impl Iterator<Item = (&Gr, &NsName, &Value)> {
        self.objects
            .iter()
            .flat_map(|(gr, m)| m.iter().map(move |(k, o)| (gr, k, &**o)))
    }

    /// Garbage collector: dependents of absent owners go; dependents of owners being deleted
    /// in the foreground go first; dependents of orphaning owners lose their reference.
    fn plan_garbage_collection(&self, actions: &mut Vec<Action>) {
        for (gr, key, obj) in self.all_objects() {
            let Some(refs) = obj
                .at("/metadata/ownerReferences")
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
    }

    /// The foreground and orphan finalizers go once the dependents they wait for are gone; PVC
    /// protection goes once no pod uses the claim.
    fn plan_finalizer_removal(&self, actions: &mut Vec<Action>) {
        let dependents_of = |uid: &str, blocking_only: bool| {
            self.all_objects().any(|(_, _, o)| {
                o.at("/metadata/ownerReferences")
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
        for (gr, key, obj) in self.all_objects().filter(|(_, _, o)| is_deleting(o)) {
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
                && !self.pvc_in_use(&key.0, &key.1)
            {
                actions.push(Action::RemoveFinalizer(
                    gr.clone(),
                    key.clone(),
                    FINALIZER_PVC_PROTECTION,
                ));
            }
        }
    }

    /// Whether a non-terminated pod in the namespace uses the claim.
    fn pvc_in_use(&self, ns: &str, claim: &str) -> bool {
        self.objects
            .get(&(String::new(), "pods".into()))
            .is_some_and(|pods| {
                pods.iter().any(|((pns, _), p)| {
                    pns == ns
                        && !matches!(
                            p.at("/status/phase").and_then(Value::as_str),
                            Some("Succeeded" | "Failed")
                        )
                        && p.at("/spec/volumes")
                            .and_then(Value::as_array)
                            .is_some_and(|vs| {
                                vs.iter().any(|v| {
                                    v.at("/persistentVolumeClaim/claimName")
                                        .and_then(Value::as_str)
                                        == Some(claim)
                                })
                            })
                })
            })
    }

    /// Namespace lifecycle: a terminating namespace has its content deleted, then is finalized.
    fn plan_namespace_lifecycle(&self, actions: &mut Vec<Action>) {
        if let Some(nss) = self.objects.get(&(String::new(), "namespaces".into())) {
            for ((_, ns), nso) in nss.iter().filter(|(_, o)| is_deleting(o)) {
                let mut any = false;
                for (gr, key, obj) in self
                    .all_objects()
                    .filter(|(gr, k, _)| !k.0.is_empty() && k.0 == *ns && gr.1 != "namespaces")
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
                    .at("/spec/finalizers")
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty());
                if !any && spec_fins {
                    actions.push(Action::FinalizeNamespace(ns.clone()));
                }
            }
        }
    }

    /// Applies one action through the API's own delete and write paths, so each change emits its
    /// watch event like any client's would.
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
        let Some(old) = self.get_shared(gr, key).cloned() else {
            return;
        };
        let Some(def) = self.resources.get_gr(&gr.0, &gr.1).cloned() else {
            return;
        };
        let mut new = (*old).clone();
        f(&mut new);
        if new != *old {
            self.write(&def, key, new, old);
        }
    }
}
