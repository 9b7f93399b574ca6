//! `compare A B`: two runs' saved timelines, matched by case (scenario, topology, parameters),
//! whatever targets wrote them (model and binaries, two releases, before and after a change).
//! Per case it gives both verdicts, each from [`CaseVerdict`] with the known failures the
//! timeline recorded (so the run's own verdict), and every check whose result differs; then the
//! cases one side alone has. A difference declared in `--known-differences FILE` is shown as
//! known with its reason and fact; one that is declared but no longer happens is stale and
//! fails the comparison, as a stale expected failure is an unexpected pass. Exit 0 when the
//! sides agree but for known differences, 1 otherwise, 2 for input that cannot be compared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use conformance_core::case_verdict::CaseVerdict;
use conformance_core::checks::{CheckOutcome, CheckStatus};
use conformance_core::error::{Error, ExitStatus};
use conformance_core::timeline::{RunInfo, Timeline};
use serde::{Deserialize, Serialize};

use super::args::{CompareArgs, CompareFormat};
use super::check::unjudgeable;
use super::files::load_timeline;

/// Why one side of a comparison cannot be read. Each is a usage error (exit 2): the user named
/// the path.
#[derive(Debug, thiserror::Error)]
pub(super) enum CompareError {
    #[error(
        "side {side}: cannot read {}; give a run's artifacts directory, a directory of timelines or one timeline file",
        path.display()
    )]
    Path {
        side: Side,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "side {side}: no timelines (*.jsonl) in {}; give a run's artifacts directory (`run --artifacts DIR`) or its timelines/",
        path.display()
    )]
    NoTimelines { side: Side, path: PathBuf },
    #[error("side {side}: a timeline cannot be read")]
    Timeline {
        side: Side,
        #[source]
        source: Error,
    },
    #[error("side {side}: {} cannot be compared: {why}", path.display())]
    Unjudgeable {
        side: Side,
        path: PathBuf,
        why: &'static str,
    },
    #[error(
        "side {side}: {} and {} are both case {case}; a side must hold one run's timelines",
        first.display(), second.display()
    )]
    Duplicate {
        side: Side,
        case: String,
        first: PathBuf,
        second: PathBuf,
    },
}

impl From<CompareError> for Error {
    fn from(e: CompareError) -> Self {
        Error::usage_from("cannot compare the runs", e)
    }
}

/// Which side of the comparison: the first path given or the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    A,
    B,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::A => "A",
            Self::B => "B",
        })
    }
}

/// What makes two timelines the same case on different targets.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct CaseKey {
    scenario: String,
    topology: String,
    params: BTreeMap<String, String>,
}

/// One side's record of a case.
#[derive(Debug)]
struct Recorded {
    file: PathBuf,
    id: String,
    verdict: CaseVerdict,
    checks: Vec<CheckOutcome>,
}

/// The timeline files a side names: a run's artifacts directory (its `timelines/`), a
/// directory of timelines, or one timeline file.
fn timeline_files(side: Side, path: &Path) -> Result<Vec<PathBuf>, CompareError> {
    let meta = std::fs::metadata(path).map_err(|source| CompareError::Path {
        side,
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let dir = match path.join("timelines") {
        t if t.is_dir() => t,
        _ => path.to_path_buf(),
    };
    let entries = std::fs::read_dir(&dir).map_err(|source| CompareError::Path {
        side,
        path: dir.clone(),
        source,
    })?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| CompareError::Path {
            side,
            path: dir.clone(),
            source,
        })?;
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "jsonl") {
            files.push(p);
        }
    }
    if files.is_empty() {
        return Err(CompareError::NoTimelines { side, path: dir });
    }
    // Sorted, so the output's order does not depend on the file system's.
    files.sort();
    Ok(files)
}

