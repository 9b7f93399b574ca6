//! What the tests of the real path on the served cluster share: the real tools and upstream
//! material (through `conformance-testtools`), `emulate serve` as its own process, the
//! harness binary as a subprocess whose output lines are watched, and the checks of what a
//! run leaves on the cluster. Every wait has a deadline that names what it waited for.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use conformance_real::completeness::{PhaseCommit, phase_commits};
use conformance_testtools::{Tool, require_all};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// The model the served cluster's images run: the chart is OpenShell v0.0.111's.
pub const MODEL: &str = "openshell-0.0.111";

/// The real tools and upstream material a served real-path run needs.
pub struct Tools {
    pub helm: PathBuf,
    pub kubectl: PathBuf,
    pub openshell: PathBuf,
    pub chart: PathBuf,
    pub manifest: PathBuf,
}

impl Tools {
    /// Every tool, or `None` after printing why `test` is skipped (a failure in CI).
    pub fn require(test: &str) -> Option<Self> {
        let [helm, kubectl, openshell, chart, manifest] = require_all(
            [
                Tool::Helm,
                Tool::Kubectl,
                Tool::OpenshellCli,
                Tool::OpenshellChart,
                Tool::AgentSandboxManifest,
            ],
            test,
        )?;
        Some(Self {
            helm,
            kubectl,
            openshell,
            chart,
            manifest,
        })
    }

    /// `PATH` with helm's and kubectl's directories first: the harness runs them by name.
    pub fn path_env(&self) -> std::ffi::OsString {
        let mut dirs: Vec<PathBuf> = [&self.helm, &self.kubectl]
            .iter()
            .filter_map(|p| p.parent().map(Path::to_path_buf))
            .collect();
        if let Some(p) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&p));
        }
        std::env::join_paths(dirs).expect("PATH entries join")
    }

    /// The real-path flags: the chart, the manifest and the CLI.
    pub fn real_flags(&self) -> Vec<String> {
        vec![
            "--chart-path".into(),
            self.chart.display().to_string(),
            "--agent-sandbox-manifest".into(),
            self.manifest.display().to_string(),
            "--openshell-bin".into(),
            self.openshell.display().to_string(),
        ]
    }

    /// Runs kubectl or helm against `kubeconfig` (deadline 60 s); returns (code, stdout+stderr).
    pub async fn tool(&self, tool: &Path, kubeconfig: &Path, args: &[&str]) -> (i32, String) {
        let home = kubeconfig.with_extension("helm");
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::process::Command::new(tool)
                .env("KUBECONFIG", kubeconfig)
                .env("HELM_CACHE_HOME", home.join("cache"))
                .env("HELM_CONFIG_HOME", home.join("config"))
                .env("HELM_DATA_HOME", home.join("data"))
                .args(args)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} did not finish within 60 s", tool.display()))
        .expect("the tool starts");
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    pub async fn kubectl_ok(&self, kubeconfig: &Path, args: &[&str]) -> String {
        let (code, out) = self.tool(&self.kubectl, kubeconfig, args).await;
        assert_eq!(code, 0, "kubectl {args:?} failed:\n{out}");
        out
    }

    /// What the harness's leftovers check looks for (helm releases and Sandbox resources in
    /// the harness's namespace, the gateway's data PVCs, namespaces labelled by a run), and the
    /// faults' NetworkPolicies: one line per thing found, empty when nothing is left.
    pub async fn leftovers(&self, kubeconfig: &Path) -> Vec<String> {
        let mut found = Vec::new();
        let (code, releases) = self
            .tool(
                &self.helm,
                kubeconfig,
                &["list", "--namespace", "openshell", "--short"],
            )
            .await;
        assert_eq!(code, 0, "helm list failed:\n{releases}");
        found.extend(releases.lines().map(|r| format!("helm release {r}")));
        let pvcs = self
            .kubectl_ok(
                kubeconfig,
                &[
                    "get",
                    "pvc",
                    "-n",
                    "openshell",
                    "-o",
                    "jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}",
                ],
            )
            .await;
        found.extend(
            pvcs.lines()
                .filter(|p| p.starts_with("openshell-data-openshell-"))
                .map(|p| format!("gateway data PVC {p}")),
        );
        let (code, sandboxes) = self
            .tool(
                &self.kubectl,
                kubeconfig,
                &[
                    "get",
                    "sandboxes.agents.x-k8s.io",
                    "-n",
                    "openshell",
                    "-o",
                    "name",
                ],
            )
            .await;
        assert_eq!(code, 0, "kubectl get sandboxes failed:\n{sandboxes}");
        found.extend(sandboxes.lines().map(|s| format!("Sandbox {s}")));
        let namespaces = self
            .kubectl_ok(
                kubeconfig,
                &[
                    "get",
                    "namespaces",
                    "-l",
                    "openshell-conformance.io/run",
                    "-o",
                    "jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}",
                ],
            )
            .await;
        found.extend(
            namespaces
                .lines()
                .filter(|n| *n != "openshell")
                .map(|n| format!("namespace {n} of a run")),
        );
        let policies = self
            .kubectl_ok(kubeconfig, &["get", "networkpolicies", "-A", "-o", "name"])
            .await;
        found.extend(
            policies
                .lines()
                .map(|p| format!("NetworkPolicy {p} (traffic still blocked)")),
        );
        found
    }
}

