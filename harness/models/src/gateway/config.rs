//! The gateway's configuration file, read as the real gateway reads it: the chart renders
//! `gateway.toml` into a ConfigMap mounted at `/etc/openshell` (docs/upstream-facts.md F7.7).
//! Only the keys the model acts on are read; the rest are accepted and ignored.

use serde::Deserialize;

use kube_emulator::shell::Mounts;

/// Where the chart mounts the gateway's config.
pub(crate) const CONFIG_PATH: &str = "/etc/openshell/gateway.toml";

#[derive(Clone, Debug, Default, Deserialize)]
struct File {
    #[serde(default)]
    openshell: Openshell,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct Openshell {
    #[serde(default)]
    gateway: GatewaySection,
    #[serde(default)]
    drivers: Drivers,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct GatewaySection {
    #[serde(default)]
    disable_tls: bool,
    sandbox_namespace: Option<String>,
    /// The Secret sandbox pods mount for TLS to the gateway (chart: unless TLS is disabled).
    client_tls_secret_name: Option<String>,
    tls: Option<TlsPaths>,
    #[serde(default)]
    auth: Auth,
    /// Present: sandbox JWT auth is configured, so callers need a credential (F7.7).
    gateway_jwt: Option<toml::Table>,
    /// Present: OIDC is configured; client certificates are then optional (F7.7).
    oidc: Option<toml::Table>,
}

/// `[openshell.gateway.tls]`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub(crate) struct TlsPaths {
    pub cert_path: String,
    pub key_path: String,
    #[serde(default)]
    pub client_ca_path: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
struct Auth {
    #[serde(default)]
    allow_unauthenticated_users: bool,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
struct Drivers {
    kubernetes: Option<Kubernetes>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
struct Kubernetes {
    topology: Option<String>,
    service_account_name: Option<String>,
}

/// What the gateway model does with its configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GatewayConfig {
    /// None: plaintext.
    pub tls: Option<TlsPaths>,
    /// Client certificates are required in the TLS handshake (F7.7: a client CA and no OIDC).
    pub require_client_cert: bool,
    /// Calls other than `Health` need a credential; the model knows none, so without
    /// `allow_unauthenticated_users` they are refused (F7.7).
    pub credentials_required: bool,
    pub allow_unauthenticated_users: bool,
    pub sandbox_namespace: Option<String>,
    /// `[openshell.drivers.kubernetes] topology` (chart `supervisor.topology`).
    pub topology: Option<String>,
    /// `[openshell.drivers.kubernetes] service_account_name`: what sandbox pods run as, and
    /// the only account whose tokens bootstrap (F12.7).
    pub sandbox_service_account: Option<String>,
    /// `[openshell.gateway] client_tls_secret_name`: the Secret (CA, client certificate and
    /// key) the driver mounts into sandbox pods (F3.5, F12.8); None or empty: none.
    pub client_tls_secret: Option<String>,
}

impl GatewayConfig {
    /// Without a config file: plaintext, no authentication, the model's own topology.
    pub(crate) fn plaintext() -> Self {
        Self {
            tls: None,
            require_client_cert: false,
            credentials_required: false,
            allow_unauthenticated_users: false,
            sandbox_namespace: None,
            topology: None,
            sandbox_service_account: None,
            client_tls_secret: None,
        }
    }

    /// Parses `gateway.toml`; the error is what the gateway logs before it exits 1.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text)
            .map_err(|e| format!("failed to parse config file {CONFIG_PATH}: {e}"))?;
        let gw = file.openshell.gateway;
        let kubernetes = file.openshell.drivers.kubernetes;
        // F7.7: TLS is on unless disabled, and then needs a certificate and key.
        let tls = if gw.disable_tls {
            if gw.tls.as_ref().is_some_and(|t| t.client_ca_path.is_some()) {
                return Err("--disable-tls and --tls-client-ca are mutually exclusive. Client certificate verification requires that TLS be enabled.".into());
            }
            None
        } else {
            Some(gw.tls.clone().ok_or_else(|| {
                "--tls-cert is required when TLS is enabled (use --disable-tls to skip)".to_string()
            })?)
        };
        let require_client_cert = tls
            .as_ref()
            .is_some_and(|t| t.client_ca_path.is_some() && gw.oidc.is_none());
        Ok(Self {
            tls,
            require_client_cert,
            credentials_required: gw.gateway_jwt.is_some() || gw.oidc.is_some(),
            allow_unauthenticated_users: gw.auth.allow_unauthenticated_users,
            sandbox_namespace: gw.sandbox_namespace,
            topology: kubernetes.as_ref().and_then(|k| k.topology.clone()),
            sandbox_service_account: kubernetes.and_then(|k| k.service_account_name),
            client_tls_secret: gw.client_tls_secret_name.filter(|n| !n.is_empty()),
        })
    }

    /// The config the container sees: parsed from [`CONFIG_PATH`] if the file is there, else
    /// [`GatewayConfig::plaintext`].
    pub(crate) fn read(mounts: &Mounts) -> Result<Self, String> {
        match mounts.read_file(CONFIG_PATH).map_err(|e| e.to_string())? {
            None => Ok(Self::plaintext()),
            Some(bytes) => {
                let text = String::from_utf8(bytes)
                    .map_err(|_| format!("failed to read config file {CONFIG_PATH}: not UTF-8"))?;
                Self::parse(&text)
            }
        }
    }

    /// A file the config names, read from the container's filesystem.
    pub(crate) fn file(mounts: &Mounts, path: &str) -> Result<Vec<u8>, String> {
        mounts
            .read_file(path)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("failed to read {path}: No such file or directory"))
    }

    /// What a bootstrap call (`IssueSandboxToken`) gets when its ServiceAccount token does not
    /// authenticate: the authenticator chain falls through, the caller becomes the mTLS or
    /// local-dev user (or is refused for want of a credential), and a user principal may not
    /// call a sandbox-only method (F12.7).
    pub(crate) fn unauthenticated_bootstrap(&self) -> super::rpc::Status {
        match self.refusal(super::rpc::ISSUE_SANDBOX_TOKEN_PATH) {
            Some(m) => super::rpc::Status::unauthenticated(m),
            None => super::rpc::Status::new(
                "PermissionDenied",
                "this method requires a sandbox principal",
            ),
        }
    }

    /// Whether a call to `path` (a gRPC method path) is refused for want of a credential, and
    /// with what message (F7.7: `Health` needs none).
    pub(crate) fn refusal(&self, path: &str) -> Option<&'static str> {
        let exempt = path == "/openshell.v1.OpenShell/Health";
        (self.credentials_required && !self.allow_unauthenticated_users && !exempt)
            .then_some("missing authorization header")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_emulator::shell::Volume;

    const CHART_LIKE: &str = r#"
[openshell]
version = 1

[openshell.gateway]
bind_address = "0.0.0.0:8080"
sandbox_namespace = "openshell"
client_tls_secret_name = "openshell-client-tls"

[openshell.gateway.tls]
cert_path = "/etc/openshell-tls/server/tls.crt"
key_path = "/etc/openshell-tls/server/tls.key"
client_ca_path = "/etc/openshell-tls/client-ca/ca.crt"

[openshell.gateway.auth]
allow_unauthenticated_users = true

[openshell.gateway.gateway_jwt]
signing_key_path = "/etc/openshell-jwt/signing.pem"
ttl_secs = 3600

[openshell.drivers.kubernetes]
workspace_mode = "shared"
topology = "sidecar"
"#;

    #[test]
    fn a_chart_like_config_turns_on_tls_with_required_client_certificates() {
        let c = GatewayConfig::parse(CHART_LIKE).unwrap();
        let tls = c.tls.clone().unwrap();
        assert_eq!(tls.cert_path, "/etc/openshell-tls/server/tls.crt");
        assert_eq!(tls.key_path, "/etc/openshell-tls/server/tls.key");
        assert_eq!(
            tls.client_ca_path.as_deref(),
            Some("/etc/openshell-tls/client-ca/ca.crt")
        );
        assert!(c.require_client_cert);
        assert!(c.credentials_required);
        assert!(c.allow_unauthenticated_users);
        assert_eq!(c.sandbox_namespace.as_deref(), Some("openshell"));
        assert_eq!(c.topology.as_deref(), Some("sidecar"));
        assert_eq!(c.refusal("/openshell.v1.OpenShell/ListSandboxes"), None);
    }

    #[test]
    fn without_allow_unauthenticated_users_only_health_is_answered() {
        let text = CHART_LIKE.replace("allow_unauthenticated_users = true", "");
        let c = GatewayConfig::parse(&text).unwrap();
        assert_eq!(
            c.refusal("/openshell.v1.OpenShell/ListSandboxes"),
            Some("missing authorization header")
        );
        assert_eq!(c.refusal("/openshell.v1.OpenShell/Health"), None);
    }

    #[test]
    fn oidc_makes_client_certificates_optional() {
        let text = format!("{CHART_LIKE}\n[openshell.gateway.oidc]\nissuer = \"https://idp\"\n");
        assert!(!GatewayConfig::parse(&text).unwrap().require_client_cert);
    }

    #[test]
    fn tls_without_a_certificate_is_refused_as_the_real_gateway_refuses_it() {
        let err = GatewayConfig::parse("[openshell.gateway]\nlog_level = \"info\"\n").unwrap_err();
        assert!(err.contains("--tls-cert is required"), "{err}");
    }

    #[test]
    fn disable_tls_serves_plaintext() {
        let c = GatewayConfig::parse("[openshell.gateway]\ndisable_tls = true\n").unwrap();
        assert_eq!(c.tls, None);
        assert!(!c.require_client_cert);
    }

    #[test]
    fn a_broken_file_is_an_error_naming_the_file() {
        let err = GatewayConfig::parse("[openshell.gateway\n").unwrap_err();
        assert!(err.contains(CONFIG_PATH), "{err}");
    }

    #[test]
    fn no_file_in_the_container_means_plaintext_and_the_models_topology() {
        let mut m = Mounts::new();
        m.mount("/", Volume::new(), false);
        assert_eq!(GatewayConfig::read(&m).unwrap(), GatewayConfig::plaintext());
        let etc = Volume::new();
        etc.write("/gateway.toml", CHART_LIKE.as_bytes());
        m.mount("/etc/openshell", etc, true);
        assert_eq!(
            GatewayConfig::read(&m).unwrap().topology.as_deref(),
            Some("sidecar")
        );
    }
}
