//! The node-access pod: a short-lived privileged pod in a node's PID namespace that kills a
//! container's init from outside it (docs/upstream-facts.md F10.5, F10.9). The journal and the
//! leftovers sweep delete what a run left of it.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams};

use crate::gateway;
use conformance_core::target::{TargetError, TargetResult};

/// The container of a node-access pod.
pub(super) const NODE_POD_CONTAINER: &str = "node-access";

/// A node-access pod's name: one per container it kills.
pub(crate) fn node_pod_name(container_id: &str) -> String {
    let short: String = container_id.chars().take(12).collect();
    format!("openshell-conformance-node-kill-{short}")
}

/// The node-access pod: pinned to `node`, in the node's PID namespace, privileged, tolerating
/// every taint, never restarted, gone at once when deleted (docs/upstream-facts.md F10.9).
pub(crate) fn node_pod(name: &str, node: &str, fault: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"name": name, "labels": {
            crate::pins::RUN_LABEL: "fault",
            crate::pins::NODE_ACCESS_LABEL: fault,
        }},
        "spec": {
            "nodeName": node,
            "hostPID": true,
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": NODE_POD_CONTAINER,
                "image": crate::pins::NODE_ACCESS_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "600"],
                "securityContext": {"privileged": true},
            }],
        }
    })
}

/// The script a node-access pod runs: SIGKILL to every process whose cgroup names the
/// container ID (docs/upstream-facts.md F10.8) and whose command line runs `openshell-sandbox`;
/// it prints how many it killed.
pub(crate) fn node_pod_kill_argv(container_id: &str) -> Vec<String> {
    let script = r#"n=0; for d in /proc/[0-9]*; do grep -q -- "$1" "$d/cgroup" 2>/dev/null || continue; c=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null) || continue; case "$c" in *openshell-sandbox*) kill -KILL "${d#/proc/}" && n=$((n+1));; esac; done; echo "$n""#;
    vec![
        "sh".into(),
        "-c".into(),
        script.into(),
        "sh".into(),
        container_id.into(),
    ]
}

/// Deletes a node-access pod at once and waits until it is gone.
pub(crate) async fn delete_node_pod(
    client: &Client,
    ns: &str,
    name: &str,
    deadline: Duration,
) -> TargetResult<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    match api
        .delete(name, &DeleteParams::default().grace_period(0))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => {
            return Err(TargetError::infra_from(
                format!("delete node-access pod {ns}/{name}"),
                e,
            ));
        }
    }
    gateway::wait_until(
        &format!("node-access pod {ns}/{name} deleted"),
        deadline,
        gateway::POLL,
        gateway::Wake::on(api.clone(), gateway::named(name)),
        || async {
            let p = api
                .get_opt(name)
                .await
                .map_err(|e| TargetError::infra_from("get pod", e))?;
            Ok(match p {
                None => (Some(()), "gone".to_string()),
                Some(p) => (
                    None,
                    format!(
                        "still there (phase {})",
                        p.status.and_then(|s| s.phase).unwrap_or_default()
                    ),
                ),
            })
        },
    )
    .await
}
