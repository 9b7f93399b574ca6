//! The numbered requirements of `suites/REQUIREMENTS.md`, as data. A test keeps the two in step.

/// One requirement: its id, its text, and the report it comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub id: &'static str,
    pub text: &'static str,
    pub source: &'static str,
}

const fn req(id: &'static str, text: &'static str, source: &'static str) -> Requirement {
    Requirement { id, text, source }
}

pub const REQUIREMENTS: &[Requirement] = &[
    req(
        "R1",
        "Before workload activation a sandbox tolerates transient gateway unavailability and becomes usable once the gateway returns, without manual deletion.",
        "bug 1; NVIDIA/OpenShell#3274",
    ),
    req(
        "R2",
        "That tolerance outlasts both the policy-fetch retry window (about 11 s) and the 120 s process-sidecar wait.",
        "bug 1; #3274",
    ),
    req(
        "R3",
        "No workload starts before authenticated policy and required enforcement bootstrap succeed.",
        "bug 1 acceptance criteria",
    ),
    req(
        "R4",
        "Permanent authentication, configuration and policy errors stay explicit failures within a bounded time; TLS validation is preserved.",
        "bug 1 acceptance criteria",
    ),
    req(
        "R5",
        "Each attempt is bounded, retries use capped backoff, and waiting is cancellable and diagnosable.",
        "bug 1 acceptance criteria; #3566",
    ),
    req(
        "R6",
        "Workspace data survives every tested recovery.",
        "bugs 1 and 3",
    ),
    req(
        "R7",
        "Explicit stops and completed workloads stay terminal; nothing silently replays a completed command.",
        "bug 3; #2884, #3117",
    ),
    req(
        "R8",
        "A sandbox already in terminal bootstrap error has a supported, data-preserving recovery path.",
        "bug 1; #2179, #3308",
    ),
    req(
        "R9",
        "A gateway restart or outage does not make running sandboxes terminal; they return to Ready.",
        "bug 3; #2417, #2965",
    ),
    req(
        "R10",
        "The restart policy is honoured on every path that ends the main process, gateway restarts included.",
        "bug 3; #2798",
    ),
    req(
        "R11",
        "Provisioning completes on every supported supervisor topology within the provisioning timeout.",
        "bug 2; #3144",
    ),
    req(
        "R12",
        "After a supervisor restart the workload re-attaches, or fails explicitly without a crash loop.",
        "bug 2; #3396",
    ),
    req(
        "R13",
        "Failure paths release scheduling gates and leak no pods, PVCs or custom resources.",
        "bug 2; #3144",
    ),
    req(
        "R14",
        "Every failure is diagnosable: the reported status and the logs name the cause.",
        "bugs 1-3; #3566",
    ),
];

pub fn find(id: &str) -> Option<&'static Requirement> {
    REQUIREMENTS.iter().find(|r| r.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_and_requirements_md_list_the_same_requirements_with_the_same_text() {
        let md = include_str!("../REQUIREMENTS.md");
        let rows: Vec<(String, String)> = md
            .lines()
            .filter(|l| l.starts_with("| R"))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                (cells[1].to_string(), cells[2].to_string())
            })
            .collect();
        let code: Vec<(String, String)> = REQUIREMENTS
            .iter()
            .map(|r| (r.id.to_string(), r.text.to_string()))
            .collect();
        assert_eq!(rows, code);
    }

    #[test]
    fn requirement_ids_are_numbered_without_gaps() {
        for (i, r) in REQUIREMENTS.iter().enumerate() {
            assert_eq!(r.id, format!("R{}", i + 1));
        }
        assert!(find("R14").is_some());
        assert!(find("R15").is_none());
    }
}
