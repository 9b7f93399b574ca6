//! Reads a run's JUnit with the consumers CI dashboards are built on, junitparser (the parser
//! behind the GitHub "publish unit test results" reporters) and junit2html, and checks that
//! what they count is what the run's summary said (see README, "Reading the reports").

use std::path::Path;
use std::process::Command;

use conformance_testtools::{Tool, require};

/// What junitparser finds in one testsuite (one case).
#[derive(Debug, serde::Deserialize)]
pub struct Suite {
    pub name: String,
    pub outcome: String,
    pub cases: usize,
    pub failures: usize,
    pub errors: usize,
    pub skipped: usize,
    pub xfail: usize,
    pub xpass: usize,
    /// Error testcases named `interrupted`.
    pub interrupted: usize,
}

/// What junitparser reads from a JUnit file: the totals the XML states, the totals it counts
/// from the testcases, and every suite.
#[derive(Debug, serde::Deserialize)]
pub struct Parsed {
    pub stated: [usize; 4],
    pub counted: [usize; 4],
    pub suites: Vec<Suite>,
}

const PARSE: &str = r#"
import json, sys
from junitparser import JUnitXml, TestSuite, Failure, Error, Skipped
xml = JUnitXml.fromfile(sys.argv[1])
suites = [xml] if isinstance(xml, TestSuite) else list(xml)
stated = [xml.tests, xml.failures, xml.errors, xml.skipped]
out = []
for s in suites:
    props = {p.name: p.value for p in s.properties()}
    row = dict(name=s.name, outcome=props.get("outcome", ""), cases=0, failures=0, errors=0,
               skipped=0, xfail=0, xpass=0, interrupted=0)
    for c in s:
        row["cases"] += 1
        for r in c.result:
            if isinstance(r, Failure):
                row["failures"] += 1
                row["xpass"] += r.type == "xpass"
            elif isinstance(r, Error):
                row["errors"] += 1
                row["interrupted"] += c.name == "interrupted"
            elif isinstance(r, Skipped):
                row["skipped"] += 1
                row["xfail"] += r.type == "xfail"
    out.append(row)
xml.update_statistics()
counted = [xml.tests, xml.failures, xml.errors, xml.skipped]
print(json.dumps(dict(stated=stated, counted=counted, suites=out)))
"#;

/// The JUnit at `junit` as junitparser reads it, after junit2html has rendered it; `None`
/// (printed as a skip) when the consumers are not installed, outside CI.
pub fn read(junit: &Path, test: &str) -> Option<Parsed> {
    let dir = require(Tool::JunitConsumers, test)?;
    let python = |args: &[&std::ffi::OsStr]| {
        Command::new("python3")
            .args(args)
            .env("PYTHONPATH", &dir)
            .output()
            .expect("python3 runs")
    };
    let out = python(&["-c".as_ref(), PARSE.as_ref(), junit.as_os_str()]);
    assert!(
        out.status.success(),
        "junitparser cannot read {}: {}",
        junit.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: Parsed = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        parsed.stated,
        parsed.counted,
        "the totals {} states (tests, failures, errors, skipped) are not its testcases'",
        junit.display()
    );
    let html = junit.with_extension("junit2html.html");
    let rendered = python(&[
        "-m".as_ref(),
        "junit2htmlreport".as_ref(),
        junit.as_os_str(),
        html.as_os_str(),
    ]);
    assert!(
        rendered.status.success(),
        "junit2html cannot render {}: {}",
        junit.display(),
        String::from_utf8_lossy(&rendered.stderr)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    for s in &parsed.suites {
        let shown = s.name.replace('&', "&amp;").replace('<', "&lt;");
        assert!(page.contains(&shown), "junit2html does not show {}", s.name);
    }
    Some(parsed)
}

/// The numbers of the summary's totals line `N cases: a passed, b failed, c expected failures,
/// d unexpected passes, e errors, f skipped[, g interrupted]`.
pub fn summary_totals(out: &str) -> [usize; 8] {
    let line = out
        .lines()
        .find(|l| l.contains(" cases: "))
        .unwrap_or_else(|| panic!("no totals line in:\n{out}"));
    let line = line.split(';').next().unwrap();
    let number = |word: &str| -> usize {
        line.split(", ")
            .flat_map(|part| part.split(": "))
            .find(|p| p.ends_with(word))
            .map_or(0, |p| p.split(' ').next().unwrap().parse().unwrap())
    };
    [
        number("cases"),
        number("passed"),
        number("failed"),
        number("expected failures"),
        number("unexpected passes"),
        number("errors"),
        number("skipped"),
        number("interrupted"),
    ]
}

/// Asserts that junitparser's reading of the JUnit agrees with the summary's totals, both by
/// each suite's `outcome` property and by what its testcases are.
pub fn assert_agrees(parsed: &Parsed, summary: [usize; 8]) {
    let by_outcome = |o: &str| parsed.suites.iter().filter(|s| s.outcome == o).count();
    let by_property = [
        parsed.suites.len(),
        by_outcome("passed"),
        by_outcome("failed"),
        by_outcome("expected-failure"),
        by_outcome("unexpected-pass"),
        by_outcome("error"),
        by_outcome("skipped"),
        by_outcome("interrupted"),
    ];
    assert_eq!(
        by_property, summary,
        "outcome properties vs summary: {parsed:#?}"
    );
    let count = |f: &dyn Fn(&Suite) -> bool| parsed.suites.iter().filter(|s| f(s)).count();
    let by_testcases = [
        parsed.suites.len(),
        count(&|s| s.failures + s.errors + s.skipped == 0),
        count(&|s| s.failures > 0 && s.xpass == 0 && s.errors == 0),
        count(&|s| s.xfail > 0 && s.failures + s.errors == 0),
        count(&|s| s.xpass > 0),
        count(&|s| s.errors > 0 && s.interrupted == 0),
        count(&|s| s.cases > 0 && s.skipped == s.cases && s.xfail == 0),
        count(&|s| s.interrupted > 0),
    ];
    assert_eq!(by_testcases, summary, "testcases vs summary: {parsed:#?}");
}
