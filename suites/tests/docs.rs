//! The docs a newcomer reads stay true to the repository: every path that README.md and
//! docs/architecture.md name exists, every workspace crate has its line on the architecture
//! page, and the README's test command is the one `.ci/run` runs. Reads files only.

use std::path::{Path, PathBuf};

/// Top-level folders of the repository: a backticked span that starts with one of these and
/// names a path is a promise that the path exists.
const ROOTS: &[&str] = &[
    "harness", "suites", "fixtures", "docs", ".ci", ".config", ".github",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the catalog sits one level below the repository root")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text outside fenced code blocks, and the fenced blocks' lines, apart.
fn split_fences(text: &str) -> (String, Vec<&str>) {
    let (mut prose, mut code, mut fenced) = (String::new(), Vec::new(), false);
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if fenced {
            code.push(line);
        } else {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    (prose, code)
}

/// The part of a named path that must exist: up to the folder before a placeholder
/// (`<name>`, `*`), without a trailing `:line`.
fn checked_part(named: &str) -> Option<&str> {
    let named = named.trim_end_matches(|c: char| c == ':' || c.is_ascii_digit());
    let named = match named.find(['<', '*']) {
        Some(at) => &named[..named[..at].rfind('/')? + 1],
        None => named,
    };
    let first = named.split('/').next()?;
    (named.contains('/') && ROOTS.contains(&first) && !named.contains(char::is_whitespace))
        .then_some(named)
}

/// Repository paths a document names: in backticks, as relative link targets, and as the first
/// column of its fenced layout listings.
fn named_paths(doc: &str) -> Vec<String> {
    let text = read(doc);
    let base = Path::new(doc).parent().unwrap_or(Path::new(""));
    let (prose, code) = split_fences(&text);
    let mut paths = Vec::new();
    for (i, span) in prose.split('`').enumerate() {
        if i % 2 == 1
            && let Some(p) = checked_part(span)
        {
            paths.push(p.to_string());
        }
    }
    for link in prose.split("](").skip(1) {
        let target = link.split(')').next().unwrap_or_default();
        let target = target.split('#').next().unwrap_or_default();
        if !target.is_empty() && !target.contains("://") {
            let joined = base.join(target);
            paths.push(normalise(&joined));
        }
    }
    for line in code {
        if let Some(first) = line.split_whitespace().next()
            && let Some(p) = checked_part(first)
        {
            paths.push(p.to_string());
        }
    }
    paths
}

/// `docs/../README.md` as `README.md`.
fn normalise(path: &Path) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path
        .iter()
        .map(|p| p.to_str().expect("paths in docs are UTF-8"))
    {
        match part {
            ".." => {
                parts.pop();
            }
            "." => {}
            p => parts.push(p),
        }
    }
    parts.join("/")
}

#[test]
fn every_repository_path_the_readme_and_the_architecture_page_name_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in ["README.md", "docs/architecture.md", "docs/performance.md"] {
        for path in named_paths(doc) {
            checked += 1;
            if !repo().join(&path).exists() {
                missing.push(format!("{doc}: {path}"));
            }
        }
    }
    assert!(
        checked > 30,
        "only {checked} paths found: the extraction broke"
    );
    assert!(
        missing.is_empty(),
        "paths named in the docs that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_workspace_crate_has_its_line_on_the_architecture_page() {
    let manifest = read("Cargo.toml");
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("the root Cargo.toml lists its members");
    let page = read("docs/architecture.md");
    let mut missing = Vec::new();
    for member in members.split(',').map(|m| m.trim().trim_matches('"')) {
        if member.is_empty() || member.starts_with('#') {
            continue;
        }
        let package = read(&format!("{member}/Cargo.toml"))
            .lines()
            .find_map(|l| l.strip_prefix("name = "))
            .map(|n| n.trim_matches('"').to_string())
            .expect("every member names its package");
        let row = format!("| `{member}/` (`{package}`) |");
        if !page.contains(&row) {
            missing.push(row);
        }
    }
    assert!(
        missing.is_empty(),
        "crates without their row in docs/architecture.md's crate table:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_readmes_test_command_is_the_one_ci_runs() {
    let script = read(".ci/run");
    let ci: Vec<&str> = script
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("cargo nextest run"))
        .collect();
    assert!(!ci.is_empty(), ".ci/run runs no `cargo nextest run`");
    let command = ci.join(" && ");
    let readme = read("README.md");
    let (_, code) = split_fences(&readme);
    assert!(
        code.iter().any(|l| l.trim() == command),
        "the README shows no code line `{command}`, which is what .ci/run runs"
    );
}
