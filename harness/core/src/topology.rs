//! Supervisor topologies: where OpenShell's supervisor runs relative to the workload, and the
//! helm values that select it for each chart version. Loaded from `fixtures/topologies/*.yaml`;
//! every file there is also compiled into the binary (build.rs) so it runs from anywhere.
//!
//! A topology is data all the way down: the real target reads it for helm values and to find
//! the supervisor, and the emulated models read it to shape the sandbox pod, gate it, and run
//! the supervisor where it says. So a new topology with an existing `runs_in` placement is one
//! YAML file. A new placement needs a [`SupervisorPlacement`] variant here and its model: one
//! arm per placement in the models' `placement` module (the pod it shapes, the objects it owns,
//! how its supervisor is killed), plus how the real fault injector finds that supervisor.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use semver::{Version, VersionReq};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A supervisor topology, as declared in its fixture file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub name: String,
    pub description: String,
    /// The oldest OpenShell version that supports this topology.
    pub min_openshell: Version,
    /// Helm values per chart version range; every matching entry applies, later ones win.
    pub values: Vec<ValuesForVersions>,
    pub workload: Workload,
    pub supervisor: SupervisorPlacement,
}

/// The sandbox pod's workload side.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// The sandbox pod's container that runs the main process (where probes exec).
    pub container: String,
    /// A scheduling gate the workload pod is created behind, released once the supervisor
    /// attached (reported for the 0.1.x topologies whose supervisor lives outside the pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_gate: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValuesForVersions {
    /// A semver requirement such as `<0.1.0` or `>=0.1.0`.
    pub versions: VersionReq,
    pub set: serde_json::Value,
}

/// Where the supervisor runs, and how to find it (to observe it, or to kill it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "runs_in", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SupervisorPlacement {
    /// The workload container itself: the supervisor is its entrypoint, bootstraps, then
    /// launches the main process beside it.
    WorkloadContainer,
    /// Another container of the sandbox pod (sharing its process namespace); the process side
    /// in the workload container waits for this one's control socket.
    SidecarContainer { container: String },
    /// A pod of its own per sandbox, named `<sandbox CR name><name_suffix>`, found by
    /// `selector` plus `sandbox_label=<sandbox CR name>`.
    DedicatedPod {
        name_suffix: String,
        container: String,
        selector: BTreeMap<String, String>,
        sandbox_label: String,
    },
    /// One Deployment shared by all sandboxes.
    SharedDeployment {
        name: String,
        container: String,
        selector: BTreeMap<String, String>,
    },
}

// BUILTIN: every `fixtures/topologies/*.yaml`, as (file stem, text); see build.rs.
include!(concat!(env!("OUT_DIR"), "/topologies.rs"));

