//! `openshell-gateway generate-certs`, the gateway image run by the chart's pre-install hook Job
//! (docs/upstream-facts.md F5.12-F5.14): it creates the gateway's TLS and JWT Secrets with real
//! X.509 material (`rcgen`), with the Secret names, types, keys, SANs and idempotency of
//! upstream's command in Kubernetes mode. The local `--output-dir` mode is not modelled.

use std::collections::BTreeMap;
use std::net::IpAddr;

use base64::Engine;
use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, PKCS_ED25519,
    PublicKeyData, SanType,
};
use serde_json::{Value, json};

use conformance_kube_models::program::ContainerCtx;
use kube_emulator::ResourceRef;

/// The subcommand that selects this program in the gateway image.
pub(crate) const SUBCOMMAND: &str = "generate-certs";

/// Whether the gateway image's argv runs `generate-certs` (with or without the binary in front).
pub(crate) fn is_certgen(argv: &[String]) -> bool {
    argv.first().map(String::as_str) == Some(SUBCOMMAND)
        || argv.get(1).map(String::as_str) == Some(SUBCOMMAND)
}

/// SANs upstream always puts on the server certificate before the `--server-san` ones (F5.13).
const DEFAULT_SERVER_SANS: &[&str] = &[
    "openshell",
    "openshell.openshell.svc",
    "openshell.openshell.svc.cluster.local",
    "localhost",
    "openshell.localhost",
    "*.openshell.localhost",
    "host.docker.internal",
    "host.containers.internal",
    "127.0.0.1",
    "::1",
];

/// The command's flags (F5.12).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct CertgenArgs {
    pub namespace: Option<String>,
    pub server_secret_name: Option<String>,
    pub client_secret_name: Option<String>,
    pub jwt_secret_name: Option<String>,
    pub jwt_only: bool,
    pub server_sans: Vec<String>,
    pub dry_run: bool,
}

/// A usage error (clap's exit code 2) or a failure (exit code 1), with its message.
#[derive(Debug, PartialEq)]
pub(crate) enum CertgenError {
    Usage(String),
    Failed(String),
}

impl CertgenError {
    fn exit_code(&self) -> i32 {
        match self {
            Self::Usage(_) => 2,
            Self::Failed(_) => 1,
        }
    }

    fn message(&self) -> &str {
        match self {
            Self::Usage(m) | Self::Failed(m) => m,
        }
    }
}

/// Parses the arguments after `generate-certs`; `pod_namespace` is `POD_NAMESPACE`, the
/// default of `--namespace`.
pub(crate) fn parse(
    args: &[String],
    pod_namespace: Option<&str>,
) -> Result<CertgenArgs, CertgenError> {
    let mut out = CertgenArgs {
        namespace: pod_namespace.map(String::from),
        ..CertgenArgs::default()
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String, CertgenError> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| {
                    CertgenError::Usage(format!(
                        "error: a value is required for '{name} <{}>' but none was supplied",
                        name.trim_start_matches("--")
                            .to_uppercase()
                            .replace('-', "_")
                    ))
                })
        };
        match flag {
            "--namespace" => out.namespace = Some(value(flag)?),
            "--server-secret-name" => out.server_secret_name = Some(value(flag)?),
            "--client-secret-name" => out.client_secret_name = Some(value(flag)?),
            "--jwt-secret-name" => out.jwt_secret_name = Some(value(flag)?),
            "--server-san" => out.server_sans.push(value(flag)?),
            "--jwt-only" => out.jwt_only = true,
            "--dry-run" => out.dry_run = true,
            "--output-dir" => {
                return Err(CertgenError::Usage(
                    "error: --output-dir (local mode) is not modelled; the chart's hook Job uses Kubernetes mode".into(),
                ));
            }
            other => {
                return Err(CertgenError::Usage(format!(
                    "error: unexpected argument '{other}' found"
                )));
            }
        }
    }
    if out.dry_run {
        return Ok(out);
    }
    let missing = |what: &str| {
        CertgenError::Usage(format!(
            "error: the following required arguments were not provided: {what}"
        ))
    };
    if out.namespace.is_none() {
        return Err(missing("--namespace <NAMESPACE>"));
    }
    if !out.jwt_only && out.server_secret_name.is_none() {
        return Err(missing("--server-secret-name <SERVER_SECRET_NAME>"));
    }
    if !out.jwt_only && out.client_secret_name.is_none() {
        return Err(missing("--client-secret-name <CLIENT_SECRET_NAME>"));
    }
    if out.jwt_secret_name.is_none() {
        return Err(missing("--jwt-secret-name <JWT_SECRET_NAME>"));
    }
    Ok(out)
}

