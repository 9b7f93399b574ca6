//! A process container's volumes as host directories. What the kubelet keeps in memory for
//! model containers becomes files here: API-backed volumes (secret, configMap, projected,
//! downwardAPI) are written out at each container start, emptyDirs live as long as the pod,
//! and a claim's data lives under its uid, so it outlives pods and a new claim of the same
//! name starts empty (docs/upstream-facts.md F10.10).

use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};

use conformance_node::process::Bind;
use kube_emulator::shell::Volume;
use kube_emulator::{Cluster, Pointer, ResourceRef};
use serde_json::Value;

fn io(what: &str, path: &Path, e: std::io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

/// Copies an in-memory volume's tree to `dst` (replacing what was there).
pub(crate) fn export(volume: &Volume, dst: &Path) -> Result<(), String> {
    if dst.exists() {
        std::fs::remove_dir_all(dst).map_err(|e| io("cannot clear", dst, e))?;
    }
    std::fs::create_dir_all(dst).map_err(|e| io("cannot create", dst, e))?;
    let mut todo = vec![String::new()];
    while let Some(dir) = todo.pop() {
        for name in volume.list(&dir).unwrap_or_default() {
            let rel = format!("{dir}/{name}");
            let host = dst.join(rel.trim_start_matches('/'));
            match volume.read(&rel) {
                Some(data) => {
                    std::fs::write(&host, data).map_err(|e| io("cannot write", &host, e))?
                }
                None => {
                    std::fs::create_dir_all(&host).map_err(|e| io("cannot create", &host, e))?;
                    todo.push(rel);
                }
            }
        }
    }
    Ok(())
}

/// Who owns a pod's writable volumes: the pod's `fsGroup` (group-writable, setgid, as the
/// kubelet's volume ownership management leaves them).
fn own(path: &Path, fs_group: Option<u32>) -> Result<(), String> {
    if let Some(gid) = fs_group {
        chown(path, None, Some(gid)).map_err(|e| io("cannot chown", path, e))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o2775))
            .map_err(|e| io("cannot chmod", path, e))?;
    }
    Ok(())
}

fn dir(path: PathBuf, fs_group: Option<u32>) -> Result<PathBuf, String> {
    if !path.exists() {
        std::fs::create_dir_all(&path).map_err(|e| io("cannot create", &path, e))?;
        own(&path, fs_group)?;
    }
    Ok(path)
}

/// The binds of `container` (its entry in the pod spec) of `pod`, under the runtime's `state`
/// directory. Errors name the volume that cannot be provided.
pub(crate) fn binds(
    cluster: &Cluster,
    state: &Path,
    pod: &Value,
    container: &Value,
    ids: &super::ids::IdOffset,
) -> Result<Vec<Bind>, String> {
    let ns = pod
        .at("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let uid = pod
        .at("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("");
    let cname = container.get("name").and_then(Value::as_str).unwrap_or("");
    // Its host id (see `ids`).
    let fs_group = pod
        .at("/spec/securityContext/fsGroup")
        .and_then(Value::as_u64)
        .and_then(|g| u32::try_from(g).ok())
        .map(|g| ids.host(g, "fsGroup"))
        .transpose()?;
    let volumes = pod
        .at("/spec/volumes")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let pod_dir = state.join("pods").join(uid);
    let mut out = vec![];
    for m in container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(name), Some(path)) = (
            m.get("name").and_then(Value::as_str),
            m.get("mountPath").and_then(Value::as_str),
        ) else {
            continue;
        };
        let Some(vol) = volumes
            .iter()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(name))
        else {
            return Err(format!(
                "volume mount {name}: no volume of that name in the pod"
            ));
        };
        let api = kube_emulator::is_api_volume(vol);
        let mut host = if let Some(claim) = vol
            .at("/persistentVolumeClaim/claimName")
            .and_then(Value::as_str)
        {
            let pvc = cluster
                .get(
                    &ResourceRef::new("", "v1", "persistentvolumeclaims"),
                    Some(ns),
                    claim,
                )
                .map_err(|e| format!("volume {name}: claim {claim}: {e}"))?;
            let claim_uid = pvc
                .at("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or(claim);
            dir(state.join("claims").join(claim_uid), fs_group)?
        } else if api {
            // A fresh copy per container start: the kubelet's snapshot of the objects then.
            let host = pod_dir.join("api").join(cname).join(name);
            export(&cluster.empty_dir(uid, name), &host)?;
            host
        } else if vol.get("hostPath").is_some() {
            return Err(format!(
                "volume {name}: hostPath volumes are not given to containers that run as processes"
            ));
        } else {
            dir(pod_dir.join("empty").join(name), fs_group)?
        };
        if let Some(sub) = m
            .get("subPath")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            if sub.split('/').any(|c| c == "..") || sub.starts_with('/') {
                return Err(format!(
                    "volume mount {name}: subPath {sub:?} must be a relative path without '..'"
                ));
            }
            host = host.join(sub);
            if !host.exists() {
                dir(host.clone(), fs_group)?;
            }
        }
        let read_only = api || m.get("readOnly").and_then(Value::as_bool).unwrap_or(false);
        out.push(Bind {
            host,
            target: PathBuf::from(path),
            read_only,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_in_memory_volume_is_written_out_as_the_same_tree() {
        let v = Volume::new();
        v.write("/tls.crt", b"cert");
        v.write("/sub/ca.crt", b"ca");
        let dst = tempfile::tempdir().unwrap();
        let out = dst.path().join("vol");
        std::fs::create_dir_all(out.join("stale")).unwrap();
        export(&v, &out).unwrap();
        assert_eq!(std::fs::read(out.join("tls.crt")).unwrap(), b"cert");
        assert_eq!(std::fs::read(out.join("sub/ca.crt")).unwrap(), b"ca");
        assert!(
            !out.join("stale").exists(),
            "a new snapshot replaces the old one"
        );
    }
}
