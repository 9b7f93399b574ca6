//! The kubelet's API-backed volumes on the emulated cluster, in paused (virtual) time: a
//! container sees its Secret, ConfigMap and projected volumes as files, and a missing Secret
//! keeps the pod ContainerCreating with a `FailedMount` warning until it exists.

use std::time::Duration;

use crate::kube::{KubeConfig, KubeModels};
use crate::network::Network;
use crate::program::Programs;
use kube_emulator::{Cluster, ClusterConfig, ListOptions, ResourceRef};
use serde_json::{Value, json};

fn secrets() -> ResourceRef {
    ResourceRef::new("", "v1", "secrets")
}

fn start() -> (Cluster, KubeModels) {
    let cluster = Cluster::new(ClusterConfig::default());
    let models = KubeModels::start(
        &cluster,
        &Network::new(),
        Programs::new(),
        KubeConfig::default(),
    );
    (cluster, models)
}

fn pod() -> Value {
    json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "serviceAccountName": "runner",
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                "volumeMounts": [
                    {"name": "tls", "mountPath": "/etc/tls"},
                    {"name": "ca", "mountPath": "/etc/ca"},
                    {"name": "conf", "mountPath": "/etc/conf"},
                    {"name": "token", "mountPath": "/var/run/token"},
                    {"name": "scratch", "mountPath": "/scratch"}]}],
            "volumes": [
                {"name": "tls", "secret": {"secretName": "tls", "defaultMode": 256}},
                {"name": "ca", "secret": {"secretName": "tls", "items": [{"key": "ca.crt", "path": "sub/ca.pem"}]}},
                {"name": "conf", "configMap": {"name": "conf"}},
                {"name": "token", "projected": {"sources": [
                    {"serviceAccountToken": {"audience": "gw", "expirationSeconds": 600, "path": "token"}},
                    {"configMap": {"name": "conf", "items": [{"key": "app.toml", "path": "app.toml"}]}}]}},
                {"name": "scratch", "emptyDir": {}}],
        },
    })
}

fn phase_and_waiting(c: &Cluster) -> (String, String) {
    let p = c.get(&ResourceRef::pods(), Some("default"), "p").unwrap();
    let s = |ptr: &str| {
        p.pointer(ptr)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (
        s("/status/phase"),
        s("/status/containerStatuses/0/state/waiting/reason"),
    )
}

async fn wait_running(c: &Cluster) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        let (phase, _) = phase_and_waiting(c);
        if phase == "Running" {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pod p not Running within 600 s (virtual); last: {:?}",
            phase_and_waiting(c)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn cat(c: &Cluster, path: &str) -> (i32, String) {
    let argv: Vec<String> = ["cat", path].map(String::from).to_vec();
    let out = c.exec("default", "p", None, &argv, &[]).await.unwrap();
    (
        out.exit_code,
        String::from_utf8_lossy(if out.exit_code == 0 {
            &out.stdout
        } else {
            &out.stderr
        })
        .into_owned(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_pod_waits_container_creating_with_failed_mount_until_its_secret_exists_then_sees_the_files()
 {
    let (c, _models) = start();
    c.create(
        &ResourceRef::new("", "v1", "configmaps"),
        Some("default"),
        json!({"metadata": {"name": "conf"}, "data": {"app.toml": "a = 1\n"}}),
    )
    .unwrap();
    c.create(&ResourceRef::pods(), Some("default"), pod())
        .unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        phase_and_waiting(&c),
        ("Pending".into(), "ContainerCreating".into())
    );
    let (events, _) = c
        .list(
            &ResourceRef::new("", "v1", "events"),
            Some("default"),
            &ListOptions::default(),
        )
        .unwrap();
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "FailedMount")
        .collect();
    assert_eq!(
        failed.len(),
        1,
        "one FailedMount event, counted: {events:#?}"
    );
    assert_eq!(
        failed[0]["message"],
        "MountVolume.SetUp failed for volume \"tls\" : secret \"tls\" not found"
    );
    assert_eq!(failed[0]["type"], "Warning");
    assert_eq!(failed[0]["involvedObject"]["name"], "p");
    assert!(
        failed[0]["count"].as_u64().unwrap() > 1,
        "retried: {:#}",
        failed[0]
    );

    // `data` is base64 as on the wire.
    c.create(
        &secrets(),
        Some("default"),
        json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls",
               "data": {"tls.crt": "Q0VSVA==", "tls.key": "S0VZ", "ca.crt": "Q0E="}}),
    )
    .unwrap();
    wait_running(&c).await;
    assert_eq!(cat(&c, "/etc/tls/tls.crt").await, (0, "CERT".into()));
    assert_eq!(cat(&c, "/etc/tls/tls.key").await, (0, "KEY".into()));
    assert_eq!(cat(&c, "/etc/ca/sub/ca.pem").await, (0, "CA".into()));
    assert_eq!(
        cat(&c, "/etc/ca/ca.crt").await.0,
        1,
        "items select the keys"
    );
    assert_eq!(cat(&c, "/etc/conf/app.toml").await, (0, "a = 1\n".into()));
    assert_eq!(
        cat(&c, "/var/run/token/app.toml").await,
        (0, "a = 1\n".into())
    );
    let (code, token) = cat(&c, "/var/run/token/token").await;
    assert_eq!(code, 0);
    assert_eq!(token.split('.').count(), 3, "JWT-shaped: {token}");
    // emptyDir stays empty; API volumes are read-only.
    let ls = c
        .exec("default", "p", None, &["ls".into(), "/scratch".into()], &[])
        .await
        .unwrap();
    assert_eq!((ls.exit_code, ls.stdout.is_empty()), (0, true));
    let write = c
        .exec(
            "default",
            "p",
            None,
            &["sh".into(), "-c".into(), "echo x > /etc/tls/new".into()],
            &[],
        )
        .await
        .unwrap();
    assert_ne!(write.exit_code, 0, "secret volumes are read-only");
    assert!(
        String::from_utf8_lossy(&write.stderr).contains("Read-only file system"),
        "{write:?}"
    );
}
