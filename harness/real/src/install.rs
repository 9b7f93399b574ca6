//! Installing what a run tests: the Agent Sandbox controller at a pinned release, and OpenShell
//! with `helm upgrade --install` (OCI chart or a local path) with the topology's values for the
//! chart version, then the user's values files and `--set` overrides, then image overrides.

use std::path::PathBuf;

use crate::cluster::infra;
use crate::command::{Cmd, CommandRunner, run_ok};
use crate::options::{ChartSource, RealOptions};
use crate::pins;
use crate::steps::Step;
use conformance_core::error::{Error, Result};
use conformance_core::topology::{Topology, deep_merge};

/// "oci://…:0.0.111" or "local chart DIR", for plan headers and reports.
pub(crate) fn chart_label(opts: &RealOptions) -> String {
    match &opts.chart {
        ChartSource::Oci {
            reference, version, ..
        } => format!("{reference} {version}"),
        ChartSource::Local { path } => format!("local chart {}", path.display()),
    }
}

fn kubectl(opts: &RealOptions) -> Cmd {
    Cmd::new("kubectl").args(opts.kube_flags("--context"))
}

/// The Agent Sandbox install, as upstream's installer does it (docs/upstream-facts.md F8.1): apply
/// the release manifest, wait for the Sandbox CRD to be Established, then for the controller
/// rollout.
pub(crate) fn agent_sandbox_cmds(opts: &RealOptions) -> Vec<Cmd> {
    let t = &opts.timeouts;
    let secs = |d: std::time::Duration| format!("--timeout={}s", d.as_secs());
    vec![
        kubectl(opts)
            .args(["apply", "--server-side", "--force-conflicts", "-f"])
            .arg(opts.agent_sandbox.manifest())
            .timeout(t.helm),
        kubectl(opts)
            .args(["wait", "--for=condition=Established"])
            .arg(secs(t.crd_established))
            .arg(format!("crd/{}", pins::SANDBOX_CRD))
            .timeout(t.crd_established + std::time::Duration::from_secs(30)),
        kubectl(opts)
            .args(["-n", pins::AGENT_SANDBOX_NAMESPACE, "rollout", "status"])
            .arg(format!("deployment/{}", pins::AGENT_SANDBOX_CONTROLLER))
            .arg(secs(t.controller_ready))
            .timeout(t.controller_ready + std::time::Duration::from_secs(30)),
    ]
}

pub(crate) fn agent_sandbox_plan(opts: &RealOptions) -> Vec<Step> {
    agent_sandbox_cmds(opts)
        .into_iter()
        .map(Step::run)
        .collect()
}

/// Installs the controller and waits for it; errors name the step that ran out and what the
/// tool last said.
pub(crate) async fn install_agent_sandbox(
    runner: &dyn CommandRunner,
    opts: &RealOptions,
) -> Result<()> {
    let stages = [
        "install: apply the Agent Sandbox manifest",
        "install: wait for CRD sandboxes.agents.x-k8s.io to be Established",
        "install: wait for the Agent Sandbox controller rollout",
    ];
    for (cmd, stage) in agent_sandbox_cmds(opts).iter().zip(stages) {
        run_ok(runner, cmd).await.map_err(|e| infra(stage, e))?;
    }
    Ok(())
}

/// The OpenShell install for one topology.
#[derive(Clone, Debug)]
pub(crate) struct Install {
    opts: RealOptions,
    pub topology: String,
    /// The harness's values for the topology (written to `values_path`).
    pub values: serde_json::Value,
    pub values_path: PathBuf,
    /// Whether the gateway serves TLS after all overrides (chart default: on).
    pub tls: bool,
}

impl Install {
    pub(crate) fn new(opts: &RealOptions, topology: &Topology) -> Result<Self> {
        let chart_version = opts.chart_version()?;
        let topo_values = topology.values_for(&chart_version).ok_or_else(|| {
            Error::usage(format!(
                "topology {} has no helm values for chart {chart_version} (it needs OpenShell {} or newer)",
                topology.name, topology.min_openshell
            ))
        })?;
        // fullnameOverride pins the workload name to `openshell` whatever the release is
        // called, as upstream CI does (docs/upstream-facts.md F5.6). The chart always requires
        // callers to authenticate; upstream's own e2e lets unauthenticated users in on its
        // disposable clusters, and so does the harness (F5.11, README "Authentication").
        let mut values = serde_json::json!({
            "fullnameOverride": opts.release,
            "server": {"auth": {"allowUnauthenticatedUsers": true}},
        });
        deep_merge(&mut values, &topo_values);
        let mut effective = values.clone();
        for f in &opts.values_files {
            let text = std::fs::read_to_string(f)
                .map_err(|e| Error::usage_from(format!("--values {}", f.display()), e))?;
            let v: serde_json::Value = serde_saphyr::from_str(&text)
                .map_err(|e| Error::config(f, "(document)", e.to_string()))?;
            deep_merge(&mut effective, &v);
        }
        let tls = tls_enabled(&effective, &opts.set);
        Ok(Self {
            opts: opts.clone(),
            topology: topology.name.clone(),
            values,
            // In the run's private directory, which the run made (or was handed empty): no
            // file of the user's can be at this path, as one can in the artifacts directory.
            values_path: opts
                .private_dir
                .join(format!("values-{}.yaml", topology.name)),
            tls,
        })
    }

