//! What the kubelet's volume plugins put into a pod's API-backed volumes: `secret`,
//! `configMap`, `downwardAPI` and `projected` (docs/upstream-facts.md F10.7). The files are a
//! snapshot taken when a container starts ([`populate_volumes`]); the real kubelet refreshes
//! them about once a minute, which no model relies on. `emptyDir` volumes stay empty, PVCs keep
//! their per-claim contents.

use crate::pointer::Pointer;
use base64::Engine;
use serde_json::{Value, json};

use crate::backend::Backend;
use crate::resources::ResourceRef;
use emulator_shell::Volume;

/// Why a pod's volumes could not be set up; `message` is the kubelet's `FailedMount` text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountFailure {
    pub volume: String,
    pub message: String,
}

impl std::fmt::Display for MountFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Files of a volume: (path inside it, contents).
type Files = Vec<(String, Vec<u8>)>;

fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.at(ptr).and_then(Value::as_str)
}

/// Whether the volume is one the kubelet fills from API objects (and mounts read-only).
pub fn is_api_volume(volume: &Value) -> bool {
    ["secret", "configMap", "downwardAPI", "projected"]
        .iter()
        .any(|k| volume.get(*k).is_some())
}

/// Fills every API-backed volume of `pod` (its per-pod directory, see
/// [`crate::Cluster::empty_dir`]) with the current contents of the objects it names. Nothing is
/// written unless every volume can be set up: the first missing non-optional Secret or
/// ConfigMap (or missing key of one named in `items`) is the error, as the kubelet reports it.
pub(crate) fn populate_volumes(cluster: &Backend, pod: &Value) -> Result<(), MountFailure> {
    let ns = s(pod, "/metadata/namespace").unwrap_or("default");
    let uid = s(pod, "/metadata/uid").unwrap_or_default();
    let mut filled: Vec<(String, Files)> = Vec::new();
    for v in pod
        .at("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(name) = s(v, "/name") else { continue };
        let files = if let Some(src) = v.get("secret") {
            let secret = s(src, "/secretName").unwrap_or_default();
            source_files(cluster, ns, name, Kind::Secret, secret, src)?
        } else if let Some(src) = v.get("configMap") {
            let cm = s(src, "/name").unwrap_or_default();
            source_files(cluster, ns, name, Kind::ConfigMap, cm, src)?
        } else if let Some(src) = v.get("downwardAPI") {
            downward_files(pod, src)
        } else if let Some(src) = v.get("projected") {
            let mut files = Vec::new();
            for source in src
                .get("sources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(p) = source.get("secret") {
                    let secret = s(p, "/name").unwrap_or_default();
                    files.extend(source_files(cluster, ns, name, Kind::Secret, secret, p)?);
                } else if let Some(p) = source.get("configMap") {
                    let cm = s(p, "/name").unwrap_or_default();
                    files.extend(source_files(cluster, ns, name, Kind::ConfigMap, cm, p)?);
                } else if let Some(p) = source.get("downwardAPI") {
                    files.extend(downward_files(pod, p));
                } else if let Some(p) = source.get("serviceAccountToken") {
                    let path = s(p, "/path").unwrap_or("token").to_string();
                    files.push((path, service_account_token(cluster, pod, p).into_bytes()));
                }
            }
            files
        } else {
            continue;
        };
        filled.push((name.to_string(), files));
    }
    for (name, files) in filled {
        let volume = cluster.empty_dir(uid, &name);
        clear(&volume);
        for (path, data) in files {
            volume.write(&path, &data);
        }
    }
    Ok(())
}

fn clear(volume: &Volume) {
    for entry in volume.list("/").unwrap_or_default() {
        volume.remove(&entry);
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Secret,
    ConfigMap,
}

impl Kind {
    fn resource(self) -> ResourceRef {
        match self {
            Kind::Secret => ResourceRef::new("", "v1", "secrets"),
            Kind::ConfigMap => ResourceRef::new("", "v1", "configmaps"),
        }
    }

    fn word(self) -> &'static str {
        match self {
            Kind::Secret => "secret",
            Kind::ConfigMap => "configmap",
        }
    }
}

