//! The HTML timeline report: one self-contained file (inline CSS and SVG, no scripts, no
//! network) with a section per case. Each object gets a swimlane of its states (the gateway's
//! sandbox phase, Sandbox conditions, pods, PVCs, gateway replicas); fault windows are shaded
//! across every lane; harness actions, markers and check windows are drawn on the same time
//! axis; failing checks are listed with their message and the last states seen.

use conformance_core::timeline::READY_CONDITION;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use conformance_core::case_verdict::{CaseVerdict, Totals};
use conformance_core::checks::{CheckOutcome, CheckStatus, fmt_ms};
use conformance_core::timeline::{
    ActionStatus, Event, FaultPhase, FaultRecord, GATEWAY_SANDBOX_KIND, ObjectRef, ObjectState,
    StageStatus, Timeline,
};

/// One case to render.
pub struct CaseView<'a> {
    pub timeline: &'a Timeline,
    /// Links shown beside the case, such as the diagnostics bundle: (label, href).
    pub links: Vec<(String, String)>,
}

const WIDTH: f64 = 1100.0;
const LABEL_W: f64 = 260.0;
const LANE_H: f64 = 22.0;
const AXIS_H: f64 = 24.0;
/// Room on the right for the last tick label.
const RIGHT_PAD: f64 = 30.0;

pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The colour class of a state: good, transitional, bad, resting or gone.
fn tone(o: &ObjectState) -> &'static str {
    if o.deleted {
        return "gone";
    }
    if let Some(r) = o.replicas {
        return if r.desired == 0 {
            "bad"
        } else if r.ready >= r.desired {
            "good"
        } else {
            "wait"
        };
    }
    if o.kind == "Sandbox" {
        return match o.condition(READY_CONDITION).map(|c| c.status.as_str()) {
            Some("True") => "good",
            _ if o
                .condition(READY_CONDITION)
                .and_then(|c| c.reason.as_deref())
                .is_some_and(|r| r.contains("Failed") || r.contains("Error")) =>
            {
                "bad"
            }
            _ if o.condition("Suspended").is_some_and(|c| c.status == "True") => "rest",
            _ => "wait",
        };
    }
    match o.phase.as_deref() {
        Some("Ready" | "Running" | "Bound") => "good",
        Some("Error" | "Failed" | "Unknown" | "Lost") => "bad",
        Some("Stopped" | "Succeeded" | "Completed") => "rest",
        _ => "wait",
    }
}

/// A short label for a state segment.
fn label(o: &ObjectState) -> String {
    if o.deleted {
        return "deleted".into();
    }
    if let Some(r) = o.replicas {
        return format!("{}/{} ready", r.ready, r.desired);
    }
    if o.kind == "Sandbox" {
        return o
            .condition(READY_CONDITION)
            .map(|c| format!("Ready={} {}", c.status, c.reason.as_deref().unwrap_or("")))
            .unwrap_or_else(|| "no conditions".into());
    }
    let mut s = o.phase.clone().unwrap_or_else(|| "-".into());
    if let Some(c) = o.condition(READY_CONDITION).and_then(|c| c.reason.clone())
        && o.kind == GATEWAY_SANDBOX_KIND
    {
        s.push_str(&format!(" ({c})"));
    }
    let restarts: u32 = o.containers.iter().filter_map(|c| c.restart_count).sum();
    if restarts > 0 {
        s.push_str(&format!(" restarts={restarts}"));
    }
    s
}

fn lane_order(r: &ObjectRef) -> (u8, String) {
    let rank = match r.kind.as_str() {
        GATEWAY_SANDBOX_KIND => 0,
        "Sandbox" => 1,
        "Pod" => 2,
        "PersistentVolumeClaim" => 3,
        "StatefulSet" | "Deployment" => 4,
        _ => 5,
    };
    (rank, r.to_string())
}

struct Segment {
    from: u64,
    to: u64,
    state: ObjectState,
}

struct Window {
    id: String,
    kind: String,
    requested: Option<u64>,
    from: Option<u64>,
    to: Option<u64>,
    restore_failed: bool,
}

