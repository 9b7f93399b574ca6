//! What a run checks before anything of an earlier run is removed or started: the Agent Sandbox
//! release manifest, downloaded into the private directory (a release that does not exist is
//! the user's mistake, exit 2; a download that fails is the machine's, exit 3), and the
//! `openshell` CLI, run once for its version.

use std::path::Path;
use std::time::Duration;

use conformance_core::error::{Error, Result};
use http_body_util::BodyExt as _;

use crate::options::{AgentSandboxSource, ChartSource, RealOptions};
use crate::pins;

/// Test knob: `OPENSHELL_CONFORMANCE_TEST_AGENT_SANDBOX_RELEASES` replaces the base URL of the
/// Agent Sandbox releases (plain `http://` allowed), so a test can answer the download itself.
/// Not for ordinary use.
pub const RELEASES_KNOB: &str = "OPENSHELL_CONFORMANCE_TEST_AGENT_SANDBOX_RELEASES";

/// How long the download may take, redirects included.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// GitHub answers a release asset with a redirect to its storage; a few are plenty.
const MAX_REDIRECTS: usize = 5;

/// Downloads the release manifest `opts` would have kubectl apply from its URL into the private
/// directory (which it creates), and points `opts` at that file, so the install applies what
/// was checked here. `typed`: the user named the version (`--agent-sandbox-version`), so a
/// release that does not exist is theirs to fix. A local `--agent-sandbox-manifest` was checked
/// with the other paths and is left as it is.
pub async fn agent_sandbox_manifest(opts: &mut RealOptions, typed: bool) -> Result<()> {
    let AgentSandboxSource::Release {
        version,
        downloaded,
    } = &opts.agent_sandbox
    else {
        return Ok(());
    };
    if downloaded.is_some() {
        return Ok(());
    }
    // This client does not go through a proxy (docs/dependencies.md D15); kubectl does. Behind
    // one, kubectl downloads the release at install, as it did before this check existed.
    if let Some(var) = proxy_in(|v| std::env::var_os(v)) {
        tracing::info!(
            %var,
            "a proxy is set: the Agent Sandbox release is downloaded by kubectl at install, not checked before the run"
        );
        return Ok(());
    }
    let version = version.clone();
    let (base, knob) = match std::env::var(RELEASES_KNOB) {
        Ok(base) => (base, true),
        Err(_) => (pins::AGENT_SANDBOX_RELEASES.to_string(), false),
    };
    let url = pins::agent_sandbox_manifest_url_at(&base, &version);
    let flag = if typed {
        format!("--agent-sandbox-version {version}")
    } else {
        format!("Agent Sandbox {version} (the release for the chart)")
    };
    let body = match tokio::time::timeout(DOWNLOAD_TIMEOUT, get(&url, knob)).await {
        Err(_) => Err(format!(
            "no answer within {}",
            humantime::format_duration(DOWNLOAD_TIMEOUT)
        )),
        Ok(r) => r,
    };
    let body = match body {
        Ok(Got::Body(body)) => Ok(body),
        Ok(Got::Status(404)) if typed => {
            return Err(Error::usage(format!(
                "{flag}: Agent Sandbox has no such release ({url} answered 404 Not Found); \
                 give a published release such as {}, or --agent-sandbox-manifest FILE",
                pins::default_agent_sandbox()
            )));
        }
        Ok(Got::Status(code)) => Err(format!("{url} answered HTTP {code}")),
        Err(why) => Err(why),
    }
    .map_err(|why| {
        Error::infra(format!(
            "{flag}: cannot download its manifest before the run starts: {why}; offline, give \
             the file with --agent-sandbox-manifest FILE"
        ))
    })?;
    let text =
        String::from_utf8(body).map_err(|_| Error::infra(format!("{flag}: {url} is not text")))?;
    if let Err(why) = crate::options::defines_sandbox_crd(&text) {
        return Err(Error::infra(format!("{flag}: {url}: {why}")));
    }
    crate::cluster::create_private_dir(opts)?;
    let path = opts.private_dir.join(format!(
        "agent-sandbox-{version}-{}",
        pins::agent_sandbox_asset(&version).unwrap_or("sandbox.yaml")
    ));
    crate::private::write_secret_file(&path, text.as_bytes())
        .map_err(|e| Error::infra_from(format!("{flag}: cannot keep {}", path.display()), e))?;
    opts.agent_sandbox = AgentSandboxSource::Release {
        version,
        downloaded: Some(path),
    };
    Ok(())
}

