//! Bound ServiceAccount tokens: the API server's `TokenRequest` (`serviceaccounts/<name>/token`
//! create, docs/upstream-facts.md F12.11), which the kubelet asks for each projected
//! `serviceAccountToken` volume, and its `TokenReview` (`authentication.k8s.io/v1`,
//! `tokenreviews` create) that validates them (F12.7, F12.11).
//!
//! A token is JWT-shaped: its claims carry the audiences, expiry, the ServiceAccount (name and
//! uid) and the object it is bound to. It is not signed; instead the cluster records the id
//! (`jti`) of every token it issued, so a review authenticates only tokens this cluster wrote,
//! as a real API server authenticates only tokens its signing key signed.

use base64::Engine;
use serde_json::{Value, json};

use crate::backend::Backend;
use crate::error::{ApiError, ApiResult};
use crate::registry::Freshness;
use crate::resources::ResourceRef;

/// The API server's own audience: a token request or review without audiences means this one.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// The shortest and longest lifetimes a TokenRequest may ask for, and the default (F12.11).
const MIN_EXPIRATION_SECONDS: i64 = 600;
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

/// The object a token is bound to: it is valid only while that object exists with that uid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundObject {
    /// `Pod` or `Secret`.
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// What a token is for and whom it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRequest {
    pub namespace: String,
    pub service_account: String,
    /// The ServiceAccount's uid: a review refuses the token once the account is gone or
    /// recreated. `None` only for an account that does not exist (see [`crate::Cluster::issue_token`]).
    pub service_account_uid: Option<String>,
    /// Empty: the API server's audience ([`API_AUDIENCE`]).
    pub audiences: Vec<String>,
    pub expiration_seconds: u64,
    pub bound: Option<BoundObject>,
    pub freshness: Freshness,
}

impl Backend {
    /// Issues a bound ServiceAccount token. The checks a `TokenRequest` makes first (the account
    /// exists, the bound object exists with that uid) are [`token_request`]'s; the kubelet model
    /// calls this directly for its projected volumes, with the uid of the account if it exists.
    pub(crate) fn issue_token(&self, req: &TokenRequest) -> String {
        let jti = {
            let mut reg = self.inner.tokens.lock().unwrap_or_else(|p| p.into_inner());
            reg.next += 1;
            let jti = format!("emulated-{}", reg.next);
            reg.issued.insert(jti.clone(), req.freshness);
            jti
        };
        let now = self.now_unix();
        let audiences = if req.audiences.is_empty() {
            vec![API_AUDIENCE.to_string()]
        } else {
            req.audiences.clone()
        };
        let mut sa = json!({"name": req.service_account});
        if let Some(uid) = &req.service_account_uid {
            sa["uid"] = json!(uid);
        }
        let mut k8s = json!({"namespace": req.namespace, "serviceaccount": sa});
        if let Some(b) = &req.bound {
            k8s[b.kind.to_lowercase()] = json!({"name": b.name, "uid": b.uid});
        }
        let claims = json!({
            "aud": audiences,
            "exp": now + req.expiration_seconds,
            "iat": now,
            "nbf": now,
            "iss": API_AUDIENCE,
            "jti": jti,
            "sub": format!("system:serviceaccount:{}:{}", req.namespace, req.service_account),
            "kubernetes.io": k8s,
        });
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.{}",
            b64.encode(br#"{"alg":"none","typ":"JWT"}"#),
            b64.encode(claims.to_string()),
            b64.encode(b"emulated")
        )
    }

    /// The uid of a ServiceAccount, if it exists.
    pub(crate) fn service_account_uid(&self, namespace: &str, name: &str) -> Option<String> {
        self.get(&service_accounts(), Some(namespace), name)
            .ok()
            .and_then(|sa| uid_of(&sa))
    }

