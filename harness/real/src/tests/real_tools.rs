//! Proofs against the real artifacts: the OpenShell v0.0.111 chart rendered by helm 3.17, and the
//! v0.0.111 `openshell` CLI run against a gRPC endpoint served here that answers every call
//! with a chosen status. Missing tools or artifacts skip locally and fail in CI
//! (`conformance-testtools`).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use conformance_testtools::{Tool, in_ci, require, workspace_root};

use crate::cli::{OpenShellCli, parse_refusal};
use crate::command::{Cmd, CmdError, CmdOutput, CommandRunner, SystemRunner};
use crate::install::Install;
use crate::options::{Provider, RealArgs, RealOptions};
use crate::pins;
use conformance_core::target::{RestartPolicy, SandboxSpec};
use conformance_core::topology::Topologies;

/// The real chart as published for v0.0.111, or None after saying why the test is skipped.
fn upstream_chart(test: &str) -> Option<PathBuf> {
    let p = workspace_root().join("../shared/upstream/openshell-chart-v0.0.111");
    if p.join("Chart.yaml").is_file() {
        return Some(p);
    }
    let why = format!("the OpenShell v0.0.111 chart is not at {}", p.display());
    assert!(!in_ci(), "{test}: {why}; CI must run this test");
    eprintln!("SKIPPED {test}: {why}");
    None
}

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    real: RealArgs,
}

fn opts(extra: &[&str], run: &Path, private: &Path) -> RealOptions {
    let base = [
        "x",
        "--run-dir",
        run.to_str().unwrap(),
        "--private-dir",
        private.to_str().unwrap(),
    ];
    Args::try_parse_from(base.iter().chain(extra.iter()).copied())
        .unwrap()
        .real
        .resolve(Provider::Kind, "proof", "/repo")
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// The chart

/// Renders the chart with exactly the values files and `--set`s the harness's helm call uses.
fn render(helm: &Path, inst: &Install) -> Vec<serde_json::Value> {
    std::fs::create_dir_all(inst.values_path.parent().unwrap()).unwrap();
    std::fs::write(&inst.values_path, inst.values_yaml()).unwrap();
    let upgrade = inst.helm_cmd();
    // `helm upgrade --install R CHART ...` → `helm template R CHART ...` without the cluster,
    // wait and timeout flags.
    let mut args = vec!["template".to_string()];
    let mut it = upgrade.args.iter().skip(2).peekable();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--kubeconfig" | "--kube-context" | "--timeout" => {
                it.next();
            }
            "--wait" | "--create-namespace" => {}
            _ => args.push(a.clone()),
        }
    }
    let out = std::process::Command::new(helm)
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_saphyr::from_multiple::<serde_json::Value>(&text)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn object<'a>(docs: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the render has no {kind}/{name}"))
}

/// The `key = value` lines of one `[section]` of the rendered gateway.toml.
fn toml_section(toml: &str, section: &str) -> BTreeMap<String, String> {
    let mut inside = false;
    let mut out = BTreeMap::new();
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == format!("[{section}]");
            continue;
        }
        if inside && let Some((k, v)) = line.split_once('=') {
            out.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    out
}

