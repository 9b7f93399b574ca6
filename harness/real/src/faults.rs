//! Faults on a real cluster, through the Kubernetes API: gateway stopped (scale to zero, hold,
//! scale back), gateway pod deleted, sandbox pod deleted, supervisor killed per topology,
//! gateway traffic blocked by a NetworkPolicy, and a sandbox's bootstrap material broken in its
//! Sandbox resource's pod template (for a sandbox that does not exist yet, with the Agent
//! Sandbox controller paused until the gateway has written that template). Changes that do not
//! heal by themselves go to the restore journal first; a guard restores on drop and panic, and a
//! handler on Ctrl-C/SIGTERM.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{
    Api, ApiResource, AttachParams, DeleteParams, DynamicObject, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Client, ResourceExt};

use crate::gateway::{self, Workload};
use crate::journal::{Entry, Journal, Undo};
use conformance_core::effect::{FaultEffect, Process, SandboxLayout, label_selector};
use conformance_core::error::one_line;
use conformance_core::target::{Fault, TargetError, TargetResult};
use conformance_core::timeline::{Event, Recorder};
use conformance_core::topology::SupervisorPlacement;
/// What an injected fault left to restore.
#[derive(Clone, Debug)]
enum Active {
    GatewayStop {
        original: i32,
        journal_id: String,
    },
    GatewayRestart {
        old_uids: Vec<String>,
    },
    PodReplace {
        pods: Vec<(String, String)>,
    },
    TrafficBlock {
        journal_id: String,
    },
    /// A Sandbox resource's pod template with broken bootstrap material; its journal entry
    /// holds the original volumes (and names the Secret to delete).
    BootstrapBroken {
        journal_id: String,
    },
    /// A bootstrap fault for a sandbox that did not exist yet: the Agent Sandbox controller is
    /// paused (journal entry `pause_id`) and `task` waits for the Sandbox resource, breaks its
    /// template (journal entry `journal_id`) and resumes the controller.
    BootstrapPending {
        journal_id: String,
        pause_id: String,
        task: PendingTask,
    },
    /// A killed container: nothing to put back (restartPolicy Never, docs/upstream-facts.md F1.14).
    Nothing,
}

/// The background half of a bootstrap fault injected before its sandbox exists; restore
/// takes it (aborting it if it still waits) and reports what it failed at.
#[derive(Clone, Debug, Default)]
struct PendingTask(Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<TargetResult<()>>>>>);

impl PendingTask {
    fn set(&self, h: tokio::task::JoinHandle<TargetResult<()>>) {
        *self.0.lock().expect("pending task lock") = Some(h);
    }

    /// The task's outcome: what it returned if it ended, nothing if it was still waiting (it is
    /// aborted; the journal entries say what is left to undo) or was taken already.
    async fn take(&self) -> TargetResult<()> {
        let Some(h) = self.0.lock().expect("pending task lock").take() else {
            return Ok(());
        };
        if !h.is_finished() {
            h.abort();
        }
        match h.await {
            Ok(r) => r,
            Err(e) if e.is_cancelled() => Ok(()),
            Err(e) => Err(TargetError::infra(format!(
                "the pending half of the bootstrap fault failed: {e}"
            ))),
        }
    }
}

/// Deadlines of fault stages.
#[derive(Clone, Debug)]
pub struct FaultDeadlines {
    pub pods_gone: Duration,
    pub ready: Duration,
    pub replacement: Duration,
    /// A bootstrap fault injected before its sandbox exists waits this long, with the Agent
    /// Sandbox controller paused, for the gateway to create the Sandbox resource.
    pub sandbox_appears: Duration,
}

impl Default for FaultDeadlines {
    fn default() -> Self {
        Self {
            // The gateway's grace period is 5 s (docs/upstream-facts.md F5.2); a minute is
            // generous.
            pods_gone: Duration::from_secs(60),
            ready: Duration::from_secs(300),
            replacement: Duration::from_secs(120),
            // The scenario creates the sandbox right after injecting; the gateway writes the
            // resource within its CreateSandbox call.
            sandbox_appears: Duration::from_secs(60),
        }
    }
}

/// Injects and restores faults on one cluster.
pub struct FaultInjector {
    client: Client,
    journal: Journal,
    pub gateway: Workload,
    /// Where sandboxes live (shared mode: the release namespace).
    pub sandbox_namespace: String,
    pub workspace: String,
    pub supervisor: SupervisorPlacement,
    /// The sandbox pod's workload container (the topology's `workload.container`).
    pub workload_container: String,
    pub deadlines: FaultDeadlines,
    rec: std::sync::Mutex<Option<Recorder>>,
    active: tokio::sync::Mutex<BTreeMap<String, Active>>,
    /// Runs commands on the cluster's nodes (`docker exec <node>`: kind and k3d nodes are
    /// containers named like the node). None on an existing cluster.
    node_runner: Option<Arc<dyn crate::command::CommandRunner>>,
    /// The Sandbox API the cluster serves (v1beta1 unless told otherwise).
    sandbox_resource: ApiResource,
    /// Namespace and name of the Agent Sandbox controller's workload (docs/upstream-facts.md
    /// F8.1, F8.6), paused while a bootstrap fault waits for its sandbox's template.
    pub controller: (String, String),
}

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