/// The generated material, PEM-encoded (F5.13).
pub(crate) struct Pki {
    pub ca_cert: String,
    pub server_cert: String,
    pub server_key: String,
    pub client_cert: String,
    pub client_key: String,
    pub jwt_signing_key: String,
    pub jwt_public_key: String,
    pub jwt_kid: String,
}

fn add_san(sans: &mut Vec<SanType>, value: &str) {
    if let Ok(ip) = value.parse::<IpAddr>() {
        sans.push(SanType::IpAddress(ip));
    } else if let Ok(dns) = Ia5String::try_from(value) {
        sans.push(SanType::DnsName(dns));
    }
}

/// A CA, a server certificate (default SANs then `extra_sans`) and a client certificate signed
/// by it, and an Ed25519 JWT key whose kid is the first 16 bytes of the SHA-256 of its public
/// key, in hex (F5.13).
pub(crate) fn generate(extra_sans: &[String]) -> Result<Pki, String> {
    fn err(what: &'static str) -> impl Fn(rcgen::Error) -> String {
        move |e| format!("failed to {what}: {e}")
    }
    let ca_key = KeyPair::generate().map_err(err("generate CA key"))?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err("create CA params"))?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::OrganizationName, "openshell");
    ca.distinguished_name
        .push(DnType::CommonName, "openshell-ca");
    let ca_cert = ca
        .self_signed(&ca_key)
        .map_err(err("self-sign CA certificate"))?;
    let issuer = Issuer::from_params(&ca, &ca_key);

    let server_key = KeyPair::generate().map_err(err("generate server key"))?;
    let mut server =
        CertificateParams::new(Vec::<String>::new()).map_err(err("create server params"))?;
    for s in DEFAULT_SERVER_SANS
        .iter()
        .copied()
        .chain(extra_sans.iter().map(String::as_str))
    {
        add_san(&mut server.subject_alt_names, s);
    }
    server
        .distinguished_name
        .push(DnType::CommonName, "openshell-server");
    let server_cert = server
        .signed_by(&server_key, &issuer)
        .map_err(err("sign server certificate"))?;

    let client_key = KeyPair::generate().map_err(err("generate client key"))?;
    let mut client =
        CertificateParams::new(Vec::<String>::new()).map_err(err("create client params"))?;
    client
        .distinguished_name
        .push(DnType::CommonName, "openshell-client");
    client
        .distinguished_name
        .push(DnType::OrganizationalUnitName, "openshell-user");
    let client_cert = client
        .signed_by(&client_key, &issuer)
        .map_err(err("sign client certificate"))?;

    let jwt = KeyPair::generate_for(&PKCS_ED25519).map_err(err("generate JWT signing key"))?;
    let digest = ring::digest::digest(&ring::digest::SHA256, &jwt.subject_public_key_info());
    let jwt_kid = digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(Pki {
        ca_cert: ca_cert.pem(),
        server_cert: server_cert.pem(),
        server_key: server_key.serialize_pem(),
        client_cert: client_cert.pem(),
        client_key: client_key.serialize_pem(),
        jwt_signing_key: jwt.serialize_pem(),
        jwt_public_key: jwt.public_key_pem(),
        jwt_kid,
    })
}

fn secrets() -> ResourceRef {
    ResourceRef::new("", "v1", "secrets")
}

fn secret(name: &str, type_: &str, data: &[(&str, &str)]) -> Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    let data: BTreeMap<&str, String> = data.iter().map(|(k, v)| (*k, b64.encode(v))).collect();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": type_, "data": data})
}

fn tls_secret(name: &str, cert: &str, key: &str, ca: &str) -> Value {
    secret(
        name,
        "kubernetes.io/tls",
        &[("tls.crt", cert), ("tls.key", key), ("ca.crt", ca)],
    )
}

fn jwt_secret(name: &str, pki: &Pki) -> Value {
    secret(
        name,
        "Opaque",
        &[
            ("signing.pem", &pki.jwt_signing_key),
            ("public.pem", &pki.jwt_public_key),
            ("kid", &pki.jwt_kid),
        ],
    )
}

