//! OpenAPI documents of the served types: `/openapi/v2` (one Swagger 2.0 document, JSON) and
//! `/openapi/v3` (an index and one OpenAPI 3.0 document per group-version). Built-in kinds get
//! k8s-openapi's schemas (its `schemars` feature carries the upstream definitions), custom
//! resources the `openAPIV3Schema` of their CRD version, named as the real server names them.
//! kubectl and helm read the PATCH operations' `fieldValidation` parameter to decide that the
//! server validates (F11.2), and `kubectl explain` reads the schemas by their
//! `x-kubernetes-group-version-kind`.

use crate::cluster::Cluster;
use crate::error::{ApiError, ApiResult};
use crate::resources::{ResourceDef, Resources};
use axum::response::Response;
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

/// The schema of `def` in `version` and the definitions its refs resolve against.
pub(crate) fn schema_of(
    def: &ResourceDef,
    version: &str,
) -> Option<(Value, &'static Map<String, Value>)> {
    let b = builtin();
    if def.custom {
        return Some((custom_definition(def, version), &b.defs));
    }
    let name = b
        .by_gvk
        .get(&(def.group.clone(), version.to_string(), def.kind.clone()))?;
    Some((b.defs.get(name)?.clone(), &b.defs))
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

/// Rewrites v3 refs and `allOf` wrappers into Swagger 2.0 form.
fn to_v2(v: &mut Value) {
    match v {
        Value::Object(m) => {
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

/// Whether the client's `Accept` takes JSON (absent, `*/*`, `application/*` or a JSON type).
pub(crate) fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    accept.split(',').any(|t| {
        let base = t.split(';').next().unwrap_or("").trim();
        base.is_empty() || base == "*/*" || base == "application/*" || base.ends_with("json")
    })
}

/// `GET /openapi/...`: the v2 document, the v3 index, or one group-version's v3 document.
/// Only JSON is served; a client that accepts only the protobuf form gets 406, which
/// client-go's OpenAPI v2 getter treats as "not served here" (F11.2).
pub(crate) fn serve(cluster: &Cluster, rest: &[&str], headers: &HeaderMap) -> ApiResult<Response> {
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
        Some(d) => Ok(crate::server::json_response(StatusCode::OK, &d)),
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
    fn the_v2_document_uses_swagger_refs() {
        let doc = v2(&Resources::builtin());
        let text = doc.to_string();
        assert!(!text.contains(V3_PREFIX));
        assert!(doc["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]["spec"].is_object());
        assert!(text.contains("#/definitions/io.k8s.api.core.v1.PodSpec"));
    }
}
