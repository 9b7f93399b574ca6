//! The `openshell` CLI as the user path: every sandbox action goes through the CLI binary, with
//! a per-call timeout, an isolated configuration directory (`XDG_CONFIG_HOME`) and JSON output
//! (never human tables). Shapes follow docs/upstream-facts.md section 6.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::command::{Cmd, CmdOutput, CommandRunner};
use conformance_core::phase::Phase;
use conformance_core::target::{
    Capability, ExecResult, RestartPolicy, SandboxSpec, SandboxView, TargetError, TargetResult,
};

/// One entry of `sandbox list -o json` / `sandbox get -o json` (`sandbox_to_json`,
/// docs/upstream-facts.md F6.4). Unknown fields are ignored so newer CLIs still parse.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub(crate) struct SandboxJson {
    #[serde(default)]
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub workspace: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Absent reads as the protocol's zero value, Unspecified; a name this harness does not
    /// know is kept as printed ([`Phase::Other`]).
    #[serde(default)]
    pub phase: Phase,
    #[serde(default)]
    pub created_at: Option<serde_json::Value>,
    /// 0.1.x builds with a restart policy add these (docs/upstream-facts.md F9.1); absent at
    /// 0.0.111.
    #[serde(default)]
    pub restart_count: Option<u32>,
    #[serde(default)]
    pub exit_code: Option<i32>,
}

impl SandboxJson {
    pub(crate) fn view(&self) -> SandboxView {
        SandboxView {
            name: self.name.clone(),
            phase: self.phase.clone(),
            reason: None,
            message: None,
            exit_code: self.exit_code,
        }
    }
}

/// Parses `sandbox get -o json`.
pub(crate) fn parse_get(stdout: &str) -> TargetResult<SandboxJson> {
    serde_json::from_str(stdout.trim())
        .map_err(|e| TargetError::infra_from("`sandbox get -o json`", e))
}

/// Parses `sandbox list -o json` (a JSON array).
pub(crate) fn parse_list(stdout: &str) -> TargetResult<Vec<SandboxJson>> {
    let t = stdout.trim();
    if t.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(t).map_err(|e| TargetError::infra_from("`sandbox list -o json`", e))
}

/// A gRPC status the CLI printed on failure, as tonic formats it
/// (`status: FailedPrecondition, message: "…"`), or a known refusal text.
pub(crate) fn parse_refusal(stderr: &str) -> Option<(String, String)> {
    if let Some(i) = stderr.find("status: ") {
        let rest = &stderr[i + "status: ".len()..];
        let code: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        let message = rest
            .find("message: \"")
            .map(|j| {
                let m = &rest[j + "message: \"".len()..];
                m[..m.find('"').unwrap_or(m.len())].to_string()
            })
            .unwrap_or_default();
        if !code.is_empty() {
            return Some((code, message));
        }
    }
    // Messages of the stop/start/exec rules (docs/upstream-facts.md F1.9, F1.10, F1.12) without a
    // status prefix.
    for needle in [
        "sandbox must be Ready to stop",
        "sandbox must be Stopped to start",
        "sandbox is not ready",
    ] {
        if let Some(line) = stderr.lines().find(|l| l.contains(needle)) {
            return Some(("FailedPrecondition".into(), line.trim().to_string()));
        }
    }
    None
}

fn not_found(out: &CmdOutput) -> bool {
    let text = format!("{}{}", out.stdout, out.stderr).to_lowercase();
    text.contains("not found") || text.contains("notfound")
}

/// The first semantic version in a text such as `openshell 0.0.111` or `openshell 0.1.6-dev.3+g1`.
pub(crate) fn parse_version(text: &str) -> Option<semver::Version> {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .map(|w| w.trim_start_matches('v'))
        .find_map(|w| semver::Version::parse(w).ok())
}

/// What the CLI supports, read from `--help` texts (docs/upstream-facts.md F6.8: no restart-policy
/// flag at 0.0.111; F9.1: `--restart-policy` on the branch that adds it).
pub(crate) fn capabilities_from_help(create_help: &str) -> BTreeSet<Capability> {
    let mut caps = BTreeSet::new();
    if create_help.contains("--restart-policy") {
        caps.insert(Capability::RestartPolicy);
    }
    // A trailing `-- CMD` becomes the canonical main process.
    if create_help.contains("[COMMAND]")
        || create_help.contains("-- ")
        || create_help.contains("<COMMAND>")
    {
        caps.insert(Capability::MainCommand);
    }
    caps
}