/// The report's title: the target, the model and every defect switch it ran with, so two
/// reports are told apart by their title alone.
pub fn title(target: &str, model: Option<&str>, defects: &[String]) -> String {
    let mut t = format!("openshell-conformance on target {target}");
    if let Some(m) = model {
        let _ = write!(t, ", model {m}");
        if defects.is_empty() {
            t.push_str(", no defect switches");
        }
    }
    if !defects.is_empty() {
        let _ = write!(t, ", defects {}", defects.join(", "));
    }
    t
}

/// The title of saved timelines, from their run records: the one run's [`title`], or each
/// distinct one when the files come from several runs.
pub fn title_of(timelines: &[&Timeline]) -> String {
    let mut titles: Vec<String> = timelines
        .iter()
        .filter_map(|t| t.run_info())
        .map(|i| title(&i.target, i.model.as_deref(), &i.defects))
        .collect();
    titles.sort();
    titles.dedup();
    match titles.len() {
        0 => "openshell-conformance report".into(),
        1 => titles.remove(0),
        _ => format!("openshell-conformance report of {}", titles.join("; ")),
    }
}

/// Where a case is listed: what asks for action first (unexpected passes, failures, errors),
/// so a reader meets them without scrolling, then the rest in run order.
fn rank(outcome: &str) -> u8 {
    match outcome {
        "unexpected-pass" => 0,
        "failed" => 1,
        "error" => 2,
        "unfinished" => 3,
        _ => 4,
    }
}

/// The totals line, the summary's own ([`Totals`]), and a line per unexpected pass saying
/// what to do.
fn totals(cases: &[Judged<'_>]) -> String {
    let mut line = Totals::of(cases.iter().filter_map(|c| c.verdict.as_ref())).to_string();
    let unfinished = cases.iter().filter(|c| c.verdict.is_none()).count();
    if unfinished > 0 {
        let _ = write!(line, ", {unfinished} unfinished");
    }
    let mut html = format!("<p class=\"totals\">{}</p>\n", escape(&line));
    for c in cases {
        if let Some(v @ CaseVerdict::UnexpectedPass { .. }) = &c.verdict {
            let _ = writeln!(
                html,
                "<p class=\"o-unexpected-pass\">UNEXPECTED PASS {}: {}</p>",
                escape(&case_name(c.view.timeline)),
                escape(&v.explanation().unwrap_or_default())
            );
        }
    }
    html
}

/// A case to render with its verdict, given once from its timeline.
struct Judged<'a> {
    view: &'a CaseView<'a>,
    verdict: Option<CaseVerdict>,
}

impl Judged<'_> {
    /// The verdict's key (`expected-failure`, ...), the same as the summary's; `unfinished`
    /// for a timeline cut before its closing record.
    fn outcome(&self) -> &'static str {
        self.verdict.as_ref().map_or("unfinished", CaseVerdict::key)
    }

    /// How a reader sees the verdict, and what it means beyond its name.
    fn label(&self) -> (&'static str, Option<String>) {
        match &self.verdict {
            Some(
                v @ (CaseVerdict::ExpectedFailure { .. } | CaseVerdict::UnexpectedPass { .. }),
            ) => (v.label(), v.explanation()),
            Some(v) => (v.label(), None),
            None => ("unfinished", None),
        }
    }
}

pub fn render(title: &str, cases: &[CaseView<'_>]) -> String {
    let mut ordered: Vec<Judged<'_>> = cases
        .iter()
        .map(|view| Judged {
            view,
            verdict: CaseVerdict::of_timeline(view.timeline),
        })
        .collect();
    ordered.sort_by_key(|c| rank(c.outcome()));
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{}</style></head><body>\n<h1>{}</h1>\n",
        escape(title),
        CSS,
        escape(title)
    );
    html.push_str(&clock_line(&ordered));
    html.push_str(&totals(&ordered));
    html.push_str(&summary_table(&ordered));
    html.push_str(LEGEND);
    for (i, c) in ordered.iter().enumerate() {
        html.push_str(&case_section(i, c));
    }
    html.push_str("</body></html>\n");
    html
}

