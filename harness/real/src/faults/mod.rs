//! Faults on a real cluster, through the Kubernetes API. Each fault's effect is decided in
//! core ([`FaultEffect`]) and carried out here:
//! - gateway stopped (scaled to zero, held, scaled back) and gateway pod deleted;
//! - sandbox pod deleted;
//! - supervisor killed where the topology runs it: a process in the sandbox pod, killed from
//!   the node when it is its container's PID 1 ([`kill`]), or its own pods deleted;
//! - a sandbox's bootstrap material broken in its Sandbox resource's pod template, for a sandbox
//!   that does not exist yet with the Agent Sandbox controller paused until the gateway has
//!   written that template ([`bootstrap`]).
//!
//! Changes that do not heal by themselves go to the restore journal first; a guard restores on
//! drop and panic, and a handler on Ctrl-C/SIGTERM ([`guard`]).
//!
//! Layering: this dispatch uses the fault kinds, which use [`injector`] (the state, and how an
//! active fault is undone) and [`node_pod`] (the node-access pod, which the journal also
//! deletes).

mod bootstrap;
mod guard;
mod injector;
mod kill;
pub(crate) mod node_pod;

#[cfg(test)]
pub(crate) use guard::restore_on_signal;
pub(crate) use guard::{RestoreGuard, wait_for_signal};
pub(crate) use injector::FaultInjector;

use crate::gateway;
use crate::journal::{Entry, Undo};
use conformance_core::effect::{FaultEffect, Process, label_selector};
use conformance_core::target::{Capability, Fault, TargetError, TargetResult};
use injector::{Active, kerr, key, replicas_back};

/// The faults the injector carries out, as target capabilities. A main-process kill is not
/// among them: [`FaultInjector::inject`] answers it Unsupported.
pub(crate) const CAPABILITIES: [Capability; 5] = [
    Capability::GatewayStop,
    Capability::GatewayRestart,
    Capability::SandboxPodReplace,
    Capability::SupervisorKill,
    Capability::BootstrapCredentialFault,
];

impl FaultInjector {
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
                    .await
                    .map_err(TargetError::infra_of)?;
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
                self.break_bootstrap(&k, fault.kind(), &resource, material)
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

    pub async fn restore(&self, fault: &Fault) -> TargetResult<()> {
        let k = key(fault);
        let Some(active) = self.active.lock().await.get(&k).cloned() else {
            return Ok(());
        };
        self.restore_active(&active).await?;
        self.active.lock().await.remove(&k);
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
}
