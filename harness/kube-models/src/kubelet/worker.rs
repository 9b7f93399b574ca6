//! A pod's worker: runs its init containers in order and its containers concurrently, restarts
//! them by policy with CrashLoopBackOff, handles graceful deletion, and writes the pod's status.

use conformance_core::timeline::READY_CONDITION;
use kube_emulator::Pointer;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::node::{Cmd, Inner, lock, s};
use super::status::{CState, Ctr, hex64};
use crate::procs::{Exit, PodShared, Proc};
use crate::program::{ContainerCtx, Signal};
use kube_emulator::container_mounts;
use kube_emulator::{DeleteOptions, ExecRequest, ResourceRef};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Stage {
    /// Waiting for the pod sandbox (until the instant).
    Creating(Instant),
    /// Running init container N.
    Init(usize),
    Main,
    /// Nothing runs or will run again (terminal phase, or finalized).
    Done,
}

pub(super) struct Worker {
    pub(super) k: Arc<Inner>,
    pub(super) ns: String,
    pub(super) name: String,
    pub(super) uid: String,
    pub(super) restart_policy: String,
    /// The pod as last written, shared with the store.
    pub(super) pod: Arc<Value>,
    pub(super) init: Vec<Ctr>,
    pub(super) main: Vec<Ctr>,
    pub(super) shared: Arc<PodShared>,
    pub(super) exits: mpsc::UnboundedReceiver<Exit>,
    pub(super) cmds: mpsc::UnboundedReceiver<Cmd>,
    pub(super) ready_changed: Arc<Notify>,
    pub(super) stage: Stage,
    pub(super) pod_ip: Option<String>,
    pub(super) start_time: String,
    /// Set while the pod is being deleted: when the grace period ends.
    pub(super) deadline: Option<Instant>,
    /// Condition type → (status, lastTransitionTime).
    pub(super) transitions: BTreeMap<&'static str, (bool, String)>,
    pub(super) runs: u64,
    /// Failed volume set-ups so far (the retry back-off grows with it).
    pub(super) mount_failures: u32,
}

impl Worker {
    pub(super) async fn run(mut self) {
        loop {
            if self.step() {
                return;
            }
            self.write_status();
            let next = self.next_timer();
            tokio::select! {
                biased;
                Some(cmd) = self.cmds.recv() => match cmd {
                    Cmd::Deleting => self.on_deleting(),
                },
                Some(exit) = self.exits.recv() => self.on_exit(exit),
                () = self.ready_changed.notified() => {}
                () = sleep_until_opt(next) => {}
            }
        }
    }

    fn next_timer(&self) -> Option<Instant> {
        let mut t: Vec<Instant> = self
            .init
            .iter()
            .chain(&self.main)
            .filter_map(|c| c.restart_at)
            .collect();
        if let Stage::Creating(at) = self.stage {
            t.push(at);
        }
        t.extend(self.deadline);
        t.into_iter().min()
    }

    /// Advances the pod; true when the worker is finished (the pod was finalized).
    fn step(&mut self) -> bool {
        let now = Instant::now();
        if let Some(deadline) = self.deadline {
            if now >= deadline {
                self.kill_running();
            }
            if lock(&self.shared.procs).is_empty() {
                self.finalize();
                return true;
            }
            return false;
        }
        if let Stage::Creating(at) = self.stage {
            if now < at {
                return false;
            }
            // Volumes are set up before the pod sandbox: a missing Secret or ConfigMap keeps
            // the pod ContainerCreating, retried with the volume manager's back-off (F10.7).
            if let Err(failure) = kube_emulator::populate_volumes(&self.k.cluster, &self.pod) {
                self.mount_failed(&failure);
                let delay = self.k.config.mount_retry_delay(self.mount_failures);
                self.mount_failures += 1;
                self.stage = Stage::Creating(now + delay);
                return false;
            }
            let n = self.k.next_ip.fetch_add(1, Ordering::SeqCst);
            let n = (n - 2) % 253 + 2;
            self.pod_ip = Some(format!("{}{n}", self.k.config.pod_ip_prefix));
            self.stage = Stage::Init(0);
            if let Some(c) = self.init.first_mut() {
                c.restart_at = Some(now);
            }
        }
        // Restarts (and first starts) that are due.
        for i in 0..self.init.len() + self.main.len() {
            let c = self.ctr(i);
            if c.restart_at.is_some_and(|t| t <= now) {
                self.start(i);
            }
        }
        if let Stage::Init(i) = self.stage {
            let mut i = i;
            while i < self.init.len() && self.init[i].exit_code() == Some(0) {
                i += 1;
                if i < self.init.len() {
                    self.start(i);
                }
            }
            if i == self.init.len() {
                self.stage = Stage::Main;
                for j in 0..self.main.len() {
                    self.start(self.init.len() + j);
                }
            } else {
                self.stage = Stage::Init(i);
                let c = &self.init[i];
                if c.exit_code().is_some_and(|e| e != 0) && c.restart_at.is_none() {
                    self.stage = Stage::Done; // restartPolicy Never: the pod fails.
                }
            }
        }
        if self.stage == Stage::Main
            && self
                .main
                .iter()
                .all(|c| c.exit_code().is_some() && c.restart_at.is_none())
        {
            self.stage = Stage::Done;
        }
        false
    }

