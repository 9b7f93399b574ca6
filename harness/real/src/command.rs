//! The one way the real-cluster path runs external tools (kind, k3d, helm, kubectl, docker,
//! openshell). Every call is a [`Cmd`] value with its own timeout, so plans can be printed,
//! recorded and compared, and tests can feed recorded outputs back without any tool installed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// The default per-call timeout: long enough for `helm --wait` style calls to report their own
/// timeout first, short enough that a hung tool cannot stall a run.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// One external command: program, arguments, extra environment, optional stdin and a timeout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cmd {
    pub program: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set on top of the inherited environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Inherited variables removed before the call (`env -u NAME` in the printed line).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub env_remove: BTreeSet<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    #[serde(with = "humantime_serde_compat", default = "default_timeout")]
    pub timeout: Duration,
}

fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

mod humantime_serde_compat {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

impl Cmd {
    pub fn new(program: impl Into<String>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            env_remove: BTreeSet::new(),
            stdin: None,
            cwd: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Appends `flag value` only when the value is present.
    pub fn opt(self, flag: &str, value: Option<impl Into<String>>) -> Self {
        match value {
            Some(v) => self.arg(flag).arg(v),
            None => self,
        }
    }

    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.env.insert(k.into(), v.into());
        self
    }

    /// Removes an inherited variable for this call.
    pub fn env_remove(mut self, k: impl Into<String>) -> Self {
        self.env_remove.insert(k.into());
        self
    }

    pub fn stdin(mut self, text: impl Into<String>) -> Self {
        self.stdin = Some(text.into());
        self
    }

    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// The command line as a shell would need it, environment first; used in plans, logs and
    /// error messages, and as the key recorded outputs are matched on.
    pub fn line(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.env_remove.is_empty() {
            parts.push("env".into());
            for k in &self.env_remove {
                parts.push(format!("-u {k}"));
            }
        }
        parts.extend(self.env.iter().map(|(k, v)| format!("{k}={}", quote(v))));
        parts.push(quote(&self.program));
        parts.extend(self.args.iter().map(|a| quote(a)));
        parts.join(" ")
    }
}

impl std::fmt::Display for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line())
    }
}

/// POSIX shell quoting, only where needed, so printed plans can be pasted into a shell.
pub fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%{}[]".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// What a command printed and how it ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmdOutput {
    /// The exit code; -1 when the process was ended by a signal.
    pub code: i32,
    #[serde(default)]
    pub stdout: String,
    #[serde(default)]
    pub stderr: String,
}