fn key(f: &Fault) -> String {
    format!("{}:{}", f.kind(), f.subject().unwrap_or(""))
}

fn kerr(stage: &str, e: kube::Error) -> TargetError {
    TargetError::infra_from(stage, e)
}

impl FaultInjector {
    /// Where this cluster's sandboxes put their parts, to aim faults at them.
    fn layout(&self) -> SandboxLayout {
        SandboxLayout {
            workspace: self.workspace.clone(),
            workload_container: self.workload_container.clone(),
            supervisor: self.supervisor.clone(),
        }
    }

    pub fn new(
        client: Client,
        journal: Journal,
        gateway: Workload,
        sandbox_namespace: &str,
        supervisor: SupervisorPlacement,
        workload_container: &str,
    ) -> Self {
        Self {
            client,
            journal,
            gateway,
            sandbox_namespace: sandbox_namespace.to_string(),
            workspace: conformance_core::scenario::DEFAULT_WORKSPACE.into(),
            supervisor,
            workload_container: workload_container.to_string(),
            deadlines: FaultDeadlines::default(),
            rec: std::sync::Mutex::new(None),
            active: Default::default(),
            node_runner: None,
            sandbox_resource: conformance_observe::sandbox_resource("v1beta1"),
            controller: (
                crate::pins::AGENT_SANDBOX_NAMESPACE.into(),
                crate::pins::AGENT_SANDBOX_CONTROLLER.into(),
            ),
        }
    }

    /// The Sandbox API version the cluster serves (`v1beta1` or `v1alpha1`).
    pub fn set_sandbox_version(&mut self, version: &str) {
        self.sandbox_resource = conformance_observe::sandbox_resource(version);
    }