/// The files of one Secret or ConfigMap source: every key, or with `items` the listed keys at
/// their paths. `defaultMode` and per-item `mode` are ignored (the shell has no permissions).
fn source_files(
    cluster: &Backend,
    ns: &str,
    volume: &str,
    kind: Kind,
    object: &str,
    src: &Value,
) -> Result<Files, MountFailure> {
    let optional = src
        .get("optional")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let fail = |message: String| MountFailure {
        volume: volume.to_string(),
        message: format!("MountVolume.SetUp failed for volume \"{volume}\" : {message}"),
    };
    let obj = match cluster.get(&kind.resource(), Some(ns), object) {
        Ok(o) => o,
        Err(_) if optional => return Ok(Vec::new()),
        Err(_) => return Err(fail(format!("{} \"{object}\" not found", kind.word()))),
    };
    let mut data: Files = Vec::new();
    let b64 = base64::engine::general_purpose::STANDARD;
    let encoded = match kind {
        Kind::Secret => vec!["data"],
        Kind::ConfigMap => vec!["binaryData"],
    };
    for field in encoded {
        for (k, v) in obj
            .get(field)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if let Some(bytes) = v.as_str().and_then(|t| b64.decode(t).ok()) {
                data.push((k.clone(), bytes));
            }
        }
    }
    // A Secret's `stringData` is folded into `data` on write by a real API server; a ConfigMap's
    // `data` holds text.
    let plain = match kind {
        Kind::Secret => "stringData",
        Kind::ConfigMap => "data",
    };
    for (k, v) in obj
        .get(plain)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if let Some(t) = v.as_str() {
            data.retain(|(key, _)| key != k);
            data.push((k.clone(), t.as_bytes().to_vec()));
        }
    }
    let Some(items) = src.get("items").and_then(Value::as_array) else {
        return Ok(data);
    };
    let mut out = Vec::new();
    for item in items {
        let (Some(key), Some(path)) = (s(item, "/key"), s(item, "/path")) else {
            continue;
        };
        match data.iter().find(|(k, _)| k == key) {
            Some((_, bytes)) => out.push((path.to_string(), bytes.clone())),
            None if optional => {}
            None => {
                return Err(fail(format!(
                    "{} \"{object}\" does not have key \"{key}\"",
                    kind.word()
                )));
            }
        }
    }
    Ok(out)
}

/// `downwardAPI` items with a `fieldRef` into the pod's metadata (labels and annotations as
/// `key="value"` lines, other fields as their value); `resourceFieldRef` is not modelled.
fn downward_files(pod: &Value, src: &Value) -> Files {
    let mut out = Vec::new();
    for item in src
        .get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(path), Some(field)) = (s(item, "/path"), s(item, "/fieldRef/fieldPath")) else {
            continue;
        };
        let text = match field {
            "metadata.labels" | "metadata.annotations" => {
                let map = pod
                    .at(&format!("/metadata/{}", &field["metadata.".len()..]))
                    .and_then(Value::as_object);
                map.into_iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}={}", json!(v.as_str().unwrap_or_default())))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            other => s(pod, &format!("/{}", other.replace('.', "/")))
                .unwrap_or_default()
                .to_string(),
        };
        out.push((path.to_string(), text.into_bytes()));
    }
    out
}

