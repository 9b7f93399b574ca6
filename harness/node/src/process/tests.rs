use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::*;

/// How long any one thing a test awaits may take.
const DEADLINE: Duration = Duration::from_secs(30);

/// Whether containers can run here; prints why not (or fails, in CI).
fn supported() -> bool {
    match unsupported() {
        None => true,
        Some(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("containers must run as processes in CI, but: {why}")
        }
        Some(why) => {
            println!("skipped: {why}");
            false
        }
    }
}

/// The host's base system as an image's, the layer in `dir`.
fn spec(dir: &Path, argv: &[&str]) -> ContainerSpec {
    ContainerSpec {
        argv: argv.iter().map(|a| (*a).to_string()).collect(),
        env: vec![("PATH".into(), DEFAULT_PATH.into())],
        layer: dir.join("layer"),
        base: ["/bin", "/sbin", "/usr", "/lib", "/lib64", "/etc"]
            .iter()
            .map(PathBuf::from)
            .collect(),
        ..ContainerSpec::default()
    }
}

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn read_all(
    what: &str,
    pipe: Option<tokio::net::unix::pipe::Receiver>,
) -> Result<String, String> {
    let Some(mut pipe) = pipe else {
        return Ok(String::new());
    };
    let mut buf = Vec::new();
    match tokio::time::timeout(DEADLINE, pipe.read_to_end(&mut buf)).await {
        Ok(Ok(_)) => Ok(String::from_utf8_lossy(&buf).into_owned()),
        Ok(Err(e)) => Err(format!("reading {what}: {e}")),
        Err(_) => Err(format!(
            "{what} did not close within {DEADLINE:?}; read so far: {:?}",
            String::from_utf8_lossy(&buf)
        )),
    }
}

async fn wait(p: &mut Process) -> i32 {
    let pid = p.pid();
    tokio::time::timeout(DEADLINE, p.wait())
        .await
        .unwrap_or_else(|_| panic!("container process {pid} did not exit within {DEADLINE:?}"))
}

/// Everything a process writes, and its exit code.
async fn output(mut p: Process) -> Output {
    let (stdout, stderr) = tokio::join!(
        read_all("stdout", p.stdout.take()),
        read_all("stderr", p.stderr.take())
    );
    let (stdout, stderr) = match (stdout, stderr) {
        (Ok(out), Ok(err)) => (out, err),
        (out, err) => panic!("awaited the process's output: stdout {out:?}, stderr {err:?}"),
    };
    let code = wait(&mut p).await;
    Output {
        code,
        stdout,
        stderr,
    }
}

async fn run(spec: &ContainerSpec) -> Output {
    let p = Process::spawn(spec, Stdio::Log)
        .unwrap_or_else(|e| panic!("starting {:?}: {e}", spec.argv));
    output(p).await
}

/// Reads stdout lines until one equals `line`.
async fn await_line(
    stdout: &mut BufReader<tokio::net::unix::pipe::Receiver>,
    line: &str,
) -> Vec<String> {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(DEADLINE, async {
        loop {
            let mut next = String::new();
            match stdout.read_line(&mut next).await {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            }
            let next = next.trim_end().to_string();
            let done = next == line;
            seen.push(next);
            if done {
                return true;
            }
        }
    })
    .await;
    assert!(
        matches!(found, Ok(true)),
        "awaited the line {line:?} on stdout; lines seen: {seen:?}"
    );
    seen
}

fn spawn_log(spec: &ContainerSpec) -> (Process, BufReader<tokio::net::unix::pipe::Receiver>) {
    let mut p = Process::spawn(spec, Stdio::Log)
        .unwrap_or_else(|e| panic!("starting {:?}: {e}", spec.argv));
    let stdout = BufReader::new(p.stdout.take().expect("stdout is piped"));
    (p, stdout)
}

/// A name no host file has.
fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    )
    .replace(['(', ')'], "")
}

fn files_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name() == name {
            found.push(path.clone());
        }
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(files_named(&path, name));
        }
    }
    found
}

#[tokio::test]
async fn the_process_is_pid_1_and_sees_a_fresh_proc() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A shell builtin loop, so no other process shows up in /proc.
    let out = run(&spec(
        dir.path(),
        &[
            "sh",
            "-c",
            "echo $$; for d in /proc/[0-9]*; do echo ${d#/proc/}; done",
        ],
    ))
    .await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines, ["1", "1"], "its own PID, then the PIDs /proc lists");
}