    pub(crate) fn values_yaml(&self) -> String {
        serde_saphyr::to_string(&self.values).expect("JSON values serialize as YAML")
    }

    pub(crate) fn helm_cmd(&self) -> Cmd {
        let o = &self.opts;
        let mut c = Cmd::new("helm").args(["upgrade", "--install", &o.release]);
        c = match &o.chart {
            ChartSource::Oci {
                pulled: Some(dir), ..
            } => c.arg(dir.display().to_string()),
            ChartSource::Oci {
                reference, version, ..
            } => c.arg(reference.clone()).args(["--version", version]),
            ChartSource::Local { path } => c.arg(path.display().to_string()),
        };
        c = c
            .args(["--namespace", &o.namespace, "--create-namespace"])
            .args(o.kube_flags("--kube-context"))
            .arg("-f")
            .arg(self.values_path.display().to_string());
        for f in &o.values_files {
            c = c.arg("-f").arg(f.display().to_string());
        }
        for s in &o.set {
            c = c.arg("--set").arg(s.clone());
        }
        // Image overrides come last so they win (upstream CI sets the same keys, F5.6).
        let images = [
            ("image.repository", &o.image_repository),
            ("image.tag", &o.image_tag),
            (
                "supervisor.image.repository",
                &o.supervisor_image_repository,
            ),
            ("supervisor.image.tag", &o.supervisor_image_tag),
        ];
        for (k, v) in images {
            if let Some(v) = v {
                c = c.arg("--set").arg(format!("{k}={v}"));
            }
        }
        c.arg("--wait")
            .arg("--timeout")
            .arg(format!("{}s", o.timeouts.helm.as_secs()))
            .timeout(o.timeouts.helm + std::time::Duration::from_secs(60))
    }

    pub(crate) fn uninstall_cmd(&self) -> Cmd {
        let o = &self.opts;
        Cmd::new("helm")
            .args(["uninstall", &o.release, "--namespace", &o.namespace])
            .args(o.kube_flags("--kube-context"))
            .args(["--wait", "--timeout", "120s"])
            .timeout(std::time::Duration::from_secs(180))
    }

    pub(crate) fn plan(&self) -> Vec<Step> {
        vec![
            Step::kube(
                "once per topology, at its first case: its later cases reuse this installation while it is healthy (the gateway ready and letting the harness in), else reinstall it",
            ),
            Step::Write {
                path: self.values_path.clone(),
                contents: self.values_yaml(),
            },
            Step::run(self.helm_cmd()),
            Step::kube(format!(
                "label namespace {} with {}={}",
                self.opts.namespace,
                pins::RUN_LABEL,
                self.opts.run_id
            )),
            Step::kube(format!(
                "wait up to {} for StatefulSet (else Deployment) {}/{} to have all replicas ready",
                humantime::format_duration(self.opts.timeouts.gateway_ready),
                self.opts.namespace,
                self.opts.release
            )),
        ]
    }

    pub(crate) fn teardown_plan(&self) -> Vec<Step> {
        if self.opts.keep {
            vec![Step::kube(
                "keep the release (--keep): nothing is uninstalled",
            )]
        } else {
            let last = "after the topology's last case (or when the run is interrupted)";
            vec![
                Step::kube(format!(
                    "after each case: delete its sandboxes (labelled {}={}) through the CLI and wait up to {} until neither the gateway nor the cluster has them",
                    pins::RUN_LABEL,
                    self.opts.run_id,
                    humantime::format_duration(self.opts.timeouts.cli_lifecycle)
                )),
                Step::kube(
                    "after each case: check the gateway is ready and lets the harness in; if not, the topology's next case reinstalls",
                ),
                Step::run_when(self.uninstall_cmd(), last),
                Step::kube(format!(
                    "{last}: delete the PVCs {}* (the gateway's database, which helm uninstall keeps) and wait up to 2m until they are gone",
                    crate::leftovers::data_pvc_prefix(&self.opts)
                )),
            ]
        }
    }

