//! Where tests find the real tools they drive, and what happens when one is missing.
//!
//! `.ci/tools.sh` installs helm, kubectl and the OpenShell Python SDK into the git-ignored
//! `.tools/`; the OpenShell v0.0.111 binaries, its chart and the Agent Sandbox v0.5.0 manifest
//! are test material beside the repository (`../shared/tools/openshell-v0.0.111/`,
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
    /// The real `openshell` CLI v0.0.111.
    OpenshellCli,
    /// The real `openshell-gateway` v0.0.111 (also the chart's certgen).
    OpenshellGateway,
    /// The real `openshell-sandbox` supervisor v0.0.111.
    OpenshellSandbox,
    /// The directory holding the official OpenShell Python SDK (`PYTHONPATH` for `python3`).
    OpenshellPythonSdk,
    /// The OpenShell v0.0.111 helm chart, unpacked (a directory with `Chart.yaml`).
    OpenshellChart,
    /// The Agent Sandbox v0.5.0 release's `manifest.yaml`.
    AgentSandboxManifest,
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
        }
    }

    fn default_path(self) -> PathBuf {
        let root = workspace_root();
        let shared = root.join("../shared/tools/openshell-v0.0.111");
        let upstream = root.join("../shared/upstream");
        match self {
            Tool::Helm => root.join(".tools/bin/helm"),
            Tool::Kubectl => root.join(".tools/bin/kubectl"),
            Tool::OpenshellCli => shared.join("openshell"),
            Tool::OpenshellGateway => shared.join("openshell-gateway"),
            Tool::OpenshellSandbox => shared.join("openshell-sandbox"),
            Tool::OpenshellPythonSdk => root.join(".tools/python"),
            Tool::OpenshellChart => upstream.join("openshell-chart-v0.0.111"),
            Tool::AgentSandboxManifest => upstream.join("agent-sandbox-v0.5.0/manifest.yaml"),
        }
    }

    fn present(self, path: &Path) -> bool {
        match self {
            Tool::OpenshellPythonSdk => path.join("openshell/__init__.py").is_file(),
            Tool::OpenshellChart => path.join("Chart.yaml").is_file(),
            _ => path.is_file(),
        }
    }

    /// How to get the tool, for the skip message.
    fn how_to_get(self) -> &'static str {
        match self {
            Tool::Helm | Tool::Kubectl | Tool::OpenshellPythonSdk => "run .ci/tools.sh",
            Tool::OpenshellChart | Tool::AgentSandboxManifest => {
                "put the upstream test material (chart, Agent Sandbox manifest) beside the repository or set the variable"
            }
            _ => "put the OpenShell v0.0.111 binaries beside the repository or set the variable",
        }
    }
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
