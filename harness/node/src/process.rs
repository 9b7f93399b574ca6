//! Containers as processes.
//!
//! A container's main process is started like this (from [`Process::spawn`]):
//!
//! 1. Everything that needs memory (paths, the list of mount steps, `argv`, `envp`, the `PATH`
//!    candidates for `argv[0]`) is prepared before any fork: between fork and exec only system
//!    calls are made, as a child of a multi-threaded process must.
//! 2. A dedicated, never-ending thread forks (through `std::process::Command` and `pre_exec`).
//!    The first child (the *runner*) asks for SIGKILL when that thread dies
//!    (`PR_SET_PDEATHSIG` fires when the forking thread exits, so a short-lived thread would kill
//!    containers early), starts a session of its own, unshares the mount, PID and UTS namespaces
//!    and forks again. Its child is PID 1 of the new PID namespace: when it dies the kernel kills
//!    everything it started, which is what lets a sandbox supervisor's workloads go with it.
//! 3. The runner reports the container process's host PID and a pidfd for it to the harness over
//!    a socket, closes every other descriptor (so `std`'s exec-error pipe reaches EOF as soon as
//!    the container process has exec'd), forwards SIGTERM and SIGINT to it, waits for it and exits
//!    with its status (128 + signal when it was killed by one). The runner is the harness's child,
//!    so [`Process::wait`] waits on the runner's pidfd.
//! 4. The container process also asks for SIGKILL when the runner dies (so killing the harness
//!    kills the runner, which kills the container, which kills the PID namespace); it asks again
//!    after changing user (a credential change clears the request) and, just before exec, checks
//!    through a pidfd that the runner is still there. It builds its root and execs. The root is the directory `rootfs` in the container's layer; it becomes `/`
//!    by `pivot_root` (so a later [`Process::exec_in`] that joins the mount namespace lands in
//!    it), with the old root kept at `/.oldroot` until the mounts are done. Each base directory
//!    is an overlay (the host directory read-only below, `overlay/<n>/{upper,work}` in the layer
//!    above), so the container may write and create mount points anywhere without touching the
//!    host; base entries that are symlinks on the host (merged `/usr`: `/bin -> usr/bin`) become
//!    the same symlink, and their target joins the base when nothing covers it. `/proc` is fresh
//!    (the new PID namespace's), `/dev` is the host's (bound), `/sys` the host's bound read-only,
//!    `/tmp` a directory of the layer. The binds follow in order, resolved inside the new root
//!    (so symlinks in the image resolve as the container sees them); a mount point that is a
//!    symlink is replaced, in the layer. Then the old root is detached, the working directory
//!    made and entered, the hostname set, the pod's network namespace joined, the user taken,
//!    and `argv[0]` looked up in the container's `PATH` and exec'd with exactly the given
//!    environment.
//!
//! [`Process::exec_in`] works the same way, except that the runner joins the namespaces of the
//! container's PID 1 (mount, UTS, network and PID, through its pidfd) instead of making new ones.
//!
//! A pod with `shareProcessNamespace` has one PID namespace for all its containers
//! ([`PodPidNs`]): a pause process is its PID 1, and each container's runner joins it (through
//! the pause's pidfd) instead of unsharing one, so the container's main process is not PID 1
//! and `SO_PEERCRED` between containers reports PIDs that each side can see (OpenShell's
//! sidecar control socket checks exactly that).
//!
//! Cgroups are not used (machines without a cgroup v2 controller hierarchy are common in CI):
//! the PID namespace is what bounds a container's processes.

use std::ffi::{CString, c_char, c_int};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};

use tokio::io::unix::AsyncFd;

use crate::error::NodeError;
use crate::net::NetNs;

/// The `PATH` a container gets when its environment has none (the one container runtimes use).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Where the host's root stays reachable while the container's root is being built.
const OLD_ROOT: &str = "/.oldroot";

/// Why containers cannot run as processes here (not root, no mount or PID namespaces).
pub fn unsupported() -> Option<String> {
    static PROBED: OnceLock<Option<String>> = OnceLock::new();
    PROBED.get_or_init(probe).clone()
}

/// Starts a container that builds a root with one overlay and exits, which needs everything a
/// real container needs: root, mount, PID and UTS namespaces, overlayfs with its upper directory
/// in the temporary directory (where callers keep layers), `pivot_root` and a `proc` mount.
fn probe() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some(
            "not running as root (mount and PID namespaces and mounts need CAP_SYS_ADMIN)".into(),
        );
    }
    let dir = std::env::temp_dir().join(format!("conformance-node-probe-{}", std::process::id()));
    let result = probe_in(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    result.err()
}

fn probe_in(dir: &Path) -> Result<(), String> {
    let lower = dir.join("lower");
    std::fs::create_dir_all(&lower).map_err(|e| {
        format!(
            "cannot create the probe's directory {}: {e}",
            lower.display()
        )
    })?;
    let spec = ContainerSpec {
        layer: dir.join("layer"),
        base: vec![lower.clone()],
        hostname: Some("probe".into()),
        ..ContainerSpec::default()
    };
    let mut plan = container_plan(&spec, false).map_err(|e| e.to_string())?;
    // A write through the overlay proves that the layer's filesystem can be an upper directory.
    let written = lower.join("written");
    plan.push(
        Step::MountPoint {
            path: cstring(&written).map_err(|e| e.to_string())?,
            dir: false,
        },
        format!("writing {} through the overlay", written.display()),
    );
    let mut launched = launch(plan, Pipes::None, "starting a probe container".into())
        .map_err(|e| e.to_string())?;
    let status = launched
        .runner
        .wait()
        .map_err(|e| format!("waiting for a probe container: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("a probe container failed ({status})"))
    }
}

/// A host path made visible inside the container.
#[derive(Clone, Debug)]
pub struct Bind {
    /// A host file or directory.
    pub host: PathBuf,
    /// Where the container sees it (absolute).
    pub target: PathBuf,
    pub read_only: bool,
}

/// What to run and what it sees.
#[derive(Clone, Debug, Default)]
pub struct ContainerSpec {
    /// Program and arguments; `argv[0]` is looked up in the container's `PATH` if not absolute.
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Working directory inside the container (`/` when unset).
    pub workdir: Option<PathBuf>,
    pub hostname: Option<String>,
    /// The container's own writable layer on the host: a directory the caller creates and
    /// removes. Everything the container writes outside its binds lands here.
    pub layer: PathBuf,
    /// Host directories that form the image's base system (for example `/bin`, `/usr`, `/lib`,
    /// `/etc`), seen read-only with the container's writes going to `layer`.
    pub base: Vec<PathBuf>,
    /// Volumes and image files, mounted in order (a later bind may sit inside an earlier one).
    pub binds: Vec<Bind>,
    /// The pod's network namespace (the host's when unset).
    pub netns: Option<Arc<NetNs>>,
    /// The pod's shared PID namespace (`shareProcessNamespace`); unset, the container's process
    /// is PID 1 of a namespace of its own.
    pub pid_ns: Option<Arc<PodPidNs>>,
    /// `uid:gid` to run as (root when unset).
    pub user: Option<(u32, u32)>,
}

/// Which standard streams of a process are piped to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stdio {
    /// stdout and stderr piped (a container's main process: its log); stdin is /dev/null.
    Log,
    /// stdin, stdout and stderr piped (`kubectl exec`).
    Interactive,
}

