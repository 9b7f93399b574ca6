//! JSON Pointer lookups without allocation. `serde_json::Value::pointer` unescapes every token
//! with two `str::replace` calls, so each lookup allocates two strings per path segment; the
//! emulated controllers look fields up this way over every stored object on every change, and
//! that was about a tenth of the proof's instructions. Paths without escapes (all of ours) are
//! walked in place here; a path with `~` falls back to serde_json.

use serde_json::Value;

/// What `Value::pointer` returns for `path`, without allocating for paths without `~`.
pub fn pointer<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    if path.contains('~') {
        return v.pointer(path);
    }
    if path.is_empty() {
        return Some(v);
    }
    path.strip_prefix('/')?
        .split('/')
        .try_fold(v, |target, token| match target {
            Value::Object(m) => m.get(token),
            Value::Array(a) => index(token).and_then(|i| a.get(i)),
            _ => None,
        })
}

/// An array index as RFC 6901 writes it (no sign, no leading zeros), as serde_json reads it.
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// [`pointer`] as a method, for call chains (`obj.at("/metadata/name")`).
pub trait Pointer {
    fn at(&self, path: &str) -> Option<&Value>;
}

impl Pointer for Value {
    fn at(&self, path: &str) -> Option<&Value> {
        pointer(self, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case("")]
    #[case("/")]
    #[case("/metadata/name")]
    #[case("/metadata/labels/app")]
    #[case("/metadata/labels/a~1b")]
    #[case("/metadata/labels/t~0c")]
    #[case("/metadata/labels/")]
    #[case("/spec/containers/0/name")]
    #[case("/spec/containers/1/ports/0/containerPort")]
    #[case("/spec/containers/01/name")]
    #[case("/spec/containers/+1/name")]
    #[case("/spec/containers/-/name")]
    #[case("/spec/containers/7")]
    #[case("/spec/containers/name")]
    #[case("/status/phase/deeper")]
    #[case("metadata/name")]
    #[case("/missing")]
    #[case("//")]
    fn a_lookup_finds_what_serde_json_finds(#[case] path: &str) {
        let v = json!({
            "": {"": "empty keys"},
            "metadata": {"name": "p", "labels": {"app": "x", "a/b": "slash", "t~c": "tilde", "": "e"}},
            "spec": {"containers": [{"name": "a"}, {"name": "b", "ports": [{"containerPort": 80}]}]},
            "status": {"phase": "Running"},
        });
        assert_eq!(pointer(&v, path), v.pointer(path), "path {path:?}");
        assert_eq!(v.at(path), v.pointer(path), "path {path:?}");
    }
}
