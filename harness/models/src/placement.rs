//! What each supervisor placement (`supervisor.runs_in` of a topology) means to the model: how
//! it shapes the sandbox pod and which objects it owns beside that pod (where a fault reaches
//! the supervisor is `conformance_core::effect`). Everything here reads the topology's data (container names, labels, the
//! scheduling gate), never its name, so a new topology with an existing placement is a YAML
//! file; a new placement is one more arm in each function below.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::gateway::store::SandboxRecord;
use crate::model::{OpenShellModel, SUPERVISOR_IMAGE_REPO};
use conformance_core::topology::{SupervisorPlacement, Topology};
use conformance_upstream::{
    CONTROL_SOCKET_ENV, GATEWAY_ENDPOINT, SANDBOX_API_VERSION, SANDBOX_KIND,
    SANDBOX_SERVICE_ACCOUNT, SIDECAR_STATE_VOLUME,
};
use kube_emulator::ResourceRef;

/// Where the sidecar's control socket lives, as both containers mount it (docs/upstream-facts.md F2.5).
const SIDECAR_STATE_DIR: &str = "/run/openshell-sidecar";
const SIDECAR_CONTROL_SOCKET: &str = "/run/openshell-sidecar/control.sock";

pub(crate) fn env(pairs: &[(&str, String)]) -> Value {
    Value::Array(
        pairs
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect(),
    )
}

