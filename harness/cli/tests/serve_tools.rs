//! `openshell-conformance emulate serve` driven by the real kubectl 1.33 and helm 3.17
//! (`conformance-testtools`), over TCP in real time: the models keep running with and without a
//! scenario, and the real OpenShell chart's objects (rendered by helm) are served with the
//! behaviour they rely on. Every tool call and every wait has a deadline.

mod kube_tools;

use conformance_testtools::{Tool, require, require_all, workspace_root};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// A running `emulate serve` and the kubeconfig it wrote; killed on drop.
struct Served {
    _child: tokio::process::Child,
    dir: tempfile::TempDir,
    /// Lines of stdout seen so far.
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl Served {
    /// Starts `emulate serve` with `args` and waits until it serves and wrote its kubeconfig.
    async fn start(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_openshell-conformance"))
            .args([
                "emulate",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--kubeconfig-out",
            ])
            .arg(&kubeconfig)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(l)) = out.next_line().await {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut s = Self {
            _child: child,
            dir,
            lines: rx,
        };
        s.until_line("kubeconfig written to", Duration::from_secs(30))
            .await;
        s
    }

    /// Waits for a stdout line containing `what`; returns the lines seen until then.
    async fn until_line(&mut self, what: &str, within: Duration) -> String {
        let mut seen = vec![];
        let found = tokio::time::timeout(within, async {
            while let Some(l) = self.lines.recv().await {
                let hit = l.contains(what);
                seen.push(l);
                if hit {
                    return true;
                }
            }
            false
        })
        .await;
        assert!(
            matches!(found, Ok(true)),
            "emulate serve did not print {what:?} within {within:?}; it printed:\n{}",
            seen.join("\n")
        );
        seen.join("\n")
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Runs a tool with this cluster's kubeconfig (deadline 90 s); returns (code, stdout, stderr).
    async fn tool(&self, tool: &Path, args: &[&str]) -> (i32, String, String) {
        let deadline = Duration::from_secs(90);
        kube_tools::run(tool, args, &self.kubeconfig(), self.dir.path(), deadline).await
    }

    async fn ok(&self, tool: &Path, args: &[&str]) -> String {
        let (code, out, err) = self.tool(tool, args).await;
        assert_eq!(code, 0, "{} {args:?} failed:\n{out}{err}", tool.display());
        out
    }
}

/// The gateway pod's uid once it is Ready (kubectl wait has the deadline).
async fn ready_gateway_uid(s: &Served, kubectl: &Path) -> String {
    s.ok(
        kubectl,
        &[
            "wait",
            "-n",
            "openshell",
            "--for=condition=Ready",
            "pod/openshell-0",
            "--timeout=30s",
        ],
    )
    .await;
    s.ok(
        kubectl,
        &[
            "get",
            "-n",
            "openshell",
            "pod/openshell-0",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    )
    .await
}

/// Deletes the gateway pod and waits for a new one (another uid) to be Ready.
async fn gateway_comes_back(s: &Served, kubectl: &Path) {
    let before = ready_gateway_uid(s, kubectl).await;
    // Without waiting: kubectl's wait for deletion GETs the pod, then lists and watches it; the
    // model replaces it within those milliseconds, so kubectl would list the new pod and wait
    // for it to go (a race a real kubelet's slower stop hides).
    s.ok(
        kubectl,
        &[
            "delete",
            "-n",
            "openshell",
            "pod/openshell-0",
            "--wait=false",
        ],
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, uid, _) = s
            .tool(
                kubectl,
                &[
                    "get",
                    "-n",
                    "openshell",
                    "pod/openshell-0",
                    "-o",
                    "jsonpath={.metadata.uid}",
                ],
            )
            .await;
        if !uid.is_empty() && uid != before {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "openshell-0 was not recreated within 30 s (uid still {uid:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ready_gateway_uid(s, kubectl).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_serve_with_a_model_and_no_scenario_runs_the_gateway_and_brings_it_back_when_deleted()
 {
    let Some(kubectl) = require(
        Tool::Kubectl,
        "emulate_serve_with_a_model_and_no_scenario_runs_the_gateway_and_brings_it_back_when_deleted",
    ) else {
        return;
    };
    let s = Served::start(&["--model", "contract"]).await;
    gateway_comes_back(&s, &kubectl).await;
    let status = s
        .ok(
            &kubectl,
            &[
                "rollout",
                "status",
                "statefulset/openshell",
                "-n",
                "openshell",
                "--timeout=30s",
            ],
        )
        .await;
    assert!(status.contains("roll out complete"), "{status}");
    let nodes = s.ok(&kubectl, &["get", "nodes"]).await;
    assert!(nodes.contains(" Ready "), "{nodes}");
    assert_eq!(
        s.ok(&kubectl, &["auth", "can-i", "create", "pods"])
            .await
            .trim(),
        "yes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_serve_keeps_reconciling_after_its_scenario_finished() {
    let Some(kubectl) = require(
        Tool::Kubectl,
        "emulate_serve_keeps_reconciling_after_its_scenario_finished",
    ) else {
        return;
    };
    let mut s = Served::start(&["--model", "contract", "--scenario", "provisioning"]).await;
    s.until_line("still serving", Duration::from_secs(90)).await;
    gateway_comes_back(&s, &kubectl).await;
}

/// The real chart, rendered by helm as `helm install` would (`fullnameOverride=openshell`).
async fn chart_render(s: &Served, helm: &Path) -> Option<String> {
    let chart = workspace_root().join("../shared/upstream/openshell-chart-v0.0.111");
    if !chart.is_dir() {
        assert!(
            !conformance_testtools::in_ci(),
            "{} is missing",
            chart.display()
        );
        eprintln!("SKIPPED: the chart {} is missing", chart.display());
        return None;
    }
    Some(
        s.ok(
            helm,
            &[
                "template",
                "openshell",
                chart.to_str().unwrap(),
                "-n",
                "openshell",
                "--set",
                "fullnameOverride=openshell",
            ],
        )
        .await,
    )
}

/// `kind/name` of every object of a multi-document YAML render, in order.
fn objects_of(render: &str) -> Vec<String> {
    let mut out = vec![];
    for doc in render.split("\n---") {
        let mut kind = None;
        let mut name = None;
        let mut in_metadata = false;
        for line in doc.lines() {
            if let Some(k) = line.strip_prefix("kind: ") {
                kind = Some(k.trim().to_lowercase());
            }
            if line == "metadata:" {
                in_metadata = true;
                continue;
            }
            if in_metadata {
                if let Some(n) = line.strip_prefix("  name: ") {
                    name = Some(n.trim().trim_matches('"').to_string());
                    in_metadata = false;
                } else if !line.starts_with(' ') {
                    in_metadata = false;
                }
            }
        }
        if let (Some(k), Some(n)) = (kind, name) {
            out.push(format!("{k}/{n}"));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_object_of_the_real_chart_is_served_and_its_certgen_job_runs_to_completion() {
    let Some([kubectl, helm]) = require_all(
        [Tool::Kubectl, Tool::Helm],
        "every_object_of_the_real_chart_is_served_and_its_certgen_job_runs_to_completion",
    ) else {
        return;
    };
    // Images mean models: the certgen Job creates the Secrets the gateway pod mounts (without
    // them the kubelet keeps the pod ContainerCreating, F10.7).
    let s = Served::start(&["--model", "openshell-0.0.111", "--images"]).await;
    let Some(render) = chart_render(&s, &helm).await else {
        return;
    };
    let objects = objects_of(&render);
    assert!(
        objects.contains(&"job/openshell-certgen".to_string()),
        "{objects:?}"
    );
    let file = s.dir.path().join("render.yaml");
    std::fs::write(&file, &render).unwrap();
    let ns = s.dir.path().join("ns.json");
    std::fs::write(
        &ns,
        r#"{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "openshell"}}"#,
    )
    .unwrap();
    // JSON bodies and no client-side validation until protobuf and OpenAPI are served.
    s.ok(
        &kubectl,
        &["create", "--validate=false", "-f", ns.to_str().unwrap()],
    )
    .await;
    s.ok(
        &kubectl,
        &[
            "apply",
            "--server-side",
            "--validate=false",
            "-n",
            "openshell",
            "-f",
            file.to_str().unwrap(),
        ],
    )
    .await;
    for o in &objects {
        s.ok(&kubectl, &["get", "-n", "openshell", o]).await;
    }
    s.ok(
        &kubectl,
        &[
            "wait",
            "-n",
            "openshell",
            "--for=condition=Complete",
            "job/openshell-certgen",
            "--timeout=30s",
        ],
    )
    .await;
    let status = s
        .ok(
            &kubectl,
            &[
                "rollout",
                "status",
                "statefulset/openshell",
                "-n",
                "openshell",
                "--timeout=30s",
            ],
        )
        .await;
    assert!(status.contains("roll out complete"), "{status}");
    // Deleting the namespace takes everything in it.
    s.ok(
        &kubectl,
        &["delete", "namespace", "openshell", "--timeout=30s"],
    )
    .await;
    let (_, left, _) = s
        .tool(
            &kubectl,
            &[
                "get",
                "pods,jobs,statefulsets",
                "-n",
                "openshell",
                "-o",
                "name",
            ],
        )
        .await;
    assert!(left.trim().is_empty(), "{left}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_sandbox_manifest_applied_server_side_establishes_its_crd_and_rolls_out_its_controller()
 {
    let Some(kubectl) = require(
        Tool::Kubectl,
        "the_agent_sandbox_manifest_applied_server_side_establishes_its_crd_and_rolls_out_its_controller",
    ) else {
        return;
    };
    let manifest = workspace_root().join("../shared/upstream/agent-sandbox-v0.5.0/manifest.yaml");
    if !manifest.is_file() {
        assert!(
            !conformance_testtools::in_ci(),
            "{} is missing",
            manifest.display()
        );
        eprintln!("SKIPPED: {} is missing", manifest.display());
        return;
    }
    let s = Served::start(&[]).await;
    s.ok(
        &kubectl,
        &[
            "apply",
            "--server-side",
            "--validate=false",
            "-f",
            manifest.to_str().unwrap(),
        ],
    )
    .await;
    s.ok(
        &kubectl,
        &[
            "wait",
            "--for=condition=Established",
            "crd/sandboxes.agents.x-k8s.io",
            "--timeout=30s",
        ],
    )
    .await;
    let status = s
        .ok(
            &kubectl,
            &[
                "rollout",
                "status",
                "deployment/agent-sandbox-controller",
                "-n",
                "agent-sandbox-system",
                "--timeout=30s",
            ],
        )
        .await;
    assert!(status.contains("successfully rolled out"), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_upgrades_lists_and_uninstalls_the_real_chart() {
    let Some([kubectl, helm]) = require_all(
        [Tool::Kubectl, Tool::Helm],
        "helm_installs_upgrades_lists_and_uninstalls_the_real_chart",
    ) else {
        return;
    };
    let s = Served::start(&[]).await;
    let Some(render) = chart_render(&s, &helm).await else {
        return;
    };
    let chart = workspace_root().join("../shared/upstream/openshell-chart-v0.0.111");
    let chart = chart.to_str().unwrap();
    let install = [
        "install",
        "openshell",
        chart,
        "-n",
        "openshell",
        "--create-namespace",
        "--set",
        "fullnameOverride=openshell",
    ];
    // Default validation: helm checks every object against the served OpenAPI.
    s.ok(&helm, &install).await;
    for o in objects_of(&render) {
        if o == "job/openshell-certgen" {
            // hook-delete-policy hook-succeeded: helm deletes it once it completed.
            continue;
        }
        s.ok(&kubectl, &["get", "-n", "openshell", &o]).await;
    }
    let (_, job, _) = s
        .tool(
            &kubectl,
            &["get", "-n", "openshell", "job/openshell-certgen"],
        )
        .await;
    assert!(
        job.is_empty(),
        "the succeeded hook Job was not deleted: {job}"
    );
    let mut upgrade = install;
    upgrade[0] = "upgrade";
    upgrade[5] = "--reuse-values";
    s.ok(&helm, &upgrade).await;
    let list = s
        .ok(&helm, &["list", "-n", "openshell", "-o", "json"])
        .await;
    let releases: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(releases[0]["name"], "openshell");
    assert_eq!(releases[0]["revision"], "2");
    assert_eq!(releases[0]["status"], "deployed");
    s.ok(
        &helm,
        &["uninstall", "openshell", "-n", "openshell", "--wait"],
    )
    .await;
    let (_, left, _) = s
        .tool(
            &kubectl,
            &[
                "get",
                "statefulsets,services",
                "-n",
                "openshell",
                "-o",
                "name",
            ],
        )
        .await;
    assert!(left.trim().is_empty(), "{left}");
}
