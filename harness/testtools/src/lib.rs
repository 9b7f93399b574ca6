//! Where tests find the real tools they drive, and what happens when one is missing.
//!
//! `.ci/tools.sh` installs helm, kubectl, the OpenShell Python SDK and the JUnit consumers
//! (junitparser, junit2html) into the git-ignored
//! `.tools/`; the OpenShell binaries, chart and Agent Sandbox manifest of the release installed
//! by default (`installed_by_default` in `fixtures/releases/`: v0.0.111 with Agent Sandbox
//! v0.5.0 today) are test material beside the repository (`../shared/tools/openshell-v<version>/`,
//! `../shared/upstream/`) or wherever their environment variable points.
//! In CI (`CI` set to a true value) a missing tool fails the test: a skipped proof must not
//! pass for a proof. Elsewhere the test prints why it is skipped and returns.

use std::path::{Path, PathBuf};

/// A real tool some test drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// helm 3 (`.tools/bin/helm`).
    Helm,
    /// kubectl 1.33 (`.tools/bin/kubectl`).
    Kubectl,
    /// The real `openshell` CLI of the default release.
    OpenshellCli,
    /// The real `openshell-gateway` of the default release (also the chart's certgen).
    OpenshellGateway,
    /// The real `openshell-sandbox` supervisor of the default release.
    OpenshellSandbox,
    /// The directory holding the official OpenShell Python SDK (`PYTHONPATH` for `python3`).
    OpenshellPythonSdk,
    /// The default release's helm chart, unpacked (a directory with `Chart.yaml`).
    OpenshellChart,
    /// The `manifest.yaml` of the Agent Sandbox release installed with the default release.
    AgentSandboxManifest,
    /// The directory holding junitparser and junit2html (`PYTHONPATH` for `python3`), the
    /// JUnit consumers CI dashboards are built on.
    JunitConsumers,
}

impl Tool {
    /// The environment variable that overrides where the tool is looked for.
    pub fn env_var(self) -> &'static str {
        match self {
            Tool::Helm => "HELM_BIN",
            Tool::Kubectl => "KUBECTL_BIN",
            Tool::OpenshellCli => "OPENSHELL_BIN",
            Tool::OpenshellGateway => "OPENSHELL_GATEWAY_BIN",
            Tool::OpenshellSandbox => "OPENSHELL_SANDBOX_BIN",
            Tool::OpenshellPythonSdk => "OPENSHELL_PYTHON_SDK",
            Tool::OpenshellChart => "OPENSHELL_CHART_PATH",
            Tool::AgentSandboxManifest => "AGENT_SANDBOX_MANIFEST",
            Tool::JunitConsumers => "JUNIT_CONSUMERS",
        }
    }

    fn default_path(self) -> PathBuf {
        let root = workspace_root();
        let DefaultRelease {
            openshell,
            agent_sandbox,
        } = default_release();
        let shared = root.join(format!("../shared/tools/openshell-v{openshell}"));
        let upstream = root.join("../shared/upstream");
        match self {
            Tool::Helm => root.join(".tools/bin/helm"),
            Tool::Kubectl => root.join(".tools/bin/kubectl"),
            Tool::OpenshellCli => shared.join("openshell"),
            Tool::OpenshellGateway => shared.join("openshell-gateway"),
            Tool::OpenshellSandbox => shared.join("openshell-sandbox"),
            Tool::OpenshellPythonSdk => root.join(".tools/python"),
            Tool::JunitConsumers => root.join(".tools/junit"),
            Tool::OpenshellChart => upstream.join(format!("openshell-chart-v{openshell}")),
            Tool::AgentSandboxManifest => {
                upstream.join(format!("agent-sandbox-{agent_sandbox}/manifest.yaml"))
            }
        }
    }

    fn present(self, path: &Path) -> bool {
        match self {
            Tool::OpenshellPythonSdk => path.join("openshell/__init__.py").is_file(),
            Tool::JunitConsumers => {
                path.join("junitparser/__init__.py").is_file()
                    && path.join("junit2htmlreport/__init__.py").is_file()
            }
            Tool::OpenshellChart => path.join("Chart.yaml").is_file(),
            _ => path.is_file(),
        }
    }

    /// How to get the tool, for the skip message.
    fn how_to_get(self) -> &'static str {
        match self {
            Tool::Helm | Tool::Kubectl | Tool::OpenshellPythonSdk | Tool::JunitConsumers => {
                "run .ci/tools.sh"
            }
            Tool::OpenshellChart | Tool::AgentSandboxManifest => {
                "put the upstream test material (chart, Agent Sandbox manifest) beside the repository or set the variable"
            }
            _ => {
                "put the OpenShell binaries of the default release beside the repository or set the variable"
            }
        }
    }
}

