//! The served cluster authenticates like a real API server with anonymous access off (issue:
//! any local user could read the gateway's keys from it): HTTPS with its own CA, a bearer token
//! that only the kubeconfig it hands out holds (mode 0600), 401 without it. The real kubectl
//! with that kubeconfig keeps working (the other `emulate_*` suites drive kubectl and helm
//! through it too).

use std::os::unix::fs::PermissionsExt;

use conformance_testtools::{Tool, require};
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kube_emulator::ClusterConfig;

mod common;

fn secrets(client: kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Secret".into(),
        plural: "secrets".into(),
    };
    Api::namespaced_with(client, "default", &ar)
}

/// The served kubeconfig with `edit` applied, as a kube-rs client.
async fn client_with(kubeconfig: &str, edit: impl Fn(&str) -> String) -> kube::Client {
    let kc = kube::config::Kubeconfig::from_yaml(&edit(kubeconfig)).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    kube::Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_client_holding_the_served_token_reads_secrets_others_get_401() {
    let served = common::serve(ClusterConfig::default()).await;
    let kubeconfig = std::fs::read_to_string(&served.kubeconfig).unwrap();
    let mode = std::fs::metadata(&served.kubeconfig)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the kubeconfig holds the token");

    let with_token = client_with(&kubeconfig, str::to_string).await;
    secrets(with_token)
        .list(&ListParams::default())
        .await
        .expect("the kubeconfig's client is admitted");

    let token_line = kubeconfig
        .lines()
        .find(|l| l.trim_start().starts_with("token:"))
        .expect("the kubeconfig has a token")
        .to_string();
    for (what, edit) in [
        ("no token", String::new()),
        (
            "a wrong token",
            format!("    token: \"{}\"", "0".repeat(64)),
        ),
    ] {
        let client = client_with(&kubeconfig, |k| k.replace(&token_line, &edit)).await;
        match secrets(client).list(&ListParams::default()).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 401, "{what}: {status:?}");
                assert_eq!(status.reason, "Unauthorized", "{what}");
            }
            other => panic!("{what}: expected 401 Unauthorized, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_proves_itself_with_its_own_ca_and_speaks_only_https() {
    let one = common::serve(ClusterConfig::default()).await;
    let two = common::serve(ClusterConfig::default()).await;
    let kc_one = std::fs::read_to_string(&one.kubeconfig).unwrap();
    let kc_two = std::fs::read_to_string(&two.kubeconfig).unwrap();
    let ca = |kc: &str| {
        kc.lines()
            .find(|l| l.contains("certificate-authority-data:"))
            .unwrap()
            .to_string()
    };
    assert_ne!(ca(&kc_one), ca(&kc_two), "each cluster has a CA of its own");
    // Cluster one's kubeconfig trusting cluster two's CA: the TLS handshake fails, so no token
    // is ever sent to a server that is not the one it was made for.
    let client = client_with(&kc_one, |k| k.replace(&ca(k), &ca(&kc_two))).await;
    let err = secrets(client)
        .list(&ListParams::default())
        .await
        .expect_err("a server with another CA's certificate is not trusted");
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "the request reached the API: {err:?}"
    );

    // Plain HTTP to the port gets no API answer.
    let addr = kc_one
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .unwrap()
        .to_string();
    let client = client_with(&kc_one, |k| {
        k.replace(&format!("https://{addr}"), &format!("http://{addr}"))
    })
    .await;
    let err = secrets(client)
        .list(&ListParams::default())
        .await
        .expect_err("plain HTTP is not served");
    assert!(!matches!(err, kube::Error::Api(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_with_another_token_is_told_it_must_log_in() {
    let test = "kubectl_with_another_token_is_told_it_must_log_in";
    let Some(kubectl) = require(Tool::Kubectl, test) else {
        return;
    };
    let served = common::serve(ClusterConfig::default()).await;
    let ok = served.run(&kubectl, &["get", "secrets", "-A"], &[]).await;
    assert_eq!(ok.code, 0, "{}{}", ok.stdout, ok.stderr);

    // With no credentials at all kubectl asks for a user name (a terminal prompt), as it does
    // with a real API server; a token that is not the cluster's is refused outright.
    let kubeconfig = std::fs::read_to_string(&served.kubeconfig).unwrap();
    let without: String = kubeconfig
        .lines()
        .map(|l| match l.trim_start().strip_prefix("token: ") {
            Some(_) => format!("    token: \"{}\"\n", "0".repeat(64)),
            None => format!("{l}\n"),
        })
        .collect();
    let path = served.dir.path().join("no-token");
    std::fs::write(&path, without).unwrap();
    let refused = served
        .run(
            &kubectl,
            &["get", "secrets", "-A"],
            &[("KUBECONFIG", path.to_str().unwrap())],
        )
        .await;
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(
        refused.stderr.contains("Unauthorized"),
        "{}",
        refused.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_local_user_can_neither_read_the_kubeconfig_nor_list_secrets() {
    // The second local user, where this machine lets the test be one: as root, through
    // util-linux's setpriv; elsewhere the modes and the 401 above stand for it.
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    let setpriv = std::path::Path::new("/usr/bin/setpriv");
    if me.ok() != Some(0) || !setpriv.exists() {
        // Our CI runs as root with util-linux: there the test must run.
        assert!(
            !conformance_testtools::in_ci(),
            "in CI this test must run as root with /usr/bin/setpriv"
        );
        eprintln!(
            "SKIP another_local_user_can_neither_read_the_kubeconfig_nor_list_secrets: needs root and /usr/bin/setpriv to act as another user"
        );
        return;
    }
    let served = common::serve(ClusterConfig::default()).await;
    let as_nobody = |args: &[&str]| {
        std::process::Command::new(setpriv)
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args(args)
            .output()
            .expect("setpriv runs")
    };
    // As if written into a directory others can enter (`--kubeconfig-out /tmp/kc`): the file's
    // own mode must keep them out.
    std::fs::set_permissions(served.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let read = as_nobody(&["cat", served.kubeconfig.to_str().unwrap()]);
    assert!(!read.status.success(), "another user read the kubeconfig");
    assert!(
        String::from_utf8_lossy(&read.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    // What another user can do without it: reach the port and be refused.
    let kubeconfig = std::fs::read_to_string(&served.kubeconfig).unwrap();
    let addr = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .unwrap()
        .to_string();
    let probe = format!(
        "exec 3<>/dev/tcp/{}/{} && echo reachable",
        addr.rsplit_once(':').unwrap().0,
        addr.rsplit_once(':').unwrap().1
    );
    let reach = as_nobody(&["bash", "-c", &probe]);
    assert!(
        String::from_utf8_lossy(&reach.stdout).contains("reachable"),
        "the probe itself works: {}",
        String::from_utf8_lossy(&reach.stderr)
    );
    // Reaching it, a request without the kubeconfig's token gets 401 (the first test).
}