/// A running `emulate serve` (its own process, so it outlives a killed harness) and the
/// kubeconfig it wrote; killed on drop.
pub struct ServeProc {
    _child: tokio::process::Child,
    pub dir: tempfile::TempDir,
}

impl ServeProc {
    /// `emulate serve` with images meaning models (`model`), nothing installed.
    pub async fn start(model: &str) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let kubeconfig = dir.path().join("kubeconfig");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_openshell-conformance"))
            .args(["emulate", "serve", "--listen", "127.0.0.1:0"])
            .args(["--model", model, "--images", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("emulate serve starts");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut seen = Vec::new();
        let ready = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(l)) = lines.next_line().await {
                let done = l.contains("kubeconfig written to");
                seen.push(l);
                if done {
                    return true;
                }
            }
            false
        })
        .await;
        assert!(
            matches!(ready, Ok(true)),
            "emulate serve did not write its kubeconfig within 30 s; it printed:\n{}",
            seen.join("\n")
        );
        // Keep draining its output so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { _child: child, dir }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// The flags of `run --target existing` against this cluster.
    pub fn existing_flags(&self) -> Vec<String> {
        vec![
            "--target".into(),
            "existing".into(),
            "--kubeconfig".into(),
            self.kubeconfig().display().to_string(),
            "--context".into(),
            "kube-emulator".into(),
            "--allow-context".into(),
            "kube-emulator".into(),
        ]
    }
}

/// One line of a harness subprocess's output, and when it arrived.
pub struct Line {
    pub at: tokio::time::Instant,
    pub text: String,
}

/// The harness binary as a subprocess, its stdout and stderr read line by line.
pub struct Harness {
    child: tokio::process::Child,
    lines: mpsc::UnboundedReceiver<Line>,
    /// Every line so far.
    pub seen: Vec<String>,
    pub started: tokio::time::Instant,
}

impl Harness {
    pub fn spawn(tools: &Tools, args: &[String]) -> Self {
        Self::spawn_with(tools, args, &[])
    }