#[tokio::test]
async fn a_bind_mounted_host_dir_appears_at_its_target_and_writes_reach_the_host_dir() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let volume = dir.path().join("volume");
    std::fs::create_dir(&volume).unwrap();
    std::fs::write(volume.join("in"), "from the host\n").unwrap();
    let mut spec = spec(
        dir.path(),
        &[
            "sh",
            "-c",
            "cat /data/volume/in && echo from the container > /data/volume/out",
        ],
    );
    spec.binds.push(Bind {
        host: volume.clone(),
        target: "/data/volume".into(),
        read_only: false,
    });
    let out = run(&spec).await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "from the host\n");
    assert_eq!(
        std::fs::read_to_string(volume.join("out")).unwrap(),
        "from the container\n"
    );
}

#[tokio::test]
async fn a_read_only_bind_refuses_writes() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let volume = dir.path().join("volume");
    std::fs::create_dir(&volume).unwrap();
    std::fs::write(volume.join("in"), "readable\n").unwrap();
    let mut spec = spec(dir.path(), &["sh", "-c", "cat /ro/in; echo x > /ro/out"]);
    spec.binds.push(Bind {
        host: volume.clone(),
        target: "/ro".into(),
        read_only: true,
    });
    let out = run(&spec).await;
    assert_eq!(out.stdout, "readable\n");
    assert_ne!(out.code, 0, "writing to a read-only bind succeeded");
    assert!(
        out.stderr.contains("Read-only file system"),
        "stderr: {}",
        out.stderr
    );
    assert!(!volume.join("out").exists());
}

#[tokio::test]
async fn writes_outside_binds_land_in_the_layer_and_not_on_the_host() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = unique("conformance-node-written");
    let script = format!(
        "echo in-etc > /etc/{name} && mkdir /{name} && echo at-root > /{name}/f && cat /etc/{name}"
    );
    let spec = spec(dir.path(), &["sh", "-c", &script]);
    let out = run(&spec).await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "in-etc\n");
    assert!(
        !Path::new("/etc").join(&name).exists(),
        "the write reached the host's /etc"
    );
    assert!(
        !Path::new("/").join(&name).exists(),
        "the write reached the host's root"
    );
    let in_layer = files_named(&spec.layer, &name);
    let contents: Vec<String> = in_layer
        .iter()
        .filter(|p| p.is_file())
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert_eq!(
        contents,
        ["in-etc\n"],
        "the /etc file in the layer: {in_layer:?}"
    );
    assert!(
        in_layer.iter().any(|p| p.join("f").is_file()),
        "{in_layer:?}"
    );
}

#[tokio::test]
async fn files_under_base_dirs_are_visible_and_output_is_captured() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = run(&spec(
        dir.path(),
        &["/bin/sh", "-c", "echo hi; echo oops >&2"],
    ))
    .await;
    assert_eq!(out.code, 0);
    assert_eq!(out.stdout, "hi\n");
    assert_eq!(out.stderr, "oops\n");
}

#[tokio::test]
async fn the_environment_is_exactly_the_given_one_and_the_hostname_and_workdir_are_set() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(
        dir.path(),
        &[
            "sh",
            "-c",
            "pwd; cat /proc/sys/kernel/hostname; echo $GREETING; env | sort",
        ],
    );
    spec.env.push(("GREETING".into(), "hello there".into()));
    spec.hostname = Some("pod-a".into());
    spec.workdir = Some("/srv/app".into());
    let out = run(&spec).await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[..3], ["/srv/app", "pod-a", "hello there"]);
    // The shell adds PWD (and may add SHLVL and _); nothing of the harness's environment leaks.
    let env: Vec<&str> = lines[3..]
        .iter()
        .copied()
        .filter(|l| !l.starts_with("PWD=") && !l.starts_with("SHLVL=") && !l.starts_with("_="))
        .collect();
    assert_eq!(
        env,
        ["GREETING=hello there", &format!("PATH={DEFAULT_PATH}")]
    );
}

#[tokio::test]
async fn the_process_runs_as_the_given_user() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(
        dir.path(),
        &[
            "sh",
            "-c",
            "id -u; id -g; id -G; echo x > /tmp/mine && echo /tmp is writable",
        ],
    );
    spec.user = Some((65534, 65533));
    let out = run(&spec).await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "65534\n65533\n65533\n/tmp is writable\n");
}