impl Topology {
    /// Parses and validates one topology file; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &Path) -> Result<Self> {
        let topo: Topology = crate::error::parse_yaml(text, origin)?;
        topo.validate(origin)?;
        Ok(topo)
    }

    pub fn load_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::usage_from(format!("cannot read topology file {}", path.display()), e)
        })?;
        Self::from_yaml(&text, path)
    }

    fn validate(&self, origin: &Path) -> Result<()> {
        crate::error::name_matches_file(&self.name, origin)?;
        if self.values.is_empty() {
            return Err(Error::config(
                origin,
                "values",
                "must list the helm values for at least one chart version range",
            ));
        }
        for (i, v) in self.values.iter().enumerate() {
            if !v.set.is_object() {
                return Err(Error::config(
                    origin,
                    format!("values[{i}].set"),
                    "must be a mapping of helm values",
                ));
            }
        }
        if self.values_for(&self.min_openshell).is_none() {
            return Err(Error::config(
                origin,
                "min_openshell",
                format!(
                    "no `values` entry covers the oldest supported version {}",
                    self.min_openshell
                ),
            ));
        }
        let empty = |what: &str, field: &str| {
            Error::config(origin, field, format!("{what} must not be empty"))
        };
        if self.workload.container.is_empty() {
            return Err(empty("the container name", "workload.container"));
        }
        if self
            .workload
            .scheduling_gate
            .as_ref()
            .is_some_and(String::is_empty)
        {
            return Err(empty("the gate name", "workload.scheduling_gate"));
        }
        match &self.supervisor {
            SupervisorPlacement::WorkloadContainer => {}
            SupervisorPlacement::SidecarContainer { container } => {
                if container.is_empty() {
                    return Err(empty("the container name", "supervisor.container"));
                }
                if *container == self.workload.container {
                    return Err(Error::config(
                        origin,
                        "supervisor.container",
                        "a sidecar is a container of its own; use `runs_in: workload-container` \
                         for a supervisor in the workload container",
                    ));
                }
            }
            SupervisorPlacement::DedicatedPod {
                name_suffix,
                container,
                selector,
                sandbox_label,
            } => {
                if name_suffix.is_empty() {
                    return Err(empty("the pod name suffix", "supervisor.name_suffix"));
                }
                if container.is_empty() {
                    return Err(empty("the container name", "supervisor.container"));
                }
                if selector.is_empty() || sandbox_label.is_empty() {
                    return Err(empty("selector and sandbox_label", "supervisor.selector"));
                }
            }
            SupervisorPlacement::SharedDeployment {
                name,
                container,
                selector,
            } => {
                if container.is_empty() {
                    return Err(empty("the container name", "supervisor.container"));
                }
                if name.is_empty() || selector.is_empty() {
                    return Err(empty("name and selector", "supervisor.name"));
                }
            }
        }
        Ok(())
    }

    /// Whether each sandbox has a supervisor of its own (whose log speaks of it alone).
    pub fn supervisor_per_sandbox(&self) -> bool {
        !matches!(
            self.supervisor,
            SupervisorPlacement::SharedDeployment { .. }
        )
    }

    /// Whether the supervisor runs inside the sandbox pod (so replacing that pod re-runs
    /// bootstrap and restarts the workload).
    pub fn supervisor_in_sandbox_pod(&self) -> bool {
        self.supervisor_container().is_some()
    }

    /// The sandbox pod's container the supervisor runs in; None when it runs in a pod of its
    /// own.
    pub(crate) fn supervisor_container(&self) -> Option<&str> {
        match &self.supervisor {
            SupervisorPlacement::WorkloadContainer => Some(&self.workload.container),
            SupervisorPlacement::SidecarContainer { container } => Some(container),
            SupervisorPlacement::DedicatedPod { .. }
            | SupervisorPlacement::SharedDeployment { .. } => None,
        }
    }

    /// The scheduling gate the workload pod waits behind, if the topology gates it.
    pub fn scheduling_gate(&self) -> Option<&str> {
        self.workload.scheduling_gate.as_deref()
    }

    /// Whether this OpenShell version supports the topology.
    pub fn supports(&self, openshell: &Version) -> bool {
        release(openshell) >= release(&self.min_openshell)
    }

    /// The helm values selecting this topology for a chart version: every matching entry,
    /// deep-merged in order. None if no entry matches.
    pub fn values_for(&self, chart: &Version) -> Option<serde_json::Value> {
        let v = release(chart);
        let mut merged: Option<serde_json::Value> = None;
        for entry in self.values.iter().filter(|e| e.versions.matches(&v)) {
            let m = merged.get_or_insert_with(|| serde_json::json!({}));
            deep_merge(m, &entry.set);
        }
        merged
    }
}

/// Version ranges are about releases; a pre-release such as `0.1.6-dev.3` is matched as 0.1.6
/// (semver would otherwise exclude it from `>=0.1.0`).
fn release(v: &Version) -> Version {
    Version::new(v.major, v.minor, v.patch)
}

