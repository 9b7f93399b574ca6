use super::*;

type W = Writer;

impl Writer {
    fn entry(self, num: u64, k: &str, v: &[u8]) -> Self {
        self.msg(num, W::default().str(1, k).bytes(2, v))
    }
}

fn envelope(api_version: &str, kind: &str, raw: W) -> Vec<u8> {
    let unknown = W::default()
        .msg(1, W::default().str(1, api_version).str(2, kind))
        .msg(2, raw)
        .str(3, "")
        .str(4, "");
    let mut out = MAGIC.to_vec();
    out.extend(unknown.0);
    out
}

/// ObjectMeta as Go writes it: every non-pointer string, even empty, and a zero Time.
fn meta(name: &str) -> W {
    W::default()
        .str(1, name)
        .str(2, "")
        .str(3, "")
        .str(4, "")
        .str(5, "")
        .str(6, "")
        .int(7, 0)
        .msg(8, W::default().int(1, 0).int(2, 0))
}

#[test]
fn a_namespace_decodes_to_the_json_kubectl_meant() {
    let ns = W::default()
        .msg(1, meta("team-a"))
        .msg(2, W::default())
        .msg(3, W::default().str(1, ""));
    let v = decode(&envelope("v1", "Namespace", ns)).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "team-a", "generation": 0}, "spec": {}, "status": {}})
    );
}

#[test]
fn secret_bytes_become_base64_and_configmap_data_a_map() {
    let s = W::default()
        .msg(1, meta("creds"))
        .entry(2, "token", b"s3cr3t")
        .str(3, "Opaque");
    let v = decode(&envelope("v1", "Secret", s)).unwrap();
    assert_eq!(v["data"], json!({"token": "czNjcjN0"}));
    assert_eq!(v["type"], "Opaque");
    let cm = W::default()
        .msg(1, meta("cfg"))
        .entry(2, "k", b"v")
        .entry(2, "empty", b"");
    let v = decode(&envelope("v1", "ConfigMap", cm)).unwrap();
    assert_eq!(v["data"], json!({"k": "v", "empty": ""}));
}

#[test]
fn a_deployment_keeps_zero_replicas_ports_int_or_string_and_quantities() {
    let container = W::default()
        .str(1, "web")
        .str(2, "nginx")
        .msg(6, W::default().int(3, 80).str(4, "TCP"))
        .msg(
            8,
            W::default().entry(1, "cpu", &W::default().str(1, "100m").0),
        );
    let tpl = W::default()
        .msg(1, meta(""))
        .msg(2, W::default().msg(2, container));
    let rolling = W::default()
        .msg(1, W::default().int(1, 0).int(2, 1))
        .msg(2, W::default().int(1, 1).str(3, "25%"));
    let spec = W::default()
        .int(1, 0)
        .msg(2, W::default().entry(1, "app", b"web"))
        .msg(3, tpl)
        .msg(4, W::default().str(1, "RollingUpdate").msg(2, rolling));
    let d = W::default().msg(1, meta("web")).msg(2, spec);
    let v = decode(&envelope("apps/v1", "Deployment", d)).unwrap();
    assert_eq!(v["apiVersion"], "apps/v1");
    assert_eq!(v["spec"]["replicas"], 0);
    assert_eq!(v["spec"]["selector"]["matchLabels"], json!({"app": "web"}));
    let c = &v["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}])
    );
    assert_eq!(c["resources"]["limits"], json!({"cpu": "100m"}));
    assert_eq!(
        v["spec"]["strategy"]["rollingUpdate"],
        json!({"maxUnavailable": 1, "maxSurge": "25%"})
    );
    // The template's zero creationTimestamp is left out, as Go's JSON does.
    assert!(
        v["spec"]["template"]["metadata"]
            .get("creationTimestamp")
            .is_none()
    );
}

#[test]
fn set_times_and_repeated_strings_read_like_the_json_form() {
    let m = W::default()
        .str(1, "x")
        .msg(8, W::default().int(1, 1_700_000_000))
        .str(14, "a")
        .str(14, "b");
    let ns = W::default().msg(1, m);
    let v = decode(&envelope("v1", "Namespace", ns)).unwrap();
    assert_eq!(v["metadata"]["creationTimestamp"], "2023-11-14T22:13:20Z");
    assert_eq!(v["metadata"]["finalizers"], json!(["a", "b"]));
}

#[test]
fn bodies_that_are_not_enveloped_protobuf_are_refused_with_a_reason() {
    let e = decode(b"{\"kind\":\"Namespace\"}").unwrap_err();
    assert_eq!(e.code, 400);
    assert!(e.message.contains("k8s\\0 prefix"), "{}", e.message);
    let e = decode(&envelope("v1", "Nope", W::default())).unwrap_err();
    assert!(
        e.message
            .contains("no protobuf message is known for Nope in \"v1\""),
        "{}",
        e.message
    );
    let e = decode(&envelope("v1", "Namespace", W::default().int(99, 1))).unwrap_err();
    assert!(
        e.message
            .contains("field 99 of api.core.v1.Namespace is not known"),
        "{}",
        e.message
    );
    let mut truncated = envelope("v1", "Namespace", W::default().msg(1, meta("x")));
    truncated.truncate(truncated.len() - 3);
    assert!(decode(&truncated).is_err());
    let json = json_body("application/json", Bytes::from_static(b"{}")).unwrap();
    assert_eq!(&json[..], b"{}");
}

#[test]
fn every_kind_kubectl_creates_has_a_message() {
    for (av, kind) in [
        ("v1", "Namespace"),
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "Service"),
        ("v1", "ServiceAccount"),
        ("v1", "Pod"),
        ("apps/v1", "Deployment"),
        ("batch/v1", "Job"),
        ("batch/v1", "CronJob"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview"),
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview"),
        ("meta.k8s.io/v1", "DeleteOptions"),
    ] {
        assert!(
            index().contains_key(message_name(av, kind).as_str()),
            "{av} {kind}"
        );
    }
}

#[test]
fn durations_read_like_go() {
    assert_eq!(go_duration(90_000_000_000), "1m30s");
    assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
    assert_eq!(go_duration(1_500_000_000), "1.5s");
}

#[test]
fn answers_are_json_when_the_accept_header_allows_it_and_406_otherwise() {
    let accept = |v: Option<&str>| {
        let mut h = http::HeaderMap::new();
        if let Some(v) = v {
            h.insert(http::header::ACCEPT, v.parse().unwrap());
        }
        negotiate(&h)
    };
    assert!(accept(None).is_ok());
    assert!(accept(Some("application/vnd.kubernetes.protobuf, */*")).is_ok());
    assert!(accept(Some("application/vnd.kubernetes.protobuf,application/json")).is_ok());
    assert!(
        accept(Some(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ))
        .is_ok()
    );
    let e = accept(Some("application/vnd.kubernetes.protobuf")).unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (406, "NotAcceptable"));
    let e = accept(Some(
        "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    ))
    .unwrap_err();
    assert_eq!(e.code, 406);
}

#[test]
fn delete_options_stamped_with_a_resource_group_version_decode_as_meta_v1() {
    // client-go sends the body of a delete as DeleteOptions with the resource's group version
    // (helm's uninstall does, for its release Secret).
    let opts = W::default().int(1, 0).str(4, "Background");
    let v = decode(&envelope("v1", "DeleteOptions", opts)).unwrap();
    assert_eq!(v["propagationPolicy"], "Background", "{v}");
    assert_eq!(v["gracePeriodSeconds"], 0, "{v}");
    assert_eq!(v["kind"], "DeleteOptions");
}
