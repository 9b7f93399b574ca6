//! The names a scenario gives to what its checks anchor on: its faults and its markers.
//! Declared once, usually as constants beside the scenario, and used both where a step acts and
//! where a check looks, so a renamed or mistyped name fails to compile instead of never
//! matching; the timeline records them as text.

use std::borrow::Cow;

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Cow<'static, str>);

        impl $name {
            pub const fn new(name: &'static str) -> Self {
                Self(Cow::Borrowed(name))
            }

            /// A name made at run time (one per sandbox of a sweep, say).
            pub fn owned(name: String) -> Self {
                Self(Cow::Owned(name))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

name_type!(
    /// One fault of a case: `Ctx::inject` records it under this name, `Ctx::restore` ends it,
    /// and checks anchor on its start and end. Each key is injected at most once per case.
    FaultKey
);

name_type!(
    /// A point in a case's steps (`verified`, `settled`) that checks anchor on.
    Marker
);