    fn sandboxes(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.sandbox_namespace,
            &self.sandbox_resource,
        )
    }

    /// Lets faults run commands on the nodes (kind and k3d, through `docker exec`).
    pub fn set_node_runner(&mut self, runner: Arc<dyn crate::command::CommandRunner>) {
        self.node_runner = Some(runner);
    }

    /// Waits until none of `pods` is there with its old uid any more (deleted, or replaced),
    /// so a fault that deletes pods reports an error instead of success when nothing happened.
    async fn wait_deleted(
        &self,
        fault: &str,
        ns: &str,
        pods: &[(String, String)],
    ) -> TargetResult<()> {
        let api = self.pods(ns);
        for (name, old_uid) in pods {
            gateway::wait_until(
                &format!("fault {fault}: pod {name} deleted"),
                self.deadlines.pods_gone,
                gateway::POLL,
                gateway::Wake::on(api.clone(), gateway::named(name)),
                || async {
                    let p = api.get_opt(name).await.map_err(|e| kerr("get pod", e))?;
                    let uid = p.as_ref().and_then(|p| p.uid());
                    let seen = match &uid {
                        Some(u) if u == old_uid => format!("pod {name} still there (uid {u})"),
                        Some(u) => format!("pod {name} replaced (uid {u})"),
                        None => format!("pod {name} absent"),
                    };
                    Ok((
                        (uid.as_deref() != Some(old_uid.as_str())).then_some(()),
                        seen,
                    ))
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Fault measurements (the actual window) go to this recorder.
    pub fn set_recorder(&self, rec: Recorder) {
        *self.rec.lock().expect("recorder lock") = Some(rec);
    }

    fn observe(&self, key: &str, subject: Option<&str>, value: serde_json::Value) {
        observe(self.recorder().as_ref(), key, subject, value);
    }

    fn recorder(&self) -> Option<Recorder> {
        self.rec.lock().expect("recorder lock").clone()
    }

    /// What breaks Sandbox templates, detached from the injector (the pending half of a bootstrap
    /// fault runs in a task of its own).
    fn breaker(&self) -> TemplateBreaker {
        TemplateBreaker {
            client: self.client.clone(),
            journal: self.journal.clone(),
            namespace: self.sandbox_namespace.clone(),
            resource: self.sandbox_resource.clone(),
            ready: self.deadlines.ready,
            rec: self.recorder(),
        }
    }

    fn elapsed_ms(&self) -> Option<u64> {
        self.rec
            .lock()
            .expect("recorder lock")
            .as_ref()
            .map(|r| r.elapsed().as_millis() as u64)
    }

    /// Faults injected and not yet restored.
    pub async fn active(&self) -> Vec<String> {
        self.active.lock().await.keys().cloned().collect()
    }

    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Deletes pods now and returns (name, uid) of each, to recognise their replacements.
    async fn delete_pods(
        &self,
        ns: &str,
        pods: &[Pod],
        stage: &str,
    ) -> TargetResult<Vec<(String, String)>> {
        let api = self.pods(ns);
        let mut gone = Vec::new();
        for p in pods {
            let name = p.name_any();
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => gone.push((name, p.uid().unwrap_or_default())),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(kerr(stage, e)),
            }
        }
        Ok(gone)
    }

    pub async fn inject(&self, fault: &Fault) -> TargetResult<()> {
        let k = key(fault);
        if self.active.lock().await.contains_key(&k) {
            return Err(TargetError::infra(format!("{k} is already injected")));
        }
        let active = match FaultEffect::of(fault, &self.layout()) {
            FaultEffect::GatewayScaledDown => {
                let (original, _) = gateway::replicas(&self.client, &self.gateway).await?;
                let journal_id = format!("gateway-stop-{}", self.gateway.name);
                // Journal first: if the process dies right after the scale, restore knows.
                self.journal
                    .add(Entry {
                        id: journal_id.clone(),
                        fault: fault.kind().into(),
                        undo: Undo::ScaleBack {
                            workload: self.gateway.clone(),
                            replicas: original.max(1),
                        },
                    })
                    .await?;
                let active = Active::GatewayStop {
                    original: original.max(1),
                    journal_id,
                };
                // Active before the scale, as the journal is: an interrupt that cancels the
                // inject while the pods go (SIGINT during the outage's first moments) must
                // still find the fault to restore, not report it restored untouched.
                self.active.lock().await.insert(k.clone(), active.clone());
                gateway::scale(&self.client, &self.gateway, 0).await?;
                gateway::wait_pods_gone(&self.client, &self.gateway, self.deadlines.pods_gone)
                    .await?;
                self.observe(
                    "gateway-stop.pods-gone-ms",
                    None,
                    serde_json::json!(self.elapsed_ms()),
                );
                active
            }
            FaultEffect::GatewayPodsDeleted => {
                let pods = gateway::pods(&self.client, &self.gateway).await?;
                let gone = self
                    .delete_pods(&self.gateway.namespace, &pods, "delete the gateway pod")
                    .await?;
                self.wait_deleted(fault.kind(), &self.gateway.namespace, &gone)
                    .await?;
                Active::GatewayRestart {
                    old_uids: gone.into_iter().map(|(_, u)| u).collect(),
                }
            }
            FaultEffect::SandboxPodDeleted { pod: name } => {
                let pod = self
                    .pods(&self.sandbox_namespace)
                    .get(&name)
                    .await
                    .map_err(|e| kerr(&format!("find sandbox pod {name}"), e))?;
                let gone = self
                    .delete_pods(&self.sandbox_namespace, &[pod], "delete the sandbox pod")
                    .await?;
                self.wait_deleted(fault.kind(), &self.sandbox_namespace, &gone)
                    .await?;
                Active::PodReplace { pods: gone }
            }
            FaultEffect::ProcessKilled {
                pod,
                container,
                process: Process::Supervisor,
            } => {
                self.kill_in_container(fault.kind(), &pod, &container)
                    .await?
            }
            FaultEffect::PodsDeleted { labels, what } => {
                self.kill_pods(&label_selector(&labels), what).await?
            }
            FaultEffect::BootstrapBroken { resource, material } => {
                self.break_bootstrap(&k, fault.kind(), &resource, &material)
                    .await?
            }
            FaultEffect::ProcessKilled {
                process: Process::Main,
                ..
            } => {
                return Err(TargetError::Unsupported(format!(
                    "{} is not implemented on real clusters yet",
                    fault.kind()
                )));
            }
        };
        self.active.lock().await.insert(k, active);
        Ok(())
    }

    /// Kills the supervisor in a container of the sandbox pod `cr`, then waits until the
    /// container really stopped or restarted (a new container ID, a higher restart count, or a
    /// terminated state) or the pod was replaced.
    ///
    /// Without a shared process namespace the supervisor is PID 1 of its container, and the
    /// kernel drops a SIGKILL sent to a namespace's init from inside that namespace: an exec of
    /// `kill -KILL 1` does nothing (docs/upstream-facts.md F10.5). It is killed from the node
    /// instead, by its host PID (`crictl inspect`), which needs node access (kind, k3d).
    async fn kill_in_container(
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
            return Err(TargetError::infra(format!(
                "fault {fault}: container {container} of pod {cr} is not running ({})",
                before.state
            )));
        }
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
            .await?;
        let pod: Pod = serde_json::from_value(node_pod(&name, node, fault)).expect("static pod");
        let api = self.pods(ns);
        match api.create(&PostParams::default(), &pod).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403) => {
                self.journal.remove(&journal_id).await?;
                return Err(TargetError::Unsupported(format!(
                    "the supervisor is PID 1 of container {container}, which ignores a SIGKILL sent from inside its PID namespace, and the cluster refused the node-access pod that would kill it from the node: {}",
                    s.message
                )));
            }
            Err(e) => {
                self.journal.remove(&journal_id).await?;
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
            self.journal.remove(&journal_id).await?;
        }
        killed.and(removed)
    }

    /// Deletes `what`: the pods `selector` finds.
    async fn kill_pods(&self, selector: &str, what: &str) -> TargetResult<Active> {
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

    pub async fn restore(&self, fault: &Fault) -> TargetResult<()> {
        let k = key(fault);
        let Some(active) = self.active.lock().await.get(&k).cloned() else {
            return Ok(());
        };
        self.restore_active(&active).await?;
        self.active.lock().await.remove(&k);
        Ok(())
    }

    async fn restore_active(&self, active: &Active) -> TargetResult<()> {
        match active {
            Active::GatewayStop {
                original,
                journal_id,
            } => {
                gateway::scale(&self.client, &self.gateway, *original).await?;
                gateway::wait_ready(
                    &self.client,
                    &self.gateway,
                    *original,
                    &[],
                    self.deadlines.ready,
                )
                .await?;
                self.observe(
                    "gateway-stop.ready-again-ms",
                    None,
                    serde_json::json!(self.elapsed_ms()),
                );
                self.journal.remove(journal_id).await?;
            }
            Active::GatewayRestart { old_uids } => {
                gateway::wait_ready(
                    &self.client,
                    &self.gateway,
                    1,
                    old_uids,
                    self.deadlines.ready,
                )
                .await?;
            }
            Active::PodReplace { pods } => {
                let api = self.pods(&self.sandbox_namespace);
                for (name, old_uid) in pods {
                    // Restored once a replacement exists; whether it boots is the product's
                    // behaviour, judged by checks, not by the harness.
                    gateway::wait_until(
                        &format!("replacement of pod {name}"),
                        self.deadlines.replacement,
                        gateway::POLL,
                        gateway::Wake::on(api.clone(), gateway::named(name)),
                        || async {
                            let p = api.get_opt(name).await.map_err(|e| kerr("get pod", e))?;
                            let uid = p.as_ref().and_then(|p| p.uid());
                            let seen = match &uid {
                                Some(u) => format!("pod {name} uid={u}"),
                                None => format!("pod {name} absent"),
                            };
                            Ok((uid.filter(|u| u != old_uid).map(|_| ()), seen))
                        },
                    )
                    .await?;
                }
            }
            Active::TrafficBlock { journal_id } | Active::BootstrapBroken { journal_id } => {
                undo_entry(
                    &self.client,
                    &self.journal,
                    journal_id,
                    self.deadlines.ready,
                )
                .await?;
            }
            Active::BootstrapPending {
                journal_id,
                pause_id,
                task,
            } => {
                let pending = task.take().await;
                // The template first: a controller that comes back must not create a pod from
                // the broken one after the fault's end.
                let template = undo_entry(
                    &self.client,
                    &self.journal,
                    journal_id,
                    self.deadlines.ready,
                )
                .await;
                let resumed =
                    undo_entry(&self.client, &self.journal, pause_id, self.deadlines.ready).await;
                pending.and(template).and(resumed)?;
            }
            Active::Nothing => {}
        }
        Ok(())
    }

    /// Checks, without waiting, that a restored fault's effect is back: the gateway has its
    /// replicas and they are ready. A sandbox pod's replacement is already awaited by the
    /// restore itself; killed processes have nothing to put back.
    pub async fn verify_restored(&self, fault: &Fault) -> TargetResult<()> {
        match FaultEffect::of(fault, &self.layout()) {
            FaultEffect::GatewayScaledDown | FaultEffect::GatewayPodsDeleted => {
                let who = format!("gateway {}/{}", self.gateway.namespace, self.gateway.name);
                replicas_back(&self.client, &self.gateway, &who).await
            }
            FaultEffect::SandboxPodDeleted { pod } => {
                let p = self
                    .pods(&self.sandbox_namespace)
                    .get_opt(&pod)
                    .await
                    .map_err(|e| kerr("get pod", e))?;
                match p {
                    Some(p) if p.metadata.deletion_timestamp.is_none() => Ok(()),
                    Some(_) => Err(TargetError::infra(format!(
                        "the replacement of pod {pod} is being deleted"
                    ))),
                    None => Err(TargetError::infra(format!("pod {pod} has no replacement"))),
                }
            }
            FaultEffect::PodsDeleted { labels, what } => {
                let selector = label_selector(&labels);
                let pods = self
                    .pods(&self.sandbox_namespace)
                    .list(&kube::api::ListParams::default().labels(&selector))
                    .await
                    .map_err(|e| kerr("list pods", e))?;
                if pods
                    .items
                    .iter()
                    .any(|p| p.metadata.deletion_timestamp.is_none())
                {
                    Ok(())
                } else {
                    Err(TargetError::infra(format!(
                        "no replacement of the {what} ({selector}) exists"
                    )))
                }
            }
            FaultEffect::BootstrapBroken { resource, .. } => {
                self.verify_bootstrap_restored(&resource).await?;
                self.verify_controller_back().await
            }
            // A killed process is not put back (restartPolicy Never).
            FaultEffect::ProcessKilled { .. } => Ok(()),
        }
    }

    /// Ends like a killed process: the pending halves of faults stop where they are, nothing is
    /// restored, and only the journal knows what is left.
    #[cfg(test)]
    pub(crate) async fn die(&self) {
        for (_, a) in std::mem::take(&mut *self.active.lock().await) {
            if let Active::BootstrapPending { task, .. } = a
                && let Some(h) = task.0.lock().expect("pending task lock").take()
            {
                h.abort();
            }
        }
    }

    /// Restores every active fault; errors are collected, not short-circuited.
    pub async fn restore_all(&self) -> Vec<String> {
        let all: Vec<(String, Active)> = self
            .active
            .lock()
            .await
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut errors = Vec::new();
        for (k, a) in all {
            match self.restore_active(&a).await {
                Ok(()) => {
                    self.active.lock().await.remove(&k);
                }
                Err(e) => errors.push(format!("{k}: {}", one_line(&e))),
            }
        }
        errors
    }

    /// Cuts sandbox pods off the gateway with a NetworkPolicy denying all egress from pods
    /// carrying the Agent Sandbox name-hash label (docs/upstream-facts.md F9.6). Requirement: a CNI
    /// that enforces NetworkPolicy (Calico, Cilium, k3s's embedded policy controller); without
    /// one the policy is accepted and has no effect, so scenarios must check reachability.
    pub async fn block_gateway_traffic(&self) -> TargetResult<()> {
        let name = "openshell-conformance-block-gateway";
        let journal_id = format!("traffic-block-{name}");
        self.journal
            .add(Entry {
                id: journal_id.clone(),
                fault: "gateway-traffic-block".into(),
                undo: Undo::DeleteNetworkPolicy {
                    namespace: self.sandbox_namespace.clone(),
                    name: name.into(),
                },
            })
            .await?;
        let np: NetworkPolicy =
            serde_json::from_value(block_policy(name)).expect("static NetworkPolicy");
        Api::<NetworkPolicy>::namespaced(self.client.clone(), &self.sandbox_namespace)
            .create(&PostParams::default(), &np)
            .await
            .map_err(|e| kerr("create the blocking NetworkPolicy", e))?;
        self.active.lock().await.insert(
            "gateway-traffic-block:".into(),
            Active::TrafficBlock { journal_id },
        );
        Ok(())
    }
}

/// The projected ServiceAccount token volume of a sandbox pod (docs/upstream-facts.md F3.5).
pub(crate) const SA_TOKEN_VOLUME: &str = "openshell-sa-token";
/// The client TLS volume of a sandbox pod: CA, client certificate and key (F3.5).
pub(crate) const CLIENT_TLS_VOLUME: &str = "openshell-client-tls";
/// The audience a broken token carries: not the `openshell-gateway` the gateway's TokenReview
/// asks for, so the API server does not authenticate it for the gateway (F12.7).
pub(crate) const WRONG_AUDIENCE: &str = "openshell-conformance-not-the-gateway";
/// The harness's CA Secret for a sandbox resource is named this plus the resource's name.
pub(crate) const FAULT_CA_SECRET_PREFIX: &str = "openshell-conformance-ca-";

/// The harness's CA Secret for sandbox resource `resource`.
pub(crate) fn fault_ca_secret(resource: &str) -> String {
    format!("{FAULT_CA_SECRET_PREFIX}{resource}")
}

/// The pod template's volumes with `material` broken:
/// - `credentials`: the projected token's audience becomes [`WRONG_AUDIENCE`];
/// - `certificate`: the client TLS volume becomes a projected volume with the client
///   certificate and key of the Secret it named and the `ca.crt` of `ca_secret` (a CA that did
///   not sign the gateway's certificate), with the same mode.
///
/// A template without that volume cannot be broken this way: Unsupported, naming it.
pub(crate) fn broken_volumes(
    resource: &str,
    volumes: &[serde_json::Value],
    material: &str,
    ca_secret: &str,
) -> TargetResult<Vec<serde_json::Value>> {
    let mut out = volumes.to_vec();
    let position = |name: &str| {
        volumes
            .iter()
            .position(|v| v["name"].as_str() == Some(name))
    };
    match material {
        "credentials" => {
            let token = match position(SA_TOKEN_VOLUME) {
                Some(i) => out[i]
                    .pointer_mut("/projected/sources")
                    .and_then(serde_json::Value::as_array_mut)
                    .and_then(|a| a.iter_mut().find_map(|s| s.get_mut("serviceAccountToken"))),
                None => None,
            };
            let Some(token) = token else {
                return Err(TargetError::Unsupported(format!(
                    "the pod template of Sandbox {resource} has no projected ServiceAccount token in volume {SA_TOKEN_VOLUME} (docs/upstream-facts.md F3.5), so the harness cannot give it a token of another audience"
                )));
            };
            token["audience"] = serde_json::json!(WRONG_AUDIENCE);
        }
        "certificate" => {
            let Some((i, secret, mode)) = position(CLIENT_TLS_VOLUME).and_then(|i| {
                let s = volumes[i].get("secret")?;
                Some((
                    i,
                    s.get("secretName")?.as_str()?.to_string(),
                    s.get("defaultMode").cloned(),
                ))
            }) else {
                return Err(TargetError::Unsupported(format!(
                    "the pod template of Sandbox {resource} mounts no client TLS Secret in volume {CLIENT_TLS_VOLUME} (the gateway serves plaintext?), so there is no gateway certificate for the sandbox to reject"
                )));
            };
            let item = |k: &str| serde_json::json!({"key": k, "path": k});
            let mut projected = serde_json::json!({"sources": [
                {"secret": {"name": secret, "items": [item("tls.crt"), item("tls.key")]}},
                {"secret": {"name": ca_secret, "items": [item("ca.crt")]}},
            ]});
            if let Some(m) = mode {
                projected["defaultMode"] = m;
            }
            out[i] = serde_json::json!({"name": CLIENT_TLS_VOLUME, "projected": projected});
        }
        other => {
            return Err(TargetError::Unsupported(format!(
                "no bootstrap material {other:?} to break (credentials or certificate)"
            )));
        }
    }
    Ok(out)
}

/// A self-signed CA certificate (PEM) that signed nothing the gateway presents. Its key is
/// dropped here: nothing the harness writes holds it.
pub(crate) fn unrelated_ca_pem() -> TargetResult<String> {
    let fail = |e: rcgen::Error| TargetError::infra(format!("generate a CA certificate: {e}"));
    let key = rcgen::KeyPair::generate().map_err(fail)?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        "openshell-conformance unrelated CA",
    );
    Ok(params.self_signed(&key).map_err(fail)?.pem())
}

