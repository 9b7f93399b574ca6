//! The PATCH flavours: JSON merge patch (RFC 7386) and JSON patch (RFC 6902) via the `json-patch`
//! crate, strategic merge patch for the Kubernetes fields the harness and kubectl touch, and a
//! simple server-side apply (a strategic deep merge without field-ownership tracking).

use crate::error::ApiError;
use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchKind {
    /// From the request's Content-Type.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Applies a patch document to `target`, returning the patched object.
pub(crate) fn apply_patch(kind: PatchKind, target: &Value, body: &[u8]) -> Result<Value, ApiError> {
    let mut out = target.clone();
    match kind {
        PatchKind::Merge => {
            let p: Value = parse_json(body)?;
            json_patch::merge(&mut out, &p);
        }
        PatchKind::Json => {
            let p: json_patch::Patch = serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("json: cannot unmarshal the patch: {e}"))
            })?;
            json_patch::patch(&mut out, &p)
                .map_err(|e| ApiError::new(422, "Invalid", e.to_string()))?;
        }
        PatchKind::Strategic => {
            let p: Value = parse_json(body)?;
            strategic_merge(&mut out, &p, "");
        }
        PatchKind::Apply => {
            let p = parse_apply_body(body)?;
            strategic_merge(&mut out, &strip_nulls(p), "");
        }
    }
    Ok(out)
}

/// A patch document: the bytes of a request, or a value from an in-process caller, applied as it
/// is (serialising it only for the server to parse it again cost a copy of the patch each way).
#[derive(Debug, Clone, Copy)]
pub(crate) enum PatchBody<'a> {
    Bytes(&'a [u8]),
    Value(&'a Value),
}

impl PatchBody<'_> {
    /// Applies the patch to `target`, as [`apply_patch`] does with its bytes.
    pub(crate) fn apply(self, kind: PatchKind, target: &Value) -> Result<Value, ApiError> {
        let p = match self {
            Self::Bytes(b) => return apply_patch(kind, target, b),
            Self::Value(p) => p,
        };
        let mut out = target.clone();
        match kind {
            PatchKind::Merge => json_patch::merge(&mut out, p),
            PatchKind::Strategic => strategic_merge(&mut out, p, ""),
            PatchKind::Apply => strategic_merge(&mut out, &strip_nulls(p.clone()), ""),
            // Rare in process; through the bytes, so a malformed patch reads as from a request.
            PatchKind::Json => {
                let b = serde_json::to_vec(p).map_err(|e| ApiError::bad_request(e.to_string()))?;
                return apply_patch(kind, target, &b);
            }
        }
        Ok(out)
    }

    /// The object a server-side apply creates when nothing exists yet.
    pub(crate) fn apply_object(self) -> Result<Value, ApiError> {
        match self {
            Self::Bytes(b) => parse_apply_body(b),
            Self::Value(v) => Ok(v.clone()),
        }
    }
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}