/// Drives one `openshell` binary against one gateway, with a private configuration directory.
#[derive(Clone)]
pub(crate) struct OpenShellCli {
    runner: Arc<dyn CommandRunner>,
    pub program: String,
    /// `XDG_CONFIG_HOME` for every call: the run's own, never the user's.
    pub config_home: PathBuf,
    /// The registered gateway name (`OPENSHELL_GATEWAY`).
    pub gateway: String,
    pub call_timeout: Duration,
    pub lifecycle_timeout: Duration,
}

impl OpenShellCli {
    pub(crate) fn new(
        runner: Arc<dyn CommandRunner>,
        program: &str,
        config_home: PathBuf,
        gateway: &str,
    ) -> Self {
        Self {
            runner,
            program: program.to_string(),
            config_home,
            gateway: gateway.to_string(),
            call_timeout: Duration::from_secs(60),
            lifecycle_timeout: Duration::from_secs(330),
        }
    }

    /// A CLI call with the isolated configuration.
    pub(crate) fn cmd<I, S>(&self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Cmd::new(&self.program)
            .args(args)
            .env("XDG_CONFIG_HOME", self.config_home.display().to_string())
            .env("OPENSHELL_GATEWAY", &self.gateway)
            .timeout(self.call_timeout)
    }

    /// Registers the port-forwarded gateway (docs/upstream-facts.md F6.2):
    /// `http://` for plaintext; `https://` with `--local` and the mTLS files already in place.
    pub(crate) fn gateway_add_cmd(&self, port: impl std::fmt::Display, tls: bool) -> Cmd {
        let scheme = if tls { "https" } else { "http" };
        let mut c = self.cmd([
            "gateway".to_string(),
            "add".to_string(),
            format!("{scheme}://127.0.0.1:{port}"),
            "--name".to_string(),
            self.gateway.clone(),
        ]);
        if tls {
            c = c.arg("--local");
        }
        c
    }

    /// Where the CLI looks for the client certificate of a gateway (docs/upstream-facts.md F6.2).
    pub(crate) fn mtls_dir(&self) -> PathBuf {
        self.config_home
            .join("openshell/gateways")
            .join(&self.gateway)
            .join("mtls")
    }

    pub(crate) fn create_cmd(
        &self,
        spec: &SandboxSpec,
        caps: &BTreeSet<Capability>,
    ) -> TargetResult<Cmd> {
        let mut c = self.cmd(["sandbox", "create", "--name", &spec.name]);
        for (k, v) in &spec.labels {
            c = c.arg("--label").arg(format!("{k}={v}"));
        }
        if let Some(p) = spec.restart_policy {
            if !caps.contains(&Capability::RestartPolicy) {
                return Err(TargetError::Unsupported(
                    "this openshell CLI has no --restart-policy (added after 0.0.111)".into(),
                ));
            }
            let v = match p {
                RestartPolicy::Never => "never",
                RestartPolicy::OnFailure => "on-failure",
                RestartPolicy::Always => "always",
            };
            c = c.args(["--restart-policy", v]);
        }
        c = match &spec.command {
            // `-o json` conflicts with a trailing command, so a main command detaches and the
            // state is read back with `get` (docs/upstream-facts.md F6.3).
            Some(argv) => c.arg("--detach").arg("--").args(argv.iter().cloned()),
            None => c.args(["-o", "json"]),
        };
        Ok(c.timeout(self.lifecycle_timeout))
    }

    async fn call(&self, cmd: Cmd) -> TargetResult<CmdOutput> {
        self.runner
            .run(&cmd)
            .await
            .map_err(|e| TargetError::infra_from("running the openshell CLI", e))
    }

    fn failure(&self, what: &str, out: &CmdOutput) -> TargetError {
        match parse_refusal(&out.stderr) {
            Some((code, message)) => TargetError::refused(&code, message),
            None => TargetError::infra(format!(
                "openshell {what} exited with code {}: {}",
                out.code,
                crate::command::last_lines(&out.stderr, 5)
            )),
        }
    }

    pub(crate) async fn create(
        &self,
        spec: &SandboxSpec,
        caps: &BTreeSet<Capability>,
    ) -> TargetResult<SandboxView> {
        let out = self.call(self.create_cmd(spec, caps)?).await?;
        if !out.success() {
            return Err(self.failure("sandbox create", &out));
        }
        if spec.command.is_none() {
            return parse_get(&out.stdout).map(|s| s.view());
        }
        self.get(&spec.name).await?.ok_or_else(|| {
            TargetError::infra(format!(
                "sandbox {} was created but `sandbox get` does not find it",
                spec.name
            ))
        })
    }

