//! The emulated cluster over real TCP, in real time, with a kubeconfig so `kubectl`, `helm` and
//! kube-rs clients can use it.
//!
//! It authenticates like a real API server with anonymous access off: HTTPS with a certificate
//! from a CA made for this cluster alone, and a bearer token; a request without the token gets
//! 401 and an `Unauthorized` Status. Only the kubeconfig handed out (mode 0600) holds the token
//! and the CA certificate; no key is ever written to disk. Another local user can reach the
//! port but can read no object, change none, and cannot pose as this server.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::response::IntoResponse;
use base64::Engine as _;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::cluster::Cluster;

/// The context, cluster and user name of every served kubeconfig.
pub const CONTEXT: &str = "kube-emulator";

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--listen {0}: only loopback addresses (127.0.0.0/8, ::1) are allowed")]
    NotLoopback(SocketAddr),
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("cannot write kubeconfig {0}: {1}")]
    Kubeconfig(PathBuf, std::io::Error),
    #[error("cannot make the served cluster's certificates: {0}")]
    Credentials(String),
    #[error("server failed: {0}")]
    Serve(std::io::Error),
}

/// What a client needs to reach one served cluster, and what the server proves itself with: a
/// CA made for this cluster, a server certificate it signed for the listening address, and a
/// random bearer token. Made fresh per cluster, held in memory only.
#[derive(Clone)]
pub struct Credentials {
    ca_pem: String,
    token: String,
    tls: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for Credentials {
    // The token is a credential: never in a log or an error message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").finish_non_exhaustive()
    }
}

impl Credentials {
    /// A CA, a server certificate for `ip` (and `localhost`) signed by it, and a 256-bit token.
    pub fn generate(ip: IpAddr) -> Result<Self, ServeError> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
        let fail = |what: &str, e: rcgen::Error| ServeError::Credentials(format!("{what}: {e}"));
        let ca_key = KeyPair::generate().map_err(|e| fail("CA key", e))?;
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "kube-emulator-ca");
        let ca_cert = ca.self_signed(&ca_key).map_err(|e| fail("CA", e))?;
        let issuer = Issuer::from_params(&ca, &ca_key);
        let key = KeyPair::generate().map_err(|e| fail("server key", e))?;
        let mut server = CertificateParams::new(vec!["localhost".to_string()])
            .map_err(|e| fail("server certificate", e))?;
        server.subject_alt_names.push(SanType::IpAddress(ip));
        server
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        let cert = server
            .signed_by(&key, &issuer)
            .map_err(|e| fail("server certificate", e))?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ServeError::Credentials(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(
                vec![
                    cert.der().clone(),
                    CertificateDer::from(ca_cert.der().to_vec()),
                ],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .map_err(|e| ServeError::Credentials(e.to_string()))?;
        // HTTP/1.1 only, as the plain server was: exec, attach and port-forward upgrade the
        // connection, which HTTP/2 does not do the same way.
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];

        let mut bytes = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .map_err(|_| ServeError::Credentials("no random bytes for the token".into()))?;
        let token = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Self {
            ca_pem: ca_cert.pem(),
            token,
            tls: Arc::new(tls),
        })
    }

    /// The CA certificate clients verify the server with (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Whether `headers` carry this cluster's bearer token. Their digests are compared, so the
    /// comparison's time tells nothing about the token.
    fn admits(&self, headers: &http::HeaderMap) -> bool {
        let given = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        let digest = |s: &str| ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
        digest(given).as_ref() == digest(&self.token).as_ref()
    }

    /// A kubeconfig for `https://addr` with one context, [`CONTEXT`], holding the CA and the
    /// token (quoted: a token of digits would otherwise be read as a number).
    pub fn kubeconfig(&self, addr: SocketAddr) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        kubeconfig_text(
            &format!("https://{addr}\n    certificate-authority-data: {ca}"),
            &format!("\n    token: \"{}\"", self.token),
        )
    }

    /// A kube-rs configuration for `https://addr` with these credentials, for in-process
    /// clients.
    pub async fn client_config(&self, addr: SocketAddr) -> Result<kube::Config, String> {
        let kc = kube::config::Kubeconfig::from_yaml(&self.kubeconfig(addr))
            .map_err(|e| e.to_string())?;
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| e.to_string())
    }
}

/// A kubeconfig for the pods of a node, naming an API server reachable only inside the node's
/// network namespace, where no other user's process can connect: plain HTTP, no credentials.
pub fn node_kubeconfig(addr: SocketAddr) -> String {
    kubeconfig_text(&format!("http://{addr}"), " {}")
}

/// A kubeconfig with one context, [`CONTEXT`]: `server` is the cluster's server line's value
/// (and any lines after it), `user` what follows `user:`.
fn kubeconfig_text(server: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {CONTEXT}\n  cluster:\n    server: {server}\ncontexts:\n- name: {CONTEXT}\n  context:\n    cluster: {CONTEXT}\n    user: {CONTEXT}\n    namespace: default\ncurrent-context: {CONTEXT}\nusers:\n- name: {CONTEXT}\n  user:{user}\n"
    )
}

