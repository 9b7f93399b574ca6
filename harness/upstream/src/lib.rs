#![warn(unreachable_pub)]
//! The names upstream gives its objects, in one place: the Agent Sandbox API and its labels, the
//! OpenShell chart's namespace, workload, Secrets and ServiceAccount, and the names OpenShell's
//! Kubernetes driver puts into a sandbox pod. The models render them and the real path looks
//! them up, so both read them here. Each cites its fact in docs/upstream-facts.md.
//!
//! Only names: no types, no behaviour, no dependencies, so any crate may use it.

// ---- Agent Sandbox (docs/upstream-facts.md section 4) ----

/// The Agent Sandbox API group (docs/upstream-facts.md F4.1).
pub const SANDBOX_GROUP: &str = "agents.x-k8s.io";
/// The Sandbox version OpenShell's driver tries first and the models write (F3.1: v1beta1 from
/// Agent Sandbox v0.5.0).
pub const SANDBOX_VERSION: &str = "v1beta1";
/// The Sandbox version before Agent Sandbox v0.5.0 (F4.1).
pub const SANDBOX_VERSION_V1ALPHA1: &str = "v1alpha1";
/// `apiVersion` of a v1beta1 Sandbox: [`SANDBOX_GROUP`]/[`SANDBOX_VERSION`] (F4.1).
pub const SANDBOX_API_VERSION: &str = "agents.x-k8s.io/v1beta1";
/// `apiVersion` of a v1alpha1 Sandbox: [`SANDBOX_GROUP`]/[`SANDBOX_VERSION_V1ALPHA1`] (F4.1).
pub const SANDBOX_API_VERSION_V1ALPHA1: &str = "agents.x-k8s.io/v1alpha1";
/// The Sandbox kind (F4.1).
pub const SANDBOX_KIND: &str = "Sandbox";
/// The Sandbox resource's plural, its path segment (F4.1).
pub const SANDBOX_PLURAL: &str = "sandboxes";
/// The Sandbox CustomResourceDefinition: `<plural>.<group>` (F4.1).
pub const SANDBOX_CRD: &str = "sandboxes.agents.x-k8s.io";
/// Label on a Sandbox's pod, PVCs and Service with `NameHash(sandbox name)` (F4.8).
pub const NAME_HASH_LABEL: &str = "agents.x-k8s.io/sandbox-name-hash";
/// Annotation on the Sandbox naming its pod (F4.11).
pub const POD_NAME_ANNOTATION: &str = "agents.x-k8s.io/pod-name";
/// Annotation on the Sandbox listing the pod labels the controller propagated (F4.11).
pub const PROPAGATED_LABELS: &str = "agents.x-k8s.io/propagated-labels";
/// Annotation on the Sandbox listing the pod annotations the controller propagated (F4.11).
pub const PROPAGATED_ANNOTATIONS: &str = "agents.x-k8s.io/propagated-annotations";
/// The namespace of the Agent Sandbox controller (F8.1).
pub const AGENT_SANDBOX_NAMESPACE: &str = "agent-sandbox-system";
/// The Agent Sandbox controller's Deployment (F8.1).
pub const AGENT_SANDBOX_CONTROLLER: &str = "agent-sandbox-controller";

// ---- The OpenShell chart (docs/upstream-facts.md section 5) ----

/// Namespace of the release, the gateway and the sandboxes (shared workspace mode; F5.8).
pub const NAMESPACE: &str = "openshell";
/// The Helm release, and so the gateway's StatefulSet and Service: `StatefulSet/openshell`, pod
/// `openshell-0` (F5.1).
pub const RELEASE: &str = "openshell";
/// The claim template of the gateway StatefulSet's SQLite volume, PVC `openshell-data-<pod>` (F5.3).
pub const GATEWAY_DATA_CLAIM: &str = "openshell-data";
/// The gateway's gRPC/HTTP port (F5.2).
pub const GATEWAY_GRPC_PORT: u16 = 8080;
/// The gateway Service's name inside the cluster (F5.5).
pub const GATEWAY_SERVICE_HOST: &str = "openshell.openshell.svc.cluster.local";
/// The gateway's callback endpoint the supervisors dial (F5.5 `server.grpcEndpoint`).
pub const GATEWAY_ENDPOINT: &str = "https://openshell.openshell.svc.cluster.local:8080";
/// The Secret with the client CA, certificate and key the chart's certgen creates, which the
/// CLI and the supervisors use (F5.7, F5.8 `client_tls_secret_name`, F6.2).
pub const CLIENT_TLS_SECRET: &str = "openshell-client-tls";
/// The ServiceAccount sandbox pods run as (the chart's `service_account_name`), the only one
/// whose tokens the gateway accepts for bootstrap (F5.8, F12.7).
pub const SANDBOX_SERVICE_ACCOUNT: &str = "openshell-sandbox";
/// The audience the gateway's TokenReview asks for and the driver's projected token carries
/// (F3.5, F12.7).
pub const SA_TOKEN_AUDIENCE: &str = "openshell-gateway";

// ---- What OpenShell's Kubernetes driver puts into a sandbox pod (section 3) ----

/// The pod annotation carrying the sandbox id (F3.3, F12.7).
pub const POD_SANDBOX_ID_ANNOTATION: &str = "openshell.io/sandbox-id";
/// The Sandbox label carrying the sandbox id (F3.3, F12.7).
pub const SANDBOX_ID_LABEL: &str = "openshell.ai/sandbox-id";
/// The projected ServiceAccount token volume of a sandbox pod (F3.5).
pub const SA_TOKEN_VOLUME: &str = "openshell-sa-token";
/// The volume of the client TLS Secret in a sandbox pod (F3.5, F12.8).
pub const CLIENT_TLS_VOLUME: &str = "openshell-client-tls";
/// The emptyDir both sidecar containers share for the control socket (F3.10).
pub const SIDECAR_STATE_VOLUME: &str = "openshell-sidecar-state";
/// The env var telling the process side to wait for a sidecar's control socket (F3.5).
pub const CONTROL_SOCKET_ENV: &str = "OPENSHELL_SIDECAR_CONTROL_SOCKET";
/// Where the supervisor binary lands in the workload container (F3.4).
pub const SUPERVISOR_BIN: &str = "/opt/openshell/bin/openshell-sandbox";
/// The event reason a supervisor posts when bootstrap fails for good (the contract, R14).
pub const BOOTSTRAP_FAILED_EVENT: &str = "BootstrapFailed";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_api_versions_are_the_group_and_the_version() {
        assert_eq!(
            SANDBOX_API_VERSION,
            format!("{SANDBOX_GROUP}/{SANDBOX_VERSION}")
        );
        assert_eq!(
            SANDBOX_API_VERSION_V1ALPHA1,
            format!("{SANDBOX_GROUP}/{SANDBOX_VERSION_V1ALPHA1}")
        );
    }

    #[test]
    fn the_sandbox_crd_is_the_plural_in_the_group() {
        assert_eq!(SANDBOX_CRD, format!("{SANDBOX_PLURAL}.{SANDBOX_GROUP}"));
    }

    #[test]
    fn the_gateway_endpoint_is_the_release_service_on_the_grpc_port() {
        assert_eq!(
            GATEWAY_SERVICE_HOST,
            format!("{RELEASE}.{NAMESPACE}.svc.cluster.local")
        );
        assert_eq!(
            GATEWAY_ENDPOINT,
            format!("https://{GATEWAY_SERVICE_HOST}:{GATEWAY_GRPC_PORT}")
        );
    }
}
