//! Server-side field validation, as the real API server does it (F11.3–F11.6): the
//! `fieldValidation` query parameter (Strict, Warn, Ignore; Warn when absent), unknown fields
//! rejected under Strict or dropped (with a warning under Warn), and values of the wrong type
//! rejected: for built-in kinds as a decoding error (400), for custom resources as a schema
//! violation (422). The schemas are the ones `/openapi/v3` serves.

use crate::error::{ApiError, ApiResult, qualified};
use crate::openapi;
use crate::resources::ResourceDef;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The built-in definitions by name, hashed: refs are resolved at every field of every write.
fn definitions() -> &'static HashMap<&'static str, &'static Value> {
    static INDEX: OnceLock<HashMap<&'static str, &'static Value>> = OnceLock::new();
    INDEX.get_or_init(|| {
        openapi::builtin()
            .defs
            .iter()
            .map(|(k, v)| (k.as_str(), v))
            .collect()
    })
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// The `fieldValidation` directive of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    /// From the query parameter; the server's default is Warn (F11.3).
    pub(crate) fn from_query(v: Option<&str>) -> ApiResult<Self> {
        match v.unwrap_or("") {
            "" | "Warn" => Ok(Self::Warn),
            "Strict" => Ok(Self::Strict),
            "Ignore" => Ok(Self::Ignore),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\", got {other:?}"
            ))),
        }
    }
}

/// How the body reached the server: a whole object (create, update), a merge-style patch (its
/// keys mirror the object), or a server-side apply configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyKind {
    Object,
    Patch,
    Apply,
}

/// A value whose JSON type the schema does not allow.
#[derive(Debug, Clone, PartialEq)]
struct TypeMismatch {
    /// `spec.replicas`.
    path: String,
    /// The schema's type (`integer`).
    expected: String,
    /// The Go type a built-in field decodes into (`int32`).
    go_type: String,
    /// The Go struct holding the field (`DeploymentSpec`).
    go_struct: String,
    /// The JSON type found, as Go's decoder names it (`string`, `number`, `bool`, ...).
    found: &'static str,
}

struct Walker<'a> {
    defs: &'a HashMap<&'a str, &'a Value>,
    /// Unknown fields, in strict-decoding form (`spec.ports[0].nodeport`).
    unknown: Vec<String>,
    mismatch: Option<TypeMismatch>,
    /// Required fields left out (checked for custom resources, whose schema is their only
    /// validation; built-in kinds' required fields are their validation code's business).
    missing: Vec<String>,
    /// Directive keys of strategic merge patches (`$patch`, `$setElementOrder/...`) are skipped.
    patch: bool,
    /// Custom resources: `null` is a type error unless `nullable` (built-in decoding accepts it).
    custom: bool,
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Where the walk is, as a chain on the stack: rendered (`spec.ports[0].name`) only when
/// something is reported, so a valid body costs no allocation per field.
#[derive(Clone, Copy)]
enum Path<'p> {
    Root,
    Key(&'p Path<'p>, &'p str),
    Index(&'p Path<'p>, usize),
}

impl Path<'_> {
    fn is_root(&self) -> bool {
        matches!(self, Path::Root)
    }

    fn render(&self) -> String {
        match self {
            Path::Root => String::new(),
            Path::Key(parent, k) if parent.is_root() => (*k).to_string(),
            Path::Key(parent, k) => format!("{}.{k}", parent.render()),
            Path::Index(parent, i) => format!("{}[{i}]", parent.render()),
        }
    }
}

