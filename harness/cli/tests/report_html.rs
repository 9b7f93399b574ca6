//! The HTML timeline report of a failing run shows the fault window and the failing check, in a
//! self-contained file that headless Chromium renders; the test takes a screenshot and looks
//! for the fault shading in its pixels.

use std::path::{Path, PathBuf};
use std::process::Command;

use conformance_core::testkit::*;
use openshell_conformance::report::{CaseView, render};

async fn failing_and_passing_html() -> String {
    let failing = engine(Factory::new(Quirk::ErrorOnOutage))
        .run_case(&case(standard_steps()))
        .await;
    let passing = engine(Factory::new(Quirk::None))
        .run_case(&case(standard_steps()))
        .await;
    render(
        "openshell-conformance: outage-demo",
        &[
            CaseView {
                timeline: &failing.timeline,
                links: vec![(
                    "diagnostics bundle".into(),
                    "bundles/outage-demo.tar.gz".into(),
                )],
            },
            CaseView {
                timeline: &passing.timeline,
                links: vec![],
            },
        ],
    )
}

#[tokio::test(start_paused = true)]
async fn the_report_marks_the_fault_window_the_failing_check_and_the_last_states() {
    let html = failing_and_passing_html().await;
    assert!(html.contains("data-fault=\"gateway-stop\""));
    assert!(html.contains("<h3>Failing checks</h3>"));
    // The waits end a millisecond after the observation they wait for (the engine wakes on it).
    assert!(html.contains(
        "<b>sandbox never Error during the outage</b> [R9] in window 27.001s .. 60.001s"
    ));
    assert!(html.contains("observed: it held at 27.001s"));
    assert!(html.contains("<code>OpenShellSandbox/main-outag-"));
    assert!(html.contains("class=\"check-window\""));
    assert!(html.contains("href=\"bundles/outage-demo.tar.gz\""));
    // One swimlane per object: the gateway's view, and the gateway workload.
    assert!(html.contains(">sandbox (gateway) main-outag-"));
    assert!(html.contains(">statefulset openshell<"));
    // The summary names both cases with their outcomes.
    assert!(html.contains("<td class=\"o-failed\">failed</td>"));
    assert!(html.contains("<td class=\"o-passed\">passed</td>"));
    // Self-contained: no scripts, no external resources.
    assert!(!html.contains("<script"));
    assert!(!html.contains("src="));
}

#[tokio::test(start_paused = true)]
async fn the_overview_starts_with_the_totals_and_lists_failures_first() {
    let passing = engine(Factory::new(Quirk::None))
        .run_case(&case(standard_steps()))
        .await;
    let failing = engine(Factory::new(Quirk::ErrorOnOutage))
        .run_case(&case(standard_steps()))
        .await;
    // In run order the passing case comes first; the overview puts the failure on top.
    let html = render(
        "t",
        &[
            CaseView {
                timeline: &passing.timeline,
                links: vec![],
            },
            CaseView {
                timeline: &failing.timeline,
                links: vec![],
            },
        ],
    );
    let totals = html
        .find("<p class=\"totals\">2 cases: 1 passed, 1 failed, 0 expected failures, 0 unexpected passes, 0 errors, 0 skipped</p>")
        .expect("a totals line");
    let table = html.find("<table class=\"summary\">").unwrap();
    assert!(totals < table, "the totals come before the table");
    let failed = html.find("<td class=\"o-failed\">failed</td>").unwrap();
    let passed = html.find("<td class=\"o-passed\">passed</td>").unwrap();
    assert!(failed < passed, "the failed case is listed first");
}

/// An engine whose cases are known to break `requirement`: their timelines record it.
fn engine_expecting(quirk: Quirk, requirement: &'static str) -> conformance_core::engine::Engine {
    let known = move |_: &str| {
        vec![conformance_core::timeline::Expectation {
            requirement: requirement.into(),
            report: "bug 3, #42".into(),
        }]
    };
    conformance_core::engine::Engine::new(
        Factory::new(quirk),
        conformance_core::engine::EngineOptions {
            expected: Some(std::sync::Arc::new(known)),
            ..Default::default()
        },
    )
}

