//! The scenarios. Each is data (id, title, requirements, capabilities, checks) plus small step
//! functions, and runs unchanged on every target and topology.

pub(crate) mod common;
pub(crate) mod lifecycle;
pub(crate) mod outages;
pub(crate) mod sweep;
