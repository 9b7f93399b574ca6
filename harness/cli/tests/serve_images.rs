//! The served cluster where images mean models (`emulate serve --model … --images`, started
//! in-process through `serve::start_images`), driven by the real kubectl 1.33 and helm 3.17
//! with the real Agent Sandbox v0.5.0 manifest and OpenShell v0.0.111 chart: nothing is
//! pre-installed, the controller runs as its image's program, the chart's certgen hook creates
//! real certificates, and the gateway sees its config and TLS files. Every tool call has a
//! deadline.

mod kube_tools;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use conformance_testtools::{Tool, in_ci, require_all, workspace_root};
use kube_emulator::ResourceRef;
use openshell_conformance::serve::{ServedCluster, start_images};
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

struct Env {
    served: ServedCluster,
    dir: tempfile::TempDir,
}

impl Env {
    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Runs a tool against the served cluster (deadline 180 s); returns (code, stdout, stderr).
    async fn tool(&self, tool: &Path, args: &[&str]) -> (i32, String, String) {
        let deadline = Duration::from_secs(180);
        kube_tools::run(tool, args, &self.kubeconfig(), self.dir.path(), deadline).await
    }

    async fn ok(&self, tool: &Path, args: &[&str]) -> String {
        let (code, out, err) = self.tool(tool, args).await;
        assert_eq!(code, 0, "{} {args:?} failed:\n{out}{err}", tool.display());
        out
    }

