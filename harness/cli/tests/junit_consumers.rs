//! The JUnit of every kind of run, read by the consumers CI dashboards are built on
//! (junitparser and junit2html, installed by `.ci/tools.sh`): what they count equals the run's
//! summary. The interrupted run is checked in `cli.rs`, the served one in `served_real_path.rs`.

use std::path::Path;

#[path = "common/binary.rs"]
mod binary;
#[path = "common/junit_consumers.rs"]
mod junit_consumers;

fn run_and_read(args: &[&str], want_exit: i32, test: &str) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("stale.yaml"),
        "target: openshell-0.0.111\nexpected_failures:\n  - case: \"gateway-restart[*\"\n    requirement: R9\n    report: \"#9999, fixed since\"\n",
    )
    .unwrap();
    let mut args = args.to_vec();
    args.extend(["--artifacts", "a"]);
    let o = binary::run(&args, dir.path());
    let out = binary::text(&o);
    assert_eq!(o.status.code(), Some(want_exit), "{out}");
    let junit = Path::new(dir.path()).join("a/junit.xml");
    let Some(parsed) = junit_consumers::read(&junit, test) else {
        return;
    };
    junit_consumers::assert_agrees(&parsed, junit_consumers::summary_totals(&out));
}

#[rstest::rstest]
#[case::passing(&["run", "--scenario", "provisioning", "--scenario", "gateway-restart"], 0)]
#[case::defect(&["run", "--defect", "gateway-restart-marks-error", "--scenario", "gateway-restart", "--scenario", "provisioning"], 1)]
#[case::known_failures(&["run", "--model", "openshell-0.0.111", "--scenario", "bootstrap-outage", "--scenario", "gateway-restart"], 0)]
#[case::unexpected_pass(&["run", "--model", "openshell-0.0.111", "--scenario", "gateway-restart", "--expectations", "stale.yaml"], 1)]
#[case::all_skipped(&["run", "--model", "openshell-0.0.111", "--scenario", "restart-policy-always"], 0)]
fn junit_consumers_count_what_the_summary_says(#[case] args: &[&str], #[case] exit: i32) {
    run_and_read(args, exit, "junit_consumers_count_what_the_summary_says");
}
