#![warn(unreachable_pub)]
//! The `openshell-conformance` binary's library: the command line, the reports (JUnit and
//! HTML) and `emulate serve`, which wires the kube emulator, the models and the engine.

/// `println!` that never panics. A closed stdout (a pager quit, `| head`, a caller that stopped
/// reading) must not end a run whose cleanup and reports are still to come: the line is dropped.
#[macro_export]
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// `print!` that never panics, for the same reason as [`say!`].
#[macro_export]
macro_rules! put {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), $($t)*);
    }};
}

/// `eprintln!` that never panics, for the same reason as [`say!`].
#[macro_export]
macro_rules! tell {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($t)*);
    }};
}

pub mod cli;
pub mod clock;
#[cfg(unix)]
pub mod early_signals;
pub mod junit;
pub mod report;
pub mod serve;
