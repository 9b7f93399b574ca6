//! Containers whose images map to local binaries run as Linux processes (the real OpenShell
//! gateway and supervisor on the served cluster). The kubelet model starts them like any
//! other [`ContainerProgram`]; this program gives each one what a container runtime would:
//! the image's files over the host's base system, its volumes as host directories, the pod's
//! network namespace on the node's bridge, `/etc/hosts` naming the cluster's Services, the
//! API server (a kubeconfig, see below), readiness from its probe, its output as the
//! container log, `kubectl exec` and port-forward into it, and signals on stop and delete.
//!
//! Emulation gaps, on purpose: the API server is plain HTTP without credentials on the node's
//! address, which only the node's own network namespace reaches (no other user's process can
//! connect, unlike the loopback API the harness uses, which requires a token), and each
//! process gets `KUBECONFIG` naming it (no in-cluster TLS: the in-cluster variables name the
//! node's address, but no CA file is mounted, so kube-rs clients fall back to the
//! kubeconfig); there is no DNS server, names
//! resolve through `/etc/hosts`; exec probes, resource limits, capabilities and seccomp
//! profiles of the pod spec are not applied; the primary group is `runAsGroup`, else the
//! pod's `fsGroup`; projected ServiceAccount tokens are written when a container starts and
//! not rotated, and no ServiceAccount admission adds volumes the spec does not name.
//!
//! There is no user namespace: every non-zero uid and gid a pod names (its security context,
//! its `fsGroup`, the ids an image's program is told to switch to) is offset into a range of
//! host ids that no user of this machine holds (`ids`), so no other local user can read a
//! pod's processes through `/proc`; root stays root.
//!
//! A pod with `shareProcessNamespace` gets one PID namespace for its containers, held by a
//! pause process (OpenShell's sidecar supervisor checks its peer's PID across containers,
//! F12.12). Without cgroups, the processes a container started there outlive it until the pod
//! ends.

mod ids;
mod images;
mod probe;
mod proxy;
mod volumes;

pub use images::{GATEWAY_BINARY, HostImage, HostImages, ImagesError, SUPERVISOR_BINARY};

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use conformance_node::net::{NodeNetwork, PodNetwork};
use conformance_node::process::{
    self as node_process, Bind, ContainerSpec, PodPidNs, Process, Stdio,
};
use kube_emulator::{Cluster, ExecOutput, ExecRequest, Pointer, ResourceRef};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::task::JoinHandle;

use conformance_kube_models::program::{ContainerCtx, ContainerProgram};

/// The node's address on its bridge; pods get `10.244.0.n` (the kubelet's pod IP prefix).
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
/// The port the API server listens on for pods, at [`NODE_IP`].
pub const POD_API_PORT: u16 = 6443;
/// The start of the name of a node's state directory, under the system's temporary directory:
/// this prefix, the process id, `-`, a random part.
pub const STATE_DIR_PREFIX: &str = "openshell-conformance-node-";
/// Where a process container finds the kubeconfig that names the API server.
const KUBECONFIG_PATH: &str = "/var/run/kube-emulator/kubeconfig";
/// The host directories that form every image's base system (those that exist).
const BASE: [&str; 7] = ["/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/etc"];
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{0}")]
    Node(#[from] conformance_node::NodeError),
    #[error("{0}")]
    Images(#[from] ImagesError),
    #[error("{0}")]
    Io(String),
}

/// What runs process containers for one served cluster: the node's network namespace, a
/// state directory (layers, volumes, claims) removed with it, and the image table.
#[derive(Clone)]
pub struct HostRuntime {
    inner: Arc<Inner>,
}

struct Inner {
    node: NodeNetwork,
    state: tempfile::TempDir,
    images: HostImages,
    /// The host ids of the pods' users.
    ids: ids::IdOffset,
    /// What a pod's containers share, by pod uid, for the pod's lifetime.
    pods: Mutex<BTreeMap<String, PodShared>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Requests from pods the API server could not serve (see [`HostRuntime::unserved`]).
    unserved: Arc<Mutex<Vec<String>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
    }
}

