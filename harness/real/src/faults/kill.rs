//! Supervisor kills: a process in a container of the sandbox pod (by exec when the pod shares
//! its process namespace, else from the node: `docker exec` on kind and k3d nodes, or a
//! node-access pod), or the supervisor's own pods deleted.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{AttachParams, ListParams, PostParams};

use super::injector::{Active, FaultInjector, kerr};
use super::node_pod::{
    NODE_POD_CONTAINER, delete_node_pod, node_pod, node_pod_kill_argv, node_pod_name,
};
use crate::gateway;
use crate::journal::{Entry, Undo};
use conformance_core::target::{TargetError, TargetResult};

/// A container's identity and restart count, to recognise that it really stopped or restarted.
#[derive(Clone, Debug, PartialEq)]
struct ContainerRun {
    id: Option<String>,
    restarts: i32,
    running: bool,
    state: String,
}

fn container_run(pod: &Pod, container: &str) -> Option<ContainerRun> {
    let st = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)?;
    let state = st.state.as_ref();
    let (running, text) = match state {
        Some(s) if s.running.is_some() => (true, "running".to_string()),
        Some(s) if s.terminated.is_some() => {
            let t = s.terminated.as_ref().expect("checked");
            (false, format!("terminated (exit code {})", t.exit_code))
        }
        Some(s) if s.waiting.is_some() => (
            false,
            format!(
                "waiting ({})",
                s.waiting
                    .as_ref()
                    .and_then(|w| w.reason.clone())
                    .unwrap_or_default()
            ),
        ),
        _ => (false, "no state".to_string()),
    };
    Some(ContainerRun {
        id: st.container_id.clone(),
        restarts: st.restart_count,
        running,
        state: text,
    })
}

/// Whether the container has ended (not merely waiting to start).
fn ended(run: &ContainerRun) -> bool {
    run.state.starts_with("terminated")
}

/// The supervisor's container is not running. Ended, it took the supervisor with it (with a
/// finished workload: docs/upstream-facts.md F2.9, F2.12), so no supervisor runs to be
/// restarted and the case cannot test a restart, as the models say; anything else is the
/// cluster's trouble.
fn not_running(fault: &str, cr: &str, container: &str, run: &ContainerRun) -> TargetError {
    if ended(run) {
        TargetError::Unsupported(format!(
            "no supervisor process runs for sandbox {cr}, so it cannot be restarted: container {container} has {}",
            run.state
        ))
    } else {
        TargetError::infra(format!(
            "fault {fault}: container {container} of pod {cr} is not running ({})",
            run.state
        ))
    }
}

impl FaultInjector {
    /// Kills the supervisor in a container of the sandbox pod `cr`, then waits until the
    /// container really stopped or restarted (a new container ID, a higher restart count, or a
    /// terminated state) or the pod was replaced.
    ///
    /// Without a shared process namespace the supervisor is PID 1 of its container, and the
    /// kernel drops a SIGKILL sent to a namespace's init from inside that namespace: an exec of
    /// `kill -KILL 1` does nothing (docs/upstream-facts.md F10.5). It is killed from the node
    /// instead, by its host PID (`crictl inspect`), which needs node access (kind, k3d).
    pub(super) async fn kill_in_container(
        &self,
        fault: &str,
        cr: &str,
        container: &str,
    ) -> TargetResult<Active> {
        let api = self.pods(&self.sandbox_namespace);
        let pod = api
            .get(cr)
            .await
            .map_err(|e| kerr(&format!("find sandbox pod {cr}"), e))?;
        let before = container_run(&pod, container).ok_or_else(|| {
            TargetError::infra(format!(
                "fault {fault}: pod {cr} has no status for container {container}"
            ))
        })?;
        if !before.running {
            return Err(not_running(fault, cr, container, &before));
        }
        let killed = self
            .signal_supervisor(fault, &pod, cr, container, &before)
            .await;
        if let Err(e) = killed {
            // The supervisor may have ended on its own meanwhile (a finished workload takes it
            // along): then that, not the kill, is what happened.
            let now = api.get(cr).await.ok();
            return Err(
                match now.as_ref().and_then(|p| container_run(p, container)) {
                    Some(run) if ended(&run) => not_running(fault, cr, container, &run),
                    _ => e,
                },
            );
        }

        gateway::wait_until(
            &format!("fault {fault}: container {container} of pod {cr} stopped or restarted"),
            self.deadlines.replacement,
            gateway::POLL,
            gateway::Wake::on(api.clone(), gateway::named(cr)),
            || async {
                let Some(p) = api.get_opt(cr).await.map_err(|e| kerr("get pod", e))? else {
                    return Ok((Some(()), format!("pod {cr} absent")));
                };
                if p.uid() != pod.uid() {
                    return Ok((Some(()), format!("pod {cr} replaced")));
                }
                let now = container_run(&p, container);
                let seen = now.as_ref().map_or("no status".to_string(), |n| {
                    format!(
                        "{}, restarts {}, id {}",
                        n.state,
                        n.restarts,
                        n.id.as_deref().unwrap_or("none")
                    )
                });
                let changed = now.is_some_and(|n| {
                    !n.running || n.restarts > before.restarts || n.id != before.id
                });
                Ok((changed.then_some(()), seen))
            },
        )
        .await?;
        Ok(Active::Nothing)
    }

