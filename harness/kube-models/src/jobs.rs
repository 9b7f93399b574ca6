//! The Job controller and the TTL-after-finished controller (docs/upstream-facts.md F12.2).
//! Level-triggered like the workload controllers: every change re-runs one pass over all Jobs;
//! the only timers are `activeDeadlineSeconds` and `ttlSecondsAfterFinished`.
//!
//! Modelled: pods from the template (`generateName: <job>-`, a controller ownerRef, the job
//! labels the API server put in the template), up to `parallelism` at once until `completions`
//! pods succeeded; failures (failed pods, plus container restarts under `OnFailure`) beyond
//! `backoffLimit` fail the Job (`BackoffLimitExceeded`), so does `activeDeadlineSeconds`
//! (`DeadlineExceeded`), and the active pods are deleted; conditions `SuccessCriteriaMet` then
//! `Complete`, or `FailureTarget` then `Failed`, with `completionTime`; a finished Job with
//! `ttlSecondsAfterFinished` is deleted that long after it finished (its pods go with it,
//! background propagation); `suspend` stops creating pods.
//! Not modelled: indexed completion, pod failure and success policies, the back-off delay
//! before a failed pod is replaced, the `batch.kubernetes.io/job-tracking` finalizer (counts are
//! kept monotonic instead, so removed pods are not counted twice or lost).

use kube_emulator::Pointer;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::network::is_ready;
use crate::workloads::{
    controller_uid, is_deleting, list, owner_ref, s, set_condition, write_status,
};
use kube_emulator::{Cluster, DeleteOptions, ListOptions, ResourceRef, parse_unix};

fn jobs() -> ResourceRef {
    ResourceRef::new("batch", "v1", "jobs")
}

fn int(v: &Value, ptr: &str) -> Option<i64> {
    v.at(ptr).and_then(Value::as_i64)
}