impl CmdOutput {
    pub fn ok(stdout: impl Into<String>) -> Self {
        Self {
            code: 0,
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    pub fn failed(code: i32, stderr: impl Into<String>) -> Self {
        Self {
            code,
            stdout: String::new(),
            stderr: stderr.into(),
        }
    }

    pub fn success(&self) -> bool {
        self.code == 0
    }
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum CmdError {
    #[error("`{program}` was not found on PATH; {hint}")]
    NotFound { program: String, hint: String },
    #[error("`{line}` did not finish within {}", humantime::format_duration(*after))]
    TimedOut { line: String, after: Duration },
    /// Spawning or waiting for the process failed; the I/O error is kept as the cause.
    #[error("`{line}` could not be run")]
    Io {
        line: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("`{line}` exited with code {code}: {}", last_lines(stderr, 5))]
    Failed {
        line: String,
        code: i32,
        stdout: String,
        stderr: String,
    },
    /// A test runner was asked for a command it has no recorded output for.
    #[error("unexpected command `{line}` (no recorded output)")]
    Unexpected { line: String },
}

/// The last `n` non-empty lines, for error messages that must stay short.
pub(crate) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join(" | ")
}

/// How to install a tool, for `NotFound` errors and the doctor.
pub(crate) fn install_hint(program: &str) -> String {
    match program {
        "kind" => "install kind: https://kind.sigs.k8s.io/docs/user/quick-start/#installation".into(),
        "k3d" => "install k3d: https://k3d.io/#installation".into(),
        "helm" => "install Helm 3 or 4: https://helm.sh/docs/intro/install/".into(),
        "kubectl" => "install kubectl: https://kubernetes.io/docs/tasks/tools/".into(),
        "docker" => "install Docker and start its daemon: https://docs.docker.com/engine/install/".into(),
        "openshell" => "install the OpenShell CLI (https://github.com/NVIDIA/OpenShell) or pass --openshell-bin".into(),
        other => format!("install `{other}` or put it on PATH"),
    }
}

/// Runs commands. The system runner spawns processes; the test runners replay recorded
/// outputs and keep the exact command plan for assertions.
#[async_trait]
pub trait CommandRunner: Send + Sync {
    /// Runs the command to completion (or its timeout). A non-zero exit is not an error here;
    /// use [`run_ok`] when it should be.
    async fn run(&self, cmd: &Cmd) -> Result<CmdOutput, CmdError>;
}

/// Runs a command and turns a non-zero exit into [`CmdError::Failed`].
pub(crate) async fn run_ok(runner: &dyn CommandRunner, cmd: &Cmd) -> Result<CmdOutput, CmdError> {
    let out = runner.run(cmd).await?;
    if out.success() {
        Ok(out)
    } else {
        Err(CmdError::Failed {
            line: cmd.line(),
            code: out.code,
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }
}

/// Spawns real processes with tokio, killing them when their timeout runs out.
#[derive(Clone, Debug, Default)]
pub struct SystemRunner;

#[async_trait]
impl CommandRunner for SystemRunner {
    async fn run(&self, cmd: &Cmd) -> Result<CmdOutput, CmdError> {
        use std::process::Stdio;
        use tokio::io::AsyncWriteExt;

        let mut c = tokio::process::Command::new(&cmd.program);
        c.args(&cmd.args)
            .envs(&cmd.env)
            .stdin(if cmd.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A timed-out call is dropped; the child must not outlive it.
            .kill_on_drop(true);
        if let Some(dir) = &cmd.cwd {
            c.current_dir(dir);
        }
        for k in &cmd.env_remove {
            c.env_remove(k);
        }
        let mut child = c.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                CmdError::NotFound {
                    program: cmd.program.clone(),
                    hint: install_hint(&cmd.program),
                }
            } else {
                CmdError::Io {
                    line: cmd.line(),
                    source: Arc::new(e),
                }
            }
        })?;
        if let (Some(text), Some(mut pipe)) = (&cmd.stdin, child.stdin.take()) {
            let text = text.clone();
            tokio::spawn(async move {
                let _ = pipe.write_all(text.as_bytes()).await;
            });
        }
        // The bound is real time for a tool the scaled clock does not reach (helm, kubectl).
        let path_var = cmd
            .env
            .get("PATH")
            .cloned()
            .or_else(|| std::env::var("PATH").ok());
        let bound = crate::realtime::bound_for(
            &cmd.program,
            path_var.as_deref(),
            cmd.timeout,
            conformance_core::clock::scale(),
        );
        match tokio::time::timeout(bound, child.wait_with_output()).await {
            Err(_) => Err(CmdError::TimedOut {
                line: cmd.line(),
                after: cmd.timeout,
            }),
            Ok(Err(e)) => Err(CmdError::Io {
                line: cmd.line(),
                source: Arc::new(e),
            }),
            Ok(Ok(out)) => Ok(CmdOutput {
                code: out.status.code().unwrap_or(-1),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }),
        }
    }
}

/// A recorded output for commands whose line starts with `prefix`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Recorded {
    pub prefix: String,
    pub output: CmdOutput,
}

/// What a [`ScriptedRunner`] answers for a command it has no recording for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unscripted {
    /// Exit 0 with no output (plans where only the command list matters).
    Succeed,
    /// An [`CmdError::Unexpected`] error (tests that pin every output).
    Fail,
}

/// Replays recorded outputs and keeps every command it was asked to run, in order.
///
/// Outputs are matched by command-line prefix, first registered first; several outputs for the
/// same prefix are served in turn, and the last one repeats (so a poll can see "not yet, not yet,
/// ready").
#[derive(Clone)]
pub struct ScriptedRunner {
    inner: Arc<Mutex<Script>>,
}

struct Script {
    responses: Vec<(String, VecDeque<CmdOutput>)>,
    calls: Vec<Cmd>,
    unscripted: Unscripted,
}