/// How long `helm pull` of the chart may take (real time at any scale: helm is not on the
/// harness's clock).
const PULL_TIMEOUT: Duration = Duration::from_secs(300);

/// Pulls the published chart (`--chart-version`, or the release's) into the private directory
/// with `helm pull`, which honours the proxy variables, before anything of an earlier run is
/// removed: a version the registry does not have is the user's mistake when it is not the
/// harness's own pin (exit 2), a registry out of reach the machine's (exit 3), either way with the earlier
/// run's files still in place. The install then uses the pulled chart. A local `--chart-path` was
/// checked with the other paths and is left as it is.
pub async fn chart(
    opts: &mut RealOptions,
    runner: &dyn crate::command::CommandRunner,
) -> Result<()> {
    let ChartSource::Oci {
        reference,
        version,
        pulled: None,
    } = &opts.chart
    else {
        return Ok(());
    };
    let (reference, version) = (reference.clone(), version.clone());
    crate::cluster::create_private_dir(opts)?;
    let dest = opts.private_dir.join("chart");
    let cmd = crate::command::Cmd::new("helm")
        .args(["pull", reference.as_str(), "--version", version.as_str()])
        .args(["--untar", "--untardir"])
        .arg(dest.display().to_string())
        .timeout(PULL_TIMEOUT);
    let out = runner.run(&cmd).await.map_err(|e| {
        Error::infra_from(format!("cannot pull the chart {reference} {version}"), e)
    })?;
    if !out.success() {
        let why = out.stderr.trim();
        // What helm says for an OCI tag or a repository version that is not there.
        let missing = ["not found", "manifest unknown"]
            .iter()
            .any(|w| why.to_ascii_lowercase().contains(w));
        if missing && version != pins::chart_version() {
            return Err(Error::usage(format!(
                "--chart-version {version}: {reference} has no such version ({why}); give a \
                 published one such as {}, or --chart-path DIR",
                pins::chart_version()
            )));
        }
        return Err(Error::infra(format!(
            "cannot pull the chart {reference} {version} before the run starts: {why}; offline, \
             give it with --chart-path DIR"
        )));
    }
    // helm unpacks the chart into one directory named after it.
    let unpacked = std::fs::read_dir(&dest)
        .ok()
        .and_then(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .find(|p| p.is_dir())
        })
        .ok_or_else(|| {
            Error::infra(format!(
                "helm pull {reference} {version} left no chart in {}",
                dest.display()
            ))
        })?;
    opts.chart = ChartSource::Oci {
        reference,
        version,
        pulled: Some(unpacked),
    };
    Ok(())
}