impl HostRuntime {
    /// A node for `images`; fails with the reason when this machine cannot run containers as
    /// processes (see [`conformance_node::unsupported`]).
    pub fn start(images: HostImages) -> Result<Self, HostError> {
        if let Some(why) = conformance_node::unsupported() {
            return Err(conformance_node::NodeError::Unsupported(why).into());
        }
        let ids = ids::IdOffset::pick().map_err(HostError::Io)?;
        let node = NodeNetwork::create(NODE_IP, 24)?;
        // It holds the pods' Secrets and ServiceAccount tokens: only this user may enter it
        // (the default would be 0755 under the system's temporary directory).
        // Named with this process's id, so a later run can tell the directory of a killed one.
        let state = tempfile::Builder::new()
            .prefix(&format!("{STATE_DIR_PREFIX}{}-", std::process::id()))
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir()
            .map_err(|e| HostError::Io(format!("cannot create the node's state directory: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                node,
                state,
                images,
                ids,
                pods: Mutex::default(),
                tasks: Mutex::default(),
                unserved: Arc::default(),
            }),
        })
    }

    /// Refuses `topology` when its sandbox pods would run an image whose programs this machine
    /// lacks: a sidecar supervisor runs the supervisor image, whose network-init needs `nft`
    /// (F12.12), and process containers take such programs from the host's base system.
    pub fn check_topology(
        &self,
        topology: &conformance_core::topology::Topology,
    ) -> Result<(), HostError> {
        use conformance_core::topology::SupervisorPlacement;
        if !matches!(
            topology.supervisor,
            SupervisorPlacement::SidecarContainer { .. }
        ) {
            return Ok(());
        }
        let missing = self
            .images()
            .missing_host_programs(crate::model::SUPERVISOR_IMAGE_REPO);
        if missing.is_empty() {
            return Ok(());
        }
        Err(conformance_node::NodeError::Unsupported(format!(
            "topology {}: the supervisor image's programs come from this machine's base system, \
             which lacks {}; install it",
            topology.name,
            missing.join(", ")
        ))
        .into())
    }

    pub fn images(&self) -> &HostImages {
        &self.inner.images
    }

    fn state(&self) -> &Path {
        self.inner.state.path()
    }

    /// Serves `cluster`'s API to pods at [`NODE_IP`]:[`POD_API_PORT`] and its Services'
    /// ClusterIPs, until the runtime is dropped.
    pub fn attach(&self, cluster: &Cluster) -> Result<(), HostError> {
        let addr = SocketAddr::from((NODE_IP, POD_API_PORT));
        let listener = self.inner.node.listen(addr)?;
        let kubeconfig = self.state().join("kubeconfig");
        std::fs::write(&kubeconfig, kube_emulator::serve::node_kubeconfig(addr))
            .map_err(|e| HostError::Io(format!("cannot write {}: {e}", kubeconfig.display())))?;
        let unserved = self.inner.unserved.clone();
        let router = cluster.router().layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let unserved = unserved.clone();
                async move {
                    let what = format!("{} {}", req.method(), req.uri());
                    let resp = next.run(req).await;
                    unserved_request(&unserved, &what, resp).await
                }
            },
        ));
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::warn!("the API server for pods stopped: {e}");
            }
        });
        let proxy = proxy::start(cluster, self.inner.node.clone());
        lock(&self.inner.tasks).extend([server, proxy]);
        Ok(())
    }

    /// The requests from pods (the real gateway, certgen, supervisors) that the API server
    /// could not serve: an unknown path or resource, a method it does not allow, or a server
    /// error. Each is a fidelity bug of the emulated cluster; answers about objects (404 of a
    /// missing object, 409, 422) are the API's and not counted.
    pub fn unserved(&self) -> Vec<String> {
        lock(&self.inner.unserved).clone()
    }

    /// The program for the runtime's images, to register for each of their repositories.
    pub(crate) fn program(&self) -> Arc<HostProgram> {
        Arc::new(HostProgram {
            rt: self.clone(),
            pending: Mutex::default(),
        })
    }

    /// The pod's network namespace and, with `shareProcessNamespace`, its PID namespace,
    /// made by its first container.
    fn pod_shared(&self, uid: &str, ip: &str, share_pids: bool) -> Result<PodShared, HostError> {
        let mut pods = lock(&self.inner.pods);
        if let Some(p) = pods.get(uid) {
            return Ok(p.clone());
        }
        let ip: Ipv4Addr = ip
            .parse()
            .map_err(|_| HostError::Io(format!("pod IP {ip:?} is not an IPv4 address")))?;
        let shared = PodShared {
            net: Arc::new(self.inner.node.add_pod(ip)?),
            pids: share_pids
                .then(|| PodPidNs::create().map(Arc::new))
                .transpose()?,
        };
        pods.insert(uid.to_string(), shared.clone());
        Ok(shared)
    }
}