    /// The `status` of a `TokenReview` of `token` for `audiences` (empty: the API server's),
    /// as the API server's ServiceAccount token authenticator answers it (F12.7, F12.11): the
    /// token must be one this cluster issued, unexpired (unless the kubelet keeps it fresh),
    /// share an audience with the review, name a ServiceAccount that still exists with the same
    /// uid, and be bound to an object that still exists with the same uid.
    pub(crate) fn review_token(&self, token: &str, audiences: &[String]) -> Value {
        let targets: Vec<String> = if audiences.is_empty() {
            vec![API_AUDIENCE.to_string()]
        } else {
            audiences.to_vec()
        };
        let refuse = |why: String| json!({"authenticated": false, "error": format!("[invalid bearer token, {why}]"), "user": {}});
        let Some(claims) = claims_of(token) else {
            return refuse("token is not a JWT".into());
        };
        let freshness = claims.get("jti").and_then(Value::as_str).and_then(|jti| {
            self.inner
                .tokens
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .issued
                .get(jti)
                .copied()
        });
        let Some(freshness) = freshness else {
            return refuse("token was not issued by this cluster".into());
        };
        let token_aud = strings(claims.get("aud"));
        let common: Vec<String> = targets
            .iter()
            .filter(|a| token_aud.contains(a))
            .cloned()
            .collect();
        if common.is_empty() {
            // k8s.io/apiserver pkg/authentication/authenticator/audiences.go.
            return refuse(format!(
                "token audiences {token_aud:?} is invalid for the target audiences {targets:?}"
            ));
        }
        let expiry = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        if freshness == Freshness::Expires && self.now_unix() >= expiry {
            return refuse("service account token has expired".into());
        }
        let k8s = claims.get("kubernetes.io").cloned().unwrap_or(json!({}));
        let str_at = |p: &str| k8s.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let (ns, sa) = (str_at("/namespace"), str_at("/serviceaccount/name"));
        // pkg/serviceaccount/claims.go: the account first, then the bound object.
        match self.get(&service_accounts(), Some(ns), sa) {
            Err(e) => return refuse(e.message),
            Ok(live) => {
                let live_uid = uid_of(&live).unwrap_or_default();
                let claimed = str_at("/serviceaccount/uid");
                if live_uid != claimed {
                    return refuse(format!(
                        "service account UID ({live_uid}) does not match claim ({claimed})"
                    ));
                }
            }
        }
        let mut extra = serde_json::Map::new();
        for (kind, plural) in [("pod", "pods"), ("secret", "secrets")] {
            if k8s.get(kind).is_none() {
                continue;
            }
            let (name, uid) = (
                str_at(&format!("/{kind}/name")),
                str_at(&format!("/{kind}/uid")),
            );
            // An object in its grace period still holds valid tokens; one that is gone does not.
            let live = self
                .get(&ResourceRef::new("", "v1", plural), Some(ns), name)
                .ok();
            match live.as_ref().and_then(uid_of) {
                None => return refuse("service account token has been invalidated".into()),
                Some(u) if u != uid => {
                    let what = if kind == "pod" {
                        "service account pod ref claim"
                    } else {
                        "service account secret ref claim"
                    };
                    return refuse(format!("{kind} UID ({u}) does not match {what} ({uid})"));
                }
                Some(_) => {}
            }
            if kind == "pod" {
                extra.insert(
                    "authentication.kubernetes.io/pod-name".into(),
                    json!([name]),
                );
                extra.insert("authentication.kubernetes.io/pod-uid".into(), json!([uid]));
            }
        }
        if let Some(jti) = claims.get("jti").and_then(Value::as_str) {
            extra.insert(
                "authentication.kubernetes.io/credential-id".into(),
                json!([format!("JTI={jti}")]),
            );
        }
        json!({
            "authenticated": true,
            "audiences": common,
            "user": {
                "username": format!("system:serviceaccount:{ns}:{sa}"),
                "uid": str_at("/serviceaccount/uid"),
                "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"), "system:authenticated"],
                "extra": extra,
            },
        })
    }
}

fn service_accounts() -> ResourceRef {
    ResourceRef::new("", "v1", "serviceaccounts")
}

