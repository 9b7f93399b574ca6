//! Runs a real tool (helm, kubectl) against a served cluster: its kubeconfig, helm's cache,
//! config and data kept in the test's directory, and a deadline.

use std::path::Path;
use std::time::Duration;

/// Runs `tool args`; returns (exit code, stdout, stderr). Panics naming the command when it
/// does not finish within `deadline`.
pub async fn run(
    tool: &Path,
    args: &[&str],
    kubeconfig: &Path,
    state: &Path,
    deadline: Duration,
) -> (i32, String, String) {
    let out = tokio::time::timeout(
        deadline,
        tokio::process::Command::new(tool)
            .env("KUBECONFIG", kubeconfig)
            .env("HELM_CACHE_HOME", state.join("helm-cache"))
            .env("HELM_CONFIG_HOME", state.join("helm-config"))
            .env("HELM_DATA_HOME", state.join("helm-data"))
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{} {args:?} did not finish within {deadline:?}",
            tool.display()
        )
    })
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
