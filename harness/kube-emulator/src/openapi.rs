//! OpenAPI documents of the served types: `/openapi/v2` (one Swagger 2.0 document, JSON) and
//! `/openapi/v3` (an index and one OpenAPI 3.0 document per group-version). Built-in kinds get
//! k8s-openapi's schemas (its `schemars` feature carries the upstream definitions), custom
//! resources the `openAPIV3Schema` of their CRD version, named as the real server names them.
//! kubectl and helm read the PATCH operations' `fieldValidation` parameter to decide that the
//! server validates (F11.2), and `kubectl explain` reads the schemas by their
//! `x-kubernetes-group-version-kind`.

use crate::backend::Backend;
use crate::error::{ApiError, ApiResult};
use crate::pb::Writer;
use crate::resources::{ResourceDef, Resources};
use crate::response::{accepts_json, json_response};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

const V3_PREFIX: &str = "#/components/schemas/";

/// The definitions of the built-in types, keyed by their upstream names
/// (`io.k8s.api.core.v1.Pod`), with refs in OpenAPI v3 form.
pub(crate) struct Builtin {
    pub defs: Map<String, Value>,
    /// (group, version, kind) → definition name.
    pub by_gvk: BTreeMap<(String, String, String), String>,
}

fn add<T: JsonSchema + k8s_openapi::Resource>(
    g: &mut schemars::SchemaGenerator,
    by_gvk: &mut BTreeMap<(String, String, String), String>,
) {
    g.subschema_for::<T>();
    by_gvk.insert(
        (T::GROUP.into(), T::VERSION.into(), T::KIND.into()),
        T::schema_name().into_owned(),
    );
}

/// The built-in schemas, generated once.
pub(crate) fn builtin() -> &'static Builtin {
    static B: OnceLock<Builtin> = OnceLock::new();
    B.get_or_init(|| {
        use k8s_openapi::api::{
            apps::v1 as apps, authorization::v1 as authz, batch::v1 as batch,
            coordination::v1 as coord, core::v1 as core, events::v1 as events,
            networking::v1 as net, policy::v1 as policy, rbac::v1 as rbac,
        };
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
        let mut g = SchemaSettings::openapi3().into_generator();
        let mut by_gvk = BTreeMap::new();
        let m = &mut by_gvk;
        // Every kind the emulator serves or may serve; a document lists only the served ones.
        add::<core::Namespace>(&mut g, m);
        add::<core::Pod>(&mut g, m);
        add::<core::PersistentVolumeClaim>(&mut g, m);
        add::<core::Service>(&mut g, m);
        add::<core::Endpoints>(&mut g, m);
        add::<core::Secret>(&mut g, m);
        add::<core::ConfigMap>(&mut g, m);
        add::<core::ServiceAccount>(&mut g, m);
        add::<core::Event>(&mut g, m);
        add::<core::Node>(&mut g, m);
        add::<apps::StatefulSet>(&mut g, m);
        add::<apps::Deployment>(&mut g, m);
        add::<apps::ReplicaSet>(&mut g, m);
        add::<apps::DaemonSet>(&mut g, m);
        add::<batch::Job>(&mut g, m);
        add::<batch::CronJob>(&mut g, m);
        add::<net::NetworkPolicy>(&mut g, m);
        add::<net::Ingress>(&mut g, m);
        add::<rbac::Role>(&mut g, m);
        add::<rbac::RoleBinding>(&mut g, m);
        add::<rbac::ClusterRole>(&mut g, m);
        add::<rbac::ClusterRoleBinding>(&mut g, m);
        add::<coord::Lease>(&mut g, m);
        add::<events::Event>(&mut g, m);
        add::<authz::SelfSubjectAccessReview>(&mut g, m);
        add::<authz::SubjectAccessReview>(&mut g, m);
        add::<k8s_openapi::api::authentication::v1::TokenReview>(&mut g, m);
        add::<policy::PodDisruptionBudget>(&mut g, m);
        add::<apiext::CustomResourceDefinition>(&mut g, m);
        g.subschema_for::<k8s_openapi::api::autoscaling::v1::Scale>();
        g.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>();
        g.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions>();
        let mut defs = g.take_definitions(true);
        for ((group, version, kind), name) in &by_gvk {
            if let Some(Value::Object(d)) = defs.get_mut(name) {
                d.insert(
                    "x-kubernetes-group-version-kind".into(),
                    json!([{"group": group, "version": version, "kind": kind}]),
                );
                // k8s-openapi marks `metadata` required because its Rust field is not optional;
                // the real schemas do not (a body without metadata is a validation error, not a
                // schema one).
                if let Some(Value::Array(req)) = d.get_mut("required") {
                    req.retain(|r| r != "metadata");
                    if req.is_empty() {
                        d.remove("required");
                    }
                }
            }
        }
        // apiextensions' JSON holds any value (a CRD's `default`, `example`, `enum` items);
        // k8s-openapi types it as an object, the upstream schema does not type it.
        if let Some(Value::Object(d)) =
            defs.get_mut("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON")
        {
            d.remove("type");
        }
        Builtin { defs, by_gvk }
    })
}

