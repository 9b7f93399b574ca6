//! The command plan of a run: every step a real run takes, as data ([`Step`]s, from every
//! provider and installer). Providers and installers describe their steps with the same
//! constructors they execute, so `run --dry-run` prints exactly what a
//! run would do (commands, the files it writes, the in-process Kubernetes actions) without
//! touching anything, and golden tests pin it.

use crate::options::RealOptions;
use crate::{cluster, install, interlock, leftovers};
use conformance_core::error::Result;
use conformance_core::topology::Topology;

pub use crate::steps::{Plan, Stage, Step};

/// The full plan of `run --target <provider>` for these topologies, computed from the options
/// alone: nothing is run, read from a cluster or written.
pub fn dry_run(opts: &RealOptions, topologies: &[&Topology]) -> Result<Plan> {
    let allowed = interlock::check(&opts.context, &opts.allow_contexts)?;
    let provider = cluster::provider(opts);
    let mut plan = Plan::default();
    plan.header.push(format!(
        "openshell-conformance run --target {} --dry-run (run id {})",
        opts.provider.name(),
        opts.run_id
    ));
    plan.header.push(format!(
        "context {}: faults allowed because {allowed}",
        opts.context
    ));
    plan.header.push(format!(
        "chart {}, Agent Sandbox {}",
        install::chart_label(opts),
        opts.agent_sandbox.version()
    ));
    plan.stage("cluster", provider.up_plan());
    if !opts.load_images.is_empty() {
        plan.stage("images", provider.load_images_plan(&opts.load_images)?);
    }
    plan.stage("leftovers", leftovers::plan(opts));
    plan.stage("agent-sandbox", install::agent_sandbox_plan(opts));
    for t in topologies {
        // A topology the chart cannot run is skipped, as the run skips its cases, with the reason.
        if let Some(why) = opts.topology_skip_reason(t)? {
            plan.header.push(format!("skipped: {why}"));
            continue;
        }
        let inst = install::Install::new(opts, t)?;
        plan.stage(format!("openshell [{}]", t.name), inst.plan());
        plan.stage(
            format!("gateway access [{}]", t.name),
            crate::target::access_plan(opts, inst.tls, &t.name),
        );
        plan.stage(
            format!("observe [{}]", t.name),
            crate::target::observe_plan(opts, &t.name),
        );
        plan.stage(format!("teardown [{}]", t.name), inst.teardown_plan());
    }
    Ok(plan)
}