/// Whether a pod template's volumes still carry a broken material of the harness.
fn still_broken(volumes: &[serde_json::Value]) -> Option<&'static str> {
    let text = serde_json::to_string(volumes).unwrap_or_default();
    if text.contains(WRONG_AUDIENCE) {
        Some("token audience")
    } else if text.contains(FAULT_CA_SECRET_PREFIX) {
        Some("CA Secret")
    } else {
        None
    }
}

impl FaultInjector {
    /// Breaks the bootstrap material of a sandbox in its Sandbox resource's pod template
    /// ([`TemplateBreaker::break_template`]). The running pod keeps what it mounted; the next
    /// pod the Agent Sandbox controller creates from the template (after a pod replacement, or
    /// a stop and start) bootstraps with the broken material, as the emulated target's fault
    /// acts at the next bootstrap. Neither the gateway nor the controller rewrites a template
    /// it created (docs/upstream-facts.md F12.9).
    ///
    /// A sandbox that does not exist yet gets its first pod from the template the gateway
    /// writes at CreateSandbox, which the controller turns into a pod at once (F12.9): the
    /// controller is paused first ([`Self::hold_first_pod`]).
    async fn break_bootstrap(
        &self,
        key: &str,
        fault: &str,
        resource: &str,
        material: &str,
    ) -> TargetResult<Active> {
        let breaker = self.breaker();
        let Some(sb) = breaker
            .sandboxes()
            .get_opt(resource)
            .await
            .map_err(|e| kerr(&format!("get Sandbox {resource}"), e))?
        else {
            return self.hold_first_pod(key, fault, resource, material).await;
        };
        let journal_id = breaker.break_template(fault, &sb, material).await?;
        Ok(Active::BootstrapBroken { journal_id })
    }