/// The body of an apply patch is YAML (JSON is a subset).
pub(crate) fn parse_apply_body(body: &[u8]) -> Result<Value, ApiError> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let s = std::str::from_utf8(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    serde_saphyr::from_str::<Value>(s)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

/// How a list field merges under strategic merge patch (the `patchMergeKey`s of the Kubernetes
/// types), decided from the field name and its parent path.
enum ListStrategy {
    Replace,
    MergeKey(&'static str),
    MergePrimitive,
}

fn list_strategy(path: &str, field: &str) -> ListStrategy {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "readinessGates"
        | "resourceClaims" => ListStrategy::MergeKey("name"),
        "volumeMounts" => ListStrategy::MergeKey("mountPath"),
        "volumeDevices" => ListStrategy::MergeKey("devicePath"),
        "ports" if path.contains("ontainers") => ListStrategy::MergeKey("containerPort"),
        "ports" if path.ends_with("spec") => ListStrategy::MergeKey("port"),
        "conditions" => ListStrategy::MergeKey("type"),
        "ownerReferences" => ListStrategy::MergeKey("uid"),
        "hostAliases" => ListStrategy::MergeKey("ip"),
        "topologySpreadConstraints" => ListStrategy::MergeKey("topologyKey"),
        "finalizers" => ListStrategy::MergePrimitive,
        _ => ListStrategy::Replace,
    }
}

/// Strategic merge patch: maps merge recursively, `null` deletes, keyed lists merge by key,
/// `$patch: replace|delete`, `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>`
/// (order hints are accepted and ignored).
pub(crate) fn strategic_merge(target: &mut Value, patch: &Value, path: &str) {
    let Some(pm) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if pm.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut m = pm.clone();
        m.remove("$patch");
        *target = Value::Object(m);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let tm = target.as_object_mut().expect("object");
    for (k, pv) in pm {
        if k == "$patch" || k.starts_with("$setElementOrder/") || k == "$retainKeys" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(del)) = (tm.get_mut(field), pv.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if pv.is_null() {
            tm.remove(k);
            continue;
        }
        let child_path = format!("{path}.{k}");
        match (tm.get_mut(k), pv) {
            (Some(tv @ Value::Object(_)), Value::Object(_)) => strategic_merge(tv, pv, &child_path),
            (Some(Value::Array(tl)), Value::Array(pl)) => merge_list(tl, pl, path, k),
            (_, Value::Object(_)) => {
                let mut fresh = Value::Object(Map::new());
                strategic_merge(&mut fresh, pv, &child_path);
                tm.insert(k.clone(), fresh);
            }
            (_, Value::Array(pl)) => {
                let mut fresh = vec![];
                merge_list(&mut fresh, pl, path, k);
                tm.insert(k.clone(), Value::Array(fresh));
            }
            _ => {
                tm.insert(k.clone(), pv.clone());
            }
        }
    }
}

fn merge_list(target: &mut Vec<Value>, patch: &[Value], path: &str, field: &str) {
    let child_path = format!("{path}.{field}");
    match list_strategy(path, field) {
        ListStrategy::Replace => {
            *target = patch
                .iter()
                .filter(|v| v.get("$patch").is_none())
                .cloned()
                .collect()
        }
        ListStrategy::MergePrimitive => {
            for v in patch {
                if !target.contains(v) {
                    target.push(v.clone());
                }
            }
        }
        ListStrategy::MergeKey(key) => {
            for pe in patch {
                let directive = pe.get("$patch").and_then(Value::as_str);
                let Some(kv) = pe.get(key) else {
                    if directive != Some("delete") {
                        target.push(pe.clone());
                    }
                    continue;
                };
                let pos = target.iter().position(|te| te.get(key) == Some(kv));
                match (pos, directive) {
                    (Some(i), Some("delete")) => {
                        target.remove(i);
                    }
                    (None, Some("delete")) => {}
                    (Some(i), _) => strategic_merge(&mut target[i], pe, &child_path),
                    (None, _) => {
                        let mut fresh = Value::Object(Map::new());
                        strategic_merge(&mut fresh, pe, &child_path);
                        target.push(fresh);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
               "spec": {"containers": [{"name": "c1", "image": "i1", "env": [{"name": "A", "value": "1"}]},
                                       {"name": "c2", "image": "i2"}]}})
    }

    #[test]
    fn strategic_merge_merges_containers_by_name_and_env_by_name() {
        let p = json!({"spec": {"containers": [{"name": "c1", "image": "new", "env": [{"name": "B", "value": "2"}]}]}});
        let out = apply_patch(PatchKind::Strategic, &pod(), p.to_string().as_bytes()).unwrap();
        assert_eq!(out["spec"]["containers"][0]["image"], "new");
        assert_eq!(
            out["spec"]["containers"][0]["env"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert_eq!(out["spec"]["containers"][1]["image"], "i2");
    }

    #[test]
    fn strategic_merge_honours_delete_directives_and_nulls() {
        let p = json!({"metadata": {"labels": {"a": null}, "$deleteFromPrimitiveList/finalizers": ["x"]},
                       "spec": {"containers": [{"name": "c2", "$patch": "delete"}]}});
        let out = apply_patch(PatchKind::Strategic, &pod(), p.to_string().as_bytes()).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"b": "2"}));
        assert_eq!(out["metadata"]["finalizers"], json!([]));
        assert_eq!(out["spec"]["containers"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn merge_patch_replaces_lists_and_json_patch_applies_operations() {
        let p = json!({"spec": {"containers": [{"name": "only"}]}});
        let out = apply_patch(PatchKind::Merge, &pod(), p.to_string().as_bytes()).unwrap();
        assert_eq!(out["spec"]["containers"], json!([{"name": "only"}]));
        let p = json!([{"op": "replace", "path": "/metadata/labels/a", "value": "9"}, {"op": "remove", "path": "/metadata/labels/b"}]);
        let out = apply_patch(PatchKind::Json, &pod(), p.to_string().as_bytes()).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"a": "9"}));
        let p = json!([{"op": "test", "path": "/metadata/labels/a", "value": "nope"}]);
        assert_eq!(
            apply_patch(PatchKind::Json, &pod(), p.to_string().as_bytes())
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn apply_accepts_yaml_bodies() {
        let out = apply_patch(
            PatchKind::Apply,
            &pod(),
            b"metadata:\n  labels:\n    c: '3'\n",
        )
        .unwrap();
        assert_eq!(
            out["metadata"]["labels"],
            json!({"a": "1", "b": "2", "c": "3"})
        );
    }

    #[test]
    fn a_patch_given_as_a_value_applies_as_its_serialised_bytes_would() {
        let cases = [
            (
                PatchKind::Merge,
                json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"x": 1}}),
            ),
            (
                PatchKind::Strategic,
                json!({"spec": {"containers": [{"name": "c2", "image": "n"}]}}),
            ),
            (
                PatchKind::Apply,
                json!({"metadata": {"labels": {"a": null, "d": "4"}}}),
            ),
            (
                PatchKind::Json,
                json!([{"op": "replace", "path": "/metadata/labels/a", "value": "9"}]),
            ),
        ];
        for (kind, p) in cases {
            let bytes = serde_json::to_vec(&p).unwrap();
            assert_eq!(
                PatchBody::Value(&p).apply(kind, &pod()).unwrap(),
                apply_patch(kind, &pod(), &bytes).unwrap(),
                "{kind:?}"
            );
            assert_eq!(
                PatchBody::Value(&p).apply_object().unwrap(),
                PatchBody::Bytes(&bytes).apply_object().unwrap()
            );
        }
        let bad = json!([{"op": "remove", "path": "/nope"}]);
        assert_eq!(
            PatchBody::Value(&bad)
                .apply(PatchKind::Json, &pod())
                .unwrap_err()
                .code,
            422
        );
    }
}