/// The versions of the release installed by default, as its file in `fixtures/releases/` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultRelease {
    /// `openshell:`, such as `0.0.111`.
    pub openshell: String,
    /// `agent_sandbox.install:`, such as `v0.5.0`.
    pub agent_sandbox: String,
}

/// Reads the release file that says `installed_by_default: true`. A line reading of the few
/// keys needed (this crate depends on nothing): top-level `openshell:` and `install:` under
/// `agent_sandbox:`.
///
/// # Panics
/// If no release file says so, or it lacks either key: the fixtures are broken.
pub fn default_release() -> DefaultRelease {
    let dir = workspace_root().join("fixtures/releases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        if !text
            .lines()
            .any(|l| l.trim_end() == "installed_by_default: true")
        {
            continue;
        }
        let value = |l: &str, key: &str| {
            l.strip_prefix(key)
                .map(|v| v.split('#').next().unwrap_or("").trim().to_string())
        };
        let openshell = text.lines().find_map(|l| value(l, "openshell:"));
        let mut section = "";
        let mut agent_sandbox = None;
        for l in text.lines() {
            if !l.starts_with(' ') && !l.starts_with('#') && !l.is_empty() {
                section = l.split(':').next().unwrap_or("");
            } else if section == "agent_sandbox" {
                agent_sandbox = agent_sandbox.or_else(|| value(l.trim_start(), "install:"));
            }
        }
        return DefaultRelease {
            openshell: openshell.unwrap_or_else(|| panic!("{}: no `openshell:`", f.display())),
            agent_sandbox: agent_sandbox
                .unwrap_or_else(|| panic!("{}: no `agent_sandbox.install:`", f.display())),
        };
    }
    panic!(
        "no file in {} says `installed_by_default: true`",
        dir.display()
    );
}

/// The repository's root (this crate lives in `harness/testtools`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the tool is, if it is there.
pub fn find(tool: Tool) -> Option<PathBuf> {
    let path = std::env::var_os(tool.env_var())
        .map(PathBuf::from)
        .unwrap_or_else(|| tool.default_path());
    tool.present(&path)
        .then(|| path.canonicalize().unwrap_or(path))
}

/// Whether this is a CI run, where every tool must be present.
pub fn in_ci() -> bool {
    std::env::var("CI")
        .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// The tool, or `None` after printing why `test` is skipped. Panics in CI, where a skipped
/// proof would read as a passing one.
pub fn require(tool: Tool, test: &str) -> Option<PathBuf> {
    if let Some(p) = find(tool) {
        return Some(p);
    }
    let why = format!(
        "{tool:?} not found at {} ({} overrides; {})",
        tool.default_path().display(),
        tool.env_var(),
        tool.how_to_get()
    );
    assert!(!in_ci(), "{test}: {why}; CI must run this test");
    eprintln!("SKIPPED {test}: {why}");
    None
}

/// Every tool in `tools`, or `None` after printing why `test` is skipped (see [`require`]).
pub fn require_all<const N: usize>(tools: [Tool; N], test: &str) -> Option<[PathBuf; N]> {
    let found: Vec<PathBuf> = tools
        .iter()
        .map(|t| require(*t, test))
        .collect::<Option<_>>()?;
    found.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_release_is_read_from_its_file() {
        assert_eq!(
            default_release(),
            DefaultRelease {
                openshell: "0.0.111".into(),
                agent_sandbox: "v0.5.0".into()
            }
        );
        assert!(
            Tool::OpenshellChart
                .default_path()
                .ends_with("upstream/openshell-chart-v0.0.111")
        );
        assert!(
            Tool::AgentSandboxManifest
                .default_path()
                .ends_with("agent-sandbox-v0.5.0/manifest.yaml")
        );
    }
}
