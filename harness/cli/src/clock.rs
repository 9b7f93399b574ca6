//! `--time-scale N`: the harness, the served cluster, the `openshell` CLI and every process the
//! node starts run on one clock N times as fast as the real one (docs/architecture.md, "The
//! scaled clock").
//!
//! The clock is Debian's libfaketime, its multi-threaded library (tokio is), with `+0 xN`: no
//! offset, N times the speed. What makes it *one* clock is the shared reference: a POSIX
//! semaphore and a shared-memory object naming the real instant the scaled clock started from,
//! which every process that loads libfaketime reads (docs/upstream-facts.md F13.2). The
//! `faketime` wrapper would make them mode 0600, and a pod process of another user (the chart
//! runs the gateway as 1000) then silently starts a clock of its own; so the harness makes
//! them itself, readable and writable by every user, and re-executes itself with the library
//! preloaded: the user types no wrapper, and the process id (which signals and tests use)
//! stays the same.
//!
//! Scale 1 is real time and touches none of this.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use conformance_core::error::Error;

/// The largest scale `--time-scale` takes. The clock is only worth having while real-time
/// latencies (process starts, TLS, a CLI's round trip: tens of milliseconds) stay well below
/// the catalog's tightest bounds (5 s) once scaled; ×1000 is past that edge already.
pub const MAX_SCALE: u32 = 1000;

/// `--time-scale`'s value: a whole number from 1 to [`MAX_SCALE`].
pub fn parse_scale(s: &str) -> Result<u32, String> {
    let n: u32 = s.trim().parse().map_err(|_| {
        format!("'{s}' is not a time scale; give a whole number from 1 (real time) to {MAX_SCALE}")
    })?;
    if n == 0 || n > MAX_SCALE {
        return Err(format!(
            "'{s}' is outside the time scales the clock can keep; give 1 (real time) to {MAX_SCALE}"
        ));
    }
    Ok(n)
}

/// Set on the re-executed harness: the scale it was started on the clock at.
pub const ON_CLOCK_VAR: &str = "OPENSHELL_CONFORMANCE_ON_CLOCK";
/// Where libfaketime's multi-threaded library is, when not in Debian's place.
pub const LIBRARY_VAR: &str = "OPENSHELL_CONFORMANCE_LIBFAKETIME";
/// The Debian package that has the library.
pub const PACKAGE: &str = "libfaketime";
/// The library's file name (the multi-threaded one: tokio's threads read the clock at once).
const LIBRARY: &str = "libfaketimeMT.so.1";
/// The start of the shared reference's names; the process id follows (a later run removes
/// what a SIGKILLed one left, [`sweep`]).
const SHM_PREFIX: &str = "openshell-conformance-clock-";
const SEM_PREFIX: &str = "openshell-conformance-clock-sem-";
/// Where glibc keeps POSIX shared memory and semaphores (`sem.` + the semaphore's name).
const SHM_DIR: &str = "/dev/shm";

/// Where Debian installs the library for this machine's architecture.
fn debian_library() -> PathBuf {
    Path::new("/usr/lib")
        .join(format!("{}-linux-gnu", std::env::consts::ARCH))
        .join("faketime")
        .join(LIBRARY)
}

/// The library to preload: `$OPENSHELL_CONFORMANCE_LIBFAKETIME`, else Debian's.
fn library() -> Result<PathBuf, Error> {
    let path = std::env::var_os(LIBRARY_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(debian_library);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::infra(format!(
            "--time-scale above 1 runs everything on libfaketime's multi-threaded library, which is not at {}: install Debian's package `{PACKAGE}` (apt-get install {PACKAGE}), or name the library with {LIBRARY_VAR}",
            path.display()
        )))
    }
}

