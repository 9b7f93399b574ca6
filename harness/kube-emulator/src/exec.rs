//! `pods/exec`: validation as the API server and kubelet do it, a registry of per-container exec
//! handlers with the shell as the default, and the WebSocket remote-command protocol
//! (`v5.channel.k8s.io`, `v4.channel.k8s.io`): stdin 0, stdout 1, stderr 2, status 3, resize 4,
//! close 255 (v5).

use crate::backend::Backend;
use crate::error::{ApiError, ApiResult, success_status};
use crate::logs::{container_state, resolve_container};
use crate::plugin::ExecRequest;
use crate::pointer::Pointer;
use crate::resources::ResourceRef;
use axum::extract::ws::{Message, WebSocket};
use emulator_shell::{DefaultHooks, ExecOutput, Mounts, ShellHooks};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::sync::Arc;

/// Checks that the container can be exec'd into (the real API's errors) and builds the request.
pub(crate) fn prepare(
    cluster: &Backend,
    ns: &str,
    pod_name: &str,
    container: Option<&str>,
    argv: Vec<String>,
    tty: bool,
) -> ApiResult<ExecRequest> {
    let pod = cluster.get(&ResourceRef::pods(), Some(ns), pod_name)?;
    if pod
        .at("/spec/nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(ApiError::bad_request(format!(
            "pod {pod_name} does not have a host assigned"
        )));
    }
    if let Some(phase @ ("Succeeded" | "Failed")) = pod.at("/status/phase").and_then(Value::as_str)
    {
        return Err(ApiError::bad_request(format!(
            "cannot exec into a container in a completed pod; current phase is {phase}"
        )));
    }
    let container = resolve_container(&pod, pod_name, container)?;
    if argv.is_empty() {
        return Err(ApiError::bad_request(
            "you must specify at least one command for the container",
        ));
    }
    if container_state(&pod, &container).is_none_or(|s| s.get("running").is_none()) {
        return Err(ApiError::bad_request(format!(
            "unable to upgrade connection: container not found (\"{container}\")"
        )));
    }
    let spec = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| pod.at(&format!("/spec/{l}")).and_then(Value::as_array))
        .flatten()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(container.as_str()))
        .cloned()
        .unwrap_or(Value::Null);
    let env = spec
        .get("env")
        .and_then(Value::as_array)
        .map(|es| {
            es.iter()
                .filter_map(|e| {
                    Some((
                        e.get("name")?.as_str()?.to_string(),
                        e.get("value")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ExecRequest {
        namespace: ns.into(),
        pod: pod_name.into(),
        pod_uid: pod
            .at("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .into(),
        workdir: spec
            .get("workingDir")
            .and_then(Value::as_str)
            .unwrap_or("/")
            .into(),
        container,
        argv,
        stdin: vec![],
        env,
        tty,
    })
}

/// Runs a request with the registered handler, or the shell over the container's mounts.
pub(crate) async fn run(cluster: &Backend, req: ExecRequest) -> ExecOutput {
    if let Some(h) = cluster.exec_handler(&req.namespace, &req.pod, &req.container) {
        return h.exec(req).await;
    }
    let mut mounts = container_mounts(cluster, &req);
    let hooks: Arc<dyn ShellHooks> = cluster
        .pod_hooks(&req.namespace, &req.pod)
        .unwrap_or_else(|| Arc::new(DefaultHooks::new(cluster.now_unix())));
    let hooks = hooks.for_container(&req.container).unwrap_or(hooks);
    if let Some(proc) = hooks.procfs() {
        mounts.mount("/proc", proc, true);
    }
    emulator_shell::run(
        &req.argv,
        &req.stdin,
        &req.env,
        &req.workdir,
        &mounts,
        hooks.as_ref(),
    )
    .await
}

/// The container's filesystem: an ephemeral root plus its `volumeMounts`, resolved through the
/// pod's `volumes` (PVC: per claim, outlives the pod; anything else: per pod uid and volume,
/// where secret, configMap, projected and downwardAPI volumes hold the files the kubelet wrote
/// at container start).
pub(crate) fn container_mounts(cluster: &Backend, req: &ExecRequest) -> Mounts {
    let mut mounts = Mounts::new();
    mounts.mount(
        "/",
        cluster.container_root(&req.pod_uid, &req.container),
        false,
    );
    // Shared, not copied: every exec resolves its mounts.
    let Ok(pod) = cluster.get_shared(&ResourceRef::pods(), Some(&req.namespace), &req.pod) else {
        return mounts;
    };
    let volumes: &[Value] = pod
        .at("/spec/volumes")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let container = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| pod.at(&format!("/spec/{l}")).and_then(Value::as_array))
        .flatten()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(req.container.as_str()));
    for m in container
        .and_then(|c| c.get("volumeMounts"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(name), Some(path)) = (
            m.get("name").and_then(Value::as_str),
            m.get("mountPath").and_then(Value::as_str),
        ) else {
            continue;
        };
        let vol = volumes
            .iter()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(name));
        // The kubelet mounts API-backed volumes (secret, configMap, projected, downwardAPI)
        // read-only whatever the mount says; their files are filled at container start
        // (`crate::volumes::populate_volumes`) into the per-pod directory.
        let ro = m.get("readOnly").and_then(Value::as_bool).unwrap_or(false)
            || vol.is_some_and(crate::volumes::is_api_volume);
        let volume = match vol
            .and_then(|v| v.at("/persistentVolumeClaim/claimName"))
            .and_then(Value::as_str)
        {
            Some(claim) => cluster.pvc_volume(&req.namespace, claim),
            None => cluster.empty_dir(&req.pod_uid, name),
        };
        mounts.mount(path, volume, ro);
    }
    mounts
}

/// The status-channel object for an exit code.
pub(crate) fn exit_status(argv: &[String], code: i32) -> Value {
    if code == 0 {
        return success_status();
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: error executing command [{}], exit code {code}", argv.join(" ")),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}
    })
}

/// A close frame with code 1000: clients (kubectl's gorilla websocket) read a close without a
/// status code (1005) as an error rather than the end of the streams.
pub(crate) fn normal_close() -> Message {
    Message::Close(Some(axum::extract::ws::CloseFrame {
        code: 1000,
        reason: "".into(),
    }))
}

/// How long an exec without stdin takes to start before its first frame (see [`serve_ws`]).
const EXEC_START: std::time::Duration = std::time::Duration::from_millis(20);

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::Binary(v.into())
}

