//! The binary as a person runs it: no `OPENSHELL_CONFORMANCE_*` variable of the caller's
//! environment leaks into it, and its stdout and stderr are read as one text.

use std::path::Path;
use std::process::{Command, Output};

/// The binary, with the caller's `OPENSHELL_CONFORMANCE_*` variables removed: the run's
/// defaults must not depend on who runs the test.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_openshell-conformance"));
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENSHELL_CONFORMANCE_") {
            c.env_remove(k);
        }
    }
    c
}

/// Runs the binary with `args` in `dir`.
pub fn run(args: &[&str], dir: &Path) -> Output {
    bin()
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the binary runs")
}

/// stdout then stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The child's stdout lines up to the first that contains `marker`, waiting at most `within`
/// for each. The reader thread ends with the child's stdout.
// Not every test binary that includes this module reads a line stream.
#[allow(dead_code)]
pub fn lines_until(
    child: &mut std::process::Child,
    marker: &str,
    within: std::time::Duration,
) -> Vec<String> {
    use std::io::{BufRead, BufReader};
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    while let Ok(line) = rx.recv_timeout(within) {
        let done = line.contains(marker);
        seen.push(line);
        if done {
            break;
        }
    }
    seen
}