/// The case id a person reads and a known difference names: the catalog's for the recorded
/// case, or (a case the catalog no longer has) one spelled the same way from the record.
fn case_id(run: &RunInfo) -> String {
    if let Ok(case) = conformance_catalog::catalog::case_for(run) {
        return case.id();
    }
    // As `Params::label`: outage, point, seed first, then the rest; the schedule is the seed's.
    let first = ["outage", "point", "seed"];
    let mut parts: Vec<String> = first
        .iter()
        .filter_map(|k| run.params.get(*k).map(|v| format!("{k}={v}")))
        .collect();
    parts.extend(
        run.params
            .iter()
            .filter(|(k, _)| !first.contains(&k.as_str()) && *k != "schedule")
            .map(|(k, v)| format!("{k}={v}")),
    );
    if parts.is_empty() {
        format!("{}[{}]", run.scenario, run.topology)
    } else {
        format!("{}[{},{}]", run.scenario, run.topology, parts.join(","))
    }
}

/// Reads one side: every timeline it names, each judged as the run judged it.
fn load_side(side: Side, files: Vec<PathBuf>) -> Result<BTreeMap<CaseKey, Recorded>, CompareError> {
    let mut cases: BTreeMap<CaseKey, Recorded> = BTreeMap::new();
    for file in files {
        let t = load_timeline(&file).map_err(|source| CompareError::Timeline { side, source })?;
        let unreadable = |why| CompareError::Unjudgeable {
            side,
            path: file.clone(),
            why,
        };
        if let Some(why) = unjudgeable(&t) {
            return Err(unreadable(why));
        }
        let (Some(run), Some(verdict)) = (t.run_info(), CaseVerdict::of_timeline(&t)) else {
            return Err(unreadable("it has no run record or no closing record"));
        };
        let key = CaseKey {
            scenario: run.scenario.clone(),
            topology: run.topology.clone(),
            params: run.params.clone(),
        };
        let recorded = Recorded {
            id: case_id(run),
            verdict,
            checks: owned_checks(&t),
            file: file.clone(),
        };
        if let Some(first) = cases.get(&key) {
            return Err(CompareError::Duplicate {
                side,
                case: recorded.id,
                first: first.file.clone(),
                second: file,
            });
        }
        cases.insert(key, recorded);
    }
    Ok(cases)
}

fn owned_checks(t: &Timeline) -> Vec<CheckOutcome> {
    t.check_outcomes().into_iter().cloned().collect()
}

/// The `--known-differences` file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KnownDifferencesFile {
    known_differences: Vec<KnownDifference>,
}

/// A difference between the sides that is understood: which case (a glob over case ids, as in
/// an expectations file), which check (none: the whole case, its verdict, every check of it, or
/// its being on one side only), why they differ and the fact that explains it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KnownDifference {
    case: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    check: Option<String>,
    reason: String,
    fact: String,
}

impl KnownDifference {
    fn covers_case(&self, id: &str) -> bool {
        conformance_catalog::catalog::glob(&self.case, id)
    }

    /// Covers check `check` of case `id` by name.
    fn covers_check(&self, id: &str, check: &str) -> bool {
        self.covers_case(id) && self.check.as_deref() == Some(check)
    }

    /// Covers a case as a whole (its verdict, or its being on one side only).
    fn covers_whole(&self, id: &str) -> bool {
        self.covers_case(id) && self.check.is_none()
    }
}

/// Reads and validates the known differences: a file that does not parse, or an entry without
/// its reason or fact, is refused before any timeline is read (exit 2).
fn load_known(path: &Path) -> Result<Vec<KnownDifference>, Error> {
    let text = conformance_core::user_file::read_to_string(
        path,
        conformance_core::user_file::Kind::Expectations,
        &format!("known differences file {}", path.display()),
    )?;
    let file: KnownDifferencesFile = conformance_core::error::parse_yaml(&text, path)?;
    for (i, k) in file.known_differences.iter().enumerate() {
        let field = |name: &str| format!("known_differences[{i}].{name}");
        let required = [
            (
                "case",
                Some(&k.case),
                "must name the case (a case id or a glob over them)",
            ),
            (
                "check",
                k.check.as_ref(),
                "must name a check, or be left out to declare the whole case",
            ),
            ("reason", Some(&k.reason), "must say why the sides differ"),
            (
                "fact",
                Some(&k.fact),
                "must name the fact behind the difference (an upstream fact, a source line, an issue)",
            ),
        ];
        for (name, value, message) in required {
            if value.is_some_and(|v| v.trim().is_empty()) {
                return Err(Error::config(path, field(name), message));
            }
        }
    }
    Ok(file.known_differences)
}