#[tokio::test]
async fn exit_codes_are_reported_and_a_killed_process_exits_with_128_plus_9() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = run(&spec(dir.path(), &["sh", "-c", "exit 3"])).await;
    assert_eq!(out.code, 3);

    let dir = tempfile::tempdir().unwrap();
    let mut p = Process::spawn(&spec(dir.path(), &["sleep", "1000"]), Stdio::Log).unwrap();
    assert!(Path::new(&format!("/proc/{}", p.pid())).exists());
    p.kill();
    assert_eq!(wait(&mut p).await, 128 + 9);
    // A second wait answers the same.
    assert_eq!(p.wait().await, 128 + 9);
}

#[tokio::test]
async fn terminate_reaches_a_process_that_traps_sigterm() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut p, mut stdout) = spawn_log(&spec(
        dir.path(),
        &[
            "sh",
            "-c",
            "trap 'exit 7' TERM; echo ready; sleep 1000 & wait",
        ],
    ));
    await_line(&mut stdout, "ready").await;
    p.terminate();
    assert_eq!(wait(&mut p).await, 7);
}

#[tokio::test]
async fn killing_pid_1_kills_its_children() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut p, mut stdout) = spawn_log(&spec(
        dir.path(),
        &["sh", "-c", "sleep 1000 & echo started; wait"],
    ));
    await_line(&mut stdout, "started").await;
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", p.pid()))
        .expect("reading PID 1's children");
    let sleep: u32 = children
        .split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("PID 1 has no children: {children:?}"))
        .parse()
        .unwrap();
    // PID 1's only child is the background job (it may not have exec'd sleep yet).
    let sleep_fd = pidfd_open(sleep).expect("a pidfd for the background sleep");
    assert!(
        !exited_within(&sleep_fd, Duration::ZERO),
        "the background sleep (host PID {sleep}) exited before PID 1 was killed"
    );
    p.kill();
    assert_eq!(wait(&mut p).await, 128 + 9);
    assert!(
        exited_within(&sleep_fd, DEADLINE),
        "awaited the exit of the background sleep (host PID {sleep}); it is still running"
    );
}

/// Whether the process of `pidfd` exits within `deadline`.
fn exited_within(pidfd: &OwnedFd, deadline: Duration) -> bool {
    let mut poll = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = deadline.as_millis() as c_int;
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut poll, 1, ms) == 1 }
}

#[tokio::test]
async fn exec_in_sees_the_containers_files_hostname_and_processes_with_stdin_stdout_and_its_exit_code()
 {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(
        dir.path(),
        &[
            "sh",
            "-c",
            "echo from-main > /marker; echo ready; sleep 1000 & wait",
        ],
    );
    spec.hostname = Some("pod-b".into());
    spec.workdir = Some("/srv".into());
    let (mut main, mut stdout) = spawn_log(&spec);
    await_line(&mut stdout, "ready").await;

    let script = "cat /marker; cat /proc/sys/kernel/hostname; pwd; \
                  grep -q from-main /proc/1/cmdline && echo pid-1-is-main; \
                  read line; echo got:$line; echo err >&2; exit 4";
    let argv: Vec<String> = ["sh", "-c", script].iter().map(|s| (*s).into()).collect();
    let env = vec![("PATH".into(), DEFAULT_PATH.into())];
    let mut exec = Process::exec_in(&main, &argv, &env, None, Stdio::Interactive)
        .unwrap_or_else(|e| panic!("exec in the container: {e}"));
    let mut stdin = exec.stdin.take().expect("stdin is piped");
    tokio::time::timeout(DEADLINE, stdin.write_all(b"hello\n"))
        .await
        .expect("awaited writing to the exec's stdin")
        .unwrap();
    drop(stdin);
    let out = output(exec).await;
    assert_eq!(
        out.stdout,
        "from-main\npod-b\n/srv\npid-1-is-main\ngot:hello\n"
    );
    assert_eq!(out.stderr, "err\n");
    assert_eq!(out.code, 4);

    main.kill();
    assert_eq!(wait(&mut main).await, 128 + 9);
}

#[tokio::test]
async fn a_binary_under_a_bind_runs_by_name() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    let name = unique("conformance-echo");
    let echo = Path::new("/bin/echo").canonicalize().unwrap();
    std::fs::copy(&echo, tools.join(&name)).unwrap();
    let mut spec = spec(dir.path(), &[&name, "from", "the bind"]);
    spec.binds.push(Bind {
        host: tools.join(&name),
        target: Path::new("/usr/local/bin").join(&name),
        read_only: true,
    });
    let out = run(&spec).await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "from the bind\n");
    assert!(!Path::new("/usr/local/bin").join(&name).exists());
}

