//! How the gateway derives a sandbox's [`Phase`] (docs/upstream-facts.md F1.1, F1.3-F1.6).

use conformance_core::phase::Phase;
use conformance_core::timeline::READY_CONDITION;
use kube_emulator::Pointer;
use serde_json::Value;

/// Driver snapshots never move a sandbox out of these (F1.6 "Error is sticky"; Completed is
/// terminal by R7).
pub(crate) fn sticky(phase: &Phase) -> bool {
    matches!(phase, Phase::Error | Phase::Completed)
}

/// Ready reasons that keep a sandbox Provisioning (F1.4, mod.rs L4049-4063); plus the
/// `ConfigurationPending` of the 0.1.x topologies (field report).
pub(crate) const TRANSIENT_REASONS: &[&str] = &[
    "ReconcilerError",
    "DependenciesNotReady",
    "SupervisorNotConnected",
    "Starting",
    "ContainerStarting",
    "ContainerCreated",
    "HealthCheckStarting",
    "InspectFailed",
    "ConfigurationPending",
];

pub(crate) fn is_transient(reason: &str) -> bool {
    TRANSIENT_REASONS.contains(&reason)
}

/// What the driver reports of one Sandbox CR (`status_from_object`, F3.9).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub deleting: bool,
    /// `Suspended=True` while `spec.operatingMode` asks for it (a stale `Suspended=True` after a
    /// resume is ignored, the fix of #2858/#2932).
    pub suspended: bool,
    /// The CR's Ready condition: (status, reason, message).
    pub ready: Option<(String, String, String)>,
    pub has_status: bool,
    /// The Ready condition was written for the current spec generation (a resume's first
    /// snapshots may still carry the suspended pod's conditions).
    pub fresh: bool,
}

impl Snapshot {
    pub(crate) fn from_cr(cr: &Value) -> Self {
        let conds = cr
            .at("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let cond = |t: &str| {
            conds
                .iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(t))
                .map(|c| {
                    let f = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    (f("status"), f("reason"), f("message"))
                })
        };
        let wants_suspend =
            cr.at("/spec/operatingMode").and_then(Value::as_str) == Some("Suspended");
        let generation = cr.at("/metadata/generation").and_then(Value::as_i64);
        let observed = conds
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(READY_CONDITION))
            .and_then(|c| c.get("observedGeneration"))
            .and_then(Value::as_i64);
        Self {
            fresh: match (generation, observed) {
                (Some(g), Some(o)) => o >= g,
                _ => true,
            },
            deleting: cr.at("/metadata/deletionTimestamp").is_some(),
            suspended: wants_suspend && cond("Suspended").is_some_and(|c| c.0 == "True"),
            ready: cond(READY_CONDITION),
            has_status: cr.get("status").is_some_and(|s| !s.is_null()),
        }
    }
}

/// `derive_phase` (F1.3, mod.rs L3978-4010): the backend's own view, before sessions.
pub(crate) fn derive_phase(s: &Snapshot) -> (Phase, Option<String>, Option<String>) {
    if s.deleting {
        return (Phase::Deleting, None, None);
    }
    if s.suspended {
        return (Phase::Stopped, Some("Stopped".into()), None);
    }
    match &s.ready {
        Some((status, reason, message)) if status == "True" => {
            (Phase::Ready, Some(reason.clone()), Some(message.clone()))
        }
        Some((_, reason, message)) if is_transient(reason) => (
            Phase::Provisioning,
            Some(reason.clone()),
            Some(message.clone()),
        ),
        Some((_, reason, message)) => (Phase::Error, Some(reason.clone()), Some(message.clone())),
        None if s.has_status => (Phase::Provisioning, None, None),
        None => (Phase::Unknown, None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cr(conds: Value) -> Value {
        json!({"spec": {"operatingMode": "Running"}, "status": {"conditions": conds}})
    }

    #[test]
    fn v050_failed_pod_is_provisioning_and_v051_is_error() {
        let v050 = cr(json!([
            {"type": "Ready", "status": "False", "reason": "DependenciesNotReady", "message": "Pod exists with phase: Failed"},
            {"type": "Finished", "status": "True", "reason": "PodFailed"}]));
        assert_eq!(
            derive_phase(&Snapshot::from_cr(&v050)).0,
            Phase::Provisioning
        );
        let v051 = cr(
            json!([{"type": "Ready", "status": "False", "reason": "PodFailed", "message": "Pod failed"}]),
        );
        assert_eq!(derive_phase(&Snapshot::from_cr(&v051)).0, Phase::Error);
    }

    #[test]
    fn suspension_counts_only_while_asked_for() {
        let mut c = cr(json!([
            {"type": "Ready", "status": "True", "reason": "DependenciesReady"},
            {"type": "Suspended", "status": "True", "reason": "PodTerminated"}]));
        assert_eq!(derive_phase(&Snapshot::from_cr(&c)).0, Phase::Ready);
        c["spec"]["operatingMode"] = json!("Suspended");
        assert_eq!(derive_phase(&Snapshot::from_cr(&c)).0, Phase::Stopped);
    }
}
