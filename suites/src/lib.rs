//! The conformance catalog: the requirements users asked for and the scenarios that verify them.

pub mod requirements;
