//! Who an authenticated ServiceAccount token speaks for: the checks upstream's Kubernetes
//! ServiceAccount authenticator makes after the TokenReview said yes (docs/upstream-facts.md
//! F12.7), in its order and with its status codes and messages. Each refusal is final for the
//! supervisor: none of these codes is retried (F2.2).

use kube_emulator::{Cluster, ResourceRef};
use serde_json::Value;

use super::rpc::Status;
use conformance_upstream::{
    NAMESPACE, POD_SANDBOX_ID_ANNOTATION as POD_SANDBOX_ID, SA_TOKEN_AUDIENCE, SANDBOX_API_VERSION,
    SANDBOX_API_VERSION_V1ALPHA1, SANDBOX_GROUP, SANDBOX_ID_LABEL, SANDBOX_KIND, SANDBOX_PLURAL,
    SANDBOX_SERVICE_ACCOUNT, SANDBOX_VERSION,
};

const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";

fn denied(m: &str) -> Status {
    Status::new("PermissionDenied", m)
}

fn text<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

/// The sandbox id an authenticated TokenReview `status` names: the token's audience, its
/// ServiceAccount and namespace, its pod binding, the live pod with that uid, the pod's
/// sandbox-id annotation, and the owning Sandbox whose uid and sandbox-id label agree.
pub(super) fn sandbox_of(cluster: &Cluster, review: &Value) -> Result<String, Status> {
    let audiences = review["audiences"].as_array().cloned().unwrap_or_default();
    if !audiences.iter().any(|a| a == SA_TOKEN_AUDIENCE) {
        return Err(Status::unauthenticated("SA token audience not accepted"));
    }
    let username = text(review, "/user/username");
    let (namespace, account) = username
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
        .filter(|(ns, sa)| !ns.is_empty() && !sa.is_empty())
        .ok_or_else(|| denied("SA token username format not recognized"))?;
    if account != SANDBOX_SERVICE_ACCOUNT {
        return Err(denied(
            "SA token is not from the configured sandbox service account",
        ));
    }
    // The chart's workspace mode is "shared": one namespace (F12.7).
    if namespace != NAMESPACE {
        return Err(denied("SA token is not from an accepted sandbox namespace"));
    }
    let one = |key: &str| -> Result<String, Status> {
        let values = review
            .pointer("/user/extra")
            .and_then(|e| e.get(key))
            .and_then(Value::as_array)
            .ok_or_else(|| denied("SA token is not pod-bound"))?;
        match values.as_slice() {
            [v] if v.as_str().is_some_and(|s| !s.is_empty()) => {
                Ok(v.as_str().unwrap_or_default().to_string())
            }
            _ => Err(denied("SA token has invalid pod binding")),
        }
    };
    let (pod_name, pod_uid) = (one(POD_NAME_EXTRA)?, one(POD_UID_EXTRA)?);
    let pod = cluster
        .get(&ResourceRef::pods(), Some(namespace), &pod_name)
        .map_err(|_| Status::not_found("sandbox pod not found"))?;
    if text(&pod, "/metadata/uid") != pod_uid {
        return Err(denied("SA token pod UID mismatch"));
    }
    let sandbox_id = text(
        &pod,
        &format!(
            "/metadata/annotations/{}",
            POD_SANDBOX_ID.replace('/', "~1")
        ),
    );
    if sandbox_id.is_empty() {
        return Err(denied("pod is not bound to a sandbox identity"));
    }
    let owners: Vec<&Value> = pod
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|o| {
            text(o, "/kind") == SANDBOX_KIND
                && matches!(
                    text(o, "/apiVersion"),
                    SANDBOX_API_VERSION | SANDBOX_API_VERSION_V1ALPHA1
                )
        })
        .collect();
    let owner = match owners.as_slice() {
        [] => return Err(denied("pod is not controlled by an OpenShell Sandbox")),
        [o] => *o,
        _ => return Err(denied("pod has multiple OpenShell Sandbox owners")),
    };
    if owner.get("controller") != Some(&Value::Bool(true)) {
        return Err(denied("pod Sandbox ownerReference is not controlling"));
    }
    let (owner_name, owner_uid) = (text(owner, "/name"), text(owner, "/uid"));
    if owner_name.is_empty() || owner_uid.is_empty() {
        return Err(denied("pod Sandbox ownerReference is incomplete"));
    }
    let version = text(owner, "/apiVersion")
        .rsplit('/')
        .next()
        .unwrap_or(SANDBOX_VERSION);
    let sandboxes = ResourceRef::new(SANDBOX_GROUP, version, SANDBOX_PLURAL);
    let sandbox = cluster
        .get(&sandboxes, Some(namespace), owner_name)
        .map_err(|_| denied("sandbox owner not found"))?;
    if text(&sandbox, "/metadata/uid") != owner_uid {
        return Err(denied("sandbox owner UID mismatch"));
    }
    let label = text(
        &sandbox,
        &format!("/metadata/labels/{}", SANDBOX_ID_LABEL.replace('/', "~1")),
    );
    if label != sandbox_id {
        return Err(denied("sandbox owner ID mismatch"));
    }
    Ok(sandbox_id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_emulator::{BoundObject, ClusterConfig, Freshness, PatchKind, TokenRequest};
    use serde_json::json;

    fn sandboxes() -> ResourceRef {
        ResourceRef::new(SANDBOX_GROUP, SANDBOX_VERSION, SANDBOX_PLURAL)
    }

    /// Sandbox `sb-1` as the gateway and the controller leave it: its resource labelled with
    /// the id, its pod annotated with it and owned by the resource, running as the sandbox
    /// account. Returns the cluster and the pod's uid.
    fn sandbox_with_pod() -> (Cluster, String) {
        let c = Cluster::new(ClusterConfig {
            crds: vec![conformance_kube_models::agent_sandbox::crd()],
            ..ClusterConfig::default()
        });
        let ns = ResourceRef::new("", "v1", "namespaces");
        c.create(&ns, None, json!({"metadata": {"name": NAMESPACE}}))
            .unwrap();
        let sas = ResourceRef::new("", "v1", "serviceaccounts");
        for sa in [SANDBOX_SERVICE_ACCOUNT, "other"] {
            c.create(&sas, Some(NAMESPACE), json!({"metadata": {"name": sa}}))
                .unwrap();
        }
        let sb = c
            .create(
                &sandboxes(),
                Some(NAMESPACE),
                json!({"metadata": {"name": "demo", "labels": {SANDBOX_ID_LABEL: "sb-1"}},
                       "spec": {"podTemplate": {"spec": {"containers": [{"name": "agent", "image": "i"}]}}}}),
            )
            .unwrap();
        let pod = c
            .create(
                &ResourceRef::pods(),
                Some(NAMESPACE),
                json!({"metadata": {"name": "demo", "annotations": {POD_SANDBOX_ID: "sb-1"},
                                    "ownerReferences": [{"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                                        "name": "demo", "uid": sb["metadata"]["uid"], "controller": true}]},
                       "spec": {"serviceAccountName": SANDBOX_SERVICE_ACCOUNT,
                                "containers": [{"name": "agent", "image": "i"}]}}),
            )
            .unwrap();
        (c, pod["metadata"]["uid"].as_str().unwrap().to_string())
    }

    /// The review of a projected token of `account` for `audience`, bound to pod `demo`.
    fn review(c: &Cluster, account: &str, audience: &str, pod_uid: &str) -> Value {
        let token = c.issue_token(&TokenRequest {
            namespace: NAMESPACE.into(),
            service_account: account.into(),
            service_account_uid: c.service_account_uid(NAMESPACE, account),
            audiences: vec![audience.into()],
            expiration_seconds: 3600,
            bound: Some(BoundObject {
                kind: "Pod".into(),
                name: "demo".into(),
                uid: pod_uid.into(),
            }),
            freshness: Freshness::KubeletRotated,
        });
        c.review_token(&token, &[audience.into()])
    }

    fn merge(c: &Cluster, r: &ResourceRef, patch: Value) {
        c.patch(r, Some(NAMESPACE), "demo", PatchKind::Merge, &patch)
            .unwrap();
    }

    #[tokio::test]
    async fn a_token_of_the_sandbox_account_bound_to_its_pod_names_the_sandbox() {
        let (c, uid) = sandbox_with_pod();
        let r = review(&c, SANDBOX_SERVICE_ACCOUNT, SA_TOKEN_AUDIENCE, &uid);
        assert_eq!(sandbox_of(&c, &r).unwrap(), "sb-1");
    }

    #[derive(Clone, Copy, Debug)]
    enum Break {
        Audience,
        Account,
        Annotation,
        Owner,
        NotController,
        OwnerUid,
        Label,
        OwnerGone,
    }

    #[rstest::rstest]
    #[case::a_review_for_another_audience(
        Break::Audience,
        "Unauthenticated",
        "SA token audience not accepted"
    )]
    #[case::another_account(
        Break::Account,
        "PermissionDenied",
        "SA token is not from the configured sandbox service account"
    )]
    #[case::a_pod_without_the_annotation(
        Break::Annotation,
        "PermissionDenied",
        "pod is not bound to a sandbox identity"
    )]
    #[case::a_pod_no_sandbox_owns(
        Break::Owner,
        "PermissionDenied",
        "pod is not controlled by an OpenShell Sandbox"
    )]
    #[case::an_owner_that_is_not_the_controller(
        Break::NotController,
        "PermissionDenied",
        "pod Sandbox ownerReference is not controlling"
    )]
    #[case::an_owner_of_another_uid(
        Break::OwnerUid,
        "PermissionDenied",
        "sandbox owner UID mismatch"
    )]
    #[case::an_owner_labelled_with_another_id(
        Break::Label,
        "PermissionDenied",
        "sandbox owner ID mismatch"
    )]
    #[case::an_owner_that_is_gone(Break::OwnerGone, "PermissionDenied", "sandbox owner not found")]
    #[tokio::test]
    async fn a_token_that_does_not_lead_to_its_sandbox_is_refused_as_upstream_refuses_it(
        #[case] what: Break,
        #[case] code: &str,
        #[case] message: &str,
    ) {
        let (c, uid) = sandbox_with_pod();
        let pods = ResourceRef::pods();
        let (mut account, mut audience) = (SANDBOX_SERVICE_ACCOUNT, SA_TOKEN_AUDIENCE);
        // A pod whose owner is gone or another object is collected; these cases are the races
        // where the gateway reads the pod before the garbage collector is done with it: the
        // review came first, and a finalizer keeps the pod readable.
        let race = matches!(what, Break::OwnerUid | Break::OwnerGone);
        let early = race.then(|| {
            merge(
                &c,
                &pods,
                json!({"metadata": {"finalizers": ["test.openshell-conformance.io/hold"]}}),
            );
            review(&c, account, audience, &uid)
        });
        match what {
            Break::Audience => audience = "another",
            Break::Account => account = "other",
            Break::Annotation => merge(
                &c,
                &pods,
                json!({"metadata": {"annotations": {POD_SANDBOX_ID: null}}}),
            ),
            Break::Owner => merge(&c, &pods, json!({"metadata": {"ownerReferences": []}})),
            Break::NotController => {
                let mut owners =
                    c.get(&pods, Some(NAMESPACE), "demo").unwrap()["metadata"]["ownerReferences"]
                        .clone();
                owners[0]["controller"] = json!(false);
                merge(&c, &pods, json!({"metadata": {"ownerReferences": owners}}));
            }
            Break::OwnerUid => {
                let mut owners =
                    c.get(&pods, Some(NAMESPACE), "demo").unwrap()["metadata"]["ownerReferences"]
                        .clone();
                owners[0]["uid"] = json!("another-uid");
                merge(&c, &pods, json!({"metadata": {"ownerReferences": owners}}));
            }
            Break::Label => merge(
                &c,
                &sandboxes(),
                json!({"metadata": {"labels": {SANDBOX_ID_LABEL: "sb-2"}}}),
            ),
            Break::OwnerGone => {
                c.delete(
                    &sandboxes(),
                    Some(NAMESPACE),
                    "demo",
                    &kube_emulator::DeleteOptions::default(),
                )
                .unwrap();
            }
        }
        let r = early.unwrap_or_else(|| review(&c, account, audience, &uid));
        if matches!(what, Break::Audience) {
            // The API server answers a review for the token's own audience; the gateway then
            // finds its own audience missing.
            assert_eq!(r["authenticated"], true, "{r}");
        }
        let e = sandbox_of(&c, &r).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (code, message));
    }
}
