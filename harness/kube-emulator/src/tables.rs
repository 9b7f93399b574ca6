//! `meta.k8s.io/v1 Table` rendering for kubectl (`Accept: application/json;as=Table;...`), with
//! the columns kubectl shows for the common kinds and CRD `additionalPrinterColumns`.

use crate::clock::{human_age, parse_unix};
use crate::resources::ResourceDef;
use serde_json::{Value, json};

fn s<'a>(o: &'a Value, ptr: &str) -> &'a str {
    o.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn age(o: &Value, now: i64) -> String {
    match o
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(parse_unix)
    {
        Some(t) => human_age(now - t),
        None => "<unknown>".into(),
    }
}

fn col(name: &str, type_: &str, priority: i64, description: &str) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({"name": name, "type": type_, "format": format, "description": description, "priority": priority})
}

/// Evaluates the JSONPath subset printer columns use: `.a.b`, `.a[0].b`, `.a[?(@.k=='v')].b`.
pub(crate) fn json_path(obj: &Value, path: &str) -> Vec<Value> {
    let mut cur = vec![obj.clone()];
    let mut rest = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            cur = cur.iter().filter_map(|v| v.get(key).cloned()).collect();
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return vec![];
            };
            let sel = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = sel.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let Some((k, v)) = filter.split_once("==") else {
                    return vec![];
                };
                let want = v.trim().trim_matches(|c| c == '\'' || c == '"');
                cur = cur
                    .iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .filter(|e| {
                        e.pointer(&format!("/{}", k.trim().replace('.', "/")))
                            .map(|x| match x {
                                Value::String(s) => s.clone(),
                                o => o.to_string(),
                            })
                            == Some(want.to_string())
                    })
                    .cloned()
                    .collect();
            } else if sel == "*" {
                cur = cur
                    .iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .cloned()
                    .collect();
            } else if let Ok(i) = sel.parse::<usize>() {
                cur = cur.iter().filter_map(|v| v.get(i).cloned()).collect();
            } else {
                return vec![];
            }
        } else {
            return vec![];
        }
    }
    cur
}

fn cell_of(v: &[Value], type_: &str, now: i64) -> Value {
    let Some(first) = v.first() else {
        return Value::Null;
    };
    if type_ == "date" {
        return match first.as_str().and_then(parse_unix) {
            Some(t) => json!(human_age(now - t)),
            None => Value::Null,
        };
    }
    match first {
        Value::String(_) | Value::Number(_) | Value::Bool(_) => first.clone(),
        other => json!(other.to_string()),
    }
}

fn pod_status(p: &Value) -> String {
    if p.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        return "Terminating".into();
    }
    let mut reason = p
        .pointer("/status/reason")
        .and_then(Value::as_str)
        .unwrap_or(s(p, "/status/phase"))
        .to_string();
    for cs in p
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(r) = cs.pointer("/state/waiting/reason").and_then(Value::as_str) {
            reason = r.into();
        } else if let Some(r) = cs
            .pointer("/state/terminated/reason")
            .and_then(Value::as_str)
        {
            reason = r.into();
        }
    }
    reason
}