/// The definition name the real server gives a custom resource's schema: the group's labels
/// reversed, then version and kind (`io.x-k8s.agents.v1alpha1.Sandbox`).
pub(crate) fn custom_schema_name(group: &str, version: &str, kind: &str) -> String {
    let rev: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", rev.join("."))
}

/// A CRD version's schema as a definition: `metadata` points at ObjectMeta, apiVersion and kind
/// are strings, and the GVK extension names the kind.
fn custom_definition(def: &ResourceDef, version: &str) -> Value {
    let mut schema = def
        .version(version)
        .and_then(|v| v.schema.clone())
        .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    if let Value::Object(s) = &mut schema {
        let props = s
            .entry("properties")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(props) = props {
            props.insert(
                "apiVersion".into(),
                json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
            );
            props.insert(
                "kind".into(),
                json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
            );
            props.insert(
                "metadata".into(),
                json!({"allOf": [{"$ref": format!("{V3_PREFIX}io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")}],
                       "description": "Standard object's metadata."}),
            );
        }
        s.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": def.group, "version": version, "kind": def.kind}]),
        );
    }
    schema
}

/// The schema that validates `def` in `version`, borrowed (writes are frequent and CRD
/// schemas large), and the definitions its refs resolve against. A custom resource's schema
/// is its CRD's as written: the validator treats its root `apiVersion`, `kind` and `metadata`
/// as the real server does.
pub(crate) fn schema_of<'a>(
    def: &'a ResourceDef,
    version: &str,
) -> Option<(&'a Value, &'static Map<String, Value>)> {
    let b = builtin();
    if def.custom {
        return Some((def.version(version)?.schema.as_ref()?, &b.defs));
    }
    let name = b
        .by_gvk
        .get(&(def.group.clone(), version.to_string(), def.kind.clone()))?;
    Some((b.defs.get(name)?, &b.defs))
}

/// Adds to `out` every definition `v` refers to, transitively.
fn collect_refs(v: &Value, defs: &Map<String, Value>, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "$ref"
                    && let Some(name) = x.as_str().and_then(|r| r.strip_prefix(V3_PREFIX))
                {
                    if out.insert(name.to_string())
                        && let Some(d) = defs.get(name)
                    {
                        collect_refs(d, defs, out);
                    }
                } else {
                    collect_refs(x, defs, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, defs, out)),
        _ => {}
    }
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn param(name: &str, location: &str, description: &str) -> Value {
    json!({"name": name, "in": location, "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn query_params(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|n| {
            let d = if *n == "fieldValidation" {
                "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict"
            } else {
                ""
            };
            param(n, "query", d)
        })
        .collect()
}