/// A check's result on one side, as the output shows it.
#[derive(Debug, Serialize)]
struct CheckSide {
    /// `passed`, `failed` or `not-evaluated`.
    status: &'static str,
    /// What the side saw: the check's message, or why it was not evaluated.
    observed: String,
}

fn status_word(s: CheckStatus) -> &'static str {
    match s {
        CheckStatus::Passed => "passed",
        CheckStatus::Failed => "failed",
        CheckStatus::NotEvaluated => "not-evaluated",
    }
}

impl CheckSide {
    fn of(o: &CheckOutcome) -> Self {
        Self {
            status: status_word(o.status()),
            observed: o.not_evaluated.clone().unwrap_or_else(|| o.message.clone()),
        }
    }
}

/// The reason and fact of a known difference that covered something.
#[derive(Clone, Debug, Serialize)]
struct Known {
    reason: String,
    fact: String,
}

impl From<&KnownDifference> for Known {
    fn from(k: &KnownDifference) -> Self {
        Self {
            reason: k.reason.clone(),
            fact: k.fact.clone(),
        }
    }
}

/// A check whose result differs between the sides (absent on one: `null`).
#[derive(Debug, Serialize)]
struct CheckDifference {
    check: String,
    requirements: Vec<String>,
    expected: String,
    a: Option<CheckSide>,
    b: Option<CheckSide>,
    known: Option<Known>,
}

/// A side's record of a case, as the output shows it.
#[derive(Debug, Serialize)]
struct CaseSide {
    file: String,
    verdict: CaseVerdict,
}

/// How a case compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Status {
    /// Same verdict, every check the same.
    Agree,
    /// Every difference is a known one.
    Known,
    /// A difference no known difference declares.
    Differs,
    /// Only side A has the case.
    OnlyA,
    /// Only side B has the case.
    OnlyB,
}

#[derive(Debug, Serialize)]
struct CaseComparison {
    case: String,
    scenario: String,
    topology: String,
    params: BTreeMap<String, String>,
    status: Status,
    a: Option<CaseSide>,
    b: Option<CaseSide>,
    verdict_differs: bool,
    /// The known difference that declares the case as a whole, if one did.
    known: Option<Known>,
    checks: Vec<CheckDifference>,
    /// Every check either side ran, to tell a stale entry from a misspelt one.
    #[serde(skip)]
    ran: std::collections::BTreeSet<String>,
}

/// A known difference that covered nothing.
#[derive(Debug, Serialize)]
struct Unused {
    #[serde(flatten)]
    entry: KnownDifference,
    /// Why it is stale: what the sides show for what it names.
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<String>,
}

#[derive(Debug, Default, Serialize)]
struct Totals {
    cases: usize,
    agree: usize,
    known: usize,
    differ: usize,
    only_a: usize,
    only_b: usize,
    stale: usize,
}

/// The whole comparison, as `--format json` prints it.
#[derive(Debug, Serialize)]
struct Comparison {
    a: String,
    b: String,
    /// Whether the command exits 0.
    agree: bool,
    cases: Vec<CaseComparison>,
    /// Known differences whose case is compared but that declare nothing that differs.
    stale: Vec<Unused>,
    /// Known differences whose case neither side has.
    not_applicable: Vec<Unused>,
    totals: Totals,
}

