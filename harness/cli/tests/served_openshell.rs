//! Real OpenShell on the served cluster: the upstream v0.0.111 gateway, certgen and sandbox
//! supervisor run as pod processes (`run --target served --openshell-binaries`), installed by
//! the real chart with real helm and driven by the real CLI through the unchanged real path.
//! Their verdicts are put next to the `openshell-0.0.111` model's for the same cases: what the
//! model claims about upstream is checked against upstream itself. Needs root (namespaces,
//! mounts, veth pairs), as our CI has; elsewhere the test says why it is skipped.

mod served_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use conformance_testtools::{Tool, require_all};
use served_support::{Harness, MODEL, Tools, summary_verdicts};

/// The Agent Sandbox release of the real manifest (the emulated side models the same one).
const AGENT_SANDBOX: &str = "v0.5.0";

/// A directory holding the real gateway and supervisor binaries, or `None` after saying why
/// the test is skipped (a failure in CI).
fn binaries(test: &str, dir: &Path) -> Option<PathBuf> {
    let [gateway, supervisor] =
        require_all([Tool::OpenshellGateway, Tool::OpenshellSandbox], test)?;
    if let Some(why) = conformance_node::unsupported() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: containers cannot run as processes here: {why}; CI must run this test"
        );
        eprintln!("SKIPPED {test}: containers cannot run as processes here: {why}");
        return None;
    }
    // One release directory, wherever the two were found.
    let out = dir.join("openshell-release");
    std::fs::create_dir_all(&out).unwrap();
    for (from, name) in [
        (gateway, "openshell-gateway"),
        (supervisor, "openshell-sandbox"),
    ] {
        std::os::unix::fs::symlink(&from, out.join(name)).unwrap();
    }
    Some(out)
}

fn timeline(artifacts: &Path, case: &str) -> String {
    let dir = artifacts.join("timelines");
    let file = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with(case))
        .unwrap_or_else(|| panic!("no timeline of {case} in {}", dir.display()));
    std::fs::read_to_string(file.path()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn real_openshell_v0_0_111_on_combined_gives_the_models_verdicts_and_reproduces_the_bootstrap_report()
 {
    let test = "real_openshell_v0_0_111_on_combined";
    let Some(tools) = Tools::require(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(release) = binaries(test, dir.path()) else {
        return;
    };
    let cases = ["provisioning", "gateway-restart", "bootstrap-outage*"];
    let mut common: Vec<String> = [
        "--model",
        MODEL,
        "--topology",
        "combined",
        "--outage",
        "30s",
    ]
    .map(String::from)
    .to_vec();
    for c in cases {
        common.extend(["--scenario".into(), c.into()]);
    }

    let real_artifacts = dir.path().join("real");
    let mut args: Vec<String> = ["run", "--target", "served", "--openshell-binaries"]
        .map(String::from)
        .to_vec();
    args.push(release.display().to_string());
    args.extend(tools.real_flags());
    args.extend(common.iter().cloned());
    args.extend([
        "--artifacts".into(),
        real_artifacts.display().to_string(),
        "--private-dir".into(),
        dir.path().join("private").display().to_string(),
    ]);
    let (code, out) = Harness::spawn(&tools, &args)
        .finish(Duration::from_secs(600))
        .await;

    let emulated_artifacts = dir.path().join("emulated");
    let emulated = std::process::Command::new(env!("CARGO_BIN_EXE_openshell-conformance"))
        .args([
            "run",
            "--target",
            "emulated",
            "--agent-sandbox",
            AGENT_SANDBOX,
        ])
        .args(&common)
        .arg("--artifacts")
        .arg(&emulated_artifacts)
        .output()
        .expect("the harness runs");
    let emulated_out = String::from_utf8_lossy(&emulated.stdout).to_string();

    // Case by case, real v0.0.111 gives the verdicts the model expects of it.
    let real = summary_verdicts(&out);
    assert_eq!(
        real.len(),
        3,
        "three cases ran against real OpenShell:\n{out}"
    );
    assert_eq!(
        real,
        summary_verdicts(&emulated_out),
        "real OpenShell v0.0.111 and its model disagree:\n--- real\n{out}\n--- model\n{emulated_out}"
    );
    assert_eq!(
        code,
        emulated.status.code().unwrap_or(-1),
        "same exit code:\n{out}"
    );
    assert!(
        real.iter()
            .any(|(c, v)| c.starts_with("bootstrap-outage") && v == "xfail"),
        "{real:?}"
    );

    // Every request the real gateway, certgen and supervisors made was served: one that is not
    // is a gap of the served cluster, named here.
    assert!(
        out.contains(
            "API requests of the real OpenShell processes the served cluster could not serve: 0"
        ),
        "the served cluster failed requests of the real binaries:\n{out}"
    );

    // The first report, from upstream's own code: the replacement pod, started while the
    // gateway is away, gives up (its supervisor exits 1 after five policy fetches) before the
    // gateway returns, and the timeline holds the supervisor's own words for it.
    let tl = timeline(&real_artifacts, "bootstrap-outage");
    assert!(
        tl.contains(r#""name":"agent","state":"terminated","reason":"Error","exit_code":1"#)
            && tl.contains("Policy fetch failed after 5 attempts"),
        "the timeline shows the supervisor giving up:\n{tl}"
    );
}
