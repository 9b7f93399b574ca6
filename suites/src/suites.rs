//! The conformance catalog: the requirements users asked for (`REQUIREMENTS.md`), the
//! scenarios that verify them, the catalog that expands them into cases, and the expectations
//! of known failures per version.
//!
//! The sources live in `suites/` and are compiled into the harness library as
//! `openshell_conformance::suites` (see `harness/src/lib.rs`), so the `openshell-conformance`
//! binary can run them. The `suites` package itself holds the catalog's proof: the tests that
//! run every scenario on every model and defect, and the benchmark.

pub mod catalog;
pub mod expectations;
pub mod requirements;
pub mod scenarios;
