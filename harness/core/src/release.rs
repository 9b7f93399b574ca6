//! Releases: what the harness knows of each OpenShell release it models or installs, as data.
//! Loaded from `fixtures/releases/*.yaml`; every file there is also compiled into the binary
//! (build.rs), the way topologies are, so adding a release is adding its YAML file.
//!
//! A release names its OpenShell version, the chart its install renders (and the chart's
//! `gateway.toml` key for the supervisor topology), the Agent Sandbox releases that go with it,
//! whether the defect switches apply, the capabilities its target offers, its known failures
//! (a file of `fixtures/expectations/`) and its behaviour flags. The flags are the models'
//! vocabulary: this module keeps them as a mapping and the models read them into their rules,
//! so a new rule is declared where the model code that follows it lives.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::target::Capability;

/// One release, as declared in its fixture file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Release {
    /// The model name (`--model`), equal to the file's stem.
    pub name: String,
    pub description: String,
    /// The OpenShell version the release stands for; none for the contract, which runs every
    /// topology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openshell: Option<Version>,
    /// The release a real run installs when no chart version is named, and so the model a
    /// served cluster runs when no `--model` is given. Exactly one release says so.
    #[serde(default)]
    pub installed_by_default: bool,
    pub chart: Chart,
    pub agent_sandbox: AgentSandbox,
    /// Whether `--defect` switches apply to this release (the contract's).
    #[serde(default)]
    pub defect_switches: bool,
    /// The stem of the `fixtures/expectations/` file listing the release's known failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expectations: Option<String>,
    /// What the emulated target offers with this release.
    pub capabilities: BTreeSet<Capability>,
    /// The behaviour flags, by name; the models read them (and reject unknown or missing ones).
    pub behaviour: serde_json::Value,
}

/// The OpenShell chart of a release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chart {
    /// The chart version, also the tag of the images it installs.
    pub version: Version,
    /// The `[openshell.drivers.kubernetes]` key of `gateway.toml` naming the supervisor
    /// topology (docs/upstream-facts.md F5.8).
    pub topology_key: String,
}

/// The Agent Sandbox releases that go with an OpenShell release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSandbox {
    /// The release the emulated controller runs unless told otherwise.
    pub default: String,
    /// The releases `--agent-sandbox` may pick for this release (empty: not selectable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selectable: Vec<String>,
    /// The release a real cluster installs with this OpenShell release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<String>,
}

/// An expectations file as shipped: where it comes from (for errors) and its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectationsText<'a> {
    pub origin: &'a Path,
    pub text: &'a str,
}

// BUILTIN: every `fixtures/releases/*.yaml`; EXPECTATIONS: every `fixtures/expectations/*.yaml`;
// both as (file stem, text), see build.rs.
include!(concat!(env!("OUT_DIR"), "/releases.rs"));

impl Release {
    /// Parses and validates one release file; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &Path) -> Result<Self> {
        let release: Release = crate::error::parse_yaml(text, origin)?;
        release.validate(origin)?;
        Ok(release)
    }

    fn validate(&self, origin: &Path) -> Result<()> {
        crate::error::name_matches_file(&self.name, origin)?;
        if self.chart.topology_key.trim().is_empty() {
            return Err(Error::config(
                origin,
                "chart.topology_key",
                "must not be empty",
            ));
        }
        if self.agent_sandbox.default.trim().is_empty() {
            return Err(Error::config(
                origin,
                "agent_sandbox.default",
                "must not be empty",
            ));
        }
        if !self.agent_sandbox.selectable.is_empty()
            && !self
                .agent_sandbox
                .selectable
                .contains(&self.agent_sandbox.default)
        {
            return Err(Error::config(
                origin,
                "agent_sandbox.selectable",
                format!("must include the default {}", self.agent_sandbox.default),
            ));
        }
        if self.openshell.is_some() && self.agent_sandbox.install.is_none() {
            return Err(Error::config(
                origin,
                "agent_sandbox.install",
                "a release with an OpenShell version names the Agent Sandbox release a real cluster installs with it",
            ));
        }
        if self.installed_by_default && self.openshell.is_none() {
            return Err(Error::config(
                origin,
                "installed_by_default",
                "only a release with an OpenShell version can be installed",
            ));
        }
        if !self.behaviour.is_object() {
            return Err(Error::config(
                origin,
                "behaviour",
                "must be a mapping of behaviour flags",
            ));
        }
        Ok(())
    }
}

