#![warn(unreachable_pub)]
//! The `openshell-conformance` binary's library: the command line, the reports (JUnit and
//! HTML) and `emulate serve`, which wires the kube emulator, the models and the engine.

pub mod cli;
pub mod clock;
pub mod junit;
pub mod report;
pub mod serve;
