//! `openshell-conformance emulate serve`: the emulated cluster over real TCP in real time, with
//! the OpenShell model installed or one catalog case running live, so `kubectl` can watch it.
//! Loopback only, and HTTPS with a token only the kubeconfig it writes holds (mode 0600): see
//! `kube_emulator::serve`.

use std::net::SocketAddr;
use std::path::PathBuf;

use kube_emulator::serve::{Endpoint, bind};
use kube_emulator::{Cluster, ClusterConfig};

/// The start of the name of the private directory `emulate serve` keeps its kubeconfig in:
/// this prefix, the process id, `-`, a random part (a later run removes one a SIGKILL left).
pub const PRIVATE_DIR_PREFIX: &str = "openshell-conformance-serve-";

/// Arguments of `emulate serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on; must be a loopback address (e.g. 127.0.0.1:8001, or port 0 for any).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Where to write the kubeconfig for the emulated cluster (mode 0600: it holds the token
    /// the server requires). Without it, one is written to a private temporary directory and
    /// removed when the server stops.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Install an OpenShell model into the served cluster (contract, openshell-0.0.111,
    /// openshell-0.1.6-reported) and run it until the server stops. Without it the cluster runs
    /// the Kubernetes models only (kubelet, workload, Job and Agent Sandbox controllers), with
    /// no OpenShell.
    #[arg(long)]
    pub model: Option<String>,
    /// Defect switches on the contract model (repeatable or comma-separated).
    #[arg(long = "defect", requires = "model")]
    pub defects: Vec<String>,
    /// Supervisor topology of the model (combined, sidecar, supervisor-pod, gateway).
    #[arg(long, default_value = "combined", requires = "model")]
    pub topology: String,
    /// Agent Sandbox release for openshell-0.0.111: v0.5.0, v0.5.1 or v0.5.4 (default).
    #[arg(long, requires = "model")]
    pub agent_sandbox: Option<String>,
    /// With --model: run this catalog case (an id or glob, e.g. `gateway-outage*`) in real time
    /// against the served cluster, so you can watch it with kubectl; the server keeps running
    /// afterwards for inspection.
    #[arg(long, requires = "model")]
    pub scenario: Option<String>,
    /// With --model: images mean models and nothing is pre-installed. The kubelet runs the
    /// OpenShell gateway image as the model's gateway (or, with `generate-certs` arguments, as
    /// the chart's certificate generator), the supervisor and sandbox images as its supervisors,
    /// and the Agent Sandbox controller image as the controller of the release in its tag. No
    /// OpenShell object and no Sandbox CRD is installed: apply the real Agent Sandbox manifest
    /// and install the real chart (e.g. `run --target existing`).
    #[arg(long, requires = "model", conflicts_with_all = ["scenario", "agent_sandbox"])]
    pub images: bool,
    /// With --images: run the OpenShell gateway and supervisor images as the real binaries
    /// in this directory (`openshell-gateway`, `openshell-sandbox` of one release) instead of
    /// the model's, each container a process in its own namespaces with its pod's network.
    /// Needs root (namespaces, mounts, veth pairs) and iproute2's `ip`.
    #[arg(long, requires = "images", value_name = "DIR")]
    pub openshell_binaries: Option<PathBuf>,
    /// Run the served cluster and every process its node starts on one clock N times as fast
    /// as the real one (1 to 1000; 1 is real time). Needs Debian's libfaketime above 1.
    #[arg(long, value_name = "N", default_value = "1", value_parser = crate::clock::parse_scale, env = "OPENSHELL_CONFORMANCE_TIME_SCALE")]
    pub time_scale: u32,
}