/// A running container process (PID 1 of its own PID namespace, or a process of the pod's).
///
/// Dropping a `Process` that has not been waited for kills it.
pub struct Process {
    pub stdin: Option<tokio::net::unix::pipe::Sender>,
    pub stdout: Option<tokio::net::unix::pipe::Receiver>,
    pub stderr: Option<tokio::net::unix::pipe::Receiver>,
    /// The runner (the harness's child, whose exit status is the process's).
    runner: Option<Child>,
    /// The runner's pidfd: readable once it has exited.
    runner_exit: AsyncFd<OwnedFd>,
    /// A pidfd for the process itself, so signals never reach a recycled PID.
    target: OwnedFd,
    pid: u32,
    code: Option<i32>,
    /// What [`Process::exec_in`] inherits: the container's working directory and user.
    workdir: PathBuf,
    user: Option<(u32, u32)>,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("pid", &self.pid)
            .field("code", &self.code)
            .finish_non_exhaustive()
    }
}

/// A running container to exec into (see [`Process::exec_target`]); it names the container's
/// PID 1 by pidfd, so it never reaches a recycled PID.
#[derive(Debug)]
pub struct ExecTarget {
    target: OwnedFd,
    pid: u32,
    workdir: PathBuf,
    user: Option<(u32, u32)>,
}

impl ExecTarget {
    /// Starts another process inside the container's mount, UTS, network and PID namespaces
    /// (`exec`), as the container's user, in `workdir` or else the container's working
    /// directory.
    pub fn exec(
        &self,
        argv: &[String],
        env: &[(String, String)],
        workdir: Option<&std::path::Path>,
        stdio: Stdio,
    ) -> Result<Process, NodeError> {
        let what = format!("running {argv:?} in container process {}", self.pid);
        in_runtime(&what)?;
        let workdir = workdir.unwrap_or(&self.workdir).to_path_buf();
        let target = container_path(&workdir, "the working directory")?;
        let mut plan = Plan::new(Namespaces::Join {
            pidfd: self.target.as_raw_fd(),
            flags: libc::CLONE_NEWNS | libc::CLONE_NEWUTS | libc::CLONE_NEWNET | libc::CLONE_NEWPID,
        });
        plan.push(
            Step::Chdir(cstring(&target)?),
            format!("entering the working directory {}", target.display()),
        );
        if let Some((uid, gid)) = self.user {
            plan.push(
                Step::User { uid, gid },
                format!("becoming user {uid}:{gid}"),
            );
        }
        plan.exec = Some(ExecPlan::new(argv, env)?);
        let launched = launch(plan, stdio.into(), what.clone())?;
        tracing::debug!(
            ?argv,
            pid = launched.pid,
            container = self.pid,
            "exec started"
        );
        Process::new(launched, workdir, self.user, &what)
    }
}

/// The PID namespace a pod's containers share (`shareProcessNamespace`). As on a real node, its
/// PID 1 is a pause process, so each container's main process has another PID there and sees
/// the others' processes. The namespace lasts while the pause process runs; dropping this kills
/// it, and with it every process still in the namespace.
#[derive(Debug)]
pub struct PodPidNs {
    pause: Process,
}

impl PodPidNs {
    pub fn create() -> Result<Self, NodeError> {
        if let Some(why) = unsupported() {
            return Err(NodeError::Unsupported(why));
        }
        let what = "starting a pod's pause process".to_string();
        in_runtime(&what)?;
        let mut plan = Plan::new(Namespaces::Unshare(libc::CLONE_NEWPID));
        plan.pause = true;
        let launched = launch(plan, Pipes::None, what.clone())?;
        Ok(Self {
            pause: Process::new(launched, PathBuf::from("/"), None, &what)?,
        })
    }
}

impl Process {
    /// Starts a container's main process in new mount and UTS namespaces, and a new PID
    /// namespace unless the spec names the pod's.
    pub fn spawn(spec: &ContainerSpec, stdio: Stdio) -> Result<Process, NodeError> {
        if let Some(why) = unsupported() {
            return Err(NodeError::Unsupported(why));
        }
        let what = format!("starting container process {:?}", spec.argv);
        in_runtime(&what)?;
        let plan = container_plan(spec, true)?;
        let launched = launch(plan, stdio.into(), what.clone())?;
        tracing::debug!(argv = ?spec.argv, pid = launched.pid, "container process started");
        Process::new(
            launched,
            spec.workdir.clone().unwrap_or_else(|| PathBuf::from("/")),
            spec.user,
            &what,
        )
    }

    /// Starts another process inside the namespaces of the running container `of` (`exec`).
    ///
    /// It runs as the container's user, in `workdir` or else the container's working directory.
    pub fn exec_in(
        of: &Process,
        argv: &[String],
        env: &[(String, String)],
        workdir: Option<&std::path::Path>,
        stdio: Stdio,
    ) -> Result<Process, NodeError> {
        of.exec_target()?.exec(argv, env, workdir, stdio)
    }

    /// What [`ExecTarget::exec`] needs of this container, apart from the `Process` (whose
    /// waiter owns it): its own pidfd, working directory and user.
    pub fn exec_target(&self) -> Result<ExecTarget, NodeError> {
        Ok(ExecTarget {
            target: self.target.try_clone().map_err(|e| {
                NodeError::io(
                    format!("duplicating the pidfd of container process {}", self.pid),
                    e,
                )
            })?,
            pid: self.pid,
            workdir: self.workdir.clone(),
            user: self.user,
        })
    }