/// Columns and cells for one resource kind.
fn columns(def: &ResourceDef, version: &str) -> Vec<Value> {
    let name = col(
        "Name",
        "string",
        0,
        "Name must be unique within a namespace.",
    );
    let age = col(
        "Age",
        "string",
        0,
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    );
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "pods") => vec![
            name,
            col(
                "Ready",
                "string",
                0,
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            col(
                "Status",
                "string",
                0,
                "The aggregate status of the containers in this pod.",
            ),
            col(
                "Restarts",
                "string",
                0,
                "The number of times the containers in this pod have been restarted.",
            ),
            age,
            col("IP", "string", 1, "IP address allocated to the pod."),
            col(
                "Node",
                "string",
                1,
                "Name of the Node this pod is running on.",
            ),
        ],
        ("", "namespaces") => vec![
            name,
            col("Status", "string", 0, "The status of the namespace"),
            age,
        ],
        ("", "services") => vec![
            name,
            col("Type", "string", 0, "The type of the service."),
            col("Cluster-IP", "string", 0, "The cluster IP of the service."),
            col(
                "External-IP",
                "string",
                0,
                "The external IP of the service.",
            ),
            col("Port(s)", "string", 0, "The ports of the service."),
            age,
        ],
        ("", "persistentvolumeclaims") => vec![
            name,
            col("Status", "string", 0, "The phase of the claim."),
            col("Volume", "string", 0, "The bound volume."),
            col("Capacity", "string", 0, "The capacity of the claim."),
            col(
                "Access Modes",
                "string",
                0,
                "The access modes of the claim.",
            ),
            col(
                "StorageClass",
                "string",
                0,
                "The storage class of the claim.",
            ),
            age,
        ],
        ("", "events") => vec![
            col(
                "Last Seen",
                "string",
                0,
                "Time since the event was last seen.",
            ),
            col("Type", "string", 0, "Type of this event."),
            col("Reason", "string", 0, "Reason for the transition."),
            col("Object", "string", 0, "The object this event is about."),
            col("Message", "string", 0, "A human-readable description."),
        ],
        ("apps", "deployments") => vec![
            name,
            col("Ready", "string", 0, "Number of the pod with ready state"),
            col(
                "Up-to-date",
                "integer",
                0,
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
            ),
            col(
                "Available",
                "integer",
                0,
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
            ),
            age,
        ],
        ("apps", "statefulsets") => vec![
            name,
            col("Ready", "string", 0, "Number of the pod with ready state"),
            age,
        ],
        ("apps", "replicasets") => vec![
            name,
            col("Desired", "integer", 0, "Number of desired pods."),
            col("Current", "integer", 0, "Number of actually running pods."),
            col("Ready", "integer", 0, "Number of ready pods."),
            age,
        ],
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            vec![name, col("Created At", "date", 0, "")]
        }
        ("", "nodes") => vec![
            name,
            col("Status", "string", 0, "The status of the node"),
            col("Roles", "string", 0, "The roles of the node"),
            age,
            col(
                "Version",
                "string",
                0,
                "Kubelet Version reported by the node.",
            ),
        ],
        ("batch", "jobs") => vec![
            name,
            col("Status", "string", 0, "Status of the job."),
            col(
                "Completions",
                "string",
                0,
                "The completion status of the job.",
            ),
            col(
                "Duration",
                "string",
                0,
                "Time required to complete the job.",
            ),
            age,
        ],
        _ => {
            let custom = def
                .version(version)
                .map(|v| v.columns.clone())
                .unwrap_or_default();
            if custom.is_empty() {
                return vec![name, age];
            }
            let mut cols = vec![name];
            cols.extend(
                custom
                    .iter()
                    .map(|c| col(&c.name, &c.type_, c.priority, &c.description)),
            );
            cols
        }
    }
}

