//! What one object looked like at one instant: the states the observers record on the
//! timeline and the checks judge. A leaf: it knows nothing of the timeline or the checks, so
//! both (and a check's outcome, which keeps the last states it saw) can name these types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Names an object independently of its incarnation (a replaced pod keeps its ref, not its uid).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.kind, ns, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// Reason of the `Ready` condition of a gateway sandbox state recorded while the gateway could
/// not be reached: the phase is `Unknown`, not the last one seen (a gateway that cannot answer
/// says nothing about the sandbox).
pub const GATEWAY_UNREACHABLE_REASON: &str = "GatewayUnreachable";

/// Reason of the `Ready` condition of a gateway sandbox state recorded for a Ready answer the
/// gateway gave after a fault ended its process, with the resource version its record had
/// then: the record as stored before the fault, which nothing has rewritten since (a new
/// gateway answers from its database until its first driver snapshot rewrites the phase,
/// docs/upstream-facts.md F1.18). Ready means a supervisor session the restart ended (F1.17),
/// so it is no report made after the fault and is recorded as `Unknown`.
pub const STORED_BEFORE_FAULT_REASON: &str = "StoredBeforeFault";

/// Reason of the `Ready` condition of a Kubernetes object state recorded when the watch on its
/// kind lost the API server: like [`GATEWAY_UNREACHABLE_REASON`], the object's state is not
/// known from then until the watch relists, so checks must not go on judging the last one seen.
pub const API_SERVER_UNREACHABLE_REASON: &str = "ApiServerUnreachable";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectState {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ConditionState>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<ContainerState>,
    /// Desired and ready replicas, for workloads such as the gateway StatefulSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Replicas>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Set on the last state of an object that was deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

impl ObjectState {
    /// Equal but for the resourceVersion: a write that changed nothing the timeline shows.
    /// Compared in place (the observers compare every state they see).
    pub(crate) fn same_but_version(&self, other: &Self) -> bool {
        // Destructured so that a new field cannot be left out of the comparison.
        let Self {
            kind,
            namespace,
            name,
            uid,
            resource_version: _,
            phase,
            conditions,
            containers,
            replicas,
            labels,
            deleted,
        } = self;
        *kind == other.kind
            && *namespace == other.namespace
            && *name == other.name
            && *uid == other.uid
            && *phase == other.phase
            && *conditions == other.conditions
            && *containers == other.containers
            && *replicas == other.replicas
            && *labels == other.labels
            && *deleted == other.deleted
    }

    pub fn new(kind: &str, namespace: Option<&str>, name: &str) -> Self {
        Self {
            kind: kind.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            ..Self::default()
        }
    }

    pub fn object_ref(&self) -> ObjectRef {
        ObjectRef {
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    pub fn condition(&self, type_: &str) -> Option<&ConditionState> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// A state recorded because the object could not be observed (the gateway or the
    /// Kubernetes API server was unreachable): its phase is not known, so it is a gap in the
    /// object's history rather than a phase it went through.
    pub fn unobserved(&self) -> bool {
        self.condition(READY_CONDITION).is_some_and(|c| {
            c.status == "Unknown"
                && matches!(
                    c.reason.as_deref(),
                    Some(
                        GATEWAY_UNREACHABLE_REASON
                            | API_SERVER_UNREACHABLE_REASON
                            | STORED_BEFORE_FAULT_REASON
                    )
                )
        })
    }

    /// This gateway sandbox answer as recorded when it is the record the gateway stored before
    /// `fault` ([`STORED_BEFORE_FAULT_REASON`]): phase `Unknown`, its version kept, and a
    /// message saying what the gateway answered, so the timeline shows the stale answer without
    /// any check taking it for a phase the sandbox is in.
    pub fn stored_before_fault(&self, fault: &str) -> ObjectState {
        let mut s = self.unknown(
            STORED_BEFORE_FAULT_REASON,
            format!(
                "the gateway answered {} from its record as stored before the {fault} (resource version {}), not rewritten since",
                self.phase.as_deref().unwrap_or("no phase"),
                self.resource_version.as_deref().unwrap_or("?"),
            ),
        );
        s.resource_version = self.resource_version.clone();
        s
    }

    /// This object with phase `Unknown` and a `Ready` condition of status `Unknown` that says
    /// why (`reason`, `message`): no predicate on its phase, conditions or containers holds.
    fn unknown(&self, reason: &str, message: String) -> ObjectState {
        let mut s = ObjectState::new(&self.kind, self.namespace.as_deref(), &self.name);
        s.phase = Some("Unknown".into());
        s.conditions.push(ConditionState {
            type_: READY_CONDITION.into(),
            status: "Unknown".into(),
            reason: Some(reason.into()),
            message: Some(message),
        });
        s
    }

    /// This object's state while the Kubernetes API server cannot be reached: the same object
    /// (kind, name, uid and labels, so selectors and incarnations are unchanged) with phase
    /// `Unknown`, no containers or replicas, and a `Ready` condition of status `Unknown` saying
    /// why. No predicate on its phase, conditions or containers is satisfied by it.
    pub fn api_unreachable(&self) -> ObjectState {
        let mut s = self.unknown(
            API_SERVER_UNREACHABLE_REASON,
            "the Kubernetes API server could not be reached".into(),
        );
        s.uid = self.uid.clone();
        s.labels = self.labels.clone();
        s
    }

    /// A one-line summary for failure messages: `Pod/ns/name uid=… phase=Failed Ready=False(PodFailed) agent=terminated(1)`.
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        // Written in place: the report summarises every state it draws.
        let mut s = self.object_ref().to_string();
        if let Some(uid) = &self.uid {
            let _ = write!(s, " uid={uid}");
        }
        if self.deleted {
            s.push_str(" deleted");
        }
        if let Some(p) = &self.phase {
            let _ = write!(s, " phase={p}");
        }
        for c in &self.conditions {
            let _ = write!(s, " {}={}", c.type_, c.status);
            if let Some(r) = &c.reason {
                let _ = write!(s, "({r})");
            }
        }
        for c in &self.containers {
            let _ = write!(s, " {}={}", c.name, c.state);
            if let Some(code) = c.exit_code {
                let _ = write!(s, "({code})");
            }
            if let Some(n) = c.restart_count.filter(|n| *n > 0) {
                let _ = write!(s, " restarts={n}");
            }
        }
        if let Some(r) = &self.replicas {
            let _ = write!(s, " replicas={}/{}", r.ready, r.desired);
        }
        s
    }
}

/// The `Ready` condition of pods and Agent Sandbox `Sandbox` resources (a Kubernetes condition
/// type, not the OpenShell phase of the same name).
pub const READY_CONDITION: &str = "Ready";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConditionState {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerState {
    pub name: String,
    /// `waiting`, `running` or `terminated`.
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// None where the source gives no count (the gateway's view of a sandbox's main process):
    /// not known, never 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_count: Option<u32>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replicas {
    pub desired: u32,
    pub ready: u32,
}

/// How an action the harness took ended (or that it started).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionStatus {
    Started,
    Ok,
    /// The system under test refused or failed the action (for example FailedPrecondition).
    Refused,
    /// The harness could not carry the action out (infrastructure).
    Error,
}