/// Why `emulate serve` stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Server(#[from] kube_emulator::serve::ServeError),
    #[error("{0}")]
    Usage(String),
    /// The machine cannot run containers as processes, or the node could not be set up.
    #[error("{0}")]
    Host(#[from] conformance_models::host::HostError),
    /// The machine refused what serving needs (a private directory, signal handlers).
    #[error("{0}: {1}")]
    Machine(&'static str, std::io::Error),
}

/// As a command's error: a non-loopback address is a usage error, the rest are infrastructure
/// errors that keep their I/O cause.
impl From<ServeError> for conformance_core::error::Error {
    fn from(e: ServeError) -> Self {
        use conformance_core::error::Error;
        use kube_emulator::serve::ServeError as Server;
        match e {
            ServeError::Usage(m) => Error::usage(m),
            ServeError::Server(s) => match s {
                Server::NotLoopback(_) => Error::usage(s.to_string()),
                Server::Bind(addr, io) => Error::infra_from(format!("cannot listen on {addr}"), io),
                // A kubeconfig path that cannot be written is the user's path: 2, as everywhere.
                Server::Kubeconfig(path, io) => {
                    Error::usage_from(format!("cannot write kubeconfig {}", path.display()), io)
                }
                Server::Serve(io) => Error::infra_from("server failed", io),
                Server::Credentials(_) => Error::infra(s.to_string()),
            },
            ServeError::Host(h) => Error::infra(h.to_string()),
            ServeError::Machine(what, io) => Error::infra_from(what, io),
        }
    }
}

/// Binds `listen` and makes a cluster configuration whose clock starts at the wall clock: real
/// time, for the people and tools that watch a served cluster.
async fn bind_at_wall_clock(listen: SocketAddr) -> Result<(Endpoint, ClusterConfig), ServeError> {
    let endpoint = bind(listen).await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    // To the nanosecond, not the second: the cluster's timestamps (container logs) are set
    // beside the harness's wall clock, and a whole-second epoch put them up to 1 s behind.
    let config = ClusterConfig {
        epoch_unix: now.as_secs(),
        epoch_subsec_nanos: now.subsec_nanos(),
        ..ClusterConfig::default()
    };
    Ok((endpoint, config))
}

/// The `emulate serve` command: a fresh default cluster, a kubeconfig, then serve until SIGINT
/// or SIGTERM.
pub async fn run(args: ServeArgs) -> Result<(), ServeError> {
    // The kubeconfig holds the server's token: without --kubeconfig-out it goes to a directory
    // only this user can enter, removed when the server stops (hence the signal handling below:
    // a process killed by SIGINT would leave it).
    let (kubeconfig, _private) = match &args.kubeconfig_out {
        Some(path) => (path.clone(), None),
        None => {
            let dir = tempfile::Builder::new()
                .prefix(&format!("{PRIVATE_DIR_PREFIX}{}-", std::process::id()))
                // 0700 from its creation: tempfile leaves the mode to the umask.
                .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .tempdir()
                .map_err(|e| {
                    ServeError::Machine("cannot make a private directory for the kubeconfig", e)
                })?;
            (dir.path().join("kubeconfig"), Some(dir))
        }
    };
    let stop = stop_signal()?;
    tokio::select! {
        biased;
        served = serve_until_stopped(&args, &kubeconfig) => served,
        why = stop => {
            say!("{why}: stopping the served cluster");
            Ok(())
        }
    }
}

/// Resolves with the name of the first SIGINT or SIGTERM, caught from the moment this returns.
fn stop_signal() -> Result<impl std::future::Future<Output = &'static str>, ServeError> {
    use tokio::signal::unix::{SignalKind, signal};
    let caught = |e| ServeError::Machine("cannot catch SIGINT and SIGTERM", e);
    let mut int = signal(SignalKind::interrupt()).map_err(caught)?;
    let mut term = signal(SignalKind::terminate()).map_err(caught)?;
    Ok(async move {
        tokio::select! {
            biased;
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        }
    })
}

/// Prints where the API listens and how to reach it.
fn announce(addr: SocketAddr, kubeconfig: &std::path::Path) {
    say!("emulated Kubernetes API listening on https://{addr}");
    say!(
        "kubeconfig written to {} (mode 0600: it holds the token the server requires)",
        kubeconfig.display()
    );
    say!(
        "try: kubectl --kubeconfig {} get pods -A",
        kubeconfig.display()
    );
}

