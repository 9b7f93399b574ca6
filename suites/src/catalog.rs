//! The catalog: every scenario with the parameter variants it runs with, expanded into cases
//! for the chosen topologies.

use std::collections::BTreeMap;
use std::time::Duration;

use conformance_core::checks::Check;
use conformance_core::scenario::{Case, Params};
use conformance_core::target::TargetInfo;
use conformance_core::timeline::RunInfo;
use conformance_core::topology::Topologies;
use conformance_core::topology::Topology;

use crate::scenarios;
use crate::scenarios::seeded_sweep;

pub use crate::scenarios::common::Entry;

/// Every scenario with its default variants, in catalog order (listed in `scenarios/mod.rs`).
pub fn entries() -> Vec<Entry> {
    scenarios::entries()
}

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Globs (`*` matches anything) over scenario ids and case ids; empty selects everything.
    pub patterns: Vec<String>,
    /// Replaces the outage of every scenario that has one.
    pub outage: Option<Duration>,
    /// The sweep's seed.
    pub seed: Option<u64>,
}

/// The command of a sandbox's long-running main process, as the scenarios give it: the targets'
/// tests run it to see that it outlasts any outage.
pub fn workload_command() -> Vec<String> {
    scenarios::common::workload_command()
}

/// Expands the catalog into cases: scenario × topology × variant, in catalog order.
pub fn cases(topologies: &[Topology], sel: &Selection) -> Vec<Case> {
    let mut out = Vec::new();
    for entry in entries() {
        let mut variants = entry.variants.clone();
        if let Some(o) = sel.outage
            && variants.iter().any(|v| v.outage.is_some())
        {
            variants = vec![Params::default().with_outage(o)];
        }
        if entry.seeded {
            let seed = sel.seed.unwrap_or(seeded_sweep::DEFAULT_SEED);
            for v in &mut variants {
                v.schedule = Some(seeded_sweep::schedule_for(seed));
            }
        }
        for topology in topologies {
            for params in &variants {
                let case = Case::new(entry.scenario.clone(), topology.clone(), params.clone());
                if selected(&sel.patterns, &case) {
                    out.push(case);
                }
            }
        }
    }
    out
}

/// Why the catalog cannot say which checks a recorded case should have run.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("topology {0} is not one the catalog ships")]
    UnknownTopology(String),
    #[error("the recorded outage {outage:?} is not a duration")]
    Outage {
        outage: String,
        #[source]
        source: humantime::DurationError,
    },
    #[error(
        "the catalog has no case of scenario {scenario} on {topology} with parameters {params:?}"
    )]
    NoSuchCase {
        scenario: String,
        topology: String,
        params: BTreeMap<String, String>,
    },
}

/// The check plan the catalog gives `case`, so a saved plan can be compared with it.
pub fn plan_of(case: &Case) -> Vec<Check> {
    // What a scenario checks does not depend on the target, only on the case.
    (case.scenario.checks)(&case.info(TargetInfo::default()))
}

/// The catalog's case that a timeline recorded (its scenario, topology and parameters), or why
/// the catalog cannot say.
pub fn case_for(run: &RunInfo) -> Result<Case, PlanError> {
    let topology = Topologies::builtin()
        .get(&run.topology)
        .map_err(|_| PlanError::UnknownTopology(run.topology.clone()))?
        .clone();
    let outage = match run.params.get("outage") {
        Some(o) => Some(
            humantime::parse_duration(o).map_err(|source| PlanError::Outage {
                outage: o.clone(),
                source,
            })?,
        ),
        None => None,
    };
    let sel = Selection {
        patterns: vec![run.scenario.clone()],
        outage,
        seed: run.seed,
    };
    cases(&[topology], &sel)
        .into_iter()
        .find(|c| c.params.as_text() == run.params)
        .ok_or_else(|| PlanError::NoSuchCase {
            scenario: run.scenario.clone(),
            topology: run.topology.clone(),
            params: run.params.clone(),
        })
}

fn selected(patterns: &[String], case: &Case) -> bool {
    patterns.is_empty()
        || patterns
            .iter()
            .any(|p| glob(p, &case.scenario.id) || glob(p, &case.id()))
}

