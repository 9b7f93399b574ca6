//! Leftovers of earlier runs on a reused cluster: namespaces labelled by another run, helm
//! releases in the harness's namespace, Sandbox resources there, Secrets a fault created there
//! (labelled with the run label), node-access pods of a supervisor kill, and an Agent Sandbox
//! controller scaled to zero (a bootstrap fault's pause). They are reported, then swept or the
//! run stops, per `--sweep-leftovers`.

use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::{Client, ResourceExt};

use crate::command::{Cmd, CommandRunner, run_ok};
use crate::options::{LeftoverPolicy, RealOptions};
use crate::pins;
use crate::steps::Step;
use conformance_core::error::{Error, Result};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Leftovers {
    /// Namespaces with the run label of another run.
    pub namespaces: Vec<String>,
    /// Helm releases in the harness namespace.
    pub releases: Vec<String>,
    /// Sandbox resources (`namespace/name`) in the harness namespace.
    pub sandboxes: Vec<String>,
    /// The Sandbox API version they were listed with.
    pub sandbox_version: Option<String>,
    /// The gateway's data PVCs (its SQLite database), which `helm uninstall` keeps.
    pub data_pvcs: Vec<String>,
    /// Secrets a bootstrap-credentials fault created (a CA that did not sign the gateway's
    /// certificate) and a killed run did not delete.
    pub fault_secrets: Vec<String>,
    /// Node-access pods of a supervisor kill that did not get to delete them.
    pub node_pods: Vec<String>,
    /// The Agent Sandbox controller's workload when it wants no replicas: a bootstrap fault
    /// pauses it while it waits for a sandbox's template, and a killed run leaves it so (no
    /// sandbox of the cluster gets a pod until it is back).
    pub paused_controller: Option<crate::gateway::Workload>,
}

impl Leftovers {
    pub(crate) fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
            && self.releases.is_empty()
            && self.sandboxes.is_empty()
            && self.data_pvcs.is_empty()
            && self.fault_secrets.is_empty()
            && self.node_pods.is_empty()
            && self.paused_controller.is_none()
    }
}

impl std::fmt::Display for Leftovers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        write!(
            f,
            "namespaces: {}; helm releases: {}; sandboxes: {}; gateway data volumes: {}; fault secrets: {}; node-access pods: {}; Agent Sandbox controller scaled to 0: {}",
            list(&self.namespaces),
            list(&self.releases),
            list(&self.sandboxes),
            list(&self.data_pvcs),
            list(&self.fault_secrets),
            list(&self.node_pods),
            self.paused_controller
                .as_ref()
                .map_or("no".to_string(), |w| w.label())
        )
    }
}

pub(crate) fn helm_list_cmd(opts: &RealOptions) -> Cmd {
    Cmd::new("helm")
        .args(["list", "--namespace", &opts.namespace, "-o", "json"])
        .args(opts.kube_flags("--kube-context"))
}

pub(crate) fn plan(opts: &RealOptions) -> Vec<Step> {
    let mut v = vec![
        Step::kube(format!(
            "list namespaces labelled {} (not {}), and Sandbox resources, PVCs {}*, Secrets labelled {}={} and pods labelled {} in {}; read the replicas of {}/{}",
            pins::RUN_LABEL,
            opts.run_id,
            data_pvc_prefix(opts),
            pins::RUN_LABEL,
            pins::FAULT_LABEL_VALUE,
            pins::NODE_ACCESS_LABEL,
            opts.namespace,
            pins::AGENT_SANDBOX_NAMESPACE,
            pins::AGENT_SANDBOX_CONTROLLER
        )),
        Step::run(helm_list_cmd(opts)),
    ];
    v.push(Step::kube(match opts.leftovers {
        LeftoverPolicy::Stop => "if any: report them and stop before changing anything (pass --sweep-leftovers to delete them)".to_string(),
        LeftoverPolicy::Sweep => "if any: report them, scale a paused Agent Sandbox controller back to 1, delete the Sandbox resources, uninstall the releases, delete the gateway data PVCs, the fault Secrets, the node-access pods and the namespaces".to_string(),
    }));
    v
}

/// Release names from `helm list -o json`.
pub(crate) fn parse_helm_list(json: &str) -> Result<Vec<String>> {
    let t = json.trim();
    if t.is_empty() {
        return Ok(Vec::new());
    }
    let v: serde_json::Value = serde_json::from_str(t)
        .map_err(|e| Error::infra_from("leftovers: `helm list -o json` printed no JSON", e))?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("name").and_then(|n| n.as_str()).map(str::to_string))
        .collect())
}