    /// The Agent Sandbox controller's workload, or Unsupported naming where it was looked for.
    async fn controller_workload(&self, fault: &str) -> TargetResult<Workload> {
        let (ns, name) = &self.controller;
        gateway::find_workload(
            &self.client,
            ns,
            name,
            &format!("fault {fault}: find the Agent Sandbox controller"),
        )
        .await?
        .ok_or_else(|| {
            TargetError::Unsupported(format!(
                "the sandbox does not exist yet, and its first pod gets broken bootstrap material only while the Agent Sandbox controller is paused, but neither Deployment nor StatefulSet {ns}/{name} exists (docs/upstream-facts.md F8.1, F12.9)"
            ))
        })
    }

    /// Holds the first pod of sandbox resource `resource` back: journal first, the Agent
    /// Sandbox controller scaled to zero and its pods gone; then a task waits for the gateway to
    /// create the resource, breaks its template and scales the controller back, so the first
    /// pod is created from the broken template. The controller comes back on every exit path:
    /// the task's own deadline, restore (which aborts a task still waiting), and the journal.
    async fn hold_first_pod(
        &self,
        key: &str,
        fault: &str,
        resource: &str,
        material: &str,
    ) -> TargetResult<Active> {
        let controller = self.controller_workload(fault).await?;
        let (original, _) = gateway::replicas(&self.client, &controller).await?;
        let original = original.max(1);
        let pause_id = format!("agent-sandbox-controller-paused-{resource}");
        let journal_id = format!("bootstrap-credentials-{resource}");
        self.journal
            .add(Entry {
                id: pause_id.clone(),
                fault: fault.into(),
                undo: Undo::ScaleBack {
                    workload: controller.clone(),
                    replicas: original,
                },
            })
            .await?;
        let task = PendingTask::default();
        let active = Active::BootstrapPending {
            journal_id: journal_id.clone(),
            pause_id: pause_id.clone(),
            task: task.clone(),
        };
        // Active before the scale, as the journal is: an interrupt that cancels the inject must
        // find the controller to scale back.
        self.active
            .lock()
            .await
            .insert(key.to_string(), active.clone());
        let paused = async {
            gateway::scale(&self.client, &controller, 0).await?;
            gateway::wait_workload_pods_gone(
                &self.client,
                &controller,
                &format!(
                    "fault {fault}: pause the Agent Sandbox controller ({} pods gone)",
                    controller.label()
                ),
                self.deadlines.pods_gone,
            )
            .await
        }
        .await;
        if let Err(e) = paused {
            if let Err(u) = self.restore_active(&active).await {
                tracing::error!(error = %one_line(&u), "resuming the Agent Sandbox controller failed; the journal keeps it");
            }
            self.active.lock().await.remove(key);
            return Err(e);
        }
        self.observe(
            "bootstrap-credentials.controller-paused",
            Some(resource),
            serde_json::json!({"workload": controller.label(), "replicas": original}),
        );
        let breaker = self.breaker();
        let (fault, resource, material) = (
            fault.to_string(),
            resource.to_string(),
            material.to_string(),
        );
        let appears = self.deadlines.sandbox_appears;
        task.set(tokio::spawn(async move {
            let api = breaker.sandboxes();
            let broken = async {
                let sb = gateway::wait_until(
                    &format!(
                        "fault {fault}: Sandbox {resource} created while the Agent Sandbox controller is paused"
                    ),
                    appears,
                    gateway::POLL,
                    gateway::Wake::on(api.clone(), gateway::named(&resource)),
                    || async {
                        let sb = api
                            .get_opt(&resource)
                            .await
                            .map_err(|e| kerr(&format!("get Sandbox {resource}"), e))?;
                        let seen = if sb.is_some() { "there" } else { "absent" };
                        Ok((sb, format!("Sandbox {resource} {seen}")))
                    },
                )
                .await?;
                breaker.break_template(&fault, &sb, &material).await
            }
            .await;
            let resumed =
                undo_entry(&breaker.client, &breaker.journal, &pause_id, breaker.ready).await;
            match (&broken, &resumed) {
                (Ok(_), Ok(())) => observe(
                    breaker.rec.as_ref(),
                    "bootstrap-credentials.controller-resumed",
                    Some(&resource),
                    serde_json::json!(controller.label()),
                ),
                _ => {
                    if let Some(r) = &breaker.rec {
                        for e in [broken.as_ref().err(), resumed.as_ref().err()]
                            .into_iter()
                            .flatten()
                        {
                            r.note(format!("fault {fault} on {resource}: {}", one_line(e)));
                        }
                    }
                }
            }
            broken.map(|_| ()).and(resumed)
        }));
        Ok(active)
    }