/// The checks of one case, compared by name: those whose status differs or that one side
/// lacks, in the order of side A then side B.
fn check_differences(a: &[CheckOutcome], b: &[CheckOutcome]) -> Vec<CheckDifference> {
    let by_name = |v: &[CheckOutcome]| -> BTreeMap<String, usize> {
        v.iter()
            .enumerate()
            .map(|(i, o)| (o.name.clone(), i))
            .collect()
    };
    let (in_a, in_b) = (by_name(a), by_name(b));
    let mut names: Vec<&str> = a.iter().map(|o| o.name.as_str()).collect();
    names.extend(
        b.iter()
            .map(|o| o.name.as_str())
            .filter(|n| !in_a.contains_key(*n)),
    );
    let mut out = Vec::new();
    for name in names {
        let oa = in_a.get(name).map(|&i| &a[i]);
        let ob = in_b.get(name).map(|&i| &b[i]);
        if oa.map(CheckOutcome::status) == ob.map(CheckOutcome::status) {
            continue;
        }
        let either = oa.or(ob).expect("a name comes from one side");
        out.push(CheckDifference {
            check: name.to_string(),
            requirements: either.requirements.clone(),
            expected: either.expected.clone(),
            a: oa.map(CheckSide::of),
            b: ob.map(CheckSide::of),
            known: None,
        });
    }
    out
}