/// Kubernetes mode against the cluster (F5.14): all three exist → skip; both TLS Secrets but
/// no JWT one → create the JWT Secret; none → create all; any other mix → error with the
/// recovery command. `--jwt-only` creates the JWT Secret unless it exists. Returns the log
/// line of success.
pub(crate) fn apply(
    cluster: &kube_emulator::Cluster,
    args: &CertgenArgs,
) -> Result<String, String> {
    let ns = args.namespace.as_deref().unwrap_or_default();
    let jwt_name = args.jwt_secret_name.as_deref().unwrap_or_default();
    let exists = |name: &str| cluster.get(&secrets(), Some(ns), name).is_ok();
    let create = |obj: Value| {
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        cluster
            .create(&secrets(), Some(ns), obj)
            .map(|_| ())
            .map_err(|e| format!("failed to create secret {name}: {}", e.message))
    };
    let pki = generate(&args.server_sans)?;
    if args.jwt_only {
        if exists(jwt_name) {
            return Ok(format!(
                "JWT signing secret already exists, skipping. namespace={ns} jwt={jwt_name}"
            ));
        }
        create(jwt_secret(jwt_name, &pki))?;
        return Ok(format!(
            "JWT signing secret created. namespace={ns} jwt={jwt_name}"
        ));
    }
    let server = args.server_secret_name.as_deref().unwrap_or_default();
    let client = args.client_secret_name.as_deref().unwrap_or_default();
    match (exists(server), exists(client), exists(jwt_name)) {
        (true, true, true) => Ok(format!(
            "PKI secrets already exist, skipping. namespace={ns} server={server} client={client} jwt={jwt_name}"
        )),
        (true, true, false) => {
            create(jwt_secret(jwt_name, &pki))?;
            Ok(format!(
                "JWT signing secret created for existing TLS install. namespace={ns} jwt={jwt_name}"
            ))
        }
        (false, false, false) => {
            create(tls_secret(
                server,
                &pki.server_cert,
                &pki.server_key,
                &pki.ca_cert,
            ))?;
            create(tls_secret(
                client,
                &pki.client_cert,
                &pki.client_key,
                &pki.ca_cert,
            ))?;
            create(jwt_secret(jwt_name, &pki))?;
            Ok(format!(
                "PKI secrets created. namespace={ns} server={server} client={client} jwt={jwt_name}"
            ))
        }
        _ => Err(format!(
            "partial PKI state in namespace {ns}: only some of {server} / {client} / {jwt_name} exist. Recover with: kubectl delete secret -n {ns} {server} {client} {jwt_name}"
        )),
    }
}