#[test]
fn every_topology_the_chart_supports_renders_with_real_helm_as_the_fixture_intends() {
    let test = "every_topology_the_chart_supports_renders_with_real_helm_as_the_fixture_intends";
    let Some(helm) = require(Tool::Helm, test) else {
        return;
    };
    let Some(chart) = upstream_chart(test) else {
        return;
    };
    let run = tempfile::tempdir().unwrap();
    let private = crate::tests::private_tempdir();
    let o = opts(
        &["--chart-path", chart.to_str().unwrap()],
        run.path(),
        private.path(),
    );
    let topologies = Topologies::builtin();
    let mut rendered = Vec::new();
    for t in topologies.all() {
        if let Some(why) = o.topology_skip_reason(t).unwrap() {
            // Only the topologies reported for 0.1.5 and later are skipped at v0.0.111.
            assert!(t.min_openshell > semver::Version::new(0, 0, 111), "{why}");
            assert!(why.contains("needs OpenShell 0.1.5 or newer"), "{why}");
            continue;
        }
        let inst = Install::new(&o, t).unwrap();
        let docs = render(&helm, &inst);
        let config = object(&docs, "ConfigMap", "openshell-config");
        let toml = config["data"]["gateway.toml"].as_str().unwrap();
        // The topology the fixture selects.
        let driver = toml_section(toml, "openshell.drivers.kubernetes");
        assert_eq!(
            driver.get("topology").map(String::as_str),
            Some(format!("\"{}\"", t.name).as_str()),
            "{toml}"
        );
        // TLS on (the chart default the harness keeps), with the client certificate Secret
        // the harness copies for the CLI.
        assert!(inst.tls);
        let gw = toml_section(toml, "openshell.gateway");
        assert!(!gw.contains_key("disable_tls"), "{toml}");
        assert_eq!(
            gw.get("client_tls_secret_name").map(String::as_str),
            Some("\"openshell-client-tls\"")
        );
        assert!(
            toml_section(toml, "openshell.gateway.tls").contains_key("client_ca_path"),
            "{toml}"
        );
        // The gateway's sandboxes live in the namespace the harness watches.
        assert_eq!(
            gw.get("sandbox_namespace").map(String::as_str),
            Some(format!("\"{}\"", o.namespace).as_str()),
            "{toml}"
        );
        // Auth that lets the harness in.
        assert_eq!(
            toml_section(toml, "openshell.gateway.auth")
                .get("allow_unauthenticated_users")
                .map(String::as_str),
            Some("true"),
            "{toml}"
        );
        // What real/ looks up: the gateway workload by the release name, its selector, the
        // grpc port, the data claim template, and the certgen job that makes the client Secret.
        let sts = object(&docs, "StatefulSet", &o.release);
        let selector = sts["spec"]["selector"]["matchLabels"].as_object().unwrap();
        let labels = &sts["spec"]["template"]["metadata"]["labels"];
        for (k, v) in selector {
            assert_eq!(&labels[k], v, "pod template label {k}");
        }
        let containers = sts["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert!(
            containers.iter().any(|c| c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["containerPort"] == pins::GATEWAY_GRPC_PORT && p["name"] == "grpc")),
            "{containers:#?}"
        );
        assert_eq!(
            sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
            pins::GATEWAY_DATA_CLAIM
        );
        assert_eq!(
            crate::leftovers::data_pvc_prefix(&o),
            format!("{}-{}-", pins::GATEWAY_DATA_CLAIM, o.release)
        );
        let certgen = object(&docs, "Job", "openshell-certgen");
        assert!(
            certgen.to_string().contains("openshell-client-tls"),
            "the certgen job makes the Secret the harness reads"
        );
        // The CLI connects to https://127.0.0.1:<forwarded port>; the server certificate must
        // name that address.
        assert!(
            certgen.to_string().contains("--server-san=127.0.0.1"),
            "{certgen:#}"
        );
        object(&docs, "Service", &o.release);
        rendered.push(t.name.clone());
    }
    assert_eq!(rendered, ["combined", "sidecar"]);
}

#[test]
fn a_values_file_turning_authentication_back_on_renders_no_auth_section() {
    // The check after install is what catches this on a cluster; here the render shows why.
    let test = "a_values_file_turning_authentication_back_on_renders_no_auth_section";
    let Some(helm) = require(Tool::Helm, test) else {
        return;
    };
    let Some(chart) = upstream_chart(test) else {
        return;
    };
    let run = tempfile::tempdir().unwrap();
    let private = crate::tests::private_tempdir();
    let o = opts(
        &[
            "--chart-path",
            chart.to_str().unwrap(),
            "--set",
            "server.auth.allowUnauthenticatedUsers=false",
        ],
        run.path(),
        private.path(),
    );
    let inst = Install::new(&o, Topologies::builtin().get("combined").unwrap()).unwrap();
    let docs = render(&helm, &inst);
    let toml = object(&docs, "ConfigMap", "openshell-config")["data"]["gateway.toml"]
        .as_str()
        .unwrap();
    assert!(
        toml_section(toml, "openshell.gateway.auth").is_empty(),
        "{toml}"
    );
}

// ---------------------------------------------------------------------------------------------
// A gRPC endpoint answering every call with one status

