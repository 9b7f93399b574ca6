//! `doctor`: can a real run start here? Checks the tools (docker, kind or k3d, helm, kubectl,
//! openshell) and their versions, cluster reachability, the Agent Sandbox CRDs and the
//! permissions the harness needs; prints what is missing and how to fix it.

use std::fmt;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PostParams};

use conformance_core::error::one_line;

use crate::cli::parse_version;
use crate::command::{Cmd, CmdError, CommandRunner, install_hint};
use crate::options::Provider;
use crate::pins;

#[derive(Clone, Debug)]
pub struct DoctorOptions {
    pub provider: Provider,
    pub openshell_bin: String,
    /// The namespace the harness installs into (permission checks).
    pub namespace: String,
    pub context: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Ok,
    /// Not needed to start, but worth knowing (for example: the CRDs will be installed).
    Note,
    /// The run cannot start.
    Missing,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    /// How to fix it, when not Ok.
    pub fix: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DoctorReport {
    pub checks: Vec<Check>,
}

impl DoctorReport {
    /// Whether a run can start: nothing is missing.
    pub fn can_start(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Missing)
    }

    /// 0 when a run can start; 3 (infrastructure) otherwise.
    pub fn exit_status(&self) -> conformance_core::error::ExitStatus {
        if self.can_start() {
            conformance_core::error::ExitStatus::Success
        } else {
            conformance_core::error::ExitStatus::Infrastructure
        }
    }

    fn push(&mut self, name: &str, status: Status, detail: impl Into<String>, fix: Option<String>) {
        self.checks.push(Check {
            name: name.into(),
            status,
            detail: detail.into(),
            fix,
        });
    }
}

impl fmt::Display for DoctorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.checks {
            let mark = match c.status {
                Status::Ok => "ok  ",
                Status::Note => "note",
                Status::Missing => "MISS",
            };
            writeln!(f, "[{mark}] {}: {}", c.name, c.detail)?;
            if let Some(fix) = &c.fix {
                writeln!(f, "       fix: {fix}")?;
            }
        }
        writeln!(
            f,
            "{}",
            if self.can_start() {
                "a run can start"
            } else {
                "a run cannot start: fix the MISS lines above"
            }
        )
    }
}

/// A tool check: the command that prints its version, and the oldest acceptable major.
struct Tool {
    name: &'static str,
    cmd: Cmd,
    /// (major, minor) at least; None accepts any version that prints.
    min: Option<(u64, u64)>,
}

fn tools(o: &DoctorOptions) -> Vec<Tool> {
    let mut v = Vec::new();
    if o.provider != Provider::Existing {
        // `docker version` fails when the daemon is down, which is what kind and k3d need.
        v.push(Tool {
            name: "docker",
            cmd: Cmd::new("docker").args(["version", "--format", "{{.Server.Version}}"]),
            min: None,
        });
    }
    match o.provider {
        Provider::Kind => v.push(Tool {
            name: "kind",
            cmd: Cmd::new("kind").arg("version"),
            min: Some((0, 20)),
        }),
        Provider::K3d => v.push(Tool {
            name: "k3d",
            cmd: Cmd::new("k3d").arg("version"),
            min: Some((5, 0)),
        }),
        Provider::Existing => {}
    }
    v.push(Tool {
        name: "helm",
        cmd: Cmd::new("helm").args(["version", "--short"]),
        // OCI charts need Helm ≥ 3.8; OpenShell documents Helm 3.x (docs/dependencies.md D6).
        min: Some((3, 8)),
    });
    v.push(Tool {
        name: "kubectl",
        cmd: Cmd::new("kubectl").args(["version", "--client"]),
        min: None,
    });
    v.push(Tool {
        name: "openshell",
        cmd: Cmd::new(&o.openshell_bin).arg("--version"),
        min: None,
    });
    v
}

/// Runs every check. `client` is why no kubeconfig context could be loaded when none could
/// (the cluster checks say so); kind and k3d clusters that do not exist yet are created by the
/// run.
pub async fn run(
    o: &DoctorOptions,
    runner: &dyn CommandRunner,
    client: Result<&Client, &str>,
) -> DoctorReport {
    let mut r = DoctorReport::default();
    for t in tools(o) {
        let cmd = t.cmd.clone().timeout(std::time::Duration::from_secs(20));
        match runner.run(&cmd).await {
            Ok(out) if out.success() => {
                let text = format!("{}{}", out.stdout, out.stderr);
                let version = parse_version(&text);
                let shown = version
                    .as_ref()
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| text.trim().lines().next().unwrap_or("").to_string());
                match (t.min, version) {
                    (Some((maj, min)), Some(v)) if (v.major, v.minor) < (maj, min) => r.push(
                        t.name,
                        Status::Missing,
                        format!("{shown} is too old (need {maj}.{min} or newer)"),
                        Some(install_hint(t.name)),
                    ),
                    _ => r.push(t.name, Status::Ok, shown, None),
                }
            }
            Ok(out) => r.push(
                t.name,
                Status::Missing,
                format!(
                    "`{}` failed: {}",
                    cmd.line(),
                    crate::command::last_lines(&out.stderr, 2)
                ),
                Some(if t.name == "docker" {
                    "start the Docker daemon (kind and k3d run their nodes as containers)".into()
                } else {
                    install_hint(t.name)
                }),
            ),
            Err(CmdError::NotFound { program, hint }) => r.push(
                t.name,
                Status::Missing,
                format!("`{program}` is not on PATH"),
                Some(hint),
            ),
            Err(e) => r.push(
                t.name,
                Status::Missing,
                one_line(&e),
                Some(install_hint(t.name)),
            ),
        }
    }
    match client {
        Err(why) => r.push(
            "cluster",
            if o.provider == Provider::Existing {
                Status::Missing
            } else {
                Status::Note
            },
            why.to_string(),
            Some(match o.provider {
                Provider::Existing => {
                    "pass --kubeconfig and --context of a reachable cluster".into()
                }
                p => format!(
                    "`openshell-conformance cluster up --provider {}` creates it (a run does too)",
                    p.name()
                ),
            }),
        ),
        Ok(c) => cluster_checks(o, c, &mut r).await,
    }
    r
}