fn condition_true(job: &Value, type_: &str) -> Option<String> {
    job.at("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == "True")
        .map(|c| s(c, "/lastTransitionTime").unwrap_or_default().to_string())
}

/// The Job controller (with the TTL-after-finished controller).
pub(crate) struct JobController {
    cluster: Cluster,
}

impl JobController {
    pub(crate) fn new(cluster: Cluster) -> Self {
        Self { cluster }
    }

    /// Runs until the task is aborted.
    pub(crate) fn spawn(self) -> JoinHandle<()> {
        let mut changes = self.cluster.subscribe();
        tokio::spawn(async move {
            loop {
                let next = self.reconcile_all();
                let wait = next.map(|at| {
                    Duration::from_secs(at.saturating_sub(self.cluster.now_unix()).max(1))
                });
                tokio::select! {
                    biased;
                    r = changes.changed() => {
                        if r.is_err() {
                            return;
                        }
                    }
                    () = sleep_opt(wait) => {}
                }
            }
        })
    }

    /// One pass over every Job. Returns the next instant (Unix seconds) a timer is due.
    pub(crate) fn reconcile_all(&self) -> Option<u64> {
        list(&self.cluster, &jobs())
            .iter()
            .filter(|j| !is_deleting(j))
            .filter_map(|j| self.job(j))
            .min()
    }

    fn job(&self, job: &Value) -> Option<u64> {
        let now = self.cluster.now_unix();
        let ns = s(job, "/metadata/namespace").unwrap_or_default();
        let name = s(job, "/metadata/name").unwrap_or_default();
        let finished = condition_true(job, "Complete").or_else(|| condition_true(job, "Failed"));
        if let Some(at) = finished {
            // The TTL-after-finished controller.
            let ttl = int(job, "/spec/ttlSecondsAfterFinished")?;
            let due = parse_unix(&at).unwrap_or(now as i64).max(0) as u64 + ttl.max(0) as u64;
            if now >= due {
                let opts = DeleteOptions {
                    propagation_policy: Some("Background".into()),
                    ..Default::default()
                };
                let _ = self.cluster.delete(&jobs(), Some(ns), name, &opts);
                return None;
            }
            return Some(due);
        }
        let uid = s(job, "/metadata/uid").unwrap_or_default();
        let pods: Vec<Arc<Value>> = self
            .cluster
            .list_shared(&ResourceRef::pods(), Some(ns), &ListOptions::default())
            .map(|(items, _)| items)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| controller_uid(p) == Some(uid))
            .collect();
        let phase = |p: &Value| s(p, "/status/phase").unwrap_or("Pending").to_string();
        let active: Vec<&Value> = pods
            .iter()
            .map(|p| &**p)
            .filter(|p| !is_deleting(p) && !matches!(phase(p).as_str(), "Succeeded" | "Failed"))
            .collect();
        let on_failure = s(job, "/spec/template/spec/restartPolicy") == Some("OnFailure");
        let restarts: i64 = if on_failure {
            active
                .iter()
                .flat_map(|p| {
                    p.at("/status/containerStatuses")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                })
                .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                .sum()
        } else {
            0
        };
        let count = |ph: &str, key: &str| -> i64 {
            let seen = pods.iter().filter(|p| phase(p) == ph).count() as i64;
            seen.max(int(job, &format!("/status/{key}")).unwrap_or(0))
        };
        let succeeded = count("Succeeded", "succeeded");
        let failed = count("Failed", "failed");
        let completions = int(job, "/spec/completions").unwrap_or(1).max(0);
        let parallelism = int(job, "/spec/parallelism").unwrap_or(1).max(0);
        let backoff_limit = int(job, "/spec/backoffLimit").unwrap_or(6);
        let suspended = job.at("/spec/suspend") == Some(&json!(true));
        let start = s(job, "/status/startTime")
            .and_then(parse_unix)
            .map(|t| t.max(0) as u64)
            .unwrap_or(now);
        let deadline = int(job, "/spec/activeDeadlineSeconds").map(|d| start + d.max(0) as u64);
        let failure = if failed + restarts > backoff_limit {
            Some((
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            ))
        } else if deadline.is_some_and(|d| now >= d) {
            Some((
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            ))
        } else {
            None
        };
        let complete = failure.is_none() && succeeded >= completions;
        let mut created = 0;
        if failure.is_some() || complete {
            for p in &active {
                let _ = self.cluster.delete(
                    &ResourceRef::pods(),
                    Some(ns),
                    s(p, "/metadata/name").unwrap_or_default(),
                    &DeleteOptions::default(),
                );
            }
        } else if !suspended {
            let want = parallelism.min(completions - succeeded) - active.len() as i64;
            for _ in 0..want.max(0) {
                if self.create_pod(job) {
                    created += 1;
                }
            }
        }
        let now_s = self.cluster.now_rfc3339();
        let mut st = job
            .get("status")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if !suspended || st.contains_key("startTime") {
            st.entry("startTime").or_insert(json!(now_s));
        }
        let running = if failure.is_some() || complete {
            0
        } else {
            active.len() as i64 + created
        };
        let ready = active.iter().filter(|p| is_ready(p)).count() as i64;
        for (k, v) in [
            ("active", running),
            ("succeeded", succeeded),
            ("failed", failed),
        ] {
            if v > 0 {
                st.insert(k.into(), json!(v));
            } else {
                st.remove(k);
            }
        }
        st.insert("ready".into(), json!(if running > 0 { ready } else { 0 }));
        st.insert("terminating".into(), json!(0));
        st.insert("uncountedTerminatedPods".into(), json!({}));
        let mut conds: Vec<Value> = st
            .get("conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut cond = |type_: &str, reason: &str, message: &str| {
            set_condition(
                &mut conds,
                json!({"type": type_, "status": "True", "reason": reason, "message": message,
                       "lastProbeTime": now_s}),
                &now_s,
            );
        };
        if let Some((reason, message)) = failure {
            cond("FailureTarget", reason, message);
            cond("Failed", reason, message);
        } else if complete {
            cond(
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            );
            cond(
                "Complete",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            );
            st.insert("completionTime".into(), json!(now_s));
        }
        for c in &mut conds {
            // The apps-style update time is not part of a Job condition.
            if let Some(m) = c.as_object_mut() {
                m.remove("lastUpdateTime");
            }
        }
        if !conds.is_empty() {
            st.insert("conditions".into(), Value::Array(conds));
        }
        write_status(&self.cluster, &jobs(), job, Value::Object(st));
        if failure.is_some() || complete {
            // Finished now: the TTL (if any) counts from here, on the next pass.
            return Some(now);
        }
        deadline
    }

    /// Creates one pod from the template. Returns whether it was created.
    fn create_pod(&self, job: &Value) -> bool {
        let ns = s(job, "/metadata/namespace").unwrap_or_default();
        let name = s(job, "/metadata/name").unwrap_or_default();
        let template = job.at("/spec/template").cloned().unwrap_or(json!({}));
        let mut md = json!({
            "generateName": format!("{name}-"),
            "labels": template.at("/metadata/labels").cloned().unwrap_or(json!({})),
            "ownerReferences": owner_ref("batch/v1", "Job", job),
        });
        if let Some(a) = template.at("/metadata/annotations") {
            md["annotations"] = a.clone();
        }
        let spec = template.get("spec").cloned().unwrap_or(json!({}));
        self.cluster
            .create(
                &ResourceRef::pods(),
                Some(ns),
                json!({"metadata": md, "spec": spec}),
            )
            .is_ok()
    }
}

async fn sleep_opt(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}
