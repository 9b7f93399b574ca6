//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}[/{version}]`,
//! in the legacy (non-aggregated) format, which kube's discovery and kubectl both read
//! (kubectl falls back to it when the aggregated form is not offered).

use crate::resources::{ResourceDef, Resources};
use serde_json::{Value, json};

pub(crate) fn version() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": "v1.33.0-emulated",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc", "platform": "linux/amd64"
    })
}

pub(crate) fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]})
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

pub(crate) fn group_list(r: &Resources) -> Value {
    let groups: Vec<Value> = r
        .groups()
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(crate) fn group(r: &Resources, name: &str) -> Option<Value> {
    r.groups()
        .iter()
        .find(|(g, _)| g == name && !g.is_empty())
        .map(|(g, vs)| {
            let mut v = group_json(g, vs);
            v["kind"] = json!("APIGroup");
            v["apiVersion"] = json!("v1");
            v
        })
}

fn sub(
    name: &str,
    d: &ResourceDef,
    kind: &str,
    group: Option<(&str, &str)>,
    verbs: &[&str],
) -> Value {
    let mut v = json!({"name": format!("{}/{name}", d.plural), "singularName": "", "namespaced": d.namespaced, "kind": kind, "verbs": verbs});
    if let Some((g, ver)) = group {
        v["group"] = json!(g);
        v["version"] = json!(ver);
    }
    v
}

pub(crate) fn resource_list(r: &Resources, group: &str, version: &str) -> Option<Value> {
    let defs = r.in_group_version(group, version);
    if defs.is_empty() {
        return None;
    }
    let mut resources = vec![];
    for d in defs {
        let Some(vd) = d.version(version) else {
            continue;
        };
        let mut main = json!({
            "name": d.plural, "singularName": d.singular, "namespaced": d.namespaced,
            "kind": d.kind, "verbs": crate::kinds::verbs(d),
        });
        if !d.short_names.is_empty() {
            main["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            main["categories"] = json!(d.categories);
        }
        resources.push(main);
        if vd.scale.is_some() {
            resources.push(sub(
                "scale",
                d,
                "Scale",
                Some(("autoscaling", "v1")),
                &["get", "patch", "update"],
            ));
        }
        if vd.status {
            resources.push(sub("status", d, &d.kind, None, &["get", "patch", "update"]));
        }
        if group.is_empty() && d.plural == "serviceaccounts" {
            resources.push(sub(
                "token",
                d,
                "TokenRequest",
                Some(("authentication.k8s.io", "v1")),
                &["create"],
            ));
        }
        if group.is_empty() && d.plural == "pods" {
            resources.push(sub("binding", d, "Binding", None, &["create"]));
            resources.push(sub(
                "eviction",
                d,
                "Eviction",
                Some(("policy", "v1")),
                &["create"],
            ));
            resources.push(sub("exec", d, "PodExecOptions", None, &["create", "get"]));
            resources.push(sub("log", d, "Pod", None, &["get"]));
            resources.push(sub(
                "portforward",
                d,
                "PodPortForwardOptions",
                None,
                &["create", "get"],
            ));
        }
    }
    resources.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}
