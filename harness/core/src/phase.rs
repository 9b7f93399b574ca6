//! The OpenShell sandbox phase: what `openshell sandbox get` prints and what the gateway keeps
//! per sandbox (docs/upstream-facts.md F1.1), plus the two phases the 0.1.x line adds
//! (Completed #2884, Restarting #2798; F9.1, F9.2). Not a Kubernetes pod phase: those stay the API's strings.
//!
//! It serializes as the name the CLI prints, so timelines, stores and reports read the same
//! text they always did; a name this harness does not know (a newer OpenShell) is kept as
//! [`Phase::Other`] rather than refused, and matches no known phase.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// The protocol's zero value: no phase said.
    #[default]
    Unspecified,
    Provisioning,
    Ready,
    Error,
    Deleting,
    Unknown,
    Stopping,
    Stopped,
    Starting,
    /// The main process exited 0 (contract and 0.1.x; #2884).
    Completed,
    /// Waiting to relaunch under the restart policy (0.1.x branch; F9.1).
    Restarting,
    /// A phase name this harness does not know, as printed.
    Other(String),
}

impl Phase {
    /// Every phase the harness knows, in protocol order then the 0.1.x additions.
    pub(crate) const KNOWN: &[Phase] = &[
        Self::Unspecified,
        Self::Provisioning,
        Self::Ready,
        Self::Error,
        Self::Deleting,
        Self::Unknown,
        Self::Stopping,
        Self::Stopped,
        Self::Starting,
        Self::Completed,
        Self::Restarting,
    ];

    /// As the CLI prints it (F1.1 `phase_name`).
    pub fn name(&self) -> &str {
        match self {
            Self::Unspecified => "Unspecified",
            Self::Provisioning => "Provisioning",
            Self::Ready => "Ready",
            Self::Error => "Error",
            Self::Deleting => "Deleting",
            Self::Unknown => "Unknown",
            Self::Stopping => "Stopping",
            Self::Stopped => "Stopped",
            Self::Starting => "Starting",
            Self::Completed => "Completed",
            Self::Restarting => "Restarting",
            Self::Other(name) => name,
        }
    }

    /// The phase a printed name stands for; never fails, see [`Phase::Other`].
    pub fn parse(name: &str) -> Self {
        Self::KNOWN
            .iter()
            .find(|p| p.name() == name)
            .cloned()
            .unwrap_or_else(|| Self::Other(name.to_string()))
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Lets the object-generic checks (which also match pod phases) take sandbox phases.
impl AsRef<str> for Phase {
    fn as_ref(&self) -> &str {
        self.name()
    }
}

impl Serialize for Phase {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Phase {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::parse(&String::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_phase_reads_back_from_the_name_it_prints() {
        for p in Phase::KNOWN {
            assert_eq!(&Phase::parse(p.name()), p);
            let json = serde_json::to_string(p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.name()));
            assert_eq!(&serde_json::from_str::<Phase>(&json).unwrap(), p);
        }
    }

    #[test]
    fn an_unknown_phase_name_is_kept_as_printed_and_is_no_known_phase() {
        let p: Phase = serde_json::from_str("\"Suspending\"").unwrap();
        assert_eq!(p, Phase::Other("Suspending".into()));
        assert_eq!(serde_json::to_string(&p).unwrap(), "\"Suspending\"");
        assert!(!Phase::KNOWN.contains(&p));
    }
}
