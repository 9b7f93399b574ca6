//! The real kubectl 1.33 and helm 3.17 against `emulate serve` (TCP, real time), on what the
//! served API speaks: protobuf bodies, OpenAPI v2/v3 and server-side field validation. Every
//! tool call has a deadline. Missing tools are skipped locally and fail the run in CI
//! (conformance-testtools).

use conformance_testtools::{Tool, in_ci, require, workspace_root};
use kube_emulator::{ClusterConfig, ResourceRef};
use serde_json::Value;
use std::path::Path;

mod common;
use common::{Out, Served};

/// The served cluster, and the helpers these tests share.
struct Env(Served);

impl std::ops::Deref for Env {
    type Target = Served;
    fn deref(&self) -> &Served {
        &self.0
    }
}

async fn start() -> Env {
    Env(common::serve(ClusterConfig::default()).await)
}

impl Env {
    async fn ok(&self, tool: &Path, args: &[&str]) -> Out {
        let o = self.run(tool, args, &[]).await;
        assert_eq!(o.code, 0, "{args:?} failed: {}{}", o.stdout, o.stderr);
        o
    }

    fn get(&self, group: &str, plural: &str, ns: Option<&str>, name: &str) -> Value {
        self.cluster
            .get(&ResourceRef::new(group, "v1", plural), ns, name)
            .unwrap_or_else(|e| panic!("{plural}/{name}: {e}"))
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_namespace_configmap_deployment_and_secret_sent_as_protobuf() {
    let test = "kubectl_creates_namespace_configmap_deployment_and_secret_sent_as_protobuf";
    let Some(kubectl) = require(Tool::Kubectl, test) else {
        return;
    };
    let env = start().await;
    // -v=8 logs the request headers: the proof that the body went as protobuf.
    let o = env
        .ok(&kubectl, &["create", "namespace", "team", "-v=8"])
        .await;
    assert!(
        o.stderr
            .contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "kubectl did not send protobuf: {}",
        o.stderr
    );
    env.ok(
        &kubectl,
        &[
            "create",
            "configmap",
            "cfg",
            "-n",
            "team",
            "--from-literal=greeting=hello",
        ],
    )
    .await;
    env.ok(
        &kubectl,
        &[
            "create",
            "deployment",
            "web",
            "-n",
            "team",
            "--image=nginx:1.27",
            "--replicas=2",
            "--port=8080",
        ],
    )
    .await;
    env.ok(
        &kubectl,
        &[
            "create",
            "secret",
            "generic",
            "creds",
            "-n",
            "team",
            "--from-literal=token=s3cr3t",
        ],
    )
    .await;
    let ns = env.get("", "namespaces", None, "team");
    assert_eq!(ns["status"]["phase"], "Active");
    let cm = env.get("", "configmaps", Some("team"), "cfg");
    assert_eq!(cm["data"]["greeting"], "hello");
    let d = env.get("apps", "deployments", Some("team"), "web");
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["spec"]["selector"]["matchLabels"]["app"], "web");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        (c["name"].as_str(), c["image"].as_str()),
        (Some("nginx"), Some("nginx:1.27"))
    );
    assert_eq!(c["ports"][0]["containerPort"], 8080);
    let s = env.get("", "secrets", Some("team"), "creds");
    assert_eq!(s["data"]["token"], "czNjcjN0");
    assert_eq!(s["type"], "Opaque");
    // And kubectl reads back what it wrote.
    let got = env
        .ok(
            &kubectl,
            &[
                "get",
                "secret",
                "creds",
                "-n",
                "team",
                "-o",
                "jsonpath={.data.token}",
            ],
        )
        .await;
    assert_eq!(got.stdout, "czNjcjN0");
}

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  replicas: 1
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
      - name: api
        image: nginx:1.27
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_validates_on_the_server_as_a_real_api_server_does() {
    let test = "kubectl_apply_validates_on_the_server_as_a_real_api_server_does";
    let Some(kubectl) = require(Tool::Kubectl, test) else {
        return;
    };
    let env = start().await;
    let good = env.file("good.yaml", DEPLOYMENT);
    let o = env.ok(&kubectl, &["apply", "-f", &good, "-v=6"]).await;
    assert!(
        o.stdout.contains("deployment.apps/api created"),
        "{}",
        o.stdout
    );
    // kubectl found fieldValidation in the served OpenAPI v3 and asked the server to validate.
    assert!(o.stderr.contains("fieldValidation=Strict"), "{}", o.stderr);

    let unknown = env.file(
        "unknown.yaml",
        &DEPLOYMENT
            .replace("  replicas: 1\n", "  replicas: 1\n  replicaz: 2\n")
            .replace("name: api\nspec", "name: api2\nspec"),
    );
    let o = env.run(&kubectl, &["apply", "-f", &unknown], &[]).await;
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("Error from server (BadRequest)")
            && o.stderr.contains(
                "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.replicaz\""
            ),
        "{}",
        o.stderr
    );
    // --validate=warn: created, the unknown field dropped, kubectl shows the server's warning.
    let o = env
        .ok(&kubectl, &["apply", "-f", &unknown, "--validate=warn"])
        .await;
    assert!(
        o.stderr
            .contains("Warning: unknown field \"spec.replicaz\""),
        "{}",
        o.stderr
    );
    let d = env.get("apps", "deployments", Some("default"), "api2");
    assert!(d["spec"].get("replicaz").is_none(), "{d}");

    let wrong = env.file(
        "wrong.yaml",
        &DEPLOYMENT
            .replace("replicas: 1", "replicas: one")
            .replace("name: api\nspec", "name: api3\nspec"),
    );
    let o = env.run(&kubectl, &["apply", "-f", &wrong], &[]).await;
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains(
            "json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"
        ),
        "{}",
        o.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_edit_with_a_non_interactive_editor_changes_the_object() {
    let test = "kubectl_edit_with_a_non_interactive_editor_changes_the_object";
    let Some(kubectl) = require(Tool::Kubectl, test) else {
        return;
    };
    let env = start().await;
    env.ok(
        &kubectl,
        &["create", "configmap", "cfg", "--from-literal=mode=blue"],
    )
    .await;
    let o = env
        .run(
            &kubectl,
            &["edit", "configmap", "cfg"],
            &[("EDITOR", "sed -i s/mode:\\ blue/mode:\\ green/")],
        )
        .await;
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("configmap/cfg edited"), "{}", o.stdout);
    assert_eq!(
        env.get("", "configmaps", Some("default"), "cfg")["data"]["mode"],
        "green"
    );
    // An edit that adds an undeclared field is refused (kubectl checks it against the served
    // schema) and changes nothing.
    let o = env
        .run(
            &kubectl,
            &["edit", "configmap", "cfg"],
            &[("EDITOR", "sed -i s/^data:/bogus:\\ 1\\ndata:/")],
        )
        .await;
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("configmaps \"cfg\" is invalid"),
        "{}",
        o.stderr
    );
    let cm = env.get("", "configmaps", Some("default"), "cfg");
    assert!(
        cm.get("bogus").is_none() && cm["data"]["mode"] == "green",
        "{cm}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_reads_the_served_openapi() {
    let test = "kubectl_explain_reads_the_served_openapi";
    let Some(kubectl) = require(Tool::Kubectl, test) else {
        return;
    };
    let env = start().await;
    let o = env
        .ok(&kubectl, &["explain", "deployment.spec.replicas"])
        .await;
    assert!(
        o.stdout.contains("KIND:       Deployment")
            && o.stdout.contains("FIELD: replicas <integer>"),
        "{}",
        o.stdout
    );
    let o = env.ok(&kubectl, &["explain", "pods.spec.containers"]).await;
    assert!(o.stdout.contains("image\t<string>"), "{}", o.stdout);
    // The v2 form, which client-go fetches as gnostic protobuf.
    let o = env
        .ok(
            &kubectl,
            &[
                "explain",
                "deployment.spec.replicas",
                "--output=plaintext-openapiv2",
            ],
        )
        .await;
    assert!(
        o.stdout.contains("KIND:     Deployment")
            && o.stdout.contains("FIELD:    replicas <integer>"),
        "{}",
        o.stdout
    );
}