/// Puts this process on a clock `scale` times as fast, or says why it cannot (exit 3).
///
/// At scale 1 it does nothing. Otherwise, on the first call it makes the shared reference and
/// replaces this process by itself with libfaketime preloaded (it does not return); in the
/// re-executed process it checks that the library is loaded and records the scale. Call it
/// before any thread starts: the re-execution starts the process over.
pub fn enter(scale: u32) -> Result<(), Error> {
    if scale <= 1 {
        return Ok(());
    }
    if let Some(on) = std::env::var_os(ON_CLOCK_VAR) {
        if on.as_bytes() != scale.to_string().as_bytes() {
            return Err(Error::usage(format!(
                "this process already runs on a clock at scale {}; it cannot also run at {scale}",
                on.to_string_lossy()
            )));
        }
        if !library_loaded() {
            return Err(Error::infra(format!(
                "re-executed onto the scaled clock, but libfaketime is not loaded (LD_PRELOAD={:?}); the dynamic loader refused it",
                std::env::var_os("LD_PRELOAD").unwrap_or_default()
            )));
        }
        conformance_core::clock::set_scale(scale);
        return Ok(());
    }
    let library = library()?;
    sweep();
    let reference = Reference::create()?;
    let mut preload = OsString::from(library.as_os_str());
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_default();
    let err = std::process::Command::new("/proc/self/exe")
        .arg0(argv0)
        .args(args)
        .env("LD_PRELOAD", preload)
        .envs(clock_env(scale, &reference))
        .env(ON_CLOCK_VAR, scale.to_string())
        .exec();
    reference.remove();
    Err(Error::infra_from(
        "cannot re-execute the harness onto the scaled clock",
        err,
    ))
}

/// The variables libfaketime reads, besides `LD_PRELOAD` (docs/upstream-facts.md F13.2, F13.3).
fn clock_env(scale: u32, reference: &Reference) -> Vec<(&'static str, String)> {
    vec![
        // No offset, `scale` times the speed, from the shared start.
        ("FAKETIME", format!("+0 x{scale}")),
        (
            "FAKETIME_SHARED",
            format!("/{} /{}", reference.sem, reference.shm),
        ),
        // Nothing compares file times, and its `stat` takes a lock a forked child may find held.
        ("NO_FAKE_STAT", "1".into()),
    ]
}

/// Whether libfaketime is mapped into this process.
fn library_loaded() -> bool {
    std::fs::read_to_string("/proc/self/maps").is_ok_and(|maps| maps.contains(LIBRARY))
}

/// The shared reference: a semaphore and a shared-memory object, both named with this
/// process's id.
struct Reference {
    sem: String,
    shm: String,
}

impl Reference {
    fn create() -> Result<Self, Error> {
        let pid = std::process::id();
        let r = Reference {
            sem: format!("{SEM_PREFIX}{pid}"),
            shm: format!("{SHM_PREFIX}{pid}"),
        };
        // A name a killed process of the same id left behind.
        r.remove();
        r.make().inspect_err(|_| r.remove())?;
        Ok(r)
    }

