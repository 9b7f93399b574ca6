//! Admission: the defaults and validation the real admission chain and registry strategies
//! apply to new objects and updates (names are checked in `names.rs`).

use super::{FINALIZER_PVC_PROTECTION, State, meta_mut};
use crate::error::{ApiError, ApiResult};
use crate::pointer::Pointer;
use crate::resources::{ResourceDef, apply_schema_defaults};
use serde_json::{Value, json};

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

impl State {
    /// Defaults and validation the real admission chain and registry strategies apply on create.
    pub(super) fn admit_create(
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
            ("", "namespaces") => admit_namespace(name, obj),
            ("", "pods") => admit_pod(def, name, obj)?,
            ("", "persistentvolumeclaims") => admit_pvc(def, name, obj)?,
            ("", "services") => self.admit_service(def, name, obj)?,
            ("", "secrets") => admit_secret(obj),
            ("apps", "statefulsets" | "deployments" | "replicasets") => {
                admit_workload(def, name, obj)?;
                crate::kinds::workload_defaults(def, obj);
            }
            ("batch", "jobs") => crate::kinds::admit_job(def, name, obj)?,
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                self.admit_crd(def, name, obj)?
            }
            _ => {}
        }
        Ok(())
    }

    /// Services: type, session affinity and port defaults, and a cluster IP from the service
    /// range unless one is given or the type is ExternalName.
    fn admit_service(&mut self, def: &ResourceDef, name: &str, obj: &mut Value) -> ApiResult<()> {
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
        Ok(())
    }

    /// CRDs: the name must be `<plural>.<group>`; the status says the names are accepted and
    /// the CRD established at once.
    fn admit_crd(&self, def: &ResourceDef, name: &str, obj: &mut Value) -> ApiResult<()> {
        let names = obj.at("/spec/names").cloned().unwrap_or(json!({}));
        let group = obj
            .at("/spec/group")
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
                &format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
            ));
        }
        let now = self.clock.now_rfc3339();
        obj["status"] = json!({
            "acceptedNames": names,
            "storedVersions": obj.at("/spec/versions").and_then(Value::as_array)
                .map(|vs| vs.iter().filter(|v| v.get("storage") == Some(&json!(true)))
                    .filter_map(|v| v.get("name").cloned()).collect::<Vec<_>>()).unwrap_or_default(),
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": now}
            ]
        });
        Ok(())
    }

    /// What the registry strategies refuse or reset on update.
    pub(super) fn validate_update(
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
                    v.at("/spec/schedulingGates")
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
}

/// Namespaces: the `kubernetes` finalizer, phase Active and the name label.
fn admit_namespace(name: &str, obj: &mut Value) {
    obj["spec"] = json!({"finalizers": ["kubernetes"]});
    obj["status"] = json!({"phase": "Active"});
    let m = meta_mut(obj);
    let labels = m.entry("labels").or_insert_with(|| json!({}));
    labels["kubernetes.io/metadata.name"] = json!(name);
}

/// PVCs: the protection finalizer, filesystem volume mode, phase Pending.
fn admit_pvc(def: &ResourceDef, name: &str, obj: &mut Value) -> ApiResult<()> {
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
    Ok(())
}

/// Secrets: type Opaque by default; `stringData` is encoded into `data`.
fn admit_secret(obj: &mut Value) {
    if obj.get("type").is_none() {
        obj["type"] = json!("Opaque");
    }
    if let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|m| m.remove("stringData")) {
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

/// Workloads: a selector is required; one replica by default (and ordered pod management for
/// StatefulSets).
fn admit_workload(def: &ResourceDef, name: &str, obj: &mut Value) -> ApiResult<()> {
    let spec = obj
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| {
            ApiError::invalid("apps", &def.kind, name, "spec.selector", "Required value")
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
    Ok(())
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
}