/// What a placement adds to the sandbox pod template around the workload container.
#[derive(Default)]
pub(crate) struct PodShape {
    /// Supervisor arguments in the workload container, before `--workdir`.
    pub workload_args: Vec<String>,
    pub workload_env: Vec<(&'static str, String)>,
    pub workload_mounts: Vec<Value>,
    pub volumes: Vec<Value>,
    /// Init containers between the supervisor install and the workspace init.
    pub init: Vec<Value>,
    /// Containers after the workload container.
    pub containers: Vec<Value>,
    pub share_process_namespace: bool,
}

/// The sandbox pod's shape for the topology's placement (docs/upstream-facts.md F3.5, F3.10).
pub(crate) fn sandbox_pod(
    topo: &Topology,
    rec: &SandboxRecord,
    supervisor_image: &str,
) -> PodShape {
    let mut shape = PodShape::default();
    match &topo.supervisor {
        SupervisorPlacement::WorkloadContainer => {
            shape
                .workload_env
                .push(("OPENSHELL_ENDPOINT", GATEWAY_ENDPOINT.into()));
            shape.workload_env.push((
                "OPENSHELL_K8S_SA_TOKEN_FILE",
                "/var/run/secrets/openshell/token".into(),
            ));
        }
        SupervisorPlacement::SidecarContainer { container } => {
            // The sidecar strips the workload's endpoint and credentials (F3.5).
            process_side_only(topo, &mut shape);
            shape
                .workload_env
                .push((CONTROL_SOCKET_ENV, SIDECAR_CONTROL_SOCKET.into()));
            shape
                .workload_mounts
                .push(json!({"name": SIDECAR_STATE_VOLUME, "mountPath": SIDECAR_STATE_DIR}));
            shape
                .volumes
                .push(json!({"name": SIDECAR_STATE_VOLUME, "emptyDir": {}}));
            shape.init.push(json!({"name": "openshell-network-init", "image": supervisor_image,
                "command": ["/openshell-sandbox", "--mode=network-init", "--sidecar-state-dir", SIDECAR_STATE_DIR],
                "volumeMounts": [{"name": SIDECAR_STATE_VOLUME, "mountPath": SIDECAR_STATE_DIR}]}));
            shape.containers.push(json!({
                "name": container,
                "image": supervisor_image,
                "command": ["/openshell-sandbox", "--mode=network"],
                "env": env(&[
                    ("OPENSHELL_SANDBOX_ID", rec.id.clone()),
                    ("OPENSHELL_SANDBOX", rec.name.clone()),
                    ("OPENSHELL_ENDPOINT", GATEWAY_ENDPOINT.into()),
                    ("OPENSHELL_K8S_SA_TOKEN_FILE", "/var/run/secrets/openshell/token".into()),
                    ("OPENSHELL_SUPERVISOR_TOPOLOGY", topo.name.clone()),
                    (CONTROL_SOCKET_ENV, SIDECAR_CONTROL_SOCKET.into()),
                ]),
                "volumeMounts": [
                    {"name": SIDECAR_STATE_VOLUME, "mountPath": SIDECAR_STATE_DIR},
                    {"name": "openshell-sa-token", "mountPath": "/var/run/secrets/openshell", "readOnly": true},
                ],
            }));
            shape.share_process_namespace = true;
        }
        // Reported for 0.1.x: the workload container runs the process side only, like sidecar.
        SupervisorPlacement::DedicatedPod { .. } | SupervisorPlacement::SharedDeployment { .. } => {
            process_side_only(topo, &mut shape);
        }
    }
    shape
}

fn process_side_only(topo: &Topology, shape: &mut PodShape) {
    shape.workload_args.push("--mode=process".into());
    shape
        .workload_env
        .push(("OPENSHELL_SUPERVISOR_TOPOLOGY", topo.name.clone()));
}

/// The name of a sandbox's own supervisor pod, if the placement gives it one.
pub(crate) fn supervisor_pod_name(topo: &Topology, cr: &str) -> Option<String> {
    match &topo.supervisor {
        SupervisorPlacement::DedicatedPod { name_suffix, .. } => Some(format!("{cr}{name_suffix}")),
        _ => None,
    }
}

/// A sandbox's own supervisor pod (reported, #3144), owned by its Sandbox CR; None if the
/// placement gives it none.
pub(crate) fn supervisor_pod(
    model: &OpenShellModel,
    namespace: &str,
    rec: &SandboxRecord,
    cr_uid: &str,
) -> Option<Value> {
    let topo = &model.topology;
    let SupervisorPlacement::DedicatedPod {
        container,
        selector,
        sandbox_label,
        ..
    } = &topo.supervisor
    else {
        return None;
    };
    let mut labels = labels_of(selector);
    labels.insert(sandbox_label.clone(), json!(rec.cr_name));
    Some(json!({
        "metadata": {
            "name": supervisor_pod_name(topo, &rec.cr_name)?,
            "namespace": namespace,
            "labels": labels,
            "annotations": {"openshell.io/sandbox-id": rec.id},
            "ownerReferences": [{"apiVersion": SANDBOX_API_VERSION, "kind": SANDBOX_KIND,
                "name": rec.cr_name, "uid": cr_uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "serviceAccountName": SANDBOX_SERVICE_ACCOUNT,
            "restartPolicy": "Never",
            "containers": [{
                "name": container,
                "image": format!("{SUPERVISOR_IMAGE_REPO}:{}", model.version),
                "command": ["/openshell-sandbox", "--mode=boundary"],
                "env": env(&[
                    ("OPENSHELL_SANDBOX_ID", rec.id.clone()),
                    ("OPENSHELL_SANDBOX", rec.name.clone()),
                    ("OPENSHELL_SANDBOX_RESOURCE", rec.cr_name.clone()),
                    ("OPENSHELL_ENDPOINT", GATEWAY_ENDPOINT.into()),
                    ("OPENSHELL_SUPERVISOR_TOPOLOGY", topo.name.clone()),
                ]),
            }],
        },
    }))
}

fn labels_of(selector: &BTreeMap<String, String>) -> serde_json::Map<String, Value> {
    selector
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect()
}

/// Objects the placement adds to the helm release (reported for 0.1.x: the shared supervisor
/// Deployment).
pub(crate) fn release_objects(model: &OpenShellModel) -> Vec<(ResourceRef, Value)> {
    let SupervisorPlacement::SharedDeployment {
        name,
        container,
        selector,
    } = &model.topology.supervisor
    else {
        return vec![];
    };
    // Helm labels every object of the release with its instance.
    let mut sel = labels_of(selector);
    sel.insert("app.kubernetes.io/instance".into(), json!("openshell"));
    vec![(
        ResourceRef::new("apps", "v1", "deployments"),
        json!({
            "metadata": {"name": name, "labels": sel},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": sel},
                "template": {
                    "metadata": {"labels": sel},
                    "spec": {
                        "serviceAccountName": SANDBOX_SERVICE_ACCOUNT,
                        "containers": [{
                            "name": container,
                            "image": format!("{SUPERVISOR_IMAGE_REPO}:{}", model.version),
                            "command": ["/openshell-sandbox", "--mode=shared-boundary"],
                            "env": [{"name": "OPENSHELL_ENDPOINT", "value": GATEWAY_ENDPOINT},
                                    {"name": "OPENSHELL_SUPERVISOR_TOPOLOGY", "value": model.topology.name}],
                        }],
                    },
                },
            },
        }),
    )]
}
