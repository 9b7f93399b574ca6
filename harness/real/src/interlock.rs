//! The safety interlock: faults (and installs that a run tears down) go only into disposable
//! clusters. A context is disposable when it is named like a kind (`kind-*`) or k3d (`k3d-*`)
//! cluster, or when the user named it with `--allow-context`. Everything else is refused before
//! the harness changes anything, so a shared production gateway cannot be broken by accident.

use conformance_core::error::Error;

/// Why a context was allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// Named `kind-*`: the context kind creates for its clusters.
    Kind,
    /// Named `k3d-*`: the context k3d creates for its clusters.
    K3d,
    /// Named explicitly with `--allow-context`.
    Explicit,
}

impl std::fmt::Display for Allowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Kind => "it is a kind context (kind-*)",
            Self::K3d => "it is a k3d context (k3d-*)",
            Self::Explicit => "it was allowed with --allow-context",
        })
    }
}

/// Decides whether the harness may change and break the cluster behind `context`.
pub(crate) fn check(context: &str, allowed: &[String]) -> Result<Allowed, Error> {
    if allowed.iter().any(|a| a == context) {
        return Ok(Allowed::Explicit);
    }
    // The prefix alone is not enough: `kind-` with nothing after it is not a kind context.
    if let Some(rest) = context.strip_prefix("kind-")
        && !rest.is_empty()
    {
        return Ok(Allowed::Kind);
    }
    if let Some(rest) = context.strip_prefix("k3d-")
        && !rest.is_empty()
    {
        return Ok(Allowed::K3d);
    }
    Err(Error::usage(format!(
        "refusing to touch context `{context}`: the harness installs, breaks and removes things, so it \
         only acts on disposable clusters, whose contexts are named `kind-*` or `k3d-*`. Nothing was \
         changed. If `{context}` really is a disposable test cluster, pass --allow-context {context}."
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_and_k3d_contexts_are_allowed() {
        assert_eq!(
            check("kind-openshell-conformance", &[]).unwrap(),
            Allowed::Kind
        );
        assert_eq!(check("k3d-dev", &[]).unwrap(), Allowed::K3d);
    }

    #[test]
    fn a_production_looking_context_is_refused_with_the_reason_and_the_way_out() {
        let err = check("gke_acme_us-east1_prod-gateway", &[]).unwrap_err();
        assert_eq!(
            err.exit_status(),
            conformance_core::error::ExitStatus::Usage
        );
        let msg = err.to_string();
        assert!(
            msg.contains("refusing to touch context `gke_acme_us-east1_prod-gateway`"),
            "{msg}"
        );
        assert!(msg.contains("Nothing was changed"), "{msg}");
        assert!(
            msg.contains("--allow-context gke_acme_us-east1_prod-gateway"),
            "{msg}"
        );
    }

    #[test]
    fn lookalike_names_are_refused() {
        for ctx in ["kind-", "k3d-", "prod-kind-a", "KIND-a", "minikube", "kind"] {
            assert!(check(ctx, &[]).is_err(), "{ctx} should be refused");
        }
    }

    #[test]
    fn an_explicitly_allowed_context_passes_and_only_that_one() {
        let allowed = vec!["staging-scratch".to_string()];
        assert_eq!(
            check("staging-scratch", &allowed).unwrap(),
            Allowed::Explicit
        );
        assert!(check("staging", &allowed).is_err());
    }
}
