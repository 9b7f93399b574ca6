//! Container logs written by cluster models, and the `pods/log` subresource over them
//! (`container`, `previous`, `follow`, `tailLines`, `sinceSeconds`, `sinceTime`, `timestamps`,
//! `limitBytes`). Lines carry cluster-clock timestamps, so paused time gives stable output.

use crate::backend::Backend;
use crate::clock::{format_nanos, parse_unix};
use crate::error::{ApiError, ApiResult};
use crate::registry::LogLine;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Query parameters of `pods/log`.
#[derive(Debug, Clone, Default)]
pub(crate) struct LogParams {
    pub container: Option<String>,
    pub previous: bool,
    pub follow: bool,
    pub tail_lines: Option<i64>,
    pub since_seconds: Option<i64>,
    pub since_time: Option<String>,
    pub timestamps: bool,
    pub limit_bytes: Option<usize>,
}

/// The container a request addresses: the named one (validated) or the only one.
pub(crate) fn resolve_container(
    pod: &Value,
    name: &str,
    requested: Option<&str>,
) -> ApiResult<String> {
    let names = |list: &str| -> Vec<String> {
        pod.pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let containers = names("containers");
    let init = names("initContainers");
    match requested.filter(|c| !c.is_empty()) {
        Some(c) if containers.iter().chain(init.iter()).any(|x| x == c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None if containers.len() == 1 => Ok(containers[0].clone()),
        None => {
            let mut msg = format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                containers.join(" ")
            );
            if !init.is_empty() {
                msg.push_str(&format!(
                    " or one of the init containers: [{}]",
                    init.join(" ")
                ));
            }
            Err(ApiError::bad_request(msg))
        }
    }
}

/// The `state` of a container in the pod's status, if reported.
pub(crate) fn container_state(pod: &Value, container: &str) -> Option<Value> {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .find_map(|list| {
            pod.pointer(&format!("/status/{list}"))
                .and_then(Value::as_array)?
                .iter()
                .find(|s| s.get("name").and_then(Value::as_str) == Some(container))
                .and_then(|s| s.get("state").cloned())
        })
}

fn terminated(pod: &Value, container: &str) -> bool {
    matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    ) || container_state(pod, container).is_some_and(|s| s.get("terminated").is_some())
}

fn render(lines: &[LogLine], timestamps: bool) -> Vec<u8> {
    let mut out = vec![];
    for l in lines {
        if timestamps {
            out.extend_from_slice(format_nanos(l.ts_nanos).as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(l.text.as_bytes());
        out.push(b'\n');
    }
    out
}

/// Serves `pods/log`: the selected lines, then (with `follow`) new lines until the container
/// terminates, restarts, or the pod goes away.
pub(crate) fn pod_logs(
    cluster: &Backend,
    ns: &str,
    pod_name: &str,
    p: LogParams,
) -> ApiResult<ReceiverStream<Bytes>> {
    let pod = cluster.get(&crate::resources::ResourceRef::pods(), Some(ns), pod_name)?;
    let container = resolve_container(&pod, pod_name, p.container.as_deref())?;
    let uid = pod
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let snap = cluster
        .logs()
        .snapshot(ns, pod_name, &container, p.previous);
    let (mut lines, restarts) = match snap {
        Some(s) => s,
        None if p.previous => {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{pod_name}\" not found"
            )));
        }
        None => {
            let state = container_state(&pod, &container);
            let started = state
                .as_ref()
                .is_some_and(|s| s.get("running").is_some() || s.get("terminated").is_some());
            if !started {
                let reason = state
                    .as_ref()
                    .and_then(|s| s.pointer("/waiting/reason"))
                    .and_then(Value::as_str)
                    .unwrap_or("ContainerCreating")
                    .to_string();
                return Err(ApiError::bad_request(format!(
                    "container \"{container}\" in pod \"{pod_name}\" is waiting to start: {reason}"
                )));
            }
            (vec![], 0)
        }
    };
    let now_nanos = cluster.read(|s| s.clock.now_nanos());
    let since = p
        .since_seconds
        .map(|s| now_nanos - (s as i128) * 1_000_000_000)
        .or_else(|| {
            p.since_time
                .as_deref()
                .and_then(parse_unix)
                .map(|t| (t as i128) * 1_000_000_000)
        });
    if let Some(since) = since {
        lines.retain(|l| l.ts_nanos >= since);
    }
    if let Some(n) = p.tail_lines {
        let n = n.max(0) as usize;
        if lines.len() > n {
            lines.drain(..lines.len() - n);
        }
    }
    let mut first = render(&lines, p.timestamps);
    if let Some(limit) = p.limit_bytes {
        first.truncate(limit);
    }
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let follow = p.follow && !p.previous;
    let cluster = cluster.clone();
    let ns = ns.to_string();
    let pod_name = pod_name.to_string();
    tokio::spawn(async move {
        if !first.is_empty() && tx.send(Bytes::from(first)).await.is_err() {
            return;
        }
        if !follow {
            return;
        }
        let mut sent = cluster
            .logs()
            .snapshot(&ns, &pod_name, &container, false)
            .map(|s| s.0.len())
            .unwrap_or(0);
        let mut log_rx = cluster.inner.log_changes.subscribe();
        let mut obj_rx = cluster.subscribe();
        loop {
            log_rx.borrow_and_update();
            obj_rx.borrow_and_update();
            let snap = cluster.logs().snapshot(&ns, &pod_name, &container, false);
            if let Some((all, r)) = snap {
                if r != restarts {
                    return; // The followed instance was replaced by a restart.
                }
                if all.len() > sent {
                    let chunk = render(&all[sent..], p.timestamps);
                    sent = all.len();
                    if tx.send(Bytes::from(chunk)).await.is_err() {
                        return;
                    }
                }
            }
            let current = cluster
                .get(&crate::resources::ResourceRef::pods(), Some(&ns), &pod_name)
                .ok();
            match current {
                Some(pod)
                    if pod.pointer("/metadata/uid").and_then(Value::as_str)
                        == Some(uid.as_str()) =>
                {
                    if terminated(&pod, &container) {
                        return;
                    }
                }
                _ => return,
            }
            tokio::select! {
                biased;
                _ = log_rx.changed() => {}
                _ = obj_rx.changed() => {}
                _ = tx.closed() => return,
            }
        }
    });
    Ok(ReceiverStream::new(rx))
}