impl<'a> Walker<'a> {
    /// Follows `$ref` and a single-element `allOf` (how OpenAPI v3 attaches descriptions to refs).
    fn resolve(&self, s: &'a Value) -> (&'a Value, Option<&'a str>) {
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            let name = r.rsplit('/').next().unwrap_or(r);
            if let Some(d) = self.defs.get(name) {
                return (d, Some(name));
            }
        }
        if let Some(Value::Array(all)) = s.get("allOf")
            && let [one] = all.as_slice()
        {
            return self.resolve(one);
        }
        (s, None)
    }

    /// The Go type of a built-in field, for the decoding error's wording.
    fn go_type(&self, s: &'a Value) -> String {
        let (r, name) = self.resolve(s);
        if let Some(n) = name {
            let mut parts = n.rsplit('.');
            let kind = parts.next().unwrap_or(n);
            let pkg = parts.next().unwrap_or("v1");
            let _ = r;
            return format!("{pkg}.{kind}");
        }
        match (
            r.get("type").and_then(Value::as_str),
            r.get("format").and_then(Value::as_str),
        ) {
            (Some("integer"), Some("int64")) => "int64".into(),
            (Some("integer"), _) => "int32".into(),
            (Some("number"), _) => "float64".into(),
            (Some("boolean"), _) => "bool".into(),
            (Some("string"), Some("byte")) => "[]uint8".into(),
            (Some("string"), _) => "string".into(),
            (Some("array"), _) => format!(
                "[]{}",
                r.get("items").map(|i| self.go_type(i)).unwrap_or_default()
            ),
            (Some("object"), _) if r.get("additionalProperties").is_some() => format!(
                "map[string]{}",
                r.get("additionalProperties")
                    .map(|i| self.go_type(i))
                    .unwrap_or_default()
            ),
            _ => "interface {}".into(),
        }
    }

    fn mismatch(&mut self, s: &'a Value, expected: &str, path: Path, go_struct: &str, v: &Value) {
        if self.mismatch.is_none() {
            self.mismatch = Some(TypeMismatch {
                path: path.render(),
                expected: expected.to_string(),
                go_type: self.go_type(s),
                go_struct: go_struct.to_string(),
                found: json_type(v),
            });
        }
    }

    /// Checks `v` against `schema` at `path`; with `prune`, drops unknown fields from `v`.
    fn walk(&mut self, schema: &'a Value, v: &mut Value, path: Path, go_struct: &str, prune: bool) {
        let (s, name) = self.resolve(schema);
        let go_struct = name
            .map(|n| n.rsplit('.').next().unwrap_or(n))
            .unwrap_or(go_struct);
        if v.is_null() {
            if self.custom
                && !self.patch
                && s.get("nullable") != Some(&json!(true))
                && let Some(t) = s.get("type").and_then(Value::as_str)
            {
                self.mismatch(schema, t, path, go_struct, v);
            }
            return;
        }
        if s.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
            if !matches!(v, Value::Number(_) | Value::String(_)) {
                self.mismatch(schema, "integer-or-string", path, go_struct, v);
            }
            return;
        }
        let ty = s.get("type").and_then(Value::as_str).or_else(|| {
            (s.get("properties").is_some() || s.get("additionalProperties").is_some())
                .then_some("object")
        });
        let ok = match (ty, &*v) {
            (None, _) => true,
            (Some("object"), Value::Object(_)) | (Some("array"), Value::Array(_)) => true,
            (Some("string"), Value::String(_)) | (Some("boolean"), Value::Bool(_)) => true,
            (Some("number"), Value::Number(_)) => true,
            (Some("integer"), Value::Number(n)) => n.is_i64() || n.is_u64(),
            _ => false,
        };
        if !ok {
            self.mismatch(schema, ty.unwrap_or(""), path, go_struct, v);
            return;
        }
        match v {
            Value::Array(items) => {
                if let Some(item) = s.get("items") {
                    for (i, x) in items.iter_mut().enumerate() {
                        self.walk(item, x, Path::Index(&path, i), go_struct, prune);
                    }
                }
            }
            Value::Object(map) => {
                if s.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true))
                    && s.get("properties").is_none()
                {
                    return;
                }
                let props = s.get("properties").and_then(Value::as_object);
                let extra = s.get("additionalProperties").filter(|a| a.is_object());
                if props.is_none() && extra.is_none() {
                    // An object without a declared shape (FieldsV1, RawExtension): anything goes.
                    return;
                }
                let preserve = s.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
                if self.custom && !self.patch {
                    for r in s
                        .get("required")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(r) = r.as_str().filter(|r| !map.contains_key(*r)) {
                            self.missing.push(Path::Key(&path, r).render());
                        }
                    }
                }
                let mut drop = vec![];
                for (k, x) in map.iter_mut() {
                    if self.patch && k.starts_with('$') {
                        continue;
                    }
                    let child = Path::Key(&path, k);
                    // A custom resource's root: apiVersion and kind are always allowed and
                    // metadata is ObjectMeta, whatever the CRD's schema says of them.
                    if self.custom && path.is_root() {
                        match k.as_str() {
                            "apiVersion" | "kind" => continue,
                            "metadata" => {
                                if let Some(meta) = self.defs.get(OBJECT_META) {
                                    self.walk(meta, x, child, go_struct, prune);
                                }
                                continue;
                            }
                            _ => {}
                        }
                    }
                    match props.and_then(|p| p.get(k)).or(extra) {
                        Some(sub) => self.walk(sub, x, child, go_struct, prune),
                        None if preserve => {}
                        None => {
                            self.unknown.push(child.render());
                            drop.push(k.clone());
                        }
                    }
                }
                if prune {
                    for k in drop {
                        map.remove(&k);
                    }
                }
            }
            _ => {}
        }
    }
}

