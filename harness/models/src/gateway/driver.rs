//! The Kubernetes compute driver (docs/upstream-facts.md section 3): renders and creates the Sandbox CR,
//! patches `operatingMode` to stop and start (F3.7), deletes with preconditions, and watches
//! the CRs and the namespace's Events (F3.9) to feed the phase rules. Where the topology says so
//! (reported for 0.1.x) it also owns a sandbox's own supervisor pod and the workload pod's
//! scheduling gate. The pod's shape per placement comes from [`crate::placement`].

use kube_emulator::Pointer;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::phase::Snapshot;
use super::state::Gateway;
use super::store::SandboxRecord;
use crate::model::{SANDBOX_IMAGE_REPO, SUPERVISOR_IMAGE_REPO};
use crate::placement::{self, env, supervisor_pod_name};
use crate::spec::backoff;
use conformance_core::phase::Phase;
use conformance_upstream::{
    BOOTSTRAP_FAILED_EVENT, CLIENT_TLS_VOLUME, SANDBOX_API_VERSION, SANDBOX_SERVICE_ACCOUNT,
    SANDBOX_VERSION, SUPERVISOR_BIN,
};
use kube_emulator::{ApiError, DeleteOptions, ListOptions, PatchKind, ResourceRef};

fn sandboxes() -> ResourceRef {
    conformance_kube_models::agent_sandbox::sandboxes_in(SANDBOX_VERSION)
}

fn events() -> ResourceRef {
    ResourceRef::new("", "v1", "events")
}

/// The main process spec the supervisor launches (`OPENSHELL_MAIN_PROCESS_SPEC`, F3.5). With no
/// command upstream runs `/bin/bash -l`; the model idles instead (no TTY in the emulator).
pub(crate) fn main_process_spec(command: Option<&Vec<String>>) -> String {
    json!({"version": 1, "command": command, "tty": false}).to_string()
}