pub fn deep_merge(into: &mut serde_json::Value, from: &serde_json::Value) {
    match (into, from) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                deep_merge(a.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

/// The field a serde error message names (`unknown field `x``, `missing field `y``), so errors
/// point at a field even when the parser does not.
/// A set of topologies by name.
#[derive(Clone, Debug)]
pub struct Topologies {
    by_name: BTreeMap<String, Topology>,
}

impl Topologies {
    /// The shipped topologies: every file of `fixtures/topologies`.
    pub fn builtin() -> Self {
        let by_name = BUILTIN
            .iter()
            .map(|(name, text)| {
                let origin = PathBuf::from(format!("fixtures/topologies/{name}.yaml"));
                let t = Topology::from_yaml(text, &origin)
                    .unwrap_or_else(|e| panic!("shipped topology is invalid: {e}"));
                (t.name.clone(), t)
            })
            .collect();
        Self { by_name }
    }

    /// Every `*.yaml` in a directory.
    pub fn load_dir(dir: &Path) -> Result<Self> {
        let entries = std::fs::read_dir(dir).map_err(|e| {
            Error::usage_from(
                format!("cannot read topology directory {}", dir.display()),
                e,
            )
        })?;
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        paths.sort();
        let mut by_name = BTreeMap::new();
        for p in paths {
            let t = Topology::load_file(&p)?;
            by_name.insert(t.name.clone(), t);
        }
        Ok(Self { by_name })
    }

    pub fn names(&self) -> Vec<&str> {
        self.by_name.keys().map(String::as_str).collect()
    }

    pub fn all(&self) -> impl Iterator<Item = &Topology> {
        self.by_name.values()
    }

    pub fn get(&self, name: &str) -> Result<&Topology> {
        self.by_name.get(name).ok_or_else(|| {
            Error::usage(format!(
                "unknown topology `{name}`; known topologies: {}",
                self.names().join(", ")
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/topologies")
    }

    #[test]
    fn every_shipped_topology_fixture_loads_from_disk_and_matches_the_compiled_one() {
        let disk = Topologies::load_dir(&fixture_dir()).unwrap();
        let builtin = Topologies::builtin();
        // Each file is named after its topology, and every file was compiled in.
        let stems: Vec<&str> = BUILTIN.iter().map(|(stem, _)| *stem).collect();
        assert!(!stems.is_empty());
        assert_eq!(disk.names(), stems);
        assert_eq!(builtin.names(), stems);
        for t in disk.all() {
            assert_eq!(builtin.get(&t.name).unwrap(), t);
        }
    }

    #[test]
    fn helm_values_follow_the_key_move_between_chart_versions() {
        let t = Topologies::builtin();
        let sidecar = t.get("sidecar").unwrap();
        let old = sidecar
            .values_for(&Version::parse("0.0.111").unwrap())
            .unwrap();
        assert_eq!(old["supervisor"]["topology"], "sidecar");
        assert!(old.get("gatewayConfig").is_none());
        let new = sidecar
            .values_for(&Version::parse("0.1.6-dev.3").unwrap())
            .unwrap();
        assert_eq!(
            new["gatewayConfig"]["openshell"]["drivers"]["kubernetes"]["supervisor_topology"],
            "sidecar"
        );
        assert!(new.get("supervisor").is_none());
    }

    #[test]
    fn topologies_newer_than_the_openshell_version_are_unsupported() {
        let t = Topologies::builtin();
        let v = Version::parse("0.0.111").unwrap();
        assert!(t.get("combined").unwrap().supports(&v));
        assert!(t.get("sidecar").unwrap().supports(&v));
        assert!(!t.get("gateway").unwrap().supports(&v));
        assert!(!t.get("supervisor-pod").unwrap().supports(&v));
        assert!(
            t.get("gateway")
                .unwrap()
                .supports(&Version::parse("0.1.6").unwrap())
        );
        assert!(t.get("gateway").unwrap().values_for(&v).is_none());
    }

    #[test]
    fn supervisor_placement_says_where_to_find_the_supervisor() {
        let t = Topologies::builtin();
        let combined = t.get("combined").unwrap();
        assert_eq!(combined.supervisor, SupervisorPlacement::WorkloadContainer);
        assert_eq!(combined.supervisor_container(), Some("agent"));
        let sidecar = t.get("sidecar").unwrap();
        assert_eq!(
            sidecar.supervisor,
            SupervisorPlacement::SidecarContainer {
                container: "openshell-supervisor-network".into()
            }
        );
        assert_eq!(
            sidecar.supervisor_container(),
            Some("openshell-supervisor-network")
        );
        assert!(matches!(
            &t.get("supervisor-pod").unwrap().supervisor,
            SupervisorPlacement::DedicatedPod { sandbox_label, name_suffix, .. }
                if sandbox_label == "openshell.ai/sandbox-name" && name_suffix == "-supervisor"
        ));
        assert!(matches!(
            &t.get("gateway").unwrap().supervisor,
            SupervisorPlacement::SharedDeployment { name, .. } if name == "openshell-supervisor"
        ));
        assert_eq!(t.get("gateway").unwrap().supervisor_container(), None);
    }

    #[test]
    fn only_topologies_whose_supervisor_lives_outside_the_sandbox_pod_gate_the_workload() {
        let t = Topologies::builtin();
        for name in ["combined", "sidecar"] {
            let topo = t.get(name).unwrap();
            assert_eq!(topo.scheduling_gate(), None, "{name}");
            assert!(topo.supervisor_in_sandbox_pod(), "{name}");
        }
        for name in ["supervisor-pod", "gateway"] {
            let topo = t.get(name).unwrap();
            assert_eq!(
                topo.scheduling_gate(),
                Some("openshell.ai/bootstrap-material"),
                "{name}"
            );
            assert!(!topo.supervisor_in_sandbox_pod(), "{name}");
        }
        for topo in t.all() {
            assert_eq!(topo.workload.container, "agent", "{}", topo.name);
        }
    }

    #[test]
    fn an_unknown_topology_is_a_usage_error_listing_the_known_ones() {
        let err = Topologies::builtin().get("mesh").unwrap_err();
        assert_eq!(err.exit_status(), crate::error::ExitStatus::Usage);
        assert_eq!(
            err.to_string(),
            format!(
                "unknown topology `mesh`; known topologies: {}",
                Topologies::builtin().names().join(", ")
            )
        );
    }

    fn broken(text: &str) -> Error {
        Topology::from_yaml(text, Path::new("fixtures/topologies/combined.yaml")).unwrap_err()
    }

    const GOOD: &str = include_str!("../../../fixtures/topologies/combined.yaml");

    #[test]
    fn a_misspelled_field_is_an_error_naming_file_and_field() {
        let err = broken(&GOOD.replace("min_openshell:", "min_openshel:"));
        let Error::Config { file, field, .. } = &err else {
            panic!("expected a config error, got {err:?}")
        };
        assert_eq!(file, Path::new("fixtures/topologies/combined.yaml"));
        assert_eq!(field, "min_openshel");
        assert!(
            err.to_string()
                .starts_with("fixtures/topologies/combined.yaml: field `min_openshel`"),
            "{err}"
        );
    }

    #[test]
    fn a_malformed_version_range_or_placement_is_an_error_naming_the_field() {
        let err = broken(&GOOD.replace("\"<0.1.0\"", "\"before 0.1\""));
        assert!(matches!(&err, Error::Config { .. }), "{err:?}");
        assert!(err.to_string().contains("combined.yaml"), "{err}");

        let err = broken(&GOOD.replace("runs_in: workload-container", "runs_in: sandbox-vm"));
        assert!(err.to_string().contains("sandbox-vm"), "{err}");

        let err = broken(&GOOD.replace("container: agent", "container: \"\""));
        let Error::Config { field, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(field, "workload.container");
    }

    #[test]
    fn a_sidecar_in_the_workload_container_or_an_empty_gate_is_rejected() {
        let sidecar = GOOD.replace(
            "runs_in: workload-container",
            "runs_in: sidecar-container\n  container: agent",
        );
        let err = broken(&sidecar);
        let Error::Config { field, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(field, "supervisor.container");

        let gated = GOOD.replace(
            "  container: agent\n",
            "  container: agent\n  scheduling_gate: \"\"\n",
        );
        let err = broken(&gated);
        let Error::Config { field, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(field, "workload.scheduling_gate");
    }

    #[test]
    fn a_topology_whose_name_disagrees_with_its_file_is_rejected() {
        let err = broken(&GOOD.replace("name: combined", "name: sidecar"));
        let Error::Config { field, message, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(field, "name");
        assert!(message.contains("combined.yaml"), "{message}");
    }

    #[test]
    fn a_topology_without_values_for_its_oldest_version_is_rejected() {
        let err = broken(
            &GOOD
                .replace("min_openshell: 0.0.111", "min_openshell: 0.2.0")
                .replace("\">=0.1.0\"", "\"<0.0.1\""),
        );
        let Error::Config { field, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(field, "min_openshell");
    }
}