/// What validation decided: the object to store (unknown fields dropped unless Strict) and
/// the warnings to send (`Warning` headers).
#[derive(Debug)]
pub(crate) struct Admitted {
    pub object: Value,
    pub warnings: Vec<String>,
    /// Whether unknown fields were dropped from the body.
    pub pruned: bool,
}

/// Validates a request body for `def` in `version` under `directive`.
pub(crate) fn admit(
    def: &ResourceDef,
    version: &str,
    directive: FieldValidation,
    body: BodyKind,
    mut obj: Value,
) -> ApiResult<Admitted> {
    let Some((schema, _)) = openapi::schema_of(def, version) else {
        return Ok(Admitted {
            object: obj,
            warnings: vec![],
            pruned: false,
        });
    };
    let mut w = Walker {
        defs: definitions(),
        unknown: vec![],
        mismatch: None,
        missing: vec![],
        patch: body != BodyKind::Object,
        custom: def.custom,
    };
    // Under Strict nothing is dropped: the request fails instead.
    w.walk(
        schema,
        &mut obj,
        Path::Root,
        &def.kind,
        directive != FieldValidation::Strict,
    );
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or(&def.kind)
        .to_string();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    // Decoding comes first (built-in type errors, unknown fields), then the custom resource's
    // schema validation (type errors, required fields), as in the real server.
    if let Some(m) = w.mismatch.as_ref().filter(|_| !def.custom) {
        return Err(type_error(def, version, &kind, &name, body, m));
    }
    if body == BodyKind::Apply && !w.unknown.is_empty() {
        return Err(apply_unknown_field(
            def,
            version,
            &kind,
            &obj,
            &w.unknown[0],
        ));
    }
    if directive == FieldValidation::Strict && !w.unknown.is_empty() {
        let list = w
            .unknown
            .iter()
            .map(|p| format!("unknown field {p:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let msg = format!("strict decoding error: {list}");
        return Err(ApiError::bad_request(if body == BodyKind::Object {
            format!(
                "{kind} in version {version:?} cannot be handled as a {}: {msg}",
                def.kind
            )
        } else {
            msg
        }));
    }
    if let Some(m) = &w.mismatch {
        return Err(type_error(def, version, &kind, &name, body, m));
    }
    if !w.missing.is_empty() {
        return Err(required_error(def, &name, &w.missing));
    }
    let warnings = if directive == FieldValidation::Warn {
        w.unknown
            .iter()
            .map(|p| format!("unknown field {p:?}"))
            .collect()
    } else {
        vec![]
    };
    Ok(Admitted {
        pruned: !w.unknown.is_empty(),
        object: obj,
        warnings,
    })
}

/// A value of the wrong type: Go's decoding error for built-in kinds (F11.4), a schema
/// violation for custom resources (F11.5).
fn type_error(
    def: &ResourceDef,
    version: &str,
    kind: &str,
    name: &str,
    body: BodyKind,
    m: &TypeMismatch,
) -> ApiError {
    if def.custom {
        let detail = format!(
            "Invalid value: \"{}\": {} in body must be of type {}: \"{}\"",
            m.found, m.path, m.expected, m.found
        );
        let mut e = ApiError::new(
            422,
            "Invalid",
            format!(
                "{} {name:?} is invalid: {}: {detail}",
                qualified(&def.group, &def.kind),
                m.path
            ),
        );
        e.details = Some(json!({
            "name": name, "group": def.group, "kind": def.kind,
            "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": m.path}],
        }));
        return e;
    }
    let go = format!(
        "json: cannot unmarshal {} into Go struct field {}.{} of type {}",
        m.found, m.go_struct, m.path, m.go_type
    );
    ApiError::bad_request(if body == BodyKind::Object {
        format!(
            "{kind} in version {version:?} cannot be handled as a {}: {go}",
            def.kind
        )
    } else {
        go
    })
}