    fn ctr(&self, i: usize) -> &Ctr {
        if i < self.init.len() {
            &self.init[i]
        } else {
            &self.main[i - self.init.len()]
        }
    }

    fn ctr_mut(&mut self, i: usize) -> &mut Ctr {
        let n = self.init.len();
        if i < n {
            &mut self.init[i]
        } else {
            &mut self.main[i - n]
        }
    }

    /// Posts (or counts again) the kubelet's `FailedMount` warning on the pod.
    fn mount_failed(&self, failure: &kube_emulator::MountFailure) {
        let events = ResourceRef::new("", "v1", "events");
        let now = self.k.cluster.now_rfc3339();
        let name = format!("{}.failedmount.{}", self.name, failure.volume);
        if let Ok(mut ev) = self.k.cluster.get(&events, Some(&self.ns), &name) {
            let count = ev.get("count").and_then(Value::as_u64).unwrap_or(1) + 1;
            ev["count"] = json!(count);
            ev["lastTimestamp"] = json!(now);
            ev["message"] = json!(failure.message);
            let _ = self.k.cluster.update(&events, Some(&self.ns), &name, ev);
            return;
        }
        let ev = json!({
            "metadata": {"name": name, "namespace": self.ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": self.name,
                               "namespace": self.ns, "uid": self.uid},
            "reason": "FailedMount",
            "message": failure.message,
            "type": "Warning",
            "source": {"component": "kubelet", "host": self.k.config.node_name},
            "reportingComponent": "kubelet",
            "reportingInstance": self.k.config.node_name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        let _ = self.k.cluster.create(&events, Some(&self.ns), ev);
    }

    /// Starts (or restarts) container `i` (init containers first, then containers).
    fn start(&mut self, i: usize) {
        // A fresh snapshot of the API-backed volumes for the new container; if an object has
        // gone since, the files stay as they were (the kubelet keeps the last contents).
        let _ = kube_emulator::populate_volumes(&self.k.cluster, &self.pod);
        self.runs += 1;
        let run = self.runs;
        let k = self.k.clone();
        let (ns, pod, uid) = (self.ns.clone(), self.name.clone(), self.uid.clone());
        let env = self.env_of(i);
        let host_pid = k.next_pid.fetch_add(1, Ordering::SeqCst);
        let ns_pid = self.shared.info.next_ns_pid();
        let ready_changed = self.ready_changed.clone();
        let exits = self.shared.exits.clone();
        let now = k.cluster.now_rfc3339();
        let restart_policy = self.restart_policy.clone();
        let pod_ip = self.pod_ip.clone();
        let c = self.ctr_mut(i);
        c.restart_at = None;
        if c.run > 0 {
            // A restart: the count goes up as the new container starts (during a back-off the
            // status shows the old count and the crash in lastState), the log becomes previous.
            if let Some(t) = c.terminated_json() {
                c.last = Some(t);
            }
            c.restarts += 1;
            k.cluster.restart_container_log(&ns, &pod, &c.name);
        }
        c.run = run;
        c.ran_since = Some(Instant::now());
        c.container_id = Some(format!(
            "containerd://{}",
            hex64(&format!("{uid}/{}/{run}", c.name))
        ));
        c.state = CState::Running { started: now };
        c.ready.store(false, Ordering::SeqCst);
        let argv: Vec<String> = ["command", "args"]
            .iter()
            .filter_map(|f| c.spec.get(*f).and_then(Value::as_array))
            .flatten()
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        // The image's own entrypoint is not known here: its repository stands in for it.
        let cmdline = if argv.is_empty() {
            vec![crate::program::repository(&c.image).to_string()]
        } else {
            argv.clone()
        };
        let environ: Vec<(String, String)> =
            env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let container_id = c.container_id.clone().unwrap_or_default();
        let req = ExecRequest {
            namespace: ns.clone(),
            pod: pod.clone(),
            pod_uid: uid.clone(),
            container: c.name.clone(),
            argv: vec![],
            stdin: vec![],
            env: BTreeMap::new(),
            workdir: "/".into(),
            tty: false,
        };
        let mounts = container_mounts(&k.cluster, &req);
        let (mut ctx, signals, ready) = ContainerCtx::new(
            k.cluster.clone(),
            k.network.clone(),
            &ns,
            &pod,
            &uid,
            &c.name,
            argv,
            env,
            mounts,
        );
        ctx.restart_count = c.restarts;
        ctx.restart_policy = restart_policy;
        ctx.image = c.image.clone();
        ctx.spec = c.spec.clone();
        ctx.pod_ip = pod_ip;
        ctx.ready_changed = ready_changed;
        c.ready = ready;
        let program = c.program.clone();
        program.on_start(&ctx);
        let name = c.name.clone();
        let task = tokio::spawn({
            let name = name.clone();
            async move {
                let code = program.run(ctx).await;
                let _ = exits.send(Exit {
                    container: name,
                    run,
                    code,
                });
            }
        });
        lock(&self.shared.procs).insert(
            name,
            Proc {
                run,
                signals,
                task: task.abort_handle(),
                host_pid,
                ns_pid,
                cmdline,
                environ,
                container_id,
            },
        );
    }

    /// Environment of container `i`: literal values and the downward API / Secret / ConfigMap
    /// references that resolve now (unresolvable ones are left out).
    fn env_of(&self, i: usize) -> BTreeMap<String, String> {
        let spec = &self.ctr(i).spec;
        let mut env = BTreeMap::new();
        for e in spec
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(name) = s(e, "/name") else { continue };
            let value = if let Some(v) = s(e, "/value") {
                Some(v.to_string())
            } else if let Some(f) = s(e, "/valueFrom/fieldRef/fieldPath") {
                match f {
                    "status.podIP" => self.pod_ip.clone(),
                    "status.hostIP" => Some(self.k.config.host_ip.clone()),
                    "spec.nodeName" => Some(self.k.config.node_name.clone()),
                    _ => f
                        .strip_prefix("metadata.")
                        .or_else(|| f.strip_prefix("spec."))
                        .and_then(|_| s(&self.pod, &format!("/{}", f.replace('.', "/"))))
                        .map(String::from),
                }
            } else if let Some(r) = e.at("/valueFrom/secretKeyRef") {
                let secret = self.k.cluster.get(
                    &ResourceRef::new("", "v1", "secrets"),
                    Some(&self.ns),
                    s(r, "/name").unwrap_or_default(),
                );
                secret.ok().and_then(|sec| {
                    let key = s(r, "/key")?;
                    sec.at("/data")
                        .and_then(|d| d.get(key))
                        .and_then(Value::as_str)
                        .and_then(base64_decode)
                        .or_else(|| {
                            sec.at("/stringData")
                                .and_then(|d| d.get(key))
                                .and_then(Value::as_str)
                                .map(String::from)
                        })
                })
            } else if let Some(r) = e.at("/valueFrom/configMapKeyRef") {
                let cm = self.k.cluster.get(
                    &ResourceRef::new("", "v1", "configmaps"),
                    Some(&self.ns),
                    s(r, "/name").unwrap_or_default(),
                );
                cm.ok().and_then(|cm| {
                    cm.at("/data")
                        .and_then(|d| d.get(s(r, "/key")?))
                        .and_then(Value::as_str)
                        .map(String::from)
                })
            } else {
                None
            };
            if let Some(v) = value {
                env.insert(name.to_string(), v);
            }
        }
        env
    }

    fn on_exit(&mut self, exit: Exit) {
        let Some(i) = (0..self.init.len() + self.main.len()).find(|&i| {
            let c = self.ctr(i);
            c.name == exit.container && c.run == exit.run && c.is_running()
        }) else {
            return;
        };
        {
            let mut procs = lock(&self.shared.procs);
            if procs
                .get(&exit.container)
                .is_some_and(|p| p.run == exit.run)
            {
                procs.remove(&exit.container);
            }
        }
        let now = self.k.cluster.now_rfc3339();
        let deleting = self.deadline.is_some();
        let policy = self.restart_policy.clone();
        let cfg = self.k.config.clone();
        let (ns, pod, uid) = (self.ns.clone(), self.name.clone(), self.uid.clone());
        let c = self.ctr_mut(i);
        let started = match &c.state {
            CState::Running { started } => started.clone(),
            _ => now.clone(),
        };
        c.state = CState::Terminated {
            code: exit.code,
            started,
            finished: now,
        };
        let restart = !deleting
            && match policy.as_str() {
                "Never" => false,
                // Init containers restart only on failure (OnFailure and Always alike).
                "OnFailure" => exit.code != 0,
                _ => !c.init || exit.code != 0,
            };
        if !restart {
            return;
        }
        if c.ran_since
            .is_some_and(|t| t.elapsed() >= cfg.restart_backoff_reset)
        {
            c.backoff_n = 0;
        }
        c.backoff_n += 1;
        let delay = cfg.restart_delay(c.backoff_n);
        c.restart_at = Some(Instant::now() + delay);
        if !delay.is_zero() {
            // The terminated state moves to lastState while the back-off runs.
            c.last = c.terminated_json();
            c.state = CState::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: Some(format!(
                    "back-off {}s restarting failed container={} pod={pod}_{ns}({uid})",
                    delay.as_secs(),
                    c.name
                )),
            };
        }
    }