/// What a pod's containers share: its network namespace and, with `shareProcessNamespace`, its
/// PID namespace (held by a pause process, as on a real node).
#[derive(Clone)]
struct PodShared {
    net: Arc<PodNetwork>,
    pids: Option<Arc<PodPidNs>>,
}

/// Records `what` in `unserved` when the response says the API server could not serve it
/// (see [`HostRuntime::unserved`]); passes the response on unchanged.
async fn unserved_request(
    unserved: &Mutex<Vec<String>>,
    what: &str,
    resp: axum::response::Response,
) -> axum::response::Response {
    let status = resp.status().as_u16();
    if !matches!(status, 404 | 405 | 415 | 500..=599) {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    // A 404 about a named object is an answer; one about the path is a gap.
    let gap = status != 404 || {
        let text = String::from_utf8_lossy(&bytes);
        text.contains("the server could not find the requested resource")
            || !text.contains("\"reason\":\"NotFound\"")
    };
    if gap {
        let line = format!(
            "{what} -> {status}: {}",
            String::from_utf8_lossy(&bytes)
                .chars()
                .take(200)
                .collect::<String>()
        );
        tracing::warn!("a pod's API request was not served: {line}");
        lock(unserved).push(line);
    }
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// Runs a container of a runtime image as a process.
pub(crate) struct HostProgram {
    rt: HostRuntime,
    /// Exec slots set up by `on_start`, by (pod uid, container, restart count), until `run`
    /// takes them.
    pending: Mutex<BTreeMap<(String, String, u32), ExecSlotSender>>,
}

/// Removes a container's exec handler when its run ends, also when the kubelet drops the run.
struct ExecRegistration {
    cluster: Cluster,
    key: (String, String, String),
}

impl Drop for ExecRegistration {
    fn drop(&mut self) {
        let (ns, pod, container) = &self.key;
        self.cluster.unregister_exec(ns, pod, container);
    }
}

fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    v.and_then(Value::as_array).map(|a| {
        a.iter()
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    })
}

fn id(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

/// `uid:gid` from the container's, else the pod's, security context; the primary group is
/// `runAsGroup`, else the pod's `fsGroup` so that the process can write its volumes.
fn user(pod: &Value, container: &Value) -> Option<(u32, u32)> {
    let pick = |f: &str| {
        id(container.at(&format!("/securityContext/{f}")))
            .or_else(|| id(pod.at(&format!("/spec/securityContext/{f}"))))
    };
    let uid = pick("runAsUser")?;
    let gid = pick("runAsGroup")
        .or_else(|| id(pod.at("/spec/securityContext/fsGroup")))
        .unwrap_or(0);
    Some((uid, gid))
}

fn write(path: &Path, text: &str) -> Result<PathBuf, String> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path.to_path_buf())
}

