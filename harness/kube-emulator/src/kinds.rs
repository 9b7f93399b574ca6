//! How the built-in kinds beyond the core workload set that real charts and manifests contain
//! (Node, Job, RBAC, Lease, the access and token reviews) behave: the defaults the real registry
//! strategies give them (docs/upstream-facts.md F12.1-F12.4), the reviews' answers and their
//! table cells. They are served by the table in `resources.rs`.

use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceDef;
use serde_json::{Value, json};

/// Reviews are answered, never stored (`create` is their only verb).
pub(crate) fn is_review(def: &ResourceDef) -> bool {
    def.group == "authorization.k8s.io" || def.group == "authentication.k8s.io"
}

/// The verbs discovery lists for a resource.
pub(crate) fn verbs(def: &ResourceDef) -> &'static [&'static str] {
    if is_review(def) {
        &["create"]
    } else {
        &[
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

/// The answer to a review: the emulated cluster has no authorization, so everything is allowed
/// (F12.4). The body may be in any encoding the client chose; only its spec is echoed back.
pub(crate) fn review(def: &ResourceDef, version: &str, body: &[u8]) -> Value {
    let spec = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|b| b.get("spec").cloned())
        .unwrap_or(json!({}));
    let status = if def.plural == "selfsubjectrulesreviews" {
        json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        })
    } else {
        json!({"allowed": true, "reason": "the emulated cluster authorizes every request"})
    };
    json!({
        "kind": def.kind, "apiVersion": def.api_version(version),
        "metadata": {"creationTimestamp": null}, "spec": spec, "status": status,
    })
}

/// Job admission: the restart policy a Job's pods need, and the defaults of `SetDefaults_Job`
/// (F12.2).
pub(crate) fn admit_job(def: &ResourceDef, name: &str, obj: &mut Value) -> ApiResult<()> {
    let policy = obj
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !matches!(policy, "OnFailure" | "Never") {
        let msg = if policy.is_empty() {
            "Required value: valid values: \"OnFailure\", \"Never\"".to_string()
        } else {
            format!("Unsupported value: {policy:?}: supported values: \"OnFailure\", \"Never\"")
        };
        return Err(ApiError::invalid(
            "batch",
            &def.kind,
            name,
            "spec.template.spec.restartPolicy",
            &msg,
        ));
    }
    let spec = obj["spec"].as_object_mut().expect("spec is an object");
    if !spec.contains_key("completions") && !spec.contains_key("parallelism") {
        spec.insert("completions".into(), json!(1));
        spec.insert("parallelism".into(), json!(1));
    }
    spec.entry("parallelism").or_insert(json!(1));
    spec.entry("backoffLimit").or_insert(json!(6));
    spec.entry("completionMode").or_insert(json!("NonIndexed"));
    spec.entry("suspend").or_insert(json!(false));
    spec.entry("podReplacementPolicy")
        .or_insert(json!("TerminatingOrFailed"));
    spec.entry("manualSelector").or_insert(json!(false));
    Ok(())
}

/// After the uid is assigned: a Job's generated selector and the labels its pods carry
/// (`batch.kubernetes.io/controller-uid`, `job-name`, F12.2).
pub(crate) fn after_stamp(def: &ResourceDef, obj: &mut Value) {
    if (def.group.as_str(), def.plural.as_str()) != ("batch", "jobs") {
        return;
    }
    let uid = obj["metadata"]["uid"].clone();
    let name = obj["metadata"]["name"].clone();
    if obj.pointer("/spec/manualSelector") == Some(&json!(true)) {
        return;
    }
    obj["spec"]["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
    let tmpl = &mut obj["spec"]["template"];
    if !tmpl.get("metadata").is_some_and(Value::is_object) {
        tmpl["metadata"] = json!({});
    }
    let md = &mut tmpl["metadata"];
    if !md.get("labels").is_some_and(Value::is_object) {
        md["labels"] = json!({});
    }
    let labels = &mut md["labels"];
    labels["batch.kubernetes.io/controller-uid"] = uid.clone();
    labels["batch.kubernetes.io/job-name"] = name.clone();
    labels["controller-uid"] = uid;
    labels["job-name"] = name;
}

/// The update strategy and history defaults the apps/v1 registry gives StatefulSets and
/// Deployments (F12.3); `kubectl rollout status` refuses a StatefulSet without
/// `updateStrategy.type: RollingUpdate`.
pub(crate) fn workload_defaults(def: &ResourceDef, obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("revisionHistoryLimit").or_insert(json!(10));
    match def.plural.as_str() {
        "statefulsets" => {
            let us = spec
                .entry("updateStrategy")
                .or_insert(json!({"type": "RollingUpdate"}));
            if us.get("type").is_none() {
                us["type"] = json!("RollingUpdate");
            }
            if us["type"] == "RollingUpdate" && us.get("rollingUpdate").is_none() {
                us["rollingUpdate"] = json!({"partition": 0});
            }
            spec.entry("persistentVolumeClaimRetentionPolicy")
                .or_insert(json!({"whenDeleted": "Retain", "whenScaled": "Retain"}));
        }
        "deployments" => {
            let st = spec
                .entry("strategy")
                .or_insert(json!({"type": "RollingUpdate"}));
            if st.get("type").is_none() {
                st["type"] = json!("RollingUpdate");
            }
            if st["type"] == "RollingUpdate" && st.get("rollingUpdate").is_none() {
                st["rollingUpdate"] = json!({"maxUnavailable": "25%", "maxSurge": "25%"});
            }
            spec.entry("progressDeadlineSeconds").or_insert(json!(600));
        }
        _ => {}
    }
}

/// `kubectl get nodes`' STATUS: Ready, NotReady or Unknown, plus SchedulingDisabled.
pub(crate) fn node_status(o: &Value) -> String {
    let ready = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| c["status"].as_str().unwrap_or(""));
    let mut s = match ready {
        Some("True") => "Ready",
        Some("False") => "NotReady",
        _ => "Unknown",
    }
    .to_string();
    if o.pointer("/spec/unschedulable") == Some(&json!(true)) {
        s.push_str(",SchedulingDisabled");
    }
    s
}