/// A set of releases by name, with the expectations files they name.
#[derive(Clone, Debug)]
pub struct Releases {
    by_name: BTreeMap<String, Release>,
    /// Expectations text by release name, with the file it came from.
    expectations: BTreeMap<String, (PathBuf, String)>,
}

impl Releases {
    /// The shipped releases (every file of `fixtures/releases`), parsed once.
    pub fn builtin() -> &'static Self {
        static BUILTIN_RELEASES: OnceLock<Releases> = OnceLock::new();
        BUILTIN_RELEASES.get_or_init(|| {
            let files = BUILTIN.iter().map(|(stem, text)| {
                (
                    PathBuf::from(format!("fixtures/releases/{stem}.yaml")),
                    text.to_string(),
                )
            });
            let expectations = |stem: &str| {
                EXPECTATIONS
                    .iter()
                    .find(|(s, _)| *s == stem)
                    .map(|(s, text)| {
                        (
                            PathBuf::from(format!("fixtures/expectations/{s}.yaml")),
                            text.to_string(),
                        )
                    })
            };
            Self::build(files, expectations)
                .unwrap_or_else(|e| panic!("a shipped release is invalid: {e}"))
        })
    }

    /// Every `*.yaml` in `dir`, with the expectations they name from `dir/../expectations/`.
    pub fn load_dir(dir: &Path) -> Result<Self> {
        let entries = std::fs::read_dir(dir).map_err(|e| {
            Error::usage_from(
                format!("cannot read release directory {}", dir.display()),
                e,
            )
        })?;
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        paths.sort();
        let mut files = Vec::new();
        for p in paths {
            let text = std::fs::read_to_string(&p).map_err(|e| {
                Error::usage_from(format!("cannot read release file {}", p.display()), e)
            })?;
            files.push((p, text));
        }
        let expectations_dir = dir.join("../expectations");
        Self::build(files, |stem| {
            let p = expectations_dir.join(format!("{stem}.yaml"));
            std::fs::read_to_string(&p).ok().map(|t| (p, t))
        })
    }

    fn build(
        files: impl IntoIterator<Item = (PathBuf, String)>,
        expectations: impl Fn(&str) -> Option<(PathBuf, String)>,
    ) -> Result<Self> {
        let mut by_name = BTreeMap::new();
        let mut texts = BTreeMap::new();
        let mut default: Option<PathBuf> = None;
        for (origin, text) in files {
            let r = Release::from_yaml(&text, &origin)?;
            if let Some(stem) = &r.expectations {
                let found = expectations(stem).ok_or_else(|| {
                    Error::config(
                        &origin,
                        "expectations",
                        format!("there is no fixtures/expectations/{stem}.yaml"),
                    )
                })?;
                texts.insert(r.name.clone(), found);
            }
            if r.installed_by_default {
                if let Some(other) = &default {
                    return Err(Error::config(
                        &origin,
                        "installed_by_default",
                        format!(
                            "{} says so too; one release is installed by default",
                            other.display()
                        ),
                    ));
                }
                default = Some(origin.clone());
            }
            by_name.insert(r.name.clone(), r);
        }
        if default.is_none() {
            return Err(Error::usage(
                "no release says `installed_by_default: true`; one must",
            ));
        }
        Ok(Self {
            by_name,
            expectations: texts,
        })
    }

    /// The names, in file name order (as `list models` prints them).
    pub fn names(&self) -> Vec<&str> {
        self.by_name.keys().map(String::as_str).collect()
    }

    pub fn all(&self) -> impl Iterator<Item = &Release> {
        self.by_name.values()
    }

    pub fn get(&self, name: &str) -> Option<&Release> {
        self.by_name.get(name)
    }

    /// The release a real run installs when no chart version is named.
    pub fn installed_by_default(&self) -> &Release {
        self.all()
            .find(|r| r.installed_by_default)
            .expect("checked when loaded: one release is installed by default")
    }

    /// The known failures of the release named `name`, if it lists any.
    pub fn expectations(&self, name: &str) -> Option<ExpectationsText<'_>> {
        self.expectations
            .get(name)
            .map(|(origin, text)| ExpectationsText { origin, text })
    }

    /// The Agent Sandbox release a real cluster gets with OpenShell `openshell`: that of the
    /// newest release of the same or an older `major.minor` series (so a 0.1.x chart gets the
    /// 0.1 release's, a 0.0.x chart the 0.0 release's), or the default release's when the
    /// version is unknown or older than every release.
    pub fn agent_sandbox_to_install(&self, openshell: Option<&Version>) -> &str {
        let series = |v: &Version| (v.major, v.minor);
        let chosen = openshell.and_then(|want| {
            self.all()
                .filter_map(|r| Some((r.openshell.as_ref()?, r)))
                .filter(|(v, _)| series(v) <= series(want))
                .max_by(|(a, _), (b, _)| a.cmp(b))
                .map(|(_, r)| r)
        });
        chosen
            .unwrap_or_else(|| self.installed_by_default())
            .agent_sandbox
            .install
            .as_deref()
            .expect("checked when loaded: a release with an OpenShell version names its install")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
    }

    #[test]
    fn every_release_file_in_the_folder_is_compiled_in_and_loads_the_same_from_disk() {
        let disk = Releases::load_dir(&fixtures().join("releases")).unwrap();
        let builtin = Releases::builtin();
        assert_eq!(disk.names(), builtin.names());
        for r in disk.all() {
            assert_eq!(builtin.get(&r.name), Some(r));
            assert_eq!(
                disk.expectations(&r.name).map(|e| e.text),
                builtin.expectations(&r.name).map(|e| e.text)
            );
        }
        assert_eq!(builtin.installed_by_default().name, "openshell-0.0.111");
    }

    #[test]
    fn each_openshell_series_gets_the_agent_sandbox_of_its_release() {
        let r = Releases::builtin();
        let v = |s: &str| Version::parse(s).unwrap();
        assert_eq!(r.agent_sandbox_to_install(Some(&v("0.0.111"))), "v0.5.0");
        assert_eq!(r.agent_sandbox_to_install(Some(&v("0.0.5"))), "v0.5.0");
        assert_eq!(r.agent_sandbox_to_install(Some(&v("0.1.0"))), "v1.0.9");
        assert_eq!(
            r.agent_sandbox_to_install(Some(&v("0.1.6-dev.3"))),
            "v1.0.9"
        );
        assert_eq!(r.agent_sandbox_to_install(Some(&v("0.2.0"))), "v1.0.9");
        assert_eq!(r.agent_sandbox_to_install(None), "v0.5.0");
    }

    #[test]
    fn a_release_file_must_be_named_after_its_release_and_name_existing_expectations() {
        let text = BUILTIN
            .iter()
            .find(|(s, _)| *s == "openshell-0.1.6-reported")
            .unwrap()
            .1;
        let err = Release::from_yaml(text, Path::new("fixtures/releases/x.yaml")).unwrap_err();
        assert!(
            err.to_string().contains("the file is named `x.yaml`"),
            "{err}"
        );
        let renamed = text
            .replace("name: openshell-0.1.6-reported", "name: y")
            .replace(
                "expectations: openshell-0.1.6-reported",
                "expectations: nowhere",
            );
        let err = Releases::build(
            [(PathBuf::from("fixtures/releases/y.yaml"), renamed)],
            |_| None,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("no fixtures/expectations/nowhere.yaml"),
            "{err}"
        );
        let err = Release::from_yaml(
            &format!("{text}\nsurprise: 1\n"),
            Path::new("fixtures/releases/openshell-0.1.6-reported.yaml"),
        )
        .unwrap_err();
        assert!(err.to_string().contains("surprise"), "{err}");
    }
}