/// The host's `/etc/<file>` with `line` added unless an entry of that name exists.
fn with_entry(file: &str, name: &str, line: &str) -> String {
    let mut text = std::fs::read_to_string(Path::new("/etc").join(file)).unwrap_or_default();
    if !text.lines().any(|l| l.split(':').next() == Some(name)) {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// The image's `sandbox` user, with its host uid and gid `u`.
fn sandbox_passwd(u: u32) -> String {
    format!("sandbox:x:{u}:{u}:sandbox:/sandbox:/bin/bash")
}

/// The home directory of `uid` in a passwd file, else `/`.
fn home(passwd: &str, uid: u32) -> String {
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 6 && f[2].parse() == Ok(uid))
        .map_or_else(|| "/".to_string(), |f| f[5].to_string())
}

impl HostProgram {
    /// Everything the process needs, or why the container cannot be created.
    fn prepare(&self, ctx: &ContainerCtx) -> Result<(ContainerSpec, Arc<PodNetwork>), String> {
        let rt = &self.rt;
        let image = rt.images().get(&ctx.image).cloned().unwrap_or_default();
        let pod = ctx
            .cluster
            .get(&ResourceRef::pods(), Some(&ctx.namespace), &ctx.pod)
            .map_err(|e| format!("pod {}/{}: {e}", ctx.namespace, ctx.pod))?;
        let ids = rt.inner.ids;
        let argv = ids.argv(
            &image,
            images::argv(
                &image,
                strings(ctx.spec.get("command")),
                strings(ctx.spec.get("args")),
            ),
        )?;
        if argv.is_empty() {
            return Err("no command specified".into());
        }
        let ip = ctx.pod_ip.as_deref().ok_or("the pod has no IP yet")?;
        let share_pids = pod
            .at("/spec/shareProcessNamespace")
            .and_then(Value::as_bool)
            == Some(true);
        let shared = rt
            .pod_shared(&ctx.pod_uid, ip, share_pids)
            .map_err(|e| e.to_string())?;
        let net = shared.net.clone();
        let etc = rt
            .state()
            .join("pods")
            .join(&ctx.pod_uid)
            .join("etc")
            .join(&ctx.container);
        let mut binds: Vec<Bind> = image
            .files
            .iter()
            .map(|(target, host)| Bind {
                host: host.clone(),
                target: target.into(),
                read_only: true,
            })
            .collect();
        let mut file =
            |name: &str, target: &str, text: &str, read_only: bool| -> Result<(), String> {
                binds.push(Bind {
                    host: write(&etc.join(name), text)?,
                    target: target.into(),
                    read_only,
                });
                Ok(())
            };
        file(
            "hosts",
            "/etc/hosts",
            &proxy::hosts(&ctx.cluster, &ctx.namespace, &ctx.pod, Some(ip)),
            false,
        )?;
        file(
            "hostname",
            "/etc/hostname",
            &format!("{}\n", ctx.pod),
            false,
        )?;
        file(
            "resolv.conf",
            "/etc/resolv.conf",
            &proxy::resolv_conf(&ctx.namespace),
            false,
        )?;
        let kubeconfig = rt.state().join("kubeconfig");
        let kubeconfig = std::fs::read_to_string(&kubeconfig).unwrap_or_default();
        file("kubeconfig", KUBECONFIG_PATH, &kubeconfig, true)?;
        let sandbox_id = ids.host(images::SANDBOX_UID, "the sandbox user")?;
        if image.sandbox_user {
            let u = sandbox_id;
            // Writable, as in an image's layer: the supervisor rewrites /etc/passwd.
            file(
                "passwd",
                "/etc/passwd",
                &with_entry("passwd", "sandbox", &sandbox_passwd(u)),
                false,
            )?;
            file(
                "group",
                "/etc/group",
                &with_entry("group", "sandbox", &format!("sandbox:x:{u}:")),
                false,
            )?;
        }
        binds.extend(volumes::binds(
            &ctx.cluster,
            rt.state(),
            &pod,
            &ctx.spec,
            &ids,
        )?);
        let mut env: Vec<(String, String)> = ctx
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !ctx.env.contains_key("PATH") {
            env.push(("PATH".into(), DEFAULT_PATH.into()));
        }
        env.push(("HOSTNAME".into(), ctx.pod.clone()));
        let user = match user(&pod, &ctx.spec) {
            Some((uid, gid)) => Some((
                ids.host(uid, "runAsUser")?,
                ids.host(gid, "runAsGroup (else fsGroup)")?,
            )),
            None => None,
        };
        if !ctx.env.contains_key("HOME") {
            // As runc does: the user's home from the image's passwd, else `/`.
            let passwd = if image.sandbox_user {
                with_entry("passwd", "sandbox", &sandbox_passwd(sandbox_id))
            } else {
                std::fs::read_to_string("/etc/passwd").unwrap_or_default()
            };
            env.push(("HOME".into(), home(&passwd, user.map_or(0, |u| u.0))));
        }
        env.push(("KUBECONFIG".into(), KUBECONFIG_PATH.into()));
        // Every kubelet sets these (the `kubernetes` Service); OpenShell's gateway detects its
        // Kubernetes driver by them (F12.12). Without the in-cluster CA file, kube-rs clients
        // then take the kubeconfig.
        env.push(("KUBERNETES_SERVICE_HOST".into(), NODE_IP.to_string()));
        env.push(("KUBERNETES_SERVICE_PORT".into(), POD_API_PORT.to_string()));
        let layer = rt
            .state()
            .join("pods")
            .join(&ctx.pod_uid)
            .join("layers")
            .join(format!("{}-{}", ctx.container, ctx.restart_count));
        std::fs::create_dir_all(&layer)
            .map_err(|e| format!("cannot create {}: {e}", layer.display()))?;
        let spec = ContainerSpec {
            argv,
            env: ids.env(&image, env)?,
            workdir: ctx
                .spec
                .get("workingDir")
                .and_then(Value::as_str)
                .map(String::from)
                .or(image.workdir.clone())
                .map(PathBuf::from),
            hostname: Some(ctx.pod.clone()),
            layer,
            base: BASE
                .iter()
                .map(PathBuf::from)
                .filter(|p| p.exists())
                .collect(),
            binds,
            netns: Some(net.netns()),
            pid_ns: shared.pids,
            user,
        };
        Ok((spec, net))
    }
}

/// Copies a process's output into the container log, line by line.
fn follow_log<R>(ctx: &ContainerCtx, stream: Option<R>) -> Option<JoinHandle<()>>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    let stream = stream?;
    let cluster = ctx.cluster.clone();
    let (ns, pod, container) = (
        ctx.namespace.clone(),
        ctx.pod.clone(),
        ctx.container.clone(),
    );
    Some(tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            cluster.append_log(&ns, &pod, &container, &line);
        }
    }))
}

