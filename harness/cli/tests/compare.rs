//! `compare A B` on runs the harness recorded: the emulated target's contract model against
//! itself with a defect switch, so the sides differ in what the defect breaks.

use std::path::Path;

use serde_json::Value;

#[path = "common/binary.rs"]
mod binary;

use binary::{run, text};

const CASE: &str = "stopped-through-outage[combined,outage=30s]";
/// The one check the defect [`DEFECT`] breaks in [`CASE`].
const BROKEN: &str = "the stopped sandbox is not started by the returning gateway";
const DEFECT: &str = "gateway-restart-starts-stopped-sandboxes";

/// Runs `stopped-through-outage` on `topologies` into artifacts directory `name`, with `defect` if
/// given, and checks the run's exit code (1 with a defect, 0 without).
fn record(dir: &Path, name: &str, topologies: &[&str], defect: Option<&str>) {
    let mut args = vec![
        "run",
        "--scenario",
        "stopped-through-outage",
        "--artifacts",
        name,
    ];
    for t in topologies {
        args.extend(["--topology", t]);
    }
    if let Some(d) = defect {
        args.extend(["--defect", d]);
    }
    let o = run(&args, dir);
    let want = if defect.is_some() { 1 } else { 0 };
    assert_eq!(o.status.code(), Some(want), "{}", text(&o));
}

/// `good`: the contract model; `bad`: the same with the defect that fails one check.
fn good_and_bad(dir: &Path) {
    record(dir, "good", &["combined"], None);
    record(dir, "bad", &["combined"], Some(DEFECT));
}

/// `compare A B --known-differences known.yaml` in `dir`.
fn compare_known(dir: &Path, a: &str, b: &str) -> std::process::Output {
    run(&["compare", a, b, "--known-differences", "known.yaml"], dir)
}

fn known_file(dir: &Path, yaml: &str) {
    std::fs::write(dir.join("known.yaml"), yaml).unwrap();
}

const KNOWN_BROKEN: &str = "known_differences:\n  - case: \"stopped-through-outage[combined,*\"\n    check: \"the stopped sandbox is not started by the returning gateway\"\n    reason: \"the returning gateway's startup sweep starts stopped sandboxes\"\n    fact: \"defect switch gateway-restart-starts-stopped-sandboxes\"\n";

#[test]
fn two_recorded_runs_that_differ_in_one_check_show_both_verdicts_and_what_each_side_observed_and_exit_1()
 {
    let dir = tempfile::tempdir().unwrap();
    good_and_bad(dir.path());
    let o = run(&["compare", "good", "bad"], dir.path());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("{CASE}: DIFFER\n  A: passed\n  B: failed (")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "  check '{BROKEN}' [R7]: A passed, B FAILED\n    expected: never "
        )),
        "{out}"
    );
    assert!(
        out.contains("    A observed: it never held\n    B observed: it held at "),
        "{out}"
    );
    // Only the broken check is listed: the others have the same result on both sides.
    assert_eq!(out.matches("  check '").count(), 1, "{out}");
    assert!(
        out.contains("1 cases: 0 agree, 0 differ as known, 1 differ, 0 only in A, 0 only in B; 0 stale known differences"),
        "{out}"
    );
    // The same sides the other way round: the sides swap, nothing else.
    let o = run(&["compare", "bad/timelines", "good"], dir.path());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("  check '{BROKEN}' [R7]: A FAILED, B passed")),
        "{out}"
    );
    // A run compared with itself agrees.
    let o = run(&["compare", "good", "good/timelines"], dir.path());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains(&format!("{CASE}: agree\n")), "{out}");
}

