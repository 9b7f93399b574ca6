//! The table of served resources: the built-in kinds and those registered by
//! CustomResourceDefinitions. Discovery, routing, tables and the store all read it.

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Identifies a served resource in one version: ("", "v1", "pods"), ("apps", "v1", "statefulsets").
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceRef {
    pub group: String,
    pub version: String,
    pub plural: String,
}

impl ResourceRef {
    pub fn new(group: &str, version: &str, plural: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
        }
    }

    /// The resource of a k8s-openapi type, e.g. `ResourceRef::of::<Pod>()`.
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        Self::new(K::GROUP, K::VERSION, K::URL_PATH_SEGMENT)
    }

    pub fn pods() -> Self {
        Self::new("", "v1", "pods")
    }
}

/// Where the scale subresource finds replicas in the object (a CRD's `subresources.scale`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

impl ScalePaths {
    fn workload() -> Self {
        Self {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: Some(".spec.selector".into()),
        }
    }
}

/// An `additionalPrinterColumns` entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub json_path: String,
    pub description: String,
    pub priority: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VersionDef {
    pub name: String,
    pub status: bool,
    pub scale: Option<ScalePaths>,
    pub columns: Vec<PrinterColumn>,
    /// `openAPIV3Schema`, used for defaulting.
    pub schema: Option<Value>,
    pub deprecated: bool,
}

/// One served resource (group + plural), with its served versions (the first is preferred).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceDef {
    pub group: String,
    pub versions: Vec<VersionDef>,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub list_kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Whether spec changes bump `metadata.generation` (set for workloads and custom resources).
    pub has_generation: bool,
    /// Registered by a CustomResourceDefinition (strategic merge patch is refused for these).
    pub custom: bool,
}

impl ResourceDef {
    pub(crate) fn version(&self, v: &str) -> Option<&VersionDef> {
        self.versions.iter().find(|x| x.name == v)
    }

    pub(crate) fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// Whether any served version has the status subresource (writes to the main resource then
    /// ignore `.status`).
    pub(crate) fn has_status(&self, version: &str) -> bool {
        self.version(version).is_some_and(|v| v.status)
    }

    pub(crate) fn gr(&self) -> (String, String) {
        (self.group.clone(), self.plural.clone())
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    short: &[&str],
    status: bool,
    scale: bool,
) -> ResourceDef {
    ResourceDef {
        group: group.into(),
        versions: vec![VersionDef {
            name: version.into(),
            status,
            scale: scale.then(ScalePaths::workload),
            columns: vec![],
            schema: None,
            deprecated: false,
        }],
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: if matches!(
            plural,
            "pods" | "services" | "deployments" | "statefulsets" | "replicasets" | "jobs"
        ) {
            vec!["all".into()]
        } else {
            vec![]
        },
        has_generation: !group.is_empty(),
        custom: false,
    }
}

/// The served resources, keyed by (group, plural).
#[derive(Debug, Clone, Default)]
pub(crate) struct Resources {
    /// Shared: every request looks its resource up, and a CRD's schema is large.
    pub defs: BTreeMap<(String, String), Arc<ResourceDef>>,
}

impl Resources {
    pub(crate) fn builtin() -> Self {
        let mut r = Self::default();
        for d in [
            builtin(
                "",
                "v1",
                "namespaces",
                "Namespace",
                false,
                &["ns"],
                true,
                false,
            ),
            builtin("", "v1", "pods", "Pod", true, &["po"], true, false),
            builtin(
                "",
                "v1",
                "persistentvolumeclaims",
                "PersistentVolumeClaim",
                true,
                &["pvc"],
                true,
                false,
            ),
            builtin("", "v1", "services", "Service", true, &["svc"], true, false),
            builtin(
                "",
                "v1",
                "endpoints",
                "Endpoints",
                true,
                &["ep"],
                false,
                false,
            ),
            builtin("", "v1", "secrets", "Secret", true, &[], false, false),
            builtin(
                "",
                "v1",
                "configmaps",
                "ConfigMap",
                true,
                &["cm"],
                false,
                false,
            ),
            builtin(
                "",
                "v1",
                "serviceaccounts",
                "ServiceAccount",
                true,
                &["sa"],
                false,
                false,
            ),
            builtin("", "v1", "events", "Event", true, &["ev"], false, false),
            builtin(
                "apps",
                "v1",
                "statefulsets",
                "StatefulSet",
                true,
                &["sts"],
                true,
                true,
            ),
            builtin(
                "apps",
                "v1",
                "deployments",
                "Deployment",
                true,
                &["deploy"],
                true,
                true,
            ),
            builtin(
                "apps",
                "v1",
                "replicasets",
                "ReplicaSet",
                true,
                &["rs"],
                true,
                true,
            ),
            builtin(
                "networking.k8s.io",
                "v1",
                "networkpolicies",
                "NetworkPolicy",
                true,
                &["netpol"],
                false,
                false,
            ),
            builtin(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                false,
                &["crd", "crds"],
                true,
                false,
            ),
        ] {
            r.defs.insert(d.gr(), Arc::new(d));
        }
        for d in more_builtins() {
            r.defs.insert(d.gr(), Arc::new(d));
        }
        // Endpoints' kind is plural in the real API ("Endpoints", list "EndpointsList").
        if let Some(ep) = r.defs.get_mut(&(String::new(), "endpoints".into())) {
            Arc::make_mut(ep).singular = "endpoints".into();
        }
        r
    }

