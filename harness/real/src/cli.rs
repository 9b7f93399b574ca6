//! The `openshell` CLI as the user path: every sandbox action goes through the CLI binary, with
//! a per-call timeout, an isolated configuration directory (`XDG_CONFIG_HOME`) and JSON output
//! (never human tables). Shapes follow docs/upstream-facts.md section 6.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use conformance_openshell_api::v1::{Sandbox, SandboxPhase};
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
    /// Neither v0.0.111 `list` nor `get` prints these (F6.4); builds with a restart policy are
    /// reported to print them in `get` (F9.1), at the top level or under `status`. Absent means
    /// unknown, never 0.
    #[serde(default)]
    restart_count: Option<u32>,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    status: Option<SandboxStatusJson>,
    /// The gateway record's `metadata.resource_version` (gRPC reads only; the CLI's JSON has
    /// none), see [`crate::watch::resource_version`].
    #[serde(skip)]
    resource_version: Option<String>,
    /// The reason and message of the `Ready` condition (gRPC reads only; the CLI's JSON has
    /// none, F6.4): the cause the gateway reports, as the watch stream records it.
    #[serde(skip)]
    ready: Option<(Option<String>, Option<String>)>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
struct SandboxStatusJson {
    #[serde(default)]
    restart_count: Option<u32>,
    #[serde(default)]
    exit_code: Option<i32>,
}

impl SandboxJson {
    /// The main process's exit code, if this CLI printed one.
    pub(crate) fn exit_code(&self) -> Option<i32> {
        self.exit_code
            .or_else(|| self.status.as_ref().and_then(|s| s.exit_code))
    }

    /// How often the sandbox was restarted, if this CLI printed it.
    pub(crate) fn restart_count(&self) -> Option<u32> {
        self.restart_count
            .or_else(|| self.status.as_ref().and_then(|s| s.restart_count))
    }

    /// The sandbox as `sandbox get|list -o json` prints it (`sandbox_to_json`,
    /// docs/upstream-facts.md F6.4), for reads the harness makes over gRPC: its id, name,
    /// workspace, labels and phase; no exit code or restart count, which the CLI prints
    /// neither, and no creation time, which v0.0.111 sends in a field the harness does not
    /// declare (F7.6).
    pub(crate) fn from_sandbox(s: &Sandbox) -> Self {
        let meta = s.metadata.clone().unwrap_or_default();
        Self {
            id: meta.id,
            name: meta.name,
            workspace: Some(meta.workspace),
            labels: meta.labels.into_iter().collect(),
            phase: printed_phase(s.status.as_ref().map_or(0, |st| st.phase)),
            resource_version: crate::watch::resource_version(meta.resource_version),
            ready: s.status.as_ref().map(crate::watch::ready_cause),
            ..Self::default()
        }
    }

    pub(crate) fn view(&self) -> SandboxView {
        SandboxView {
            name: self.name.clone(),
            phase: self.phase.clone(),
            reason: self.ready.as_ref().and_then(|r| r.0.clone()),
            message: self.ready.as_ref().and_then(|r| r.1.clone()),
            exit_code: self.exit_code(),
            resource_version: self.resource_version.clone(),
        }
    }
}