    fn new(
        launched: Launched,
        workdir: PathBuf,
        user: Option<(u32, u32)>,
        what: &str,
    ) -> Result<Process, NodeError> {
        let Launched {
            mut runner,
            target,
            pid,
        } = launched;
        let pipes = (|| -> io::Result<_> {
            let stdin = runner
                .stdin
                .take()
                .map(|s| tokio::net::unix::pipe::Sender::from_owned_fd(OwnedFd::from(s)))
                .transpose()?;
            let stdout = runner
                .stdout
                .take()
                .map(|s| tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(s)))
                .transpose()?;
            let stderr = runner
                .stderr
                .take()
                .map(|s| tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(s)))
                .transpose()?;
            let pidfd = pidfd_open(runner.id())?;
            // SAFETY: the OwnedFd is open and stays the same descriptor while the AsyncFd owns it.
            let exit =
                unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }?;
            Ok((stdin, stdout, stderr, exit))
        })();
        match pipes {
            Ok((stdin, stdout, stderr, runner_exit)) => Ok(Process {
                stdin,
                stdout,
                stderr,
                runner: Some(runner),
                runner_exit,
                target,
                pid,
                code: None,
                workdir,
                user,
            }),
            Err(e) => {
                let _ = pidfd_send_signal(&target, libc::SIGKILL);
                reap_in_background(runner);
                Err(NodeError::io(format!("{what}: taking its pipes"), e))
            }
        }
    }

    /// Host PID of the container's main process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Graceful stop: SIGTERM to the container's PID 1.
    pub fn terminate(&self) {
        // ESRCH (already gone) is the only possible failure: a pidfd never names another process.
        let _ = pidfd_send_signal(&self.target, libc::SIGTERM);
    }

    /// SIGKILL to the container's main process: every process of the container when it is
    /// PID 1 of its own namespace. In a pod's shared namespace ([`PodPidNs`]) the processes it
    /// started stay until the pod's pause process goes (there are no cgroups to find them by).
    pub fn kill(&self) {
        // Killing a PID namespace's init kills every process in it.
        let _ = pidfd_send_signal(&self.target, libc::SIGKILL);
    }

    /// The exit code (128 + signal number when killed by a signal).
    pub async fn wait(&mut self) -> i32 {
        if let Some(code) = self.code {
            return code;
        }
        loop {
            let status = match self.runner_exit.readable().await {
                Ok(mut ready) => {
                    let status = self.runner.as_mut().map(Child::try_wait);
                    if matches!(status, Some(Ok(None))) {
                        ready.clear_ready();
                        continue;
                    }
                    status
                }
                // Only when the runtime is going away: block for the status instead.
                Err(_) => self.runner.as_mut().map(|r| r.wait().map(Some)),
            };
            let code = match status {
                Some(Ok(Some(status))) => exit_code(status),
                // The runner was reaped elsewhere (cannot happen: it is ours alone).
                _ => 128 + libc::SIGKILL,
            };
            self.code = Some(code);
            return code;
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.code.is_some() {
            return;
        }
        if let Some(mut runner) = self.runner.take() {
            if matches!(runner.try_wait(), Ok(Some(_))) {
                return;
            }
            self.kill();
            reap_in_background(runner);
        }
    }
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(128 + libc::SIGKILL)
}

/// The runner exits promptly once its process is killed; a thread of its own reaps it so that a
/// dropped [`Process`] leaves no zombie and blocks nobody.
fn reap_in_background(mut runner: Child) {
    let _ = std::thread::Builder::new()
        .name("container-reaper".into())
        .spawn(move || {
            let _ = runner.wait();
        });
}

fn in_runtime(what: &str) -> Result<(), NodeError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(NodeError::io(
            what,
            io::Error::other("container processes must be started within a tokio runtime"),
        ));
    }
    Ok(())
}

impl From<Stdio> for Pipes {
    fn from(stdio: Stdio) -> Self {
        match stdio {
            Stdio::Log => Pipes::Log,
            Stdio::Interactive => Pipes::Interactive,
        }
    }
}

/// The standard streams of a launch.
#[derive(Clone, Copy)]
enum Pipes {
    /// All three /dev/null (the probe).
    None,
    Log,
    Interactive,
}

// ---- Plans: everything prepared before the fork ----

/// One system call (or a few) made by the container process before exec, with no allocation.
enum Step {
    /// Makes every mount private, so nothing done here reaches the host's namespace.
    MakePrivate,
    /// Binds a directory onto itself, so it is a mount point `pivot_root` accepts.
    BindSelf(CString),
    Chdir(CString),
    /// `pivot_root(".", put_old)`.
    PivotRoot(CString),
    /// A directory, if it is not there yet.
    Mkdir(CString),
    /// A directory or empty file to mount on; a symlink there is replaced.
    MountPoint {
        path: CString,
        dir: bool,
    },
    Symlink {
        target: CString,
        link: CString,
    },
    Mount {
        source: CString,
        target: CString,
        fstype: Option<CString>,
        flags: libc::c_ulong,
        data: Option<CString>,
    },
    /// Makes a mount and every mount below it read-only.
    ReadOnly(CString),
    Chmod(CString, libc::mode_t),
    Detach(CString),
    /// Removes an empty directory; failure is harmless.
    Rmdir(CString),
    Hostname(Vec<u8>),
    JoinNet(RawFd),
    User {
        uid: u32,
        gid: u32,
    },
}

/// How the runner gets the container process's namespaces.
#[derive(Clone, Copy)]
enum Namespaces {
    Unshare(c_int),
    /// Unshares `flags` and joins the PID namespace of a running process (its pidfd), so the
    /// container process forked next is in it.
    UnshareInPid {
        flags: c_int,
        pid_of: RawFd,
    },
    /// Joins the namespaces of a running process (its pidfd): `flags` to `setns`.
    Join {
        pidfd: RawFd,
        flags: c_int,
    },
}