/// The paths of one resource, with the operations a client checks: each carries the kind's GVK
/// and its action, and the writes take `fieldValidation`.
fn resource_paths(
    def: &ResourceDef,
    version: &str,
    schema_name: &str,
    paths: &mut Map<String, Value>,
) {
    let base = format!("/{}", gv_path(&def.group, version));
    let coll = if def.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", def.plural)
    } else {
        format!("{base}/{}", def.plural)
    };
    let gvk = json!({"group": def.group, "version": version, "kind": def.kind});
    let body_ref = json!({"$ref": format!("{V3_PREFIX}{schema_name}")});
    let content =
        |s: &Value| json!({"application/json": {"schema": s}, "application/yaml": {"schema": s}});
    let op = |action: &str, id: &str, params: Vec<Value>, body: bool| {
        let mut o = json!({
            "operationId": format!("{id}{}", def.kind),
            "parameters": params,
            "responses": {"200": {"description": "OK", "content": content(&body_ref)}},
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        });
        if body {
            let mut rb = json!({"required": true, "content": content(&body_ref)});
            if action == "patch" {
                let patch = json!({"$ref": format!("{V3_PREFIX}io.k8s.apimachinery.pkg.apis.meta.v1.Patch")});
                rb = json!({"required": true, "content": {
                    "application/apply-patch+yaml": {"schema": patch},
                    "application/json-patch+json": {"schema": patch},
                    "application/merge-patch+json": {"schema": patch},
                    "application/strategic-merge-patch+json": {"schema": patch}}});
            }
            o["requestBody"] = rb;
        }
        o
    };
    let mut scope = vec![];
    if def.namespaced {
        scope.push(param(
            "namespace",
            "path",
            "object name and auth scope, such as for teams and projects",
        ));
    }
    let writes = ["dryRun", "fieldManager", "fieldValidation"];
    let mut list = json!({
        "get": op("list", "list", query_params(&["labelSelector", "fieldSelector", "resourceVersion", "watch", "limit", "continue"]), false),
        "post": op("post", "create", query_params(&writes), true),
        "delete": op("deletecollection", "deleteCollection", query_params(&["labelSelector", "fieldSelector", "gracePeriodSeconds", "propagationPolicy"]), false),
    });
    list["parameters"] = json!(scope);
    paths.insert(coll.clone(), list);
    let mut named_scope = vec![param("name", "path", &format!("name of the {}", def.kind))];
    named_scope.extend(scope.iter().cloned());
    let mut patch_params = query_params(&writes);
    patch_params.extend(query_params(&["force"]));
    let mut one = json!({
        "get": op("get", "read", vec![], false),
        "put": op("put", "replace", query_params(&writes), true),
        "patch": op("patch", "patch", patch_params.clone(), true),
        "delete": op("delete", "delete", query_params(&["gracePeriodSeconds", "propagationPolicy", "dryRun"]), false),
    });
    one["parameters"] = json!(named_scope);
    paths.insert(format!("{coll}/{{name}}"), one);
    if def.has_status(version) {
        let mut st = json!({
            "get": op("get", "readStatus", vec![], false),
            "put": op("put", "replaceStatus", query_params(&writes), true),
            "patch": op("patch", "patchStatus", patch_params, true),
        });
        st["parameters"] = json!(named_scope);
        paths.insert(format!("{coll}/{{name}}/status"), st);
    }
}

