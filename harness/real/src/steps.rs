//! The command plan as data: every step a real run takes (commands, the files it writes, the
//! in-process Kubernetes and gRPC actions). Providers and installers describe their steps with
//! the same constructors they execute; [`crate::plan`] puts a run's plan together.

use std::fmt;
use std::path::PathBuf;

use crate::command::Cmd;

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