/// Which streams the client asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// Serves one upgraded exec connection.
pub(crate) async fn serve_ws(
    socket: WebSocket,
    cluster: Backend,
    mut req: ExecRequest,
    streams: Streams,
) {
    let (mut tx, mut rx) = socket.split();
    if streams.stdin {
        while let Some(Ok(msg)) = rx.next().await {
            match msg {
                Message::Binary(b) if b.first() == Some(&0) => req.stdin.extend_from_slice(&b[1..]),
                // v5: the client closed stdin.
                Message::Binary(b) if b.first() == Some(&255) && b.get(1) == Some(&0) => break,
                Message::Close(_) => break,
                _ => {}
            }
        }
    }
    if !streams.stdin {
        // kubectl (client-go) starts reading frames as the upgrade completes and creates its
        // stream readers just after; a frame that comes first is dropped ("Unknown stream id").
        // A real exec is never that quick (the runtime starts a process); with TCP_NODELAY
        // ours would be.
        tokio::time::sleep(EXEC_START).await;
    }
    let argv = req.argv.clone();
    let out = run(&cluster, req).await;
    for (ch, want, data) in [
        (1u8, streams.stdout, &out.stdout),
        (2u8, streams.stderr, &out.stderr),
    ] {
        if want {
            for chunk in data.chunks(32 * 1024) {
                if tx.send(frame(ch, chunk)).await.is_err() {
                    return;
                }
            }
        }
    }
    let status = serde_json::to_vec(&exit_status(&argv, out.exit_code)).unwrap_or_default();
    let _ = tx.send(frame(3, &status)).await;
    let _ = tx.send(normal_close()).await;
}