fn cells(def: &ResourceDef, version: &str, o: &Value, now: i64) -> Vec<Value> {
    let name = json!(s(o, "/metadata/name"));
    let a = json!(age(o, now));
    let i = |p: &str| o.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "pods") => {
            let statuses = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let total = o
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map(Vec::len)
                .unwrap_or(0);
            let ready = statuses
                .iter()
                .filter(|c| c.get("ready") == Some(&json!(true)))
                .count();
            let restarts: i64 = statuses
                .iter()
                .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                .sum();
            let ip = o
                .pointer("/status/podIP")
                .and_then(Value::as_str)
                .unwrap_or("<none>");
            let node = o
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or("<none>");
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_status(o)),
                json!(restarts.to_string()),
                a,
                json!(ip),
                json!(node),
            ]
        }
        ("", "namespaces") => vec![name, json!(s(o, "/status/phase")), a],
        ("", "services") => {
            let ports: Vec<String> = o
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|p| {
                    format!(
                        "{}/{}",
                        p.get("port").and_then(Value::as_i64).unwrap_or(0),
                        s(p, "/protocol")
                    )
                })
                .collect();
            let ports = if ports.is_empty() {
                "<none>".into()
            } else {
                ports.join(",")
            };
            vec![
                name,
                json!(s(o, "/spec/type")),
                json!(s(o, "/spec/clusterIP")),
                json!("<none>"),
                json!(ports),
                a,
            ]
        }
        ("", "persistentvolumeclaims") => {
            let modes: Vec<&str> = o
                .pointer("/status/accessModes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|m| match m {
                    "ReadWriteOnce" => "RWO",
                    "ReadOnlyMany" => "ROX",
                    "ReadWriteMany" => "RWX",
                    "ReadWriteOncePod" => "RWOP",
                    other => other,
                })
                .collect();
            let sc = o
                .pointer("/spec/storageClassName")
                .and_then(Value::as_str)
                .unwrap_or("<unset>");
            vec![
                name,
                json!(s(o, "/status/phase")),
                json!(s(o, "/spec/volumeName")),
                json!(s(o, "/status/capacity/storage")),
                json!(modes.join(",")),
                json!(sc),
                a,
            ]
        }
        ("", "events") => {
            let last = o
                .get("lastTimestamp")
                .and_then(Value::as_str)
                .or(o.get("eventTime").and_then(Value::as_str))
                .and_then(parse_unix);
            let seen = last
                .map(|t| human_age(now - t))
                .unwrap_or_else(|| age(o, now));
            let obj = format!(
                "{}/{}",
                s(o, "/involvedObject/kind").to_lowercase(),
                s(o, "/involvedObject/name")
            );
            vec![
                json!(seen),
                json!(s(o, "/type")),
                json!(s(o, "/reason")),
                json!(obj),
                json!(s(o, "/message")),
            ]
        }
        ("apps", "deployments") => vec![
            name,
            json!(format!(
                "{}/{}",
                i("/status/readyReplicas"),
                i("/spec/replicas")
            )),
            json!(i("/status/updatedReplicas")),
            json!(i("/status/availableReplicas")),
            a,
        ],
        ("apps", "statefulsets") => vec![
            name,
            json!(format!(
                "{}/{}",
                i("/status/readyReplicas"),
                i("/spec/replicas")
            )),
            a,
        ],
        ("apps", "replicasets") => vec![
            name,
            json!(i("/spec/replicas")),
            json!(i("/status/replicas")),
            json!(i("/status/readyReplicas")),
            a,
        ],
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            vec![name, json!(s(o, "/metadata/creationTimestamp"))]
        }
        ("", "nodes") => vec![
            name,
            json!(crate::kinds::node_status(o)),
            json!(crate::kinds::node_roles(o)),
            a,
            json!(s(o, "/status/nodeInfo/kubeletVersion")),
        ],
        ("batch", "jobs") => {
            let (status, completions, duration) = crate::kinds::job_cells(o, now);
            vec![name, json!(status), json!(completions), json!(duration), a]
        }
        _ => {
            let custom = def
                .version(version)
                .map(|v| v.columns.clone())
                .unwrap_or_default();
            if custom.is_empty() {
                return vec![name, a];
            }
            let mut out = vec![name];
            out.extend(
                custom
                    .iter()
                    .map(|c| cell_of(&json_path(o, &c.json_path), &c.type_, now)),
            );
            out
        }
    }
}

/// The `PartialObjectMetadata` form of an object.
pub(crate) fn partial_metadata(o: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o.get("metadata").cloned().unwrap_or(json!({}))})
}

/// A Table of `objects`; `include_object` is `None`, `Metadata` (default) or `Object`.
pub(crate) fn table(
    def: &ResourceDef,
    version: &str,
    objects: &[Value],
    now: i64,
    include_object: &str,
    rv: Option<u64>,
) -> Value {
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let object = match include_object {
                "None" => Value::Null,
                "Object" => o.clone(),
                _ => partial_metadata(o),
            };
            json!({"cells": cells(def, version, o, now), "object": object})
        })
        .collect();
    let mut md = json!({});
    if let Some(rv) = rv {
        md["resourceVersion"] = json!(rv.to_string());
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": md, "columnDefinitions": columns(def, version), "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_path_filters_conditions_by_type() {
        let o = json!({"status": {"conditions": [{"type": "Suspended", "status": "False"}, {"type": "Ready", "status": "True", "reason": "DependenciesReady"}]}});
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type=='Ready')].reason"),
            vec![json!("DependenciesReady")]
        );
        assert_eq!(
            json_path(&o, ".status.conditions[0].type"),
            vec![json!("Suspended")]
        );
        assert!(json_path(&o, ".status.missing").is_empty());
    }
}