    /// [`Self::spawn`] with `env` added (e.g. a `TMPDIR` of the test's own).
    pub fn spawn_with(tools: &Tools, args: &[String], env: &[(&str, &Path)]) -> Self {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_openshell-conformance"))
            .args(args)
            .envs(env.iter().copied())
            .env("PATH", tools.path_env())
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the harness starts");
        let (tx, rx) = mpsc::unbounded_channel();
        for out in [
            Box::new(child.stdout.take().expect("stdout"))
                as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(out).lines();
                while let Ok(Some(text)) = lines.next_line().await {
                    let at = tokio::time::Instant::now();
                    if tx.send(Line { at, text }).is_err() {
                        break;
                    }
                }
            });
        }
        Self {
            child,
            lines: rx,
            seen: Vec::new(),
            started: tokio::time::Instant::now(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("the harness is running")
    }

    /// Waits for a line containing `what`; returns it with its arrival time.
    pub async fn until_line(&mut self, what: &str, within: Duration) -> Line {
        let found = tokio::time::timeout(within, async {
            while let Some(l) = self.lines.recv().await {
                self.seen.push(l.text.clone());
                if l.text.contains(what) {
                    return Some(l);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(l)) => l,
            _ => panic!(
                "the harness did not print {what:?} within {within:?}; it printed:\n{}",
                self.seen.join("\n")
            ),
        }
    }

    /// Sends `signal` (`INT`, `TERM`, `KILL`) to the harness.
    pub async fn signal(&self, signal: &str) {
        let status = tokio::process::Command::new("kill")
            .args(["-s", signal, &self.pid().to_string()])
            .status()
            .await
            .expect("kill runs");
        assert!(status.success(), "kill -s {signal} failed");
    }

    /// Waits for the harness to exit; returns its exit code (-1 for a signal) and every line.
    pub async fn finish(mut self, within: Duration) -> (i32, String) {
        let status = tokio::time::timeout(within, self.child.wait()).await;
        let status = match status {
            Ok(s) => s.expect("wait for the harness"),
            Err(_) => panic!(
                "the harness did not exit within {within:?}; it printed:\n{}",
                self.seen.join("\n")
            ),
        };
        // The readers end with the pipes; whatever is left is in the channel.
        let drained = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(l) = self.lines.recv().await {
                self.seen.push(l.text);
            }
        })
        .await;
        assert!(
            drained.is_ok(),
            "the harness's output did not close within 10 s"
        );
        (status.code().unwrap_or(-1), self.seen.join("\n"))
    }
}

/// Per-case verdict words of a `run`'s summary table (one topology): `(case label, verdict)`.
pub fn summary_verdicts(output: &str) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in output.lines() {
        if line.starts_with("scenario (virtual / wall time)") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        if line.trim().is_empty() {
            break;
        }
        let cols: Vec<&str> = line
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        if let [label, cell, ..] = cols.as_slice() {
            let verdict = cell.split_whitespace().next().unwrap_or_default();
            rows.push((label.to_string(), verdict.to_string()));
        }
    }
    rows
}

/// Every check's verdict in the timelines under `artifacts`, by case file and check name, with
/// its message (so a disagreement says what each side saw).
pub fn check_verdicts(
    artifacts: &Path,
) -> std::collections::BTreeMap<(String, String), (bool, String)> {
    let dir = artifacts.join("timelines");
    let mut verdicts = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
    {
        let case = entry.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(entry.path()).unwrap();
        for line in text.lines() {
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            if event["type"] == "check" {
                verdicts.insert(
                    (
                        case.clone(),
                        event["name"].as_str().unwrap_or_default().into(),
                    ),
                    (
                        event["passed"].as_bool().unwrap_or(false),
                        event["message"].as_str().unwrap_or_default().into(),
                    ),
                );
            }
        }
    }
    verdicts
}

/// Panics naming each check whose verdict differs between two runs of the same cases (the
/// case verdicts alike can hide a check that passes on one side only).
pub fn assert_same_check_verdicts(served: &Path, emulated: &Path) {
    let (served, emulated) = (check_verdicts(served), check_verdicts(emulated));
    assert!(!emulated.is_empty(), "no checks on the emulated side");
    let keys: std::collections::BTreeSet<_> = served.keys().chain(emulated.keys()).collect();
    let differ: Vec<String> = keys
        .into_iter()
        .filter(|k| served.get(*k).map(|v| v.0) != emulated.get(*k).map(|v| v.0))
        .map(|k| {
            format!(
                "{} / {}: served {:?}, emulated {:?}",
                k.0,
                k.1,
                served.get(k),
                emulated.get(k)
            )
        })
        .collect();
    assert!(
        differ.is_empty(),
        "checks whose verdicts differ:\n{}",
        differ.join("\n")
    );
}