/// The proxy variable set in the environment `env` reads, if any (as kubectl reads them; plain
/// `HTTP_PROXY` does not apply to an https download).
fn proxy_in(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<&'static str> {
    ["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]
        .into_iter()
        .find(|v| env(v).is_some_and(|x| !x.is_empty()))
}

enum Got {
    Body(Vec<u8>),
    Status(u16),
}

/// GET `url`, redirects followed, the body bounded as a manifest the user names is
/// (docs/architecture.md: every read bounded). `plain`: `http://` allowed (the test knob).
async fn get(url: &str, plain: bool) -> std::result::Result<Got, String> {
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(tokio_rustls::rustls::crypto::ring::default_provider())
        .map_err(|e| format!("no TLS root certificates on this machine: {e}"))?;
    let connector = if plain {
        builder.https_or_http().enable_http1().build()
    } else {
        builder.https_only().enable_http1().build()
    };
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, http_body_util::Empty<bytes::Bytes>>(connector);
    let mut uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    for _ in 0..=MAX_REDIRECTS {
        let req = http::Request::get(uri.clone())
            .header(http::header::USER_AGENT, "openshell-conformance")
            .body(http_body_util::Empty::new())
            .map_err(|e| format!("{uri}: {e}"))?;
        let resp = client
            .request(req)
            .await
            .map_err(|e| format!("{uri}: {}", conformance_core::error::one_line(&e)))?;
        let status = resp.status();
        if status.is_redirection() {
            let location = resp
                .headers()
                .get(http::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| format!("{uri} answered {status} without a Location"))?;
            uri = location
                .parse()
                .map_err(|e| format!("{uri} redirected to {location}: {e}"))?;
            continue;
        }
        if !status.is_success() {
            return Ok(Got::Status(status.as_u16()));
        }
        let cap = conformance_core::user_file::Kind::Manifest.cap();
        let body = http_body_util::Limited::new(resp.into_body(), cap as usize)
            .collect()
            .await
            .map_err(|e| format!("{uri}: {e}"))?;
        return Ok(Got::Body(body.to_bytes().to_vec()));
    }
    Err(format!("more than {MAX_REDIRECTS} redirects from {url}"))
}

/// How long `openshell --version` may take: it reads nothing and contacts nothing.
const VERSION_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `bin --version` once, before the run starts, and refuses a program that is not the
/// openshell CLI (exit 2: missing, not executable, or answering something else), so a wrong
/// `--openshell-bin` does not end the first case with an install error after the earlier run's
/// files were removed. The default name missing from `PATH` is the machine's lack (exit 3).
pub async fn openshell_cli(bin: &str) -> Result<semver::Version> {
    let flag = format!("--openshell-bin {bin}");
    let bare = Path::new(bin).components().count() == 1;
    let default = bin == crate::options::DEFAULT_OPENSHELL_BIN;
    let run = tokio::process::Command::new(bin)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(VERSION_TIMEOUT, run).await {
        Err(_) => {
            return Err(Error::usage(format!(
                "{flag}: `{bin} --version` did not answer within {}; give the openshell CLI binary",
                humantime::format_duration(VERSION_TIMEOUT)
            )));
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound && bare && default => {
            return Err(Error::infra(format!(
                "the openshell CLI (`{bin}`) is not on PATH; install it or pass --openshell-bin FILE"
            )));
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound && bare => {
            return Err(Error::usage(format!(
                "{flag}: no `{bin}` on PATH; give the openshell CLI binary (a path, or a name on PATH)"
            )));
        }
        Ok(Err(e)) => {
            return Err(Error::usage_from(
                format!("{flag}: cannot be run; give the openshell CLI binary"),
                e,
            ));
        }
        Ok(Ok(out)) => out,
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let version = crate::cli::parse_version(&stdout)
        .filter(|_| out.status.success() && stdout.to_ascii_lowercase().contains("openshell"));
    version.ok_or_else(|| {
        let said = format!("{}{}", stdout, String::from_utf8_lossy(&out.stderr));
        let said: String = said
            .trim()
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect();
        Error::usage(format!(
            "{flag}: not the openshell CLI (`{bin} --version` {}: {said:?}, where the CLI prints \
             `openshell X.Y.Z`); give the openshell CLI binary",
            match out.status.code() {
                Some(0) => "exited 0".to_string(),
                Some(c) => format!("exited {c}"),
                None => "was killed".to_string(),
            }
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{CmdOutput, ScriptedRunner, Unscripted};
    use crate::options::{Provider, RealArgs};

    fn opts(private: &Path, version: &str) -> RealOptions {
        let a = RealArgs {
            cluster_name: pins::CLUSTER_NAME.into(),
            chart: pins::CHART_REF.into(),
            chart_version: version.into(),
            agent_sandbox_version: pins::default_agent_sandbox().into(),
            openshell_bin: "openshell".into(),
            private_dir: Some(private.to_path_buf()),
            ..RealArgs::default()
        };
        a.resolve(Provider::Kind, "r1", "/repo").unwrap()
    }

    fn helm_says(code: i32, stderr: &str) -> ScriptedRunner {
        let runner = ScriptedRunner::new(Unscripted::Fail);
        runner.respond(
            "helm pull",
            CmdOutput {
                code,
                stderr: stderr.into(),
                ..CmdOutput::default()
            },
        );
        runner
    }

    #[tokio::test]
    async fn a_chart_version_the_registry_lacks_is_the_users_mistake_and_a_registry_out_of_reach_the_machines()
     {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        let missing = "Error: ghcr.io/nvidia/openshell/helm-chart:9.9.9: not found";
        let mut o = opts(&private, "9.9.9");
        let e = chart(&mut o, &helm_says(1, missing)).await.unwrap_err();
        assert_eq!(e.exit_status().code(), 2, "{e}");
        assert!(e.to_string().contains("--chart-version 9.9.9"), "{e}");
        let offline = "Error: failed to do request: dial tcp: lookup ghcr.io: no such host";
        let mut o = opts(&private, "9.9.9");
        let e = chart(&mut o, &helm_says(1, offline)).await.unwrap_err();
        assert_eq!(e.exit_status().code(), 3, "{e}");
        assert!(e.to_string().contains("--chart-path"), "{e}");
        // The harness's own pin missing from the registry is not the user's doing.
        let mut o = opts(&private, pins::chart_version());
        let e = chart(&mut o, &helm_says(1, missing)).await.unwrap_err();
        assert_eq!(e.exit_status().code(), 3, "{e}");
    }

    #[tokio::test]
    async fn a_pulled_chart_is_kept_in_the_private_directory_for_the_install_and_a_local_chart_is_not_pulled()
     {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        crate::private::create_private_dir(&private).unwrap();
        // What `helm pull --untar` leaves: one directory named after the chart.
        std::fs::create_dir_all(private.join("chart/openshell")).unwrap();
        let runner = helm_says(0, "");
        let mut o = opts(&private, pins::chart_version());
        chart(&mut o, &runner).await.unwrap();
        let line = runner.lines().join("\n");
        assert!(
            line.starts_with(&format!(
                "helm pull {} --version {} --untar --untardir",
                pins::CHART_REF,
                pins::chart_version()
            )),
            "{line}"
        );
        assert!(
            matches!(&o.chart, ChartSource::Oci { pulled: Some(p), .. } if p.ends_with("chart/openshell")),
            "{:?}",
            o.chart
        );
        // Pulled once: a second call leaves it.
        chart(&mut o, &runner).await.unwrap();
        assert_eq!(runner.lines().len(), 1);
        let mut local = opts(&private, pins::chart_version());
        local.chart = ChartSource::Local {
            path: dir.path().into(),
        };
        let quiet = ScriptedRunner::new(Unscripted::Fail);
        chart(&mut local, &quiet).await.unwrap();
        assert!(quiet.lines().is_empty());
    }

    #[test]
    fn behind_an_https_proxy_the_release_is_left_to_kubectl_and_a_plain_http_proxy_is_no_reason() {
        let env = |set: &'static [(&'static str, &'static str)]| {
            move |v: &str| {
                set.iter()
                    .find(|(k, _)| *k == v)
                    .map(|(_, x)| std::ffi::OsString::from(x))
            }
        };
        assert_eq!(
            proxy_in(env(&[("HTTPS_PROXY", "http://proxy:3128")])),
            Some("HTTPS_PROXY")
        );
        assert_eq!(
            proxy_in(env(&[("all_proxy", "socks5://p:1080")])),
            Some("all_proxy")
        );
        assert_eq!(proxy_in(env(&[("HTTP_PROXY", "http://proxy:3128")])), None);
        assert_eq!(proxy_in(env(&[("HTTPS_PROXY", "")])), None);
    }
}