/// The names of the gateway StatefulSet's data PVCs start with this: claim template
/// `openshell-data`, then `<statefulset>-<ordinal>` (docs/upstream-facts.md F5.3, F5.10).
pub(crate) fn data_pvc_prefix(opts: &RealOptions) -> String {
    format!("{}-{}-", pins::GATEWAY_DATA_CLAIM, opts.release)
}

/// The gateway's data PVCs in the harness namespace.
pub(crate) async fn data_pvcs(client: &Client, opts: &RealOptions) -> kube::Result<Vec<String>> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &opts.namespace);
    let prefix = data_pvc_prefix(opts);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|p| p.name_any())
        .filter(|n| n.starts_with(&prefix))
        .collect())
}

/// Deletes the gateway's data PVCs, so the next install starts with an empty database as
/// upstream's e2e teardown does (docs/upstream-facts.md F5.10), and waits until they are gone.
pub(crate) async fn delete_data_pvcs(
    client: &Client,
    opts: &RealOptions,
    deadline: std::time::Duration,
) -> conformance_core::target::TargetResult<()> {
    use conformance_core::target::TargetError;
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &opts.namespace);
    let names = data_pvcs(client, opts)
        .await
        .map_err(|e| TargetError::infra_from("teardown: list the gateway data PVCs", e))?;
    for n in &names {
        match api.delete(n, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(TargetError::infra_from(
                    format!("teardown: delete PVC {n}"),
                    e,
                ));
            }
        }
    }
    crate::gateway::wait_until(
        "teardown: wait for the gateway data PVCs to be deleted",
        deadline,
        std::time::Duration::from_secs(1),
        crate::gateway::Wake::on(
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), &opts.namespace),
            Default::default(),
        ),
        || async {
            let left = data_pvcs(client, opts)
                .await
                .map_err(|e| TargetError::infra_from("teardown: list the gateway data PVCs", e))?;
            let seen = if left.is_empty() {
                "none left".to_string()
            } else {
                format!("still there: {}", left.join(", "))
            };
            Ok((left.is_empty().then_some(()), seen))
        },
    )
    .await
}

/// The label selector of what faults create (`<run label>=fault`).
pub(crate) fn fault_selector() -> String {
    format!("{}={}", pins::RUN_LABEL, pins::FAULT_LABEL_VALUE)
}

fn kerr(doing: &str, e: kube::Error) -> Error {
    Error::infra_from(format!("leftovers: {doing}"), e)
}

/// Finds leftovers. Sandboxes are looked up in whichever Sandbox API version is served.
pub(crate) async fn find(
    client: &Client,
    runner: &dyn CommandRunner,
    opts: &RealOptions,
) -> Result<Leftovers> {
    let ns: Api<Namespace> = Api::all(client.clone());
    let namespaces = ns
        .list(&ListParams::default().labels(pins::RUN_LABEL))
        .await
        .map_err(|e| kerr("list the namespaces of earlier runs", e))?
        .items
        .into_iter()
        .filter(|n| n.labels().get(pins::RUN_LABEL) != Some(&opts.run_id))
        .map(|n| n.name_any())
        // The harness namespace is reported through its release and sandboxes, and reused.
        .filter(|n| n != &opts.namespace)
        .collect();
    let helm = run_ok(runner, &helm_list_cmd(opts))
        .await
        .map_err(|e| Error::infra_from("leftovers: list Helm releases", e))?;
    let releases = parse_helm_list(&helm.stdout)?;
    let mut sandboxes = Vec::new();
    let mut sandbox_version = None;
    for version in [
        conformance_upstream::SANDBOX_VERSION,
        conformance_upstream::SANDBOX_VERSION_V1ALPHA1,
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &opts.namespace,
            &conformance_observe::sandbox_resource(version),
        );
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                sandboxes = list
                    .items
                    .iter()
                    .map(|o| format!("{}/{}", opts.namespace, o.name_any()))
                    .collect();
                sandbox_version = Some(version.to_string());
                break;
            }
            // Not served (or CRD absent): try the older version, then give up quietly.
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(kerr(&format!("list {version} sandboxes"), e)),
        }
    }
    let data_pvcs = data_pvcs(client, opts)
        .await
        .map_err(|e| kerr("list the gateway data PVCs", e))?;
    let fault_secrets = Api::<Secret>::namespaced(client.clone(), &opts.namespace)
        .list(&ListParams::default().labels(&fault_selector()))
        .await
        .map_err(|e| kerr("list the fault Secrets", e))?
        .items
        .iter()
        .map(|s| s.name_any())
        .collect();
    let node_pods = Api::<Pod>::namespaced(client.clone(), &opts.namespace)
        .list(&ListParams::default().labels(pins::NODE_ACCESS_LABEL))
        .await
        .map_err(|e| kerr("list node-access pods", e))?
        .items
        .into_iter()
        .map(|p| p.name_any())
        .collect();
    let paused_controller = match crate::gateway::find_workload(
        client,
        pins::AGENT_SANDBOX_NAMESPACE,
        pins::AGENT_SANDBOX_CONTROLLER,
        "leftovers: find the Agent Sandbox controller",
    )
    .await
    .map_err(|e| Error::infra_from("leftovers: find the Agent Sandbox controller", e))?
    {
        Some(w) => {
            let (desired, _) = crate::gateway::replicas(client, &w)
                .await
                .map_err(|e| Error::infra_from("leftovers: read the controller's replicas", e))?;
            (desired == 0).then_some(w)
        }
        None => None,
    };
    Ok(Leftovers {
        paused_controller,
        namespaces,
        releases,
        sandboxes,
        sandbox_version,
        data_pvcs,
        fault_secrets,
        node_pods,
    })
}