impl ScriptedRunner {
    pub fn new(unscripted: Unscripted) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Script {
                responses: Vec::new(),
                calls: Vec::new(),
                unscripted,
            })),
        }
    }

    /// Adds an output for commands starting with `prefix` (see [`Cmd::line`]).
    pub fn respond(&self, prefix: &str, output: CmdOutput) -> &Self {
        let mut s = self.inner.lock().expect("script lock");
        match s.responses.iter_mut().find(|(p, _)| p == prefix) {
            Some((_, q)) => q.push_back(output),
            None => s
                .responses
                .push((prefix.to_string(), VecDeque::from([output]))),
        }
        self
    }

    /// Loads recorded outputs from a JSON array of `{prefix, output}`.
    pub fn load(&self, json: &str) -> serde_json::Result<&Self> {
        let recs: Vec<Recorded> = serde_json::from_str(json)?;
        for r in recs {
            self.respond(&r.prefix, r.output);
        }
        Ok(self)
    }

    /// Every command run so far.
    pub fn calls(&self) -> Vec<Cmd> {
        self.inner.lock().expect("script lock").calls.clone()
    }

    /// The command lines run so far, for plan assertions.
    pub fn lines(&self) -> Vec<String> {
        self.calls().iter().map(Cmd::line).collect()
    }
}

#[async_trait]
impl CommandRunner for ScriptedRunner {
    async fn run(&self, cmd: &Cmd) -> Result<CmdOutput, CmdError> {
        let line = cmd.line();
        let mut s = self.inner.lock().expect("script lock");
        s.calls.push(cmd.clone());
        // Environment is not part of the match: prefixes name the program and its arguments.
        let bare = Cmd {
            env: BTreeMap::new(),
            env_remove: BTreeSet::new(),
            ..cmd.clone()
        }
        .line();
        let hit = s
            .responses
            .iter_mut()
            .find(|(p, _)| bare.starts_with(p.as_str()));
        match hit {
            Some((_, q)) => {
                let out = if q.len() > 1 {
                    q.pop_front().expect("non-empty")
                } else {
                    q.front().cloned().expect("non-empty")
                };
                Ok(out)
            }
            None => match s.unscripted {
                Unscripted::Succeed => Ok(CmdOutput::default()),
                Unscripted::Fail => Err(CmdError::Unexpected { line }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_quotes_only_what_a_shell_would_split() {
        let c = Cmd::new("helm")
            .args(["upgrade", "--set", "a.b=c d", "it's"])
            .env("XDG_CONFIG_HOME", "/tmp/x");
        assert_eq!(
            c.line(),
            "XDG_CONFIG_HOME=/tmp/x helm upgrade --set 'a.b=c d' 'it'\\''s'"
        );
    }

    #[tokio::test]
    async fn the_scripted_runner_serves_outputs_in_turn_and_repeats_the_last() {
        let r = ScriptedRunner::new(Unscripted::Fail);
        r.respond("kubectl get", CmdOutput::failed(1, "not yet"))
            .respond("kubectl get", CmdOutput::ok("ready"));
        let c = Cmd::new("kubectl").args(["get", "pods"]);
        assert_eq!(r.run(&c).await.unwrap().code, 1);
        assert_eq!(r.run(&c).await.unwrap().stdout, "ready");
        assert_eq!(r.run(&c).await.unwrap().stdout, "ready");
        let err = r.run(&Cmd::new("kind")).await.unwrap_err();
        assert!(
            matches!(&err, CmdError::Unexpected { line } if line == "kind"),
            "{err:?}"
        );
        assert_eq!(r.lines().len(), 4);
    }

    #[tokio::test]
    async fn run_ok_turns_a_non_zero_exit_into_an_error_with_the_last_stderr_lines() {
        let r = ScriptedRunner::new(Unscripted::Fail);
        r.respond(
            "helm",
            CmdOutput::failed(1, "\nError: INSTALLATION FAILED: boom\n"),
        );
        let err = run_ok(&r, &Cmd::new("helm").arg("install"))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "`helm install` exited with code 1: Error: INSTALLATION FAILED: boom"
        );
    }

    #[tokio::test]
    async fn the_system_runner_reports_a_missing_program_with_an_install_hint() {
        let err = SystemRunner
            .run(&Cmd::new("openshell-conformance-no-such-tool"))
            .await
            .unwrap_err();
        assert!(matches!(err, CmdError::NotFound { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn the_system_runner_kills_a_command_at_its_timeout() {
        let err = SystemRunner
            .run(
                &Cmd::new("sleep")
                    .arg("5")
                    .timeout(Duration::from_millis(50)),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, CmdError::TimedOut { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn the_system_runner_passes_stdin_env_and_returns_the_exit_code() {
        let out = SystemRunner
            .run(
                &Cmd::new("sh")
                    .args(["-c", "cat; printf %s \"$X\"; exit 3"])
                    .env("X", "y")
                    .stdin("in-"),
            )
            .await
            .unwrap();
        assert_eq!((out.code, out.stdout.as_str()), (3, "in-y"));
    }
}