    /// The Agent Sandbox controller (where the injector looks for it) has its replicas, ready.
    /// A controller that is not there was never paused.
    async fn verify_controller_back(&self) -> TargetResult<()> {
        let (ns, name) = &self.controller;
        let Some(w) = gateway::find_workload(
            &self.client,
            ns,
            name,
            "verify: find the Agent Sandbox controller",
        )
        .await?
        else {
            return Ok(());
        };
        let who = format!("the Agent Sandbox controller {}", w.label());
        replicas_back(&self.client, &w, &who).await
    }

    /// The template of `resource` (if it still exists) holds none of the harness's broken
    /// material, and the harness's CA Secret is gone.
    async fn verify_bootstrap_restored(&self, resource: &str) -> TargetResult<()> {
        if let Some(sb) = self
            .sandboxes()
            .get_opt(resource)
            .await
            .map_err(|e| kerr(&format!("get Sandbox {resource}"), e))?
        {
            let volumes = template_volumes(&sb);
            if let Some(what) = still_broken(&volumes) {
                return Err(TargetError::infra(format!(
                    "the pod template of Sandbox {resource} still has the harness's broken {what}"
                )));
            }
        }
        let secret = fault_ca_secret(resource);
        let left = Api::<Secret>::namespaced(self.client.clone(), &self.sandbox_namespace)
            .get_opt(&secret)
            .await
            .map_err(|e| kerr(&format!("get Secret {secret}"), e))?;
        match left {
            Some(_) => Err(TargetError::infra(format!(
                "the harness's CA Secret {}/{secret} is still there",
                self.sandbox_namespace
            ))),
            None => Ok(()),
        }
    }
}