/// Required fields of a custom resource left out: 422, one cause per field.
fn required_error(def: &ResourceDef, name: &str, missing: &[String]) -> ApiError {
    let errs: Vec<String> = missing
        .iter()
        .map(|p| format!("{p}: Required value"))
        .collect();
    let list = if errs.len() == 1 {
        errs[0].clone()
    } else {
        format!("[{}]", errs.join(", "))
    };
    let mut e = ApiError::new(
        422,
        "Invalid",
        format!(
            "{} {name:?} is invalid: {list}",
            qualified(&def.group, &def.kind)
        ),
    );
    let causes: Vec<Value> = missing
        .iter()
        .map(|p| json!({"reason": "FieldValueRequired", "message": "Required value", "field": p}))
        .collect();
    e.details = Some(json!({"name": name, "group": def.group, "kind": def.kind, "causes": causes}));
    e
}

/// Server-side apply of a field the schema does not declare: a plain error, which the real
/// server answers with 500 and no reason (F11.6).
fn apply_unknown_field(
    def: &ResourceDef,
    version: &str,
    kind: &str,
    obj: &Value,
    path: &str,
) -> ApiError {
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let gv = format!("{}/{version}", def.group);
    ApiError::new(
        500,
        "",
        format!(
            "failed to create typed patch object ({ns}/{name}; {gv}, Kind={kind}): .{}: field not declared in schema",
            path
        ),
    )
}

