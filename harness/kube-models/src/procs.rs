//! Processes as the kernel shows them to `kubectl exec`: the `/proc` an exec reads and the
//! signals its `kill` sends, per PID namespace as Kubernetes sets them up.
//!
//! - Every pod has a pause process (`/pause`, the pod sandbox) and every container run is one
//!   process; each has a host PID, unique on the node and new for every run.
//! - Without `shareProcessNamespace` a container sees only its own process, as PID 1.
//! - With it, PID 1 is the pause process and every container's process is visible, numbered
//!   in the order they started (restarts get new numbers), as in one shared namespace.
//! - With `hostPID: true` a pod sees every process on the node by its host PID.
//!
//! `/proc/<pid>/` holds `cmdline` (argv, each followed by NUL), `environ` (`K=V`, each followed
//! by NUL), `comm` and `cgroup`: the cgroup v2 line `0::<path>` with the path relative to the
//! reader's own cgroup (containerd gives every container a private cgroup namespace, so a
//! process sees `0::/` for itself and `..` steps to others), where a container's cgroup is the
//! kubelet's systemd layout `/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid with
//! _>.slice/cri-containerd-<id>.scope`, `<id>` being `containerStatuses[].containerID` after
//! `containerd://` (docs/upstream-facts.md F10.8).
//!
//! Signals (docs/upstream-facts.md F10.5): the kernel drops signals sent from inside a PID
//! namespace to that namespace's init unless the init handles them, and SIGKILL and SIGSTOP
//! cannot be handled. So `kill -KILL 1` in a container of its own succeeds and does nothing,
//! while other signals to it reach the program (the models handle SIGTERM; a real program
//! that installs no handler would not see it). From the host PID namespace, or to a
//! container's process in a shared namespace, SIGKILL kills it (the container exits 137 and
//! the pod's `restartPolicy` applies). `kill -0` checks that the process runs. Signals to the
//! pause process are not modelled: it keeps running.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::program::Signal;
use kube_emulator::WeakCluster;
use kube_emulator::shell::{KillError, ShellHooks, Volume};

/// A running container program, as the pod worker and its signal senders know it.
pub(crate) struct Proc {
    pub run: u64,
    pub signals: kube_emulator::sync::watch::Sender<Option<Signal>>,
    pub task: AbortHandle,
    pub(crate) host_pid: u32,
    /// Its PID in the pod's shared PID namespace (unused without one).
    pub(crate) ns_pid: u32,
    pub cmdline: Vec<String>,
    pub(crate) environ: Vec<(String, String)>,
    /// `containerd://<id>`, as the pod status reports it.
    pub container_id: String,
}

/// A pod's PID namespace and cgroup parent.
pub struct PodProcs {
    share: bool,
    host_pid: bool,
    /// The pod's cgroup (`/kubepods.slice/…/kubepods-<qos>-pod<uid>.slice`).
    cgroup: String,
    uid: String,
    pause_pid: u32,
    next_ns_pid: AtomicU32,
}

/// The pod's QoS class as the kubelet derives it from resources (its cgroup slice): no
/// requests or limits anywhere is BestEffort; CPU and memory limits on every container with
/// equal requests (or none) is Guaranteed; anything else is Burstable.
fn qos(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| pod.pointer(&format!("/spec/{l}")).and_then(Value::as_array))
        .flatten()
        .collect();
    let res = |c: &Value, kind: &str, r: &str| {
        c.pointer(&format!("/resources/{kind}/{r}"))
            .map(|v| v.to_string())
    };
    let any = containers.iter().any(|c| {
        ["requests", "limits"].iter().any(|k| {
            c.pointer(&format!("/resources/{k}"))
                .is_some_and(|v| v.as_object().is_some_and(|o| !o.is_empty()))
        })
    });
    if !any {
        return "besteffort";
    }
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let limit = res(c, "limits", r);
            limit.is_some() && res(c, "requests", r).is_none_or(|q| Some(q) == limit)
        })
    });
    if guaranteed {
        "guaranteed"
    } else {
        "burstable"
    }
}

