//! The gateway model's gRPC listener driven by real clients, the way the real path reaches the
//! real gateway: the emulated cluster served over TCP with the contract model installed, a
//! kube-rs port-forward to the gateway pod's port 8080 on a local port, and then the real
//! `openshell` v0.0.111 CLI or the official Python SDK (docs/upstream-facts.md F6, F7.5-F7.7).
//! Every wait and every tool call has a deadline.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::gateway::GatewayProgram;
use crate::install;
use crate::model::NAMESPACE;
use crate::spec::Selection;
use crate::target::EmulatedTarget;
use conformance_core::topology::Topologies;
use conformance_kube_models::program::{ContainerCtx, ContainerProgram, Signal};
use conformance_testtools::{Tool, require, require_all};
use kube_emulator::ClusterConfig;
use kube_emulator::shell::{Mounts, Volume};

const CALL_DEADLINE: Duration = Duration::from_secs(25);

/// The served cluster with the contract model installed, and a kube-rs client of it over TCP.
struct Served {
    target: Arc<EmulatedTarget>,
    client: kube::Client,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn serve(install_model: bool) -> Served {
    let topology = Topologies::builtin()
        .get("combined")
        .expect("builtin topology")
        .clone();
    let epoch_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let target = Arc::new(EmulatedTarget::start_with(
        Selection::contract(),
        &topology,
        ClusterConfig {
            epoch_unix,
            ..ClusterConfig::default()
        },
    ));
    if install_model {
        install::install(&target.cluster, &target.model).expect("install");
    }
    let endpoint = kube_emulator::serve::bind("127.0.0.1:0".parse().unwrap())
        .await
        .expect("bind");
    let config = endpoint
        .credentials()
        .client_config(endpoint.addr())
        .await
        .expect("a client configuration");
    let cluster = target.cluster.clone();
    let server = tokio::spawn(async move {
        let _ = endpoint.serve(cluster).await;
    });
    let client = kube::Client::try_from(config).expect("client");
    Served {
        target,
        client,
        server,
    }
}

/// Waits (deadline 60 s) until pod `name` is Running and Ready.
async fn wait_pod_ready(client: &kube::Client, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut last = String::from("not seen");
    loop {
        if let Ok(p) = pods.get(name).await {
            let st = p.status.unwrap_or_default();
            let ready = st
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            last = format!("phase {:?}, ready {ready}", st.phase);
            if ready && st.phase.as_deref() == Some("Running") {
                return;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pod {name} not Running and Ready within 20 s; last seen: {last}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A local TCP port forwarded, one kube-rs port-forward per connection, to `pod`:8080.
async fn forward(client: &kube::Client, pod: &str) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let pod = pod.to_string();
    let task = tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let pods = pods.clone();
            let pod = pod.clone();
            tokio::spawn(async move {
                let Ok(mut pf) = pods.portforward(&pod, &[8080]).await else {
                    return;
                };
                let Some(upstream) = pf.take_stream(8080) else {
                    return;
                };
                // The port-forward protocol has no half-close: the gateway's side decides.
                let (mut ur, mut uw) = tokio::io::split(upstream);
                let (mut cr, mut cw) = conn.split();
                let up = async {
                    let _ = tokio::io::copy(&mut cr, &mut uw).await;
                    std::future::pending::<()>().await;
                };
                let down = tokio::io::copy(&mut ur, &mut cw);
                tokio::select! {
                    biased;
                    _ = up => {}
                    _ = down => {}
                }
                let _ = cw.shutdown().await;
                pf.abort();
            });
        }
    });
    (addr, task)
}

/// Runs the real CLI from a private home (HOME and XDG_* inside it, as the real path's driver
/// isolates it); returns (exit code, stdout, stderr).
async fn cli(bin: &Path, home: &Path, args: &[&str]) -> (i32, String, String) {
    let h = |s: &str| home.join(s);
    // Output goes to files, so a call past its deadline still shows what it printed.
    let (out_path, err_path) = (h("cli.stdout"), h("cli.stderr"));
    let mut child = tokio::process::Command::new(bin)
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", h("config"))
        .env("XDG_STATE_HOME", h("state"))
        .env("XDG_DATA_HOME", h("data"))
        .env("XDG_CACHE_HOME", h("cache"))
        .env("OPENSHELL_LOCAL_TLS_DIR", h("no-local-tls"))
        .env("OPENSHELL_SYSTEM_GATEWAY_DIR", h("no-system-gateways"))
        .env("OPENSHELL_GATEWAY", "t")
        .env_remove("OPENSHELL_GATEWAY_ENDPOINT")
        .env_remove("OPENSHELL_WORKSPACE")
        .env("NO_COLOR", "1")
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("the CLI runs");
    let status = tokio::time::timeout(CALL_DEADLINE, child.wait()).await;
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let (out, err) = (read(&out_path), read(&err_path));
    let status = status.unwrap_or_else(|_| {
        panic!(
            "openshell {args:?} did not finish within {CALL_DEADLINE:?}; it printed:\n{out}\n{err}"
        )
    });
    (status.unwrap().code().unwrap_or(-1), out, err)
}

async fn cli_ok(bin: &Path, home: &Path, args: &[&str]) -> String {
    let (code, out, err) = cli(bin, home, args).await;
    assert_eq!(code, 0, "openshell {args:?} failed:\n{out}\n{err}");
    out
}

/// The user's path through the CLI: create (waits for Ready), list, exec, stop, start, delete.
async fn lifecycle_through_the_cli(bin: &Path, home: &Path) {
    let created = cli_ok(
        bin,
        home,
        &["sandbox", "create", "--name", "s1", "-o", "json"],
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&created)
        .unwrap_or_else(|e| panic!("create -o json is not JSON ({e}): {created}"));
    assert_eq!(v["name"], "s1", "{created}");
    assert_eq!(v["phase"], "Ready", "{created}");
    let listed = cli_ok(bin, home, &["sandbox", "list", "-o", "json"]).await;
    let v: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let names: Vec<_> = v
        .as_array()
        .unwrap_or_else(|| panic!("list -o json is not an array: {listed}"))
        .iter()
        .map(|s| s["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(names, ["s1"], "{listed}");
    // `sandbox get` also asks for the sandbox's configuration (GetSandboxConfig).
    let got = cli_ok(bin, home, &["sandbox", "get", "s1", "-o", "json"]).await;
    let v: serde_json::Value = serde_json::from_str(&got)
        .unwrap_or_else(|e| panic!("get -o json is not JSON ({e}): {got}"));
    assert_eq!(v["name"], "s1", "{got}");
    assert_eq!(v["phase"], "Ready", "{got}");
    assert_eq!(v["policy_source"], "sandbox", "{got}");
    let out = cli_ok(
        bin,
        home,
        &[
            "sandbox", "exec", "-n", "s1", "--no-tty", "--", "sh", "-c", "echo hi",
        ],
    )
    .await;
    assert_eq!(out.trim(), "hi");
    cli_ok(bin, home, &["sandbox", "stop", "s1"]).await;
    cli_ok(bin, home, &["sandbox", "start", "s1"]).await;
    let out = cli_ok(bin, home, &["sandbox", "delete", "s1"]).await;
    assert!(out.contains("Deleted sandbox s1"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_cli_drives_the_served_gateway_through_a_port_forward() {
    let test = "the_real_cli_drives_the_served_gateway_through_a_port_forward";
    let Some(bin) = require(Tool::OpenshellCli, test) else {
        return;
    };
    let s = serve(true).await;
    wait_pod_ready(&s.client, "openshell-0").await;
    let (addr, _fwd) = forward(&s.client, "openshell-0").await;
    let home = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", addr.port());
    cli_ok(&bin, home.path(), &["gateway", "add", &url, "--name", "t"]).await;
    lifecycle_through_the_cli(&bin, home.path()).await;
    // A sandbox that is not there is NotFound, as upstream answers it.
    let (code, out, err) = cli(&bin, home.path(), &["sandbox", "get", "nope"]).await;
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("sandbox not found"), "{err}");
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM.
struct Pki {
    ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
}

fn pki() -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "conformance test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |sans: Vec<String>, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(sans).unwrap();
        p.subject_alt_names
            .push(rcgen::SanType::IpAddress([127, 0, 0, 1].into()));
        p.distinguished_name.push(DnType::CommonName, "openshell");
        p.extended_key_usages = vec![usage];
        let cert = p.signed_by(&key, &ca).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf(
        vec!["localhost".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client_cert, client_key) = leaf(
        vec!["openshell-client".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    Pki {
        ca: ca.pem(),
        server_cert,
        server_key,
        client_cert,
        client_key,
    }
}

/// A gateway.toml as the chart renders it with TLS on (paths of its Secret mounts).
const TLS_CONFIG: &str = r#"
[openshell]
version = 1

[openshell.gateway]
bind_address = "0.0.0.0:8080"
sandbox_namespace = "openshell"

[openshell.gateway.tls]
cert_path = "/etc/openshell-tls/server/tls.crt"
key_path = "/etc/openshell-tls/server/tls.key"
client_ca_path = "/etc/openshell-tls/client-ca/ca.crt"

[openshell.gateway.auth]
allow_unauthenticated_users = true

[openshell.gateway.gateway_jwt]
signing_key_path = "/etc/openshell-jwt/signing.pem"

[openshell.drivers.kubernetes]
topology = "combined"
"#;

/// The container's filesystem with the config and certificates mounted where the chart puts
/// them (built by hand: this test does not depend on the kubelet filling volumes).
fn tls_mounts(p: &Pki, config: &str) -> Mounts {
    let mut m = Mounts::new();
    m.mount("/", Volume::new(), false);
    let etc = Volume::new();
    etc.write("/gateway.toml", config.as_bytes());
    m.mount("/etc/openshell", etc, true);
    let server = Volume::new();
    server.write("/tls.crt", p.server_cert.as_bytes());
    server.write("/tls.key", p.server_key.as_bytes());
    m.mount("/etc/openshell-tls/server", server, true);
    let ca = Volume::new();
    ca.write("/ca.crt", p.ca.as_bytes());
    m.mount("/etc/openshell-tls/client-ca", ca, true);
    m
}

/// Runs the gateway program by hand in pod `pod` (which the kubelet runs as a plain process
/// with the gateway's labels, so the Service and the port-forward find it) with `mounts`.
/// Returns the signal sender and the program's exit.
async fn gateway_by_hand(
    s: &Served,
    pod: &str,
    mounts: Mounts,
) -> (
    kube_emulator::sync::watch::Sender<Option<Signal>>,
    tokio::task::JoinHandle<i32>,
) {
    // Only this gateway: the installed one scaled away.
    let sts: Api<StatefulSet> = Api::namespaced(s.client.clone(), NAMESPACE);
    sts.patch(
        "openshell",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 0}})),
    )
    .await
    .expect("scale the installed gateway to 0");
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), NAMESPACE);
    let labels = BTreeMap::from([
        ("app.kubernetes.io/name", "openshell"),
        ("app.kubernetes.io/instance", "openshell"),
    ]);
    let pod_obj: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": pod, "labels": labels},
        "spec": {"containers": [{"name": "gateway", "image": "busybox:1.36",
                                 "command": ["sleep", "3600"]}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod_obj)
        .await
        .expect("create the pod");
    wait_pod_ready(&s.client, pod).await;
    let uid = pods
        .get(pod)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap_or_default();
    let (ctx, signal, _ready) = ContainerCtx::new(
        s.target.cluster.clone(),
        s.target.network.clone(),
        NAMESPACE,
        pod,
        &uid,
        "gateway",
        vec![],
        BTreeMap::new(),
        mounts,
    );
    let program = GatewayProgram {
        model: s.target.model.clone(),
    };
    let run = tokio::spawn(async move { program.run(ctx).await });
    (signal, run)
}

/// Waits (deadline 30 s) until the pod's port 8080 answers a TCP connect through the forward
/// with something other than an immediate close (the gateway registered its listener).
async fn wait_listening(addr: SocketAddr) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        // A TLS ClientHello-less probe: a connection the gateway accepts stays open.
        if let Ok(mut c) = tokio::net::TcpStream::connect(addr).await {
            let mut b = [0u8; 1];
            if let Err(_elapsed) =
                tokio::time::timeout(Duration::from_millis(300), c.read(&mut b)).await
            {
                return;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gateway did not listen on 8080 within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_cli_reaches_the_served_gateway_over_mutual_tls_and_no_certificate_is_refused() {
    let test =
        "the_real_cli_reaches_the_served_gateway_over_mutual_tls_and_no_certificate_is_refused";
    let Some(bin) = require(Tool::OpenshellCli, test) else {
        return;
    };
    let p = pki();
    let s = serve(true).await;
    let (signal, run) = gateway_by_hand(&s, "openshell-tls", tls_mounts(&p, TLS_CONFIG)).await;
    let (addr, _fwd) = forward(&s.client, "openshell-tls").await;
    wait_listening(addr).await;

    // F6.2: the client certificate in the registered gateway's mtls directory.
    let home = tempfile::tempdir().unwrap();
    let mtls = home.path().join("config/openshell/gateways/t/mtls");
    std::fs::create_dir_all(&mtls).unwrap();
    std::fs::write(mtls.join("ca.crt"), &p.ca).unwrap();
    std::fs::write(mtls.join("tls.crt"), &p.client_cert).unwrap();
    std::fs::write(mtls.join("tls.key"), &p.client_key).unwrap();
    let url = format!("https://127.0.0.1:{}", addr.port());
    let (b, h) = (bin.clone(), home.path().to_path_buf());
    let driven = tokio::spawn(async move {
        cli_ok(&b, &h, &["gateway", "add", &url, "--local", "--name", "t"]).await;
        // Calls that need no sandbox to come up: the listing and the delete answer.
        let listed = cli_ok(&b, &h, &["sandbox", "list", "-o", "json"]).await;
        let v: serde_json::Value = serde_json::from_str(&listed).unwrap();
        assert_eq!(v, serde_json::json!([]), "{listed}");
        let out = cli_ok(&b, &h, &["sandbox", "delete", "nope"]).await;
        assert!(out.contains("Sandbox nope not found"), "{out}");
    })
    .await;
    if driven.is_err() {
        // The CLI's failure is printed above; the gateway's side of it:
        let pods: Api<Pod> = Api::namespaced(s.client.clone(), NAMESPACE);
        let log = pods.logs("openshell-tls", &Default::default()).await;
        panic!("the CLI failed over mTLS; gateway log:\n{log:?}");
    }

    // A client without a certificate: the handshake is refused (F7.7), as upstream refuses it.
    let err = handshake_without_client_certificate(addr, &p.ca).await;
    assert!(err.contains("CertificateRequired"), "{err}");

    signal.send_replace(Some(Signal::Term));
    let code = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the gateway ends within 30 s of SIGTERM")
        .unwrap();
    assert_eq!(code, 0);
    // A stopped gateway refuses like a dead process: the forward gets no listener.
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut b = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(10), c.read(&mut b))
        .await
        .expect("a connection to a stopped gateway is closed within 10 s");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
}

/// A TLS client that trusts the CA but has no certificate: what the first read returns.
async fn handshake_without_client_certificate(addr: SocketAddr, ca: &str) -> String {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), async {
        let mut tls = connector.connect(name, tcp).await?;
        // TLS 1.3: the server's refusal arrives after the client's Finished, on the first read.
        tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
        let mut b = [0u8; 16];
        tls.read(&mut b).await
    })
    .await
    .expect("the refusal arrives within 10 s");
    match result {
        Ok(n) => format!("read {n} bytes: not refused"),
        Err(e) => format!("{e:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_config_that_cannot_be_parsed_ends_the_gateway_with_exit_1() {
    let s = serve(false).await;
    let mut m = Mounts::new();
    m.mount("/", Volume::new(), false);
    let etc = Volume::new();
    etc.write("/gateway.toml", b"[openshell.gateway\n");
    m.mount("/etc/openshell", etc, true);
    let (_signal, run) = gateway_by_hand_unlisted(&s, m);
    let code = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the gateway exits within 10 s")
        .unwrap();
    assert_eq!(code, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_config_naming_another_topology_is_refused_naming_both() {
    let s = serve(false).await;
    let p = pki();
    let config = TLS_CONFIG.replace("topology = \"combined\"", "topology = \"sidecar\"");
    let (ctx, _signal, _ready) = ContainerCtx::new(
        s.target.cluster.clone(),
        s.target.network.clone(),
        NAMESPACE,
        "gw-by-hand",
        "uid-by-hand",
        "gateway",
        vec![],
        BTreeMap::new(),
        tls_mounts(&p, &config),
    );
    let program = GatewayProgram {
        model: s.target.model.clone(),
    };
    let err = program.configure(&ctx).err().expect("refused");
    assert!(
        err.contains("\"sidecar\"") && err.contains("\"combined\""),
        "{err}"
    );
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), program.run(ctx))
            .await
            .expect("the gateway exits within 10 s"),
        1
    );
}

/// The gateway program with `mounts`, without a pod object (it exits before serving).
fn gateway_by_hand_unlisted(
    s: &Served,
    mounts: Mounts,
) -> (
    kube_emulator::sync::watch::Sender<Option<Signal>>,
    tokio::task::JoinHandle<i32>,
) {
    let (ctx, signal, _ready) = ContainerCtx::new(
        s.target.cluster.clone(),
        s.target.network.clone(),
        NAMESPACE,
        "gw-by-hand",
        "uid-by-hand",
        "gateway",
        vec![],
        BTreeMap::new(),
        mounts,
    );
    let program = GatewayProgram {
        model: s.target.model.clone(),
    };
    (signal, tokio::spawn(async move { program.run(ctx).await }))
}

/// The official Python SDK's stub against the served gateway: create, wait Ready (through
/// `WatchSandbox`), exec, stop, start, delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_drives_the_served_gateway() {
    let test = "the_official_python_sdk_drives_the_served_gateway";
    let Some([sdk]) = require_all([Tool::OpenshellPythonSdk], test) else {
        return;
    };
    let s = serve(true).await;
    wait_pod_ready(&s.client, "openshell-0").await;
    let (addr, _fwd) = forward(&s.client, "openshell-0").await;
    let out = python(&sdk, &format!("127.0.0.1:{}", addr.port())).await;
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "created sdk1 PROVISIONING",
            "ready SANDBOX_PHASE_READY",
            "exec stdout b'hi\\n' exit 0",
            "stopped SANDBOX_PHASE_STOPPED",
            "started SANDBOX_PHASE_READY",
            "deleted True",
        ],
        "{out}"
    );
}