/// On a scaled clock (`--time-scale`): the scale, the cases' scenario time and the real time
/// it took. Nothing on real time.
fn clock_line(cases: &[Judged<'_>]) -> String {
    let mut scales: Vec<u32> = Vec::new();
    let (mut scenario_ms, mut real_ms) = (0u64, 0u64);
    for c in cases {
        let t = c.view.timeline;
        let Some(scale) = t.run_info().and_then(|i| i.time_scale) else {
            continue;
        };
        if !scales.contains(&scale) {
            scales.push(scale);
        }
        let ms = t.duration().as_millis() as u64;
        scenario_ms += ms;
        real_ms += ms / u64::from(scale.max(1));
    }
    if scales.is_empty() {
        return String::new();
    }
    let scales: Vec<String> = scales.iter().map(|n| format!("×{n}")).collect();
    format!(
        "<p class=\"clock\">Scaled clock {}: scenario time {}, real time {}</p>\n",
        scales.join(", "),
        fmt_ms(scenario_ms),
        fmt_ms(real_ms)
    )
}

fn case_name(t: &Timeline) -> String {
    t.run_info()
        .map(|i| {
            let params: Vec<String> = i.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            if params.is_empty() {
                format!("{}[{}]", i.scenario, i.topology)
            } else {
                format!("{}[{},{}]", i.scenario, i.topology, params.join(","))
            }
        })
        .unwrap_or_else(|| "(unnamed run)".into())
}

fn summary_table(cases: &[Judged<'_>]) -> String {
    let mut s = String::from(
        "<table class=\"summary\"><tr><th>case</th><th>outcome</th><th>checks failed</th><th>checks not evaluated</th><th>duration</th></tr>\n",
    );
    for (i, c) in cases.iter().enumerate() {
        let outcomes = c.view.timeline.check_outcomes();
        let count = |status: CheckStatus| outcomes.iter().filter(|o| o.status() == status).count();
        let (failed, unjudged) = (count(CheckStatus::Failed), count(CheckStatus::NotEvaluated));
        let outcome = c.outcome();
        let (label, why) = c.label();
        let title = why.map_or(String::new(), |w| format!(" title=\"{}\"", escape(&w)));
        let _ = writeln!(
            s,
            "<tr><td><a href=\"#case-{i}\">{}</a></td><td class=\"o-{}\"{title}>{}</td><td>{failed}</td><td>{unjudged}</td><td>{}</td></tr>",
            escape(&case_name(c.view.timeline)),
            escape(outcome),
            escape(label),
            fmt_ms(c.view.timeline.duration().as_millis() as u64)
        );
    }
    s.push_str("</table>\n");
    s
}

fn case_section(index: usize, judged: &Judged<'_>) -> String {
    let c = judged.view;
    let t = c.timeline;
    let start = first_drawn(t);
    let end = t.entries.last().map_or(0, |e| e.at_ms).max(start + 1);
    let mut s = String::new();
    let outcome = judged.outcome();
    let (label, why) = judged.label();
    let _ = writeln!(
        s,
        "<section id=\"case-{index}\" class=\"case\"><h2>{} <span class=\"o-{}\">{}</span></h2>",
        escape(&case_name(t)),
        escape(outcome),
        escape(label)
    );
    if let Some(why) = why {
        let _ = writeln!(s, "<p class=\"o-{}\">{}</p>", escape(outcome), escape(&why));
    }
    if let Some(info) = t.run_info() {
        let mut meta = vec![
            ("scenario", info.title.clone()),
            ("target", info.target.clone()),
            ("topology", info.topology.clone()),
            ("requirements", info.requirements.join(", ")),
        ];
        if let Some(m) = &info.model {
            meta.push(("model", m.clone()));
        }
        if !info.defects.is_empty() {
            meta.push(("defects", info.defects.join(", ")));
        }
        if let Some(seed) = info.seed {
            meta.push(("seed", seed.to_string()));
        }
        // Which clock the times are on: virtual on the emulated target, this machine's wall
        // clock on real and served clusters, or that clock sped up (`--time-scale`).
        meta.push((
            "clock",
            match (info.target.as_str(), info.time_scale) {
                ("emulated", _) => "virtual time, from the case's start".into(),
                (_, Some(n)) => format!(
                    "scenario time on a clock ×{n} (real time passed {n} times more slowly), from the case's start"
                ),
                _ => "real time (this machine's wall clock), from the case's start".into(),
            },
        ));
        if start > 0 {
            meta.push((
                "time axis",
                format!(
                    "from {}: nothing was recorded to draw before (the install)",
                    fmt_ms(start)
                ),
            ));
        }
        s.push_str("<dl class=\"meta\">");
        for (k, v) in meta {
            let _ = write!(s, "<dt>{k}</dt><dd>{}</dd>", escape(&v));
        }
        s.push_str("</dl>\n");
    }
    if !c.links.is_empty() {
        s.push_str("<p class=\"links\">");
        for (label, href) in &c.links {
            let _ = write!(s, "<a href=\"{}\">{}</a> ", escape(href), escape(label));
        }
        s.push_str("</p>\n");
    }
    // A step that failed broke its requirement though no check did (a wait that gave up): the
    // first thing a reader needs, so it comes before the checks.
    if let Some(step) = t
        .stopped_step()
        .filter(|s| s.status == StageStatus::Failed && !s.requirements.is_empty())
    {
        let _ = writeln!(
            s,
            "<div class=\"failing\"><h3>Failing step</h3>\n<div class=\"check\"><b>{}</b> [{}] (stage {})<br>{}</div>\n</div>",
            escape(step.step.as_deref().unwrap_or("(unnamed step)")),
            escape(&step.requirements.join(", ")),
            escape(&step.stage),
            escape(step.message.as_deref().unwrap_or_default())
        );
    }
    let failing: Vec<&CheckOutcome> = t
        .check_outcomes()
        .into_iter()
        .filter(|o| o.failed())
        .collect();
    if !failing.is_empty() {
        s.push_str("<div class=\"failing\"><h3>Failing checks</h3>\n");
        for o in &failing {
            let _ = write!(
                s,
                "<div class=\"check\"><b>{}</b> [{}]{}<br>expected: {}<br>observed: {}",
                escape(&o.name),
                escape(&o.requirements.join(", ")),
                o.window
                    .map(|w| format!(" in window {}", escape(&w.to_string())))
                    .unwrap_or_default(),
                escape(&o.expected),
                escape(&o.message)
            );
            if !o.last_seen.is_empty() {
                s.push_str("<br>last seen:<ul>");
                for st in &o.last_seen {
                    let _ = write!(s, "<li><code>{}</code></li>", escape(&st.summary()));
                }
                s.push_str("</ul>");
            }
            s.push_str("</div>\n");
        }
        s.push_str("</div>\n");
    }
    let unjudged: Vec<&CheckOutcome> = t
        .check_outcomes()
        .into_iter()
        .filter(|o| o.status() == CheckStatus::NotEvaluated)
        .collect();
    if !unjudged.is_empty() {
        // Not failures of their requirements: the step that stopped the case is what broke.
        s.push_str("<div class=\"unjudged\"><h3>Checks not evaluated</h3>\n");
        for o in &unjudged {
            let _ = writeln!(
                s,
                "<div class=\"check\"><b>{}</b> [{}]<br>expected: {}<br>not evaluated: {}</div>",
                escape(&o.name),
                escape(&o.requirements.join(", ")),
                escape(&o.expected),
                escape(o.not_evaluated.as_deref().unwrap_or_default())
            );
        }
        s.push_str("</div>\n");
    }
    s.push_str(&svg(t, start, end, &failing));
    s.push_str(&events_table(t));
    s.push_str("</section>\n");
    s
}

/// A harness action as drawn: when, what (name and subject), how it ended, and its detail.
type ActionMark = (u64, String, ActionStatus, Option<String>);

/// What the timeline SVG draws, gathered from the timeline in one pass.
#[derive(Default)]
struct Drawing {
    /// State segments per object, in lane order.
    lanes: BTreeMap<(u8, String), (ObjectRef, Vec<Segment>)>,
    windows: Vec<Window>,
    actions: Vec<ActionMark>,
    markers: Vec<(u64, String)>,
}

/// The SVG's geometry: the time axis (from `start` to `end`, in the timeline's own times), its
/// scale and the drawing's height.
struct Frame {
    start: u64,
    end: u64,
    scale: f64,
    height: f64,
}

impl Frame {
    fn new(start: u64, end: u64, object_lanes: usize) -> Self {
        let n_lanes = object_lanes + 2; // objects, actions, checks
        Self {
            start,
            end,
            scale: (WIDTH - LABEL_W - RIGHT_PAD) / (end - start) as f64,
            height: AXIS_H + n_lanes as f64 * LANE_H + 8.0,
        }
    }

    /// The x coordinate of a time; anything before the axis starts is drawn at its start.
    fn x(&self, ms: u64) -> f64 {
        LABEL_W + ms.saturating_sub(self.start) as f64 * self.scale
    }
}

/// When the case's drawing begins: its first object state, fault, action or marker. On a
/// served or real cluster the install before it records nothing to draw for tens of seconds.
fn first_drawn(t: &Timeline) -> u64 {
    t.entries
        .iter()
        .find(|e| {
            matches!(
                e.event,
                Event::Object(_) | Event::Fault(_) | Event::Action(_) | Event::Marker { .. }
            )
        })
        .map_or(0, |e| e.at_ms)
}

fn svg(t: &Timeline, start: u64, end: u64, failing: &[&CheckOutcome]) -> String {
    let d = gather(t, end);
    let f = Frame::new(start, end, d.lanes.len());
    let height = f.height;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\">"
    );
    draw_axis(&mut s, &f);
    let mut y = AXIS_H;
    for (r, segs) in d.lanes.values() {
        draw_object_lane(&mut s, &f, y, r, segs);
        y += LANE_H;
    }
    // Over the lanes, so every lane shows when the fault held.
    for w in &d.windows {
        draw_fault_window(&mut s, &f, w);
    }
    draw_actions(&mut s, &f, y, &d.actions);
    draw_markers(&mut s, &f, &d.markers);
    y += LANE_H;
    draw_failing_checks(&mut s, &f, y, failing);
    s.push_str("</svg>\n");
    s
}

/// Objects' state segments (each lasting until the object's next state, the last until `end`),
/// fault windows, finished harness actions and markers.
fn gather(t: &Timeline, end: u64) -> Drawing {
    let mut d = Drawing::default();
    for e in &t.entries {
        match &e.event {
            Event::Object(o) => {
                let r = o.object_ref();
                let lane = d
                    .lanes
                    .entry(lane_order(&r))
                    .or_insert_with(|| (r.clone(), Vec::new()));
                if let Some(last) = lane.1.last_mut() {
                    last.to = e.at_ms;
                }
                lane.1.push(Segment {
                    from: e.at_ms,
                    to: end,
                    state: o.clone(),
                });
            }
            Event::Fault(f) => record_fault(&mut d.windows, f, e.at_ms),
            Event::Action(a) if a.status != ActionStatus::Started => {
                let label = match &a.subject {
                    Some(s) => format!("{} {s}", a.name),
                    None => a.name.clone(),
                };
                d.actions.push((e.at_ms, label, a.status, a.detail.clone()));
            }
            Event::Marker { label } => d.markers.push((e.at_ms, label.clone())),
            _ => {}
        }
    }
    d
}

/// Updates (or opens) the window of a fault with one of its phases.
fn record_fault(windows: &mut Vec<Window>, f: &FaultRecord, at_ms: u64) {
    let w = match windows.iter_mut().find(|w| w.id == f.id) {
        Some(w) => w,
        None => {
            windows.push(Window {
                id: f.id.clone(),
                kind: f.kind.clone(),
                requested: None,
                from: None,
                to: None,
                restore_failed: false,
            });
            windows.last_mut().expect("just pushed")
        }
    };
    match f.phase {
        FaultPhase::Requested => w.requested = w.requested.or(Some(at_ms)),
        FaultPhase::Started => w.from = Some(at_ms),
        FaultPhase::Ended => w.to = Some(at_ms),
        FaultPhase::RestoreFailed => {
            w.restore_failed = true;
            w.to = Some(at_ms);
        }
    }
}

/// The time axis: a tick line across the drawing and a label per step.
fn draw_axis(s: &mut String, f: &Frame) {
    let step = nice_step(f.end - f.start);
    let mut tick = f.start.div_ceil(step) * step;
    while tick <= f.end {
        let _ = writeln!(
            s,
            "<line class=\"tick\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1}\" y2=\"{2:.1}\"/><text class=\"axis\" x=\"{0:.1}\" y=\"12\">{3}</text>",
            f.x(tick),
            AXIS_H - 6.0,
            f.height,
            fmt_ms(tick)
        );
        tick += step;
    }
}

/// One object's lane at `y`: its name, then a coloured segment per state, labelled where the
/// label fits.
fn draw_object_lane(s: &mut String, f: &Frame, y: f64, r: &ObjectRef, segs: &[Segment]) {
    let _ = writeln!(
        s,
        "<text class=\"lane\" x=\"4\" y=\"{:.1}\">{}</text>",
        y + 15.0,
        escape(&short_ref(r))
    );
    for seg in segs {
        let w = (f.x(seg.to) - f.x(seg.from)).max(1.0);
        let text = label(&seg.state);
        let _ = write!(
            s,
            "<g><rect class=\"seg {}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{}\"><title>{} at {}: {}</title></rect>",
            tone(&seg.state),
            f.x(seg.from),
            y + 2.0,
            LANE_H - 4.0,
            escape(&r.to_string()),
            fmt_ms(seg.from),
            escape(&seg.state.summary())
        );
        if w > text.len() as f64 * 6.0 {
            let _ = write!(
                s,
                "<text class=\"seg-label\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                f.x(seg.from) + 3.0,
                y + 15.0,
                escape(&text)
            );
        }
        s.push_str("</g>\n");
    }
}

/// A fault window across all lanes, translucent, with its requested lead-in and its label.
fn draw_fault_window(s: &mut String, f: &Frame, w: &Window) {
    let from = w.from.or(w.requested).unwrap_or(0);
    let to = w.to.unwrap_or(f.end);
    if let Some(req) = w.requested.filter(|r| *r < from) {
        let _ = writeln!(
            s,
            "<rect class=\"fault-requested\" x=\"{:.1}\" y=\"{AXIS_H}\" width=\"{:.1}\" height=\"{:.1}\"><title>{} {} requested at {}</title></rect>",
            f.x(req),
            (f.x(from) - f.x(req)).max(1.0),
            f.height - AXIS_H,
            escape(&w.id),
            escape(&w.kind),
            fmt_ms(req)
        );
    }
    let _ = write!(
        s,
        "<rect class=\"fault{}\" data-fault=\"{}\" x=\"{:.1}\" y=\"{AXIS_H}\" width=\"{:.1}\" height=\"{:.1}\"><title>{} {}: {} .. {}{}</title></rect>\n<text class=\"fault-label\" x=\"{:.1}\" y=\"{:.1}\">{} {}</text>\n",
        if w.restore_failed {
            " restore-failed"
        } else {
            ""
        },
        escape(&w.kind),
        f.x(from),
        (f.x(to) - f.x(from)).max(2.0),
        f.height - AXIS_H,
        escape(&w.id),
        escape(&w.kind),
        fmt_ms(from),
        fmt_ms(to),
        if w.restore_failed {
            " (RESTORE FAILED)"
        } else {
            ""
        },
        f.x(from) + 2.0,
        AXIS_H - 4.0,
        escape(&w.id),
        escape(&w.kind)
    );
}

/// The harness actions lane at `y`: a dot per finished action, coloured by how it ended.
fn draw_actions(s: &mut String, f: &Frame, y: f64, actions: &[ActionMark]) {
    let _ = writeln!(
        s,
        "<text class=\"lane\" x=\"4\" y=\"{:.1}\">harness actions</text>",
        y + 15.0
    );
    for (at, label, status, detail) in actions {
        let class = match status {
            ActionStatus::Ok => "act-ok",
            ActionStatus::Refused => "act-refused",
            _ => "act-error",
        };
        let _ = writeln!(
            s,
            "<circle class=\"{class}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\"><title>{} at {}: {:?}{}</title></circle>",
            f.x(*at),
            y + LANE_H / 2.0,
            escape(label),
            fmt_ms(*at),
            status,
            detail
                .as_deref()
                .map(|d| format!(" - {}", escape(d)))
                .unwrap_or_default()
        );
    }
}

/// Markers: a dashed line across the lanes.
fn draw_markers(s: &mut String, f: &Frame, markers: &[(u64, String)]) {
    for (at, label) in markers {
        let _ = writeln!(
            s,
            "<line class=\"marker\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1}\" y2=\"{2:.1}\"><title>marker {3} at {4}</title></line>",
            f.x(*at),
            AXIS_H,
            f.height,
            escape(label),
            fmt_ms(*at)
        );
    }
}

/// The failing checks lane at `y`: each failing check's window, outlined.
fn draw_failing_checks(s: &mut String, f: &Frame, y: f64, failing: &[&CheckOutcome]) {
    let _ = writeln!(
        s,
        "<text class=\"lane\" x=\"4\" y=\"{:.1}\">failing checks</text>",
        y + 15.0
    );
    for o in failing {
        if let Some(w) = o.window {
            let _ = writeln!(
                s,
                "<rect class=\"check-window\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{}\"><title>{}: {}</title></rect>",
                f.x(w.from_ms),
                y + 2.0,
                (f.x(w.to_ms.min(f.end)) - f.x(w.from_ms)).max(2.0),
                LANE_H - 4.0,
                escape(&o.name),
                escape(&o.message)
            );
        }
    }
}

fn short_ref(r: &ObjectRef) -> String {
    let kind = match r.kind.as_str() {
        GATEWAY_SANDBOX_KIND => "sandbox (gateway)",
        "PersistentVolumeClaim" => "pvc",
        "Sandbox" => "Sandbox CR",
        "StatefulSet" => "statefulset",
        "Deployment" => "deployment",
        "Pod" => "pod",
        other => other,
    };
    let mut name = r.name.clone();
    if name.len() > 30 {
        name = format!("{}…", &name[..29]);
    }
    format!("{kind} {name}")
}

fn nice_step(end: u64) -> u64 {
    let target = end / 10;
    [
        1_000u64, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000, 600_000, 1_800_000, 3_600_000,
    ]
    .into_iter()
    .find(|s| *s >= target)
    .unwrap_or(3_600_000)
}

fn events_table(t: &Timeline) -> String {
    let mut s = String::from(
        "<details><summary>All events</summary><table class=\"events\"><tr><th>at</th><th>event</th></tr>\n",
    );
    for e in &t.entries {
        let text = match &e.event {
            Event::Object(o) => o.summary(),
            Event::Action(a) => format!(
                "action {} {} {:?}{}",
                a.name,
                a.subject.as_deref().unwrap_or(""),
                a.status,
                a.detail
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            ),
            Event::Fault(f) => format!("fault {} {} {:?}", f.id, f.kind, f.phase),
            Event::Sentinel(s) => {
                format!("sentinel {:?} {}:{} {:?}", s.op, s.sandbox, s.key, s.result)
            }
            Event::Observation { key, value, .. } => format!("observed {key} = {value}"),
            Event::Marker { label } => format!("marker {label}"),
            Event::Stage(st) => format!(
                "stage {} {:?}{}",
                st.stage,
                st.status,
                st.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
            Event::Check(c) => format!("check {} {}: {}", c.name, c.status().label(), c.message),
            Event::CheckPlan { checks } => format!("check plan: {} checks", checks.len()),
            Event::Note { message } => format!("note: {message}"),
            Event::Logs(x) => format!(
                "logs of {}/{}{}:\n{}",
                x.pod,
                x.container,
                if x.previous { " (previous)" } else { "" },
                x.lines.join("\n")
            ),
            Event::RunStarted(i) => format!("run started: {} on {}", i.scenario, i.topology),
            Event::RunFinished { outcome, verdict } => match verdict {
                Some(v) if v != outcome => format!("run finished: {outcome} ({v})"),
                _ => format!("run finished: {outcome}"),
            },
        };
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td></tr>",
            fmt_ms(e.at_ms),
            escape(&text)
        );
    }
    s.push_str("</table></details>\n");
    s
}

const LEGEND: &str = "<p class=\"legend\"><span class=\"sw good\"></span>ready / running / bound \
<span class=\"sw wait\"></span>transitional <span class=\"sw bad\"></span>error / failed / scaled to zero \
<span class=\"sw rest\"></span>stopped / completed <span class=\"sw gone\"></span>deleted \
<span class=\"sw faultsw\"></span>fault window <span class=\"sw checksw\"></span>failing check window</p>\n";

const CSS: &str = "body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222}\
h1{font-size:20px}h2{font-size:16px;margin:4px 0}h3{font-size:14px;margin:4px 0}\
table.summary{border-collapse:collapse;margin-bottom:8px}table.summary td,table.summary th{border:1px solid #ccc;padding:2px 8px;text-align:left}\
p.totals{font-weight:bold}.o-passed{color:#17803d}.o-failed{color:#c0262d;font-weight:bold}.o-error{color:#a35200;font-weight:bold}.o-skipped{color:#666}.o-expected-failure{color:#8a6d00}.o-unexpected-pass{color:#c0262d;font-weight:bold}.o-interrupted{color:#a35200}\
section.case{border-top:2px solid #ddd;margin-top:16px;padding-top:8px}\
dl.meta{display:grid;grid-template-columns:max-content auto;gap:0 12px;margin:4px 0}dl.meta dt{color:#666}dl.meta dd{margin:0}\
.failing{background:#fdecec;border:1px solid #e5a0a0;padding:6px 10px;margin:6px 0}.failing .check{margin:4px 0}.unjudged{background:#f3f3f3;border:1px solid #bbb;color:#555;padding:6px 10px;margin:6px 0}.unjudged .check{margin:4px 0}\
svg.timeline{background:#fff;border:1px solid #ddd;display:block;margin:6px 0}\
.seg{stroke:#fff;stroke-width:.5}.good{fill:#7cc68d}.wait{fill:#f2c14e}.bad{fill:#e0565b}.rest{fill:#8fa9d6}.gone{fill:#ddd}\
.seg-label{font-size:10px;fill:#111;pointer-events:none}.lane{font-size:11px;fill:#333}.axis{font-size:10px;fill:#666}\
.tick{stroke:#eee}.fault{fill:#7a5cff;fill-opacity:.15;stroke:#5b3fd6;stroke-dasharray:4 2;pointer-events:none}.fault.restore-failed{fill:#000;fill-opacity:.3}\
.fault-requested{fill:#7a5cff;fill-opacity:.06;pointer-events:none}.fault-label{font-size:10px;fill:#5b3fd6}\
.marker{stroke:#6a5acd;stroke-dasharray:2 2}.act-ok{fill:#2e7d32}.act-refused{fill:#ef6c00}.act-error{fill:#b71c1c}\
.check-window{fill:none;stroke:#c0262d;stroke-width:2}\
.legend .sw{display:inline-block;width:12px;height:12px;margin:0 4px 0 10px;vertical-align:middle;border:1px solid #999}\
.legend .faultsw{background:rgba(122,92,255,.15);border:1px dashed #5b3fd6}.legend .checksw{border:2px solid #c0262d}\
.legend .good{background:#7cc68d}.legend .wait{background:#f2c14e}.legend .bad{background:#e0565b}.legend .rest{background:#8fa9d6}.legend .gone{background:#ddd}\
table.events{font:11px monospace;border-collapse:collapse}table.events td{padding:0 8px;vertical-align:top;white-space:pre-wrap}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_the_cluster_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn the_title_names_the_model_and_every_defect_switch() {
        let defects = vec!["gateway-restart-marks-error".to_string(), "x".to_string()];
        assert_eq!(
            title("emulated", Some("contract"), &defects),
            "openshell-conformance on target emulated, model contract, defects gateway-restart-marks-error, x"
        );
        assert_eq!(
            title("emulated", Some("openshell-0.0.111"), &[]),
            "openshell-conformance on target emulated, model openshell-0.0.111, no defect switches"
        );
        assert_eq!(
            title("kind", None, &[]),
            "openshell-conformance on target kind"
        );
    }

    #[test]
    fn an_empty_report_is_still_a_complete_document() {
        let html = render("nothing", &[]);
        assert!(
            html.contains(
                "<p class=\"totals\">0 cases: 0 passed, 0 failed, 0 expected failures, 0 unexpected passes, 0 errors, 0 skipped</p>"
            )
        );
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.ends_with("</html>\n"));
        assert!(!html.contains("<script"));
        assert!(!html.contains("src="));
        assert!(!html.contains("<link"));
    }
}