/// The real CLI in a fresh private home, registered with a gateway served in the test that
/// answers every call with gRPC status `code` and `message`. Keep the home and the server.
async fn cli_against_status(
    bin: &std::path::Path,
    code: u32,
    message: &'static str,
) -> (OpenShellCli, tempfile::TempDir, tokio::task::JoinHandle<()>) {
    let (addr, server) = serve_status(code, message).await;
    let home = crate::tests::private_tempdir();
    let cli = real_cli(bin, Arc::new(SystemRunner), home.path(), "proof");
    cli.prepare_home().unwrap();
    let add = SystemRunner
        .run(&cli.gateway_add_cmd(addr.port(), false))
        .await
        .unwrap();
    assert!(add.success(), "gateway add: {add:?}");
    (cli, home, server)
}

/// Serves HTTP/2 without TLS on a free port; every request gets a trailers-only gRPC reply
/// with `grpc-status` and `grpc-message` (no body, so no .proto is needed).
async fn serve_status(
    code: u32,
    message: &'static str,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req| async move {
                    Ok::<_, Infallible>(
                        http::Response::builder()
                            .status(200)
                            .header("content-type", "application/grpc")
                            .header("grpc-status", code.to_string())
                            .header("grpc-message", message)
                            .body(String::new())
                            .unwrap(),
                    )
                });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                        .await;
            });
        }
    });
    (addr, task)
}

/// Runs commands as if the user's own environment were inherited: `user` variables are added
/// unless the command sets or removes them itself, as a process would inherit them.
struct AsUser {
    user: BTreeMap<String, String>,
}

#[async_trait::async_trait]
impl CommandRunner for AsUser {
    async fn run(&self, cmd: &Cmd) -> Result<CmdOutput, CmdError> {
        let mut c = cmd.clone();
        for (k, v) in &self.user {
            if !c.env.contains_key(k) && !c.env_remove.contains(k) {
                c.env.insert(k.clone(), v.clone());
            }
        }
        // Nothing of the test process's own environment may stand in for the user's.
        for k in [
            "HOME",
            "XDG_CONFIG_HOME",
            "XDG_STATE_HOME",
            "OPENSHELL_GATEWAY_ENDPOINT",
        ] {
            if !c.env.contains_key(k) {
                c.env_remove.insert(k.to_string());
            }
        }
        // Colours and terminal widths must not depend on where the test runs.
        c.env.insert("NO_COLOR".into(), "1".into());
        SystemRunner.run(&c).await
    }
}

/// Every file under `dir` with its size and modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.insert(e.path(), (m.len(), m.modified().unwrap()));
        }
    }
    out
}

/// The user's own OpenShell: a home with a registered gateway and a local client bundle that
/// `gateway add --local` would import (docs/upstream-facts.md F6.10).
fn users_openshell(home: &Path) -> BTreeMap<String, String> {
    let tls = home.join(".local/state/openshell/tls");
    std::fs::create_dir_all(tls.join("client")).unwrap();
    std::fs::write(tls.join("ca.crt"), "USER CA").unwrap();
    std::fs::write(tls.join("client/tls.crt"), "USER CERT").unwrap();
    std::fs::write(tls.join("client/tls.key"), "USER KEY").unwrap();
    let gw = home.join(".config/openshell/gateways/mine");
    std::fs::create_dir_all(&gw).unwrap();
    std::fs::write(
        gw.join("metadata.json"),
        r#"{"name":"mine","gateway_endpoint":"http://127.0.0.1:1","is_remote":false,"gateway_port":0}"#,
    )
    .unwrap();
    std::fs::write(home.join(".config/openshell/active_gateway"), "mine").unwrap();
    BTreeMap::from([
        ("HOME".into(), home.display().to_string()),
        (
            "OPENSHELL_GATEWAY_ENDPOINT".into(),
            "http://127.0.0.1:1".into(),
        ),
    ])
}

fn real_cli(program: &Path, runner: Arc<dyn CommandRunner>, home: &Path, gw: &str) -> OpenShellCli {
    let mut c = OpenShellCli::new(runner, program.to_str().unwrap(), home.to_path_buf(), gw);
    c.call_timeout = Duration::from_secs(30);
    c.lifecycle_timeout = Duration::from_secs(30);
    c
}

