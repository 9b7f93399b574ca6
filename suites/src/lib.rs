#![warn(unreachable_pub)]
//! The conformance catalog: the requirements users asked for (`REQUIREMENTS.md`), the
//! scenarios that verify them, the catalog that expands them into cases, and the expectations
//! of known failures per version. It depends on the harness core only; its proof (`tests/`)
//! runs every scenario on every model and defect of `conformance-models`.

pub mod catalog;
pub mod expectations;
pub mod requirements;
mod scenarios;
