//! The command plan: every step a real run takes, as data. Providers and installers describe
//! their steps with the same constructors they execute, so `run --dry-run` prints exactly what a
//! run would do (commands, the files it writes, the in-process Kubernetes actions) without
//! touching anything, and golden tests pin it.

use std::fmt;
use std::path::PathBuf;

use super::{cluster, install, interlock, leftovers};
use crate::command::Cmd;
use crate::options::RealOptions;
use conformance_core::error::Result;
use conformance_core::topology::Topology;

/// One step of a plan.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// An external command. `when` says under which condition it runs (for example "if the
    /// cluster does not exist yet"); None means always.
    Run { cmd: Cmd, when: Option<String> },
    /// A file the harness writes (helm values, CLI configuration), with its contents.
    Write { path: PathBuf, contents: String },
    /// Something done in-process through the Kubernetes API (kube-rs).
    Kube { action: String },
    /// Something done in-process through the gateway's gRPC API (the harness's own client,
    /// which only observes).
    Grpc { action: String },
}

impl Step {
    pub fn run(cmd: Cmd) -> Self {
        Self::Run { cmd, when: None }
    }

    pub(crate) fn run_when(cmd: Cmd, when: &str) -> Self {
        Self::Run {
            cmd,
            when: Some(when.to_string()),
        }
    }

    pub fn kube(action: impl Into<String>) -> Self {
        Self::Kube {
            action: action.into(),
        }
    }

    pub(crate) fn grpc(action: impl Into<String>) -> Self {
        Self::Grpc {
            action: action.into(),
        }
    }
}

/// A named group of steps.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    pub name: String,
    pub steps: Vec<Step>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Lines printed before the stages (target, context, why the context is allowed).
    pub header: Vec<String>,
    pub stages: Vec<Stage>,
}

impl Plan {
    pub fn stage(&mut self, name: impl Into<String>, steps: Vec<Step>) {
        self.stages.push(Stage {
            name: name.into(),
            steps,
        });
    }

    /// Every command of the plan, in order.
    pub fn commands(&self) -> Vec<&Cmd> {
        self.stages
            .iter()
            .flat_map(|s| &s.steps)
            .filter_map(|s| match s {
                Step::Run { cmd, .. } => Some(cmd),
                _ => None,
            })
            .collect()
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for h in &self.header {
            writeln!(f, "# {h}")?;
        }
        for stage in &self.stages {
            writeln!(f)?;
            writeln!(f, "== {} ==", stage.name)?;
            for step in &stage.steps {
                match step {
                    Step::Run { cmd, when: None } => writeln!(f, "$ {}", cmd.line())?,
                    Step::Run { cmd, when: Some(w) } => writeln!(f, "$ {}    # {w}", cmd.line())?,
                    Step::Kube { action } => writeln!(f, "kube: {action}")?,
                    Step::Grpc { action } => writeln!(f, "grpc: {action}")?,
                    Step::Write { path, contents } => {
                        writeln!(f, "write {}:", path.display())?;
                        for line in contents.lines() {
                            writeln!(f, "  | {line}")?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

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