async fn cluster_checks(o: &DoctorOptions, c: &Client, r: &mut DoctorReport) {
    match tokio::time::timeout(std::time::Duration::from_secs(20), c.apiserver_version()).await {
        Ok(Ok(v)) => r.push(
            "cluster",
            Status::Ok,
            format!("{} answers, Kubernetes {}", o.context, v.git_version),
            None,
        ),
        Ok(Err(e)) => {
            r.push(
                "cluster",
                Status::Missing,
                format!("{} is unreachable: {e}", o.context),
                Some(
                    "check the context's server address and credentials (`kubectl cluster-info`)"
                        .into(),
                ),
            );
            return;
        }
        Err(_) => {
            r.push(
                "cluster",
                Status::Missing,
                format!("{} did not answer within 20s", o.context),
                Some("check the context's server address (`kubectl cluster-info`)".into()),
            );
            return;
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    match crds.get_opt(pins::SANDBOX_CRD).await {
        Ok(Some(crd)) => {
            let versions: Vec<String> = crd.spec.versions.iter().filter(|v| v.served).map(|v| v.name.clone()).collect();
            r.push("agent-sandbox CRDs", Status::Ok, format!("{} serves {}", pins::SANDBOX_CRD, versions.join(", ")), None);
        }
        Ok(None) => r.push("agent-sandbox CRDs", Status::Note, format!("{} is absent; the run installs Agent Sandbox {}", pins::SANDBOX_CRD, pins::default_agent_sandbox()), None),
        Err(e) => r.push("agent-sandbox CRDs", Status::Missing, format!("cannot read CRDs: {e}"), Some("the harness needs to read and create CustomResourceDefinitions (cluster-admin on a disposable cluster)".into())),
    }
    // What install, faults and diagnostics do.
    let needs: [(&str, &str, &str, &str, Option<&str>); 9] = [
        (
            "create",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "",
            None,
        ),
        ("create", "", "namespaces", "", None),
        ("patch", "apps", "statefulsets", "scale", Some("ns")),
        ("patch", "apps", "deployments", "scale", Some("ns")),
        ("delete", "", "pods", "", Some("ns")),
        ("create", "", "pods", "exec", Some("ns")),
        ("create", "", "pods", "portforward", Some("ns")),
        ("get", "", "secrets", "", Some("ns")),
        ("delete", "agents.x-k8s.io", "sandboxes", "", Some("ns")),
    ];
    let api: Api<SelfSubjectAccessReview> = Api::all(c.clone());
    let mut denied = Vec::new();
    for (verb, group, resource, sub, ns) in needs {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    group: Some(group.into()),
                    resource: Some(resource.into()),
                    subresource: (!sub.is_empty()).then(|| sub.to_string()),
                    namespace: ns.map(|_| o.namespace.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let what = if sub.is_empty() {
            format!("{verb} {resource}")
        } else {
            format!("{verb} {resource}/{sub}")
        };
        match api.create(&PostParams::default(), &review).await {
            Ok(res) if res.status.as_ref().is_some_and(|s| s.allowed) => {}
            Ok(_) => denied.push(what),
            Err(e) => denied.push(format!("{what} (review failed: {e})")),
        }
    }
    if denied.is_empty() {
        r.push(
            "permissions",
            Status::Ok,
            "install, faults and diagnostics are allowed",
            None,
        );
    } else {
        r.push(
            "permissions",
            Status::Missing,
            format!("denied: {}", denied.join(", ")),
            Some("use a context with cluster-admin on a disposable cluster".into()),
        );
    }
}

/// The doctor for resolved run options: loads the context when the kubeconfig has it (a kind
/// or k3d cluster that does not exist yet has none), then runs every check.
pub async fn run_for(
    opts: &crate::options::RealOptions,
    runner: &dyn CommandRunner,
) -> DoctorReport {
    let o = DoctorOptions {
        provider: opts.provider,
        openshell_bin: opts.openshell_bin.clone(),
        namespace: opts.namespace.clone(),
        context: opts.context.clone(),
    };
    // kind and k3d runs use a private kubeconfig that exists only after `cluster up`.
    // Why no client could be made is what the cluster row says: a missing or unreadable
    // kubeconfig is not a missing context.
    let client = match opts.kubeconfig.as_deref() {
        Some(p) if !p.exists() => Err(format!("kubeconfig {} does not exist", p.display())),
        kubeconfig => crate::apiclient::client_for(kubeconfig, &opts.context)
            .await
            .map_err(|e| one_line(&e)),
    };
    run(&o, runner, client.as_ref().map_err(String::as_str)).await
}