#[tokio::test(start_paused = true)]
async fn expected_failures_and_unexpected_passes_show_as_the_summary_counts_them() {
    use conformance_core::case_verdict::{CaseVerdict, Totals};
    let xfail = engine_expecting(Quirk::ErrorOnOutage, "R9")
        .run_case(&case(standard_steps()))
        .await;
    let xpass = engine_expecting(Quirk::None, "R9")
        .run_case(&case(standard_steps()))
        .await;
    let passing = engine(Factory::new(Quirk::None))
        .run_case(&case(standard_steps()))
        .await;
    let reports = [passing, xfail, xpass];
    let views: Vec<CaseView<'_>> = reports
        .iter()
        .map(|r| CaseView {
            timeline: &r.timeline,
            links: vec![],
        })
        .collect();
    let html = render("t", &views);
    // The headline is the summary's totals line, from the same verdicts.
    let verdicts: Vec<CaseVerdict> = reports
        .iter()
        .map(conformance_core::engine::CaseReport::verdict)
        .collect();
    let line = Totals::of(&verdicts).to_string();
    assert_eq!(
        line,
        "3 cases: 1 passed, 0 failed, 1 expected failures, 1 unexpected passes, 0 errors, 0 skipped"
    );
    let totals = html
        .find(&format!("<p class=\"totals\">{line}</p>"))
        .expect("the summary's totals line");
    // The unexpected pass is flagged at the top, with what to do, and listed first.
    let flag = html
        .find("<p class=\"o-unexpected-pass\">UNEXPECTED PASS outage-demo[combined,outage=30s]: passed although expected to fail R9 (bug 3, #42); the bug looks fixed: update the expectations</p>")
        .expect("the unexpected pass flagged");
    let table = html.find("<table class=\"summary\">").unwrap();
    assert!(totals < flag && flag < table, "{html}");
    let xpass_row = html.find(">UNEXPECTED PASS</td>").unwrap();
    let xfail_row = html
        .find("<td class=\"o-expected-failure\" title=\"expected failure of R9: bug 3, #42\">expected failure</td>")
        .expect("the expected failure in its own colour, with its reason");
    let passed_row = html.find("<td class=\"o-passed\">passed</td>").unwrap();
    assert!(xpass_row < xfail_row && xfail_row > table);
    assert!(xpass_row < passed_row);
    assert!(
        !html.contains("class=\"o-failed\""),
        "nothing is shown as failed"
    );
}

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|p| p.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// Headless Chromium as the machine allows it: root needs --no-sandbox, and the closed network
/// needs the background services off.
fn screenshot(browser: &Path, html: &Path, png: &Path, profile: &Path) -> std::process::Output {
    Command::new("timeout")
        .arg("90")
        .arg(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1200,1400",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("running chromium")
}

/// A failing run on the emulated target: the gateway restart defect on the catalog's
/// gateway-restart scenario.
async fn failing_emulated_html() -> String {
    use conformance_catalog::catalog::{Selection as Pick, cases};
    use conformance_core::engine::{Engine, EngineOptions, Outcome};
    use conformance_core::topology::Topologies;
    use conformance_models::spec::{Defect, Selection};
    use conformance_models::target::EmulatedFactory;
    let topo = Topologies::builtin().get("combined").unwrap().clone();
    let case = cases(
        &[topo],
        &Pick {
            patterns: vec!["gateway-restart".into()],
            ..Pick::default()
        },
    )
    .remove(0);
    let factory =
        EmulatedFactory::new(Selection::contract().with_defect(Defect::GatewayRestartMarksError));
    let r = Engine::new(std::sync::Arc::new(factory), EngineOptions::default())
        .run_case(&case)
        .await;
    assert!(matches!(r.outcome, Outcome::Failed(_)), "{:?}", r.outcome);
    render(
        "openshell-conformance: gateway restart defect",
        &[CaseView {
            timeline: &r.timeline,
            links: vec![],
        }],
    )
}

#[tokio::test(start_paused = true)]
async fn headless_chromium_shows_the_fault_window_and_failing_check_of_a_failing_emulated_run() {
    let Some(browser) = chromium() else {
        eprintln!("SKIPPED: chromium not found on PATH (.ci/run installs Debian's chromium)");
        return;
    };
    let html = failing_emulated_html().await;
    assert!(html.contains("data-fault=\"gateway-restart\""));
    assert!(html.contains("<b>the sandbox never turns terminal</b> [R9]"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-screenshot-emulated");
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("report.html");
    std::fs::write(&page, &html).unwrap();
    let png_path = dir.join("report.png");
    let _ = std::fs::remove_file(&png_path);
    let profile = tempfile::tempdir().unwrap();
    let out = screenshot(&browser, &page, &png_path, profile.path());
    assert!(
        png_path.is_file(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("screenshot: {}", png_path.display());
    let (fault, failing_box) = count_pixels(&png_path);
    assert!(fault > 200, "fault shading pixels: {fault}");
    assert!(
        failing_box > 5000,
        "failing-check box pixels: {failing_box}"
    );
}

/// Pixels of the fault shading (translucent violet over white, about rgb(235, 231, 255)) and of
/// the failing-checks box (rgb(253, 236, 236)).
fn count_pixels(png_path: &Path) -> (usize, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1200, 1400));
    let channels = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(channels).collect();
    let fault = pixels
        .iter()
        .filter(|p| p[2] >= 250 && (226..=243).contains(&p[0]) && (222..=239).contains(&p[1]))
        .count();
    let failing_box = pixels
        .iter()
        .filter(|p| p[0] == 253 && p[1] == 236 && p[2] == 236)
        .count();
    (fault, failing_box)
}

#[tokio::test(start_paused = true)]
async fn headless_chromium_renders_the_report_with_the_fault_window_visible() {
    let Some(browser) = chromium() else {
        eprintln!("SKIPPED: chromium not found on PATH (.ci/run installs Debian's chromium)");
        return;
    };
    let html = failing_and_passing_html().await;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-screenshot");
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("report.html");
    std::fs::write(&page, &html).unwrap();
    let png_path = dir.join("report.png");
    let _ = std::fs::remove_file(&png_path);
    let profile = tempfile::tempdir().unwrap();
    let out = screenshot(&browser, &page, &png_path, profile.path());
    assert!(
        png_path.is_file(),
        "no screenshot; chromium said: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("screenshot: {}", png_path.display());

    let (fault, failing_box) = count_pixels(&png_path);
    assert!(fault > 500, "fault shading pixels: {fault}");
    assert!(
        failing_box > 5000,
        "failing-check box pixels: {failing_box}"
    );
}

/// A passed case's timeline on `target` whose first drawable record (a pod) comes `first` into
/// the case, and which closes 20 s after it.
async fn one_pod_case(target: &str, first: u64) -> conformance_core::timeline::Timeline {
    use conformance_core::timeline::{Event, ObjectState, Recorder, RunInfo};
    let rec = Recorder::new();
    rec.record(Event::RunStarted(RunInfo {
        scenario: "provisioning".into(),
        topology: "combined".into(),
        target: target.into(),
        ..Default::default()
    }));
    tokio::time::advance(std::time::Duration::from_secs(first)).await;
    rec.record(Event::Object(ObjectState::new(
        "Pod",
        Some("openshell"),
        "p",
    )));
    tokio::time::advance(std::time::Duration::from_secs(20)).await;
    rec.record(Event::RunFinished {
        outcome: "passed".into(),
        verdict: Some("passed".into()),
    });
    rec.snapshot()
}

fn render_one(t: &conformance_core::timeline::Timeline) -> String {
    render(
        "t",
        &[CaseView {
            timeline: t,
            links: vec![],
        }],
    )
}

#[tokio::test(start_paused = true)]
async fn a_served_case_is_drawn_from_its_first_record_on_a_named_clock() {
    // The install records nothing to draw for 40 s, as on a served cluster.
    let t = one_pod_case("existing", 40).await;
    let html = render_one(&t);
    assert!(
        html.contains("<dt>clock</dt><dd>real time (this machine&#39;s wall clock), from the case&#39;s start</dd>"),
        "{html}"
    );
    assert!(
        html.contains(
            "<dt>time axis</dt><dd>from 40s: nothing was recorded to draw before (the install)</dd>"
        ),
        "{html}"
    );
    // The first tick is at the axis's start, at the left edge of the lanes, not at 0.
    let first_tick = html.split("<text class=\"axis\"").nth(1).expect("a tick");
    assert!(
        first_tick.starts_with(" x=\"260.0\" y=\"12\">40s<"),
        "{first_tick}"
    );
    assert!(
        !html.contains(">0s</text>"),
        "no tick before the case's start"
    );
}

#[tokio::test(start_paused = true)]
async fn an_emulated_case_says_its_times_are_virtual_and_starts_its_axis_at_0() {
    let t = one_pod_case("emulated", 0).await;
    let html = render_one(&t);
    assert!(
        html.contains("<dt>clock</dt><dd>virtual time, from the case&#39;s start</dd>"),
        "{html}"
    );
    assert!(!html.contains("<dt>time axis</dt>"), "{html}");
    assert!(html.contains(">0s</text>"), "{html}");
}

#[tokio::test(start_paused = true)]
async fn a_case_on_a_scaled_clock_gives_the_scale_with_its_scenario_and_real_time() {
    let t = one_pod_case("existing", 40).await;
    let plain = render_one(&t);
    assert!(!plain.contains("class=\"clock\""), "real time adds nothing");
    let lines: Vec<String> = t
        .to_jsonl()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            if v["type"] == "run_started" {
                v["time_scale"] = 10.into();
            }
            v.to_string()
        })
        .collect();
    let scaled =
        conformance_core::timeline::Timeline::read_jsonl(lines.join("\n").as_bytes()).unwrap();
    let html = render_one(&scaled);
    // The case lasts 60 s of scenario time: 40 s of install, then 20 s.
    assert!(
        html.contains("<p class=\"clock\">Scaled clock ×10: scenario time 60s, real time 6s</p>"),
        "{html}"
    );
    assert!(
        html.contains("<dt>clock</dt><dd>scenario time on a clock ×10"),
        "{html}"
    );
}
