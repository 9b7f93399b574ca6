//! The scenarios, one file each. Each is data (id, title, requirements, capabilities, checks)
//! plus small step functions, and runs unchanged on every target and topology; its file also
//! says which parameter variants the catalog runs it with (its `entry`). What several scenarios
//! share is in `common`.
//!
//! This file is the catalog's listing: a new scenario is its own file here plus its `mod` line
//! and its line in [`entries`].

pub(crate) mod common;

mod bootstrap_outage;
mod completed_workload;
mod error_recovery;
mod gateway_outage;
mod gateway_restart;
mod permanent_bootstrap_error;
mod provisioning;
mod restart_policy_always;
pub(crate) mod seeded_sweep;
mod stopped_through_outage;
mod supervisor_restart;

use common::Entry;

/// Every scenario with its default variants, in catalog order: the order in which cases run
/// and reports list them.
pub(crate) fn entries() -> Vec<Entry> {
    vec![
        provisioning::entry(),
        bootstrap_outage::entry(),
        permanent_bootstrap_error::entry(),
        gateway_restart::entry(),
        gateway_outage::entry(),
        stopped_through_outage::entry(),
        completed_workload::entry(),
        error_recovery::entry(),
        restart_policy_always::entry(),
        supervisor_restart::entry(),
        seeded_sweep::entry(),
    ]
}