/// The OpenAPI v3 document of one group-version, or None when nothing is served there.
pub(crate) fn v3_group_version(r: &Resources, group: &str, version: &str) -> Option<Value> {
    let defs_in = r.in_group_version(group, version);
    if defs_in.is_empty() {
        return None;
    }
    let b = builtin();
    let mut schemas = Map::new();
    let mut paths = Map::new();
    let mut refs = BTreeSet::new();
    for d in defs_in {
        let (name, schema) = if d.custom {
            (
                custom_schema_name(&d.group, version, &d.kind),
                custom_definition(d, version),
            )
        } else {
            let Some(name) = b
                .by_gvk
                .get(&(d.group.clone(), version.to_string(), d.kind.clone()))
            else {
                continue;
            };
            let Some(s) = b.defs.get(name) else { continue };
            (name.clone(), s.clone())
        };
        collect_refs(&schema, &b.defs, &mut refs);
        resource_paths(d, version, &name, &mut paths);
        schemas.insert(name, schema);
    }
    for base in [
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
        "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    ] {
        refs.insert(base.to_string());
    }
    // The closure of the base definitions too (Status refers to ListMeta and StatusDetails).
    for base in refs.clone() {
        if let Some(d) = b.defs.get(&base) {
            collect_refs(d, &b.defs, &mut refs);
        }
    }
    for name in refs {
        if let Some(d) = b.defs.get(&name) {
            schemas.entry(name).or_insert_with(|| d.clone());
        } else if name.ends_with(".Patch") {
            schemas.entry(name).or_insert_with(|| {
                json!({"type": "object", "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body."})
            });
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// `/openapi/v3`: where each group-version's document is. The hash changes with the served
/// resources, so clients' caches follow CRD installs.
pub(crate) fn v3_index(r: &Resources) -> Value {
    let mut paths = Map::new();
    for (group, versions) in r.groups() {
        for v in versions {
            let p = gv_path(&group, &v);
            let hash = v3_group_version(r, &group, &v)
                .map(|d| fnv(d.to_string().as_bytes()))
                .unwrap_or(0);
            paths.insert(
                p.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash:016X}")}),
            );
        }
    }
    json!({"paths": paths})
}

/// FNV-1a, for the documents' cache hashes.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// Rewrites v3 refs and their `allOf` wrappers into Swagger 2.0 form.
fn to_v2(v: &mut Value) {
    match v {
        Value::Object(m) => {
            // v2 documents put a ref's description beside it; v3 wraps the ref in `allOf`.
            if let Some(Value::Array(all)) = m.get("allOf")
                && let [one] = all.as_slice()
                && let Some(r) = one.get("$ref").cloned()
            {
                m.remove("allOf");
                m.insert("$ref".into(), r);
            }
            if let Some(Value::String(r)) = m.get_mut("$ref")
                && let Some(name) = r.strip_prefix(V3_PREFIX)
            {
                *r = format!("#/definitions/{name}");
            }
            m.remove("nullable");
            m.values_mut().for_each(to_v2);
        }
        Value::Array(a) => a.iter_mut().for_each(to_v2),
        _ => {}
    }
}

/// `/openapi/v2`: one Swagger 2.0 document with every served kind's definition (paths are
/// left out: clients read the definitions and their GVK extensions).
pub(crate) fn v2(r: &Resources) -> Value {
    let mut definitions = Map::new();
    for (group, versions) in r.groups() {
        for v in versions {
            if let Some(doc) = v3_group_version(r, &group, &v)
                && let Some(Value::Object(s)) = doc.pointer("/components/schemas").cloned()
            {
                definitions.extend(s);
            }
        }
    }
    let mut doc = json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": {},
        "definitions": definitions,
    });
    to_v2(&mut doc);
    doc
}

/// The media type client-go asks `/openapi/v2` in (F11.2): gnostic's `openapi.v2.Document`.
const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// An `Any` of gnostic: the value as YAML text (JSON is YAML).
fn any(v: &Value) -> Writer {
    Writer::default().str(2, &v.to_string())
}