    /// Sends the supervisor of container `container` of pod `cr` its SIGKILL.
    async fn signal_supervisor(
        &self,
        fault: &str,
        pod: &Pod,
        cr: &str,
        container: &str,
        before: &ContainerRun,
    ) -> TargetResult<()> {
        let api = self.pods(&self.sandbox_namespace);
        let shared = pod
            .spec
            .as_ref()
            .and_then(|s| s.share_process_namespace)
            .unwrap_or(false);
        if shared {
            let argv = supervisor_kill_argv(container, &self.workload_container, shared);
            let ap = AttachParams::default()
                .container(container)
                .stdout(true)
                .stderr(true);
            let mut proc = api
                .exec(cr, argv, &ap)
                .await
                .map_err(|e| kerr(&format!("exec kill in {cr}/{container}"), e))?;
            // The container may die under the exec; its status is not needed.
            if let Some(st) = proc.take_status() {
                let _ = tokio::time::timeout(Duration::from_secs(30), st).await;
            }
        } else {
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .ok_or_else(|| {
                    TargetError::infra(format!("fault {fault}: pod {cr} is not on a node"))
                })?;
            let id = before.id.as_deref().ok_or_else(|| {
                TargetError::infra(format!(
                    "fault {fault}: container {container} of pod {cr} has no container ID"
                ))
            })?;
            match &self.node_runner {
                Some(runner) => {
                    let cmd = node_kill_cmd(&node, id);
                    crate::command::run_ok(&**runner, &cmd).await.map_err(|e| {
                        TargetError::infra_from(format!("fault {fault}: kill on node {node}"), e)
                    })?;
                }
                None => self.kill_from_node_pod(fault, &node, container, id).await?,
            }
        }
        Ok(())
    }

    /// Kills the process of container `container_id` running `openshell-sandbox` from a
    /// short-lived pod on `node` that shares the node's PID namespace, as `kubectl debug
    /// node/<node>` does (docs/upstream-facts.md F10.9): a signal from there reaches a
    /// container's init (F10.5). The pod is journaled before it is created and deleted on every
    /// exit path; a cluster that refuses it (Pod Security admission, RBAC) makes the fault
    /// Unsupported with the API's answer.
    async fn kill_from_node_pod(
        &self,
        fault: &str,
        node: &str,
        container: &str,
        container_id: &str,
    ) -> TargetResult<()> {
        let id = container_id
            .split_once("://")
            .map_or(container_id, |(_, id)| id);
        let ns = &self.sandbox_namespace;
        let name = node_pod_name(id);
        let journal_id = format!("node-access-{name}");
        self.journal
            .add(Entry {
                id: journal_id.clone(),
                fault: fault.into(),
                undo: Undo::DeletePod {
                    namespace: ns.clone(),
                    name: name.clone(),
                },
            })
            .await
            .map_err(TargetError::infra_of)?;
        let pod: Pod = serde_json::from_value(node_pod(&name, node, fault)).expect("static pod");
        let api = self.pods(ns);
        match api.create(&PostParams::default(), &pod).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403) => {
                self.journal
                    .remove(&journal_id)
                    .await
                    .map_err(TargetError::infra_of)?;
                return Err(TargetError::Unsupported(format!(
                    "the supervisor is PID 1 of container {container}, which ignores a SIGKILL sent from inside its PID namespace, and the cluster refused the node-access pod that would kill it from the node: {}",
                    s.message
                )));
            }
            Err(e) => {
                self.journal
                    .remove(&journal_id)
                    .await
                    .map_err(TargetError::infra_of)?;
                return Err(kerr(
                    &format!("fault {fault}: create node-access pod {ns}/{name}"),
                    e,
                ));
            }
        }
        let killed = async {
            gateway::wait_until(
                &format!("fault {fault}: node-access pod {name} running on {node}"),
                self.deadlines.replacement,
                gateway::POLL,
                gateway::Wake::on(api.clone(), gateway::named(&name)),
                || async {
                    let p = api.get(&name).await.map_err(|e| kerr("get pod", e))?;
                    let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
                    Ok(((phase == "Running").then_some(()), format!("phase={phase}")))
                },
            )
            .await?;
            let out = crate::kexec::exec(
                &self.client,
                ns,
                &name,
                NODE_POD_CONTAINER,
                &node_pod_kill_argv(id),
            )
            .await?;
            let n: u32 = out.stdout.trim().parse().unwrap_or(0);
            if out.exit_code != 0 || n == 0 {
                return Err(TargetError::infra(format!(
                    "fault {fault}: no process of container {container} ({id}) running openshell-sandbox was killed on node {node} (exit code {}, output {:?}, errors {:?})",
                    out.exit_code,
                    out.stdout.trim(),
                    out.stderr.trim()
                )));
            }
            Ok(())
        }
        .await;
        let removed = delete_node_pod(&self.client, ns, &name, self.deadlines.pods_gone).await;
        if removed.is_ok() {
            self.journal
                .remove(&journal_id)
                .await
                .map_err(TargetError::infra_of)?;
        }
        killed.and(removed)
    }

    /// Deletes `what`: the pods `selector` finds.
    pub(super) async fn kill_pods(&self, selector: &str, what: &str) -> TargetResult<Active> {
        let api = self.pods(&self.sandbox_namespace);
        let pods = api
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| kerr(&format!("find {what}"), e))?
            .items;
        if pods.is_empty() {
            return Err(TargetError::infra(format!(
                "supervisor kill: {what}: no pod matches {selector} in {}",
                self.sandbox_namespace
            )));
        }
        let gone = self
            .delete_pods(&self.sandbox_namespace, &pods, "delete supervisor pods")
            .await?;
        self.wait_deleted("supervisor-kill", &self.sandbox_namespace, &gone)
            .await?;
        Ok(Active::PodReplace { pods: gone })
    }
}