/// Applies the policy: Ok when there is nothing or it was swept; a usage error listing them
/// when the policy is to stop.
pub(crate) async fn handle(
    client: &Client,
    runner: &dyn CommandRunner,
    opts: &RealOptions,
    found: &Leftovers,
) -> Result<()> {
    if found.is_empty() {
        return Ok(());
    }
    match opts.leftovers {
        LeftoverPolicy::Stop => Err(Error::usage(format!(
            "context {} holds leftovers of earlier runs ({found}); nothing was changed. Pass --sweep-leftovers to delete them, or clean up by hand",
            opts.context
        ))),
        LeftoverPolicy::Sweep => sweep(client, runner, opts, found).await,
    }
}

async fn sweep(
    client: &Client,
    runner: &dyn CommandRunner,
    opts: &RealOptions,
    found: &Leftovers,
) -> Result<()> {
    tracing::warn!(%found, "sweeping leftovers of earlier runs");
    // The controller first: the cluster's sandboxes are reconciled again while the rest goes.
    if let Some(w) = &found.paused_controller {
        crate::journal::undo(
            client,
            &crate::journal::Undo::ScaleBack {
                workload: w.clone(),
                replicas: 1,
            },
            std::time::Duration::from_secs(120),
        )
        .await
        .map_err(|e| Error::infra_from("leftovers: scale the Agent Sandbox controller back", e))?;
    }
    if let Some(version) = &found.sandbox_version {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &opts.namespace,
            &conformance_observe::sandbox_resource(version),
        );
        for s in &found.sandboxes {
            let name = s.rsplit('/').next().unwrap_or(s);
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(kerr(&format!("delete sandbox {s}"), e)),
            }
        }
    }
    for r in &found.releases {
        run_ok(
            runner,
            &Cmd::new("helm")
                .args(["uninstall", r, "--namespace", &opts.namespace])
                .args(opts.kube_flags("--kube-context"))
                .args(["--wait", "--timeout", "120s"]),
        )
        .await
        .map_err(|e| Error::infra_from(format!("leftovers: uninstall release {r}"), e))?;
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &opts.namespace);
    for n in &found.fault_secrets {
        match secrets.delete(n, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(kerr(&format!("delete Secret {n}"), e)),
        }
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &opts.namespace);
    for n in &found.data_pvcs {
        match pvcs.delete(n, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(kerr(&format!("delete PVC {n}"), e)),
        }
    }
    for n in &found.node_pods {
        crate::faults::node_pod::delete_node_pod(
            client,
            &opts.namespace,
            n,
            std::time::Duration::from_secs(60),
        )
        .await
        .map_err(|e| Error::infra_from(format!("leftovers: delete node-access pod {n}"), e))?;
    }
    let ns: Api<Namespace> = Api::all(client.clone());
    for n in &found.namespaces {
        match ns.delete(n, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(kerr(&format!("delete namespace {n}"), e)),
        }
    }
    Ok(())
}