/// The files under `dir` (recursively) that hold a PEM private key: after a run, key material
/// of ours that outlived it.
pub fn private_keys_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(path),
                Ok(t)
                    if t.is_file()
                        && std::fs::read(&path).is_ok_and(|b| {
                            b.windows(b"PRIVATE KEY".len()).any(|w| w == b"PRIVATE KEY")
                        }) =>
                {
                    found.push(path);
                }
                _ => {}
            }
        }
    }
    found
}

/// The files under `dir` whose path ends with `suffix`, recursively, sorted.
pub fn files_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.display().to_string().ends_with(suffix) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The gateway's phase commits in the diagnostics bundles under `artifacts` (the logs of its
/// pods, `openshell-*`, with the kubelet's timestamps), each once, in the order logged.
pub fn logged_commits(artifacts: &Path) -> Vec<PhaseCommit> {
    let mut v: Vec<PhaseCommit> = files_ending(artifacts, ".log")
        .iter()
        .filter(|p| p.display().to_string().contains("/logs/openshell-"))
        .flat_map(|p| phase_commits(&std::fs::read_to_string(p).unwrap_or_default()))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// A case's timeline as the run wrote it: its entries as JSON.
pub fn timeline_entries(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("timeline {}: {e}", path.display()))
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The wall-clock time (ms since the Unix epoch) of a timeline's `at_ms` 0, from the real
/// target's wall-clock observation.
pub fn wall_zero_ms(entries: &[serde_json::Value]) -> Option<i64> {
    entries.iter().find_map(|e| {
        (e["type"] == "observation" && e["key"] == "wall_clock_unix_ms")
            .then(|| Some(e["value"].as_i64()? - e["at_ms"].as_i64()?))
            .flatten()
    })
}

/// How long after the gateway logged `commit` the timeline first recorded that phase of that
/// sandbox (ms; a few ms of clock granularity allowed before it), or None if it never did.
pub fn recorded_after(entries: &[serde_json::Value], zero: i64, c: &PhaseCommit) -> Option<i64> {
    let at = c.logged_unix_ms?;
    entries
        .iter()
        .filter(|e| {
            e["type"] == "object"
                && e["kind"] == "OpenShellSandbox"
                && e["name"] == c.sandbox.as_str()
                && e["phase"] == c.to.name()
        })
        .filter_map(|e| Some(zero + e["at_ms"].as_i64()?))
        .filter(|t| *t >= at - 5)
        .min()
        .map(|t| t - at)
}

/// How the harness's note on a case's timeline says what it found of the gateway's commits:
/// every one on the timeline, or none logged for the case's sandboxes (real OpenShell logs a
/// phase only where a driver snapshot changes it, docs/upstream-facts.md F1.6).
const ALL_COMMITS_SEEN: &str = "phase commits the gateway logged for this case's sandboxes";
const NO_COMMIT_LOGGED: &str = "the gateway logged no phase commit";

/// Asserts that every phase commit the gateway logged for a case's sandboxes while its
/// observers ran (from its timeline's start to the harness's own check of this, which says so
/// on the timeline) is on that case's timeline, in that phase at or after the commit, and that
/// the harness found none where it says so; returns how many were checked. The gateway's log is
/// the one in the diagnostics bundles (`--diagnostics always`), which holds the pods there at
/// each case's teardown.
pub fn assert_every_logged_commit_on_its_timeline(artifacts: &Path) -> usize {
    let commits = logged_commits(artifacts);
    let mut problems = Vec::new();
    let mut checked = 0;
    for path in files_ending(&artifacts.join("timelines"), ".jsonl") {
        let entries = timeline_entries(&path);
        let case = path.file_name().unwrap().to_string_lossy().into_owned();
        let sandboxes: std::collections::BTreeSet<&str> = entries
            .iter()
            .filter(|e| e["type"] == "object" && e["kind"] == "OpenShellSandbox")
            .filter_map(|e| e["name"].as_str())
            .collect();
        if sandboxes.is_empty() {
            continue;
        }
        let Some(zero) = wall_zero_ms(&entries) else {
            problems.push(format!("{case}: no wall-clock observation"));
            continue;
        };
        let Some((end, none_logged)) = entries.iter().find_map(|e| {
            let m = e["message"].as_str().filter(|_| e["type"] == "note")?;
            let all = m.starts_with("all ") && m.contains(ALL_COMMITS_SEEN);
            let none = m.starts_with(NO_COMMIT_LOGGED);
            (all || none)
                .then(|| Some((e["at_ms"].as_i64()?, none)))
                .flatten()
        }) else {
            problems.push(format!(
                "{case}: the harness does not say whether the gateway's commits are on the timeline"
            ));
            continue;
        };
        for c in commits.iter().filter(|c| {
            sandboxes.contains(c.sandbox.as_str())
                && c.logged_unix_ms
                    .is_some_and(|t| (zero..=zero + end).contains(&t))
        }) {
            checked += 1;
            let what = format!(
                "{} -> {} of {} logged at {} ms",
                c.from,
                c.to,
                c.sandbox,
                c.logged_unix_ms.unwrap_or_default() - zero
            );
            if none_logged {
                problems.push(format!(
                    "{case}: the harness found no commit in the gateway's log, the bundle has {what}"
                ));
            } else if recorded_after(&entries, zero, c).is_none() {
                problems.push(format!("{case}: {what} is not on the timeline"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "logged phase commits missing from the timelines:\n{}",
        problems.join("\n")
    );
    checked
}

/// The PIDs of every process below `pid` (its children, theirs, and so on), from `/proc`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|d| d.flatten().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| {
            let p: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // The command name is in parentheses and may hold spaces: the parent comes after it.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((p, ppid))
        })
        .collect();
    let mut out = vec![];
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for &(child, _) in parents.iter().filter(|(_, parent)| *parent == p) {
            out.push(child);
            todo.push(child);
        }
    }
    out
}

/// The real uid of process `pid`, while it runs.
pub fn process_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// What another local user (`uid`, through setpriv) can read of a served run: under `dirs`, the
/// files holding a private key, a bearer token or a kubeconfig (grep lists them); of each
/// process in `pids`, its environment, its root and working directory, and such files there.
pub async fn readable_by(uid: u32, dirs: &[&Path], pids: &[u32]) -> String {
    // Errors go to a closed stderr: what cannot be read is exactly what is not reported.
    let script = r#"
pattern='PRIVATE KEY|token: |current-context'
[ $# -gt 0 ] && grep -rlsE "$pattern" "$@"
for p in $PIDS; do
  grep -qs '' /proc/$p/environ && echo "/proc/$p/environ"
  [ -n "$(ls -A /proc/$p/root/ 2>&-)" ] && echo "/proc/$p/root"
  (cd /proc/$p/cwd 2>&-) && echo "/proc/$p/cwd"
  for d in etc run var tmp sandbox app opt root home; do
    [ -d /proc/$p/root/$d ] && grep -rlsE "$pattern" /proc/$p/root/$d
  done
done
true"#;
    let id = uid.to_string();
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    let out = tokio::process::Command::new("setpriv")
        .args(["--reuid", &id, "--regid", &id, "--clear-groups", "--"])
        .args(["sh", "-c", script, "sh"])
        .args(dirs)
        .env("PIDS", pids.join(" "))
        .output()
        .await
        .expect("setpriv runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A served run's directories as on a shared machine, under `dir` (made enterable by every
/// user): its temporary directory as the system's (1777: everyone may create in it) and its
/// artifacts directory. Returns both.
pub fn shared_machine_dirs(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    (tmp, dir.join("a"))
}

/// The flags of one gateway outage of 30 s on `topology` with `model`, every diagnostics
/// bundle kept, artifacts into `artifacts`.
pub fn outage_flags(model: &str, topology: &str, artifacts: &Path) -> Vec<String> {
    let mut flags: Vec<String> = [
        "--model",
        model,
        "--topology",
        topology,
        "--scenario",
        "gateway-outage*",
        "--outage",
        "30s",
        "--diagnostics",
        "always",
        "--artifacts",
    ]
    .map(String::from)
    .to_vec();
    flags.push(artifacts.display().to_string());
    flags
}