/// Compares the sides, marking what the known differences declare and collecting the ones
/// that declare nothing.
fn compare_sides(
    a_path: &Path,
    b_path: &Path,
    mut a: BTreeMap<CaseKey, Recorded>,
    mut b: BTreeMap<CaseKey, Recorded>,
    known: &[KnownDifference],
) -> Comparison {
    let mut used = vec![false; known.len()];
    // The first entry that covers it wins, so a file's order reads as its precedence.
    let mut declare = |covers: &dyn Fn(&KnownDifference) -> bool| -> Option<Known> {
        let i = known.iter().position(covers)?;
        used[i] = true;
        Some(Known::from(&known[i]))
    };
    let mut keys: Vec<CaseKey> = a.keys().chain(b.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    let mut cases = Vec::new();
    for key in keys {
        let (ra, rb) = (a.remove(&key), b.remove(&key));
        let id = ra
            .as_ref()
            .or(rb.as_ref())
            .map(|r| r.id.clone())
            .expect("a key comes from one side");
        let side = |r: &Recorded| CaseSide {
            file: r.file.display().to_string(),
            verdict: r.verdict.clone(),
        };
        let mut c = CaseComparison {
            case: id.clone(),
            scenario: key.scenario,
            topology: key.topology,
            params: key.params,
            status: Status::Agree,
            a: ra.as_ref().map(side),
            b: rb.as_ref().map(side),
            verdict_differs: false,
            known: None,
            checks: Vec::new(),
            ran: ra
                .iter()
                .chain(&rb)
                .flat_map(|r| r.checks.iter().map(|o| o.name.clone()))
                .collect(),
        };
        match (&ra, &rb) {
            (Some(ra), Some(rb)) => {
                c.verdict_differs = ra.verdict.key() != rb.verdict.key();
                c.checks = check_differences(&ra.checks, &rb.checks);
                for d in &mut c.checks {
                    d.known = declare(&|k| k.covers_check(&id, &d.check));
                }
                // An entry for the whole case covers every difference of it that no entry for
                // a check did.
                let open = c.checks.iter().any(|d| d.known.is_none());
                if open || (c.verdict_differs && c.checks.is_empty()) {
                    c.known = declare(&|k| k.covers_whole(&id));
                }
                let whole = c.known.is_some();
                // A differing verdict with differing checks follows from them; alone, it is a
                // difference of its own (e.g. the runs recorded different known failures).
                let unexplained = !whole
                    && (c.checks.iter().any(|d| d.known.is_none())
                        || (c.verdict_differs && c.checks.is_empty()));
                c.status = if unexplained {
                    Status::Differs
                } else if c.verdict_differs || !c.checks.is_empty() {
                    Status::Known
                } else {
                    Status::Agree
                };
            }
            (Some(_), None) | (None, Some(_)) => {
                c.known = declare(&|k| k.covers_whole(&id));
                c.status = if ra.is_some() {
                    Status::OnlyA
                } else {
                    Status::OnlyB
                };
            }
            (None, None) => unreachable!("a key comes from one side"),
        }
        cases.push(c);
    }
    let (mut stale, mut not_applicable) = (Vec::new(), Vec::new());
    for (k, _) in known.iter().zip(&used).filter(|(_, u)| !**u) {
        let compared: Vec<&CaseComparison> =
            cases.iter().filter(|c| k.covers_case(&c.case)).collect();
        if compared.is_empty() {
            not_applicable.push(Unused {
                entry: k.clone(),
                why: None,
            });
            continue;
        }
        let why = match &k.check {
            Some(check) if !compared.iter().any(|c| c.ran.contains(check)) => {
                format!("no case it names has a check '{check}'")
            }
            Some(_) if compared.iter().all(|c| c.a.is_none() || c.b.is_none()) => {
                "the cases it names are on one side only: declare that without `check`".into()
            }
            Some(check) => format!("check '{check}' has the same result on both sides"),
            None if compared
                .iter()
                .any(|c| c.verdict_differs || !c.checks.is_empty()) =>
            {
                "every difference of the cases it names is declared check by check".into()
            }
            None => "the cases it names are on both sides with the same verdict and checks".into(),
        };
        stale.push(Unused {
            entry: k.clone(),
            why: Some(why),
        });
    }
    let mut totals = Totals {
        cases: cases.len(),
        stale: stale.len(),
        ..Totals::default()
    };
    for c in &cases {
        match c.status {
            Status::Agree => totals.agree += 1,
            Status::Known => totals.known += 1,
            Status::Differs => totals.differ += 1,
            Status::OnlyA => totals.only_a += 1,
            Status::OnlyB => totals.only_b += 1,
        }
    }
    // A case on one side only is a difference unless declared.
    let one_sided_open = cases
        .iter()
        .any(|c| matches!(c.status, Status::OnlyA | Status::OnlyB) && c.known.is_none());
    Comparison {
        a: a_path.display().to_string(),
        b: b_path.display().to_string(),
        agree: totals.differ == 0 && totals.stale == 0 && !one_sided_open,
        cases,
        stale,
        not_applicable,
        totals,
    }
}

pub(super) fn compare(args: &CompareArgs) -> Result<ExitStatus, Error> {
    // A bad known-differences file is refused before any timeline is read.
    let known = args
        .known_differences
        .as_deref()
        .map(load_known)
        .transpose()?
        .unwrap_or_default();
    // Both paths are looked at before any timeline is read, so a mistyped one is named first.
    let (a, b) = (
        timeline_files(Side::A, &args.a)?,
        timeline_files(Side::B, &args.b)?,
    );
    let (a, b) = (load_side(Side::A, a)?, load_side(Side::B, b)?);
    let comparison = compare_sides(&args.a, &args.b, a, b, &known);
    match args.format {
        CompareFormat::Table => put!("{}", render_text(&comparison)),
        CompareFormat::Json => {
            let json = serde_json::to_string_pretty(&comparison)
                .map_err(|e| Error::infra_from("cannot write the comparison as JSON", e))?;
            say!("{json}");
        }
        CompareFormat::Markdown => {
            let json = serde_json::to_value(&comparison)
                .map_err(|e| Error::infra_from("cannot write the comparison as JSON", e))?;
            put!("{}", render_markdown(&json));
        }
    }
    Ok(if comparison.agree {
        ExitStatus::Success
    } else {
        ExitStatus::ProductFailure
    })
}

/// The comparison as a Markdown table, a row per case, from its JSON form (`--format json`),
/// so a comparison recorded as JSON renders as the command printed it.
pub fn render_markdown(c: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let verdict = |side: &serde_json::Value| {
        let v = &side["verdict"];
        if v.is_null() {
            return "absent".to_string();
        }
        match v["requirement"].as_str() {
            Some(r) => format!("{} ({r})", text(&v["verdict"])),
            None => text(&v["verdict"]),
        }
    };
    // Each side's column is named after its directory or file (`model`, `binaries`).
    let side = |v: &serde_json::Value, fallback: &str| {
        std::path::Path::new(v.as_str().unwrap_or_default())
            .file_name()
            .map_or_else(
                || fallback.to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
    };
    let mut s = format!(
        "| case | {} | {} | comparison |\n|---|---|---|---|\n",
        side(&c["a"], "A"),
        side(&c["b"], "B")
    );
    for case in c["cases"].as_array().into_iter().flatten() {
        let checks: Vec<String> = case["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| format!("'{}'", text(&d["check"])))
            .collect();
        let known =
            |k: &serde_json::Value| format!("{} ({})", text(&k["reason"]), text(&k["fact"]));
        let how = match case["status"].as_str().unwrap_or_default() {
            "agree" => "agree".to_string(),
            "known" => {
                let k = std::iter::once(&case["known"])
                    .chain(
                        case["checks"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|d| &d["known"]),
                    )
                    .find(|k| !k.is_null())
                    .map(known)
                    .unwrap_or_default();
                format!("known difference in {}: {k}", checks.join(", "))
            }
            "differs" => format!("**differ** in {}", checks.join(", ")),
            "only-a" => format!("only in {}", side(&c["a"], "A")),
            "only-b" => format!("only in {}", side(&c["b"], "B")),
            other => other.to_string(),
        };
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} |",
            text(&case["case"]),
            verdict(&case["a"]),
            verdict(&case["b"]),
            how.replace('|', "\\|")
        );
    }
    let t = &c["totals"];
    let _ = writeln!(
        s,
        "\n{} cases: {} agree, {} differ as known, {} differ, {} only in A, {} only in B.",
        t["cases"], t["agree"], t["known"], t["differ"], t["only_a"], t["only_b"]
    );
    s
}

/// A verdict as one line: its label and, when it has one, why.
fn verdict_line(v: &CaseVerdict) -> String {
    match v.explanation() {
        Some(why) => format!("{} ({why})", v.label()),
        None => v.label().to_string(),
    }
}

fn check_word(s: Option<&CheckSide>) -> &'static str {
    match s.map(|s| s.status) {
        None => "absent",
        Some("failed") => "FAILED",
        Some("not-evaluated") => "not evaluated",
        Some(other) => other,
    }
}

