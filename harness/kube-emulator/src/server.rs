//! The HTTP face of the cluster: an axum router with one fallback handler that parses Kubernetes
//! API paths (`/api/v1/...`, `/apis/{group}/{version}/...`, optionally `namespaces/{ns}/`),
//! dispatches verbs and subresources to the store, and renders JSON, Tables, metadata-only
//! objects, watch streams, logs and WebSocket upgrades.

use crate::backend::Backend;
use crate::discovery;
use crate::error::{ApiError, ApiResult, success_status};
use crate::exec::{self, Streams};
use crate::logs::{LogParams, pod_logs};
use crate::patch::{PatchBody, PatchKind};
use crate::resources::ResourceDef;
use crate::response::json_response;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{DeleteOptions, ListOptions, State, Subresource};
use crate::tables::{partial_metadata, table};
use crate::validation::{Admitted, BodyKind, FieldValidation};
use crate::watch::{WatchParams, watch_stream};
use axum::Router;
use axum::body::Body;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, Request};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, Method, StatusCode, header};
use serde::Serialize;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

pub(crate) fn router(cluster: Backend) -> Router {
    Router::new().fallback(handle).with_state(cluster)
}

async fn handle(
    axum::extract::State(cluster): axum::extract::State<Backend>,
    req: Request,
) -> Response {
    let method = req.method().clone();
    let uri = req.uri().clone();
    let resp = match dispatch(cluster, req).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    tracing::debug!(%method, %uri, status = resp.status().as_u16(), "emulated API request");
    resp
}

pub(crate) fn error_response(e: &ApiError) -> Response {
    json_response(
        StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &e.to_status(),
    )
}

/// A list body, borrowed (keys in the order `json!` would give them).
#[derive(Serialize)]
struct WireList<'a> {
    #[serde(rename = "apiVersion")]
    api_version: String,
    items: Vec<&'a Value>,
    kind: &'a str,
    metadata: WireListMeta,
}

#[derive(Serialize)]
struct WireListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: String,
}

/// The representation the client asked for in `Accept`.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Full,
    Table,
    Metadata,
}

fn shape(headers: &HeaderMap) -> Shape {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // The first acceptable media type wins; kubectl lists Table first and JSON as fallback.
    let first = accept.split(',').next().unwrap_or("");
    if first.contains("as=Table") {
        Shape::Table
    } else if first.contains("as=PartialObjectMetadata") {
        Shape::Metadata
    } else {
        Shape::Full
    }
}

struct Query(Vec<(String, String)>);

impl Query {
    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }
    fn all(&self, k: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .collect()
    }
    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
    fn int(&self, k: &str) -> ApiResult<Option<i64>> {
        self.get(k)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid value for {k}: {v:?}")))
            })
            .transpose()
    }
}