/// Checks, without waiting, that workload `w` (named `who` in the error) has its replicas
/// and they are ready.
async fn replicas_back(client: &Client, w: &Workload, who: &str) -> TargetResult<()> {
    let (desired, ready) = gateway::replicas(client, w).await?;
    if desired >= 1 && ready >= desired {
        Ok(())
    } else {
        Err(TargetError::infra(format!(
            "{who} has {ready} of {desired} replicas ready"
        )))
    }
}

/// Records an observation on the timeline, if there is one.
fn observe(rec: Option<&Recorder>, key: &str, subject: Option<&str>, value: serde_json::Value) {
    if let Some(r) = rec {
        r.record(Event::Observation {
            key: key.to_string(),
            subject: subject.map(str::to_string),
            value,
        });
    }
}

/// Undoes the journal entry `id`, if it is still there, and removes it.
async fn undo_entry(
    client: &Client,
    journal: &Journal,
    id: &str,
    deadline: Duration,
) -> TargetResult<()> {
    let entries = journal.entries().await?;
    if let Some(e) = entries.iter().find(|e| e.id == id) {
        crate::journal::undo(client, &e.undo, deadline).await?;
    }
    journal.remove(id).await?;
    Ok(())
}

/// Breaks Sandbox templates: what it needs of the injector, cloned, so that it also runs in the
/// pending half of a bootstrap fault.
#[derive(Clone)]
struct TemplateBreaker {
    client: Client,
    journal: Journal,
    namespace: String,
    resource: ApiResource,
    ready: Duration,
    rec: Option<Recorder>,
}