    /// Looks up a served (group, version, plural).
    pub(crate) fn get(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<&Arc<ResourceDef>> {
        self.defs
            .get(&(group.to_string(), plural.to_string()))
            .filter(|d| d.version(version).is_some())
    }

    pub(crate) fn get_gr(&self, group: &str, plural: &str) -> Option<&ResourceDef> {
        self.defs
            .get(&(group.to_string(), plural.to_string()))
            .map(|d| &**d)
    }

    /// Groups with their served versions, in a stable order (core first, then by name, but the
    /// built-in groups before custom ones, as the real discovery lists them).
    pub(crate) fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = vec![];
        let mut defs: Vec<&ResourceDef> = self.defs.values().map(|d| &**d).collect();
        defs.sort_by_key(|d| (d.custom, d.group.clone()));
        for d in defs {
            let versions: Vec<String> = d.versions.iter().map(|v| v.name.clone()).collect();
            match out.iter_mut().find(|(g, _)| *g == d.group) {
                Some((_, vs)) => {
                    for v in versions {
                        if !vs.contains(&v) {
                            vs.push(v);
                        }
                    }
                }
                None => out.push((d.group.clone(), versions)),
            }
        }
        for (_, vs) in out.iter_mut() {
            vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        out
    }

    /// Resources served in group/version, sorted by plural.
    pub(crate) fn in_group_version(&self, group: &str, version: &str) -> Vec<&ResourceDef> {
        self.defs
            .values()
            .map(|d| &**d)
            .filter(|d| d.group == group && d.version(version).is_some())
            .collect()
    }

    /// Registers (or re-registers) the resource a CRD object describes.
    pub(crate) fn register_crd(&mut self, crd: &Value) -> Option<(String, String)> {
        let def = def_from_crd(crd)?;
        let key = def.gr();
        self.defs.insert(key.clone(), Arc::new(def));
        Some(key)
    }

    pub(crate) fn unregister(&mut self, group: &str, plural: &str) {
        self.defs.remove(&(group.to_string(), plural.to_string()));
    }
}

/// The kinds served besides the core workload set of `Resources::builtin`'s own table: those
/// real charts and manifests contain (Node, Job, RBAC, Lease, the access and token reviews);
/// `kinds.rs` holds how they behave.
fn more_builtins() -> Vec<ResourceDef> {
    let rbac = "rbac.authorization.k8s.io";
    let authz = "authorization.k8s.io";
    let mut defs = vec![
        builtin("", "v1", "nodes", "Node", false, &["no"], true, false),
        builtin("batch", "v1", "jobs", "Job", true, &[], true, false),
        builtin(rbac, "v1", "roles", "Role", true, &[], false, false),
        builtin(
            rbac,
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
            &[],
            false,
            false,
        ),
        builtin(
            rbac,
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
            &[],
            false,
            false,
        ),
        builtin(
            rbac,
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
            &[],
            false,
            false,
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            &[],
            false,
            false,
        ),
        builtin(
            authz,
            "v1",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
            &[],
            false,
            false,
        ),
        builtin(
            authz,
            "v1",
            "selfsubjectrulesreviews",
            "SelfSubjectRulesReview",
            false,
            &[],
            false,
            false,
        ),
        // Validates bound ServiceAccount tokens (`crate::tokens`, F12.7).
        builtin(
            "authentication.k8s.io",
            "v1",
            "tokenreviews",
            "TokenReview",
            false,
            &[],
            false,
            false,
        ),
    ];
    for d in &mut defs {
        // Only objects with a spec the controllers act on carry a generation.
        d.has_generation = d.group == "batch";
    }
    defs
}

/// Kubernetes' version ordering: GA > beta > alpha, higher numbers first.
pub(crate) fn version_priority(v: &str) -> (u8, u32, u32) {
    let rest = v.strip_prefix('v').unwrap_or(v);
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        (3, major, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, major, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, major, n.parse().unwrap_or(0))
    } else {
        (0, major, 0)
    }
}

fn def_from_crd(crd: &Value) -> Option<ResourceDef> {
    let spec = crd.get("spec")?;
    let names = spec.get("names")?;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let strs = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let kind = s(names, "kind")?;
    let mut versions: Vec<VersionDef> = vec![];
    for v in spec.get("versions")?.as_array()? {
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let sub = v.get("subresources");
        let scale = sub.and_then(|s| s.get("scale")).map(|sc| ScalePaths {
            spec_replicas: s(sc, "specReplicasPath").unwrap_or_else(|| ".spec.replicas".into()),
            status_replicas: s(sc, "statusReplicasPath")
                .unwrap_or_else(|| ".status.replicas".into()),
            label_selector: s(sc, "labelSelectorPath"),
        });
        let columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|cols| {
                cols.iter()
                    .map(|c| PrinterColumn {
                        name: s(c, "name").unwrap_or_default(),
                        type_: s(c, "type").unwrap_or_else(|| "string".into()),
                        json_path: s(c, "jsonPath").unwrap_or_default(),
                        description: s(c, "description").unwrap_or_default(),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    })
                    .collect()
            })
            .unwrap_or_default();
        versions.push(VersionDef {
            name: s(v, "name")?,
            status: sub.and_then(|s| s.get("status")).is_some(),
            scale,
            columns,
            schema: v.pointer("/schema/openAPIV3Schema").cloned(),
            deprecated: v
                .get("deprecated")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        });
    }
    if versions.is_empty() {
        return None;
    }
    versions.sort_by_key(|v| std::cmp::Reverse(version_priority(&v.name)));
    Some(ResourceDef {
        group: s(spec, "group")?,
        versions,
        plural: s(names, "plural")?,
        singular: s(names, "singular").unwrap_or_else(|| kind.to_lowercase()),
        list_kind: s(names, "listKind").unwrap_or_else(|| format!("{kind}List")),
        kind,
        namespaced: spec.get("scope").and_then(Value::as_str) != Some("Cluster"),
        short_names: strs(names.get("shortNames")),
        categories: strs(names.get("categories")),
        has_generation: true,
        custom: true,
    })
}