async fn dispatch(cluster: Backend, req: Request) -> ApiResult<Response> {
    let (mut parts, body) = req.into_parts();
    let query = Query(
        form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
            .into_owned()
            .collect(),
    );
    let path = parts.uri.path().trim_end_matches('/').to_string();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let get = parts.method == Method::GET;
    match segs.as_slice() {
        ["version"] if get => return Ok(json_response(StatusCode::OK, &discovery::version())),
        ["healthz" | "livez" | "readyz"] if get => {
            return Ok((StatusCode::OK, "ok").into_response());
        }
        ["api"] if get => return Ok(json_response(StatusCode::OK, &discovery::core_versions())),
        ["openapi", rest @ ..] if get => {
            return crate::openapi::serve(&cluster, rest, &parts.headers);
        }
        ["apis"] if get => {
            return Ok(json_response(
                StatusCode::OK,
                &cluster.read(|s| discovery::group_list(&s.resources)),
            ));
        }
        ["api", "v1"] | ["apis", _, _] if get => {
            let (g, v) = if segs[0] == "api" {
                ("", "v1")
            } else {
                (segs[1], segs[2])
            };
            return cluster
                .read(|s| discovery::resource_list(&s.resources, g, v))
                .map(|l| json_response(StatusCode::OK, &l))
                .ok_or_else(not_found_path);
        }
        ["apis", g] if get => {
            return cluster
                .read(|s| discovery::group(&s.resources, g))
                .map(|l| json_response(StatusCode::OK, &l))
                .ok_or_else(not_found_path);
        }
        _ => {}
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] if !rest.is_empty() => ("", "v1", rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
        _ => return Err(not_found_path()),
    };
    let lookup = |plural: &str| cluster.read(|s| s.resources.get(group, version, plural).cloned());
    let namespace_sub =
        group.is_empty() && rest.len() == 3 && matches!(rest[2], "status" | "finalize");
    let (ns, rest) = if rest[0] == "namespaces"
        && rest.len() >= 3
        && !namespace_sub
        && lookup(rest[2]).is_some()
    {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    let def = lookup(rest[0]).ok_or_else(not_found_path)?;
    if rest.len() > 3
        || (def.namespaced && ns.is_none() && rest.len() > 1)
        || (!def.namespaced && ns.is_some())
    {
        return Err(not_found_path());
    }
    let name = rest.get(1).map(|s| s.to_string());
    let sub = rest.get(2).map(|s| s.to_string());
    let ctx = Ctx {
        cluster: cluster.clone(),
        def,
        version: version.to_string(),
        ns,
        query,
        shape: shape(&parts.headers),
    };
    let method = parts.method.clone();
    if crate::kinds::is_review(&ctx.def) && (name.is_some() || method != Method::POST) {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({method})"
        )));
    }
    let is_upgrade = matches!(sub.as_deref(), Some("exec" | "portforward" | "attach"));
    if is_upgrade {
        // kubectl's fallback from WebSocket is a plain SPDY upgrade (F12.5).
        let spdy = parts
            .headers
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|u| u.eq_ignore_ascii_case("SPDY/3.1"))
            .then(|| parts.extensions.remove::<hyper::upgrade::OnUpgrade>())
            .flatten();
        let ws = WebSocketUpgrade::from_request_parts(&mut parts, &()).await;
        return upgrade(
            ctx,
            name.unwrap_or_default(),
            sub.unwrap_or_default(),
            ws,
            spdy,
        );
    }
    if sub.as_deref() != Some("log") {
        crate::pb::negotiate(&parts.headers)?;
    }
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let body = axum::body::to_bytes(body, 64 << 20)
        .await
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    // Protobuf bodies (kubectl's typed clients) become JSON here; everything after sees JSON.
    let body = crate::pb::json_body(&content_type, body)?;
    match (name, sub.as_deref(), method) {
        (None, None, Method::GET) if ctx.query.flag("watch") => ctx.watch(),
        (None, None, Method::GET) => ctx.list(),
        (None, None, Method::POST) => ctx.create(&body),
        (None, None, Method::DELETE) => ctx.delete_collection(&body),
        (Some(n), None, Method::GET) | (Some(n), Some("status"), Method::GET) => ctx.get(&n),
        (Some(n), None, Method::PUT) => ctx.update(&n, &body, Subresource::Main),
        (Some(n), Some("status"), Method::PUT) => ctx.update(&n, &body, Subresource::Status),
        (Some(n), None, Method::PATCH) => ctx.patch(&n, &content_type, &body, Subresource::Main),
        (Some(n), Some("status"), Method::PATCH) => {
            ctx.patch(&n, &content_type, &body, Subresource::Status)
        }
        (Some(n), None, Method::DELETE) => ctx.delete(&n, &body),
        (Some(n), Some("scale"), m)
            if ctx
                .def
                .version(&ctx.version)
                .is_some_and(|v| v.scale.is_some()) =>
        {
            ctx.scale(&n, m, &content_type, &body)
        }
        (Some(n), Some("log"), Method::GET) if ctx.is_pods() => ctx.logs(&n),
        (Some(n), Some("eviction"), Method::POST) if ctx.is_pods() => ctx.evict(&n, &body),
        (Some(n), Some("binding"), Method::POST) if ctx.is_pods() => ctx.bind(&n, &body),
        (Some(n), Some("token"), Method::POST) if ctx.is_service_accounts() => {
            let ns = ctx.ns().unwrap_or("default").to_string();
            let out = crate::tokens::token_request(&ctx.cluster, &ns, &n, &body)?;
            Ok(json_response(StatusCode::CREATED, &out))
        }
        (_, None | Some("status"), m) => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({m})"
        ))),
        _ => Err(not_found_path()),
    }
}

fn not_found_path() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

fn parse_body(body: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
    })
}

struct Ctx {
    cluster: Backend,
    def: std::sync::Arc<ResourceDef>,
    version: String,
    ns: Option<String>,
    query: Query,
    shape: Shape,
}

