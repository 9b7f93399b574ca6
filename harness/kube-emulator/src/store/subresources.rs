//! The subresources beyond status: `scale` for workloads and `binding` for pods.

use super::{State, Subresource, is_deleting, meta};
use crate::error::{ApiError, ApiResult};
use crate::patch::{PatchKind, apply_patch};
use crate::pointer::Pointer;
use crate::resources::{ResourceDef, ScalePaths};
use crate::selectors::LabelSelector;
use serde_json::{Value, json};
use std::sync::Arc;

impl State {
    /// The `autoscaling/v1 Scale` view of a workload.
    pub(crate) fn get_scale(
        &self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
    ) -> ApiResult<Value> {
        let paths = scale_paths(def, version)?;
        let obj = self.get(def, version, ns, name)?;
        let ptr = |p: &str| format!("/{}", p.trim_start_matches('.').replace('.', "/"));
        let selector = paths
            .label_selector
            .as_ref()
            .and_then(|p| obj.at(&ptr(p)))
            .map(|s| match s {
                Value::String(s) => s.clone(),
                other => LabelSelector::from_object(other).to_string_form(),
            });
        let mut status = json!({"replicas": obj.at(&ptr(&paths.status_replicas)).and_then(Value::as_i64).unwrap_or(0)});
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
            "spec": {"replicas": obj.at(&ptr(&paths.spec_replicas)).and_then(Value::as_i64).unwrap_or(0)},
            "status": status,
        }))
    }

    /// Writes a Scale: sets the replicas of the workload (a spec change, so generation bumps).
    pub(crate) fn update_scale(
        &mut self,
        def: &ResourceDef,
        version: &str,
        ns: Option<&str>,
        name: &str,
        scale: Value,
    ) -> ApiResult<Value> {
        let paths = scale_paths(def, version)?;
        let replicas = scale
            .at("/spec/replicas")
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
        let mut obj = Arc::unwrap_or_clone(self.get(def, version, ns, name)?);
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

    pub(crate) fn patch_scale(
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
    pub(crate) fn bind_pod(&mut self, ns: &str, name: &str, node: &str) -> ApiResult<()> {
        let def = self.def("", "v1", "pods")?;
        let key = (ns.to_string(), name.to_string());
        let old = self
            .get_shared(&def.gr(), &key)
            .cloned()
            .ok_or_else(|| ApiError::not_found("", "pods", name))?;
        if let Some(n) = old
            .at("/spec/nodeName")
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
        let mut new = (*old).clone();
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
}

/// Where `def`'s replicas and selector are in `version`; 404 where it has no scale subresource.
fn scale_paths(def: &ResourceDef, version: &str) -> ApiResult<ScalePaths> {
    def.version(version)
        .and_then(|v| v.scale.clone())
        .ok_or_else(|| {
            ApiError::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
        })
}