struct Plan {
    namespaces: Namespaces,
    steps: Vec<Step>,
    /// What each step does, for errors (parallel to `steps`).
    what: Vec<String>,
    /// `None`: exit 0 after the steps (the probe).
    exec: Option<ExecPlan>,
    /// Instead of exiting or exec'ing: stay, as a PID namespace's pause process.
    pause: bool,
    /// The runner's and container process's end of the report socket.
    report: RawFd,
    /// The harness's PID: the runner checks it is still its parent.
    parent: libc::pid_t,
}

impl Plan {
    fn new(namespaces: Namespaces) -> Self {
        Plan {
            namespaces,
            steps: Vec::new(),
            what: Vec::new(),
            exec: None,
            pause: false,
            report: -1,
            parent: std::process::id() as libc::pid_t,
        }
    }

    fn push(&mut self, step: Step, what: String) {
        self.steps.push(step);
        self.what.push(what);
    }

    /// `mkdir -p` of `path` inside the container.
    fn mkdirs(&mut self, path: &Path) -> Result<(), NodeError> {
        let mut ancestors: Vec<&Path> = path.ancestors().filter(|a| a.parent().is_some()).collect();
        ancestors.reverse();
        for dir in ancestors {
            self.push(
                Step::Mkdir(cstring(dir)?),
                format!("creating directory {}", dir.display()),
            );
        }
        Ok(())
    }
}

/// `argv[0]`'s candidates and the exact `argv` and `envp` for `execve`.
struct ExecPlan {
    candidates: Vec<CString>,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const c_char>,
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const c_char>,
    /// For errors: the program and the `PATH` searched.
    program: String,
    path: String,
}

// SAFETY: the pointers point into the CStrings owned alongside them, which are never changed.
unsafe impl Send for ExecPlan {}
// SAFETY: as above; the plan is only read.
unsafe impl Sync for ExecPlan {}

impl ExecPlan {
    /// `env` as given, plus the harness's scaled clock when it runs on one (`crate::clock`).
    fn new(argv: &[String], env: &[(String, String)]) -> Result<Self, NodeError> {
        let clocked;
        let env = match crate::clock::inherited() {
            Some(clock) => {
                clocked = clock.environment(env);
                &clocked[..]
            }
            None => env,
        };
        let Some(program) = argv.first() else {
            return Err(invalid("starting a container process", "argv is empty"));
        };
        if program.is_empty() {
            return Err(invalid("starting a container process", "argv[0] is empty"));
        }
        let path = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map_or(DEFAULT_PATH, |(_, v)| v.as_str())
            .to_string();
        let candidates = if program.contains('/') {
            vec![cstr(program)?]
        } else {
            path.split(':')
                .map(|dir| {
                    let dir = if dir.is_empty() { "." } else { dir };
                    cstr(&format!("{}/{program}", dir.trim_end_matches('/')))
                })
                .collect::<Result<_, _>>()?
        };
        let argv: Vec<CString> = argv.iter().map(|a| cstr(a)).collect::<Result<_, _>>()?;
        let envp: Vec<CString> = env
            .iter()
            .map(|(k, v)| {
                if k.is_empty() || k.contains('=') {
                    Err(invalid(
                        "starting a container process",
                        format!("environment variable name {k:?} is empty or contains '='"),
                    ))
                } else {
                    cstr(&format!("{k}={v}"))
                }
            })
            .collect::<Result<_, _>>()?;
        let argv_ptrs = argv
            .iter()
            .map(|a| a.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        let envp_ptrs = envp
            .iter()
            .map(|e| e.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        Ok(ExecPlan {
            candidates,
            _argv: argv,
            argv_ptrs,
            _envp: envp,
            envp_ptrs,
            program: program.clone(),
            path,
        })
    }
}

fn invalid(what: impl Into<String>, why: impl Into<String>) -> NodeError {
    NodeError::io(
        what,
        io::Error::new(io::ErrorKind::InvalidInput, why.into()),
    )
}

fn cstr(s: &str) -> Result<CString, NodeError> {
    CString::new(s).map_err(|_| invalid(format!("{s:?}"), "contains a NUL byte"))
}

fn cstring(p: &Path) -> Result<CString, NodeError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| invalid(format!("path {}", p.display()), "contains a NUL byte"))
}