impl Ctx {
    fn is_pods(&self) -> bool {
        self.def.group.is_empty() && self.def.plural == "pods"
    }

    fn is_service_accounts(&self) -> bool {
        self.def.group.is_empty() && self.def.plural == "serviceaccounts"
    }

    fn ns(&self) -> Option<&str> {
        self.ns.as_deref()
    }

    fn dry_run(&self) -> bool {
        self.query.get("dryRun") == Some("All")
    }

    /// Runs a write on the store, or on a throw-away copy for `dryRun=All`.
    fn write<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        if self.dry_run() {
            self.cluster.read(|s| f(&mut s.clone()))
        } else {
            self.cluster.with_state(f)
        }
    }

    fn list_options(&self) -> ApiResult<ListOptions> {
        Ok(ListOptions {
            label_selector: self
                .query
                .get("labelSelector")
                .map(LabelSelector::parse)
                .transpose()?,
            field_selector: self
                .query
                .get("fieldSelector")
                .map(|f| FieldSelector::parse(f, &self.def.group, &self.def.plural))
                .transpose()?,
        })
    }

    fn now(&self) -> i64 {
        self.cluster.now_unix() as i64
    }

    fn render_one(&self, code: StatusCode, obj: &Value) -> Response {
        match self.shape {
            Shape::Table => json_response(
                code,
                &table(
                    &self.def,
                    &self.version,
                    std::slice::from_ref(obj),
                    self.now(),
                    self.include_object(),
                    None,
                ),
            ),
            Shape::Metadata => json_response(code, &partial_metadata(obj)),
            Shape::Full => json_response(code, obj),
        }
    }

    fn include_object(&self) -> &str {
        self.query.get("includeObject").unwrap_or("Metadata")
    }

    fn get(&self, name: &str) -> ApiResult<Response> {
        let obj = self
            .cluster
            .read(|s| s.get(&self.def, &self.version, self.ns(), name))?;
        Ok(self.render_one(StatusCode::OK, &obj))
    }

    fn list(&self) -> ApiResult<Response> {
        let opts = self.list_options()?;
        let (items, rv) = self
            .cluster
            .read(|s| (s.list(&self.def, &self.version, self.ns(), &opts), s.rv));
        Ok(match self.shape {
            Shape::Table => json_response(
                StatusCode::OK,
                &table(
                    &self.def,
                    &self.version,
                    &items.iter().map(|o| (**o).clone()).collect::<Vec<_>>(),
                    self.now(),
                    self.include_object(),
                    Some(rv),
                ),
            ),
            Shape::Metadata => json_response(
                StatusCode::OK,
                &json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                        "metadata": {"resourceVersion": rv.to_string()},
                        "items": items.iter().map(|o| partial_metadata(o)).collect::<Vec<_>>()}),
            ),
            // Serialised from the stored objects in place (a `json!` body would copy each).
            Shape::Full => json_response(
                StatusCode::OK,
                &WireList {
                    api_version: self.def.api_version(&self.version),
                    items: items.iter().map(|o| &**o).collect(),
                    kind: &self.def.list_kind,
                    metadata: WireListMeta {
                        resource_version: rv.to_string(),
                    },
                },
            ),
        })
    }

    fn watch(&self) -> ApiResult<Response> {
        let params = WatchParams {
            resource_version: self.query.get("resourceVersion").map(str::to_string),
            allow_bookmarks: self.query.flag("allowWatchBookmarks"),
            send_initial_events: self.query.flag("sendInitialEvents"),
            timeout: self
                .query
                .int("timeoutSeconds")?
                .map(|t| Duration::from_secs(t.max(0) as u64)),
            list: self.list_options()?,
        };
        let stream = watch_stream(
            self.cluster.clone(),
            self.def.clone(),
            self.version.clone(),
            self.ns.clone(),
            params,
        );
        let (def, version, shape, cluster) = (
            self.def.clone(),
            self.version.clone(),
            self.shape,
            self.cluster.clone(),
        );
        let include = self.include_object().to_string();
        let body = stream.map(move |mut e| {
            if e.type_ != "ERROR" && e.type_ != "BOOKMARK" {
                e.object = match shape {
                    Shape::Table => Arc::new(table(
                        &def,
                        &version,
                        std::slice::from_ref(&*e.object),
                        cluster.now_unix() as i64,
                        &include,
                        None,
                    )),
                    Shape::Metadata => Arc::new(partial_metadata(&e.object)),
                    Shape::Full => e.object,
                };
            }
            Ok::<_, Infallible>(Bytes::from(e.to_line()))
        });
        Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json;stream=watch")],
            Body::from_stream(body),
        )
            .into_response())
    }

    fn create(&self, body: &[u8]) -> ApiResult<Response> {
        if self.def.namespaced && self.ns.is_none() {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        if crate::kinds::is_review(&self.def) {
            let review = if self.def.plural == "tokenreviews" {
                crate::tokens::token_review(
                    &self.cluster,
                    &self.def.api_version(&self.version),
                    body,
                )
            } else {
                crate::kinds::review(&self.def, &self.version, body)
            };
            return Ok(json_response(StatusCode::CREATED, &review));
        }
        let a = self.admit(BodyKind::Object, parse_body(body)?)?;
        let out = self.write(|s| s.create(&self.def, &self.version, self.ns(), a.object))?;
        Ok(warn(
            self.render_one(StatusCode::CREATED, &out),
            &a.warnings,
        ))
    }

    fn update(&self, name: &str, body: &[u8], sub: Subresource) -> ApiResult<Response> {
        let a = self.admit(BodyKind::Object, parse_body(body)?)?;
        let out =
            self.write(|s| s.update(&self.def, &self.version, self.ns(), name, a.object, sub))?;
        Ok(warn(self.render_one(StatusCode::OK, &out), &a.warnings))
    }

    /// Field validation of a body (F11.3): see `validation.rs`.
    fn admit(&self, body: BodyKind, obj: Value) -> ApiResult<Admitted> {
        let directive = FieldValidation::from_query(self.query.get("fieldValidation"))?;
        crate::validation::admit(&self.def, &self.version, directive, body, obj)
    }

    /// Validates a merge-style or apply patch; returns the body with unknown fields dropped
    /// (when it changed) and the warnings. JSON patches are left to the store.
    fn admit_patch(
        &self,
        kind: PatchKind,
        body: &[u8],
    ) -> ApiResult<(Option<Vec<u8>>, Vec<String>)> {
        let (body_kind, value) = match kind {
            PatchKind::Merge | PatchKind::Strategic => (BodyKind::Patch, parse_body(body)?),
            PatchKind::Apply => (BodyKind::Apply, crate::patch::parse_apply_body(body)?),
            PatchKind::Json => return Ok((None, vec![])),
        };
        let a = self.admit(body_kind, value)?;
        let changed = a
            .pruned
            .then(|| serde_json::to_vec(&a.object).unwrap_or_default());
        Ok((changed, a.warnings))
    }

    fn patch_kind(&self, content_type: &str) -> ApiResult<PatchKind> {
        let kind = PatchKind::from_content_type(content_type).ok_or_else(|| {
            ApiError::unsupported_media_type(format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {content_type})"))
        })?;
        if kind == PatchKind::Apply && self.query.get("fieldManager").is_none_or(str::is_empty) {
            return Err(ApiError::new(
                422,
                "Invalid",
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            ));
        }
        Ok(kind)
    }

    fn patch(
        &self,
        name: &str,
        content_type: &str,
        body: &[u8],
        sub: Subresource,
    ) -> ApiResult<Response> {
        let kind = self.patch_kind(content_type)?;
        let (checked, warnings) = self.admit_patch(kind, body)?;
        let body = checked.as_deref().unwrap_or(body);
        let existed = self
            .cluster
            .read(|s| s.get(&self.def, &self.version, self.ns(), name).is_ok());
        let out = self.write(|s| {
            s.patch(
                &self.def,
                &self.version,
                self.ns(),
                name,
                kind,
                PatchBody::Bytes(body),
                sub,
            )
        })?;
        Ok(warn(
            self.render_one(
                if existed {
                    StatusCode::OK
                } else {
                    StatusCode::CREATED
                },
                &out,
            ),
            &warnings,
        ))
    }

    fn delete_options(&self, body: &[u8]) -> ApiResult<DeleteOptions> {
        let mut opts = if body.iter().all(u8::is_ascii_whitespace) {
            DeleteOptions::default()
        } else {
            DeleteOptions::from_json(&parse_body(body)?)
        };
        if let Some(g) = self.query.int("gracePeriodSeconds")? {
            opts.grace_period_seconds = Some(g);
        }
        if let Some(p) = self.query.get("propagationPolicy") {
            opts.propagation_policy = Some(p.to_string());
        }
        if let Some(p) = &opts.propagation_policy
            && !matches!(p.as_str(), "Background" | "Foreground" | "Orphan")
        {
            return Err(ApiError::new(
                422,
                "Invalid",
                format!(
                    "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            ));
        }
        Ok(opts)
    }

    fn delete(&self, name: &str, body: &[u8]) -> ApiResult<Response> {
        let opts = self.delete_options(body)?;
        let (obj, gone) =
            self.write(|s| s.delete(&self.def, &self.version, self.ns(), name, &opts))?;
        Ok(self.render_one(
            if gone {
                StatusCode::OK
            } else {
                StatusCode::ACCEPTED
            },
            &obj,
        ))
    }

    fn delete_collection(&self, body: &[u8]) -> ApiResult<Response> {
        let opts = self.delete_options(body)?;
        let lo = self.list_options()?;
        let items = self.write(|s| {
            let names: Vec<(Option<String>, String)> = s
                .list(&self.def, &self.version, self.ns(), &lo)
                .iter()
                .map(|o| {
                    let m = &o["metadata"];
                    (
                        m["namespace"].as_str().map(str::to_string),
                        m["name"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect();
            names
                .into_iter()
                .filter_map(|(ns, n)| {
                    s.delete(&self.def, &self.version, ns.as_deref(), &n, &opts)
                        .ok()
                        .map(|r| r.0)
                })
                .collect::<Vec<_>>()
        });
        let rv = self.cluster.resource_version();
        Ok(json_response(
            StatusCode::OK,
            &json!({"kind": self.def.list_kind, "apiVersion": self.def.api_version(&self.version), "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
        ))
    }

    fn scale(
        &self,
        name: &str,
        method: Method,
        content_type: &str,
        body: &[u8],
    ) -> ApiResult<Response> {
        let out = match method {
            Method::GET => self
                .cluster
                .read(|s| s.get_scale(&self.def, &self.version, self.ns(), name))?,
            Method::PUT => {
                let scale = parse_body(body)?;
                self.write(|s| s.update_scale(&self.def, &self.version, self.ns(), name, scale))?
            }
            Method::PATCH => {
                let kind = self.patch_kind(content_type)?;
                self.write(|s| {
                    s.patch_scale(&self.def, &self.version, self.ns(), name, kind, body)
                })?
            }
            m => {
                return Err(ApiError::method_not_allowed(format!(
                    "the server does not allow this method on the requested resource ({m})"
                )));
            }
        };
        Ok(json_response(StatusCode::OK, &out))
    }

    fn logs(&self, name: &str) -> ApiResult<Response> {
        let q = &self.query;
        let p = LogParams {
            container: q.get("container").map(str::to_string),
            previous: q.flag("previous"),
            follow: q.flag("follow"),
            tail_lines: q.int("tailLines")?,
            since_seconds: q.int("sinceSeconds")?,
            since_time: q.get("sinceTime").map(str::to_string),
            timestamps: q.flag("timestamps"),
            limit_bytes: q.int("limitBytes")?.map(|v| v.max(0) as usize),
        };
        let stream = pod_logs(&self.cluster, self.ns().unwrap_or("default"), name, p)?;
        let body = Body::from_stream(stream.map(Ok::<_, Infallible>));
        Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], body).into_response())
    }

    fn evict(&self, name: &str, body: &[u8]) -> ApiResult<Response> {
        let ev = if body.is_empty() {
            json!({})
        } else {
            parse_body(body)?
        };
        if let Some(n) = ev.pointer("/metadata/name").and_then(Value::as_str)
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "name in URL does not match name in Eviction object ({n} vs {name})"
            )));
        }
        let opts = ev
            .get("deleteOptions")
            .map(DeleteOptions::from_json)
            .unwrap_or_default();
        self.write(|s| s.delete(&self.def, &self.version, self.ns(), name, &opts))?;
        let mut st = success_status();
        st["code"] = json!(201);
        Ok(json_response(StatusCode::CREATED, &st))
    }

    fn bind(&self, name: &str, body: &[u8]) -> ApiResult<Response> {
        let b = parse_body(body)?;
        let node = b
            .pointer("/target/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("Binding \"{name}\" is invalid: target.name: Required value"),
                )
            })?;
        let ns = self.ns().unwrap_or("default").to_string();
        self.write(|s| s.bind_pod(&ns, name, node))?;
        let mut st = success_status();
        st["code"] = json!(201);
        Ok(json_response(StatusCode::CREATED, &st))
    }
}

