//! The OpenShell models on the emulated cluster, in paused (virtual) time, judged only from what
//! a harness can observe: gateway views, pod objects, container logs and workspace files.
//!
//! Until the workload controllers and the Agent Sandbox controller land (branch kube-models),
//! `materialise` stands in for them in these tests only: it creates the gateway pod from the
//! StatefulSet template and a sandbox's pod and PVC from its CR, exactly as named upstream.

use std::time::Duration;

use crate::model::{NAMESPACE, cr_name, pvc_name};
use crate::spec::{Defect, Model, Selection};
use crate::target::EmulatedTarget;
use conformance_core::phase::Phase;
use conformance_core::target::{SandboxSpec, SandboxView};
use kube_emulator::{ListOptions, ResourceRef};
use serde_json::{Value, json};

fn pvcs() -> ResourceRef {
    ResourceRef::new("", "v1", "persistentvolumeclaims")
}

fn create_gateway_pod(t: &EmulatedTarget) {
    let sts = t
        .cluster
        .get(
            &ResourceRef::new("apps", "v1", "statefulsets"),
            Some(NAMESPACE),
            "openshell",
        )
        .unwrap();
    let _ = t.cluster.create(
        &pvcs(),
        Some(NAMESPACE),
        json!({"metadata": {"name": "openshell-data-openshell-0"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    );
    let mut tpl = sts["spec"]["template"].clone();
    tpl["metadata"]["name"] = json!("openshell-0");
    tpl["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "openshell-data", "persistentVolumeClaim": {"claimName": "openshell-data-openshell-0"}}));
    t.cluster
        .create(&ResourceRef::pods(), Some(NAMESPACE), tpl)
        .unwrap();
}

/// Stands in for the Agent Sandbox controller: pod and PVC for every CR that lacks them.
fn materialise(t: &EmulatedTarget) {
    let (crs, _) = t
        .cluster
        .list(
            &conformance_kube_models::agent_sandbox::sandboxes_in("v1beta1"),
            Some(NAMESPACE),
            &ListOptions::default(),
        )
        .unwrap();
    for cr in crs {
        let name = cr["metadata"]["name"].as_str().unwrap().to_string();
        if cr.pointer("/spec/operatingMode").and_then(Value::as_str) == Some("Suspended") {
            continue;
        }
        let _ = t.cluster.create(
            &pvcs(),
            Some(NAMESPACE),
            json!({"metadata": {"name": format!("workspace-{name}")},
                   "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}}),
        );
        if t.cluster
            .get(&ResourceRef::pods(), Some(NAMESPACE), &name)
            .is_ok()
        {
            continue;
        }
        let mut spec = cr["spec"]["podTemplate"]["spec"].clone();
        spec["volumes"].as_array_mut().unwrap().push(
            json!({"name": "workspace", "persistentVolumeClaim": {"claimName": format!("workspace-{name}")}}),
        );
        let _ = t.cluster.create(
            &ResourceRef::pods(),
            Some(NAMESPACE),
            // The controller owns its pods (F4.11); the gateway checks the owner (F12.7).
            json!({"metadata": {"name": name, "annotations": cr["spec"]["podTemplate"]["metadata"]["annotations"].clone(),
                                "ownerReferences": [{"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                                    "name": name, "uid": cr["metadata"]["uid"].clone(), "controller": true}]},
                   "spec": spec}),
        );
        let _ = t.cluster.patch_status(
            &conformance_kube_models::agent_sandbox::sandboxes_in("v1beta1"),
            Some(NAMESPACE),
            &name,
            kube_emulator::PatchKind::Merge,
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady", "message": "Pod is Ready"}]}}),
        );
    }
}

async fn setup(sel: Selection, topology: &str) -> EmulatedTarget {
    let topologies = conformance_core::topology::Topologies::builtin();
    let t = EmulatedTarget::start(sel, topologies.get(topology).unwrap());
    crate::install::install(&t.cluster, &t.model).unwrap();
    create_gateway_pod(&t);
    wait(&t, "gateway reachable", |t| t.client.connect().is_ok()).await;
    t
}

async fn wait(t: &EmulatedTarget, what: &str, mut f: impl FnMut(&EmulatedTarget) -> bool) {
    for i in 0..2400 {
        materialise(t);
        if std::env::var("DEBUG_MODELS").is_ok() && i % 8 == 0 {
            let pods: Vec<String> = t
                .cluster
                .list(
                    &ResourceRef::pods(),
                    Some(NAMESPACE),
                    &ListOptions::default(),
                )
                .unwrap()
                .0
                .iter()
                .map(|p| format!("{} {}", p["metadata"]["name"], p["status"]["phase"]))
                .collect();
            eprintln!(
                "{:?} {:?} {:?}",
                tokio::time::Instant::now(),
                t.client.list(),
                pods
            );
        }
        if f(t) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("gave up waiting for {what}");
}

fn view(t: &EmulatedTarget, name: &str) -> Option<SandboxView> {
    t.client.get(name).ok().flatten()
}

fn phase_is(t: &EmulatedTarget, name: &str, phase: Phase) -> bool {
    view(t, name).is_some_and(|v| v.phase == phase)
}

fn logs(t: &EmulatedTarget, pod: &str, container: &str) -> String {
    let _ = (t, pod, container);
    String::new()
}

fn starts(t: &EmulatedTarget, name: &str) -> usize {
    let vol = t.cluster.pvc_volume(NAMESPACE, &pvc_name(name));
    vol.read("/.conformance/starts")
        .map(|b| String::from_utf8_lossy(&b).lines().count())
        .unwrap_or(0)
}

fn spec(name: &str) -> SandboxSpec {
    SandboxSpec {
        name: name.into(),
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            "mkdir -p /sandbox/.conformance; echo start >> /sandbox/.conformance/starts; sleep 1000000".into(),
        ]),
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn contract_combined_becomes_ready_after_bootstrap_and_runs_the_main_command_once() {
    let t = setup(Selection::contract(), "combined").await;
    let v = t.client.create(&spec("demo")).unwrap();
    assert_eq!(v.phase, Phase::Provisioning);
    wait(&t, "demo Ready", |t| phase_is(t, "demo", Phase::Ready)).await;
    wait(&t, "main started", |t| starts(t, "demo") == 1).await;
    let out = t
        .client
        .exec(
            "demo",
            &[
                "sh".into(),
                "-c".into(),
                "cat /sandbox/.conformance/starts".into(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "start\n");
    let _ = logs(&t, &cr_name("demo"), "agent");
}

#[tokio::test(start_paused = true)]
async fn a_refused_request_names_upstreams_precondition() {
    let t = setup(
        Selection::model(Model::named("openshell-0.0.111")),
        "combined",
    )
    .await;
    t.client.create(&spec("demo")).unwrap();
    let err = t.client.start("demo").unwrap_err().to_string();
    assert_eq!(
        err,
        "FailedPrecondition: sandbox must be Stopped to start (current phase: Provisioning)"
    );
}

#[tokio::test(start_paused = true)]
async fn permanent_credential_error_fails_fast_with_its_cause_on_the_contract() {
    let t = setup(Selection::contract(), "combined").await;
    t.model.set_fault(
        &cr_name("demo"),
        conformance_core::target::BootstrapMaterial::Credentials,
        true,
    );
    t.client.create(&spec("demo")).unwrap();
    wait(&t, "demo Error", |t| phase_is(t, "demo", Phase::Error)).await;
    let v = view(&t, "demo").unwrap();
    assert_eq!(v.reason.as_deref(), Some("BootstrapFailed"));
    assert!(v.message.unwrap().contains("Unauthenticated"));
    assert_eq!(starts(&t, "demo"), 0, "the workload never started");
}

#[rstest::rstest]
#[case::the_contract_names_the_token(
    Selection::contract(),
    "Unauthenticated",
    "sandbox service account token rejected"
)]
#[case::upstream_falls_through_to_a_user(
    Selection::model(Model::named("openshell-0.0.111")),
    "PermissionDenied",
    "this method requires a sandbox principal"
)]
#[tokio::test(start_paused = true)]
async fn the_credentials_fault_is_answered_as_each_model_answers_a_token_its_review_refuses(
    #[case] sel: Selection,
    #[case] code: &str,
    #[case] message: &str,
) {
    let t = setup(sel, "combined").await;
    t.model.set_fault(
        &cr_name("demo"),
        conformance_core::target::BootstrapMaterial::Credentials,
        true,
    );
    t.client.create(&spec("demo")).unwrap();
    let sandboxes = conformance_kube_models::agent_sandbox::sandboxes_in("v1beta1");
    let id = || {
        t.cluster
            .get(&sandboxes, Some(NAMESPACE), &cr_name("demo"))
            .ok()
            .and_then(|cr| {
                cr.pointer("/metadata/labels/openshell.ai~1sandbox-id")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
    };
    wait(&t, "the Sandbox resource", |_| id().is_some()).await;
    let e = gateway(&t)
        .issue_sandbox_token(&id().unwrap(), "pod-uid", None)
        .unwrap_err();
    assert_eq!(e.code, code, "{}", e.message);
    assert!(e.message.starts_with(message), "{}", e.message);
}

async fn main_starts_while_the_gateway_is_blackholed(sel: Selection) -> usize {
    let t = setup(sel, "combined").await;
    t.client.create(&spec("demo")).unwrap();
    // An egress policy drops the sandbox's packets: every attempt waits its 10 s connect timeout.
    t.network.block(NAMESPACE, "openshell");
    for _ in 0..240 {
        materialise(&t);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    starts(&t, "demo")
}

#[tokio::test(start_paused = true)]
async fn the_contract_starts_no_workload_before_policy_and_the_defect_does() {
    assert_eq!(
        main_starts_while_the_gateway_is_blackholed(Selection::contract()).await,
        0
    );
    assert_eq!(
        main_starts_while_the_gateway_is_blackholed(
            Selection::contract().with_defect(Defect::WorkloadStartsBeforePolicy)
        )
        .await,
        1
    );
}

/// End to end through the `Target` trait on the full Kubernetes models (StatefulSet, Agent
/// Sandbox controller, kubelet): install, create, Ready, main command once.
/// The contract on combined, provisioned and installed through the target factory, as a run
/// does it.
async fn contract_combined() -> std::sync::Arc<dyn conformance_core::target::Target> {
    use conformance_core::target::TargetFactory;
    let topo = conformance_core::topology::Topologies::builtin();
    let topo = topo.get("combined").unwrap();
    let f = crate::target::EmulatedFactory::new(Selection::contract());
    let rec = conformance_core::timeline::Recorder::new();
    let t = f.provision(topo, &rec).await.unwrap();
    t.install(topo).await.unwrap();
    t
}

/// Polls the gateway's view of `name` every 250 ms until it is Ready, at most `polls` times.
async fn until_ready(t: &dyn conformance_core::target::Target, name: &str, polls: u32) {
    let mut phase = Phase::Unspecified;
    for _ in 0..polls {
        if let Ok(Some(v)) = t.get_sandbox(name).await {
            phase = v.phase;
            if phase == Phase::Ready {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("{name} is not Ready after {polls} polls; last seen {phase:?}");
}

#[tokio::test(start_paused = true)]
async fn target_end_to_end_contract_combined() {
    let t = contract_combined().await;
    t.create_sandbox(&spec("demo")).await.unwrap();
    until_ready(&*t, "demo", 1200).await;
    let starts = t
        .read_workspace("demo", ".conformance/starts")
        .await
        .unwrap();
    assert_eq!(starts.as_deref(), Some("start\n"));
    // Gateway restart (bug 3): back to Ready, the main process not replayed.
    let f = conformance_core::target::Fault::GatewayRestart;
    t.inject(&f).await.unwrap();
    t.restore(&f).await.unwrap();
    until_ready(&*t, "demo", 240).await;
    let starts = t
        .read_workspace("demo", ".conformance/starts")
        .await
        .unwrap();
    assert_eq!(starts.as_deref(), Some("start\n"), "main not restarted");
}

/// A restore is checked for its effect: after the gateway's stop is restored its replicas are
/// back and ready and the check passes; while it is still stopped the check fails, naming what
/// it saw, so the engine reports the restore instead of blaming the product.
#[tokio::test(start_paused = true)]
async fn a_gateway_stop_is_verified_restored_only_once_the_gateway_is_back_and_ready() {
    use conformance_core::target::Fault;
    let t = contract_combined().await;
    let stop = Fault::GatewayStop;
    t.inject(&stop).await.unwrap();
    let err = t.verify_restored(&stop).await.unwrap_err().to_string();
    assert!(err.starts_with("the gateway is not back: "), "{err}");
    assert!(err.contains("gateway reachable=false"), "{err}");
    t.restore(&stop).await.unwrap();
    t.verify_restored(&stop).await.unwrap();
}

/// Bootstrap credentials broken by a fault count as restored only once the model has them back.
#[tokio::test(start_paused = true)]
async fn broken_credentials_are_verified_restored_only_once_they_are_back() {
    use conformance_core::target::Fault;
    let t = contract_combined().await;
    t.create_sandbox(&spec("demo")).await.unwrap();
    let broken = Fault::BootstrapCredentials {
        sandbox: "demo".into(),
        what: conformance_core::target::BootstrapMaterial::Credentials,
    };
    t.inject(&broken).await.unwrap();
    let err = t.verify_restored(&broken).await.unwrap_err().to_string();
    assert!(err.contains("credentials of"), "{err}");
    assert!(err.ends_with("are still broken"), "{err}");
    t.restore(&broken).await.unwrap();
    t.verify_restored(&broken).await.unwrap();
}

// ---- bootstrap material read from the pod's volumes (docs/upstream-facts.md F12.7, F12.8) ----

/// The running gateway, as a supervisor reaches it.
fn gateway(t: &EmulatedTarget) -> std::sync::Arc<crate::gateway::Gateway> {
    match t.network.connect::<crate::gateway::Gateway>(
        &t.cluster,
        NAMESPACE,
        "openshell.openshell.svc.cluster.local",
        crate::model::GRPC_PORT,
    ) {
        Ok(gw) => gw,
        Err(e) => panic!("the gateway is not reachable: {e}"),
    }
}

/// Replaces sandbox `name`'s pod: the stand-in controller creates the next one from the
/// Sandbox resource's current template.
fn replace_pod(t: &EmulatedTarget, name: &str) {
    t.cluster
        .delete(
            &ResourceRef::pods(),
            Some(NAMESPACE),
            &cr_name(name),
            &kube_emulator::DeleteOptions {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .unwrap();
}

#[rstest::rstest]
#[case::combined("combined")]
#[case::sidecar("sidecar")]
#[tokio::test(start_paused = true)]
async fn a_projected_token_of_another_audience_is_not_authenticated_by_the_gateways_token_review_and_the_contract_names_the_cause(
    #[case] topology: &str,
) {
    let t = setup(Selection::contract(), topology).await;
    t.client.create(&spec("demo")).unwrap();
    // The token the kubelet wrote for the gateway's audience is reviewed and accepted.
    wait(&t, "demo Ready", |t| phase_is(t, "demo", Phase::Ready)).await;
    let sandboxes = conformance_kube_models::agent_sandbox::sandboxes_in("v1beta1");
    let cr = t
        .cluster
        .get(&sandboxes, Some(NAMESPACE), &cr_name("demo"))
        .unwrap();
    let mut volumes = cr["spec"]["podTemplate"]["spec"]["volumes"].clone();
    for v in volumes.as_array_mut().unwrap() {
        if v["name"] == "openshell-sa-token" {
            v["projected"]["sources"][0]["serviceAccountToken"]["audience"] =
                json!("not-the-gateway");
        }
    }
    t.cluster
        .patch(
            &sandboxes,
            Some(NAMESPACE),
            &cr_name("demo"),
            kube_emulator::PatchKind::Merge,
            &json!({"spec": {"podTemplate": {"spec": {"volumes": volumes}}}}),
        )
        .unwrap();
    replace_pod(&t, "demo");
    wait(&t, "demo Error", |t| phase_is(t, "demo", Phase::Error)).await;
    let message = view(&t, "demo").unwrap().message.unwrap_or_default();
    // 0.0.111's chain would fall through to a user principal and answer "this method requires
    // a sandbox principal" (F12.7); the contract (R14) names the rejected token, as the
    // emulated fault's refusal does.
    assert!(
        message.contains("Unauthenticated")
            && message.contains("service account token rejected")
            && !message.contains("sandbox principal"),
        "{message}"
    );
}

/// A CA named `ca_name` and a gateway certificate it signed for the endpoint's host; PEM, and
/// the leaf as DER.
fn gateway_pki(ca_name: &str) -> (String, Vec<u8>) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, ca_name);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let leaf = CertificateParams::new(vec!["openshell.openshell.svc.cluster.local".into()])
        .unwrap()
        .signed_by(&KeyPair::generate().unwrap(), &ca)
        .unwrap();
    (ca.pem(), leaf.der().to_vec())
}

#[rstest::rstest]
#[case::the_ca_that_signed_it(true)]
#[case::another_ca(false)]
#[tokio::test(start_paused = true)]
async fn the_supervisor_checks_the_gateways_certificate_against_the_ca_its_pod_mounts(
    #[case] signing_ca: bool,
) {
    let t = setup(Selection::contract(), "combined").await;
    let (ca, leaf) = gateway_pki("openshell-ca");
    // Another CA of the same name would make the verifier try its key: BadSignature instead.
    let mounted = if signing_ca {
        ca
    } else {
        gateway_pki("another-ca").0
    };
    t.cluster
        .create(
            &ResourceRef::new("", "v1", "secrets"),
            Some(NAMESPACE),
            json!({"metadata": {"name": "conformance-client-tls"},
                   "stringData": {"ca.crt": mounted, "tls.crt": "client", "tls.key": "key"}}),
        )
        .unwrap();
    // What the gateway reads from a chart's config: its certificate and the client TLS Secret.
    *gateway(&t).served.lock().unwrap() = Some(crate::gateway::state::Served {
        config: crate::gateway::config::GatewayConfig {
            client_tls_secret: Some("conformance-client-tls".into()),
            ..crate::gateway::config::GatewayConfig::plaintext()
        },
        chain: vec![leaf],
    });
    t.client.create(&spec("demo")).unwrap();
    let pod = |t: &EmulatedTarget| {
        t.cluster
            .get(&ResourceRef::pods(), Some(NAMESPACE), &cr_name("demo"))
            .ok()
    };
    wait(&t, "demo's pod", |t| pod(t).is_some()).await;
    let p = pod(&t).unwrap();
    assert!(
        p["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["secret"]["secretName"] == "conformance-client-tls"),
        "the driver mounts the client TLS Secret: {p}"
    );
    if signing_ca {
        wait(&t, "demo Ready", |t| phase_is(t, "demo", Phase::Ready)).await;
    } else {
        wait(&t, "demo Error", |t| phase_is(t, "demo", Phase::Error)).await;
        let message = view(&t, "demo").unwrap().message.unwrap_or_default();
        assert!(message.contains("UnknownIssuer"), "{message}");
        assert_eq!(starts(&t, "demo"), 0, "the workload never started");
    }
}

/// Upstream's session loop never resets its back-off after a session that worked
/// (docs/upstream-facts.md F2.11): after one long outage the next loss of the gateway is
/// followed by a full 30 s sleep, not 1 s. Read from the supervisor's own log, as R5's checks
/// read it.
#[tokio::test(start_paused = true)]
async fn after_a_long_outage_the_next_session_loss_waits_the_capped_back_off() {
    use conformance_core::retries::{RetryOp, gaps, parse_attempts};
    use conformance_core::target::Fault;
    let t = contract_combined().await;
    t.create_sandbox(&spec("demo")).await.unwrap();
    until_ready(&*t, "demo", 1200).await;
    let stop = Fault::GatewayStop;
    for outage in [120, 5] {
        t.inject(&stop).await.unwrap();
        tokio::time::sleep(Duration::from_secs(outage)).await;
        t.restore(&stop).await.unwrap();
        until_ready(&*t, "demo", 1200).await;
        tokio::time::sleep(Duration::from_secs(40)).await;
    }
    let log = t.supervisor_log("demo").await.unwrap().expect("readable");
    let attempts = parse_attempts(&log);
    let sessions: Vec<usize> = attempts
        .iter()
        .enumerate()
        .filter(|(_, a)| a.op == RetryOp::Session && a.ok)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(sessions.len(), 3, "{attempts:?}");
    let first_outage: Vec<u64> = gaps(&attempts[sessions[0]..=sessions[1]])
        .iter()
        .map(|g| g.ms / 1000)
        .collect();
    assert_eq!(first_outage[..6], [1, 2, 4, 8, 16, 30], "{first_outage:?}");
    let second_outage: Vec<u64> = gaps(&attempts[sessions[1]..=sessions[2]])
        .iter()
        .map(|g| g.ms / 1000)
        .collect();
    assert_eq!(second_outage, [30], "{attempts:?}");
}

/// Deletes sandbox `name`'s pod as an eviction or a drain would: gracefully, its containers
/// sent SIGTERM first.
fn delete_pod_gracefully(t: &EmulatedTarget, name: &str) {
    t.cluster
        .delete(
            &ResourceRef::pods(),
            Some(NAMESPACE),
            &cr_name(name),
            &kube_emulator::DeleteOptions::default(),
        )
        .unwrap();
}

/// The state of container `container` of sandbox `name`'s pod, as the kubelet reports it.
fn container_state(t: &EmulatedTarget, name: &str, container: &str) -> Option<Value> {
    let pod = t
        .cluster
        .get(&ResourceRef::pods(), Some(NAMESPACE), &cr_name(name))
        .ok()?;
    pod.pointer("/status/containerStatuses")?
        .as_array()?
        .iter()
        .find(|c| c["name"] == container)
        .map(|c| c["state"].clone())
}

/// docs/upstream-facts.md F1.19: v0.0.111's supervisor reports the exit of the main process it
/// ended on SIGTERM, so a pod deleted under it leaves the sandbox Error with exit code 143; the
/// contract's sandbox bootstraps again in the new pod.
#[rstest::rstest]
#[case::upstream("openshell-0.0.111")]
#[case::contract("contract")]
#[tokio::test(start_paused = true)]
async fn a_sandbox_pod_deleted_under_its_supervisor_ends_the_sandbox_only_where_the_release_reports_that_exit(
    #[case] model: &str,
) {
    let t = setup(Selection::model(Model::named(model)), "combined").await;
    t.client.create(&spec("demo")).unwrap();
    wait(&t, "demo Ready", |t| phase_is(t, "demo", Phase::Ready)).await;
    wait(&t, "main started", |t| starts(t, "demo") == 1).await;
    delete_pod_gracefully(&t, "demo");
    if model == "contract" {
        wait(&t, "demo bootstrapping again", |t| {
            !phase_is(t, "demo", Phase::Ready)
        })
        .await;
        wait(&t, "demo Ready again", |t| {
            phase_is(t, "demo", Phase::Ready)
        })
        .await;
        assert_eq!(view(&t, "demo").unwrap().exit_code, None);
    } else {
        wait(&t, "demo Error", |t| phase_is(t, "demo", Phase::Error)).await;
        let v = view(&t, "demo").unwrap();
        assert_eq!(v.reason.as_deref(), Some("MainProcessExited"), "{v:?}");
        assert_eq!(v.exit_code, Some(143), "{v:?}");
    }
}

/// docs/upstream-facts.md F2.12: v0.0.111's network sidecar exits 1 once the process
/// supervisor, which ends with a finished workload, closes their control connection; the
/// contract's supervisors stay.
#[rstest::rstest]
#[case::upstream("openshell-0.0.111", true)]
#[case::contract("contract", false)]
#[tokio::test(start_paused = true)]
async fn a_finished_workload_takes_the_network_sidecar_along_only_where_its_supervisor_ends_with_it(
    #[case] model: &str,
    #[case] ends: bool,
) {
    let t = setup(Selection::model(Model::named(model)), "sidecar").await;
    let finishing = SandboxSpec {
        command: Some(vec!["sh".into(), "-c".into(), "exit 0".into()]),
        ..spec("demo")
    };
    t.client.create(&finishing).unwrap();
    wait(&t, "the workload finished", |t| {
        view(t, "demo").is_some_and(|v| v.exit_code.is_some() || v.phase == Phase::Completed)
    })
    .await;
    let network = "openshell-supervisor-network";
    if ends {
        wait(&t, "the network sidecar ended", |t| {
            container_state(t, "demo", network)
                .is_some_and(|s| s.pointer("/terminated/exitCode") == Some(&json!(1)))
        })
        .await;
    } else {
        tokio::time::sleep(Duration::from_secs(30)).await;
        let state = container_state(&t, "demo", network);
        assert!(
            state.as_ref().is_some_and(|s| s.get("running").is_some()),
            "{state:?}"
        );
    }
}