/// The `node-role.kubernetes.io/<role>` labels, or `<none>`.
pub(crate) fn node_roles(o: &Value) -> String {
    let roles: Vec<&str> = o
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
        .collect();
    if roles.is_empty() {
        "<none>".into()
    } else {
        roles.join(",")
    }
}

/// `kubectl get jobs`' STATUS, COMPLETIONS and DURATION.
pub(crate) fn job_cells(o: &Value, now: i64) -> (String, String, String) {
    let cond = |t: &str| {
        o.pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
    };
    let status = if cond("Complete") {
        "Complete"
    } else if cond("Failed") {
        "Failed"
    } else if cond("FailureTarget") {
        "FailureTarget"
    } else if o.pointer("/spec/suspend") == Some(&json!(true)) {
        "Suspended"
    } else if o.pointer("/status/conditions").is_some() || o.pointer("/status/active").is_some() {
        "Running"
    } else {
        "Pending"
    };
    let i = |p: &str| o.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let completions = format!(
        "{}/{}",
        i("/status/succeeded"),
        i("/spec/completions").max(1)
    );
    let t = |p: &str| {
        o.pointer(p)
            .and_then(Value::as_str)
            .and_then(crate::clock::parse_unix)
    };
    let duration = match (t("/status/startTime"), t("/status/completionTime")) {
        (Some(s), Some(e)) => crate::clock::human_age(e - s),
        (Some(s), None) => crate::clock::human_age(now - s),
        _ => String::new(),
    };
    (status.into(), completions, duration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Resources;

    #[test]
    fn a_job_without_a_restart_policy_is_refused_like_the_real_api_server() {
        let r = Resources::builtin();
        let def = r.get("batch", "v1", "jobs").unwrap();
        let mut job = json!({"spec": {"template": {"spec": {"containers": []}}}});
        let e = admit_job(def, "j", &mut job).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(e.message.contains("spec.template.spec.restartPolicy"));
    }

    #[test]
    fn a_job_gets_one_completion_six_retries_and_a_selector_on_its_uid() {
        let r = Resources::builtin();
        let def = r.get("batch", "v1", "jobs").unwrap();
        let mut job = json!({"metadata": {"name": "j", "uid": "u-1"},
            "spec": {"template": {"spec": {"restartPolicy": "Never"}}}});
        admit_job(def, "j", &mut job).unwrap();
        after_stamp(def, &mut job);
        assert_eq!(job["spec"]["completions"], 1);
        assert_eq!(job["spec"]["backoffLimit"], 6);
        assert_eq!(
            job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
            "u-1"
        );
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"]["job-name"],
            "j"
        );
    }

    #[test]
    fn reviews_are_allowed_and_listed_with_create_only() {
        let r = Resources::builtin();
        let def = r
            .get("authorization.k8s.io", "v1", "selfsubjectaccessreviews")
            .unwrap();
        assert_eq!(verbs(def), &["create"]);
        let out = review(
            def,
            "v1",
            br#"{"spec": {"resourceAttributes": {"verb": "create", "resource": "pods"}}}"#,
        );
        assert_eq!(out["status"]["allowed"], true);
        assert_eq!(out["spec"]["resourceAttributes"]["resource"], "pods");
        // A body the server cannot read (protobuf) is still answered.
        assert_eq!(review(def, "v1", b"k8s\0\x01")["status"]["allowed"], true);
    }
}