    pub(crate) async fn get_json(&self, name: &str) -> TargetResult<Option<SandboxJson>> {
        let out = self
            .call(self.cmd(["sandbox", "get", name, "-o", "json"]))
            .await?;
        if out.success() {
            return parse_get(&out.stdout).map(Some);
        }
        if not_found(&out) {
            return Ok(None);
        }
        Err(self.failure("sandbox get", &out))
    }

    pub(crate) async fn get(&self, name: &str) -> TargetResult<Option<SandboxView>> {
        Ok(self.get_json(name).await?.map(|s| s.view()))
    }

    /// `sandbox list -o json`, optionally filtered by one `key=value` label selector.
    pub(crate) async fn list(&self, selector: Option<&str>) -> TargetResult<Vec<SandboxJson>> {
        let mut c = self.cmd(["sandbox", "list", "-o", "json"]);
        if let Some(s) = selector {
            c = c.args(["--selector", s]);
        }
        let out = self.call(c).await?;
        if !out.success() {
            return Err(self.failure("sandbox list", &out));
        }
        parse_list(&out.stdout)
    }

    /// `sandbox exec -n N --no-tty -- argv`: the CLI exits with the remote code. A failure the
    /// CLI itself reports (a gRPC status on stderr) is a refusal, not a remote exit code.
    pub(crate) async fn exec(&self, name: &str, argv: &[String]) -> TargetResult<ExecResult> {
        let c = self
            .cmd(["sandbox", "exec", "-n", name, "--no-tty", "--"])
            .args(argv.iter().cloned());
        let out = match self.runner.run(&c).await {
            Ok(out) => out,
            // The CLI ran and the gateway or the sandbox did not answer in time: a shell that
            // does not run a command is the product's failure, not the harness's.
            Err(e @ crate::command::CmdError::TimedOut { .. }) => {
                return Err(TargetError::refused(
                    "Unresponsive",
                    format!("the sandbox shell did not answer: {e}"),
                ));
            }
            Err(e) => return Err(TargetError::infra_from("running the openshell CLI", e)),
        };
        // Only the CLI's own error line counts: a remote command may print anything.
        let cli_error = out
            .stderr
            .lines()
            .any(|l| l.trim_start().starts_with("Error:"));
        if !out.success()
            && cli_error
            && let Some((code, message)) = parse_refusal(&out.stderr)
        {
            return Err(TargetError::refused(&code, message));
        }
        Ok(ExecResult {
            exit_code: out.code,
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }

    async fn lifecycle(&self, verb: &str, name: &str) -> TargetResult<()> {
        let c = self
            .cmd(["sandbox", verb, name])
            .timeout(self.lifecycle_timeout);
        let out = self.call(c).await?;
        if out.success() {
            Ok(())
        } else {
            Err(self.failure(&format!("sandbox {verb}"), &out))
        }
    }

    pub(crate) async fn stop(&self, name: &str) -> TargetResult<()> {
        self.lifecycle("stop", name).await
    }

    pub(crate) async fn start(&self, name: &str) -> TargetResult<()> {
        self.lifecycle("start", name).await
    }

    /// Deletes; "Sandbox N not found" counts as done (docs/upstream-facts.md F6.7).
    pub(crate) async fn delete(&self, name: &str) -> TargetResult<()> {
        let out = self.call(self.cmd(["sandbox", "delete", name])).await?;
        if out.success() || not_found(&out) {
            Ok(())
        } else {
            Err(self.failure("sandbox delete", &out))
        }
    }

    /// The CLI's version and what it supports.
    pub(crate) async fn detect(&self) -> TargetResult<CliInfo> {
        let v = self.call(self.cmd(["--version"])).await?;
        if !v.success() {
            return Err(self.failure("--version", &v));
        }
        let version = parse_version(&v.stdout).ok_or_else(|| {
            TargetError::infra(format!(
                "cannot read a version from `openshell --version`: {}",
                v.stdout.trim()
            ))
        })?;
        let help = self.call(self.cmd(["sandbox", "create", "--help"])).await?;
        Ok(CliInfo {
            version,
            capabilities: capabilities_from_help(&help.stdout),
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CliInfo {
    pub version: semver::Version,
    pub capabilities: BTreeSet<Capability>,
}

/// The chart's appVersion, from `helm list -o json` (field `app_version`).
pub(crate) fn app_version_from_helm_list(json: &str, release: &str) -> Option<semver::Version> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v.as_array()?
        .iter()
        .find(|r| r.get("name").and_then(|n| n.as_str()) == Some(release))
        .and_then(|r| r.get("app_version").and_then(|a| a.as_str()))
        .and_then(parse_version)
}
