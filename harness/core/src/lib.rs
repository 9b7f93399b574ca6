//! The harness core: what a conformance case is and how it runs, with no Kubernetes client.
//!
//! The flow is scenario → engine → target → timeline → checks: a [`scenario`] declares steps,
//! faults and checks; the [`engine`] runs each case against a [`target::Target`] (emulated
//! or real), records everything on a [`timeline`], restores every fault, and judges the
//! timeline with [`checks`].

pub mod checks;
pub mod effect;
pub mod engine;
pub mod error;
pub mod keys;
pub mod phase;
pub mod pool;
mod record;
pub mod scenario;
pub mod schedule;
pub mod target;
pub mod testkit;
pub mod timeline;
pub mod topology;
mod verdict;