async fn python(sdk: &PathBuf, target: &str) -> String {
    let script = format!(
        r#"
import grpc, time
from openshell._proto import openshell_pb2 as pb, openshell_pb2_grpc as rpc
stub = rpc.OpenShellStub(grpc.insecure_channel({target:?}))
def phase_name(p): return pb.SandboxPhase.Name(p)
def wait(sid, want, deadline=60):
    # WatchSandbox with follow_status: the first event is the sandbox now, then every change.
    end = time.time() + deadline
    last = None
    for ev in stub.WatchSandbox(pb.WatchSandboxRequest(sandbox=sid, follow_status=True), timeout=deadline):
        last = phase_name(ev.sandbox.status.phase)
        if last == want: return last
        if time.time() > end: break
    raise SystemExit(f"{{sid}} not {{want}} within {{deadline}} s; last {{last}}")
r = stub.CreateSandbox(pb.CreateSandboxRequest(name="sdk1", spec=pb.SandboxSpec()), timeout=30)
sid = r.sandbox.metadata.id
print("created", r.sandbox.metadata.name, phase_name(r.sandbox.status.phase).replace("SANDBOX_PHASE_", ""))
print("ready", wait(sid, "SANDBOX_PHASE_READY"))
out, code = b"", None
for ev in stub.ExecSandbox(pb.ExecSandboxRequest(sandbox=sid, command=["sh", "-c", "echo hi"]), timeout=30):
    kind = ev.WhichOneof("payload")
    if kind == "stdout": out += ev.stdout.data
    if kind == "exit": code = ev.exit.exit_code
print("exec stdout", out, "exit", code)
stub.StopSandbox(pb.StopSandboxRequest(name="sdk1"), timeout=30)
print("stopped", wait(sid, "SANDBOX_PHASE_STOPPED"))
stub.StartSandbox(pb.StartSandboxRequest(name="sdk1"), timeout=30)
print("started", wait(sid, "SANDBOX_PHASE_READY"))
d = stub.DeleteSandbox(pb.DeleteSandboxRequest(name="sdk1"), timeout=30)
print("deleted", pb.DeletionOutcome.Name(d.outcome) in ("DELETION_OUTCOME_ACCEPTED", "DELETION_OUTCOME_COMPLETED"))
"#
    );
    let out = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .env("PYTHONPATH", sdk)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the SDK script finishes within 180 s")
    .expect("python3 runs");
    assert!(
        out.status.success(),
        "the SDK script failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