#[test]
fn a_case_only_one_side_has_is_named_with_its_verdict_and_fails_the_comparison() {
    let dir = tempfile::tempdir().unwrap();
    record(dir.path(), "both", &["combined", "sidecar"], None);
    record(dir.path(), "one", &["combined"], None);
    let o = run(&["compare", "both", "one"], dir.path());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(
            "stopped-through-outage[sidecar,outage=30s]: only in A\n  A: passed\n  B: absent\n"
        ),
        "{out}"
    );
    assert!(out.contains(&format!("{CASE}: agree\n")), "{out}");
    let o = run(&["compare", "one", "both"], dir.path());
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("stopped-through-outage[sidecar,outage=30s]: only in B\n"),
        "{out}"
    );
    // Declared as a whole case, it is known.
    known_file(
        dir.path(),
        "known_differences:\n  - case: \"stopped-through-outage[sidecar,outage=30s]\"\n    reason: \"side B ran combined only\"\n    fact: \"--topology combined\"\n",
    );
    let o = compare_known(dir.path(), "both", "one");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("only in A\n  A: passed\n  B: absent\n  known difference: side B ran combined only; fact: --topology combined\n"),
        "{out}"
    );
}

#[test]
fn a_declared_difference_turns_exit_1_into_exit_0_and_is_shown_as_known_with_its_reason_and_fact() {
    let dir = tempfile::tempdir().unwrap();
    good_and_bad(dir.path());
    known_file(dir.path(), KNOWN_BROKEN);
    let o = compare_known(dir.path(), "good", "bad");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains(&format!("{CASE}: differ as known\n")), "{out}");
    assert!(
        out.contains("    known difference: the returning gateway's startup sweep starts stopped sandboxes; fact: defect switch gateway-restart-starts-stopped-sandboxes\n"),
        "{out}"
    );
    assert!(
        out.contains("1 cases: 0 agree, 1 differ as known, 0 differ"),
        "{out}"
    );
    // A declaration of another check leaves this one a difference.
    known_file(
        dir.path(),
        &KNOWN_BROKEN.replace(BROKEN, "a check no case has"),
    );
    let o = compare_known(dir.path(), "good", "bad");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("STALE known difference: case 'stopped-through-outage[combined,*', check 'a check no case has': no case it names has a check 'a check no case has'"),
        "{out}"
    );
}

#[test]
fn a_declared_difference_the_runs_no_longer_show_is_stale_and_fails_like_an_unexpected_pass() {
    let dir = tempfile::tempdir().unwrap();
    record(dir.path(), "good", &["combined"], None);
    known_file(
        dir.path(),
        &format!(
            "{KNOWN_BROKEN}  - case: \"error-recovery[*\"\n    reason: \"not run here\"\n    fact: \"F1.9\"\n"
        ),
    );
    let o = compare_known(dir.path(), "good", "good");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("STALE known difference: case 'stopped-through-outage[combined,*', check '{BROKEN}': check '{BROKEN}' has the same result on both sides; remove it from the file")),
        "{out}"
    );
    // A case neither side ran is no evidence either way.
    assert!(
        out.contains("note: known difference for case 'error-recovery[*' not applied: neither side has that case"),
        "{out}"
    );
}