/// A Swagger 2.0 schema as gnostic's `openapi.v2.Schema` (field numbers of gnostic's
/// `OpenAPIv2.proto`): what kubectl's v2 validation and `explain` read.
fn v2_schema(s: &Value) -> Writer {
    let mut w = Writer::default();
    let Some(m) = s.as_object() else {
        return w;
    };
    let text = |k: &str| m.get(k).and_then(Value::as_str);
    if let Some(r) = text("$ref") {
        w = w.str(1, r);
    }
    if let Some(f) = text("format") {
        w = w.str(2, f);
    }
    if let Some(t) = text("title") {
        w = w.str(3, t);
    }
    if let Some(d) = text("description") {
        w = w.str(4, d);
    }
    if let Some(d) = m.get("default") {
        w = w.msg(5, any(d));
    }
    if let Some(x) = m.get("maximum").and_then(Value::as_f64) {
        w = w.double(7, x);
    }
    if let Some(x) = m.get("minimum").and_then(Value::as_f64) {
        w = w.double(9, x);
    }
    if let Some(p) = text("pattern") {
        w = w.str(13, p);
    }
    for r in m
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(r) = r.as_str() {
            w = w.str(19, r);
        }
    }
    for e in m
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        w = w.msg(20, any(e));
    }
    match m.get("additionalProperties") {
        Some(Value::Bool(b)) => w = w.msg(21, Writer::default().int(2, u64::from(*b))),
        Some(a @ Value::Object(_)) => w = w.msg(21, Writer::default().msg(1, v2_schema(a))),
        _ => {}
    }
    if let Some(t) = text("type") {
        w = w.msg(22, Writer::default().str(1, t));
    }
    if let Some(i) = m.get("items") {
        w = w.msg(23, Writer::default().msg(1, v2_schema(i)));
    }
    for a in m
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        w = w.msg(24, v2_schema(a));
    }
    if let Some(Value::Object(props)) = m.get("properties") {
        let mut p = Writer::default();
        for (name, sub) in props {
            p = p.msg(1, Writer::default().str(1, name).msg(2, v2_schema(sub)));
        }
        w = w.msg(25, p);
    }
    for (k, v) in m.iter().filter(|(k, _)| k.starts_with("x-")) {
        w = w.msg(31, Writer::default().str(1, k).msg(2, any(v)));
    }
    w
}

/// The v2 document as gnostic's `openapi.v2.Document`: swagger = 1, info = 2 (title = 1,
/// version = 2), paths = 8, definitions = 9 (named schemas).
pub(crate) fn v2_protobuf(doc: &Value) -> Vec<u8> {
    let mut defs = Writer::default();
    for (name, s) in doc["definitions"].as_object().into_iter().flatten() {
        defs = defs.msg(1, Writer::default().str(1, name).msg(2, v2_schema(s)));
    }
    Writer::default()
        .str(1, "2.0")
        .msg(2, Writer::default().str(1, "Kubernetes").str(2, "v1.33.0"))
        .msg(8, Writer::default())
        .msg(9, defs)
        .0
}