/// The command that kills the supervisor in its container. Without a shared process
/// namespace the supervisor is the container's PID 1; with one (sidecar topology,
/// docs/upstream-facts.md F3.10) PID 1 is the pause process, so the supervisor is found by its
/// command line: `openshell-sandbox`, without `--mode=process` in the network container.
/// The choice is a `case` (POSIX sh allows `!` only at the start of a pipeline, so
/// `… | ! grep` is not portable to dash or busybox).
pub(crate) fn supervisor_kill_argv(
    container: &str,
    workload_container: &str,
    shared_process_namespace: bool,
) -> Vec<String> {
    if !shared_process_namespace {
        return vec!["kill".into(), "-KILL".into(), "1".into()];
    }
    let kill = r#"kill -KILL "${d#/proc/}""#;
    let choose = if container == workload_container {
        format!("*openshell-sandbox*--mode=process*) {kill};;")
    } else {
        format!("*openshell-sandbox*--mode=process*) ;; *openshell-sandbox*) {kill};;")
    };
    let script = format!(
        r#"for d in /proc/[0-9]*; do c=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null) || continue; case "$c" in {choose} esac; done"#
    );
    vec!["sh".into(), "-c".into(), script]
}

/// SIGKILL to a container's main process from the node (kind and k3d nodes are containers
/// named like the node, with crictl): the host PID comes from `crictl inspect`, and a signal
/// from the node's PID namespace reaches a container's init, unlike one from inside.
pub(crate) fn node_kill_cmd(node: &str, container_id: &str) -> crate::command::Cmd {
    let id = container_id
        .split_once("://")
        .map_or(container_id, |(_, id)| id);
    crate::command::Cmd::new("docker")
        .args(["exec", node, "sh", "-c"])
        .arg(format!(
            "pid=$(crictl inspect --output go-template --template '{{{{.info.pid}}}}' {id}) && [ -n \"$pid\" ] && kill -KILL \"$pid\""
        ))
        .timeout(Duration::from_secs(60))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(state: &str) -> ContainerRun {
        ContainerRun {
            id: Some("containerd://abc".into()),
            restarts: 0,
            running: false,
            state: state.into(),
        }
    }

    #[test]
    fn a_supervisor_container_that_ended_makes_the_kill_unsupported_and_one_still_starting_is_the_clusters_trouble()
     {
        let ended = not_running(
            "supervisor-kill",
            "demo",
            "agent",
            &run("terminated (exit code 0)"),
        );
        assert!(
            matches!(&ended, TargetError::Unsupported(m)
                if m == "no supervisor process runs for sandbox demo, so it cannot be restarted: container agent has terminated (exit code 0)"),
            "{ended:?}"
        );
        let waiting = not_running(
            "supervisor-kill",
            "demo",
            "agent",
            &run("waiting (ContainerCreating)"),
        );
        assert!(matches!(waiting, TargetError::Infra { .. }), "{waiting:?}");
    }

    #[test]
    fn the_supervisor_is_pid_1_unless_the_pod_shares_its_process_namespace() {
        assert_eq!(
            supervisor_kill_argv("agent", "agent", false),
            ["kill", "-KILL", "1"]
        );
        let net = supervisor_kill_argv("openshell-supervisor-network", "agent", true);
        assert_eq!(net[..2], ["sh", "-c"]);
        assert!(
            net[2]
                .contains("*openshell-sandbox*--mode=process*) ;; *openshell-sandbox*) kill -KILL"),
            "{}",
            net[2]
        );
        let process = supervisor_kill_argv("agent", "agent", true);
        assert!(
            process[2].contains("*openshell-sandbox*--mode=process*) kill -KILL"),
            "{}",
            process[2]
        );
        assert!(
            !process[2].contains(" ;; *openshell-sandbox*)"),
            "{}",
            process[2]
        );
    }
}