/// Writes `text` to `path` readable and writable by this user only: a new file created
/// exclusively with mode 0600 and never through a symbolic link, so no other user can hold it
/// open or point it elsewhere. A regular file of this user already there (an earlier
/// kubeconfig) is replaced; a symbolic link, anything but a regular file, or another user's file
/// is refused.
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
        Ok(meta) => {
            let me = std::fs::metadata("/proc/self")?.uid();
            if meta.file_type().is_symlink() || !meta.is_file() || meta.uid() != me {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!(
                        "{} exists and is not a regular file of this user (a symbolic link, a \
                         device or another user's file); refusing to write a credential there",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_file(path)?;
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(text.as_bytes())
}

/// A loopback listener and the credentials of the cluster that will be served on it.
pub struct Endpoint {
    listener: TcpListener,
    addr: SocketAddr,
    credentials: Credentials,
}

/// Binds a loopback listener (refusing any other address) and makes the cluster's credentials.
pub async fn bind(addr: SocketAddr) -> Result<Endpoint, ServeError> {
    if !addr.ip().is_loopback() {
        return Err(ServeError::NotLoopback(addr));
    }
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::Bind(addr, e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::Bind(addr, e))?;
    let credentials = Credentials::generate(addr.ip())?;
    Ok(Endpoint {
        listener,
        addr,
        credentials,
    })
}

impl Endpoint {
    /// The address bound (the port chosen, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// The kubeconfig of this endpoint (see [`Credentials::kubeconfig`]).
    pub fn kubeconfig(&self) -> String {
        self.credentials.kubeconfig(self.addr)
    }

    /// Writes the kubeconfig to `path`, mode 0600, making its directory.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), ServeError> {
        let err = |e| ServeError::Kubeconfig(path.to_path_buf(), e);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        write_private(path, &self.kubeconfig()).map_err(err)
    }

    /// Serves `cluster` until the task is dropped or the listener fails; dropping the task
    /// closes every connection.
    pub async fn serve(self, cluster: Cluster) -> Result<(), ServeError> {
        let credentials = self.credentials.clone();
        let router = cluster.router().layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let admitted = credentials.admits(req.headers());
                async move {
                    if admitted {
                        next.run(req).await
                    } else {
                        unauthorized()
                    }
                }
            },
        ));
        let acceptor = TlsAcceptor::from(self.credentials.tls.clone());
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                biased;
                accepted = self.listener.accept() => {
                    let (tcp, _) = accepted.map_err(ServeError::Serve)?;
                    // Watch events and port-forward frames are small writes: with Nagle's
                    // algorithm one waits for the client's delayed ACK (about 40 ms) behind the
                    // one before.
                    let _ = tcp.set_nodelay(true);
                    conns.spawn(connection(acceptor.clone(), tcp, router.clone()));
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
    }
}

async fn connection(acceptor: TlsAcceptor, tcp: tokio::net::TcpStream, router: axum::Router) {
    let tls = match acceptor.accept(tcp).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "TLS handshake with a client of the served cluster failed");
            return;
        }
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), TowerToHyperService::new(router))
        .with_upgrades();
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "a connection to the served cluster ended with an error");
    }
}

/// What a real API server answers a request without valid credentials.
fn unauthorized() -> axum::response::Response {
    (
        http::StatusCode::UNAUTHORIZED,
        [(http::header::CONTENT_TYPE, "application/json")],
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serve_refuses_non_loopback_addresses() {
        let err = bind("0.0.0.0:0".parse().unwrap()).await.err().unwrap();
        assert!(matches!(err, ServeError::NotLoopback(_)));
        assert!(err.to_string().contains("only loopback"));
    }

    #[test]
    fn a_request_is_admitted_only_with_the_clusters_own_token() {
        let c = Credentials::generate("127.0.0.1".parse().unwrap()).unwrap();
        let other = Credentials::generate("127.0.0.1".parse().unwrap()).unwrap();
        let with = |v: &str| {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::AUTHORIZATION, v.parse().unwrap());
            h
        };
        assert!(c.admits(&with(&format!("Bearer {}", c.token))));
        assert!(!c.admits(&with(&format!("Bearer {}", other.token))));
        assert!(!c.admits(&with("Bearer ")));
        assert!(!c.admits(&with(&c.token)));
        assert!(!c.admits(&http::HeaderMap::new()));
        assert_eq!(c.token.len(), 64, "256 bits in hex");
        assert!(
            !format!("{c:?}").contains(&c.token),
            "the token stays out of logs"
        );
    }

    #[test]
    fn the_kubeconfig_is_written_for_this_user_only_even_over_a_readable_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, "new").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
    }

    #[test]
    fn the_kubeconfig_is_never_written_through_a_symbolic_link() {
        let dir = tempfile::tempdir().unwrap();
        let theirs = dir.path().join("theirs");
        std::fs::write(&theirs, "theirs").unwrap();
        let path = dir.path().join("kubeconfig");
        std::os::unix::fs::symlink(&theirs, &path).unwrap();
        let err = write_private(&path, "token").unwrap_err().to_string();
        assert!(
            err.contains("refusing to write a credential there"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "theirs");
    }

    #[test]
    fn the_kubeconfig_is_never_written_into_a_device() {
        let err = write_private(Path::new("/dev/null"), "token")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a regular file of this user"), "{err}");
    }
}
