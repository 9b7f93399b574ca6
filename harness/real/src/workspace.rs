//! Reading a sandbox's workspace without the sandbox's shell: through the Kubernetes API, never
//! the gateway, so it works while the gateway is down. While a container of the sandbox pod that
//! mounts the workspace claim (`workspace-<cr>`, docs/upstream-facts.md F3.2, F3.6) runs, the
//! harness execs `cat` in it: the same volume, without a pod to start. Otherwise (the sandbox
//! stopped, failed, being replaced) a short-lived reader pod mounts the claim read-only on the
//! node that holds it (the claim is ReadWriteOnce) and the harness execs `cat` there.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};

use super::{gateway, kexec, pins};
use conformance_core::target::{TargetError, TargetResult, count_start_marks};
use conformance_core::timeline::{Event, MAIN_PROCESS_STARTS_KEY, Recorder};

/// The image of the reader pod when the sandbox pod is gone: the chart's default sandbox image
/// (`default_image` in the rendered gateway config, docs/upstream-facts.md F5.8). Normally the
/// reader takes the image of the sandbox pod itself, which is on that node; either way it is
/// pulled only if not present, so a read needs no registry.
pub(crate) const READER_IMAGE: &str = "ghcr.io/nvidia/openshell-community/sandboxes/base:latest";

/// The exit code the reader uses for "no such file".
const ABSENT: i32 = 44;

fn reader_name(cr: &str) -> String {
    let mut n = format!("{cr}-ws-reader");
    n.truncate(63);
    n.trim_end_matches('-').to_string()
}

/// Reads `path` (relative to the workspace root) from the workspace of sandbox CR `cr`.
/// None when the file does not exist.
pub(crate) async fn read(
    client: &Client,
    namespace: &str,
    cr: &str,
    path: &str,
    run_id: &str,
    deadline: Duration,
) -> TargetResult<Option<String>> {
    let rel = path.trim_start_matches('/');
    if rel.is_empty() || rel.split('/').any(|c| c == "..") {
        return Err(TargetError::infra(format!(
            "read workspace: `{path}` must be a path inside the workspace"
        )));
    }
    let claim = conformance_core::target::workspace_pvc_name(cr);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let sandbox_pod = pods.get_opt(cr).await.ok().flatten();
    // A reader pod costs a pod start (about a second on a real node) per read; a running
    // container that already mounts the claim answers at once.
    if let Some((container, mount)) = sandbox_pod
        .as_ref()
        .and_then(|p| running_mount_of(p, &claim))
    {
        match cat(client, namespace, cr, &container, &mount, rel).await {
            Ok(found) => return Ok(found),
            // The container may have stopped between the get and the exec.
            Err(e) => tracing::debug!(
                pod = cr,
                error = %conformance_core::error::one_line(&e),
                "workspace read in the sandbox pod failed; reading through a reader pod"
            ),
        }
    }
    // The node that holds the claim: the sandbox pod's, else the scheduler's choice recorded
    // on the claim; a RWO volume can be shared only by pods on that node.
    let image = sandbox_pod
        .as_ref()
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_else(|| READER_IMAGE.to_string());
    let node = sandbox_pod.and_then(|p| p.spec.and_then(|s| s.node_name));
    let node = match node {
        Some(n) => Some(n),
        None => Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
            .get_opt(&claim)
            .await
            .ok()
            .flatten()
            .and_then(|c| c.metadata.annotations)
            .and_then(|a| a.get("volume.kubernetes.io/selected-node").cloned()),
    };
    let name = reader_name(cr);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {pins::RUN_LABEL: run_id}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 0,
            "nodeName": node,
            "containers": [{"name": "reader", "image": image, "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", "600"],
                            "volumeMounts": [{"name": "workspace", "mountPath": "/workspace", "readOnly": true}]}],
            "volumes": [{"name": "workspace", "persistentVolumeClaim": {"claimName": claim, "readOnly": true}}]
        }
    }))
    .expect("static pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .map_err(|e| {
            TargetError::infra_from(format!("read workspace: create reader pod {name}"), e)
        })?;
    let result = async {
        gateway::wait_until(
            &format!("read workspace: reader pod {name} running"),
            deadline,
            gateway::POLL,
            gateway::Wake::on(pods.clone(), gateway::named(&name)),
            || async {
                let p = pods.get(&name).await.map_err(|e| {
                    TargetError::infra_from(format!("read workspace: get reader pod {name}"), e)
                })?;
                let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
                Ok(((phase == "Running").then_some(()), format!("phase={phase}")))
            },
        )
        .await?;
        cat(client, namespace, &name, "reader", "/workspace", rel).await
    }
    .await;
    // Always remove the reader, whatever happened.
    let _ = pods
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await;
    result
}

/// `cat`s `rel` under `mount` in a container: its content, or None when there is no such file.
async fn cat(
    client: &Client,
    namespace: &str,
    pod: &str,
    container: &str,
    mount: &str,
    rel: &str,
) -> TargetResult<Option<String>> {
    let argv: Vec<String> = vec![
        "sh".into(),
        "-c".into(),
        format!("if [ -e \"$1\" ]; then cat \"$1\"; else exit {ABSENT}; fi"),
        "sh".into(),
        format!("{}/{rel}", mount.trim_end_matches('/')),
    ];
    let out = kexec::exec(client, namespace, pod, container, &argv).await?;
    match out.exit_code {
        0 => Ok(Some(out.stdout)),
        ABSENT => Ok(None),
        code => Err(TargetError::infra(format!(
            "read workspace: cat {rel} in {pod}/{container} exited {code}: {}",
            out.stderr.trim()
        ))),
    }
}

/// The running container of `pod` that mounts the claim `claim` whole (no subPath), and where:
/// (container, mount path). None unless the pod runs, is not being deleted, and that
/// container's status says it is running.
fn running_mount_of(pod: &Pod, claim: &str) -> Option<(String, String)> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Running") {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let volume = spec.volumes.iter().flatten().find(|v| {
        v.persistent_volume_claim
            .as_ref()
            .is_some_and(|c| c.claim_name == claim)
    })?;
    spec.containers.iter().find_map(|c| {
        let mount =
            c.volume_mounts.iter().flatten().find(|m| {
                m.name == volume.name && m.sub_path.as_deref().is_none_or(str::is_empty)
            })?;
        let running =
            status.container_statuses.iter().flatten().any(|s| {
                s.name == c.name && s.state.as_ref().is_some_and(|st| st.running.is_some())
            });
        running.then(|| (c.name.clone(), mount.mount_path.clone()))
    })
}

/// Records the main-process starts of `sandbox` from a read of the workload's start marks (one
/// `start` line per start; no file yet is 0 starts): the real target's only view of starts
/// (see `RealTarget::observe`). A read that failed records the count as not known (`null`),
/// never as 0, with the reason as a note.
pub(crate) fn record_start_marks(
    rec: &Recorder,
    sandbox: &str,
    read: TargetResult<Option<String>>,
) {
    let value = match read {
        Ok(content) => serde_json::json!(count_start_marks(content.as_deref())),
        Err(e) => {
            rec.record(Event::Note {
                message: format!(
                    "main-process starts of {sandbox} not known: {}",
                    conformance_core::error::one_line(&e)
                ),
            });
            serde_json::Value::Null
        }
    };
    rec.record(Event::Observation {
        key: MAIN_PROCESS_STARTS_KEY.into(),
        subject: Some(sandbox.to_string()),
        value,
    });
}