/// The `Warning` header value for one warning: code 299, agent `-`, the text quoted (F11.3).
pub(crate) fn warning_header(text: &str) -> String {
    format!("299 - {}", serde_json::to_string(text).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Resources;

    /// A CRD with a structural schema: unknown fields are not preserved.
    fn strict_crd() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "sandboxes.agents.x-k8s.io"},
            "spec": {"group": "agents.x-k8s.io", "scope": "Namespaced",
                "names": {"plural": "sandboxes", "singular": "sandbox", "kind": "Sandbox", "listKind": "SandboxList"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                        "spec": {"type": "object", "properties": {
                            "podTemplate": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                            "replicas": {"type": "integer"}}, "required": ["podTemplate"]}}}}}]}})
    }

    fn def(group: &str, plural: &str) -> ResourceDef {
        let mut r = Resources::builtin();
        r.register_crd(&strict_crd());
        r.get_gr(group, plural).unwrap().clone()
    }

    fn deployment(spec_extra: Value) -> Value {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]}}}});
        for (k, v) in spec_extra.as_object().unwrap() {
            d["spec"][k] = v.clone();
        }
        d
    }

    #[test]
    fn a_valid_deployment_passes_every_directive() {
        let d = def("apps", "deployments");
        for dir in [
            FieldValidation::Strict,
            FieldValidation::Warn,
            FieldValidation::Ignore,
        ] {
            let a = admit(&d, "v1", dir, BodyKind::Object, deployment(json!({}))).unwrap();
            assert!(a.warnings.is_empty());
            assert_eq!(a.object, deployment(json!({})));
        }
    }

    #[test]
    fn strict_rejects_unknown_fields_with_the_decoding_error() {
        let d = def("apps", "deployments");
        let e = admit(
            &d,
            "v1",
            FieldValidation::Strict,
            BodyKind::Object,
            deployment(json!({"foo": 1, "template": {"spec": {"containers": [{"name": "c", "image": "i", "bogus": true}]}}})),
        )
        .unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
        assert_eq!(
            e.message,
            "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.foo\", unknown field \"spec.template.spec.containers[0].bogus\""
        );
    }

    #[test]
    fn warn_drops_unknown_fields_and_says_so_and_ignore_only_drops() {
        let d = def("apps", "deployments");
        let a = admit(
            &d,
            "v1",
            FieldValidation::Warn,
            BodyKind::Object,
            deployment(json!({"foo": 1})),
        )
        .unwrap();
        assert_eq!(a.warnings, vec!["unknown field \"spec.foo\"".to_string()]);
        assert!(a.object["spec"].get("foo").is_none());
        assert_eq!(
            warning_header(&a.warnings[0]),
            "299 - \"unknown field \\\"spec.foo\\\"\""
        );
        let a = admit(
            &d,
            "v1",
            FieldValidation::Ignore,
            BodyKind::Object,
            deployment(json!({"foo": 1})),
        )
        .unwrap();
        assert!(a.warnings.is_empty() && a.object["spec"].get("foo").is_none());
    }

    #[test]
    fn a_wrong_type_in_a_builtin_kind_is_a_decoding_error_naming_the_go_field() {
        let d = def("apps", "deployments");
        let e = admit(
            &d,
            "v1",
            FieldValidation::Ignore,
            BodyKind::Object,
            deployment(json!({"replicas": "three"})),
        )
        .unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"
        );
        let cm = def("", "configmaps");
        let e = admit(&cm, "v1", FieldValidation::Strict, BodyKind::Object,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": 5}})).unwrap_err();
        assert_eq!(
            e.message,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data.k of type string"
        );
    }

    #[test]
    fn a_custom_resource_is_checked_against_its_crd_schema() {
        let d = def("agents.x-k8s.io", "sandboxes");
        let sb = |spec: Value| json!({"apiVersion": "agents.x-k8s.io/v1alpha1", "kind": "Sandbox", "metadata": {"name": "s"}, "spec": spec});
        let ok =
            sb(json!({"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}));
        admit(
            &d,
            "v1alpha1",
            FieldValidation::Strict,
            BodyKind::Object,
            ok,
        )
        .unwrap();
        let missing = admit(
            &d,
            "v1alpha1",
            FieldValidation::Ignore,
            BodyKind::Object,
            sb(json!({})),
        );
        assert_eq!(
            missing.unwrap_err().message,
            "Sandbox.agents.x-k8s.io \"s\" is invalid: spec.podTemplate: Required value"
        );
        let e = admit(
            &d,
            "v1alpha1",
            FieldValidation::Strict,
            BodyKind::Object,
            sb(json!({"foo": 1})),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Sandbox in version \"v1alpha1\" cannot be handled as a Sandbox: strict decoding error: unknown field \"spec.foo\""
        );
        let e = admit(
            &d,
            "v1alpha1",
            FieldValidation::Strict,
            BodyKind::Object,
            sb(json!({"podTemplate": "x"})),
        )
        .unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
        assert_eq!(
            e.message,
            "Sandbox.agents.x-k8s.io \"s\" is invalid: spec.podTemplate: Invalid value: \"string\": spec.podTemplate in body must be of type object: \"string\""
        );
        assert_eq!(e.details.unwrap()["causes"][0]["field"], "spec.podTemplate");
    }

    #[test]
    fn server_side_apply_of_an_undeclared_field_fails_like_the_real_server() {
        let d = def("", "configmaps");
        let e = admit(&d, "v1", FieldValidation::Strict, BodyKind::Apply,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "bogus": 1})).unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (500, ""));
        assert_eq!(
            e.message,
            "failed to create typed patch object (ns/c; /v1, Kind=ConfigMap): .bogus: field not declared in schema"
        );
    }

    #[test]
    fn patch_directives_are_not_fields() {
        let d = def("apps", "deployments");
        let patch = json!({"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "c"}], "containers": [{"name": "c", "image": "j"}]}}}});
        admit(&d, "v1", FieldValidation::Strict, BodyKind::Patch, patch).unwrap();
        let e = admit(
            &d,
            "v1",
            FieldValidation::Strict,
            BodyKind::Patch,
            json!({"spec": {"foo": null}}),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "strict decoding error: unknown field \"spec.foo\""
        );
    }

    #[test]
    fn an_unknown_directive_is_refused() {
        assert!(FieldValidation::from_query(Some("strict")).is_err());
        assert_eq!(
            FieldValidation::from_query(None).unwrap(),
            FieldValidation::Warn
        );
    }
}
