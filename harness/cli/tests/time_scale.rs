//! `--time-scale N` as a person uses it: what the command line refuses before anything starts,
//! and the clock a served cluster runs on (docs/architecture.md, "The scaled clock").

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

#[path = "common/binary.rs"]
mod binary;

use binary::{bin, lines_until, run, text};

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// Debian's library, as the harness looks for it; `None` (a skip, a failure in CI) without it.
fn libfaketime(test: &str) -> Option<PathBuf> {
    let path = Path::new("/usr/lib")
        .join(format!("{}-linux-gnu", std::env::consts::ARCH))
        .join("faketime/libfaketimeMT.so.1");
    if path.is_file() {
        return Some(path);
    }
    assert!(
        !conformance_testtools::in_ci(),
        "{test}: Debian's libfaketime is missing; .ci/run installs it"
    );
    eprintln!(
        "SKIPPED {test}: no {} (apt-get install libfaketime)",
        path.display()
    );
    None
}

#[test]
fn a_time_scale_that_is_not_a_whole_number_from_1_to_1000_exits_2_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["0", "-2", "ten", "2.5", "1001", "18446744073709551617"] {
        let o = run(
            &[
                "run",
                "--target",
                "served",
                "--artifacts",
                "a",
                &format!("--time-scale={bad}"),
            ],
            dir.path(),
        );
        assert_eq!(code(&o), 2, "--time-scale {bad}: {}", text(&o));
        assert!(
            text(&o).contains("1 (real time) to 1000"),
            "--time-scale {bad} is refused saying what to give: {}",
            text(&o)
        );
        let o = run(
            &["emulate", "serve", &format!("--time-scale={bad}")],
            dir.path(),
        );
        assert_eq!(
            code(&o),
            2,
            "emulate serve --time-scale {bad}: {}",
            text(&o)
        );
    }
    let o = bin()
        .args(["run", "--target", "served", "--artifacts", "a"])
        .env("OPENSHELL_CONFORMANCE_TIME_SCALE", "0")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "from the environment: {}", text(&o));
    assert!(!dir.path().join("a").exists(), "nothing started");
}

#[test]
fn a_time_scale_above_1_on_a_target_other_than_served_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &["run", "--time-scale", "10", "--artifacts", "a"],
        dir.path(),
    );
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("needs --target served"), "{}", text(&o));
    assert!(!dir.path().join("a").exists(), "nothing started");
}

#[test]
fn a_time_scale_above_1_without_libfaketime_exits_3_naming_the_debian_package() {
    let dir = tempfile::tempdir().unwrap();
    let o = bin()
        .args([
            "run",
            "--target",
            "served",
            "--time-scale",
            "10",
            "--artifacts",
            "a",
        ])
        .env(
            "OPENSHELL_CONFORMANCE_LIBFAKETIME",
            dir.path().join("absent.so"),
        )
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(
        text(&o).contains("install Debian's package `libfaketime`"),
        "{}",
        text(&o)
    );
    assert!(!dir.path().join("a").exists(), "nothing started");
}

/// The shared reference's two names in /dev/shm for the harness of process `pid`.
fn reference_of(pid: u32) -> [PathBuf; 2] {
    [
        PathBuf::from(format!("/dev/shm/openshell-conformance-clock-{pid}")),
        PathBuf::from(format!(
            "/dev/shm/sem.openshell-conformance-clock-sem-{pid}"
        )),
    ]
}

#[test]
fn the_served_cluster_runs_on_one_clock_every_user_can_read_with_no_wrapper_typed() {
    let test = "the_served_cluster_runs_on_one_clock_every_user_can_read_with_no_wrapper_typed";
    let Some(_) = libfaketime(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut child = bin()
        .args([
            "emulate",
            "serve",
            "--time-scale",
            "10",
            "--kubeconfig-out",
            "kc",
        ])
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let seen = lines_until(&mut child, "listening on", Duration::from_secs(60));
    let running = child.try_wait().unwrap().is_none();
    // The process the user started is the one on the clock: re-executed in place, same id.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let modes: Vec<Option<u32>> = reference_of(pid)
        .iter()
        .map(|p| {
            std::fs::metadata(p)
                .ok()
                .map(|m| m.permissions().mode() & 0o777)
        })
        .collect();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    let all = format!(
        "{}\n{}",
        seen.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(running, "it exited: {all}");
    let environ: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
    assert!(
        environ.contains(&&b"FAKETIME=+0 x10"[..]),
        "the served process runs at x10: {all}"
    );
    assert!(
        maps.contains("libfaketimeMT.so.1"),
        "libfaketime is loaded: {all}"
    );
    assert_eq!(
        modes,
        [Some(0o666), Some(0o666)],
        "the shared reference is there for every user's processes: {all}"
    );
    assert_eq!(out.status.code(), Some(0), "stopped by SIGTERM: {all}");
    for name in reference_of(pid) {
        assert!(!name.exists(), "{} outlived its harness", name.display());
    }
}