/// The Sandbox CR for a record (F3.2-F3.6, F3.10; gated topologies as reported).
pub(crate) fn render_sandbox(gw: &Gateway, rec: &SandboxRecord) -> Value {
    let m = &gw.model;
    let v = &m.version;
    let sandbox_image = format!("{SANDBOX_IMAGE_REPO}:latest");
    let supervisor_image = format!("{SUPERVISOR_IMAGE_REPO}:{v}");
    let topo = &m.topology;
    let shape = placement::sandbox_pod(topo, rec, &supervisor_image);
    let mut agent_env = vec![
        (
            "OPENSHELL_MAIN_PROCESS_SPEC",
            main_process_spec(rec.command.as_ref()),
        ),
        ("OPENSHELL_SANDBOX_ID", rec.id.clone()),
        ("OPENSHELL_SANDBOX", rec.name.clone()),
    ];
    agent_env.extend(shape.workload_env);
    let mut agent_cmd = vec![SUPERVISOR_BIN.to_string()];
    agent_cmd.extend(shape.workload_args);
    agent_cmd.extend(["--workdir".to_string(), "/sandbox".to_string()]);
    let mut agent_mounts = vec![
        json!({"name": "openshell-supervisor-bin", "mountPath": "/opt/openshell/bin", "readOnly": true}),
        json!({"name": "workspace", "mountPath": "/sandbox"}),
    ];
    agent_mounts.extend(shape.workload_mounts);
    let mut volumes = vec![
        json!({"name": "openshell-supervisor-bin", "emptyDir": {}}),
        json!({"name": "openshell-sa-token", "projected": {"defaultMode": 256, "sources": [
            {"serviceAccountToken": {"audience": "openshell-gateway", "expirationSeconds": 3600, "path": "token"}}]}}),
    ];
    volumes.extend(shape.volumes);
    let mut init = vec![
        json!({"name": "openshell-supervisor-install", "image": supervisor_image,
               "command": ["/openshell-sandbox", "copy-self", SUPERVISOR_BIN],
               "volumeMounts": [{"name": "openshell-supervisor-bin", "mountPath": "/opt/openshell/bin"}]}),
    ];
    init.extend(shape.init);
    init.push(json!({"name": "workspace-init", "image": sandbox_image,
        "command": ["sh", "-c", "if [ ! -f /workspace-pvc/.workspace-initialized ]; then touch /workspace-pvc/.workspace-initialized; fi"],
        "volumeMounts": [{"name": "workspace", "mountPath": "/workspace-pvc"}]}));
    let mut containers = vec![json!({
        "name": topo.workload.container,
        "image": sandbox_image,
        "command": agent_cmd,
        "env": env(&agent_env),
        "volumeMounts": agent_mounts,
    })];
    containers.extend(shape.containers);
    bootstrap_material(gw, topo, &mut volumes, &mut containers);
    let mut pod_spec = json!({
        "serviceAccountName": SANDBOX_SERVICE_ACCOUNT,
        "automountServiceAccountToken": false,
        // F1.14: kubelet must not replace the canonical main-process generation.
        "restartPolicy": "Never",
        "securityContext": {"fsGroup": 1000},
        "initContainers": init,
        "containers": containers,
        "volumes": volumes,
    });
    if shape.share_process_namespace {
        pod_spec["shareProcessNamespace"] = json!(true);
    }
    if let Some(gate) = topo.scheduling_gate() {
        // Reported (#3144): the workload pod waits until bootstrap material is ready.
        pod_spec["schedulingGates"] = json!([{"name": gate}]);
    }
    let labels = json!({
        "openshell.ai/sandbox-id": rec.id, "openshell.ai/sandbox-name": rec.name,
        "openshell.ai/sandbox-workspace": "default", "openshell.ai/managed-by": "openshell",
        "openshell.ai/gateway-id": "openshell",
    });
    json!({
        "apiVersion": SANDBOX_API_VERSION,
        "kind": "Sandbox",
        "metadata": {
            "name": rec.cr_name,
            "namespace": gw.namespace,
            "labels": labels,
            "annotations": {"openshell.ai/sandbox-id": rec.id, "openshell.ai/sandbox-name": rec.name,
                            "openshell.ai/sandbox-workspace": "default"},
        },
        "spec": {
            "podTemplate": {
                "metadata": {"annotations": {"openshell.io/sandbox-id": rec.id}},
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [{"metadata": {"name": "workspace"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}}],
        },
    })
}

/// Where the supervisor that talks to the gateway finds the client TLS material (F12.8). In
/// sidecar, upstream's `openshell-network-init` copies it from there into the shared
/// `/etc/openshell-tls/proxy/client` for the non-root network container; the model mounts it
/// into the network container directly, which reads the same files.
const CLIENT_TLS_DIR: &str = "/etc/openshell-tls/client";

/// What the supervisor that talks to the gateway needs to authenticate and to check the
/// gateway (F3.5): the projected token mounted into the combined `agent` container (the
/// sidecar's network container has it already), and, when the gateway's config names a client
/// TLS Secret, that Secret mounted with `OPENSHELL_TLS_CA`, `_CERT` and `_KEY` pointing into
/// it (mode 0400 combined, 0440 sidecar).
fn bootstrap_material(
    gw: &Gateway,
    topo: &conformance_core::topology::Topology,
    volumes: &mut Vec<Value>,
    containers: &mut [Value],
) {
    use conformance_core::topology::SupervisorPlacement;
    let (boundary, mode, with_token) = match &topo.supervisor {
        SupervisorPlacement::WorkloadContainer => (&topo.workload.container, 0o400, true),
        SupervisorPlacement::SidecarContainer { container } => (container, 0o440, false),
        _ => return,
    };
    let Some(c) = containers
        .iter_mut()
        .find(|c| c["name"].as_str() == Some(boundary.as_str()))
    else {
        return;
    };
    let push = |c: &mut Value, key: &str, v: Value| {
        if !c[key].is_array() {
            c[key] = json!([]);
        }
        c[key].as_array_mut().expect("an array").push(v);
    };
    if with_token {
        push(
            c,
            "volumeMounts",
            json!({"name": "openshell-sa-token", "mountPath": "/var/run/secrets/openshell", "readOnly": true}),
        );
    }
    let Some(secret) = gw.client_tls_secret() else {
        return;
    };
    push(
        c,
        "volumeMounts",
        json!({"name": CLIENT_TLS_VOLUME, "mountPath": CLIENT_TLS_DIR, "readOnly": true}),
    );
    for (k, file) in [
        ("OPENSHELL_TLS_CA", "ca.crt"),
        ("OPENSHELL_TLS_CERT", "tls.crt"),
        ("OPENSHELL_TLS_KEY", "tls.key"),
    ] {
        push(
            c,
            "env",
            json!({"name": k, "value": format!("{CLIENT_TLS_DIR}/{file}")}),
        );
    }
    volumes.push(json!({"name": CLIENT_TLS_VOLUME,
        "secret": {"secretName": secret, "defaultMode": mode}}));
}

pub(crate) fn create_sandbox(gw: &Gateway, rec: &SandboxRecord) -> Result<(), ApiError> {
    gw.cluster
        .create(&sandboxes(), Some(&gw.namespace), render_sandbox(gw, rec))
        .map(|_| ())
}

/// F3.7: merge-patch `spec.operatingMode` (v1beta1).
pub(crate) fn set_operating_mode(gw: &Gateway, cr: &str, mode: &str) -> Result<(), ApiError> {
    gw.cluster
        .patch(
            &sandboxes(),
            Some(&gw.namespace),
            cr,
            PatchKind::Merge,
            &json!({"spec": {"operatingMode": mode}}),
        )
        .map(|_| ())
}

/// Stop (F3.7): patch Suspended, poll 250 ms → 2 s until `Suspended=True`, deadline 60 s.
/// `suspend` false (defect `stop-never-completes`): the patch is skipped, so the stop times out.
pub(crate) async fn stop_sandbox(gw: &Arc<Gateway>, name: &str, suspend: bool) {
    let Some(cr) = gw.core().store.get(name).map(|r| r.cr_name.clone()) else {
        return;
    };
    if suspend && let Err(e) = set_operating_mode(gw, &cr, "Suspended") {
        gw.log(
            "WARN",
            "openshell_driver_kubernetes",
            "Failed to stop sandbox",
            &[("sandbox_name", name), ("error", &e.message)],
        );
    }
    let t = &gw.model.timings;
    let deadline = tokio::time::Instant::now() + t.stop_deadline;
    let mut n = 0;
    loop {
        let suspended = gw
            .cluster
            .get(&sandboxes(), Some(&gw.namespace), &cr)
            .map(|o| Snapshot::from_cr(&o).suspended)
            .unwrap_or(true);
        if suspended {
            let mut core = gw.core();
            gw.commit(&mut core, name, |r, rec| r.finish_stop(rec));
            drop(core);
            gw.wake.notify_one();
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            let mut core = gw.core();
            gw.commit(&mut core, name, |r, rec| {
                if rec.phase == Phase::Stopping {
                    r.set_error(
                        rec,
                        "StopFailed",
                        "timed out waiting for the sandbox to be suspended",
                    );
                }
            });
            return;
        }
        n += 1;
        tokio::time::sleep(backoff(t.stop_poll_initial, t.stop_poll_cap, n)).await;
    }
}

fn has_gate(pod: &Value) -> bool {
    pod.at("/spec/schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty())
}

/// Delete (F3.8): the CR goes, GC takes the pod and PVC. Returns true if it was already gone.
/// Reported (bug 2, 0.1.6) and defect `gate-and-pvc-leaked-on-failure`: a sandbox whose workload
/// pod is still gated is deleted with orphan propagation, leaving that pod and its PVC behind.
pub(crate) fn delete_sandbox(gw: &Gateway, rec: &SandboxRecord) -> bool {
    let ns = Some(gw.namespace.as_str());
    let topo = &gw.model.topology;
    let gated_pod = gw
        .cluster
        .get(&ResourceRef::pods(), ns, &rec.cr_name)
        .ok()
        .is_some_and(|p| has_gate(&p));
    if let Some(sup) = supervisor_pod_name(topo, &rec.cr_name) {
        let _ = gw
            .cluster
            .delete(&ResourceRef::pods(), ns, &sup, &DeleteOptions::default());
    }
    let orphan =
        gw.model.behaviour.leak_gate_and_pvc && topo.scheduling_gate().is_some() && gated_pod;
    let opts = DeleteOptions {
        propagation_policy: Some(if orphan { "Orphan" } else { "Background" }.into()),
        ..Default::default()
    };
    match gw.cluster.delete(&sandboxes(), ns, &rec.cr_name, &opts) {
        Ok(_) => false,
        Err(e) => e.code == 404,
    }
}

/// Every change in the cluster (and a periodic tick) runs one reconcile pass: driver snapshots,
/// supervisor events, the 0.1.x supervisor pods and gates, and deletions.
pub(crate) async fn reconcile_loop(gw: Arc<Gateway>) {
    let mut changes = gw.cluster.subscribe();
    loop {
        reconcile(&gw);
        tokio::select! {
            biased;
            _ = changes.changed() => {}
            _ = gw.wake.notified() => {}
            _ = tokio::time::sleep(gw.model.timings.reconcile_tick) => {}
        }
    }
}

/// The objects by name, shared with the store: a reconcile pass runs on every change to the
/// cluster, and copying each listed object was most of its cost.
fn by_name(items: Vec<Arc<Value>>) -> BTreeMap<String, Arc<Value>> {
    items
        .into_iter()
        .filter_map(|o| {
            let n = o.at("/metadata/name")?.as_str()?.to_string();
            Some((n, o))
        })
        .collect()
}

pub(crate) fn reconcile(gw: &Arc<Gateway>) {
    let ns = Some(gw.namespace.as_str());
    let lo = ListOptions::default();
    let crs = by_name(
        gw.cluster
            .list_shared(&sandboxes(), ns, &lo)
            .map(|r| r.0)
            .unwrap_or_default(),
    );
    let pods = by_name(
        gw.cluster
            .list_shared(&ResourceRef::pods(), ns, &lo)
            .map(|r| r.0)
            .unwrap_or_default(),
    );
    // Events pile up over a case; only the bootstrap failures are read, in place.
    let failures: Vec<(String, String, String)> = gw
        .cluster
        .scan(&events(), ns, &lo, |e| {
            if e.get("reason").and_then(Value::as_str) != Some(BOOTSTRAP_FAILED_EVENT) {
                return None;
            }
            Some((
                e.at("/involvedObject/name")?.as_str()?.to_string(),
                e.at("/metadata/name")?.as_str()?.to_string(),
                e.get("message")?.as_str()?.to_string(),
            ))
        })
        .unwrap_or_default();
    let topo = &gw.model.topology;
    let gate = topo.scheduling_gate();
    let names = gw.core().store.names();
    for name in names {
        let mut core = gw.core();
        let Some(rec) = core.store.get(&name).cloned() else {
            continue;
        };
        let connected = core.sessions.contains_key(&name);
        let Some(cr) = crs.get(&rec.cr_name) else {
            if rec.phase == Phase::Deleting {
                core.store.db.sandboxes.remove(&name);
                core.store.save();
                gw.log(
                    "INFO",
                    "openshell_server::compute",
                    "Removing sandbox from store after it disappeared from the compute driver",
                    &[("sandbox_id", &rec.id), ("sandbox_name", &name)],
                );
            }
            continue;
        };
        let workload = pods.get(&rec.cr_name);
        let gate_pending = gate.is_some() && !connected && workload.is_none_or(|p| has_gate(p));
        let attached = rec.boundary_attached;
        let snap = Snapshot::from_cr(cr);
        gw.commit(&mut core, &name, |r, rec| {
            r.apply_snapshot(rec, &snap, connected, gate_pending);
        });
        for (obj, ev, msg) in &failures {
            let seen = core
                .store
                .get(&name)
                .is_some_and(|r| r.seen_events.contains(ev));
            if obj == &rec.cr_name && !seen {
                gw.commit(&mut core, &name, |r, rec| {
                    rec.seen_events.push(ev.clone());
                    r.bootstrap_failed(rec, msg);
                });
            }
        }
        let phase = core.store.get(&name).map(|r| r.phase.clone());
        drop(core);
        // Reported 0.1.x topologies: a sandbox's own supervisor pod follows the sandbox's
        // intent, and the workload pod's gate opens once the boundary attached.
        if let Some(sup) = supervisor_pod_name(topo, &rec.cr_name) {
            let wanted = !matches!(
                phase,
                Some(Phase::Stopped | Phase::Stopping | Phase::Deleting)
            );
            match (wanted, pods.get(&sup)) {
                (true, None) => {
                    let uid = cr.at("/metadata/uid").and_then(Value::as_str).unwrap_or("");
                    if let Some(pod) =
                        placement::supervisor_pod(&gw.model, &gw.namespace, &rec, uid)
                    {
                        let _ = gw.cluster.create(&ResourceRef::pods(), ns, pod);
                    }
                }
                (false, Some(p)) if p.at("/metadata/deletionTimestamp").is_none() => {
                    let _ = gw.cluster.delete(
                        &ResourceRef::pods(),
                        ns,
                        &sup,
                        &DeleteOptions::default(),
                    );
                }
                _ => {}
            }
        }
        if let Some(gate) = gate
            && attached
            && let Some(p) = workload
            && has_gate(p)
        {
            let _ = gw.cluster.patch(
                &ResourceRef::pods(),
                ns,
                &rec.cr_name,
                PatchKind::Merge,
                &json!({"spec": {"schedulingGates": []}}),
            );
            gw.log(
                "INFO",
                "openshell_driver_kubernetes",
                "Released scheduling gate",
                &[("sandbox_name", &name), ("gate", gate)],
            );
        }
    }
}