/// The gRPC codes the harness tells apart, with a message the served status carries.
const CODES: &[(u32, &str, &str)] = &[
    (3, "InvalidArgument", "name is not valid"),
    (5, "NotFound", "sandbox not found"),
    (7, "PermissionDenied", "not allowed"),
    (
        9,
        "FailedPrecondition",
        "sandbox must be Ready to stop (current phase: Provisioning)",
    ),
    (13, "Internal", "database is locked"),
    (14, "Unavailable", "compute driver is not ready"),
    (16, "Unauthenticated", "missing authorization header"),
];

#[tokio::test]
async fn the_refusal_parser_reads_what_the_real_cli_prints_for_each_grpc_code() {
    let test = "the_refusal_parser_reads_what_the_real_cli_prints_for_each_grpc_code";
    let Some(bin) = require(Tool::OpenshellCli, test) else {
        return;
    };
    for &(code, name, message) in CODES {
        let (cli, _home, server) = cli_against_status(&bin, code, message).await;
        for args in [
            vec!["sandbox", "get", "s1", "-o", "json"],
            vec!["sandbox", "stop", "s1"],
        ] {
            let out = SystemRunner.run(&cli.cmd(args.clone())).await.unwrap();
            assert_eq!(out.code, 1, "{args:?} with {name}: {out:?}");
            assert_eq!(
                parse_refusal(&out.stderr),
                Some((name.to_string(), message.to_string())),
                "{args:?} with {name}; the CLI printed:\n{}",
                out.stderr
            );
        }
        server.abort();
    }
}

#[tokio::test]
async fn an_existing_sandbox_and_an_unreachable_gateway_read_as_the_real_cli_says_them() {
    let test = "an_existing_sandbox_and_an_unreachable_gateway_read_as_the_real_cli_says_them";
    let Some(bin) = require(Tool::OpenshellCli, test) else {
        return;
    };
    let (cli, _home, server) = cli_against_status(&bin, 6, "sandbox already exists").await;
    let create = cli
        .create_cmd(
            &SandboxSpec {
                name: "s1".into(),
                ..SandboxSpec::default()
            },
            &Default::default(),
        )
        .unwrap();
    let out = SystemRunner.run(&create).await.unwrap();
    assert_eq!(
        parse_refusal(&out.stderr),
        Some(("AlreadyExists".into(), "sandbox already exists".into())),
        "{}",
        out.stderr
    );
    // The gateway gone: a transport error, which is no refusal (the harness reads it as an
    // unreachable gateway, not as the product saying no).
    server.abort();
    let _ = server.await;
    let out = SystemRunner
        .run(&cli.cmd(["sandbox", "get", "s1", "-o", "json"]))
        .await
        .unwrap();
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(parse_refusal(&out.stderr), None, "{}", out.stderr);
}

