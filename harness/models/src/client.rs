//! The in-process OpenShell client (`openshell sandbox …`, docs/upstream-facts.md section 6): every
//! call connects to the gateway Service through [`Network`] like the CLI's gRPC channel, so a
//! gateway that is scaled down, restarting or unready answers `Unavailable`.

use std::sync::Arc;

use crate::gateway::Gateway;
use crate::gateway::rpc::Status;
use crate::model::{GATEWAY_SERVICE_HOST, GRPC_PORT};
use conformance_core::target::{ExecResult, SandboxSpec, SandboxView, TargetError, TargetResult};
use conformance_kube_models::network::Network;
use kube_emulator::Cluster;

/// Clients reach the gateway from outside the release namespace (a port-forward in real runs).
pub(crate) const CLIENT_NAMESPACE: &str = "default";

#[derive(Clone)]
pub struct OpenShellClient {
    cluster: Cluster,
    network: Network,
}

fn refused(s: Status) -> TargetError {
    TargetError::refused(s.code, s.message)
}

impl OpenShellClient {
    pub fn new(cluster: Cluster, network: Network) -> Self {
        Self { cluster, network }
    }

    /// A channel to the gateway; Unavailable when no ready gateway backs the Service.
    pub fn connect(&self) -> TargetResult<Arc<Gateway>> {
        match self.network.connect::<Gateway>(
            &self.cluster,
            CLIENT_NAMESPACE,
            GATEWAY_SERVICE_HOST,
            GRPC_PORT,
        ) {
            Ok(gw) if gw.is_alive() => Ok(gw),
            Ok(_) => Err(TargetError::refused(
                "Unavailable",
                "error trying to connect: tcp connect error: Connection refused (os error 111)",
            )),
            Err(e) => Err(TargetError::refused(
                "Unavailable",
                format!("error trying to connect: {e}"),
            )),
        }
    }

    pub fn create(&self, spec: &SandboxSpec) -> TargetResult<SandboxView> {
        self.connect()?.create_sandbox(spec).map_err(refused)
    }

    pub fn get(&self, name: &str) -> TargetResult<Option<SandboxView>> {
        self.connect()?.get_sandbox(name).map_err(refused)
    }

    pub fn list(&self) -> TargetResult<Vec<SandboxView>> {
        self.connect()?.list_sandboxes().map_err(refused)
    }

    pub fn stop(&self, name: &str) -> TargetResult<()> {
        self.connect()?.stop_sandbox(name).map_err(refused)
    }

    pub fn start(&self, name: &str) -> TargetResult<()> {
        self.connect()?.start_sandbox(name).map_err(refused)
    }

    pub fn delete(&self, name: &str) -> TargetResult<()> {
        self.connect()?.delete_sandbox(name).map_err(refused)
    }

    pub async fn exec(&self, name: &str, argv: &[String]) -> TargetResult<ExecResult> {
        let gw = self.connect()?;
        gw.exec(name, argv).await.map_err(refused)
    }
}