impl PodProcs {
    pub fn of(pod: &Value, pause_pid: u32) -> Self {
        let flag = |ptr: &str| pod.pointer(ptr).and_then(Value::as_bool).unwrap_or(false);
        let uid = pod
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let unit = uid.replace('-', "_");
        let cgroup = match qos(pod) {
            "guaranteed" => format!("/kubepods.slice/kubepods-pod{unit}.slice"),
            q => format!("/kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{unit}.slice"),
        };
        Self {
            share: flag("/spec/shareProcessNamespace"),
            host_pid: flag("/spec/hostPID"),
            cgroup,
            uid,
            pause_pid,
            // The pause process is PID 1 of a shared namespace.
            next_ns_pid: AtomicU32::new(2),
        }
    }

    pub(crate) fn next_ns_pid(&self) -> u32 {
        self.next_ns_pid.fetch_add(1, Ordering::SeqCst)
    }

    fn container_cgroup(&self, container_id: &str) -> String {
        let id = container_id
            .split_once("://")
            .map_or(container_id, |(_, id)| id);
        format!("{}/cri-containerd-{id}.scope", self.cgroup)
    }

    /// The pod sandbox's (pause) container ID, stable for the pod.
    fn pause_cgroup(&self) -> String {
        let h = self.uid.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!(
            "{}/cri-containerd-{h:016x}{h:016x}{h:016x}{h:016x}.scope",
            self.cgroup
        )
    }
}

/// A cgroup path as a reader in cgroup `reader` sees it (relative to its namespace's root).
fn cgroup_line(reader: &str, target: &str) -> String {
    let r: Vec<&str> = reader.split('/').filter(|c| !c.is_empty()).collect();
    let t: Vec<&str> = target.split('/').filter(|c| !c.is_empty()).collect();
    let common = r.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut parts = vec![".."; r.len() - common];
    parts.extend(&t[common..]);
    format!("0::/{}\n", parts.join("/"))
}

/// The pods of the node (the kubelet), as a `hostPID` pod sees them.
pub(crate) trait NodePods: Send + Sync {
    /// Every pod the kubelet runs now.
    fn all_pods(&self) -> Vec<Arc<PodShared>>;
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a pod's worker shares with signal senders (the handle, shell hooks).
pub struct PodShared {
    pub(crate) procs: Mutex<BTreeMap<String, Proc>>,
    pub exits: mpsc::UnboundedSender<Exit>,
    /// The pod's PID namespace and cgroups.
    pub info: PodProcs,
}

pub struct Exit {
    pub container: String,
    pub run: u64,
    pub code: i32,
}

impl PodShared {
    /// Delivers `sig` to the process with host PID `host_pid`, if it still runs as container
    /// `container` (not a later run of it).
    pub(crate) fn deliver_to(&self, container: &str, host_pid: u32, sig: Signal) -> bool {
        if lock(&self.procs)
            .get(container)
            .is_none_or(|p| p.host_pid != host_pid)
        {
            return false;
        }
        self.deliver(container, sig)
    }

    pub(crate) fn deliver(&self, container: &str, sig: Signal) -> bool {
        let mut procs = lock(&self.procs);
        match sig {
            Signal::Term => procs
                .get(container)
                .map(|p| p.signals.send_replace(Some(Signal::Term)))
                .is_some(),
            Signal::Kill => match procs.remove(container) {
                Some(p) => {
                    p.signals.send_replace(Some(Signal::Kill));
                    p.task.abort();
                    let _ = self.exits.send(Exit {
                        container: container.to_string(),
                        run: p.run,
                        code: Signal::Kill.exit_code(),
                    });
                    true
                }
                None => false,
            },
        }
    }

