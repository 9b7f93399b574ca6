//! The harness core: what a conformance case is and how it runs, with no Kubernetes client.
//!
//! The flow is scenario → engine → target → timeline → checks: a [`scenario`] declares steps,
//! faults and checks; the [`engine`] runs each case against a [`target::Target`] (emulated
//! or real), records everything on a [`timeline`], restores every fault, and judges the
//! timeline with [`checks`].
//!
//! # Where to start
//!
//! - Writing a scenario: [`scenario::Scenario`] and the [`scenario::Ctx`] its steps act
//!   through; name its faults and markers with [`keys`], state its checks with
//!   [`checks::Check`] (the vocabulary: anchors, windows, selectors, predicates).
//! - Running cases: [`engine::Engine`] runs one case, [`pool`] runs many (virtual time or a
//!   shared real cluster); [`engine::CaseReport`] and [`engine::Outcome`] are what comes back,
//!   and [`case_verdict::CaseVerdict`] is the one verdict every report gives it.
//! - Adding a target: implement [`target::Target`] and [`target::TargetFactory`]; what a fault
//!   does in Kubernetes terms is decided once in [`effect`], which both targets carry out.
//! - Reading a run: [`timeline::Timeline`] (JSON lines, re-checkable offline with
//!   [`engine::recheck`]); [`checks`] evaluates a check plan over it.
//! - Topologies (where a sandbox's parts run) are data: [`topology::Topologies::builtin`]
//!   compiles every `fixtures/topologies/*.yaml`.
//! - Errors: [`error::Error`] ends a command with an [`error::ExitStatus`];
//!   [`target::TargetError`] is a target call's failure; [`scenario::StepError`] stops a step.
//! - Test doubles (a scripted target, sample scenarios) are in `testkit`, behind the `testkit`
//!   feature that tests enable in their `[dev-dependencies]`.
//!
//! Layering inside the crate, from the bottom: the check vocabulary as data and the object
//! states it speaks of are leaves, the [`timeline`] stores them, [`checks`] evaluates them over
//! the timeline, and the [`scenario`], [`engine`] and [`pool`] sit on top.

#![warn(unreachable_pub)]

pub mod case_verdict;
pub mod checks;
pub mod clock;
pub mod effect;
pub mod engine;
pub mod error;
pub mod keys;
pub mod phase;
pub mod pool;
mod record;
pub mod release;
pub mod retries;
pub mod scenario;
pub mod schedule;
pub mod target;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod timeline;
pub mod topology;
pub mod user_file;
mod verdict;
