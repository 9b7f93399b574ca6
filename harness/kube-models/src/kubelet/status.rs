//! A container as the kubelet tracks it (its state, restarts and back-off) and the status it
//! reports for it (`containerStatuses`, with a deterministic `imageID`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use tokio::time::Instant;

use super::node::s;
use crate::program::Programs;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum CState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started: String,
    },
    Terminated {
        code: i32,
        started: String,
        finished: String,
    },
}

pub(super) struct Ctr {
    pub(super) spec: Value,
    pub(super) name: String,
    pub(super) image: String,
    pub(super) init: bool,
    pub(super) program: Arc<dyn crate::program::ContainerProgram>,
    pub(super) state: CState,
    pub(super) last: Option<Value>,
    pub(super) restarts: u32,
    /// Restarts counted by the back-off (reset after a long enough run).
    pub(super) backoff_n: u32,
    pub(super) ready: Arc<AtomicBool>,
    pub(super) restart_at: Option<Instant>,
    pub(super) run: u64,
    pub(super) ran_since: Option<Instant>,
    pub(super) container_id: Option<String>,
}

impl Ctr {
    pub(super) fn new(spec: &Value, init: bool, programs: &Programs) -> Self {
        let image = s(spec, "/image").unwrap_or_default().to_string();
        Self {
            name: s(spec, "/name").unwrap_or_default().to_string(),
            program: programs.for_image(&image),
            image,
            init,
            spec: spec.clone(),
            state: CState::Waiting {
                reason: "ContainerCreating".into(),
                message: None,
            },
            last: None,
            restarts: 0,
            backoff_n: 0,
            ready: Arc::new(AtomicBool::new(false)),
            restart_at: None,
            run: 0,
            ran_since: None,
            container_id: None,
        }
    }

    pub(super) fn is_running(&self) -> bool {
        matches!(self.state, CState::Running { .. })
    }

    pub(super) fn exit_code(&self) -> Option<i32> {
        match self.state {
            CState::Terminated { code, .. } => Some(code),
            _ => None,
        }
    }

    pub(super) fn terminated_json(&self) -> Option<Value> {
        match &self.state {
            CState::Terminated {
                code,
                started,
                finished,
            } => Some(json!({"terminated": {
                "exitCode": code,
                "reason": if *code == 0 { "Completed" } else { "Error" },
                "startedAt": started,
                "finishedAt": finished,
                "containerID": self.container_id,
            }})),
            _ => None,
        }
    }

    pub(super) fn status(&self, pending_init: bool) -> Value {
        let state = match &self.state {
            CState::Waiting { reason, message } => {
                let reason = if pending_init && reason == "ContainerCreating" {
                    "PodInitializing"
                } else {
                    reason
                };
                let mut w = json!({"reason": reason});
                if let Some(m) = message {
                    w["message"] = json!(m);
                }
                json!({"waiting": w})
            }
            CState::Running { started } => json!({"running": {"startedAt": started}}),
            CState::Terminated { .. } => self.terminated_json().expect("terminated"),
        };
        let mut st = json!({
            "name": self.name,
            "image": self.image,
            "imageID": if self.container_id.is_some() { image_id(&self.image) } else { String::new() },
            "ready": self.is_running() && self.ready.load(Ordering::SeqCst),
            "started": self.is_running(),
            "restartCount": self.restarts,
            "state": state,
            "lastState": self.last.clone().unwrap_or(json!({})),
        });
        if let Some(id) = &self.container_id {
            st["containerID"] = json!(id);
        }
        st
    }
}

pub(super) fn fnv64(data: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

pub(super) fn hex64(seed: &str) -> String {
    (0..4)
        .map(|i| format!("{:016x}", fnv64(&format!("{i}/{seed}"))))
        .collect()
}

/// A deterministic `imageID` (`<repository>@sha256:<64 hex>`).
pub(super) fn image_id(image: &str) -> String {
    let repo = crate::program::repository(image);
    let repo = if repo.contains('/') {
        repo.to_string()
    } else {
        format!("docker.io/library/{repo}")
    };
    format!("{repo}@sha256:{}", hex64(image))
}
