//! Bound ServiceAccount tokens: what the kubelet writes into a projected `serviceAccountToken`
//! volume, and the API server's `TokenReview` (`authentication.k8s.io/v1`, `tokenreviews`
//! create) that validates them (docs/upstream-facts.md F12.7).
//!
//! A token is JWT-shaped: its claims carry the audiences, expiry, ServiceAccount and the pod it
//! is bound to. It is not signed; instead the cluster records the id (`jti`) of every token it
//! issued, so a review authenticates only tokens this cluster wrote, as a real API server
//! authenticates only tokens its signing key signed.

use std::collections::BTreeSet;

use base64::Engine;
use serde_json::{Value, json};

use crate::cluster::{Cluster, ResourceRef};

/// The API server's own audience: a token request or review without audiences means this one.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// Ids of the tokens this cluster issued.
#[derive(Default)]
pub(crate) struct TokenRegistry {
    next: u64,
    issued: BTreeSet<String>,
}

/// What a token is for and whom it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRequest {
    pub namespace: String,
    pub service_account: String,
    /// Empty: the API server's audience ([`API_AUDIENCE`]).
    pub audiences: Vec<String>,
    pub expiration_seconds: u64,
    /// The pod the token is bound to: (name, uid).
    pub bound_pod: Option<(String, String)>,
}