/// The phase the CLI prints for the wire's value: its name, and `Unknown` for a value the
/// protocol does not declare (`phase_name`, docs/upstream-facts.md F1.1); the watcher maps the
/// declared values the same way (`watch::phase_of`).
pub(crate) fn printed_phase(value: i32) -> Phase {
    match SandboxPhase::try_from(value) {
        Ok(_) => crate::watch::phase_of(value),
        Err(_) => Phase::Unknown,
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

/// The names of the gRPC codes by the text tonic 0.14 prints for them (`Code::description`), as
/// the CLI shows a status: `code: '<description>', message: "…"` (docs/upstream-facts.md F6.9).
const TONIC_CODES: &[(&str, &str)] = &[
    ("The operation was cancelled", "Cancelled"),
    ("Unknown error", "Unknown"),
    ("Client specified an invalid argument", "InvalidArgument"),
    (
        "Deadline expired before operation could complete",
        "DeadlineExceeded",
    ),
    ("Some requested entity was not found", "NotFound"),
    (
        "Some entity that we attempted to create already exists",
        "AlreadyExists",
    ),
    (
        "The caller does not have permission to execute the specified operation",
        "PermissionDenied",
    ),
    ("Some resource has been exhausted", "ResourceExhausted"),
    (
        "The system is not in a state required for the operation's execution",
        "FailedPrecondition",
    ),
    ("The operation was aborted", "Aborted"),
    ("Operation was attempted past the valid range", "OutOfRange"),
    (
        "Operation is not implemented or not supported",
        "Unimplemented",
    ),
    ("Internal error", "Internal"),
    ("The service is currently unavailable", "Unavailable"),
    ("Unrecoverable data loss or corruption", "DataLoss"),
    (
        "The request does not have valid authentication credentials",
        "Unauthenticated",
    ),
];

/// The CLI's error report as one line: miette draws `Error:   × first line` and wraps long
/// messages over lines prefixed with `│` (docs/upstream-facts.md F6.9); the causes (`├─▶`,
/// `╰─▶`) and the hint after an empty `│` line are left out.
pub(crate) fn error_text(stderr: &str) -> Option<String> {
    let mut lines = stderr
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("Error:"));
    let first = lines.next()?;
    let first = first.trim_start().trim_start_matches("Error:").trim_start();
    let first = first.trim_start_matches('×').trim();
    let mut parts = vec![first.to_string()];
    for l in lines {
        let t = l.trim_start();
        let Some(rest) = t.strip_prefix('│') else {
            break;
        };
        let rest = rest.trim();
        if rest.is_empty() {
            break;
        }
        parts.push(rest.to_string());
    }
    Some(parts.join(" "))
}

/// A refusal the CLI printed on failure: the gRPC code and the gateway's message, or the CLI's
/// own wording of one (docs/upstream-facts.md F6.9). None for anything else, such as a transport
/// error while the gateway is unreachable.
pub(crate) fn parse_refusal(stderr: &str) -> Option<(String, String)> {
    let text = error_text(stderr)?;
    if let Some(i) = text.find("code: '") {
        let rest = &text[i + "code: '".len()..];
        let end = rest.find("', message: ")?;
        let description = &rest[..end];
        let code = TONIC_CODES
            .iter()
            .find(|(d, _)| *d == description)
            .map(|(_, c)| (*c).to_string())
            // A description this table does not know is kept as printed, not dropped.
            .unwrap_or_else(|| description.to_string());
        let after = &rest[end + "', message: ".len()..];
        let message = after
            .strip_prefix('"')
            .map(|m| m.rfind('"').map_or(m, |j| &m[..j]))
            .unwrap_or(after);
        return Some((code, message.to_string()));
    }
    // `sandbox create` prints an AlreadyExists status as its message and a hint to delete the
    // sandbox first; exec checks readiness itself and prints its own words (F6.9).
    if stderr.contains("hint: delete it first with: openshell sandbox delete") {
        return Some(("AlreadyExists".into(), text));
    }
    if text.starts_with("sandbox '") && text.contains("' is not ready") {
        return Some(("FailedPrecondition".into(), text));
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
/// Whether `sandbox create` failed after the gateway created the sandbox: it entered Error, or
/// provisioning went idle past the CLI's timeout (docs/upstream-facts.md F6.3).
pub(crate) fn created_but_not_ready(stderr: &str) -> bool {
    // The CLI wraps long messages across lines; the markers are short enough not to be split.
    stderr.contains("sandbox entered error phase while provisioning")
        || stderr.contains("sandbox provisioning timed out after")
}

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

/// Variables the CLI reads that would point it at another gateway or identity than the one
/// the harness registered (docs/upstream-facts.md F6.1, F6.10): removed from every call.
const FOREIGN_VARS: &[&str] = &[
    "OPENSHELL_GATEWAY_ENDPOINT",
    "OPENSHELL_GATEWAY_INSECURE",
    "OPENSHELL_WORKSPACE",
    "OPENSHELL_OIDC_CLIENT_SECRET",
];

/// Drives one `openshell` binary against one gateway, from a private home directory: HOME, the
/// XDG directories, the local-TLS import directory and the system gateway registry of every
/// call point inside it, so nothing of the user's OpenShell is read or written
/// (docs/upstream-facts.md F6.10).
#[derive(Clone)]
pub(crate) struct OpenShellCli {
    runner: Arc<dyn CommandRunner>,
    pub program: String,
    /// The private home of every call (mode 0700, outside the uploaded artifacts).
    pub home: PathBuf,
    /// The registered gateway name (`OPENSHELL_GATEWAY`).
    pub gateway: String,
    pub call_timeout: Duration,
    pub lifecycle_timeout: Duration,
}

impl OpenShellCli {
    pub(crate) fn new(
        runner: Arc<dyn CommandRunner>,
        program: &str,
        home: PathBuf,
        gateway: &str,
    ) -> Self {
        Self {
            runner,
            program: program.to_string(),
            home,
            gateway: gateway.to_string(),
            call_timeout: Duration::from_secs(60),
            lifecycle_timeout: Duration::from_secs(330),
        }
    }

    /// `XDG_CONFIG_HOME` of every call.
    pub(crate) fn config_home(&self) -> PathBuf {
        self.home.join("config")
    }

    /// A CLI call with the isolated configuration.
    pub(crate) fn cmd<I, S>(&self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let h = |sub: &str| self.home.join(sub).display().to_string();
        let mut c = Cmd::new(&self.program)
            .args(args)
            .env("HOME", self.home.display().to_string())
            .env("XDG_CONFIG_HOME", h("config"))
            .env("XDG_STATE_HOME", h("state"))
            .env("XDG_DATA_HOME", h("data"))
            .env("XDG_CACHE_HOME", h("cache"))
            // `gateway add --local` imports a local OpenShell's client certificate from here
            // (else XDG_STATE_HOME, ~/.local/state, Homebrew) over the harness's; it stays empty.
            .env("OPENSHELL_LOCAL_TLS_DIR", h("no-local-tls"))
            .env("OPENSHELL_SYSTEM_GATEWAY_DIR", h("no-system-gateways"))
            .env("OPENSHELL_GATEWAY", &self.gateway)
            .timeout(self.call_timeout);
        for v in FOREIGN_VARS {
            c = c.env_remove(*v);
        }
        c
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

    /// The CLI's directory for the registered gateway (metadata, mTLS files).
    pub(crate) fn gateway_dir(&self) -> PathBuf {
        self.config_home()
            .join("openshell/gateways")
            .join(&self.gateway)
    }

    /// Where the CLI looks for the client certificate of a gateway (docs/upstream-facts.md F6.2).
    pub(crate) fn mtls_dir(&self) -> PathBuf {
        self.gateway_dir().join("mtls")
    }

    /// Creates the private home (mode 0700) and removes a registration an earlier run left in
    /// it, so `gateway add` does not refuse with "already exists" (docs/upstream-facts.md F6.2).
    pub(crate) fn prepare_home(&self) -> std::io::Result<()> {
        crate::private::create_private_dir(&self.home)?;
        match std::fs::remove_dir_all(self.gateway_dir()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// One call that needs the harness to be let in (`sandbox list`), right after registration:
    /// a refusal here is a setup problem and is quoted as the gateway said it.
    pub(crate) async fn check_access(&self, selector: &str) -> TargetResult<()> {
        let out = self
            .call(self.cmd(["sandbox", "list", "-o", "json", "--selector", selector]))
            .await?;
        if out.success() {
            return parse_list(&out.stdout).map(|_| ());
        }
        let said =
            error_text(&out.stderr).unwrap_or_else(|| crate::command::last_lines(&out.stderr, 5));
        Err(TargetError::infra(format!(
            "install: the gateway did not let the harness in (`openshell sandbox list` exited with code {}): {said}; \
             the harness installs with server.auth.allowUnauthenticatedUsers=true (see README, \"Authentication\"): \
             check that no values file or --set turns it off",
            out.code
        )))
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
            Some((code, message)) => {
                crate::scaled_race::refusal(&code, &message, conformance_core::clock::scale())
            }
            None => TargetError::infra(format!(
                "openshell {what} exited with code {}: {}",
                out.code,
                crate::command::last_lines(&out.stderr, 5)
            )),
        }
    }

    /// `sandbox create`, reading back through the CLI itself.
    #[cfg(test)]
    pub(crate) async fn create(
        &self,
        spec: &SandboxSpec,
        caps: &BTreeSet<Capability>,
    ) -> TargetResult<SandboxView> {
        self.create_reading(spec, caps, self).await
    }

    /// `sandbox create`, reading the sandbox back through `reads` where the CLI prints no state
    /// (a main command, or a sandbox created but not Ready).
    pub(crate) async fn create_reading(
        &self,
        spec: &SandboxSpec,
        caps: &BTreeSet<Capability>,
        reads: &impl ReadSandbox,
    ) -> TargetResult<SandboxView> {
        let out = self.call(self.create_cmd(spec, caps)?).await?;
        if !out.success() {
            // The CLI waits for the sandbox it created to leave Provisioning and fails when it
            // enters Error or stays idle past its provisioning timeout; the sandbox is there all
            // the same, in the state the gateway reports (docs/upstream-facts.md F6.3). Creating
            // it is what this action does: whether it provisions is the checks' to judge.
            if created_but_not_ready(&out.stderr)
                && let Some(view) = reads.read(&spec.name).await?
            {
                tracing::info!(sandbox = %spec.name, said = %crate::command::last_lines(&out.stderr, 3), "created, not Ready");
                return Ok(view);
            }
            return Err(self.failure("sandbox create", &out));
        }
        if spec.command.is_none() {
            return parse_get(&out.stdout).map(|s| s.view());
        }
        reads.read(&spec.name).await?.ok_or_else(|| {
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
            return Err(crate::scaled_race::refusal(
                &code,
                &message,
                conformance_core::clock::scale(),
            ));
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

/// A read of one sandbox as `sandbox get -o json` shows it: by the CLI itself, or by the
/// harness's gRPC reads (`reads.rs`), which answer the same.
pub(crate) trait ReadSandbox: Sync {
    fn read(&self, name: &str) -> impl Future<Output = TargetResult<Option<SandboxView>>> + Send;
}

impl ReadSandbox for OpenShellCli {
    async fn read(&self, name: &str) -> TargetResult<Option<SandboxView>> {
        self.get(name).await
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