    pub(crate) fn kill_all(&self) {
        for (_, p) in std::mem::take(&mut *lock(&self.procs)) {
            p.task.abort();
        }
    }
}

/// What a PID in an exec's view is.
enum Target {
    Pause,
    Container {
        pod: Arc<PodShared>,
        container: String,
        host_pid: u32,
    },
}

/// One process in an exec's view.
struct Seen {
    pid: u32,
    cmdline: Vec<String>,
    environ: Vec<(String, String)>,
    cgroup: String,
    target: Target,
}

fn seen_pause(pod: &PodShared, pid: u32) -> Seen {
    Seen {
        pid,
        cmdline: vec!["/pause".into()],
        environ: Vec::new(),
        cgroup: pod.info.pause_cgroup(),
        target: Target::Pause,
    }
}

fn seen_procs(pod: &Arc<PodShared>, host: bool) -> Vec<Seen> {
    let procs = pod.procs.lock().unwrap_or_else(|p| p.into_inner());
    procs
        .iter()
        .map(|(name, p)| Seen {
            pid: if host { p.host_pid } else { p.ns_pid },
            cmdline: p.cmdline.clone(),
            environ: p.environ.clone(),
            cgroup: pod.info.container_cgroup(&p.container_id),
            target: Target::Container {
                pod: pod.clone(),
                container: name.clone(),
                host_pid: p.host_pid,
            },
        })
        .collect()
}

/// The pod's shell hooks: the clock, and `/proc` and `kill` for an exec into one container.
pub(crate) struct ProcsHooks {
    /// Weak: the cluster holds the hooks.
    cluster: WeakCluster,
    kubelet: Weak<dyn NodePods>,
    pod: Weak<PodShared>,
    container: Option<String>,
}

impl ProcsHooks {
    pub(crate) fn new(
        cluster: WeakCluster,
        kubelet: Weak<dyn NodePods>,
        pod: Weak<PodShared>,
    ) -> Self {
        Self {
            cluster,
            kubelet,
            pod,
            container: None,
        }
    }

    /// The exec's cgroup: its container's, or the pod's when it is not running.
    fn own_cgroup(&self, pod: &PodShared) -> String {
        let procs = pod.procs.lock().unwrap_or_else(|p| p.into_inner());
        self.container
            .as_ref()
            .and_then(|c| procs.get(c))
            .map_or(pod.info.cgroup.clone(), |p| {
                pod.info.container_cgroup(&p.container_id)
            })
    }

    /// The processes this exec's PID namespace holds, by the PIDs it sees.
    fn view(&self) -> Vec<Seen> {
        let Some(pod) = self.pod.upgrade() else {
            return Vec::new();
        };
        let mut seen = if pod.info.host_pid {
            let pods = self
                .kubelet
                .upgrade()
                .map(|k| k.all_pods())
                .unwrap_or_default();
            let mut all = Vec::new();
            for p in &pods {
                all.push(seen_pause(p, p.info.pause_pid));
                all.extend(seen_procs(p, true));
            }
            all
        } else if pod.info.share {
            let mut all = vec![seen_pause(&pod, 1)];
            all.extend(seen_procs(&pod, false));
            all
        } else {
            seen_procs(&pod, false)
                .into_iter()
                .filter(|s| {
                    matches!(&s.target, Target::Container { container, .. }
                        if Some(container) == self.container.as_ref())
                })
                .map(|s| Seen { pid: 1, ..s })
                .collect()
        };
        seen.sort_by_key(|s| s.pid);
        seen
    }
}

fn nul_joined<I: IntoIterator<Item = String>>(items: I) -> Vec<u8> {
    let mut out = Vec::new();
    for i in items {
        out.extend_from_slice(i.as_bytes());
        out.push(0);
    }
    out
}

impl ShellHooks for ProcsHooks {
    fn now_unix(&self) -> u64 {
        // Only a shell in this cluster asks, so the cluster is there.
        self.cluster.upgrade().map_or(0, |c| c.now_unix())
    }

