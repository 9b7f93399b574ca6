//! Exec through the Kubernetes API (what `kubectl exec` does), bypassing the gateway: for
//! `probe_exec` while the gateway is down, and for killing supervisors.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::Client;
use kube::api::{Api, AttachParams};
use tokio::io::AsyncReadExt;

use conformance_core::target::{ExecResult, TargetError, TargetResult};

/// The exit code in an exec status: Success is 0; a `NonZeroExitCode` failure carries the code
/// in the `ExitCode` cause (the v5 channel protocol, docs/dependencies.md D1).
pub(crate) fn exit_code(status: Option<&Status>) -> Option<i32> {
    let s = status?;
    if s.status.as_deref() == Some("Success") {
        return Some(0);
    }
    s.details
        .as_ref()?
        .causes
        .iter()
        .flatten()
        .find(|c| c.reason.as_deref() == Some("ExitCode"))
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.trim().parse().ok())
}

/// Runs `argv` in a container and returns its output and exit code.
pub(crate) async fn exec(
    client: &Client,
    namespace: &str,
    pod: &str,
    container: &str,
    argv: &[String],
) -> TargetResult<ExecResult> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let ap = AttachParams::default()
        .container(container)
        .stdout(true)
        .stderr(true);
    let mut proc = api.exec(pod, argv.to_vec(), &ap).await.map_err(|e| {
        TargetError::infra_from(format!("exec in {namespace}/{pod}/{container}"), e)
    })?;
    let mut out = String::new();
    let mut err = String::new();
    let (so, se) = (proc.stdout(), proc.stderr());
    let read_out = async {
        if let Some(mut s) = so {
            let _ = s.read_to_string(&mut out).await;
        }
    };
    let read_err = async {
        if let Some(mut s) = se {
            let _ = s.read_to_string(&mut err).await;
        }
    };
    tokio::join!(read_out, read_err);
    let status = match proc.take_status() {
        Some(f) => f.await,
        None => None,
    };
    let _ = proc.join().await;
    let code = exit_code(status.as_ref()).ok_or_else(|| {
        TargetError::infra(format!(
            "exec in {namespace}/{pod}/{container}: no exit status ({status:?})"
        ))
    })?;
    Ok(ExecResult {
        exit_code: code,
        stdout: out,
        stderr: err,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_come_from_success_or_the_exit_code_cause() {
        let ok: Status =
            serde_json::from_value(serde_json::json!({"metadata": {}, "status": "Success"}))
                .unwrap();
        assert_eq!(exit_code(Some(&ok)), Some(0));
        let failed: Status = serde_json::from_value(serde_json::json!({
            "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": "137"}]}}))
        .unwrap();
        assert_eq!(exit_code(Some(&failed)), Some(137));
        assert_eq!(exit_code(None), None);
    }
}