    fn on_deleting(&mut self) {
        let Ok(pod) = self
            .k
            .cluster
            .get(&ResourceRef::pods(), Some(&self.ns), &self.name)
        else {
            return;
        };
        if s(&pod, "/metadata/uid") != Some(self.uid.as_str()) {
            return;
        }
        let due = s(&pod, "/metadata/deletionTimestamp")
            .and_then(kube_emulator::parse_unix)
            .unwrap_or(0);
        let left = (due - self.k.cluster.now_unix() as i64).max(0) as u64;
        let deadline = Instant::now() + Duration::from_secs(left);
        if self.deadline.is_none() {
            for c in self.init.iter_mut().chain(self.main.iter_mut()) {
                c.restart_at = None;
            }
            let names: Vec<String> = lock(&self.shared.procs).keys().cloned().collect();
            for n in names {
                self.shared.deliver(&n, Signal::Term);
            }
        }
        self.deadline = Some(self.deadline.map_or(deadline, |d| d.min(deadline)));
    }

    /// The grace period is over: programs still running are dropped (exit 137).
    fn kill_running(&mut self) {
        let names: Vec<String> = lock(&self.shared.procs).keys().cloned().collect();
        for n in names {
            self.shared.deliver(&n, Signal::Kill);
        }
        while let Ok(exit) = self.exits.try_recv() {
            self.on_exit(exit);
        }
    }

