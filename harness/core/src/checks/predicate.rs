//! Predicates evaluated over the state of the world at one instant of a timeline.

use crate::record::ObjectState;
use crate::timeline::World;
use crate::verdict::{Predicate, Selector};

impl Selector {
    /// Live objects this selector matches.
    pub fn live<'w>(&self, world: &'w World) -> Vec<&'w ObjectState> {
        world.live().filter(|o| self.matches(o)).collect()
    }
}

impl Predicate {
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
}