/// What an exec handler waits for: the container's process and its environment.
type ExecSlot = kube_emulator::sync::watch::Receiver<
    Option<(Arc<node_process::ExecTarget>, Vec<(String, String)>)>,
>;
type ExecSlotSender = kube_emulator::sync::watch::Sender<
    Option<(Arc<node_process::ExecTarget>, Vec<(String, String)>)>,
>;

/// How long an exec waits for its container's process to have started: the kubelet reports a
/// container running as it starts it, and a client may exec at once.
const EXEC_START_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

fn exec_failed(message: String) -> ExecOutput {
    ExecOutput {
        stdout: vec![],
        stderr: format!("OCI runtime exec failed: {message}\n").into_bytes(),
        exit_code: 126,
    }
}

/// `kubectl exec` into a process container: another process in its namespaces, once the
/// container's process has started (`target` holds it then).
fn exec_handler(target: ExecSlot) -> impl kube_emulator::ExecHandler {
    move |req: ExecRequest| {
        let mut target = target.clone();
        async move {
            let started = tokio::time::timeout(EXEC_START_DEADLINE, async {
                target.wait_for(Option::is_some).await.map(|t| t.clone())
            })
            .await;
            let (target, env) = match started {
                Ok(Ok(Some(t))) => t,
                Ok(Ok(None)) => return exec_failed("the container has not started".into()),
                Ok(Err(_)) => return exec_failed("the container has stopped".into()),
                Err(_) => {
                    return exec_failed(format!(
                        "the container's process had not started after {EXEC_START_DEADLINE:?}"
                    ));
                }
            };
            let workdir = Some(PathBuf::from(&req.workdir)).filter(|w| w != Path::new("/"));
            let mut p = match target.exec(&req.argv, &env, workdir.as_deref(), Stdio::Interactive) {
                Ok(p) => p,
                Err(e) => return exec_failed(e.to_string()),
            };
            if let Some(mut stdin) = p.stdin.take() {
                let data = req.stdin.clone();
                tokio::spawn(async move {
                    let _ = stdin.write_all(&data).await;
                });
            }
            let read = |s: Option<tokio::net::unix::pipe::Receiver>| async move {
                let mut buf = vec![];
                if let Some(mut s) = s {
                    let _ = s.read_to_end(&mut buf).await;
                }
                buf
            };
            let (stdout, stderr) = tokio::join!(read(p.stdout.take()), read(p.stderr.take()));
            let exit_code = p.wait().await;
            ExecOutput {
                stdout,
                stderr,
                exit_code,
            }
        }
    }
}