fn known_line(k: &Known) -> String {
    format!("known difference: {}; fact: {}", k.reason, k.fact)
}

fn render_text(c: &Comparison) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "A: {}", c.a);
    let _ = writeln!(s, "B: {}", c.b);
    for case in &c.cases {
        let name = &case.case;
        let verdict = |side: &Option<CaseSide>| {
            side.as_ref()
                .map_or_else(|| "absent".to_string(), |s| verdict_line(&s.verdict))
        };
        let status = match case.status {
            Status::Agree => "agree",
            Status::Known => "differ as known",
            Status::Differs => "DIFFER",
            Status::OnlyA => "only in A",
            Status::OnlyB => "only in B",
        };
        let _ = writeln!(s, "{name}: {status}");
        let _ = writeln!(s, "  A: {}", verdict(&case.a));
        let _ = writeln!(s, "  B: {}", verdict(&case.b));
        if let Some(k) = &case.known {
            let _ = writeln!(s, "  {}", known_line(k));
        }
        for d in &case.checks {
            let _ = writeln!(
                s,
                "  check '{}' [{}]: A {}, B {}",
                d.check,
                d.requirements.join(", "),
                check_word(d.a.as_ref()),
                check_word(d.b.as_ref())
            );
            let _ = writeln!(s, "    expected: {}", d.expected);
            for (label, side) in [("A", &d.a), ("B", &d.b)] {
                if let Some(side) = side {
                    let observed = side.observed.replace('\n', "\n      ");
                    let _ = writeln!(s, "    {label} observed: {observed}");
                }
            }
            if let Some(k) = &d.known {
                let _ = writeln!(s, "    {}", known_line(k));
            }
        }
    }
    for u in &c.stale {
        let _ = writeln!(
            s,
            "STALE known difference: case '{}'{}: {}; remove it from the file (it said: {})",
            u.entry.case,
            u.entry
                .check
                .as_ref()
                .map_or_else(String::new, |c| format!(", check '{c}'")),
            u.why.as_deref().unwrap_or_default(),
            u.entry.reason
        );
    }
    for u in &c.not_applicable {
        let _ = writeln!(
            s,
            "note: known difference for case '{}' not applied: neither side has that case",
            u.entry.case
        );
    }
    let t = &c.totals;
    let _ = writeln!(
        s,
        "{} cases: {} agree, {} differ as known, {} differ, {} only in A, {} only in B; {} stale known differences",
        t.cases, t.agree, t.known, t.differ, t.only_a, t.only_b, t.stale
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, passed: bool) -> CheckOutcome {
        CheckOutcome {
            name: name.into(),
            requirements: vec!["R1".into()],
            passed,
            not_evaluated: None,
            window: None,
            expected: "e".into(),
            message: if passed { "ok" } else { "broke" }.into(),
            last_seen: Vec::new(),
        }
    }

    fn side(verdict: CaseVerdict, checks: Vec<CheckOutcome>) -> BTreeMap<CaseKey, Recorded> {
        let key = CaseKey {
            scenario: "s".into(),
            topology: "combined".into(),
            params: BTreeMap::new(),
        };
        let r = Recorded {
            file: "s.jsonl".into(),
            id: "s[combined]".into(),
            verdict,
            checks,
        };
        BTreeMap::from([(key, r)])
    }

    fn entry(check: Option<&str>) -> KnownDifference {
        KnownDifference {
            case: "s[*".into(),
            check: check.map(str::to_string),
            reason: "r".into(),
            fact: "f".into(),
        }
    }

    fn failed() -> CaseVerdict {
        CaseVerdict::Failed { reason: "x".into() }
    }

    fn expected() -> CaseVerdict {
        CaseVerdict::ExpectedFailure {
            requirement: "R1".into(),
            report: "#1".into(),
            reason: "x".into(),
        }
    }

    fn compare(
        a: BTreeMap<CaseKey, Recorded>,
        b: BTreeMap<CaseKey, Recorded>,
        known: &[KnownDifference],
    ) -> Comparison {
        compare_sides(Path::new("a"), Path::new("b"), a, b, known)
    }

    #[test]
    fn a_verdict_that_differs_with_the_same_checks_is_a_difference_only_a_whole_case_entry_declares()
     {
        let sides = || {
            (
                side(expected(), vec![check("c", false)]),
                side(failed(), vec![check("c", false)]),
            )
        };
        let (a, b) = sides();
        let c = compare(a, b, &[]);
        assert_eq!(c.cases[0].status, Status::Differs);
        assert!(c.cases[0].verdict_differs && c.cases[0].checks.is_empty());
        assert!(!c.agree);
        // An entry for the check declares nothing: the check agrees, so it is stale.
        let (a, b) = sides();
        let c = compare(a, b, &[entry(Some("c"))]);
        assert_eq!(c.cases[0].status, Status::Differs);
        assert_eq!(c.stale.len(), 1);
        let (a, b) = sides();
        let c = compare(a, b, &[entry(None)]);
        assert_eq!(c.cases[0].status, Status::Known);
        assert!(c.agree, "{c:?}");
    }

    #[test]
    fn a_whole_case_entry_that_the_check_entries_leave_nothing_to_declare_is_stale() {
        let a = side(CaseVerdict::Passed, vec![check("c", true)]);
        let b = side(failed(), vec![check("c", false)]);
        let c = compare(a, b, &[entry(None), entry(Some("c"))]);
        assert_eq!(c.cases[0].status, Status::Known);
        assert!(c.cases[0].checks[0].known.is_some());
        assert_eq!(c.stale.len(), 1);
        assert_eq!(
            c.stale[0].why.as_deref(),
            Some("every difference of the cases it names is declared check by check")
        );
        assert!(!c.agree);
    }

    #[test]
    fn a_check_not_evaluated_on_one_side_differs_from_one_judged_on_the_other() {
        let unjudged = CheckOutcome {
            not_evaluated: Some("step 'seed' failed".into()),
            ..check("c", false)
        };
        let d = check_differences(
            &[check("c", true), check("same", true)],
            &[unjudged, check("same", true)],
        );
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].b.as_ref().map(|s| s.status), Some("not-evaluated"));
        assert_eq!(
            d[0].b.as_ref().map(|s| s.observed.as_str()),
            Some("step 'seed' failed")
        );
        // A check one side lacks is a difference too.
        let d = check_differences(&[check("c", true)], &[]);
        assert!(d[0].b.is_none());
    }
}