    /// A key of a Secret in `openshell`, decoded, read through the API.
    fn secret_key(&self, secret: &str, key: &str) -> Vec<u8> {
        let s = self
            .served
            .cluster
            .get(
                &ResourceRef::new("", "v1", "secrets"),
                Some("openshell"),
                secret,
            )
            .unwrap_or_else(|e| panic!("secret {secret}: {}", e.message));
        let text = s
            .pointer(&format!("/data/{key}"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_else(|| panic!("secret {secret} has no key {key}: {s:#}"));
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap()
    }
}

fn upstream(rel: &str) -> Option<PathBuf> {
    let p = workspace_root().join("../shared/upstream").join(rel);
    if p.exists() {
        return Some(p);
    }
    assert!(
        !in_ci(),
        "{} is missing; CI must run this test",
        p.display()
    );
    eprintln!("SKIPPED: {} is missing", p.display());
    None
}

fn der(pem: &[u8]) -> Vec<u8> {
    Pem::iter_from_buffer(pem)
        .next()
        .expect("one PEM block")
        .expect("valid PEM")
        .contents
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_manifest_and_chart_install_on_the_image_models_with_real_certificates() {
    let name = "the_real_manifest_and_chart_install_on_the_image_models_with_real_certificates";
    let Some([kubectl, helm]) = require_all([Tool::Kubectl, Tool::Helm], name) else {
        return;
    };
    let (Some(manifest), Some(chart)) = (
        upstream("agent-sandbox-v0.5.0/manifest.yaml"),
        upstream("openshell-chart-v0.0.111"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let served = start_images(
        "openshell-0.0.111",
        &[],
        "combined",
        "127.0.0.1:0".parse().unwrap(),
        Some(&dir.path().join("kubeconfig")),
        None,
    )
    .await
    .unwrap();
    let env = Env { served, dir };

    // Nothing is pre-installed.
    let (code, _, err) = env
        .tool(&kubectl, &["get", "crd/sandboxes.agents.x-k8s.io"])
        .await;
    assert_ne!(code, 0, "the Sandbox CRD is pre-installed");
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
    let (code, _, _) = env.tool(&kubectl, &["get", "namespace/openshell"]).await;
    assert_ne!(code, 0, "the openshell namespace is pre-installed");

    // The real manifest: the CRD comes from it, the controller runs as its image's program.
    env.ok(
        &kubectl,
        &["apply", "--server-side", "-f", manifest.to_str().unwrap()],
    )
    .await;
    env.ok(
        &kubectl,
        &[
            "wait",
            "--for=condition=Established",
            "crd/sandboxes.agents.x-k8s.io",
            "--timeout=60s",
        ],
    )
    .await;
    let status = env
        .ok(
            &kubectl,
            &[
                "-n",
                "agent-sandbox-system",
                "rollout",
                "status",
                "deployment/agent-sandbox-controller",
                "--timeout=60s",
            ],
        )
        .await;
    assert!(status.contains("successfully rolled out"), "{status}");
    let logs = env
        .ok(
            &kubectl,
            &[
                "-n",
                "agent-sandbox-system",
                "logs",
                "-l",
                "app=agent-sandbox-controller",
            ],
        )
        .await;
    assert!(
        logs.contains("starting the Agent Sandbox controller model v0.5.0"),
        "{logs}"
    );

    // The real chart with the values the harness sets (F5.6, F5.11), and --wait.
    env.ok(
        &helm,
        &[
            "install",
            "openshell",
            chart.to_str().unwrap(),
            "-n",
            "openshell",
            "--create-namespace",
            "--set",
            "fullnameOverride=openshell",
            "--set",
            "server.auth.allowUnauthenticatedUsers=true",
            "--set",
            "supervisor.topology=combined",
            "--wait",
            "--timeout",
            "120s",
        ],
    )
    .await;

    // The three Secrets, with real X.509: the server certificate chains to the CA and names
    // 127.0.0.1 and the Service; the client certificate verifies against the CA.
    let ca_pem = env.secret_key("openshell-server-tls", "ca.crt");
    assert_eq!(env.secret_key("openshell-client-tls", "ca.crt"), ca_pem);
    let ca_der = der(&ca_pem);
    let (_, ca) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    assert!(ca.is_ca(), "the CA certificate is a CA");
    let server_der = der(&env.secret_key("openshell-server-tls", "tls.crt"));
    let (_, server) = x509_parser::parse_x509_certificate(&server_der).unwrap();
    server
        .verify_signature(Some(ca.public_key()))
        .expect("the server certificate is signed by the CA");
    assert_eq!(server.issuer(), ca.subject());
    let sans: Vec<String> = server
        .subject_alternative_name()
        .unwrap()
        .expect("the server certificate has SANs")
        .value
        .general_names
        .iter()
        .map(|n| match n {
            GeneralName::DNSName(d) => d.to_string(),
            GeneralName::IPAddress(ip) if ip.len() == 4 => {
                std::net::Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]).to_string()
            }
            other => format!("{other:?}"),
        })
        .collect();
    for want in [
        "127.0.0.1",
        "openshell",
        "openshell.openshell.svc",
        "openshell.openshell.svc.cluster.local",
        "localhost",
    ] {
        assert!(
            sans.iter().any(|s| s == want),
            "SAN {want} missing: {sans:?}"
        );
    }
    let client_der = der(&env.secret_key("openshell-client-tls", "tls.crt"));
    let (_, client) = x509_parser::parse_x509_certificate(&client_der).unwrap();
    client
        .verify_signature(Some(ca.public_key()))
        .expect("the client certificate is signed by the CA");
    let kid = env.secret_key("openshell-jwt-keys", "kid");
    assert_eq!(kid.len(), 32, "kid: {}", String::from_utf8_lossy(&kid));
    assert!(
        String::from_utf8_lossy(&env.secret_key("openshell-jwt-keys", "signing.pem"))
            .contains("BEGIN PRIVATE KEY")
    );

    // The gateway pod is Ready and its container sees the chart's config and the TLS files.
    env.ok(
        &kubectl,
        &[
            "-n",
            "openshell",
            "wait",
            "--for=condition=Ready",
            "pod/openshell-0",
            "--timeout=60s",
        ],
    )
    .await;
    let cat = |path: &'static str| {
        let env = &env;
        let kubectl = &kubectl;
        async move {
            env.ok(
                kubectl,
                &[
                    "-n",
                    "openshell",
                    "exec",
                    "openshell-0",
                    "-c",
                    "openshell-gateway",
                    "--",
                    "cat",
                    path,
                ],
            )
            .await
        }
    };
    let config = cat("/etc/openshell/gateway.toml").await;
    assert!(config.contains("[openshell.gateway]"), "{config}");
    assert!(
        config.contains("allow_unauthenticated_users = true"),
        "{config}"
    );
    assert_eq!(
        cat("/etc/openshell-tls/server/tls.crt").await.as_bytes(),
        env.secret_key("openshell-server-tls", "tls.crt")
    );
    assert_eq!(
        cat("/etc/openshell-tls/server/tls.key").await.as_bytes(),
        env.secret_key("openshell-server-tls", "tls.key")
    );
    assert_eq!(
        cat("/etc/openshell-tls/client-ca/ca.crt").await.as_bytes(),
        ca_pem
    );
    assert_eq!(cat("/etc/openshell-jwt/kid").await.as_bytes(), kid);
}
