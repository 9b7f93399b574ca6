//! The scheduler's part of the kubelet: the node object, one pass over all pods (forget the
//! removed, schedule the unbound, start a worker for each new pod, report deletions), scheduling
//! gates, missing claims, binding and PVC binding.

use kube_emulator::Pointer;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::node::{Cmd, Inner, PodEntry, lock, pvcs, s};
use super::status::Ctr;
use super::worker::{Stage, Worker};
use crate::kube_config::VolumeBinding;
use crate::procs::{PodProcs, PodShared, ProcsHooks};
use kube_emulator::{ListOptions, PatchKind, ResourceRef};

impl Inner {
    /// The node this kubelet plays, with the status a healthy kubelet posts (F12.1): Ready, no
    /// pressure, its address, capacity and versions.
    pub(super) fn register_node(&self) {
        let nodes = ResourceRef::new("", "v1", "nodes");
        let name = &self.config.node_name;
        let pod_cidr = format!("{}0/24", self.config.pod_ip_prefix);
        let created = self.cluster.create(
            &nodes,
            None,
            json!({
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                    "beta.kubernetes.io/arch": "amd64"}},
                "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
            }),
        );
        let Ok(node) = created else {
            return;
        };
        let now = self.cluster.now_rfc3339();
        let cond = |type_: &str, status: &str, reason: &str, message: &str| {
            json!({"type": type_, "status": status, "reason": reason, "message": message,
                   "lastHeartbeatTime": now, "lastTransitionTime": now})
        };
        let resources = json!({"cpu": "8", "memory": "16Gi", "pods": "110",
                               "ephemeral-storage": "100Gi", "hugepages-2Mi": "0"});
        let mut status = Arc::unwrap_or_clone(node);
        status["status"] = json!({
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": self.config.host_ip},
                          {"type": "Hostname", "address": name}],
            "capacity": resources, "allocatable": resources,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "",
                "kernelVersion": "6.8.0", "osImage": "emulated", "containerRuntimeVersion": "containerd://2.0.0",
                "kubeletVersion": "v1.33.0", "kubeProxyVersion": "v1.33.0",
                "operatingSystem": "linux", "architecture": "amd64"},
        });
        let _ = self.cluster.update_status(&nodes, None, name, status);
    }

    /// One pass over all pods: forget removed pods, schedule, start workers, report deletions.
    pub(super) fn sync(self: &Arc<Self>) {
        // Shared with the store: this pass runs on every change to the cluster.
        let Ok((pods, _)) =
            self.cluster
                .list_shared(&ResourceRef::pods(), None, &ListOptions::default())
        else {
            return;
        };
        // Pods whose objects are gone: their programs die with them (first, so a replacement
        // with the same name never sees the old endpoints).
        {
            let present: std::collections::BTreeSet<&str> =
                pods.iter().filter_map(|p| s(p, "/metadata/uid")).collect();
            let mut entries = lock(&self.pods);
            let gone: Vec<String> = entries
                .keys()
                .filter(|u| !present.contains(u.as_str()))
                .cloned()
                .collect();
            for uid in gone {
                if let Some(e) = entries.remove(&uid) {
                    e.shared.kill_all();
                    e.task.abort();
                    self.network.unbind_pod(&e.ns, &e.name);
                }
            }
        }
        if self.config.volume_binding == VolumeBinding::Immediate {
            self.bind_all_claims();
        }
        for pod in &pods {
            let ns = s(pod, "/metadata/namespace").unwrap_or_default();
            let name = s(pod, "/metadata/name").unwrap_or_default();
            let uid = s(pod, "/metadata/uid").unwrap_or_default();
            let deleting = pod.at("/metadata/deletionTimestamp").is_some();
            let node = s(pod, "/spec/nodeName").unwrap_or_default();
            if node.is_empty() {
                if !deleting {
                    self.schedule(pod, ns, name);
                }
                continue;
            }
            if node != self.config.node_name {
                continue;
            }
            let mut entries = lock(&self.pods);
            match entries.get_mut(uid) {
                Some(e) => {
                    let dts = s(pod, "/metadata/deletionTimestamp").map(str::to_string);
                    if dts.is_some() && dts != e.deletion {
                        e.deletion = dts;
                        let _ = e.cmds.send(Cmd::Deleting);
                    }
                }
                None => {
                    let phase = s(pod, "/status/phase").unwrap_or("Pending");
                    if matches!(phase, "Succeeded" | "Failed") {
                        continue;
                    }
                    let e = self.start_worker(Arc::clone(pod));
                    entries.insert(uid.to_string(), e);
                }
            }
        }
    }

    /// The scheduler: gates, missing claims, then `pods/binding` (and WaitForFirstConsumer).
    fn schedule(&self, pod: &Value, ns: &str, name: &str) {
        let gates = pod
            .at("/spec/schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(|g| !g.is_empty());
        if gates {
            self.set_unscheduled(
                pod,
                "SchedulingGated",
                "Scheduling is blocked due to non-empty scheduling gates",
            );
            return;
        }
        let claims = claim_names(pod);
        for c in &claims {
            if self.cluster.get(&pvcs(), Some(ns), c).is_err() {
                self.set_unscheduled(
                    pod,
                    "Unschedulable",
                    &format!("0/1 nodes are available: persistentvolumeclaim \"{c}\" not found."),
                );
                return;
            }
        }
        if self
            .cluster
            .bind_pod(ns, name, &self.config.node_name)
            .is_ok()
        {
            for c in &claims {
                self.bind_claim(ns, c);
            }
        }
    }

    /// `PodScheduled=False` with a reason, written only when it changes.
    fn set_unscheduled(&self, pod: &Value, reason: &str, message: &str) {
        let cur = pod
            .at("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type") == Some(&json!("PodScheduled")))
            });
        if cur.is_some_and(|c| {
            c.get("status") == Some(&json!("False"))
                && c.get("reason") == Some(&json!(reason))
                && c.get("message") == Some(&json!(message))
        }) {
            return;
        }
        let ns = s(pod, "/metadata/namespace").unwrap_or_default();
        let name = s(pod, "/metadata/name").unwrap_or_default();
        let patch = json!({"status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": reason, "message": message,
            "lastProbeTime": null, "lastTransitionTime": self.cluster.now_rfc3339()}]}});
        let _ = self.cluster.patch_status(
            &ResourceRef::pods(),
            Some(ns),
            name,
            PatchKind::Merge,
            &patch,
        );
    }

    fn bind_all_claims(&self) {
        let Ok((claims, _)) = self
            .cluster
            .list_shared(&pvcs(), None, &ListOptions::default())
        else {
            return;
        };
        for c in claims {
            if s(&c, "/status/phase") == Some("Pending") {
                let ns = s(&c, "/metadata/namespace").unwrap_or_default();
                let name = s(&c, "/metadata/name").unwrap_or_default();
                self.bind_claim(ns, name);
            }
        }
    }

    /// Binds a Pending claim to a fresh volume `pvc-<uid>` (what the provisioner and the PV
    /// controller do together): spec `volumeName` and `storageClassName`, status Bound.
    fn bind_claim(&self, ns: &str, name: &str) {
        let Ok(pvc) = self.cluster.get(&pvcs(), Some(ns), name) else {
            return;
        };
        if s(&pvc, "/status/phase") != Some("Pending") {
            return;
        }
        let uid = s(&pvc, "/metadata/uid").unwrap_or_default();
        let mut new = pvc.clone();
        new["spec"]["volumeName"] = json!(format!("pvc-{uid}"));
        if new.at("/spec/storageClassName").is_none() {
            new["spec"]["storageClassName"] = json!(self.config.storage_class);
        }
        let ann = new["metadata"]
            .as_object_mut()
            .expect("metadata")
            .entry("annotations")
            .or_insert_with(|| json!({}));
        ann["pv.kubernetes.io/bind-completed"] = json!("yes");
        ann["pv.kubernetes.io/bound-by-controller"] = json!("yes");
        ann["volume.kubernetes.io/selected-node"] = json!(self.config.node_name);
        let Ok(updated) = self.cluster.update(&pvcs(), Some(ns), name, new) else {
            return;
        };
        let mut status = Arc::unwrap_or_clone(updated);
        status["status"] = json!({
            "phase": "Bound",
            "accessModes": pvc.at("/spec/accessModes").cloned().unwrap_or(json!(["ReadWriteOnce"])),
            "capacity": {"storage": pvc.at("/spec/resources/requests/storage").cloned().unwrap_or(json!("1Gi"))},
        });
        let _ = self.cluster.update_status(&pvcs(), Some(ns), name, status);
    }

    fn start_worker(self: &Arc<Self>, pod: Arc<Value>) -> PodEntry {
        let ns = s(&pod, "/metadata/namespace")
            .unwrap_or_default()
            .to_string();
        let name = s(&pod, "/metadata/name").unwrap_or_default().to_string();
        let (exits_tx, exits_rx) = mpsc::unbounded_channel();
        let (cmds_tx, cmds_rx) = mpsc::unbounded_channel();
        let containers = |list: &str| -> Vec<Value> {
            pod.at(&format!("/spec/{list}"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let shared = Arc::new(PodShared {
            procs: Mutex::default(),
            exits: exits_tx,
            info: PodProcs::of(&pod, self.next_pid.fetch_add(1, Ordering::SeqCst)),
        });
        self.cluster.set_pod_hooks(
            &ns,
            &name,
            Arc::new(ProcsHooks::new(
                self.cluster.downgrade(),
                Arc::downgrade(self) as Weak<Inner>,
                Arc::downgrade(&shared),
            )),
        );
        let mk = |c: &Value, init: bool| Ctr::new(c, init, &self.programs);
        let worker = Worker {
            k: self.clone(),
            ns: ns.clone(),
            name: name.clone(),
            uid: s(&pod, "/metadata/uid").unwrap_or_default().to_string(),
            restart_policy: s(&pod, "/spec/restartPolicy")
                .unwrap_or("Always")
                .to_string(),
            init: containers("initContainers")
                .iter()
                .map(|c| mk(c, true))
                .collect(),
            main: containers("containers")
                .iter()
                .map(|c| mk(c, false))
                .collect(),
            pod,
            shared: shared.clone(),
            exits: exits_rx,
            cmds: cmds_rx,
            ready_changed: Arc::new(Notify::new()),
            stage: Stage::Creating(Instant::now() + self.config.pod_start_delay),
            pod_ip: None,
            start_time: self.cluster.now_rfc3339(),
            deadline: None,
            transitions: BTreeMap::new(),
            runs: 0,
            mount_failures: 0,
        };
        let task = tokio::spawn(worker.run());
        PodEntry {
            ns,
            name,
            cmds: cmds_tx,
            shared,
            task,
            deletion: None,
        }
    }
}

/// The claim names of a pod's PVC volumes.
pub(crate) fn claim_names(pod: &Value) -> Vec<String> {
    pod.at("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| s(v, "/persistentVolumeClaim/claimName").map(String::from))
        .collect()
}
