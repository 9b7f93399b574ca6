//! Images as models on the emulated cluster, in paused (virtual) time: the Agent Sandbox
//! controller image runs the controller of the release in its tag, only while its pod runs.

use std::time::Duration;

use crate::agent_sandbox::{CONTROLLER_IMAGE_REPO, ControllerProgram};
use crate::kube::{KubeConfig, KubeModels};
use crate::network::Network;
use crate::program::Programs;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use kube_emulator::{Cluster, ClusterConfig, ResourceRef};
use serde_json::{Value, json};

fn sandboxes() -> ResourceRef {
    ResourceRef::new("agents.x-k8s.io", "v1beta1", "sandboxes")
}

/// The cluster with the CRD (as the manifest would install it) and no in-process controller.
fn start() -> (Cluster, KubeModels) {
    let cluster = Cluster::new(ClusterConfig {
        crds: vec![crate::agent_sandbox::crd()],
        ..ClusterConfig::default()
    });
    let mut programs = Programs::new();
    programs.register(
        CONTROLLER_IMAGE_REPO,
        std::sync::Arc::new(ControllerProgram),
    );
    let models = KubeModels::start(
        &cluster,
        &Network::new(),
        programs,
        KubeConfig {
            agent_sandbox_in_process: false,
            ..KubeConfig::default()
        },
    );
    (cluster, models)
}

fn controller_pod(c: &Cluster, tag: &str) {
    c.create(
        &ResourceRef::pods(),
        Some("default"),
        json!({"metadata": {"name": "controller"},
               "spec": {"containers": [{"name": "manager",
                   "image": format!("{CONTROLLER_IMAGE_REPO}:{tag}"), "args": ["--leader-elect=true"]}]}}),
    )
    .unwrap();
}

fn sandbox(c: &Cluster) {
    c.create(
        &sandboxes(),
        Some("default"),
        json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
               "metadata": {"name": "sb"},
               "spec": {"podTemplate": {"spec": {"containers": [
                   {"name": "agent", "image": "base:latest", "command": ["sleep", "3600"]}]}}}}),
    )
    .unwrap();
}

async fn logs(c: &Cluster) -> String {
    Api::<Pod>::default_namespaced(c.client())
        .logs("controller", &LogParams::default())
        .await
        .unwrap_or_default()
}

fn sandbox_pod(c: &Cluster) -> Option<Value> {
    c.get(&ResourceRef::pods(), Some("default"), "sb").ok()
}

#[tokio::test(start_paused = true)]
async fn the_controller_image_reconciles_sandboxes_with_the_release_in_its_tag() {
    let (c, _models) = start();
    sandbox(&c);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        sandbox_pod(&c).is_none(),
        "nothing reconciles before the controller's pod runs"
    );
    controller_pod(&c, "v0.5.0");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(sandbox_pod(&c).is_some(), "the controller made the pod");
    assert!(
        logs(&c)
            .await
            .contains("starting the Agent Sandbox controller model v0.5.0")
    );
    // Deleting the controller's pod stops the controller: a deleted sandbox pod stays gone.
    c.delete(
        &ResourceRef::pods(),
        Some("default"),
        "controller",
        &Default::default(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    c.delete(
        &ResourceRef::pods(),
        Some("default"),
        "sb",
        &Default::default(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(sandbox_pod(&c).is_none(), "no controller recreated it");
}

#[tokio::test(start_paused = true)]
async fn a_controller_image_with_an_unmodelled_tag_logs_a_line_and_reconciles_nothing() {
    let (c, _models) = start();
    controller_pod(&c, "v9.9.9");
    sandbox(&c);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(sandbox_pod(&c).is_none());
    let log = logs(&c).await;
    assert!(
        log.contains("no Agent Sandbox controller model for image")
            && log.contains(":v9.9.9")
            && log.contains("v0.5.0, v0.5.1, v0.5.4"),
        "{log}"
    );
    let pod = c
        .get(&ResourceRef::pods(), Some("default"), "controller")
        .unwrap();
    assert_eq!(pod["status"]["phase"], "Running", "it runs, doing nothing");
}