#[tokio::test]
async fn a_program_missing_from_path_is_an_error_naming_it() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let err = Process::spawn(&spec(dir.path(), &["no-such-program"]), Stdio::Log)
        .expect_err("starting a missing program failed");
    let message = err.to_string();
    assert!(
        message.contains("no-such-program") && message.contains("/usr/local/sbin"),
        "{message}"
    );
}

/// A fresh network namespace, held by a descriptor only.
fn new_netns() -> NetNs {
    std::thread::spawn(|| {
        // SAFETY: unshare on this thread only; the thread ends right after.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            panic!("unshare(CLONE_NEWNET): {}", io::Error::last_os_error());
        }
        let ns = std::fs::File::open("/proc/thread-self/ns/net").unwrap();
        NetNs(OwnedFd::from(ns))
    })
    .join()
    .unwrap()
}

#[tokio::test]
async fn the_process_joins_the_given_network_namespace() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path(), &["cat", "/proc/net/dev"]);
    spec.netns = Some(Arc::new(new_netns()));
    let out = run(&spec).await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    let interfaces: Vec<&str> = out
        .stdout
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(interfaces, ["lo"], "{}", out.stdout);
}

/// Set in the test binary run as a harness that gets killed: the directory for its container.
const HARNESS_CHILD: &str = "CONFORMANCE_NODE_KILLED_HARNESS_DIR";

#[tokio::test]
async fn containers_die_with_the_harness() {
    if let Some(dir) = std::env::var_os(HARNESS_CHILD) {
        // The harness that gets killed: it starts a container as root and one as another user
        // (changing user clears a process's request for a signal when its parent dies), says
        // their PIDs and waits.
        let root = Process::spawn(
            &spec(&Path::new(&dir).join("root"), &["sleep", "1000"]),
            Stdio::Log,
        )
        .unwrap();
        let mut nobody = spec(&Path::new(&dir).join("nobody"), &["sleep", "1000"]);
        nobody.user = Some((65534, 65534));
        let nobody = Process::spawn(&nobody, Stdio::Log).unwrap();
        println!("container-pids {} {}", root.pid(), nobody.pid());
        std::future::pending::<()>().await;
    }
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut harness = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "process::tests::containers_die_with_the_harness",
            "--nocapture",
        ])
        .env(HARNESS_CHILD, dir.path())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(harness.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let pids = tokio::time::timeout(DEADLINE, async {
        while let Ok(Some(line)) = stdout.next_line().await {
            if let Some(pids) = line.strip_prefix("container-pids ") {
                return pids
                    .split(' ')
                    .map(str::parse::<u32>)
                    .collect::<Result<Vec<_>, _>>()
                    .ok();
            }
            seen.push(line);
        }
        None
    })
    .await;
    let Ok(Some(pids)) = pids else {
        panic!("awaited the killed harness's container PIDs; its output: {seen:?}");
    };
    let containers: Vec<OwnedFd> = pids
        .iter()
        .map(|pid| pidfd_open(*pid).expect("a pidfd for a container process"))
        .collect();
    for (pid, container) in pids.iter().zip(&containers) {
        assert!(
            !exited_within(container, Duration::ZERO),
            "container process {pid} is gone"
        );
    }
    harness.kill().await.unwrap();
    for (pid, container) in pids.iter().zip(&containers) {
        assert!(
            exited_within(container, DEADLINE),
            "awaited the exit of container process {pid} after its harness was killed; it runs on"
        );
    }
}

#[tokio::test]
async fn the_container_sees_the_hosts_dev_and_a_read_only_sys() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Every mount at or under /sys (the host's has several) must be read-only.
    let script = r#"echo to-null > /dev/null && echo dev works
                    awk '$2 == "/sys" { n++ } END { print n " mount at /sys" }' /proc/mounts
                    awk '$2 ~ "^/sys" && $4 !~ /^ro(,|$)/ { print "writable: " $2 }' /proc/mounts"#;
    let out = run(&spec(dir.path(), &["sh", "-c", script])).await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "dev works\n1 mount at /sys\n");
}

#[tokio::test]
async fn base_entries_that_are_symlinks_stay_symlinks_and_bring_their_targets() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path(), &["/bin/sh", "-c", "readlink /bin; echo ran"]);
    // Only the top-level entries: on a merged-/usr host all three are symlinks into /usr.
    spec.base = ["/bin", "/lib", "/lib64"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let out = run(&spec).await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    let host_link = std::fs::read_link("/bin")
        .map(|t| format!("{}\n", t.display()))
        .unwrap_or_default();
    assert_eq!(out.stdout, format!("{host_link}ran\n"));
}