/// An absolute path inside the container, with `.` and `..` resolved lexically.
fn container_path(p: &Path, role: &str) -> Result<PathBuf, NodeError> {
    if !p.is_absolute() {
        return Err(invalid(
            format!("{role} {}", p.display()),
            "must be an absolute path inside the container",
        ));
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    Ok(out)
}

/// A host path as seen from inside the new root while the old one is at [`OLD_ROOT`].
fn from_old_root(host: &Path) -> PathBuf {
    Path::new(OLD_ROOT).join(host.strip_prefix("/").unwrap_or(host))
}

/// Overlay options are a comma-separated list and `lowerdir` a colon-separated one.
fn overlay_option_path(p: &Path, role: &str) -> Result<String, NodeError> {
    let s = p
        .to_str()
        .ok_or_else(|| invalid(format!("{role} {}", p.display()), "is not valid UTF-8"))?;
    if s.contains([',', ':', '\\']) {
        return Err(invalid(
            format!("{role} {s}"),
            "overlay mounts cannot take paths containing ',', ':' or '\\'",
        ));
    }
    Ok(s.to_string())
}

fn host_io(what: impl Into<String>) -> impl FnOnce(io::Error) -> NodeError {
    let what = what.into();
    move |e| NodeError::io(what, e)
}

/// The steps that build a container's root and start its program (`exec`: false for the probe).
fn container_plan(spec: &ContainerSpec, exec: bool) -> Result<Plan, NodeError> {
    let mut plan = Plan::new(match &spec.pid_ns {
        // The spec (and so the pause's pidfd) outlives the launch, which borrows it.
        Some(pid_ns) => Namespaces::UnshareInPid {
            flags: libc::CLONE_NEWNS | libc::CLONE_NEWUTS,
            pid_of: pid_ns.pause.target.as_raw_fd(),
        },
        None => Namespaces::Unshare(libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWUTS),
    });
    if exec {
        plan.exec = Some(ExecPlan::new(&spec.argv, &spec.env)?);
    }

    // The layer: the root directory and one upper and work directory per overlay.
    std::fs::create_dir_all(&spec.layer).map_err(host_io(format!(
        "creating the layer {}",
        spec.layer.display()
    )))?;
    let layer = spec.layer.canonicalize().map_err(host_io(format!(
        "resolving the layer {}",
        spec.layer.display()
    )))?;
    let rootfs = layer.join("rootfs");
    for dir in [&rootfs, &rootfs.join(&OLD_ROOT[1..])] {
        std::fs::create_dir_all(dir).map_err(host_io(format!("creating {}", dir.display())))?;
    }

    // The base: overlays (shallowest first, so deeper ones sit on top) and symlinks.
    let mut overlays: Vec<PathBuf> = Vec::new();
    let mut symlinks: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut implied: Vec<PathBuf> = Vec::new();
    for base in &spec.base {
        let path = container_path(base, "base directory")?;
        if path == Path::new("/") {
            return Err(invalid(
                "base directory /",
                "the host's whole root cannot be a base; list its directories instead",
            ));
        }
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            // An image may list directories this host lacks (`/lib64`).
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                tracing::debug!(base = %path.display(), "base directory missing on this host, skipped");
                continue;
            }
            Err(e) => {
                return Err(NodeError::io(
                    format!("base directory {}", path.display()),
                    e,
                ));
            }
        };
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path)
                .map_err(host_io(format!("reading the symlink {}", path.display())))?;
            if let Ok(resolved) = path.canonicalize()
                && resolved.is_dir()
            {
                implied.push(resolved);
            }
            symlinks.push((path, target));
        } else if meta.is_dir() {
            overlays.push(path);
        } else {
            return Err(invalid(
                format!("base directory {}", path.display()),
                "is neither a directory nor a symlink",
            ));
        }
    }
    for target in implied {
        if !overlays.iter().any(|o| target.starts_with(o)) {
            overlays.push(target);
        }
    }
    overlays.sort_by_key(|p| p.components().count());
    overlays.dedup();

    let layer_opt = overlay_option_path(&from_old_root(&layer), "the layer")?;
    let old_root = cstr(OLD_ROOT)?;

    plan.push(
        Step::MakePrivate,
        "making the new mount namespace private".into(),
    );
    let rootfs_c = cstring(&rootfs)?;
    plan.push(
        Step::BindSelf(rootfs_c.clone()),
        format!("binding the root {} onto itself", rootfs.display()),
    );
    plan.push(
        Step::Chdir(rootfs_c),
        format!("entering {}", rootfs.display()),
    );
    plan.push(
        Step::PivotRoot(cstr(&OLD_ROOT[1..])?),
        format!("pivot_root into {}", rootfs.display()),
    );
    plan.push(Step::Chdir(cstr("/")?), "entering the new root".into());

    for (n, dir) in overlays.iter().enumerate() {
        let upper = layer.join("overlay").join(n.to_string()).join("upper");
        let work = layer.join("overlay").join(n.to_string()).join("work");
        for d in [&upper, &work] {
            std::fs::create_dir_all(d).map_err(host_io(format!("creating {}", d.display())))?;
        }
        let lower = overlay_option_path(&from_old_root(dir), "base directory")?;
        let data = format!(
            "lowerdir={lower},upperdir={layer_opt}/overlay/{n}/upper,workdir={layer_opt}/overlay/{n}/work"
        );
        if let Some(parent) = dir.parent() {
            plan.mkdirs(parent)?;
        }
        plan.push(
            Step::MountPoint {
                path: cstring(dir)?,
                dir: true,
            },
            format!("creating the mount point {}", dir.display()),
        );
        plan.push(
            Step::Mount {
                source: cstr("overlay")?,
                target: cstring(dir)?,
                fstype: Some(cstr("overlay")?),
                flags: 0,
                data: Some(cstr(&data)?),
            },
            format!(
                "mounting an overlay of {} (upper directory in {}, whose filesystem must support \
                 overlayfs upper directories)",
                dir.display(),
                layer.display()
            ),
        );
    }
    for (link, target) in &symlinks {
        if let Some(parent) = link.parent() {
            plan.mkdirs(parent)?;
        }
        plan.push(
            Step::Symlink {
                target: cstring(target)?,
                link: cstring(link)?,
            },
            format!(
                "creating the symlink {} -> {}",
                link.display(),
                target.display()
            ),
        );
    }

    plan.push(
        Step::MountPoint {
            path: cstr("/proc")?,
            dir: true,
        },
        "creating /proc".into(),
    );
    plan.push(
        Step::Mount {
            source: cstr("proc")?,
            target: cstr("/proc")?,
            fstype: Some(cstr("proc")?),
            flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            data: None,
        },
        "mounting /proc".into(),
    );
    for (dir, read_only) in [("/dev", false), ("/sys", true)] {
        plan.push(
            Step::MountPoint {
                path: cstr(dir)?,
                dir: true,
            },
            format!("creating {dir}"),
        );
        plan.push(
            Step::Mount {
                source: cstring(&from_old_root(Path::new(dir)))?,
                target: cstr(dir)?,
                fstype: None,
                flags: libc::MS_BIND | libc::MS_REC,
                data: None,
            },
            format!("binding the host's {dir}"),
        );
        if read_only {
            plan.push(
                Step::ReadOnly(cstr(dir)?),
                format!("making {dir} read-only"),
            );
        }
    }
    plan.push(Step::Mkdir(cstr("/tmp")?), "creating /tmp".into());
    plan.push(
        Step::Chmod(cstr("/tmp")?, 0o1777),
        "making /tmp world-writable".into(),
    );
    // The rest of a minimal image's top level (Alpine's): programs expect `/run` (iproute2
    // makes `/run/netns` there, and `/var/run` names it), `/var/tmp`, and home directories.
    for dir in [
        "/run", "/var", "/var/tmp", "/root", "/home", "/opt", "/mnt", "/srv",
    ] {
        plan.push(Step::Mkdir(cstr(dir)?), format!("creating {dir}"));
    }
    plan.push(
        Step::Chmod(cstr("/var/tmp")?, 0o1777),
        "making /var/tmp world-writable".into(),
    );
    plan.push(
        Step::Symlink {
            target: cstr("/run")?,
            link: cstr("/var/run")?,
        },
        "creating the symlink /var/run -> /run".into(),
    );

    // The scaled clock's library, where every container process's `LD_PRELOAD` names it.
    let clock = crate::clock::inherited().map(|c| Bind {
        host: c.library.clone(),
        target: PathBuf::from(crate::clock::LIBRARY_IN_CONTAINER),
        read_only: true,
    });
    for bind in spec.binds.iter().chain(clock.iter()) {
        let target = container_path(&bind.target, "bind target")?;
        let host = bind.host.canonicalize().map_err(host_io(format!(
            "the bind source {} (for {})",
            bind.host.display(),
            target.display()
        )))?;
        if let Some(parent) = target.parent() {
            plan.mkdirs(parent)?;
        }
        plan.push(
            Step::MountPoint {
                path: cstring(&target)?,
                dir: host.is_dir(),
            },
            format!("creating the mount point {}", target.display()),
        );
        plan.push(
            Step::Mount {
                source: cstring(&from_old_root(&host))?,
                target: cstring(&target)?,
                fstype: None,
                flags: libc::MS_BIND | libc::MS_REC,
                data: None,
            },
            format!("binding {} at {}", host.display(), target.display()),
        );
        if bind.read_only {
            plan.push(
                Step::ReadOnly(cstring(&target)?),
                format!("making {} read-only", target.display()),
            );
        }
    }

    plan.push(
        Step::Detach(old_root.clone()),
        "detaching the host's root".into(),
    );
    plan.push(Step::Rmdir(old_root), format!("removing {OLD_ROOT}"));

    let workdir = container_path(
        spec.workdir.as_deref().unwrap_or(Path::new("/")),
        "the working directory",
    )?;
    plan.mkdirs(&workdir)?;
    plan.push(
        Step::Chdir(cstring(&workdir)?),
        format!("entering the working directory {}", workdir.display()),
    );
    if let Some(hostname) = &spec.hostname {
        plan.push(
            Step::Hostname(hostname.as_bytes().to_vec()),
            format!("setting the hostname {hostname:?}"),
        );
    }
    if let Some(netns) = &spec.netns {
        // The spec (and so the descriptor) outlives the launch, which borrows it.
        plan.push(
            Step::JoinNet(netns.0.as_raw_fd()),
            "joining the pod's network namespace".into(),
        );
    }
    if let Some((uid, gid)) = spec.user {
        plan.push(
            Step::User { uid, gid },
            format!("becoming user {uid}:{gid}"),
        );
    }
    Ok(plan)
}