async fn serve_until_stopped(
    args: &ServeArgs,
    kubeconfig: &std::path::Path,
) -> Result<(), ServeError> {
    // `start_images` binds the address itself: binding it here first made every fixed port
    // "already in use".
    if args.images {
        let model = args.model.as_deref().unwrap_or_default();
        let served = start_images(
            model,
            &args.defects,
            &args.topology,
            args.listen,
            Some(kubeconfig),
            args.openshell_binaries.as_deref(),
        )
        .await?;
        say!(
            "images mean models ({model}, topology {}); nothing installed: apply the Agent Sandbox manifest and install the OpenShell chart",
            args.topology
        );
        announce(served.addr, kubeconfig);
        return served.wait().await;
    }
    let (endpoint, config) = bind_at_wall_clock(args.listen).await?;
    let addr = endpoint.addr();
    // With --model, the cluster runs the Kubernetes models and the OpenShell model, installed.
    let target = match &args.model {
        None => None,
        Some(name) => {
            let sel = conformance_models::Selection::parse(
                name,
                &args.defects,
                args.agent_sandbox.as_deref(),
            )
            .map_err(|e| ServeError::Usage(e.to_string()))?;
            let topology = conformance_core::topology::Topologies::builtin()
                .get(&args.topology)
                .map_err(|e| ServeError::Usage(e.to_string()))?
                .clone();
            let t = conformance_models::target::EmulatedTarget::start_with(
                sel,
                &topology,
                config.clone(),
            );
            // A scenario installs the model itself, in its install stage.
            if args.scenario.is_none() {
                conformance_models::install::install(&t.cluster, &t.model)
                    .map_err(|e| ServeError::Usage(format!("install: {}", e.message)))?;
            }
            Some(std::sync::Arc::new(t))
        }
    };
    // Without --model the cluster still runs the Kubernetes models (a kubelet for its one node,
    // the workload, Job and Agent Sandbox controllers), so pods run and Jobs complete. Held to
    // the end.
    let (cluster, _kubernetes) = match &target {
        Some(t) => (t.cluster.clone(), None),
        None => {
            let c = Cluster::new(config);
            let models = conformance_models::KubernetesModels::start(&c);
            (c, Some(models))
        }
    };
    let case = match (&target, &args.scenario) {
        (Some(t), Some(pattern)) => Some(live_case(pattern, &t.model.topology)?),
        _ => None,
    };
    if let (Some(t), None) = (&target, &case) {
        say!(
            "OpenShell model {} installed (topology {}) in namespace openshell",
            t.model.selection,
            t.model.topology.name
        );
    }
    if target.is_none() {
        say!(
            "no OpenShell model: the Kubernetes models run (one node, workload, Job and Agent Sandbox controllers)"
        );
    }
    endpoint.write_kubeconfig(kubeconfig)?;
    announce(addr, kubeconfig);
    // The target (and with it the models) lives until the server ends: dropping it would stop
    // every controller and the kubelet.
    if let (Some(t), Some(case)) = (&target, case) {
        let server = tokio::spawn(endpoint.serve(cluster));
        say!("running {} in real time; watch it with kubectl", case.id());
        // The case's teardown must not stop the models: the cluster goes on reconciling.
        t.keep_models_after_teardown();
        let factory = std::sync::Arc::new(LiveTarget(t.clone()));
        let report = conformance_core::engine::Engine::new(
            factory,
            conformance_core::engine::EngineOptions::default(),
        )
        .run_case(&case)
        .await;
        say!("{}: {}", report.case_id, report.outcome.name());
        for c in report.failed_checks() {
            say!("{}", c.diagnosis());
        }
        say!("still serving; stop with Ctrl-C");
        return server
            .await
            .unwrap_or_else(|e| {
                Err(kube_emulator::serve::ServeError::Serve(
                    std::io::Error::other(e.to_string()),
                ))
            })
            .map_err(ServeError::from);
    }
    let served = endpoint.serve(cluster).await;
    drop(target);
    Ok(served?)
}

/// A cluster served in this process by [`start_images`]; dropping it stops the server and
/// every model.
pub struct ServedCluster {
    /// Where the API listens (HTTPS, loopback).
    pub addr: SocketAddr,
    /// The kubeconfig written for it, if one was asked for (context `kube-emulator`, mode
    /// 0600).
    pub kubeconfig: Option<PathBuf>,
    /// What a client in this process needs to reach it (the CA and the token).
    pub credentials: kube_emulator::serve::Credentials,
    /// The cluster itself, for in-process inspection (objects, container filesystems).
    pub cluster: Cluster,
    server: tokio::task::JoinHandle<Result<(), kube_emulator::serve::ServeError>>,
    _target: std::sync::Arc<conformance_models::target::EmulatedTarget>,
    /// The runtime of the real binaries' processes, with `--openshell-binaries`.
    host: Option<conformance_models::host::HostRuntime>,
}