/// Every argv of the CLI the harness can emit, from the plans of each target and topology and
/// from the sandbox driver, parses with the real CLI: run against the served endpoint, a call
/// ends with the served status (exit 1), never with a usage error (exit 2).
#[tokio::test]
async fn every_cli_argv_the_harness_emits_parses_with_the_real_cli() {
    let test = "every_cli_argv_the_harness_emits_parses_with_the_real_cli";
    let Some(bin) = require(Tool::OpenshellCli, test) else {
        return;
    };
    let (addr, server) = serve_status(5, "sandbox not found").await;
    let run = tempfile::tempdir().unwrap();
    let private = crate::tests::private_tempdir();
    let mut argvs: Vec<Vec<String>> = Vec::new();
    let topologies = Topologies::builtin();
    let all: Vec<_> = topologies.all().collect();
    for (provider, extra) in [
        (Provider::Kind, vec![]),
        (Provider::K3d, vec![]),
        (
            Provider::Existing,
            vec!["--context", "kind-x", "--chart-version", "0.1.6"],
        ),
    ] {
        let base = [
            "x",
            "--run-dir",
            run.path().to_str().unwrap(),
            "--private-dir",
            private.path().to_str().unwrap(),
        ];
        let o = Args::try_parse_from(base.iter().chain(extra.iter()).copied())
            .unwrap()
            .real
            .resolve(provider, "proof", "/repo")
            .unwrap();
        let plan = crate::plan::dry_run(&o, &all).unwrap();
        for c in plan.commands() {
            if c.program == "openshell" {
                argvs.push(c.args.clone());
            }
        }
    }
    let home = crate::tests::private_tempdir();
    let cli = real_cli(&bin, Arc::new(SystemRunner), home.path(), "proof");
    for spec in [
        SandboxSpec {
            name: "s1".into(),
            labels: BTreeMap::from([(pins::RUN_LABEL.into(), "proof".into())]),
            ..SandboxSpec::default()
        },
        SandboxSpec {
            name: "s2".into(),
            command: Some(vec!["sh".into(), "-c".into(), "sleep 1; exit 3".into()]),
            ..SandboxSpec::default()
        },
    ] {
        argvs.push(cli.create_cmd(&spec, &Default::default()).unwrap().args);
    }
    for a in [
        vec!["sandbox", "get", "s1", "-o", "json"],
        vec![
            "sandbox",
            "exec",
            "-n",
            "s1",
            "--no-tty",
            "--",
            "sh",
            "-c",
            "cat /sandbox/x",
        ],
        vec!["sandbox", "stop", "s1"],
        vec!["sandbox", "start", "s1"],
        vec!["sandbox", "delete", "s1"],
    ] {
        argvs.push(a.into_iter().map(String::from).collect());
    }
    // The 0.0.111 CLI has no --restart-policy, and the harness does not emit it there.
    let caps = crate::cli::capabilities_from_help(
        &SystemRunner
            .run(&cli.cmd(["sandbox", "create", "--help"]))
            .await
            .unwrap()
            .stdout,
    );
    let restart = SandboxSpec {
        name: "s3".into(),
        restart_policy: Some(RestartPolicy::OnFailure),
        ..SandboxSpec::default()
    };
    assert!(cli.create_cmd(&restart, &caps).is_err());

    // Register the served endpoint once (the plans' `gateway add` is https with --local and
    // needs the chart's client certificate, so it runs with files the test writes).
    cli.prepare_home().unwrap();
    std::fs::create_dir_all(cli.mtls_dir()).unwrap();
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        std::fs::write(cli.mtls_dir().join(f), "harness").unwrap();
    }
    let mut seen_add = false;
    argvs.sort();
    argvs.dedup();
    for args in &argvs {
        let args: Vec<String> = args
            .iter()
            .map(|a| a.replace("$PORT", &addr.port().to_string()))
            .collect();
        let out = SystemRunner
            .run(&cli.cmd(args.clone()).timeout(Duration::from_secs(30)))
            .await
            .unwrap();
        assert_ne!(out.code, 2, "usage error for {args:?}:\n{}", out.stderr);
        assert!(
            !out.stderr.contains("unexpected argument") && !out.stderr.contains("Usage:"),
            "{args:?}:\n{}",
            out.stderr
        );
        seen_add |= args.starts_with(&["gateway".to_string(), "add".to_string()]);
    }
    assert!(seen_add, "the plans register the gateway");
    server.abort();
}

/// `gateway add` twice under one name is refused by the real CLI, which is why the harness
/// registers once per topology per run; a registration an earlier run left behind is removed
/// first. The user's own OpenShell (HOME, its registered gateway, a local client bundle,
/// OPENSHELL_GATEWAY_ENDPOINT) is neither read nor touched.
#[tokio::test]
async fn the_cli_is_registered_once_from_its_private_home_and_nothing_of_the_users_is_touched() {
    let test =
        "the_cli_is_registered_once_from_its_private_home_and_nothing_of_the_users_is_touched";
    let Some(bin) = require(Tool::OpenshellCli, test) else {
        return;
    };
    let (addr, server) = serve_status(5, "sandbox not found").await;
    let user_home = tempfile::tempdir().unwrap();
    let user_env = users_openshell(user_home.path());
    let before = snapshot(user_home.path());
    let runner: Arc<dyn CommandRunner> = Arc::new(AsUser { user: user_env });
    let private = crate::tests::private_tempdir();
    let home = private.path().join("cli-combined");
    let cli = real_cli(&bin, runner.clone(), &home, "conformance-combined");

    cli.prepare_home().unwrap();
    std::fs::create_dir_all(cli.mtls_dir()).unwrap();
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        std::fs::write(cli.mtls_dir().join(f), format!("HARNESS {f}")).unwrap();
    }
    let add = cli.gateway_add_cmd(addr.port(), true);
    let first = runner.run(&add).await.unwrap();
    assert!(first.success(), "{first:?}");
    // The harness's certificate stays; the user's local bundle was not imported over it.
    assert_eq!(
        std::fs::read_to_string(cli.mtls_dir().join("tls.key")).unwrap(),
        "HARNESS tls.key"
    );
    let second = runner.run(&add).await.unwrap();
    assert_eq!(second.code, 1, "{second:?}");
    assert!(
        second.stderr.contains("already exists"),
        "{}",
        second.stderr
    );

    // A later run in the same private directory starts from a clean registration (plaintext
    // here, so the served endpoint answers without a certificate).
    cli.prepare_home().unwrap();
    assert!(!cli.mtls_dir().exists());
    let add = runner
        .run(&cli.gateway_add_cmd(addr.port(), false))
        .await
        .unwrap();
    assert!(add.success(), "{add:?}");

    // Calls go to the registered gateway, not to the user's endpoint or active gateway.
    let out = runner
        .run(&cli.cmd(["sandbox", "get", "s1", "-o", "json"]))
        .await
        .unwrap();
    assert_eq!(
        parse_refusal(&out.stderr),
        Some(("NotFound".into(), "sandbox not found".into())),
        "{}",
        out.stderr
    );

    assert_eq!(
        snapshot(user_home.path()),
        before,
        "the user's home was touched"
    );
    // Everything the CLI wrote is inside its private home.
    for p in snapshot(private.path()).keys() {
        assert!(p.starts_with(&home), "{}", p.display());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&home).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }
    server.abort();
}