/// An Agent Sandbox release manifest, reduced to the kinds served before the RBAC kinds land
/// (Role, RoleBinding, ClusterRole, ClusterRoleBinding are left out).
fn served_part_of_agent_sandbox_manifest(file: &str) -> Option<String> {
    let path = workspace_root().join("../shared/upstream").join(file);
    let Ok(text) = std::fs::read_to_string(&path) else {
        assert!(!in_ci(), "{} is missing; CI must have it", path.display());
        eprintln!("SKIPPED: {} not found", path.display());
        return None;
    };
    let docs: Vec<&str> = text
        .split("\n---")
        .filter(|d| {
            let kind = d
                .lines()
                .find_map(|l| l.strip_prefix("kind: "))
                .unwrap_or("")
                .trim();
            matches!(
                kind,
                "CustomResourceDefinition"
                    | "Namespace"
                    | "ServiceAccount"
                    | "Service"
                    | "Deployment"
            )
        })
        .collect();
    Some(docs.join("\n---\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_side_applies_the_agent_sandbox_manifest_and_sandboxes_are_validated() {
    let test = "kubectl_server_side_applies_the_agent_sandbox_manifest_and_sandboxes_are_validated";
    let Some(kubectl) = require(Tool::Kubectl, test) else {
        return;
    };
    let env = start().await;
    // v0.5.0, then the v0.5.4 upgrade over it; each applied twice (the second a no-op that
    // still validates).
    for file in [
        "agent-sandbox-v0.5.0/manifest.yaml",
        "agent-sandbox-v0.5.4/sandbox.yaml",
    ] {
        let Some(manifest) = served_part_of_agent_sandbox_manifest(file) else {
            return;
        };
        let m = env.file("agent-sandbox.yaml", &manifest);
        for _ in 0..2 {
            let o = env
                .ok(&kubectl, &["apply", "--server-side", "-f", &m])
                .await;
            assert!(
                o.stdout.contains(
                    "customresourcedefinition.apiextensions.k8s.io/sandboxes.agents.x-k8s.io serverside-applied"
                ) && o
                    .stdout
                    .contains("deployment.apps/agent-sandbox-controller serverside-applied"),
                "{file}: {}",
                o.stdout
            );
        }
    }
    let o = env
        .ok(&kubectl, &["explain", "sandboxes.spec.podTemplate"])
        .await;
    assert!(o.stdout.contains("KIND:       Sandbox"), "{}", o.stdout);

    let sandbox = |spec: &str| {
        format!(
            "apiVersion: agents.x-k8s.io/v1beta1\nkind: Sandbox\nmetadata:\n  name: demo\nspec:\n{spec}"
        )
    };
    let pod = "  podTemplate:\n    spec:\n      containers:\n      - name: main\n        image: busybox:1\n";
    let good = env.file("sb.yaml", &sandbox(pod));
    env.ok(&kubectl, &["create", "-f", &good]).await;
    let unknown = env.file(
        "sb-unknown.yaml",
        &sandbox(&format!("{pod}  colour: blue\n")).replace("demo", "demo2"),
    );
    let o = env.run(&kubectl, &["create", "-f", &unknown], &[]).await;
    assert_eq!(o.code, 1);
    assert!(
        o.stderr
            .contains("strict decoding error: unknown field \"spec.colour\""),
        "{}",
        o.stderr
    );
    let wrong = env.file(
        "sb-wrong.yaml",
        &sandbox(&format!("{pod}  operatingMode: 5\n")).replace("demo", "demo3"),
    );
    let o = env.run(&kubectl, &["create", "-f", &wrong], &[]).await;
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("The Sandbox \"demo3\" is invalid")
            && o.stderr
                .contains("spec.operatingMode in body must be of type string: \"number\""),
        "{}",
        o.stderr
    );
    let missing = env.file(
        "sb-missing.yaml",
        &sandbox("  operatingMode: Running\n").replace("demo", "demo4"),
    );
    let o = env.run(&kubectl, &["create", "-f", &missing], &[]).await;
    assert!(
        o.stderr.contains("spec.podTemplate: Required value"),
        "{}",
        o.stderr
    );
}

fn chart(env: &Env, name: &str, configmap_data: &str) -> String {
    env.file(
        &format!("{name}/Chart.yaml"),
        &format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
    );
    env.file(
        &format!("{name}/templates/configmap.yaml"),
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{{{ .Release.Name }}}}-cfg\ndata:\n{configmap_data}"
        ),
    );
    env.file(
        &format!("{name}/templates/deployment.yaml"),
        &DEPLOYMENT.replace("name: api\nspec", "name: {{ .Release.Name }}-api\nspec"),
    );
    env.dir.path().join(name).display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_a_chart_with_default_validation_and_an_invalid_one_is_rejected() {
    let test = "helm_installs_a_chart_with_default_validation_and_an_invalid_one_is_rejected";
    let Some(helm) = require(Tool::Helm, test) else {
        return;
    };
    let env = start().await;
    let good = chart(&env, "good", "  greeting: hello\n");
    let o = env
        .ok(
            &helm,
            &["install", "demo", &good, "-n", "apps", "--create-namespace"],
        )
        .await;
    assert!(o.stdout.contains("STATUS: deployed"), "{}", o.stdout);
    assert_eq!(
        env.get("", "configmaps", Some("apps"), "demo-cfg")["data"]["greeting"],
        "hello"
    );
    env.get("apps", "deployments", Some("apps"), "demo-api");
    let o = env.ok(&helm, &["list", "-n", "apps", "-o", "json"]).await;
    let releases: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(releases[0]["name"], "demo");
    assert_eq!(releases[0]["status"], "deployed");

    let bad = chart(&env, "bad", "  replicas: 3\n");
    let o = env
        .run(&helm, &["install", "broken", &bad, "-n", "apps"], &[])
        .await;
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains(
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data.replicas of type string"
        ),
        "{}",
        o.stderr
    );
}
