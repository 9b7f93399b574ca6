//! The bootstrap fault: a sandbox's bootstrap material (its token's audience, or the CA it
//! checks the gateway with) broken in its Sandbox resource's pod template, journaled with the
//! original volumes. For a sandbox that does not exist yet the Agent Sandbox controller is
//! paused until the gateway has written the template, so the first pod gets the broken one.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

use super::injector::{
    Active, FaultInjector, PendingTask, kerr, observe, replicas_back, undo_entry,
};
use crate::gateway::{self, Workload};
use crate::journal::{Entry, Journal, Undo};
use conformance_core::error::one_line;
use conformance_core::target::{BootstrapMaterial, TargetError, TargetResult};
use conformance_core::timeline::Recorder;
use conformance_upstream::{CLIENT_TLS_VOLUME, SA_TOKEN_VOLUME};

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
    material: BootstrapMaterial,
    ca_secret: &str,
) -> TargetResult<Vec<serde_json::Value>> {
    let mut out = volumes.to_vec();
    let position = |name: &str| {
        volumes
            .iter()
            .position(|v| v["name"].as_str() == Some(name))
    };
    match material {
        BootstrapMaterial::Credentials => {
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
        BootstrapMaterial::Certificate => {
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
    pub(super) async fn break_bootstrap(
        &self,
        key: &str,
        fault: &str,
        resource: &str,
        material: BootstrapMaterial,
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
        material: BootstrapMaterial,
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
            .await
            .map_err(TargetError::infra_of)?;
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
        let (fault, resource) = (fault.to_string(), resource.to_string());
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
                breaker.break_template(&fault, &sb, material).await
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
    pub(super) async fn verify_controller_back(&self) -> TargetResult<()> {
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
    pub(super) async fn verify_bootstrap_restored(&self, resource: &str) -> TargetResult<()> {
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
        material: BootstrapMaterial,
    ) -> TargetResult<String> {
        let resource = sb.name_any();
        let resource = resource.as_str();
        let api = self.sandboxes();
        let volumes = template_volumes(sb);
        let secret = fault_ca_secret(resource);
        let broken = broken_volumes(resource, &volumes, material, &secret)?;
        let with_secret = material == BootstrapMaterial::Certificate;
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
            .await
            .map_err(TargetError::infra_of)?;
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
            serde_json::json!(material.name()),
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

/// The volumes of a Sandbox resource's pod template.
fn template_volumes(sb: &DynamicObject) -> Vec<serde_json::Value> {
    sb.data
        .pointer("/spec/podTemplate/spec/volumes")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default()
}
