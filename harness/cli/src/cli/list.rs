//! `list`: what the harness can run, as a table or JSON.

use serde_json::{Value, json};

use super::args::{Format, ListArgs, ListWhat};
use conformance_catalog::catalog::entries;
use conformance_catalog::requirements::REQUIREMENTS;
use conformance_core::error::{Error, ExitStatus};
use conformance_core::topology::Topologies;
use conformance_models::spec::{DEFECTS, MODELS};

fn scenarios() -> Vec<Value> {
    entries()
        .into_iter()
        .map(|e| {
            json!({
                "id": e.scenario.id,
                "title": e.scenario.title,
                "requirements": e.scenario.requirements,
                "requires": e.scenario.requires.iter().map(|c| c.name()).collect::<Vec<_>>(),
                "variants": e.variants.iter().map(|p| p.label()).filter(|l| !l.is_empty()).collect::<Vec<_>>(),
            })
        })
        .collect()
}

fn requirements() -> Vec<Value> {
    REQUIREMENTS
        .iter()
        .map(|r| json!({"id": r.id, "requirement": r.text, "source": r.source}))
        .collect()
}

fn topologies() -> Vec<Value> {
    Topologies::builtin()
        .all()
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description,
                "min_openshell": t.min_openshell.to_string(),
            })
        })
        .collect()
}

fn models() -> Vec<Value> {
    MODELS
        .iter()
        .map(|m| json!({"name": m.name, "openshell": m.openshell, "description": m.description}))
        .collect()
}

fn defects() -> Vec<Value> {
    DEFECTS
        .iter()
        .map(|d| json!({"name": d.name, "breaks": d.requirement, "description": d.description}))
        .collect()
}

pub(super) fn list(args: &ListArgs) -> Result<ExitStatus, Error> {
    let all = [
        (ListWhat::Scenarios, "scenarios", scenarios()),
        (ListWhat::Requirements, "requirements", requirements()),
        (ListWhat::Topologies, "topologies", topologies()),
        (ListWhat::Models, "models", models()),
        (ListWhat::Defects, "defects", defects()),
    ];
    let chosen: Vec<_> = all
        .into_iter()
        .filter(|(w, _, _)| args.what.is_none_or(|want| want == *w))
        .collect();
    match args.format {
        Format::Json => {
            let v = if chosen.len() == 1 {
                Value::Array(chosen[0].2.clone())
            } else {
                Value::Object(
                    chosen
                        .iter()
                        .map(|(_, name, items)| (name.to_string(), Value::Array(items.clone())))
                        .collect(),
                )
            };
            say!(
                "{}",
                serde_json::to_string_pretty(&v).expect("JSON values serialize")
            );
        }
        Format::Table => {
            for (_, name, items) in &chosen {
                say!("{}", name.to_uppercase());
                put!("{}", table(items));
                say!();
            }
        }
    }
    Ok(ExitStatus::Success)
}

/// A plain aligned table of JSON objects (keys in their order, lists joined with commas).
fn table(items: &[Value]) -> String {
    let Some(first) = items.first().and_then(Value::as_object) else {
        return String::new();
    };
    let keys: Vec<&String> = first.keys().collect();
    let cell = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| x.to_string())
            })
            .collect::<Vec<_>>()
            .join(", "),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|i| keys.iter().map(|k| cell(&i[k.as_str()])).collect())
        .collect();
    let widths: Vec<usize> = keys
        .iter()
        .enumerate()
        .map(|(c, k)| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
                .max(k.len())
        })
        .collect();
    let mut out = String::new();
    let line = |cells: Vec<String>| {
        let last = cells.len() - 1;
        cells
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                if i == last {
                    c
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    out.push_str(&line(keys.iter().map(|k| k.to_uppercase()).collect()));
    out.push('\n');
    for r in rows {
        out.push_str(line(r).trim_end());
        out.push('\n');
    }
    out
}