#[tokio::test]
async fn a_bind_onto_a_symlink_of_the_image_replaces_it_in_the_layer_only() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // An image directory whose file is a symlink to a path the container lacks (as
    // /etc/resolv.conf often is), with a bind for that file.
    let image = dir.path().join("image");
    std::fs::create_dir(&image).unwrap();
    std::os::unix::fs::symlink("/run/missing/resolv.conf", image.join("resolv.conf")).unwrap();
    let file = dir.path().join("resolv.conf");
    std::fs::write(&file, "nameserver 10.96.0.10\n").unwrap();
    let target = image.join("resolv.conf");
    let script = format!("cat {}", target.display());
    let mut spec = spec(dir.path(), &["sh", "-c", &script]);
    spec.base.push(image.clone());
    spec.binds.push(Bind {
        host: file,
        target: target.clone(),
        read_only: true,
    });
    let out = run(&spec).await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "nameserver 10.96.0.10\n");
    assert_eq!(
        std::fs::read_link(&target).unwrap(),
        Path::new("/run/missing/resolv.conf"),
        "the image's symlink on the host is unchanged"
    );
}

#[tokio::test]
async fn a_container_has_the_top_level_directories_of_a_minimal_image() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = run(&spec(
        dir.path(),
        &[
            "/bin/sh",
            "-c",
            "mkdir /run/netns && touch /var/tmp/x && ls -d /var/run/netns /root /home",
        ],
    ))
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "/home\n/root\n/var/run/netns\n");
}

#[tokio::test]
async fn containers_of_a_pod_that_shares_its_pid_namespace_see_each_other_behind_a_pause_process() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pod = Arc::new(PodPidNs::create().expect("a pod PID namespace"));
    let mut first = spec(
        &dir.path().join("first"),
        &["sh", "-c", "echo $$; exec sleep 60"],
    );
    first.pid_ns = Some(pod.clone());
    let (mut sleeper, mut sleeper_out) = spawn_log(&first);
    let mut own_pid = String::new();
    tokio::time::timeout(DEADLINE, sleeper_out.read_line(&mut own_pid))
        .await
        .expect("the first container says its PID")
        .unwrap();
    let own_pid = own_pid.trim().to_string();
    assert_ne!(own_pid, "1", "PID 1 is the pod's pause process");

    let mut second = spec(
        &dir.path().join("second"),
        &[
            "sh",
            "-c",
            "for d in /proc/[0-9]*; do echo ${d#/proc/}; done",
        ],
    );
    second.pid_ns = Some(pod.clone());
    let out = run(&second).await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    let pids: Vec<&str> = out.stdout.lines().collect();
    assert!(
        pids.contains(&"1") && pids.contains(&own_pid.as_str()),
        "the second container sees the pause process and the first container's {own_pid}: {pids:?}"
    );

    // The namespace ends with the pod: what is left in it is killed.
    drop((first, second, pod));
    assert_eq!(wait(&mut sleeper).await, 128 + libc::SIGKILL);
}

/// The libc functions libfaketime 0.9.10 interposes (docs/upstream-facts.md F13.1).
const INTERPOSED: &[&str] = &[
    "alarm",
    "clock_gettime",
    "clock_nanosleep",
    "epoll_pwait",
    "epoll_wait",
    "fstat",
    "ftime",
    "futimens",
    "getentropy",
    "getpid",
    "getrandom",
    "gettimeofday",
    "lstat",
    "nanosleep",
    "poll",
    "ppoll",
    "pselect",
    "pthread_cond_timedwait",
    "select",
    "sem_timedwait",
    "sleep",
    "stat",
    "time",
    "timer_gettime",
    "timer_settime",
    "timerfd_gettime",
    "timerfd_settime",
    "timespec_get",
    "usleep",
    "utime",
    "utimensat",
    "utimes",
];

#[test]
fn nothing_between_fork_and_exec_calls_a_function_libfaketime_interposes() {
    let source = include_str!("../process.rs");
    let after_fork = source
        .split_once("// ---- After the fork: system calls only ----")
        .and_then(|(_, rest)| rest.split_once("#[cfg(test)]"))
        .map(|(code, _)| code)
        .expect("process.rs has its after-the-fork section before its tests");
    let called: Vec<&str> = INTERPOSED
        .iter()
        .copied()
        .filter(|f| after_fork.contains(&format!("libc::{f}(")))
        .collect();
    assert!(
        called.is_empty(),
        "called between fork and exec, interposed by libfaketime: {called:?}"
    );
}
