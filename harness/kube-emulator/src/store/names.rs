//! Object names: the RFC 1123 forms the real API server requires of them.

use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceDef;

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, of any length.
fn is_label_pattern(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && is_label_pattern(s)
}

/// At most 253 characters matching the subdomain pattern; the parts between dots have no
/// length limit of their own, unlike labels (docs/upstream-facts.md F12.10).
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label_pattern)
}

/// Object names are RFC 1123 subdomains, but for kinds whose names become DNS labels.
pub(super) fn validate_name(def: &ResourceDef, name: &str) -> ApiResult<()> {
    let label_names = matches!(
        (def.group.as_str(), def.plural.as_str()),
        ("", "namespaces") | ("", "services")
    );
    let (valid, msg) = if label_names {
        (is_dns_label(name), DNS1123_LABEL_MSG)
    } else {
        (is_dns_subdomain(name), DNS1123_SUBDOMAIN_MSG)
    };
    if !valid {
        return Err(ApiError::invalid(
            &def.group,
            &def.kind,
            name,
            "metadata.name",
            &format!("Invalid value: {name:?}: {msg}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_rfc_1123() {
        assert!(is_dns_subdomain("default--demo.x"));
        assert!(!is_dns_subdomain("Bad_Name"));
        assert!(is_dns_label("openshell"));
        assert!(!is_dns_label("a.b"));
    }

    #[test]
    fn an_object_name_without_dots_may_be_longer_than_a_label_up_to_253_characters() {
        // A fault's Secret named after a sandbox resource: 73 characters, no dots.
        let long = "openshell-conformance-ca-default--permanent-bootstrap-error-main-ac2048d6";
        assert!(long.len() > 63);
        assert!(is_dns_subdomain(long));
        assert!(!is_dns_label(long));
        assert!(is_dns_subdomain(&"a".repeat(253)));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain("a.-b"));
    }
}