/// `*` matches any run of characters; everything else matches itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let mut rest = text;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(part) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use conformance_core::topology::Topologies;

    fn all() -> Vec<Topology> {
        Topologies::builtin().all().cloned().collect()
    }

    /// How many parameter variants the catalog lists for the scenarios whose id matches `glob`.
    fn variants_of(pattern: &str) -> usize {
        entries()
            .iter()
            .filter(|e| glob(pattern, &e.scenario.id))
            .map(|e| e.variants.len())
            .sum()
    }

    #[test]
    fn the_catalog_runs_every_variant_of_every_scenario_once_on_every_topology() {
        let topologies = all();
        let cases = cases(&topologies, &Selection::default());
        assert_eq!(cases.len(), variants_of("*") * topologies.len());
        // Each (scenario, topology, variant) exactly once: a case lost or doubled shows here.
        let ids: std::collections::BTreeSet<String> = cases.iter().map(|c| c.id()).collect();
        assert_eq!(ids.len(), cases.len(), "case ids are unique");
        for e in entries() {
            for t in &topologies {
                let on = cases
                    .iter()
                    .filter(|c| c.scenario.id == e.scenario.id && c.topology.name == t.name)
                    .count();
                assert_eq!(on, e.variants.len(), "{} on {}", e.scenario.id, t.name);
            }
        }
        assert!(ids.contains("gateway-outage[sidecar,outage=5m 30s]"));
        assert!(ids.contains("completed-workload[gateway,exit=1,via=supervisor-restart]"));
        assert!(ids.contains("seeded-sweep[combined,seed=1]"));
    }

    #[test]
    fn every_scenario_names_requirements_that_exist() {
        for e in entries() {
            assert!(!e.scenario.requirements.is_empty(), "{}", e.scenario.id);
            for r in &e.scenario.requirements {
                assert!(
                    crate::requirements::find(r).is_some(),
                    "{} names {r}",
                    e.scenario.id
                );
            }
        }
    }

    #[test]
    fn every_requirement_is_verified_by_some_scenario() {
        let topo = all();
        let mut covered = std::collections::BTreeSet::new();
        for case in cases(&topo, &Selection::default()) {
            let info = case.info(Default::default());
            for check in (case.scenario.checks)(&info) {
                covered.extend(check.requirements);
            }
        }
        for r in crate::requirements::REQUIREMENTS {
            assert!(covered.contains(r.id), "no check verifies {}", r.id);
        }
    }

    #[test]
    fn patterns_select_scenarios_or_single_cases() {
        let t = all();
        let sel = |p: &str| Selection {
            patterns: vec![p.into()],
            ..Selection::default()
        };
        assert_eq!(cases(&t, &sel("gateway-restart")).len(), t.len());
        assert_eq!(
            cases(&t, &sel("gateway-*")).len(),
            variants_of("gateway-*") * t.len()
        );
        // More than one scenario: gateway-restart and gateway-outage.
        assert!(variants_of("gateway-*") > variants_of("gateway-outage"));
        assert_eq!(
            cases(&t, &sel("gateway-outage[combined,*")).len(),
            variants_of("gateway-outage")
        );
        assert!(cases(&t, &sel("nothing-like-this")).is_empty());
    }

    #[test]
    fn an_outage_override_replaces_every_outage_variant() {
        let sel = Selection {
            patterns: vec!["gateway-outage".into(), "provisioning".into()],
            outage: Some(Duration::from_secs(45)),
            seed: None,
        };
        let ids: Vec<String> = cases(&all()[..1], &sel).iter().map(|c| c.id()).collect();
        assert_eq!(
            ids,
            [
                "provisioning[combined]",
                "gateway-outage[combined,outage=45s]"
            ]
        );
    }

    #[test]
    fn the_sweep_draws_its_schedule_from_the_seed() {
        let sel = |seed| Selection {
            patterns: vec!["seeded-sweep".into()],
            seed: Some(seed),
            ..Selection::default()
        };
        let a = cases(&all()[..1], &sel(7));
        let b = cases(&all()[..1], &sel(7));
        let c = cases(&all()[..1], &sel(8));
        assert_eq!(a[0].params, b[0].params);
        assert_ne!(a[0].params, c[0].params);
        assert_eq!(a[0].id(), "seeded-sweep[combined,seed=7]");
    }

    #[test]
    fn globs_match_like_a_shell() {
        assert!(glob("a*c", "abc"));
        assert!(glob("*", ""));
        assert!(glob(
            "gateway-*[sidecar*",
            "gateway-outage[sidecar,outage=30s]"
        ));
        assert!(!glob("a*c", "abd"));
        assert!(!glob("abc", "abcd"));
    }
}
