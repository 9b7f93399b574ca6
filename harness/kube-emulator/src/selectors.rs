//! Label selectors (the full set-based grammar) and field selectors (the fields the real API
//! supports per resource).

use crate::error::ApiError;
use crate::pointer::Pointer;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector (`a=b,c!=d,e in (f,g),!h`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let mut out = vec![];
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn parse_set(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let bad = |t: &str| {
            ApiError::bad_request(format!(
                "unable to parse requirement: invalid label selector: {t:?}"
            ))
        };
        let mut reqs = vec![];
        for term in split_top(s) {
            let words: Vec<&str> = term.split_whitespace().collect();
            if let Some(k) = term.strip_prefix('!') {
                reqs.push(LabelReq::NotExists(k.trim().to_string()));
            } else if words.len() >= 3 && words[1] == "in" {
                let set = parse_set(&words[2..].join(" ")).ok_or_else(|| bad(&term))?;
                reqs.push(LabelReq::In(words[0].to_string(), set));
            } else if words.len() >= 3 && words[1] == "notin" {
                let set = parse_set(&words[2..].join(" ")).ok_or_else(|| bad(&term))?;
                reqs.push(LabelReq::NotIn(words[0].to_string(), set));
            } else if let Some((k, v)) = term.split_once("!=") {
                reqs.push(LabelReq::NotEq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = term.split_once("==") {
                reqs.push(LabelReq::Eq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = term.split_once('=') {
                reqs.push(LabelReq::Eq(k.trim().into(), v.trim().into()));
            } else if words.len() == 1 && !term.contains(['(', ')', '<', '>']) {
                reqs.push(LabelReq::Exists(term.clone()));
            } else {
                return Err(bad(&term));
            }
        }
        Ok(Self(reqs))
    }

    /// A selector from a `metav1.LabelSelector` object (`matchLabels` + `matchExpressions`).
    pub fn from_object(sel: &Value) -> Self {
        let mut reqs = vec![];
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(LabelReq::Eq(
                    k.clone(),
                    v.as_str().unwrap_or_default().into(),
                ));
            }
        }
        for e in sel
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let vals: Vec<String> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            match e.get("operator").and_then(Value::as_str) {
                Some("In") => reqs.push(LabelReq::In(key, vals)),
                Some("NotIn") => reqs.push(LabelReq::NotIn(key, vals)),
                Some("Exists") => reqs.push(LabelReq::Exists(key)),
                Some("DoesNotExist") => reqs.push(LabelReq::NotExists(key)),
                _ => {}
            }
        }
        Self(reqs)
    }

    /// The canonical string form (what `Scale.status.selector` carries).
    pub fn to_string_form(&self) -> String {
        self.0
            .iter()
            .map(|r| match r {
                LabelReq::Eq(k, v) => format!("{k}={v}"),
                LabelReq::NotEq(k, v) => format!("{k}!={v}"),
                LabelReq::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                LabelReq::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                LabelReq::Exists(k) => k.clone(),
                LabelReq::NotExists(k) => format!("!{k}"),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.at("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `field=value`, `field==value`, `field!=value`, comma-separated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// The selectable fields per (group, plural), as registered by the real API's field-label
/// conversion functions; `metadata.name` and `metadata.namespace` work everywhere.
fn supported_fields(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("apps", "replicasets") => &["status.replicas"],
        _ => &[],
    }
}

impl FieldSelector {
    pub fn parse(s: &str, group: &str, plural: &str) -> Result<Self, ApiError> {
        let mut reqs = vec![];
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, eq, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            if !matches!(field, "metadata.name" | "metadata.namespace")
                && !supported_fields(group, plural).contains(&field)
            {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, eq, want)| {
            let ptr = format!("/{}", field.replace('.', "/"));
            let actual = match obj.at(&ptr) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(v) => v.to_string(),
            };
            (actual == *want) == *eq
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj() -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": {"app": "web", "tier": "fe"}}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_selectors_follow_the_set_based_grammar() {
        let o = obj();
        for (sel, want) in [
            ("app=web", true),
            ("app==web,tier=fe", true),
            ("app!=web", false),
            ("app in (web,api)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("missing!=x", true),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn field_selectors_match_supported_fields_and_reject_others() {
        let o = obj();
        assert!(
            FieldSelector::parse("metadata.name=a,status.phase=Running", "", "pods")
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("status.phase!=Running", "", "pods")
                .unwrap()
                .matches(&o)
        );
        let e = FieldSelector::parse("status.phase=Running", "", "configmaps").unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "field label not supported: status.phase")
        );
    }

    #[test]
    fn a_label_selector_object_renders_and_matches() {
        let s = LabelSelector::from_object(
            &json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe"]}]}),
        );
        assert_eq!(s.to_string_form(), "app=web,tier in (fe)");
        assert!(s.matches(&obj()));
    }
}