/// Applies the `default`s of a structural schema to an object (what the API server does for
/// custom resources on create and update), recursing into present objects and arrays.
pub(crate) fn apply_schema_defaults(schema: &Value, obj: &mut Value) {
    match obj {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, sub) in props {
                    if !map.contains_key(k)
                        && let Some(d) = sub.get("default")
                    {
                        map.insert(k.clone(), d.clone());
                    }
                    if let Some(child) = map.get_mut(k) {
                        apply_schema_defaults(sub, child);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for it in items {
                    apply_schema_defaults(item_schema, it);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A CRD served in two versions with schema defaults (the Agent Sandbox one).
    fn sandbox_crd() -> Value {
        serde_saphyr::from_str(include_str!(
            "../../../fixtures/crds/sandboxes.agents.x-k8s.io.yaml"
        ))
        .unwrap()
    }

    #[test]
    fn registering_a_crd_serves_both_versions_with_the_storage_version_preferred() {
        let mut r = Resources::builtin();
        r.register_crd(&sandbox_crd());
        let d = r.get("agents.x-k8s.io", "v1alpha1", "sandboxes").unwrap();
        assert_eq!(d.versions[0].name, "v1beta1");
        assert!(d.has_status("v1beta1"));
        assert_eq!(d.version("v1beta1").unwrap().columns.len(), 3);
        let groups = r.groups();
        assert_eq!(
            groups.last().unwrap(),
            &(
                "agents.x-k8s.io".to_string(),
                vec!["v1beta1".into(), "v1alpha1".into()]
            )
        );
    }

    #[test]
    fn schema_defaults_fill_missing_fields_only() {
        let crd = sandbox_crd();
        let schema = crd
            .pointer("/spec/versions/0/schema/openAPIV3Schema")
            .unwrap();
        let mut obj = json!({"spec": {"podTemplate": {}}});
        apply_schema_defaults(schema, &mut obj);
        assert_eq!(obj["spec"]["operatingMode"], "Running");
        let mut obj = json!({"spec": {"operatingMode": "Suspended"}});
        apply_schema_defaults(schema, &mut obj);
        assert_eq!(obj["spec"]["operatingMode"], "Suspended");
    }
}
