//! `openshell-conformance emulate serve`: the emulated cluster over real TCP in real time, with a
//! kubeconfig so `kubectl` can watch a scenario live. Loopback only (this workplace forbids
//! traffic to other addresses).

use super::cluster::{Cluster, ClusterConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tokio::net::TcpListener;

/// Arguments of `emulate serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on; must be a loopback address (e.g. 127.0.0.1:8001, or port 0 for any).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Where to write a kubeconfig for the emulated cluster.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Install an OpenShell model into the served cluster (contract, openshell-0.0.111,
    /// openshell-0.1.6-reported); nothing else is created.
    #[arg(long)]
    pub model: Option<String>,
    /// Defect switches on the contract model (repeatable or comma-separated).
    #[arg(long = "defect")]
    pub defects: Vec<String>,
    /// Supervisor topology of the model (combined, sidecar, supervisor-pod, gateway).
    #[arg(long, default_value = "combined")]
    pub topology: String,
    /// Agent Sandbox release for openshell-0.0.111 (v0.5.0 or v0.5.1).
    #[arg(long)]
    pub agent_sandbox: Option<String>,
    /// With --model: run this catalog case (an id or glob, e.g. `gateway-outage*`) in real time
    /// against the served cluster, so you can watch it with kubectl; the server keeps running
    /// afterwards for inspection.
    #[arg(long, requires = "model")]
    pub scenario: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--listen {0}: only loopback addresses (127.0.0.0/8, ::1) are allowed")]
    NotLoopback(SocketAddr),
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("cannot write kubeconfig {0}: {1}")]
    Kubeconfig(PathBuf, std::io::Error),
    #[error("{0}")]
    Usage(String),
    #[error("server failed: {0}")]
    Serve(std::io::Error),
}

/// A kubeconfig pointing at `http://addr` with one context, `openshell-emulated`.
pub fn kubeconfig(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: openshell-emulated\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: openshell-emulated\n  context:\n    cluster: openshell-emulated\n    user: openshell-emulated\n    namespace: default\ncurrent-context: openshell-emulated\nusers:\n- name: openshell-emulated\n  user: {{}}\n"
    )
}

pub fn write_kubeconfig(path: &Path, addr: SocketAddr) -> Result<(), ServeError> {
    std::fs::write(path, kubeconfig(addr))
        .map_err(|e| ServeError::Kubeconfig(path.to_path_buf(), e))
}

/// Binds a loopback listener (refusing any other address).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    if !addr.ip().is_loopback() {
        return Err(ServeError::NotLoopback(addr));
    }
    TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::Bind(addr, e))
}

/// Serves `cluster` on `listener` until the task is dropped or the listener fails.
pub async fn serve_on(listener: TcpListener, cluster: Cluster) -> Result<(), ServeError> {
    axum::serve(listener, cluster.router())
        .await
        .map_err(ServeError::Serve)
}

/// The `emulate serve` command: a fresh default cluster, a kubeconfig, then serve forever.
pub async fn run(args: ServeArgs) -> Result<(), ServeError> {
    let listener = bind(args.listen).await?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::Bind(args.listen, e))?;
    // Real time for a person watching: the cluster clock starts at the wall clock.
    let epoch_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let config = ClusterConfig {
        epoch_unix,
        ..ClusterConfig::default()
    };
    // With --model, the cluster runs the Kubernetes models and the OpenShell model, installed.
    let target = match &args.model {
        None => None,
        Some(name) => {
            let sel =
                crate::models::Selection::parse(name, &args.defects, args.agent_sandbox.as_deref())
                    .map_err(|e| ServeError::Usage(e.to_string()))?;
            let topo = crate::models::model::Topo::from_name(&args.topology).ok_or_else(|| {
                ServeError::Usage(format!(
                    "unknown topology '{}'; valid: combined, sidecar, supervisor-pod, gateway",
                    args.topology
                ))
            })?;
            let t = crate::models::target::EmulatedTarget::start_with(sel, topo, config.clone());
            // A scenario installs the model itself, in its install stage.
            if args.scenario.is_none() {
                crate::models::install::install(&t.cluster, &t.model)
                    .map_err(|e| ServeError::Usage(format!("install: {}", e.message)))?;
            }
            Some(std::sync::Arc::new(t))
        }
    };
    let cluster = match &target {
        Some(t) => t.cluster.clone(),
        None => Cluster::new(config),
    };
    let case = match (&target, &args.scenario) {
        (Some(t), Some(pattern)) => Some(live_case(pattern, t.model.topology.name())?),
        _ => None,
    };
    if let (Some(t), None) = (&target, &case) {
        println!(
            "OpenShell model {} installed (topology {}) in namespace openshell",
            t.model.selection,
            t.model.topology.name()
        );
    }
    println!("emulated Kubernetes API listening on http://{addr}");
    if let Some(path) = &args.kubeconfig_out {
        write_kubeconfig(path, addr)?;
        println!("kubeconfig written to {}", path.display());
        println!("try: kubectl --kubeconfig {} get pods -A", path.display());
    } else {
        println!("try: kubectl --server http://{addr} get pods -A");
    }
    if let (Some(t), Some(case)) = (target, case) {
        let server = tokio::spawn(serve_on(listener, cluster));
        println!("running {} in real time; watch it with kubectl", case.id());
        let factory = std::sync::Arc::new(LiveTarget(t));
        let report = crate::engine::Engine::new(factory, crate::engine::EngineOptions::default())
            .run_case(&case)
            .await;
        println!("{}: {}", report.case_id, report.outcome.name());
        for c in report.failed_checks() {
            println!("{}", c.diagnosis());
        }
        println!("still serving; stop with Ctrl-C");
        return server
            .await
            .unwrap_or_else(|e| Err(ServeError::Serve(std::io::Error::other(e.to_string()))));
    }
    serve_on(listener, cluster).await
}

/// The one catalog case `pattern` selects on `topology`.
fn live_case(pattern: &str, topology: &str) -> Result<crate::scenario::Case, ServeError> {
    let topo = crate::topology::Topologies::builtin()
        .get(topology)
        .map_err(|e| ServeError::Usage(e.to_string()))?
        .clone();
    let sel = crate::suites::catalog::Selection {
        patterns: vec![pattern.to_string()],
        ..Default::default()
    };
    let mut cases = crate::suites::catalog::cases(&[topo], &sel);
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
struct LiveTarget(std::sync::Arc<crate::models::target::EmulatedTarget>);

#[async_trait::async_trait]
impl crate::target::TargetFactory for LiveTarget {
    fn info(&self) -> crate::target::TargetInfo {
        crate::target::Target::info(&*self.0)
    }

    async fn provision(
        &self,
        _topology: &crate::topology::Topology,
        _rec: &crate::timeline::Recorder,
    ) -> crate::target::TargetResult<std::sync::Arc<dyn crate::target::Target>> {
        Ok(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serve_refuses_non_loopback_addresses() {
        let err = bind("0.0.0.0:0".parse().unwrap()).await.unwrap_err();
        assert!(matches!(err, ServeError::NotLoopback(_)));
        assert!(err.to_string().contains("only loopback"));
    }
}