    /// Writes the values file and runs helm.
    pub(crate) async fn run(&self, runner: &dyn CommandRunner) -> Result<()> {
        if let Some(dir) = self.values_path.parent() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| Error::infra_from(format!("install: {}", dir.display()), e))?;
        }
        tokio::fs::write(&self.values_path, self.values_yaml())
            .await
            .map_err(|e| {
                Error::infra_from(format!("install: {}", self.values_path.display()), e)
            })?;
        run_ok(runner, &self.helm_cmd())
            .await
            .map_err(|e| infra("install: helm upgrade --install openshell", e))?;
        Ok(())
    }

    pub(crate) async fn uninstall(&self, runner: &dyn CommandRunner) -> Result<()> {
        run_ok(runner, &self.uninstall_cmd())
            .await
            .map_err(|e| infra("teardown: helm uninstall", e))?;
        Ok(())
    }
}

/// Whether the chart will serve TLS: on unless `server.disableTls` is true in the values or a
/// `--set` (docs/upstream-facts.md F5.5).
pub(crate) fn tls_enabled(values: &serde_json::Value, sets: &[String]) -> bool {
    let mut disabled = values
        .pointer("/server/disableTls")
        .map(|v| v == &serde_json::json!(true) || v == &serde_json::json!("true"))
        .unwrap_or(false);
    for s in sets {
        if let Some(v) = s.strip_prefix("server.disableTls=") {
            disabled = v.trim() == "true";
        }
    }
    !disabled
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{Provider, RealArgs};
    use conformance_core::topology::Topologies;

    fn opts(f: impl FnOnce(&mut RealArgs)) -> RealOptions {
        let mut a = RealArgs {
            cluster_name: pins::CLUSTER_NAME.into(),
            chart: pins::CHART_REF.into(),
            chart_version: pins::chart_version().into(),
            agent_sandbox_version: pins::default_agent_sandbox().into(),
            openshell_bin: "openshell".into(),
            run_dir: Some("/run-dir".into()),
            private_dir: Some("/private".into()),
            ..RealArgs::default()
        };
        f(&mut a);
        a.resolve(Provider::Kind, "r1", "/repo").unwrap()
    }

    #[test]
    fn the_values_file_selects_the_topology_with_the_key_of_the_chart_version() {
        let t = Topologies::builtin();
        let old = Install::new(&opts(|_| {}), t.get("sidecar").unwrap()).unwrap();
        assert_eq!(old.values["supervisor"]["topology"], "sidecar");
        let new = Install::new(
            &opts(|a| a.chart_version = "0.1.6".into()),
            t.get("sidecar").unwrap(),
        )
        .unwrap();
        assert_eq!(
            new.values["gatewayConfig"]["openshell"]["drivers"]["kubernetes"]["supervisor_topology"],
            "sidecar"
        );
    }

    #[test]
    fn a_topology_the_chart_is_too_old_for_is_a_usage_error() {
        let t = Topologies::builtin();
        let err = Install::new(&opts(|_| {}), t.get("gateway").unwrap()).unwrap_err();
        assert!(
            err.to_string().contains("no helm values for chart 0.0.111"),
            "{err}"
        );
    }

    #[test]
    fn helm_gets_topology_values_then_user_values_then_sets_then_image_overrides() {
        let t = Topologies::builtin();
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("mine.yaml");
        std::fs::write(&user, "server:\n  disableTls: true\n").unwrap();
        let i = Install::new(
            &opts(|a| {
                a.values = vec![user.clone()];
                a.set = vec!["server.telemetryEnabled=false".into()];
                a.image_repository = Some("local/gateway".into());
                a.image_tag = Some("dev".into());
            }),
            t.get("combined").unwrap(),
        )
        .unwrap();
        let line = i.helm_cmd().line();
        let order = [
            "-f /private/values-combined.yaml",
            &format!("-f {}", user.display()),
            "--set server.telemetryEnabled=false",
            "--set image.repository=local/gateway",
            "--set image.tag=dev",
            "--wait",
        ];
        let mut at = 0;
        for part in order {
            let pos = line[at..]
                .find(part)
                .unwrap_or_else(|| panic!("`{part}` missing or out of order in {line}"));
            at += pos + part.len();
        }
        assert!(!i.tls, "the user's values file turned TLS off");
    }

    #[test]
    fn tls_follows_the_chart_default_and_the_last_override() {
        let none = serde_json::json!({});
        assert!(tls_enabled(&none, &[]));
        assert!(!tls_enabled(&none, &["server.disableTls=true".into()]));
        let off = serde_json::json!({"server": {"disableTls": true}});
        assert!(tls_enabled(&off, &["server.disableTls=false".into()]));
    }
}