#[async_trait]
impl ContainerProgram for HostProgram {
    async fn run(&self, ctx: ContainerCtx) -> i32 {
        let (spec, net) = match self.prepare(&ctx) {
            Ok(p) => p,
            Err(e) => {
                ctx.log(&format!("container {} cannot start: {e}", ctx.container));
                return 128;
            }
        };
        // Registered by `on_start`, before the kubelet reported the container running (an
        // exec waits for the process), and removed however this run ends, so an exec never
        // reaches an earlier container of the same name or the emulated shell.
        let key = (
            ctx.pod_uid.clone(),
            ctx.container.clone(),
            ctx.restart_count,
        );
        let exec_tx = lock(&self.pending).remove(&key);
        let _exec = ExecRegistration {
            cluster: ctx.cluster.clone(),
            key: (
                ctx.namespace.clone(),
                ctx.pod.clone(),
                ctx.container.clone(),
            ),
        };
        let mut process = match Process::spawn(&spec, Stdio::Log) {
            Ok(p) => p,
            Err(e) => {
                ctx.log(&format!("container {} cannot start: {e}", ctx.container));
                return 128;
            }
        };
        let logs = [
            follow_log(&ctx, process.stdout.take()),
            follow_log(&ctx, process.stderr.take()),
        ];
        match process.exec_target() {
            Ok(t) => {
                if let Some(tx) = &exec_tx {
                    tx.send_replace(Some((Arc::new(t), spec.env.clone())));
                }
            }
            Err(e) => ctx.log(&format!(
                "container {} cannot be exec'd into: {e}",
                ctx.container
            )),
        }
        // A `Process` dropped before it was waited for is killed: when the kubelet drops this
        // run (SIGKILL after the grace period) or the cluster goes away, so do its processes.
        let mut running = process;
        let ip = IpAddr::V4(net.ip());
        for port in ctx
            .spec
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("containerPort").and_then(Value::as_u64))
            .filter_map(|p| u16::try_from(p).ok())
        {
            let node = self.rt.inner.node.clone();
            ctx.cluster.register_port(
                &ctx.namespace,
                &ctx.pod,
                port,
                move |mut stream: tokio::io::DuplexStream| {
                    let node = node.clone();
                    tokio::spawn(async move {
                        if let Ok(mut tcp) = node.connect(SocketAddr::new(ip, port)).await {
                            let _ = tokio::io::copy_bidirectional(&mut stream, &mut tcp).await;
                        }
                    });
                },
            );
        }
        let probe = probe::Probe::readiness(&ctx.spec);
        let node = self.rt.inner.node.clone();
        let ready_ctx = (ctx.ready.clone(), ctx.ready_changed.clone());
        let readiness = async move {
            let set = |r: bool| {
                if ready_ctx.0.swap(r, std::sync::atomic::Ordering::SeqCst) != r {
                    ready_ctx.1.notify_one();
                }
            };
            let Some(probe) = probe else {
                set(true);
                return std::future::pending::<()>().await;
            };
            tokio::time::sleep(probe.initial_delay).await;
            let (mut ok, mut failed) = (0u32, 0u32);
            loop {
                if probe.check_once(&node, ip).await {
                    (ok, failed) = (ok + 1, 0);
                    if ok >= probe.success_threshold {
                        set(true);
                    }
                } else {
                    (ok, failed) = (0, failed + 1);
                    if failed >= probe.failure_threshold {
                        set(false);
                    }
                }
                // Poll quickly until first ready, then at the probe's period.
                let ready = ready_ctx.0.load(std::sync::atomic::Ordering::SeqCst);
                let wait = if ready {
                    probe.period
                } else {
                    probe.period.min(std::time::Duration::from_millis(250))
                };
                tokio::time::sleep(wait).await;
            }
        };
        let mut signals = ctx.signals();
        let mut readiness = std::pin::pin!(readiness);
        let mut terminated = false;
        let code = loop {
            // SIGTERM on the first signal; the kubelet drops this run (and the dropped `Process` kills the
            // processes) when the grace period ends.
            if !terminated && signals.borrow_and_update().is_some() {
                running.terminate();
                terminated = true;
            }
            tokio::select! {
                biased;
                code = running.wait() => break code,
                changed = signals.changed(), if !terminated => {
                    if changed.is_err() {
                        running.terminate();
                        terminated = true;
                    }
                }
                () = &mut readiness => {}
            }
        };
        for l in logs.into_iter().flatten() {
            // The pipes close with the processes; let the last lines reach the log.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), l).await;
        }
        code
    }

    fn on_start(&self, ctx: &ContainerCtx) {
        let (tx, rx) = kube_emulator::sync::watch::channel(None);
        ctx.cluster
            .register_exec(&ctx.namespace, &ctx.pod, &ctx.container, exec_handler(rx));
        lock(&self.pending).insert(
            (
                ctx.pod_uid.clone(),
                ctx.container.clone(),
                ctx.restart_count,
            ),
            tx,
        );
    }

    fn pod_finished(&self, pod_uid: &str) {
        lock(&self.pending).retain(|(uid, _, _), _| uid != pod_uid);
        lock(&self.rt.inner.pods).remove(pod_uid);
        let dir = self.rt.state().join("pods").join(pod_uid);
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_state_directory_holding_secrets_is_private_to_this_user() {
        // Issue 31 item 2: it was 0755, so another user could read the pods' keys and tokens.
        if let Some(why) = conformance_node::unsupported() {
            assert!(
                !conformance_testtools::in_ci(),
                "CI must run this test: {why}"
            );
            eprintln!(
                "SKIPPED the_node_state_directory_holding_secrets_is_private_to_this_user: {why}"
            );
            return;
        }
        let rt = HostRuntime::start(HostImages::default()).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(rt.state()).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    }
}