impl Cluster {
    /// Issues a bound ServiceAccount token (what the kubelet asks the API server for a projected
    /// `serviceAccountToken` volume).
    pub fn issue_token(&self, req: &TokenRequest) -> String {
        let jti = {
            let mut reg = self.inner.tokens.lock().unwrap_or_else(|p| p.into_inner());
            reg.next += 1;
            let jti = format!("emulated-{}", reg.next);
            reg.issued.insert(jti.clone());
            jti
        };
        let now = self.now_unix();
        let audiences = if req.audiences.is_empty() {
            vec![API_AUDIENCE.to_string()]
        } else {
            req.audiences.clone()
        };
        let mut k8s = json!({
            "namespace": req.namespace,
            "serviceaccount": {"name": req.service_account},
        });
        if let Some((name, uid)) = &req.bound_pod {
            k8s["pod"] = json!({"name": name, "uid": uid});
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

    /// The `status` of a `TokenReview` of `token` for `audiences` (empty: the API server's),
    /// as the API server's ServiceAccount token authenticator answers it: the token must be
    /// one this cluster issued, share an audience with the review, and be bound to a pod that
    /// still exists with the same uid. Expiry is not checked: the kubelet model writes a
    /// projected token once per container start and does not rotate it as the real kubelet
    /// does (at 80 % of its lifetime), so a long-running container would otherwise hold a
    /// token no real one holds.
    pub fn review_token(&self, token: &str, audiences: &[String]) -> Value {
        let targets: Vec<String> = if audiences.is_empty() {
            vec![API_AUDIENCE.to_string()]
        } else {
            audiences.to_vec()
        };
        let refuse = |why: String| json!({"authenticated": false, "error": format!("[invalid bearer token, {why}]"), "user": {}});
        let Some(claims) = claims_of(token) else {
            return refuse("token is not a JWT".into());
        };
        let issued = claims
            .get("jti")
            .and_then(Value::as_str)
            .is_some_and(|jti| {
                self.inner
                    .tokens
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .issued
                    .contains(jti)
            });
        if !issued {
            return refuse("token was not issued by this cluster".into());
        }
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
        let k8s = claims.get("kubernetes.io").cloned().unwrap_or(json!({}));
        let str_at = |p: &str| k8s.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let (ns, sa) = (str_at("/namespace"), str_at("/serviceaccount/name"));
        let mut extra = serde_json::Map::new();
        if k8s.get("pod").is_some() {
            let (name, uid) = (str_at("/pod/name"), str_at("/pod/uid"));
            // A pod in its grace period still holds valid tokens; one that is gone does not.
            let live = self.get(&ResourceRef::pods(), Some(ns), name).ok();
            let live_uid = live
                .as_ref()
                .and_then(|p| p.pointer("/metadata/uid"))
                .and_then(Value::as_str);
            match live_uid {
                None => return refuse(format!("pods {name:?} not found")),
                Some(u) if u != uid => {
                    return refuse(format!(
                        "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
                    ));
                }
                Some(_) => {}
            }
            extra.insert(
                "authentication.kubernetes.io/pod-name".into(),
                json!([name]),
            );
            extra.insert("authentication.kubernetes.io/pod-uid".into(), json!([uid]));
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
                "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"), "system:authenticated"],
                "extra": extra,
            },
        })
    }
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
/// [`Cluster::review_token`].
pub(crate) fn token_review(cluster: &Cluster, api_version: &str, body: &[u8]) -> Value {
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
    use crate::cluster::ClusterConfig;

    fn cluster_with_pod() -> (Cluster, String) {
        let c = Cluster::new(ClusterConfig::default());
        let pod = c
            .create(
                &ResourceRef::pods(),
                Some("default"),
                json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            )
            .unwrap();
        let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
        (c, uid)
    }

    fn request(aud: &str, uid: &str) -> TokenRequest {
        TokenRequest {
            namespace: "default".into(),
            service_account: "sa".into(),
            audiences: vec![aud.into()],
            expiration_seconds: 3600,
            bound_pod: Some(("p".into(), uid.into())),
        }
    }

    #[tokio::test]
    async fn a_review_authenticates_a_token_of_its_audience_bound_to_a_live_pod_naming_the_pod() {
        let (c, uid) = cluster_with_pod();
        let token = c.issue_token(&request("gw", &uid));
        let st = c.review_token(&token, &["gw".into()]);
        assert_eq!(st["authenticated"], true, "{st}");
        assert_eq!(st["audiences"], json!(["gw"]));
        assert_eq!(st["user"]["username"], "system:serviceaccount:default:sa");
        assert_eq!(
            st["user"]["extra"]["authentication.kubernetes.io/pod-name"],
            json!(["p"])
        );
        assert_eq!(
            st["user"]["extra"]["authentication.kubernetes.io/pod-uid"],
            json!([uid])
        );
    }

    #[rstest::rstest]
    #[case::another_audience(
        "other",
        false,
        "token audiences [\"other\"] is invalid for the target audiences [\"gw\"]"
    )]
    #[case::a_deleted_pod("gw", true, "pods \"p\" not found")]
    #[tokio::test]
    async fn a_review_refuses_a_token_of_another_audience_or_of_a_pod_that_is_gone(
        #[case] aud: &str,
        #[case] delete_pod: bool,
        #[case] why: &str,
    ) {
        let (c, uid) = cluster_with_pod();
        let token = c.issue_token(&request(aud, &uid));
        if delete_pod {
            c.delete(
                &ResourceRef::pods(),
                Some("default"),
                "p",
                &crate::DeleteOptions {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .unwrap();
        }
        let st = c.review_token(&token, &["gw".into()]);
        assert_eq!(st["authenticated"], false, "{st}");
        assert_eq!(st["error"], format!("[invalid bearer token, {why}]"));
    }

    #[tokio::test]
    async fn a_review_refuses_a_token_this_cluster_did_not_issue() {
        let (c, uid) = cluster_with_pod();
        let _ = c.issue_token(&request("gw", &uid));
        // Another cluster's second token: well-formed, for the right audience and pod, but
        // with an id this cluster never issued.
        let other = Cluster::new(ClusterConfig::default());
        let _ = other.issue_token(&request("gw", &uid));
        let foreign = other.issue_token(&request("gw", &uid));
        for t in [foreign.as_str(), "not-a-token"] {
            assert_eq!(
                c.review_token(t, &["gw".into()])["authenticated"],
                false,
                "{t}"
            );
        }
    }
}