/// Runs the command in a container: logs what it did, exits 0, or logs the error and exits
/// non-zero (1 for a failure, 2 for bad arguments).
pub(crate) async fn run(ctx: ContainerCtx) -> i32 {
    let at = ctx
        .argv
        .iter()
        .position(|a| a == SUBCOMMAND)
        .map_or(ctx.argv.len(), |i| i + 1);
    let result = parse(&ctx.argv[at..], ctx.env("POD_NAMESPACE")).and_then(|args| {
        if args.dry_run {
            let pki = generate(&args.server_sans).map_err(CertgenError::Failed)?;
            return Ok(format!(
                "{}{}{}{}",
                pki.ca_cert, pki.server_cert, pki.client_cert, pki.jwt_public_key
            ));
        }
        apply(&ctx.cluster, &args).map_err(CertgenError::Failed)
    });
    match result {
        Ok(line) => {
            ctx.log(&line);
            0
        }
        Err(e) => {
            ctx.log(&format!("Error: {}", e.message()));
            e.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn chart_args() -> CertgenArgs {
        parse(
            &argv(
                "--server-secret-name=srv --client-secret-name=cli --jwt-secret-name=jwt --server-san=127.0.0.1 --server-san=gw.example",
            ),
            Some("ns1"),
        )
        .unwrap()
    }

    #[test]
    fn the_chart_hook_arguments_parse_with_the_namespace_from_the_pod() {
        let a = chart_args();
        assert_eq!(a.namespace.as_deref(), Some("ns1"));
        assert_eq!(a.server_secret_name.as_deref(), Some("srv"));
        assert_eq!(a.client_secret_name.as_deref(), Some("cli"));
        assert_eq!(a.jwt_secret_name.as_deref(), Some("jwt"));
        assert_eq!(a.server_sans, ["127.0.0.1", "gw.example"]);
        assert!(is_certgen(&argv(
            "/usr/local/bin/openshell-gateway generate-certs"
        )));
        assert!(!is_certgen(&argv("--config /etc/openshell/gateway.toml")));
    }

    #[test]
    fn missing_or_unknown_flags_are_usage_errors_naming_the_flag() {
        let e = parse(&argv("--jwt-secret-name=j"), Some("ns")).unwrap_err();
        assert!(e.message().contains("--server-secret-name"), "{e:?}");
        assert_eq!(e.exit_code(), 2);
        let e = parse(&argv("--jwt-only --jwt-secret-name=j --bogus"), Some("ns")).unwrap_err();
        assert!(e.message().contains("'--bogus'"), "{e:?}");
        let e = parse(&argv("--jwt-only --jwt-secret-name=j"), None).unwrap_err();
        assert!(e.message().contains("--namespace"), "{e:?}");
        // --jwt-only needs no TLS secret names.
        assert!(parse(&argv("--jwt-only --jwt-secret-name=j"), Some("ns")).is_ok());
    }

    fn secret_keys(c: &kube_emulator::Cluster, name: &str) -> Option<(String, Vec<String>)> {
        let s = c.get(&secrets(), Some("ns1"), name).ok()?;
        Some((
            s["type"].as_str().unwrap_or_default().to_string(),
            s["data"].as_object()?.keys().cloned().collect(),
        ))
    }

    #[tokio::test]
    async fn certgen_creates_two_tls_secrets_and_a_jwt_secret_then_skips_when_all_exist() {
        let c = kube_emulator::Cluster::default();
        c.create(
            &ResourceRef::new("", "v1", "namespaces"),
            None,
            json!({"metadata": {"name": "ns1"}}),
        )
        .unwrap();
        let line = apply(&c, &chart_args()).unwrap();
        assert!(line.starts_with("PKI secrets created."), "{line}");
        let tls = (
            "kubernetes.io/tls".to_string(),
            argv("ca.crt tls.crt tls.key"),
        );
        assert_eq!(secret_keys(&c, "srv"), Some(tls.clone()));
        assert_eq!(secret_keys(&c, "cli"), Some(tls));
        assert_eq!(
            secret_keys(&c, "jwt"),
            Some(("Opaque".into(), argv("kid public.pem signing.pem")))
        );
        let before = c.get(&secrets(), Some("ns1"), "srv").unwrap();
        let line = apply(&c, &chart_args()).unwrap();
        assert!(line.starts_with("PKI secrets already exist"), "{line}");
        assert_eq!(c.get(&secrets(), Some("ns1"), "srv").unwrap(), before);
    }

    #[tokio::test]
    async fn certgen_adds_only_the_jwt_secret_to_a_tls_install_and_refuses_a_partial_one() {
        let c = kube_emulator::Cluster::default();
        c.create(
            &ResourceRef::new("", "v1", "namespaces"),
            None,
            json!({"metadata": {"name": "ns1"}}),
        )
        .unwrap();
        apply(&c, &chart_args()).unwrap();
        c.delete(&secrets(), Some("ns1"), "jwt", &Default::default())
            .unwrap();
        let line = apply(&c, &chart_args()).unwrap();
        assert!(line.starts_with("JWT signing secret created for existing TLS install"));
        c.delete(&secrets(), Some("ns1"), "cli", &Default::default())
            .unwrap();
        let err = apply(&c, &chart_args()).unwrap_err();
        assert!(
            err.contains("partial PKI state in namespace ns1")
                && err.contains("kubectl delete secret -n ns1 srv cli jwt"),
            "{err}"
        );
        assert!(secret_keys(&c, "cli").is_none());
    }

    #[test]
    fn the_jwt_kid_is_sixteen_bytes_of_hex() {
        let pki = generate(&[]).unwrap();
        assert_eq!(pki.jwt_kid.len(), 32);
        assert!(pki.jwt_kid.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(pki.jwt_signing_key.contains("BEGIN PRIVATE KEY"));
        assert!(pki.jwt_public_key.contains("BEGIN PUBLIC KEY"));
    }
}