// ---- The launch: fork on the spawner thread, then read the runner's report ----

struct Launched {
    runner: Child,
    target: OwnedFd,
    pid: u32,
}

/// Reports on the socket: the container process's PID (with its pidfd), or the failed step.
const REPORT_PID: u32 = 1;
const REPORT_FAILED: u32 = 2;
const REPORT_LEN: usize = 16;

fn launch(mut plan: Plan, pipes: Pipes, what: String) -> Result<Launched, NodeError> {
    let (ours, theirs) = seqpacket_pair().map_err(host_io(format!("{what}: a socketpair")))?;
    plan.report = theirs.as_raw_fd();
    let steps = std::mem::take(&mut plan.what);
    let exec_what = plan
        .exec
        .as_ref()
        .map(|e| format!("executing {:?} (looked up in PATH {:?})", e.program, e.path));

    // std never execs this program: the runner exits on its own and the container process execs
    // its candidates itself.
    let mut command = Command::new("/");
    command.env_clear();
    let (stdin, out) = match pipes {
        Pipes::None => (false, false),
        Pipes::Log => (false, true),
        Pipes::Interactive => (true, true),
    };
    let piped = |yes| {
        if yes {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        }
    };
    command
        .stdin(piped(stdin))
        .stdout(piped(out))
        .stderr(piped(out));
    // SAFETY: `runner` makes only async-signal-safe system calls and allocates nothing.
    unsafe {
        command.pre_exec(move || runner(&plan));
    }
    let spawned = on_spawner_thread(move || {
        let spawned = command.spawn();
        drop(theirs);
        spawned
    })
    .map_err(host_io(format!("{what}: the spawner thread")))?;
    let reports = read_reports(&ours);

    let failure = |step: u32, errno: i32| {
        let step_what = steps
            .get(step as usize)
            .cloned()
            .or_else(|| exec_what.clone())
            .unwrap_or_else(|| format!("step {step}"));
        NodeError::io(
            format!("{what}: {step_what}"),
            io::Error::from_raw_os_error(errno),
        )
    };
    let mut runner = match spawned {
        Ok(runner) => runner,
        Err(e) => {
            return Err(match reports {
                Ok(Reports {
                    failed: Some((step, errno)),
                    ..
                }) => failure(step, errno),
                _ => NodeError::io(what, e),
            });
        }
    };
    match reports {
        Ok(Reports {
            failed: None,
            pid: Some((pid, target)),
        }) => Ok(Launched {
            runner,
            target,
            pid,
        }),
        other => {
            let _ = runner.kill();
            let _ = runner.wait();
            Err(match other {
                Ok(Reports {
                    failed: Some((step, errno)),
                    ..
                }) => failure(step, errno),
                Err(e) => NodeError::io(format!("{what}: reading its runner's report"), e),
                Ok(_) => NodeError::io(
                    what,
                    io::Error::other("the runner reported no PID for the container process"),
                ),
            })
        }
    }
}

/// Runs `f` on the one thread that forks containers. It never ends: `PR_SET_PDEATHSIG` fires
/// when the thread that forked the runner exits, and it must only fire when the harness dies.
fn on_spawner_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
    type Job = Box<dyn FnOnce() + Send>;
    static SPAWNER: Mutex<Option<mpsc::Sender<Job>>> = Mutex::new(None);
    let sender = {
        let mut spawner = SPAWNER.lock().unwrap_or_else(|e| e.into_inner());
        match &*spawner {
            Some(sender) => sender.clone(),
            None => {
                let (sender, jobs) = mpsc::channel::<Job>();
                std::thread::Builder::new()
                    .name("container-spawner".into())
                    .spawn(move || {
                        for job in jobs {
                            job();
                        }
                    })?;
                *spawner = Some(sender.clone());
                sender
            }
        }
    };
    let (done, result) = mpsc::sync_channel(1);
    sender
        .send(Box::new(move || {
            // A panic must not end the thread (that would kill every container).
            let _ = done.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
        }))
        .map_err(|_| io::Error::other("the container spawner thread is gone"))?;
    match result.recv() {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(_)) => Err(io::Error::other("starting a container panicked")),
        Err(_) => Err(io::Error::other("the container spawner thread is gone")),
    }
}

fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: fds has room for the two descriptors.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair returned two new descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[derive(Default)]
struct Reports {
    pid: Option<(u32, OwnedFd)>,
    failed: Option<(u32, i32)>,
}

/// Reads reports until every writer (the runner and the container process) has closed its end.
fn read_reports(sock: &OwnedFd) -> io::Result<Reports> {
    let mut reports = Reports::default();
    loop {
        let mut buf = [0u8; REPORT_LEN];
        let mut control = [0u64; 8];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: msg describes valid buffers.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(reports);
        }
        let mut passed = None;
        // SAFETY: the kernel filled msg_control; the CMSG macros walk it within its length.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<c_int>());
                    passed = Some(OwnedFd::from_raw_fd(fd));
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        if n as usize != REPORT_LEN {
            continue;
        }
        let [k0, k1, k2, k3, s0, s1, s2, s3, v @ ..] = buf;
        let kind = u32::from_ne_bytes([k0, k1, k2, k3]);
        let step = u32::from_ne_bytes([s0, s1, s2, s3]);
        let value = i64::from_ne_bytes(v);
        match (kind, passed) {
            (REPORT_PID, Some(fd)) => reports.pid = Some((value as u32, fd)),
            (REPORT_FAILED, _) => reports.failed = Some((step, value as i32)),
            _ => {}
        }
    }
}

fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a PID and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is new and ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn pidfd_send_signal(pidfd: &OwnedFd, signal: c_int) -> io::Result<()> {
    // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// ---- After the fork: system calls only ----
//
// And none through a libc function libfaketime interposes (`getpid`, `poll`, `lstat`, ...):
// under a scaled clock (`--time-scale`) the harness runs with libfaketime preloaded, whose
// versions take locks another thread may have held at the fork, and a child hung for good
// (docs/upstream-facts.md F13.1). Those calls go through `libc::syscall`, which it leaves alone.

/// The PID the runner forwards SIGTERM and SIGINT to (0: none, or already reaped).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(signal: c_int) {
    // SAFETY: errno is thread-local; kill is async-signal-safe.
    unsafe {
        let errno = *libc::__errno_location();
        let pid = FORWARD_TO.load(Ordering::SeqCst);
        if pid > 0 {
            libc::kill(pid, signal);
        }
        *libc::__errno_location() = errno;
    }
}

fn errno() -> i32 {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() }
}

fn check(r: libc::c_long) -> Result<(), i32> {
    if r < 0 { Err(errno()) } else { Ok(()) }
}

fn forwarded_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

/// The runner: the first child. Returns only on failure before its own fork (std reports it).
unsafe fn runner(plan: &Plan) -> io::Result<()> {
    // SAFETY (whole function): only async-signal-safe system calls on prepared data.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::getppid() != plan.parent {
            // The harness died before the request took effect.
            libc::_exit(128 + libc::SIGKILL);
        }
        libc::setsid();
        let signals = forwarded_signals();
        libc::sigprocmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut());
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = forward as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        // The harness's handlers (tokio's) write to descriptors the runner is about to close.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);

        let joined = match plan.namespaces {
            Namespaces::Unshare(flags) => libc::unshare(flags),
            Namespaces::UnshareInPid { flags, pid_of } => match libc::unshare(flags) {
                0 => libc::setns(pid_of, libc::CLONE_NEWPID),
                failed => failed,
            },
            Namespaces::Join { pidfd, flags } => libc::setns(pidfd, flags),
        };
        if joined != 0 {
            return Err(io::Error::last_os_error());
        }
        // The container process checks this before exec: its SIGKILL-on-parent-death request
        // is cleared when it changes user, and could come too late after the fork.
        let runner_pidfd =
            libc::syscall(libc::SYS_pidfd_open, libc::syscall(libc::SYS_getpid), 0) as c_int;
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            return container(plan, runner_pidfd);
        }

        FORWARD_TO.store(pid, Ordering::SeqCst);
        report_pid(plan.report, pid);
        // Every descriptor but stdio: std's exec-error pipe and the report socket must reach
        // EOF once the container process has exec'd, and the runner needs nothing else.
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
            // Before Linux 5.9.
            for fd in 3..libc::sysconf(libc::_SC_OPEN_MAX).clamp(3, 65536) as c_int {
                libc::close(fd);
            }
        }
        libc::sigprocmask(libc::SIG_UNBLOCK, &signals, std::ptr::null_mut());

        let mut info: libc::siginfo_t = std::mem::zeroed();
        // WNOWAIT: the child stays unreaped (its PID cannot be reused) while signals may still
        // be forwarded to it.
        while libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOWAIT,
        ) != 0
        {
            if errno() != libc::EINTR {
                libc::_exit(255);
            }
        }
        libc::sigprocmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut());
        FORWARD_TO.store(0, Ordering::SeqCst);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        let status = info.si_status();
        let code = if info.si_code == libc::CLD_EXITED {
            status
        } else {
            128 + status
        };
        libc::_exit(code & 0xff)
    }
}

/// The container process: builds its root and execs, or reports the step that failed.
unsafe fn container(plan: &Plan, runner_pidfd: c_int) -> io::Result<()> {
    // SAFETY (whole function): only async-signal-safe system calls on prepared data.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        let signals = forwarded_signals();
        libc::sigprocmask(libc::SIG_UNBLOCK, &signals, std::ptr::null_mut());
        // Nothing of the harness's may leak into the container.
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        for (n, step) in plan.steps.iter().enumerate() {
            if let Err(e) = run(step) {
                report_failure(plan.report, n as u32, e);
                return Err(io::Error::from_raw_os_error(e));
            }
        }
        // Changing user cleared the request for SIGKILL when the runner dies: make it again,
        // then make sure the runner did not die before it took effect.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if runner_pidfd >= 0 {
            let mut runner = libc::pollfd {
                fd: runner_pidfd,
                events: libc::POLLIN,
                revents: 0,
            };
            let now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            if libc::syscall(
                libc::SYS_ppoll,
                &mut runner,
                1,
                &now,
                std::ptr::null::<libc::sigset_t>(),
                0,
            ) != 0
            {
                libc::_exit(128 + libc::SIGKILL);
            }
            libc::close(runner_pidfd);
        }
        if plan.pause {
            pause();
        }
        let Some(exec) = &plan.exec else {
            libc::_exit(0);
        };
        let e = execute(exec);
        report_failure(plan.report, plan.steps.len() as u32, e);
        Err(io::Error::from_raw_os_error(e))
    }
}