impl ServedCluster {
    /// Serves until the server fails.
    pub async fn wait(mut self) -> Result<(), ServeError> {
        (&mut self.server)
            .await
            .unwrap_or_else(|e| {
                Err(kube_emulator::serve::ServeError::Serve(
                    std::io::Error::other(e.to_string()),
                ))
            })
            .map_err(ServeError::from)
    }
}

impl Drop for ServedCluster {
    fn drop(&mut self) {
        if let Some(host) = &self.host {
            // Each one is a fidelity bug of the served cluster (issue: drive the count to zero).
            let unserved = host.unserved();
            tell!(
                "API requests of the real OpenShell processes the served cluster could not serve: {}",
                unserved.len()
            );
            for u in unserved {
                tell!("  {u}");
            }
        }
        self.server.abort();
    }
}

/// Starts, in this process, the served cluster of `emulate serve --model M --images`: the
/// Kubernetes models with images meaning models and nothing pre-installed (see
/// `EmulatedTarget::start_images`), listening on `listen` (loopback only) in real time, with a
/// kubeconfig written to `kubeconfig_out` if given. Call inside a tokio runtime.
pub async fn start_images(
    model: &str,
    defects: &[String],
    topology: &str,
    listen: SocketAddr,
    kubeconfig_out: Option<&std::path::Path>,
    openshell_binaries: Option<&std::path::Path>,
) -> Result<ServedCluster, ServeError> {
    let (endpoint, config) = bind_at_wall_clock(listen).await?;
    let addr = endpoint.addr();
    let sel = conformance_models::Selection::parse(model, defects, None)
        .map_err(|e| ServeError::Usage(e.to_string()))?;
    let topology = conformance_core::topology::Topologies::builtin()
        .get(topology)
        .map_err(|e| ServeError::Usage(e.to_string()))?
        .clone();
    let mut host = None;
    let target = std::sync::Arc::new(match openshell_binaries {
        None => conformance_models::target::EmulatedTarget::start_images(sel, &topology, config),
        Some(dir) => {
            let images = conformance_models::host::HostImages::openshell(dir)
                .map_err(|e| ServeError::Usage(format!("--openshell-binaries: {e}")))?;
            let rt = conformance_models::host::HostRuntime::start(images)?;
            let target = conformance_models::target::EmulatedTarget::start_host(
                sel, &topology, config, &rt,
            )?;
            host = Some(rt);
            target
        }
    });
    let cluster = target.cluster.clone();
    let kubeconfig = match kubeconfig_out {
        Some(path) => {
            endpoint.write_kubeconfig(path)?;
            Some(path.to_path_buf())
        }
        None => None,
    };
    let credentials = endpoint.credentials().clone();
    let server = tokio::spawn(endpoint.serve(cluster.clone()));
    Ok(ServedCluster {
        addr,
        kubeconfig,
        credentials,
        cluster,
        server,
        _target: target,
        host,
    })
}

/// The one catalog case `pattern` selects on `topology` (the one the served model runs).
fn live_case(
    pattern: &str,
    topo: &conformance_core::topology::Topology,
) -> Result<conformance_core::scenario::Case, ServeError> {
    let topology = &topo.name;
    let sel = conformance_catalog::catalog::Selection {
        patterns: vec![pattern.to_string()],
        ..Default::default()
    };
    let mut cases = conformance_catalog::catalog::cases(std::slice::from_ref(topo), &sel);
    match cases.len() {
        1 => Ok(cases.remove(0)),
        0 => Err(ServeError::Usage(format!(
            "no case matches --scenario {pattern} on topology {topology}; `openshell-conformance list scenarios` shows the ids"
        ))),
        n => Err(ServeError::Usage(format!(
            "--scenario {pattern} matches {n} cases on topology {topology}; name one: {}",
            cases.iter().map(|c| c.id()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Hands the served cluster's target to the engine.
struct LiveTarget(std::sync::Arc<conformance_models::target::EmulatedTarget>);

#[async_trait::async_trait]
impl conformance_core::target::TargetFactory for LiveTarget {
    fn info(&self) -> conformance_core::target::TargetInfo {
        conformance_core::target::Target::info(&*self.0)
    }

    async fn provision(
        &self,
        _topology: &conformance_core::topology::Topology,
        _rec: &conformance_core::timeline::Recorder,
    ) -> conformance_core::target::TargetResult<std::sync::Arc<dyn conformance_core::target::Target>>
    {
        Ok(self.0.clone())
    }
}