// ---------------------------------------------------------------------------------------------
// Agent Sandbox release assets

/// The release assets the harness installs are named as `pins` says per version, and carry the
/// CRD and the controller Deployment the install waits for; a local file is applied as given.
#[test]
fn the_agent_sandbox_release_assets_have_the_names_and_objects_the_install_waits_for() {
    let test = "the_agent_sandbox_release_assets_have_the_names_and_objects_the_install_waits_for";
    for (version, file) in [("v0.5.0", "manifest.yaml"), ("v0.5.4", "sandbox.yaml")] {
        assert_eq!(pins::agent_sandbox_asset(version), Some(file));
        let path = workspace_root()
            .join("../shared/upstream")
            .join(format!("agent-sandbox-{version}"))
            .join(file);
        if !path.is_file() {
            let why = format!(
                "the Agent Sandbox {version} asset is not at {}",
                path.display()
            );
            assert!(!in_ci(), "{test}: {why}; CI must run this test");
            eprintln!("SKIPPED {test}: {why}");
            return;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
        assert!(
            docs.iter().any(|d| d["kind"] == "CustomResourceDefinition"
                && d["metadata"]["name"] == pins::SANDBOX_CRD),
            "{version}: no CRD {}",
            pins::SANDBOX_CRD
        );
        assert!(
            docs.iter().any(|d| d["kind"] == "Deployment"
                && d["metadata"]["name"] == pins::AGENT_SANDBOX_CONTROLLER
                && d["metadata"]["namespace"] == pins::AGENT_SANDBOX_NAMESPACE),
            "{version}: no Deployment {}/{}",
            pins::AGENT_SANDBOX_NAMESPACE,
            pins::AGENT_SANDBOX_CONTROLLER
        );
        let run = tempfile::tempdir().unwrap();
        let private = crate::tests::private_tempdir();
        let o = opts(
            &["--agent-sandbox-manifest", path.to_str().unwrap()],
            run.path(),
            private.path(),
        );
        let apply = crate::install::agent_sandbox_cmds(&o).remove(0);
        assert_eq!(apply.args.last().map(String::as_str), path.to_str());
    }
}

/// The check right after install: a gateway that refuses the harness stops the case with an
/// infrastructure error quoting what the real CLI reported.
#[tokio::test]
async fn a_gateway_that_refuses_the_harness_stops_the_install_quoting_its_answer() {
    let test = "a_gateway_that_refuses_the_harness_stops_the_install_quoting_its_answer";
    let Some(bin) = require(Tool::OpenshellCli, test) else {
        return;
    };
    let (cli, _home, server) = cli_against_status(&bin, 16, "missing authorization header").await;
    let err = cli
        .check_access("openshell-conformance.io/run=proof")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, conformance_core::target::TargetError::Infra { .. }),
        "{err:?}"
    );
    assert!(
        text.contains("did not let the harness in")
            && text.contains("missing authorization header")
            && text.contains("allowUnauthenticatedUsers"),
        "{text}"
    );
    server.abort();
}