/// A pod's pause process: PID 1 of the pod's PID namespace, holding it. It closes every
/// descriptor (it never execs, and the launch waits for EOF on the report socket), lets the
/// kernel reap the orphans it inherits (SIGCHLD ignored) and sleeps until it is killed.
unsafe fn pause() -> ! {
    // SAFETY: async-signal-safe system calls only.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
            for fd in 3..libc::sysconf(libc::_SC_OPEN_MAX).clamp(3, 65536) as c_int {
                libc::close(fd);
            }
        }
        libc::signal(libc::SIGCHLD, libc::SIG_IGN);
        loop {
            libc::pause();
        }
    }
}

/// Tries `argv[0]`'s candidates in `PATH` order, as `execvp` does; returns the error.
unsafe fn execute(exec: &ExecPlan) -> i32 {
    let mut denied = false;
    for candidate in &exec.candidates {
        // SAFETY: null-terminated arrays of pointers into live CStrings.
        unsafe {
            libc::execve(
                candidate.as_ptr(),
                exec.argv_ptrs.as_ptr(),
                exec.envp_ptrs.as_ptr(),
            );
        }
        match errno() {
            libc::EACCES => denied = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            e => return e,
        }
    }
    if denied { libc::EACCES } else { libc::ENOENT }
}

unsafe fn run(step: &Step) -> Result<(), i32> {
    // SAFETY (whole function): system calls on NUL-terminated strings that outlive them.
    unsafe {
        let null = std::ptr::null::<c_char>();
        match step {
            Step::MakePrivate => check(libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) as _),
            Step::BindSelf(path) => check(libc::mount(
                path.as_ptr(),
                path.as_ptr(),
                null,
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ) as _),
            Step::Chdir(path) => check(libc::chdir(path.as_ptr()) as _),
            Step::PivotRoot(put_old) => check(libc::syscall(
                libc::SYS_pivot_root,
                c".".as_ptr(),
                put_old.as_ptr(),
            )),
            Step::Mkdir(path) => mkdir(path),
            Step::MountPoint { path, dir } => {
                let mut st: libc::stat = std::mem::zeroed();
                if libc::syscall(
                    libc::SYS_newfstatat,
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    &mut st,
                    libc::AT_SYMLINK_NOFOLLOW,
                ) == 0
                    && st.st_mode & libc::S_IFMT == libc::S_IFLNK
                {
                    // A symlink would redirect the mount; the container sees the mount instead.
                    check(libc::unlink(path.as_ptr()) as _)?;
                }
                if *dir {
                    mkdir(path)
                } else {
                    let fd = libc::open(
                        path.as_ptr(),
                        libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                        0o644,
                    );
                    if fd < 0 {
                        // A directory is there: the mount says whether that is acceptable.
                        if errno() == libc::EISDIR {
                            return Ok(());
                        }
                        return Err(errno());
                    }
                    libc::close(fd);
                    Ok(())
                }
            }
            Step::Symlink { target, link } => {
                if libc::symlink(target.as_ptr(), link.as_ptr()) != 0 && errno() != libc::EEXIST {
                    return Err(errno());
                }
                Ok(())
            }
            Step::Mount {
                source,
                target,
                fstype,
                flags,
                data,
            } => check(libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ref().map_or(null, |f| f.as_ptr()),
                *flags,
                data.as_ref()
                    .map_or(std::ptr::null(), |d| d.as_ptr().cast()),
            ) as _),
            Step::ReadOnly(path) => read_only(path),
            Step::Chmod(path, mode) => check(libc::chmod(path.as_ptr(), *mode) as _),
            Step::Detach(path) => check(libc::umount2(path.as_ptr(), libc::MNT_DETACH) as _),
            Step::Rmdir(path) => {
                libc::rmdir(path.as_ptr());
                Ok(())
            }
            Step::Hostname(name) => check(libc::sethostname(name.as_ptr().cast(), name.len()) as _),
            Step::JoinNet(fd) => check(libc::setns(*fd, libc::CLONE_NEWNET) as _),
            Step::User { uid, gid } => {
                check(libc::setgroups(0, std::ptr::null()) as _)?;
                check(libc::setgid(*gid) as _)?;
                check(libc::setuid(*uid) as _)
            }
        }
    }
}

unsafe fn mkdir(path: &CString) -> Result<(), i32> {
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::mkdir(path.as_ptr(), 0o755) } != 0 && errno() != libc::EEXIST {
        return Err(errno());
    }
    Ok(())
}

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}
const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// Read-only for the mount at `path` and every mount below it (`/sys` has several).
unsafe fn read_only(path: &CString) -> Result<(), i32> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a NUL-terminated path and a mount_attr of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        return Ok(());
    }
    if errno() != libc::ENOSYS {
        return Err(errno());
    }
    // Before Linux 5.12: only the top mount can be made read-only.
    // SAFETY: as above.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            path.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
            std::ptr::null(),
        )
    } as _)
}

fn encode(kind: u32, step: u32, value: i64) -> [u8; REPORT_LEN] {
    let mut buf = [0u8; REPORT_LEN];
    buf[0..4].copy_from_slice(&kind.to_ne_bytes());
    buf[4..8].copy_from_slice(&step.to_ne_bytes());
    buf[8..16].copy_from_slice(&value.to_ne_bytes());
    buf
}

unsafe fn report_failure(sock: RawFd, step: u32, errno: i32) {
    let buf = encode(REPORT_FAILED, step, i64::from(errno));
    // SAFETY: a buffer of the length passed.
    unsafe {
        libc::send(sock, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL);
    }
}

/// Sends the container process's PID with a pidfd for it (taken while it cannot have been
/// reaped, so it names exactly that process).
unsafe fn report_pid(sock: RawFd, pid: libc::pid_t) {
    // SAFETY (whole function): buffers on the stack of the sizes given to the kernel.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as c_int;
        let mut buf = encode(REPORT_PID, 0, i64::from(pid));
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut control = [0u64; 4];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if pidfd >= 0 {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<c_int>() as u32) as usize;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<c_int>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<c_int>(), pidfd);
        }
        libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL);
    }
}

#[cfg(test)]
mod tests;