/// A bound ServiceAccount token as the kubelet writes it: issued by the cluster for the
/// volume's audience and expiry, bound to the pod and its ServiceAccount (`crate::tokens`).
fn service_account_token(cluster: &Backend, pod: &Value, src: &Value) -> String {
    let name = |p: &str| s(pod, p).unwrap_or_default().to_string();
    let namespace = s(pod, "/metadata/namespace").unwrap_or("default");
    let service_account = s(pod, "/spec/serviceAccountName").unwrap_or("default");
    cluster.issue_token(&crate::tokens::TokenRequest {
        namespace: namespace.to_string(),
        service_account: service_account.to_string(),
        service_account_uid: cluster.service_account_uid(namespace, service_account),
        audiences: s(src, "/audience")
            .map(str::to_string)
            .into_iter()
            .collect(),
        // The API server's default and minimum expiry is one hour (TokenRequest
        // `expirationSeconds`).
        expiration_seconds: src
            .get("expirationSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(3600),
        bound: Some(crate::tokens::BoundObject {
            kind: "Pod".into(),
            name: name("/metadata/name"),
            uid: name("/metadata/uid"),
        }),
        freshness: crate::registry::Freshness::KubeletRotated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Cluster, populate_volumes};

    fn pod(volumes: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "default", "uid": "u1",
                            "labels": {"app": "x"}},
               "spec": {"serviceAccountName": "sa", "volumes": volumes}})
    }

    fn cluster() -> Cluster {
        let c = Cluster::default();
        c.create(
            &ResourceRef::new("", "v1", "secrets"),
            Some("default"),
            json!({"metadata": {"name": "s"}, "data": {"a": "QQ==", "b": "Qg=="}}),
        )
        .unwrap();
        c.create(
            &ResourceRef::new("", "v1", "configmaps"),
            Some("default"),
            json!({"metadata": {"name": "cm"}, "data": {"x": "text"}, "binaryData": {"y": "AAE="}}),
        )
        .unwrap();
        c
    }

    fn file(c: &Cluster, vol: &str, path: &str) -> Option<Vec<u8>> {
        c.empty_dir("u1", vol).read(path)
    }

    #[tokio::test]
    async fn secret_and_config_map_volumes_hold_their_decoded_keys_or_the_selected_items() {
        let c = cluster();
        populate_volumes(
            &c,
            &pod(json!([
                {"name": "all", "secret": {"secretName": "s"}},
                {"name": "some", "secret": {"secretName": "s", "items": [{"key": "b", "path": "d/b.txt"}]}},
                {"name": "cm", "configMap": {"name": "cm"}},
                {"name": "pj", "projected": {"sources": [
                    {"secret": {"name": "s", "items": [{"key": "a", "path": "a"}]}},
                    {"configMap": {"name": "cm", "items": [{"key": "x", "path": "x"}]}},
                    {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                                               {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                    {"serviceAccountToken": {"path": "tok", "audience": "aud1", "expirationSeconds": 600}}]}},
                {"name": "opt", "secret": {"secretName": "absent", "optional": true}},
            ])),
        )
        .unwrap();
        assert_eq!(file(&c, "all", "a").as_deref(), Some(&b"A"[..]));
        assert_eq!(file(&c, "all", "b").as_deref(), Some(&b"B"[..]));
        assert_eq!(c.empty_dir("u1", "some").list("/").unwrap(), ["d"]);
        assert_eq!(file(&c, "some", "d/b.txt").as_deref(), Some(&b"B"[..]));
        assert_eq!(file(&c, "cm", "x").as_deref(), Some(&b"text"[..]));
        assert_eq!(file(&c, "cm", "y").as_deref(), Some(&[0u8, 1][..]));
        assert_eq!(file(&c, "pj", "a").as_deref(), Some(&b"A"[..]));
        assert_eq!(file(&c, "pj", "x").as_deref(), Some(&b"text"[..]));
        assert_eq!(file(&c, "pj", "labels").as_deref(), Some(&b"app=\"x\""[..]));
        assert_eq!(file(&c, "pj", "name").as_deref(), Some(&b"p"[..]));
        let token = String::from_utf8(file(&c, "pj", "tok").unwrap()).unwrap();
        let claims = token.split('.').nth(1).unwrap();
        let claims: Value = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(claims)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(claims["aud"], json!(["aud1"]));
        assert_eq!(claims["sub"], "system:serviceaccount:default:sa");
        assert_eq!(
            claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
            600
        );
        assert_eq!(c.empty_dir("u1", "opt").list("/").unwrap().len(), 0);
    }

    #[tokio::test]
    async fn a_missing_secret_config_map_or_key_fails_the_set_up_as_the_kubelet_says_and_writes_nothing()
     {
        let c = cluster();
        let err = populate_volumes(
            &c,
            &pod(json!([
                {"name": "ok", "secret": {"secretName": "s"}},
                {"name": "tls", "secret": {"secretName": "absent"}},
            ])),
        )
        .unwrap_err();
        assert_eq!(err.volume, "tls");
        assert_eq!(
            err.message,
            "MountVolume.SetUp failed for volume \"tls\" : secret \"absent\" not found"
        );
        assert!(c.empty_dir("u1", "ok").list("/").unwrap().is_empty());
        let err = populate_volumes(
            &c,
            &pod(json!([{"name": "c", "configMap": {"name": "nope"}}])),
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "MountVolume.SetUp failed for volume \"c\" : configmap \"nope\" not found"
        );
        let err = populate_volumes(
            &c,
            &pod(json!([{"name": "k", "secret": {"secretName": "s", "items": [{"key": "zz", "path": "zz"}]}}])),
        )
        .unwrap_err();
        assert!(
            err.message
                .ends_with("secret \"s\" does not have key \"zz\""),
            "{err}"
        );
    }
}