    fn make(&self) -> Result<(), Error> {
        let machine = |what: String| move |e| Error::infra_from(what, e);
        let every_user: std::fs::Permissions = std::os::unix::fs::PermissionsExt::from_mode(0o666);
        let sem = cname(&self.sem)?;
        // SAFETY: a NUL-terminated name; mode and initial value as sem_open(3) takes them.
        let handle = unsafe {
            libc::sem_open(
                sem.as_ptr(),
                libc::O_CREAT | libc::O_EXCL,
                0o666 as libc::c_uint,
                1 as libc::c_uint,
            )
        };
        if handle == libc::SEM_FAILED {
            return Err(Error::infra_from(
                format!("cannot make the clock's semaphore /{}", self.sem),
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: a semaphore sem_open returned.
        unsafe { libc::sem_close(handle) };
        // The umask may have taken bits off: every user's processes read and post it.
        let sem_file = Path::new(SHM_DIR).join(format!("sem.{}", self.sem));
        std::fs::set_permissions(&sem_file, every_user.clone()).map_err(machine(format!(
            "cannot open {} to every user",
            sem_file.display()
        )))?;

        let shm_file = Path::new(SHM_DIR).join(&self.shm);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&shm_file)
            .map_err(machine(format!(
                "cannot make the clock's reference {}",
                shm_file.display()
            )))?;
        file.set_permissions(every_user).map_err(machine(format!(
            "cannot open {} to every user",
            shm_file.display()
        )))?;
        std::io::Write::write_all(&mut &file, &unset_reference())
            .map_err(machine(format!("cannot write {}", shm_file.display())))?;
        Ok(())
    }

    /// Removes both names; processes that have them open keep them.
    fn remove(&self) {
        let _ = std::fs::remove_file(Path::new(SHM_DIR).join(format!("sem.{}", self.sem)));
        let _ = std::fs::remove_file(Path::new(SHM_DIR).join(&self.shm));
    }
}

/// libfaketime 0.9.10's `struct ft_shared_s` with no start recorded yet: two counters, then
/// the start as four `timespec`s (real, monotonic, raw monotonic, boot time) whose first three
/// `tv_nsec` are -1 for "not set". The first process that loads the library stores its start
/// there, and every later one takes it (docs/upstream-facts.md F13.2).
fn unset_reference() -> Vec<u8> {
    let mut words: Vec<i64> = vec![0; 2 + 4 * 2];
    for clock in 0..3 {
        words[2 + clock * 2 + 1] = -1;
    }
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

fn cname(name: &str) -> Result<CString, Error> {
    CString::new(format!("/{name}"))
        .map_err(|_| Error::infra(format!("the clock's name {name:?} contains a NUL byte")))
}

/// Removes the shared references of this process when it ends (the names only: processes
/// still running keep what they opened).
pub fn leave() {
    if std::env::var_os(ON_CLOCK_VAR).is_none() {
        return;
    }
    let pid = std::process::id();
    Reference {
        sem: format!("{SEM_PREFIX}{pid}"),
        shm: format!("{SHM_PREFIX}{pid}"),
    }
    .remove();
}

/// Removes the shared references that harnesses killed by SIGKILL left (their process is gone).
fn sweep() {
    let Ok(entries) = std::fs::read_dir(SHM_DIR) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix("sem.")
            .and_then(|n| n.strip_prefix(SEM_PREFIX))
            .or_else(|| name.strip_prefix(SHM_PREFIX))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && pid != std::process::id()
            && !Path::new("/proc").join(pid.to_string()).exists()
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Real time, measured past the scaled clock: `clock_gettime` through a raw system call,
/// which libfaketime does not interpose (docs/upstream-facts.md F13.1).
pub struct RealStopwatch(Duration);

impl RealStopwatch {
    pub fn start() -> Self {
        RealStopwatch(real_monotonic())
    }

    /// Real time since [`RealStopwatch::start`].
    pub fn elapsed(&self) -> Duration {
        real_monotonic().saturating_sub(self.0)
    }

    /// The summary's line on a scaled clock: the scale, the run's scenario time (`scenario`, as
    /// the scaled clock measured it) and the real time it took; `None` on real time.
    pub fn summary(&self, scenario: Duration) -> Option<String> {
        let scale = conformance_core::clock::scale();
        (scale > 1).then(|| summary_line(scale, scenario, self.elapsed()))
    }
}

fn summary_line(scale: u32, scenario: Duration, real: Duration) -> String {
    format!(
        "time scale ×{scale}: scenario time {:.2}s, real wall time {:.2}s",
        scenario.as_secs_f64(),
        real.as_secs_f64()
    )
}

fn real_monotonic() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a timespec for the kernel to fill.
    let r = unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &mut ts) };
    if r != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_is_a_whole_number_from_one_to_the_largest() {
        assert_eq!(parse_scale("1"), Ok(1));
        assert_eq!(parse_scale("20"), Ok(20));
        assert_eq!(parse_scale(&MAX_SCALE.to_string()), Ok(MAX_SCALE));
        for bad in ["0", "-3", "ten", "2.5", "", "1001", "99999999999"] {
            assert!(parse_scale(bad).is_err(), "{bad:?} was taken");
        }
    }

    #[test]
    fn the_summary_gives_the_scale_and_both_times() {
        let line = summary_line(10, Duration::from_secs(300), Duration::from_millis(30_250));
        assert_eq!(
            line,
            "time scale ×10: scenario time 300.00s, real wall time 30.25s"
        );
    }

    #[test]
    fn the_unset_reference_has_libfaketimes_layout_with_no_start() {
        let bytes = unset_reference();
        // 2 counters and 4 timespecs of 2 words each (x86_64, aarch64).
        assert_eq!(bytes.len(), 80);
        let word = |i: usize| i64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!((word(0), word(1)), (0, 0), "ticks and file index");
        assert_eq!((word(2), word(3)), (0, -1), "real start unset");
        assert_eq!((word(4), word(5)), (0, -1), "monotonic start unset");
        assert_eq!((word(6), word(7)), (0, -1), "raw monotonic start unset");
        assert_eq!((word(8), word(9)), (0, 0), "boot time");
    }
}