#[test]
fn the_json_output_has_the_documented_shape() {
    let dir = tempfile::tempdir().unwrap();
    good_and_bad(dir.path());
    known_file(dir.path(), KNOWN_BROKEN);
    let o = run(
        &[
            "compare",
            "good",
            "bad",
            "--format",
            "json",
            "--known-differences",
            "known.yaml",
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&v),
        [
            "a",
            "agree",
            "b",
            "cases",
            "not_applicable",
            "stale",
            "totals"
        ]
    );
    assert_eq!(v["a"], "good");
    assert_eq!(v["agree"], true);
    let case = &v["cases"][0];
    assert_eq!(
        keys(case),
        [
            "a",
            "b",
            "case",
            "checks",
            "known",
            "params",
            "scenario",
            "status",
            "topology",
            "verdict_differs"
        ]
    );
    assert_eq!(case["case"], CASE);
    assert_eq!(case["scenario"], "stopped-through-outage");
    assert_eq!(case["params"], serde_json::json!({"outage": "30s"}));
    assert_eq!(case["topology"], "combined");
    assert_eq!(case["status"], "known");
    assert_eq!(case["verdict_differs"], true);
    assert_eq!(case["known"], Value::Null);
    assert_eq!(case["a"]["verdict"]["verdict"], "passed");
    assert_eq!(case["b"]["verdict"]["verdict"], "failed");
    assert!(
        case["a"]["file"]
            .as_str()
            .unwrap()
            .ends_with("stopped-through-outage_combined,outage=30s_.jsonl")
    );
    let checks = case["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 1);
    let c = &checks[0];
    assert_eq!(
        keys(c),
        ["a", "b", "check", "expected", "known", "requirements"]
    );
    assert_eq!(c["check"], BROKEN);
    assert_eq!(c["requirements"], serde_json::json!(["R7"]));
    assert_eq!(c["a"]["status"], "passed");
    assert_eq!(c["b"]["status"], "failed");
    assert!(
        c["b"]["observed"]
            .as_str()
            .unwrap()
            .starts_with("it held at ")
    );
    assert_eq!(
        c["known"],
        serde_json::json!({
            "reason": "the returning gateway's startup sweep starts stopped sandboxes",
            "fact": "defect switch gateway-restart-starts-stopped-sandboxes"
        })
    );
    assert_eq!(
        v["totals"],
        serde_json::json!({"cases": 1, "agree": 0, "known": 1, "differ": 0, "only_a": 0, "only_b": 0, "stale": 0})
    );
    assert_eq!(v["stale"], serde_json::json!([]));
}

#[test]
fn input_that_cannot_be_compared_is_a_usage_error_that_says_what_to_give() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("empty")).unwrap();
    std::fs::create_dir_all(d.join("garbage/timelines")).unwrap();
    std::fs::write(d.join("garbage/timelines/x.jsonl"), "not json\n").unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["compare", "missing", "empty"],
            "side A: cannot read missing; give a run's artifacts directory, a directory of timelines or one timeline file",
        ),
        (
            &["compare", "garbage", "missing"],
            "side B: cannot read missing",
        ),
        (
            &["compare", "empty", "garbage"],
            "side A: no timelines (*.jsonl) in empty",
        ),
        (
            &["compare", "garbage", "garbage"],
            "side A: a timeline cannot be read\n  caused by: cannot read timeline garbage/timelines/x.jsonl",
        ),
        (&["compare", "garbage"], "<B>"),
    ];
    for (args, want) in cases {
        let o = run(args, d);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {out}");
        assert!(out.contains(want), "{args:?}: {out}");
    }
    // A bad known-differences file is refused before any timeline is read.
    let refused: &[(&str, &str)] = &[
        (
            "known_differences:\n  - case: \"x[combined]\"\n    check: \"c\"\n    reason: \"why\"\n",
            "fact",
        ),
        (
            "known_differences:\n  - case: \"x[combined]\"\n    reason: \" \"\n    fact: \"F1\"\n",
            "known_differences[0].reason`: must say why the sides differ",
        ),
        (
            "known_differences:\n  - case: \"x[combined]\"\n    reason: \"r\"\n    fact: \"\"\n",
            "known_differences[0].fact`: must name the fact behind the difference",
        ),
        (
            "known_differences:\n  - case: \"x[combined]\"\n    reason: \"r\"\n    fact: \"f\"\n    sides: 2\n",
            "sides",
        ),
        ("known_differences: [", "known.yaml"),
    ];
    for (yaml, want) in refused {
        known_file(d, yaml);
        let o = run(
            &[
                "compare",
                "garbage",
                "garbage",
                "--known-differences",
                "known.yaml",
            ],
            d,
        );
        let out = text(&o);
        assert_eq!(o.status.code(), Some(2), "{yaml}: {out}");
        assert!(out.contains(want), "{yaml}: {out}");
        assert!(!out.contains("cannot read timeline"), "{yaml}: {out}");
    }
    let o = run(
        &[
            "compare",
            "garbage",
            "garbage",
            "--known-differences",
            "nope.yaml",
        ],
        d,
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("known differences file nope.yaml: cannot read it"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_side_with_a_timeline_cut_short_or_the_same_case_twice_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    record(d, "good", &["combined"], None);
    let file = std::fs::read_dir(d.join("good/timelines"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text_of = std::fs::read_to_string(&file).unwrap();
    std::fs::create_dir_all(d.join("cut")).unwrap();
    let lines: Vec<&str> = text_of.lines().collect();
    std::fs::write(
        d.join("cut/x.jsonl"),
        lines[..lines.len() - 1].join("\n") + "\n",
    )
    .unwrap();
    let o = run(&["compare", "good", "cut"], d);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("side B: cut/x.jsonl cannot be compared: it is incomplete"),
        "{out}"
    );
    std::fs::create_dir_all(d.join("twice")).unwrap();
    std::fs::copy(&file, d.join("twice/1.jsonl")).unwrap();
    std::fs::copy(&file, d.join("twice/2.jsonl")).unwrap();
    let o = run(&["compare", "twice", "good"], d);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains(&format!(
            "side A: twice/1.jsonl and twice/2.jsonl are both case {CASE}; a side must hold one run's timelines"
        )),
        "{out}"
    );
    // One timeline file is a side of its own.
    let one = file.to_str().unwrap();
    let o = run(&["compare", one, "good"], d);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn each_sides_verdict_is_the_one_its_run_gave_with_the_known_failures_it_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // openshell-0.0.111 fails supervisor-restart as its expectations file says; contract passes.
    for (name, model) in [("model", "openshell-0.0.111"), ("contract", "contract")] {
        let o = run(
            &[
                "run",
                "--model",
                model,
                "--scenario",
                "supervisor-restart",
                "--topology",
                "combined",
                "--artifacts",
                name,
            ],
            d,
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    let o = run(&["compare", "model", "contract"], d);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(
            "supervisor-restart[combined]: DIFFER\n  A: expected failure (expected failure of R12: "
        ) && out.contains("\n  B: passed\n"),
        "{out}"
    );
    assert!(
        out.contains("  check 'the workload re-attaches: the sandbox is Ready again' [R12]: A FAILED, B passed\n"),
        "{out}"
    );
}

/// The comparison `make e2e-real-openshell` printed, recorded with its provenance.
const RECORDED: &str = "fixtures/recorded/real-openshell-0.0.111/comparison.json";

fn repo_file(rel: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn real_openshell_v0_0_111_equals_its_model_in_every_case_of_both_topologies_as_recorded() {
    let c: serde_json::Value = serde_json::from_str(&repo_file(RECORDED)).unwrap();
    let cases = c["cases"].as_array().unwrap();
    // The whole openshell-0.0.111 catalog, on combined and on sidecar.
    for topology in ["combined", "sidecar"] {
        let n = cases.iter().filter(|k| k["topology"] == topology).count();
        assert_eq!(n, 21, "{topology}");
    }
    // Every case agrees check by check, or differs only as the known-differences file declares
    // (each with its reason and fact).
    for case in cases {
        assert!(
            matches!(case["status"].as_str(), Some("agree" | "known")),
            "{}: {}",
            case["case"],
            case["status"]
        );
    }
    assert_eq!(c["agree"], true);
    assert_eq!(c["totals"]["differ"], 0);
    assert_eq!(c["totals"]["only_a"], 0);
    assert_eq!(c["totals"]["only_b"], 0);
}

#[test]
fn the_readmes_table_of_real_openshell_against_its_model_is_the_recorded_comparison_rendered() {
    let c: serde_json::Value = serde_json::from_str(&repo_file(RECORDED)).unwrap();
    let table = openshell_conformance::cli::render_comparison_markdown(&c);
    let readme = repo_file("README.md");
    let (begin, end) = (
        "<!-- recorded comparison: begin -->\n",
        "<!-- recorded comparison: end -->",
    );
    let start = readme.find(begin).expect("the README marks the table") + begin.len();
    let stop = readme[start..].find(end).expect("the table's end mark") + start;
    assert_eq!(
        readme[start..stop].trim(),
        table.trim(),
        "re-render the README's table from {RECORDED} (`compare --format markdown`)"
    );
}
