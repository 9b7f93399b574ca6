//! The scenarios. Each is data (id, title, requirements, capabilities, checks) plus small step
//! functions, and runs unchanged on every target and topology.

pub mod common;
pub mod lifecycle;
pub mod outages;
pub mod sweep;