impl TemplateBreaker {
    fn sandboxes(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &self.resource)
    }

    /// Breaks `material` in the pod template of Sandbox `sb` (journal first, with the original
    /// volumes: names, modes and an audience, no key material) and returns the journal entry's
    /// id. A half-done break is undone before the error is returned.
    async fn break_template(
        &self,
        fault: &str,
        sb: &DynamicObject,
        material: &str,
    ) -> TargetResult<String> {
        let resource = sb.name_any();
        let resource = resource.as_str();
        let api = self.sandboxes();
        let volumes = template_volumes(sb);
        let secret = fault_ca_secret(resource);
        let broken = broken_volumes(resource, &volumes, material, &secret)?;
        let with_secret = material == "certificate";
        let journal_id = format!("bootstrap-credentials-{resource}");
        self.journal
            .add(Entry {
                id: journal_id.clone(),
                fault: fault.into(),
                undo: Undo::RestorePodTemplateVolumes {
                    api_version: self.resource.api_version.clone(),
                    namespace: self.namespace.clone(),
                    name: resource.to_string(),
                    volumes: serde_json::Value::Array(volumes),
                    secret: with_secret.then(|| secret.clone()),
                },
            })
            .await?;
        let done = async {
            if with_secret {
                self.create_ca_secret(&secret).await?;
            }
            let rv = sb.resource_version().unwrap_or_default();
            // The resourceVersion makes the patch fail rather than overwrite a template that
            // changed since it was read.
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": rv},
                "spec": {"podTemplate": {"spec": {"volumes": broken}}},
            });
            api.patch(resource, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| kerr(&format!("patch the pod template of Sandbox {resource}"), e))?;
            Ok::<(), TargetError>(())
        }
        .await;
        if let Err(e) = done {
            // Undo what was done before the failure, so nothing is left behind.
            if let Err(u) = undo_entry(&self.client, &self.journal, &journal_id, self.ready).await {
                tracing::error!(error = %one_line(&u), "undoing a half-injected bootstrap fault failed; the journal keeps it");
            }
            return Err(e);
        }
        observe(
            self.rec.as_ref(),
            "bootstrap-credentials.broken",
            Some(resource),
            serde_json::json!(material),
        );
        Ok(journal_id)
    }

    /// Creates the harness's CA Secret (replacing one a killed run left).
    async fn create_ca_secret(&self, name: &str) -> TargetResult<()> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(kerr(&format!("delete an old Secret {name}"), e)),
        }
        let ca = unrelated_ca_pem()?;
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {crate::pins::RUN_LABEL: crate::pins::FAULT_LABEL_VALUE}},
            "type": "Opaque",
            "stringData": {"ca.crt": ca},
        }))
        .expect("static Secret");
        api.create(&PostParams::default(), &secret)
            .await
            .map_err(|e| kerr(&format!("create the CA Secret {name}"), e))?;
        Ok(())
    }
}

/// The NetworkPolicy that cuts sandbox pods off the gateway (and everything else): Egress with
/// no rule denies all egress of the selected pods.
pub(crate) fn block_policy(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "labels": {crate::pins::RUN_LABEL: crate::pins::FAULT_LABEL_VALUE}},
        "spec": {
            "podSelector": {"matchExpressions": [
                {"key": "agents.x-k8s.io/sandbox-name-hash", "operator": "Exists"}]},
            "policyTypes": ["Egress"],
            "egress": []
        }
    })
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

/// The container of a node-access pod.
const NODE_POD_CONTAINER: &str = "node-access";

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
        Err(e) => return Err(kerr(&format!("delete node-access pod {ns}/{name}"), e)),
    }
    gateway::wait_until(
        &format!("node-access pod {ns}/{name} deleted"),
        deadline,
        gateway::POLL,
        gateway::Wake::on(api.clone(), gateway::named(name)),
        || async {
            let p = api.get_opt(name).await.map_err(|e| kerr("get pod", e))?;
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

/// The volumes of a Sandbox resource's pod template.
fn template_volumes(sb: &DynamicObject) -> Vec<serde_json::Value> {
    sb.data
        .pointer("/spec/podTemplate/spec/volumes")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default()
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

/// Restores on drop (including unwinding from a panic): the last line of defence after the
/// engine's own restore. On a multi-thread runtime it blocks until restored; elsewhere it
/// spawns the restore and the journal covers a process that exits first.
pub(crate) struct RestoreGuard {
    injector: Arc<FaultInjector>,
}

impl RestoreGuard {
    pub(crate) fn new(injector: Arc<FaultInjector>) -> Self {
        Self { injector }
    }
}

impl Drop for RestoreGuard {
    fn drop(&mut self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::error!(
                "restore guard dropped outside a runtime; run `openshell-conformance restore`"
            );
            return;
        };
        let inj = self.injector.clone();
        let work = async move {
            let errors = inj.restore_all().await;
            for e in errors {
                tracing::error!(error = %e, "restore on drop failed; the journal keeps it");
            }
        };
        if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            tokio::task::block_in_place(|| handle.block_on(work));
        } else {
            handle.spawn(work);
        }
    }
}

#[cfg(test)]
/// Waits for Ctrl-C or SIGTERM, restores every active fault, and returns the signal's name so
/// the caller can exit (130 / 143).
pub(crate) async fn restore_on_signal(injector: Arc<FaultInjector>) -> &'static str {
    let name = wait_for_signal().await;
    tracing::warn!(signal = name, "restoring active faults before exiting");
    for e in injector.restore_all().await {
        tracing::error!(error = %e, "restore after {name} failed; the journal keeps it");
    }
    name
}

/// Waits for Ctrl-C or SIGTERM and returns its name.
#[cfg(unix)]
pub(crate) async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

/// Waits for Ctrl-C and returns its name.
#[cfg(not(unix))]
pub(crate) async fn wait_for_signal() -> &'static str {
    let _ = tokio::signal::ctrl_c().await;
    "SIGINT"
}

#[cfg(test)]
mod tests {
    use super::*;

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