    /// Containers stopped: last status, endpoints gone, then the final grace-0 delete.
    fn finalize(&mut self) {
        while let Ok(exit) = self.exits.try_recv() {
            self.on_exit(exit);
        }
        self.stage = Stage::Done;
        self.write_status();
        self.k.network.unbind_pod(&self.ns, &self.name);
        for c in self.init.iter().chain(&self.main) {
            c.program.pod_finished(&self.uid);
        }
        let _ = self.k.cluster.delete(
            &ResourceRef::pods(),
            Some(&self.ns),
            &self.name,
            &DeleteOptions {
                grace_period_seconds: Some(0),
                precondition_uid: Some(self.uid.clone()),
                ..Default::default()
            },
        );
    }

    fn phase(&self) -> &'static str {
        if self.deadline.is_some() && self.stage == Stage::Done {
            // Stopped for deletion: terminal like a 1.27+ kubelet reports it.
            return if self.main.iter().all(|c| c.exit_code() == Some(0)) {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        match self.stage {
            Stage::Creating(_) | Stage::Init(_) => "Pending",
            Stage::Done if self.main.iter().all(|c| c.run == 0) => {
                // Never got past the init containers (or never started).
                if self
                    .init
                    .iter()
                    .any(|c| c.exit_code().is_some_and(|e| e != 0))
                {
                    "Failed"
                } else {
                    "Pending"
                }
            }
            Stage::Main | Stage::Done => {
                if self
                    .main
                    .iter()
                    .any(|c| c.is_running() || c.restart_at.is_some())
                {
                    "Running"
                } else if self.main.iter().all(|c| c.exit_code() == Some(0)) {
                    "Succeeded"
                } else {
                    "Failed"
                }
            }
        }
    }

    fn condition(
        &mut self,
        type_: &'static str,
        ok: bool,
        reason: Option<(&str, String)>,
    ) -> Value {
        let now = self.k.cluster.now_rfc3339();
        let entry = self
            .transitions
            .entry(type_)
            .or_insert_with(|| (ok, now.clone()));
        if entry.0 != ok {
            *entry = (ok, now);
        }
        let mut c = json!({
            "type": type_,
            "status": if ok { "True" } else { "False" },
            "lastProbeTime": null,
            "lastTransitionTime": entry.1,
        });
        if let (false, Some((r, m))) = (ok, reason) {
            c["reason"] = json!(r);
            if !m.is_empty() {
                c["message"] = json!(m);
            }
        }
        c
    }

    fn build_status(&mut self) -> Map<String, Value> {
        let phase = self.phase();
        let sandbox = !matches!(self.stage, Stage::Creating(_));
        let initialized = self.init.iter().all(|c| c.exit_code() == Some(0));
        let unready: Vec<&str> = self
            .main
            .iter()
            .filter(|c| !(c.is_running() && c.ready.load(Ordering::SeqCst)))
            .map(|c| c.name.as_str())
            .collect();
        let incomplete: Vec<&str> = self
            .init
            .iter()
            .filter(|c| c.exit_code() != Some(0))
            .map(|c| c.name.as_str())
            .collect();
        let ready = phase == "Running" && unready.is_empty();
        let ready_reason = match phase {
            "Failed" => ("PodFailed", String::new()),
            "Succeeded" => ("PodCompleted", String::new()),
            _ => (
                "ContainersNotReady",
                format!("containers with unready status: [{}]", unready.join(" ")),
            ),
        };
        let init_reason = (
            "ContainersNotInitialized",
            format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            ),
        );
        let scheduled = self
            .pod
            .at("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type") == Some(&json!("PodScheduled")))
            })
            .cloned()
            .unwrap_or_else(
                || json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null}),
            );
        let conditions = vec![
            self.condition("PodReadyToStartContainers", sandbox, None),
            self.condition("Initialized", initialized, Some(init_reason)),
            self.condition(READY_CONDITION, ready, Some(ready_reason.clone())),
            self.condition("ContainersReady", ready, Some(ready_reason)),
            scheduled,
        ];
        let pending_init = !initialized;
        let mut st = Map::new();
        st.insert("phase".into(), json!(phase));
        st.insert("conditions".into(), Value::Array(conditions));
        st.insert("hostIP".into(), json!(self.k.config.host_ip));
        st.insert("hostIPs".into(), json!([{"ip": self.k.config.host_ip}]));
        if let Some(ip) = &self.pod_ip {
            st.insert("podIP".into(), json!(ip));
            st.insert("podIPs".into(), json!([{"ip": ip}]));
        }
        st.insert("startTime".into(), json!(self.start_time));
        if !self.init.is_empty() {
            st.insert(
                "initContainerStatuses".into(),
                Value::Array(self.init.iter().map(|c| c.status(false)).collect()),
            );
        }
        st.insert(
            "containerStatuses".into(),
            Value::Array(self.main.iter().map(|c| c.status(pending_init)).collect()),
        );
        st
    }

    /// Writes the status if it differs from the stored one (same uid only).
    fn write_status(&mut self) {
        let mine = self.build_status();
        // Compared in place: the worker runs on every store change and most of them leave its
        // pod's status as it is; copying the whole pod to find that out was a top item of the
        // proof's profile.
        let merged =
            self.k
                .cluster
                .inspect(&ResourceRef::pods(), Some(&self.ns), &self.name, |cur| {
                    if s(cur, "/metadata/uid") != Some(self.uid.as_str()) {
                        return None;
                    }
                    let stored = cur.get("status").and_then(Value::as_object);
                    if stored.is_some_and(|st| mine.iter().all(|(k, v)| st.get(k) == Some(v))) {
                        return None;
                    }
                    let mut status = stored.cloned().unwrap_or_default();
                    status.extend(mine);
                    Some(Value::Object(status))
                });
        let Ok(Some(status)) = merged else {
            return;
        };
        let body = json!({"metadata": {"name": self.name, "namespace": self.ns}, "status": status});
        if let Ok(p) =
            self.k
                .cluster
                .update_status(&ResourceRef::pods(), Some(&self.ns), &self.name, body)
        {
            self.pod = p;
        }
    }
}

async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Standard base64 (Secret `data`), None when malformed.
fn base64_decode(text: &str) -> Option<String> {
    const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in text
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'=')
    {
        let v = ALPHA.iter().position(|&a| a == b)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_data_decodes_from_standard_base64() {
        assert_eq!(base64_decode("aGVsbG8=").as_deref(), Some("hello"));
        assert_eq!(base64_decode("a2V5").as_deref(), Some("key"));
        assert_eq!(base64_decode("!!"), None);
    }
}
