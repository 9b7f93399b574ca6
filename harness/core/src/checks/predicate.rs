//! Predicates over the state of the world at one instant of a timeline.

use serde::{Deserialize, Serialize};

use crate::timeline::{ObjectState, World};

/// Selects objects by kind and optionally namespace, exact name, name prefix and labels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selector {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<(String, String)>,
}

impl Selector {
    pub fn kind(kind: &str) -> Self {
        Self {
            kind: kind.to_string(),
            ..Self::default()
        }
    }

    pub fn named(kind: &str, name: &str) -> Self {
        Self {
            kind: kind.to_string(),
            name: Some(name.to_string()),
            ..Self::default()
        }
    }

    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.labels.push((key.to_string(), value.to_string()));
        self
    }

    pub fn with_prefix(mut self, prefix: &str) -> Self {
        self.name_prefix = Some(prefix.to_string());
        self
    }

    pub fn matches(&self, o: &ObjectState) -> bool {
        o.kind == self.kind
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| o.namespace.as_ref() == Some(ns))
            && self.name.as_ref().is_none_or(|n| &o.name == n)
            && self
                .name_prefix
                .as_ref()
                .is_none_or(|p| o.name.starts_with(p.as_str()))
            && self.labels.iter().all(|(k, v)| o.labels.get(k) == Some(v))
    }

    /// Live objects this selector matches.
    pub fn live<'w>(&self, world: &'w World) -> Vec<&'w ObjectState> {
        world.live().filter(|o| self.matches(o)).collect()
    }
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if let Some(n) = &self.name {
            write!(f, " {n}")?;
        }
        if let Some(p) = &self.name_prefix {
            write!(f, " {p}*")?;
        }
        for (k, v) in &self.labels {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// A statement about the world at one instant. Statements about an object (phase, condition,
/// container) hold when at least one live object matches and every matching live object
/// satisfies them, so "the sandbox is Ready" is false while the sandbox does not exist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "is", rename_all = "snake_case")]
pub enum Predicate {
    Phase {
        object: Selector,
        any_of: Vec<String>,
    },
    Condition {
        object: Selector,
        #[serde(rename = "type")]
        type_: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The condition's reason or message mentions one of the words (case-insensitive): the
    /// reported status names the cause.
    ConditionMentions {
        object: Selector,
        #[serde(rename = "type")]
        type_: String,
        any_of: Vec<String>,
    },
    /// A container of the object has terminated (with the given exit code, if set).
    ContainerTerminated {
        object: Selector,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        container: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
    /// Some container of the object restarted more than `max` times.
    RestartsAbove {
        object: Selector,
        max: u32,
    },
    /// At least one live object matches.
    Exists {
        object: Selector,
    },
    /// No live object matches.
    Absent {
        object: Selector,
    },
    Not {
        predicate: Box<Predicate>,
    },
    All {
        predicates: Vec<Predicate>,
    },
    Any {
        predicates: Vec<Predicate>,
    },
}

impl Predicate {
    /// The object's phase is one of `phases`: a sandbox's [`crate::phase::Phase`]s or, for a
    /// Kubernetes object, its phase names.
    pub fn phase<P: AsRef<str>>(object: Selector, phases: &[P]) -> Self {
        Self::Phase {
            object,
            any_of: phases.iter().map(|p| p.as_ref().to_string()).collect(),
        }
    }

    pub fn negate(self) -> Self {
        Self::Not {
            predicate: Box::new(self),
        }
    }

    pub fn holds(&self, world: &World) -> bool {
        let every = |object: &Selector, f: &dyn Fn(&ObjectState) -> bool| {
            let live = object.live(world);
            !live.is_empty() && live.into_iter().all(f)
        };
        match self {
            Self::Phase { object, any_of } => every(object, &|o| {
                o.phase.as_ref().is_some_and(|p| any_of.contains(p))
            }),
            Self::Condition {
                object,
                type_,
                status,
                reason,
            } => every(object, &|o| {
                o.condition(type_).is_some_and(|c| {
                    status.as_ref().is_none_or(|s| &c.status == s)
                        && reason.as_ref().is_none_or(|r| c.reason.as_ref() == Some(r))
                })
            }),
            Self::ConditionMentions {
                object,
                type_,
                any_of,
            } => every(object, &|o| {
                o.condition(type_).is_some_and(|c| {
                    let text = format!(
                        "{} {}",
                        c.reason.as_deref().unwrap_or(""),
                        c.message.as_deref().unwrap_or("")
                    )
                    .to_lowercase();
                    any_of.iter().any(|w| text.contains(&w.to_lowercase()))
                })
            }),
            Self::ContainerTerminated {
                object,
                container,
                exit_code,
            } => every(object, &|o| {
                o.containers.iter().any(|c| {
                    container.as_ref().is_none_or(|n| &c.name == n)
                        && c.state == "terminated"
                        && exit_code.is_none_or(|code| c.exit_code == Some(code))
                })
            }),
            Self::RestartsAbove { object, max } => object.live(world).iter().any(|o| {
                o.containers
                    .iter()
                    .any(|c| c.restart_count.is_some_and(|n| n > *max))
            }),
            Self::Exists { object } => !object.live(world).is_empty(),
            Self::Absent { object } => object.live(world).is_empty(),
            Self::Not { predicate } => !predicate.holds(world),
            Self::All { predicates } => predicates.iter().all(|p| p.holds(world)),
            Self::Any { predicates } => predicates.iter().any(|p| p.holds(world)),
        }
    }

    /// The selectors this predicate looks at, for reporting the last states seen.
    pub fn selectors(&self) -> Vec<&Selector> {
        match self {
            Self::Phase { object, .. }
            | Self::Condition { object, .. }
            | Self::ConditionMentions { object, .. }
            | Self::ContainerTerminated { object, .. }
            | Self::RestartsAbove { object, .. }
            | Self::Exists { object }
            | Self::Absent { object } => vec![object],
            Self::Not { predicate } => predicate.selectors(),
            Self::All { predicates } | Self::Any { predicates } => {
                predicates.iter().flat_map(|p| p.selectors()).collect()
            }
        }
    }
}

impl std::fmt::Display for Predicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Phase { object, any_of } => {
                write!(f, "{object} phase in [{}]", any_of.join(", "))
            }
            Self::Condition {
                object,
                type_,
                status,
                reason,
            } => {
                write!(f, "{object} condition {type_}")?;
                if let Some(s) = status {
                    write!(f, "={s}")?;
                }
                if let Some(r) = reason {
                    write!(f, " reason {r}")?;
                }
                Ok(())
            }
            Self::ConditionMentions {
                object,
                type_,
                any_of,
            } => write!(
                f,
                "{object} condition {type_} names one of [{}]",
                any_of.join(", ")
            ),
            Self::ContainerTerminated {
                object,
                container,
                exit_code,
            } => {
                write!(
                    f,
                    "{object} container {} terminated",
                    container.as_deref().unwrap_or("*")
                )?;
                if let Some(c) = exit_code {
                    write!(f, " with exit code {c}")?;
                }
                Ok(())
            }
            Self::RestartsAbove { object, max } => {
                write!(
                    f,
                    "{object} has a container restarted more than {max} times"
                )
            }
            Self::Exists { object } => write!(f, "{object} exists"),
            Self::Absent { object } => write!(f, "no {object} exists"),
            Self::Not { predicate } => write!(f, "not ({predicate})"),
            Self::All { predicates } => write!(f, "{}", join(predicates, " and ")),
            Self::Any { predicates } => write!(f, "{}", join(predicates, " or ")),
        }
    }
}

fn join(ps: &[Predicate], sep: &str) -> String {
    ps.iter()
        .map(|p| format!("({p})"))
        .collect::<Vec<_>>()
        .join(sep)
}
