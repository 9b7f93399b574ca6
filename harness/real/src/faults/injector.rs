//! The injector's state: how it reaches the cluster, the faults in effect ([`Active`]) and how
//! each is undone. The dispatch ([`super`]) and the fault kinds ([`super::kill`],
//! [`super::bootstrap`]) build on it; the restore guard ([`super::guard`]) calls
//! [`FaultInjector::restore_all`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject};
use kube::{Client, ResourceExt};

use crate::gateway::{self, Workload};
use crate::journal::Journal;
use conformance_core::effect::SandboxLayout;
use conformance_core::error::one_line;
use conformance_core::target::{Fault, TargetError, TargetResult};
use conformance_core::timeline::{Event, Recorder};
use conformance_core::topology::SupervisorPlacement;

/// What an injected fault left to restore.
#[derive(Clone, Debug)]
pub(super) enum Active {
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
pub(super) struct PendingTask(
    Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<TargetResult<()>>>>>,
);

impl PendingTask {
    pub(super) fn set(&self, h: tokio::task::JoinHandle<TargetResult<()>>) {
        *self.0.lock().expect("pending task lock") = Some(h);
    }

    /// The task's outcome: what it returned if it ended, nothing if it was still waiting (it is
    /// aborted; the journal entries say what is left to undo) or was taken already.
    pub(super) async fn take(&self) -> TargetResult<()> {
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
    pub(super) client: Client,
    pub(super) journal: Journal,
    pub gateway: Workload,
    /// Where sandboxes live (shared mode: the release namespace).
    pub sandbox_namespace: String,
    pub workspace: String,
    pub supervisor: SupervisorPlacement,
    /// The sandbox pod's workload container (the topology's `workload.container`).
    pub workload_container: String,
    pub deadlines: FaultDeadlines,
    pub(super) rec: std::sync::Mutex<Option<Recorder>>,
    pub(super) active: tokio::sync::Mutex<BTreeMap<String, Active>>,
    /// Runs commands on the cluster's nodes (`docker exec <node>`: kind and k3d nodes are
    /// containers named like the node). None on an existing cluster.
    pub(super) node_runner: Option<Arc<dyn crate::command::CommandRunner>>,
    /// The Sandbox API the cluster serves (v1beta1 unless told otherwise).
    pub(super) sandbox_resource: ApiResource,
    /// Namespace and name of the Agent Sandbox controller's workload (docs/upstream-facts.md
    /// F8.1, F8.6), paused while a bootstrap fault waits for its sandbox's template.
    pub controller: (String, String),
}

pub(super) fn key(f: &Fault) -> String {
    format!("{}:{}", f.kind(), f.subject().unwrap_or(""))
}

pub(super) fn kerr(stage: &str, e: kube::Error) -> TargetError {
    TargetError::infra_from(stage, e)
}

impl FaultInjector {
    /// Where this cluster's sandboxes put their parts, to aim faults at them.
    pub fn layout(&self) -> SandboxLayout {
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
            sandbox_resource: conformance_observe::sandbox_resource(
                conformance_upstream::SANDBOX_VERSION,
            ),
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

    pub(super) fn sandboxes(&self) -> Api<DynamicObject> {
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
    pub(super) async fn wait_deleted(
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

    pub(super) fn observe(&self, key: &str, subject: Option<&str>, value: serde_json::Value) {
        observe(self.recorder().as_ref(), key, subject, value);
    }

    pub(super) fn recorder(&self) -> Option<Recorder> {
        self.rec.lock().expect("recorder lock").clone()
    }

    pub(super) fn elapsed_ms(&self) -> Option<u64> {
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

    pub(super) fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Deletes pods now and returns (name, uid) of each, to recognise their replacements.
    pub(super) async fn delete_pods(
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

    pub(super) async fn restore_active(&self, active: &Active) -> TargetResult<()> {
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
                self.journal
                    .remove(journal_id)
                    .await
                    .map_err(TargetError::infra_of)?;
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
            Active::BootstrapBroken { journal_id } => {
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
}

/// Checks, without waiting, that workload `w` (named `who` in the error) has its replicas
/// and they are ready.
pub(super) async fn replicas_back(client: &Client, w: &Workload, who: &str) -> TargetResult<()> {
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
pub(super) fn observe(
    rec: Option<&Recorder>,
    key: &str,
    subject: Option<&str>,
    value: serde_json::Value,
) {
    if let Some(r) = rec {
        r.record(Event::Observation {
            key: key.to_string(),
            subject: subject.map(str::to_string),
            value,
        });
    }
}

/// Undoes the journal entry `id`, if it is still there, and removes it.
pub(super) async fn undo_entry(
    client: &Client,
    journal: &Journal,
    id: &str,
    deadline: Duration,
) -> TargetResult<()> {
    let entries = journal.entries().await.map_err(TargetError::infra_of)?;
    if let Some(e) = entries.iter().find(|e| e.id == id) {
        crate::journal::undo(client, &e.undo, deadline)
            .await
            .map_err(TargetError::infra_of)?;
    }
    journal.remove(id).await.map_err(TargetError::infra_of)?;
    Ok(())
}