fn uid_of(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The answer to a `TokenRequest` create on `serviceaccounts/<service_account>/token`, as the
/// API server's token storage gives it (F12.11): the lifetime validated and defaulted, the
/// account and the bound object looked up, the request echoed with `status.token` and
/// `status.expirationTimestamp`.
pub(crate) fn token_request(
    cluster: &Backend,
    namespace: &str,
    service_account: &str,
    body: &[u8],
) -> ApiResult<Value> {
    let mut req: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
        })?
    };
    let kind = "TokenRequest.authentication.k8s.io";
    let expiration = req
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_EXPIRATION_SECONDS);
    let too = if expiration < MIN_EXPIRATION_SECONDS {
        Some("may not specify a duration less than 10 minutes")
    } else if expiration > MAX_EXPIRATION_SECONDS {
        Some("may not specify a duration larger than 2^32 seconds")
    } else {
        None
    };
    if let Some(why) = too {
        return Err(ApiError::invalid(
            "authentication.k8s.io",
            kind,
            "",
            "spec.expirationSeconds",
            &format!("Invalid value: {expiration}: {why}"),
        ));
    }
    let sa = cluster.get(&service_accounts(), Some(namespace), service_account)?;
    let mut bound = None;
    if let Some(r) = req.pointer("/spec/boundObjectRef").filter(|r| !r.is_null()) {
        let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
        let (obj_kind, name, want_uid) = (field("kind"), field("name"), field("uid"));
        let api_version = field("apiVersion");
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let plural = match (group, obj_kind) {
            ("", "Pod") => "pods",
            ("", "Secret") => "secrets",
            _ => {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token to object of type {group}/{version}, Kind={obj_kind}"
                )));
            }
        };
        let obj = cluster.get(&ResourceRef::new("", "v1", plural), Some(namespace), name)?;
        if obj_kind == "Pod" {
            let runs_as = obj
                .pointer("/spec/serviceAccountName")
                .and_then(Value::as_str)
                .unwrap_or("default");
            if runs_as != service_account {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount {service_account:?} to pod running with different serviceaccount name."
                )));
            }
        }
        let uid = uid_of(&obj).unwrap_or_default();
        if !want_uid.is_empty() && want_uid != uid {
            return Err(ApiError::conflict(
                "",
                obj_kind,
                name,
                &format!(
                    "the UID in the bound object reference ({want_uid}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            ));
        }
        bound = Some(BoundObject {
            kind: obj_kind.to_string(),
            name: name.to_string(),
            uid,
        });
    }
    let mut audiences = strings(req.pointer("/spec/audiences"));
    if audiences.is_empty() {
        audiences = vec![API_AUDIENCE.to_string()];
    }
    let token = cluster.issue_token(&TokenRequest {
        namespace: namespace.to_string(),
        service_account: service_account.to_string(),
        service_account_uid: uid_of(&sa),
        audiences: audiences.clone(),
        expiration_seconds: expiration as u64,
        bound,
        freshness: Freshness::Expires,
    });
    let expires = crate::clock::format_unix(cluster.now_unix() as i64 + expiration);
    if !req.is_object() {
        req = json!({});
    }
    req["kind"] = json!("TokenRequest");
    req["apiVersion"] = json!("authentication.k8s.io/v1");
    req["metadata"] =
        json!({"name": service_account, "namespace": namespace, "creationTimestamp": null});
    req["spec"]["audiences"] = json!(audiences);
    req["spec"]["expirationSeconds"] = json!(expiration);
    req["status"] = json!({"token": token, "expirationTimestamp": expires});
    Ok(req)
}

/// The claims of a JWT-shaped token, if it is one.
fn claims_of(token: &str) -> Option<Value> {
    let mut parts = token.split('.');
    let (_, claims, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The answer to a `TokenReview` create: the spec echoed, the status from
/// [`Backend::review_token`].
pub(crate) fn token_review(cluster: &Backend, api_version: &str, body: &[u8]) -> Value {
    let spec = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|b| b.get("spec").cloned())
        .unwrap_or(json!({}));
    let token = spec
        .get("token")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let audiences = strings(spec.get("audiences"));
    let status = cluster.review_token(token, &audiences);
    json!({
        "kind": "TokenReview", "apiVersion": api_version,
        "metadata": {"creationTimestamp": null}, "spec": spec, "status": status,
    })
}

/// The strings of a JSON array (none when it is absent or not an array).
fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ClusterConfig;
    use crate::cluster::Cluster;

    /// A cluster with ServiceAccount `sa` and pod `p` running as it; returns the pod's uid.
    fn cluster_with_pod() -> (Cluster, String) {
        let c = Cluster::new(ClusterConfig::default());
        c.create(
            &service_accounts(),
            Some("default"),
            json!({"metadata": {"name": "sa"}}),
        )
        .unwrap();
        let pod = c
            .create(
                &ResourceRef::pods(),
                Some("default"),
                json!({"metadata": {"name": "p"}, "spec": {"serviceAccountName": "sa", "containers": [{"name": "c", "image": "i"}]}}),
            )
            .unwrap();
        let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
        (c, uid)
    }

    fn request(c: &Cluster, aud: &str, uid: &str) -> TokenRequest {
        TokenRequest {
            namespace: "default".into(),
            service_account: "sa".into(),
            service_account_uid: c.service_account_uid("default", "sa"),
            audiences: vec![aud.into()],
            expiration_seconds: 3600,
            bound: Some(BoundObject {
                kind: "Pod".into(),
                name: "p".into(),
                uid: uid.into(),
            }),
            freshness: Freshness::KubeletRotated,
        }
    }

    fn delete(c: &Cluster, r: &ResourceRef, name: &str) {
        c.delete(
            r,
            Some("default"),
            name,
            &crate::DeleteOptions {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
    }

    #[tokio::test]
    async fn a_review_authenticates_a_token_of_its_audience_bound_to_a_live_pod_naming_the_pod() {
        let (c, uid) = cluster_with_pod();
        let token = c.issue_token(&request(&c, "gw", &uid));
        let st = c.review_token(&token, &["gw".into()]);
        assert_eq!(st["authenticated"], true, "{st}");
        assert_eq!(st["audiences"], json!(["gw"]));
        assert_eq!(st["user"]["username"], "system:serviceaccount:default:sa");
        assert_eq!(
            st["user"]["uid"],
            json!(c.service_account_uid("default", "sa").unwrap())
        );
        assert_eq!(
            st["user"]["extra"]["authentication.kubernetes.io/pod-name"],
            json!(["p"])
        );
        assert_eq!(
            st["user"]["extra"]["authentication.kubernetes.io/pod-uid"],
            json!([uid])
        );
    }

    #[derive(Debug, Clone, Copy)]
    enum Then {
        Nothing,
        DeletePod,
        RecreatePod,
        RecreateAccount,
    }

    #[rstest::rstest]
    #[case::another_audience(
        "other",
        Then::Nothing,
        "token audiences [\"other\"] is invalid for the target audiences [\"gw\"]"
    )]
    #[case::a_deleted_pod("gw", Then::DeletePod, "service account token has been invalidated")]
    #[case::a_recreated_pod("gw", Then::RecreatePod, "pod UID (")]
    #[case::a_recreated_account("gw", Then::RecreateAccount, "service account UID (")]
    #[tokio::test]
    async fn a_review_refuses_a_token_of_another_audience_or_whose_pod_or_account_is_gone(
        #[case] aud: &str,
        #[case] then: Then,
        #[case] why: &str,
    ) {
        let (c, uid) = cluster_with_pod();
        let token = c.issue_token(&request(&c, aud, &uid));
        match then {
            Then::Nothing => {}
            Then::DeletePod => delete(&c, &ResourceRef::pods(), "p"),
            Then::RecreatePod => {
                delete(&c, &ResourceRef::pods(), "p");
                c.create(
                    &ResourceRef::pods(),
                    Some("default"),
                    json!({"metadata": {"name": "p"}, "spec": {"serviceAccountName": "sa", "containers": [{"name": "c", "image": "i"}]}}),
                )
                .unwrap();
            }
            Then::RecreateAccount => {
                delete(&c, &service_accounts(), "sa");
                c.create(
                    &service_accounts(),
                    Some("default"),
                    json!({"metadata": {"name": "sa"}}),
                )
                .unwrap();
            }
        }
        let st = c.review_token(&token, &["gw".into()]);
        assert_eq!(st["authenticated"], false, "{st}");
        let error = st["error"].as_str().unwrap();
        assert!(
            error.starts_with(&format!("[invalid bearer token, {why}")),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_review_refuses_a_token_this_cluster_did_not_issue() {
        let (c, uid) = cluster_with_pod();
        let _ = c.issue_token(&request(&c, "gw", &uid));
        // Another cluster's second token: well-formed, for the right audience and pod, but
        // with an id this cluster never issued.
        let other = Cluster::new(ClusterConfig::default());
        let _ = other.issue_token(&request(&c, "gw", &uid));
        let foreign = other.issue_token(&request(&c, "gw", &uid));
        for t in [foreign.as_str(), "not-a-token"] {
            assert_eq!(
                c.review_token(t, &["gw".into()])["authenticated"],
                false,
                "{t}"
            );
        }
    }

    fn token_request_body(expiration: i64, bound: Value) -> Vec<u8> {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"audiences": ["gw"], "expirationSeconds": expiration, "boundObjectRef": bound}})
        .to_string()
        .into_bytes()
    }

    #[tokio::test]
    async fn a_token_request_returns_a_token_bound_to_the_pod_that_a_review_authenticates() {
        let (c, uid) = cluster_with_pod();
        let body = token_request_body(
            600,
            json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": uid}),
        );
        let out = token_request(&c.backend, "default", "sa", &body).unwrap();
        assert_eq!(out["kind"], "TokenRequest");
        assert_eq!(out["spec"]["expirationSeconds"], 600);
        let expires =
            crate::clock::parse_unix(out["status"]["expirationTimestamp"].as_str().unwrap());
        assert_eq!(expires, Some(c.now_unix() as i64 + 600));
        let token = out["status"]["token"].as_str().unwrap();
        let st = c.review_token(token, &["gw".into()]);
        assert_eq!(st["authenticated"], true, "{st}");
        assert_eq!(
            st["user"]["extra"]["authentication.kubernetes.io/pod-uid"],
            json!([uid])
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_requested_token_expires_while_a_projected_one_stays_valid_as_the_kubelet_rotates_it()
    {
        let (c, uid) = cluster_with_pod();
        let out = token_request(
            &c.backend,
            "default",
            "sa",
            &token_request_body(600, Value::Null),
        )
        .unwrap();
        let requested = out["status"]["token"].as_str().unwrap().to_string();
        let projected = c.issue_token(&TokenRequest {
            expiration_seconds: 600,
            ..request(&c, "gw", &uid)
        });
        tokio::time::sleep(std::time::Duration::from_secs(599)).await;
        assert_eq!(
            c.review_token(&requested, &["gw".into()])["authenticated"],
            true
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let st = c.review_token(&requested, &["gw".into()]);
        assert_eq!(
            st["error"],
            "[invalid bearer token, service account token has expired]"
        );
        assert_eq!(
            c.review_token(&projected, &["gw".into()])["authenticated"],
            true
        );
    }

    #[rstest::rstest]
    #[case::too_short(
        "sa",
        599,
        json!(null),
        422,
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
    )]
    #[case::too_long(
        "sa",
        (1i64 << 32) + 1,
        json!(null),
        422,
        "may not specify a duration larger than 2^32 seconds"
    )]
    #[case::an_unknown_account("nobody", 3600, json!(null), 404, "serviceaccounts \"nobody\" not found")]
    #[case::a_pod_of_another_account(
        "default",
        3600,
        json!({"apiVersion": "v1", "kind": "Pod", "name": "p"}),
        400,
        "cannot bind token for serviceaccount \"default\" to pod running with different serviceaccount name."
    )]
    #[case::a_stale_pod_uid(
        "sa",
        3600,
        json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "old"}),
        409,
        "Operation cannot be fulfilled on Pod \"p\": the UID in the bound object reference (old) does not match the UID in record. The object might have been deleted and then recreated"
    )]
    #[case::a_missing_pod("sa", 3600, json!({"apiVersion": "v1", "kind": "Pod", "name": "q"}), 404, "pods \"q\" not found")]
    #[case::a_node(
        "sa",
        3600,
        json!({"apiVersion": "v1", "kind": "Node", "name": "n"}),
        400,
        "cannot bind token to object of type /v1, Kind=Node"
    )]
    #[tokio::test]
    async fn a_token_request_is_refused_as_the_api_server_refuses_it(
        #[case] account: &str,
        #[case] expiration: i64,
        #[case] bound: Value,
        #[case] code: u16,
        #[case] message: &str,
    ) {
        let (c, _) = cluster_with_pod();
        let e = token_request(
            &c.backend,
            "default",
            account,
            &token_request_body(expiration, bound),
        )
        .unwrap_err();
        assert_eq!(e.code, code, "{}", e.message);
        assert!(e.message.contains(message), "{}", e.message);
    }
}