    fn kill(&self, pid: &str, signal: &str) -> Result<(), KillError> {
        let no_such = || KillError::NoSuchProcess {
            pid: pid.to_string(),
        };
        let n: u32 = pid.parse().map_err(|_| no_such())?;
        let pod = self.pod.upgrade().ok_or_else(no_such)?;
        let seen = self
            .view()
            .into_iter()
            .find(|s| s.pid == n)
            .ok_or_else(no_such)?;
        // The namespace's init, seen from inside: SIGKILL and SIGSTOP are dropped (F10.5).
        let init = n == 1 && !pod.info.host_pid;
        let uncatchable = matches!(signal, "KILL" | "9" | "STOP" | "19");
        match seen.target {
            Target::Pause => Ok(()),
            Target::Container {
                pod,
                container,
                host_pid,
            } => {
                let delivered = match signal {
                    "0" => pod
                        .procs
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(&container)
                        .is_some_and(|p| p.host_pid == host_pid),
                    _ if init && uncatchable => return Ok(()),
                    "KILL" | "9" => pod.deliver_to(&container, host_pid, Signal::Kill),
                    _ => pod.deliver_to(&container, host_pid, Signal::Term),
                };
                if delivered { Ok(()) } else { Err(no_such()) }
            }
        }
    }

    fn for_container(&self, container: &str) -> Option<Arc<dyn ShellHooks>> {
        Some(Arc::new(ProcsHooks {
            cluster: self.cluster.clone(),
            kubelet: self.kubelet.clone(),
            pod: self.pod.clone(),
            container: Some(container.to_string()),
        }))
    }

    fn procfs(&self) -> Option<Volume> {
        let pod = self.pod.upgrade()?;
        let own = self.own_cgroup(&pod);
        let vol = Volume::new();
        for s in self.view() {
            let comm = s
                .cmdline
                .first()
                .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
                .unwrap_or_default();
            vol.write(&format!("/{}/cmdline", s.pid), &nul_joined(s.cmdline));
            vol.write(
                &format!("/{}/environ", s.pid),
                &nul_joined(s.environ.into_iter().map(|(k, v)| format!("{k}={v}"))),
            );
            vol.write(&format!("/{}/comm", s.pid), format!("{comm}\n").as_bytes());
            vol.write(
                &format!("/{}/cgroup", s.pid),
                cgroup_line(&own, &s.cgroup).as_bytes(),
            );
        }
        Some(vol)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rstest::rstest]
    #[case::itself("/a/b/c", "/a/b/c", "0::/\n")]
    #[case::a_sibling("/a/b/c", "/a/b/d", "0::/../d\n")]
    #[case::another_pod("/k/q/p1/c1", "/k/q/p2/c2", "0::/../../p2/c2\n")]
    fn a_cgroup_is_shown_relative_to_the_readers_own(
        #[case] reader: &str,
        #[case] target: &str,
        #[case] want: &str,
    ) {
        assert_eq!(cgroup_line(reader, target), want);
    }

    #[test]
    fn the_qos_class_names_the_pods_cgroup_slice() {
        let pod = |res: Value| {
            serde_json::json!({"metadata": {"uid": "a-b"},
                "spec": {"containers": [{"name": "c", "resources": res}]}})
        };
        let best = PodProcs::of(&pod(serde_json::json!({})), 1000);
        assert_eq!(
            best.container_cgroup("containerd://abc"),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poda_b.slice/cri-containerd-abc.scope"
        );
        let burst = PodProcs::of(&pod(serde_json::json!({"requests": {"cpu": "1"}})), 1000);
        assert!(
            burst.cgroup.contains("kubepods-burstable-poda_b.slice"),
            "{}",
            burst.cgroup
        );
        let g = PodProcs::of(
            &pod(serde_json::json!({"limits": {"cpu": "1", "memory": "1Gi"}})),
            1000,
        );
        assert_eq!(g.cgroup, "/kubepods.slice/kubepods-poda_b.slice");
    }
}