/// `GET /openapi/...`: the v2 document, the v3 index, or one group-version's v3 document.
/// v2 comes as protobuf to a client that asks for it (client-go always does, F11.2), JSON
/// otherwise; v3 is JSON, and a client that accepts no JSON gets 406.
pub(crate) fn serve(cluster: &Backend, rest: &[&str], headers: &HeaderMap) -> ApiResult<Response> {
    let wants_pb = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| {
            a.split(',')
                .next()
                .unwrap_or("")
                .trim()
                .starts_with(V2_PROTOBUF)
        });
    if rest == ["v2"] && (wants_pb || !accepts_json(headers)) {
        if !headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains(V2_PROTOBUF))
        {
            return Err(ApiError::new(
                406,
                "NotAcceptable",
                "only the following media types are accepted: application/json, application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
            ));
        }
        let body = cluster.read(|s| v2_protobuf(&v2(&s.resources)));
        // The answer names the type without the `@`, which Go's media-type parser refuses.
        return Ok((
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            )],
            body,
        )
            .into_response());
    }
    if !accepts_json(headers) {
        return Err(ApiError::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json",
        ));
    }
    let doc = cluster.read(|s| match rest {
        ["v2"] => Some(v2(&s.resources)),
        ["v3"] => Some(v3_index(&s.resources)),
        ["v3", "api", v] => v3_group_version(&s.resources, "", v),
        ["v3", "apis", g, v] => v3_group_version(&s.resources, g, v),
        _ => None,
    });
    match doc {
        Some(d) => Ok(json_response(StatusCode::OK, &d)),
        None => Err(ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_sandbox_crd() -> Resources {
        let mut r = Resources::builtin();
        let crd: Value = serde_saphyr::from_str(include_str!(
            "../../../fixtures/crds/sandboxes.agents.x-k8s.io.yaml"
        ))
        .unwrap();
        r.register_crd(&crd);
        r
    }

    /// What kubectl's field-validation check reads (F11.2): a PATCH operation for the GVK
    /// with a `fieldValidation` query parameter.
    fn patch_supports_field_validation(
        doc: &Value,
        group: &str,
        version: &str,
        kind: &str,
    ) -> bool {
        doc["paths"].as_object().unwrap().values().any(|p| {
            let op = &p["patch"];
            op["x-kubernetes-group-version-kind"]
                == json!({"group": group, "version": version, "kind": kind})
                && op["parameters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|q| q["name"] == "fieldValidation" && q["in"] == "query")
        })
    }

    #[test]
    fn the_v3_index_lists_every_served_group_version() {
        let idx = v3_index(&with_sandbox_crd());
        for p in [
            "api/v1",
            "apis/apps/v1",
            "apis/agents.x-k8s.io/v1alpha1",
            "apis/agents.x-k8s.io/v1beta1",
        ] {
            let url = idx["paths"][p]["serverRelativeURL"].as_str().unwrap();
            assert!(url.starts_with(&format!("/openapi/v3/{p}?hash=")), "{url}");
        }
    }

    #[test]
    fn a_group_version_document_advertises_field_validation_for_its_kinds() {
        let r = with_sandbox_crd();
        let apps = v3_group_version(&r, "apps", "v1").unwrap();
        assert!(patch_supports_field_validation(
            &apps,
            "apps",
            "v1",
            "Deployment"
        ));
        let schema = &apps["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            schema["x-kubernetes-group-version-kind"],
            json!([{"group": "apps", "version": "v1", "kind": "Deployment"}])
        );
        // Refs resolve inside the document.
        let mut refs = BTreeSet::new();
        collect_refs(&apps, &builtin().defs, &mut refs);
        for name in refs {
            assert!(
                apps["components"]["schemas"].get(&name).is_some(),
                "{name} missing"
            );
        }
        let sb = v3_group_version(&r, "agents.x-k8s.io", "v1alpha1").unwrap();
        assert!(patch_supports_field_validation(
            &sb,
            "agents.x-k8s.io",
            "v1alpha1",
            "Sandbox"
        ));
        let s = &sb["components"]["schemas"]["io.x-k8s.agents.v1alpha1.Sandbox"];
        assert_eq!(s["properties"]["spec"]["type"], "object");
        assert!(
            sb["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
                .is_object()
        );
        assert!(v3_group_version(&r, "nope", "v1").is_none());
    }

    #[test]
    fn the_v2_protobuf_document_carries_the_definitions_and_their_extensions() {
        let doc = v2(&Resources::builtin());
        let pb = v2_protobuf(&doc);
        // Document.swagger = "2.0" comes first.
        assert_eq!(&pb[..5], b"\x0a\x032.0");
        let find = |needle: &[u8]| pb.windows(needle.len()).any(|w| w == needle);
        assert!(find(b"io.k8s.api.apps.v1.Deployment"));
        assert!(find(b"#/definitions/io.k8s.api.apps.v1.DeploymentSpec"));
        assert!(find(b"x-kubernetes-group-version-kind"));
        // A property: NamedSchema { name = 1: "replicas", value = 2: Schema }.
        assert!(find(b"\x0a\x08replicas\x12"));
        let int = v2_schema(&json!({"type": "integer", "format": "int32"})).0;
        assert_eq!(int, b"\x12\x05int32\xb2\x01\x09\x0a\x07integer");
    }

    #[test]
    fn the_v2_document_uses_swagger_refs() {
        let doc = v2(&Resources::builtin());
        let text = doc.to_string();
        assert!(!text.contains(V3_PREFIX));
        assert!(doc["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]["spec"].is_object());
        assert!(text.contains("#/definitions/io.k8s.api.core.v1.PodSpec"));
    }
}