/// Adds a `Warning` header per warning, as the real server does for Warn field validation.
fn warn(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        if let Ok(v) = http::HeaderValue::from_str(&crate::validation::warning_header(w)) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

const CHANNEL_PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

fn upgrade(
    ctx: Ctx,
    name: String,
    sub: String,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
    spdy: Option<hyper::upgrade::OnUpgrade>,
) -> ApiResult<Response> {
    if !ctx.is_pods() || name.is_empty() {
        return Err(not_found_path());
    }
    let ns = ctx.ns().unwrap_or("default").to_string();
    let cluster = ctx.cluster.clone();
    match sub.as_str() {
        "exec" => {
            let q = &ctx.query;
            let req = exec::prepare(
                &cluster,
                &ns,
                &name,
                q.get("container"),
                q.all("command"),
                q.flag("tty"),
            )?;
            let streams = Streams {
                stdin: q.flag("stdin"),
                stdout: q.flag("stdout"),
                stderr: q.flag("stderr"),
            };
            let ws = ws
                .map_err(|e| ApiError::bad_request(format!("Upgrade request required: {e}")))?
                .protocols(CHANNEL_PROTOCOLS);
            if ws.selected_protocol().is_none() {
                return Err(ApiError::bad_request(
                    "unable to upgrade connection: no supported subprotocol (want v5.channel.k8s.io or v4.channel.k8s.io)",
                ));
            }
            Ok(ws.on_upgrade(move |socket| exec::serve_ws(socket, cluster, req, streams)))
        }
        "portforward" => {
            let pod = cluster.get(&crate::resources::ResourceRef::pods(), Some(&ns), &name)?;
            if pod
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return Err(ApiError::bad_request(format!(
                    "pod {name} does not have a host assigned"
                )));
            }
            if pod.pointer("/status/phase").and_then(Value::as_str) != Some("Running") {
                return Err(ApiError::bad_request(format!(
                    "unable to upgrade connection: pod {name} is not running"
                )));
            }
            let uid = pod
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            // kubectl's forms: SPDY tunnelled in WebSocket, or plain SPDY; the ports travel in
            // the stream headers, not in the URL.
            if let Some(on_upgrade) = spdy {
                tokio::spawn(async move {
                    if let Ok(io) = on_upgrade.await {
                        let io = hyper_util::rt::TokioIo::new(io);
                        crate::spdy::serve_upgraded(io, cluster, ns, name, uid).await;
                    }
                });
                return Ok(Response::builder()
                    .status(StatusCode::SWITCHING_PROTOCOLS)
                    .header(header::CONNECTION, "Upgrade")
                    .header(header::UPGRADE, "SPDY/3.1")
                    .header(
                        "X-Stream-Protocol-Version",
                        crate::spdy::PORTFORWARD_PROTOCOL,
                    )
                    .body(Body::empty())
                    .unwrap_or_default());
            }
            let ws = ws
                .map_err(|e| ApiError::bad_request(format!("Upgrade request required: {e}")))?
                .protocols([
                    crate::spdy::TUNNEL_PROTOCOL,
                    CHANNEL_PROTOCOLS[0],
                    CHANNEL_PROTOCOLS[1],
                ]);
            let tunnel = ws
                .selected_protocol()
                .is_some_and(|p| p == crate::spdy::TUNNEL_PROTOCOL);
            if tunnel {
                return Ok(ws.on_upgrade(move |socket| {
                    crate::spdy::serve_ws(socket, cluster, ns, name, uid)
                }));
            }
            let mut ports = vec![];
            for p in ctx
                .query
                .all("ports")
                .iter()
                .flat_map(|p| p.split(',').map(str::to_string).collect::<Vec<_>>())
            {
                ports.push(
                    p.trim()
                        .parse::<u16>()
                        .map_err(|_| ApiError::bad_request(format!("invalid port: {p:?}")))?,
                );
            }
            if ports.is_empty() {
                return Err(ApiError::bad_request("at least one port must be specified"));
            }

            Ok(ws.on_upgrade(move |socket| {
                crate::portforward::serve_ws(socket, cluster, ns, name, uid, ports)
            }))
        }
        _ => Err(ApiError::bad_request(
            "attach is not supported by the emulated cluster",
        )),
    }
}
