//! Pod networking: one network namespace per node, one per pod, veth pairs between them.
//!
//! Why this design:
//! - **Every namespace is held by a file descriptor, never by a name** (no `ip netns add`, no
//!   bind mount under `/run/netns`). A namespace lives while its fd or a process in it does, so
//!   a harness that is killed leaves nothing behind, and concurrent test processes never
//!   collide on names.
//! - **Each node has a namespace of its own** holding its bridge, its pods' veth ends and the
//!   Service addresses. Nothing is created in the host's namespace, so two served clusters on one
//!   machine may both use `10.244.0.1/24` and the same ports, and link names (`vp<n>`) need only
//!   be unique within one node.
//! - **Sockets are made on threads that entered the namespace** (a socket stays in the namespace
//!   it was created in, wherever it is used afterwards). A long-lived thread per node makes the
//!   node's sockets; the async runtime's threads never change namespace.
//! - **Links are configured by iproute2's `ip`**, started from a thread inside the namespace (a
//!   child process inherits its parent thread's namespace). A veth pair is created inside the
//!   node namespace with its peer placed directly in the pod namespace by path
//!   (`/proc/<pid>/fd/<n>`), so no link ever exists in the host's namespace.

use std::fmt;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, mpsc};

use rustix::thread::{LinkNameSpaceType, UnshareFlags};
use tokio::net::TcpSocket;

use crate::error::NodeError;

/// A network namespace held open by a file descriptor: it lives while this value (or a process
/// in it) does, so nothing named is left behind if the harness is killed.
#[derive(Debug)]
pub struct NetNs(pub(crate) OwnedFd);

impl AsFd for NetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// The node bridge's name inside the node namespace.
const BRIDGE: &str = "br0";
/// The bridge's MAC: locally administered, fixed (each node has a namespace of its own, so no
/// two bridges share a link).
const BRIDGE_MAC: &str = "02:00:0a:f4:00:01";
/// The pod side of every veth pair, inside the pod namespace.
const POD_LINK: &str = "eth0";

/// Why pod networks cannot be made here (not root, no `ip`, no network namespaces).
///
/// Decided once per process by doing what nodes do (a namespace with a bridge and a veth pair),
/// so the answer is the machine's, not a guess.
pub fn unsupported() -> Option<String> {
    support().err().map(str::to_owned)
}

/// The `ip` program, or why pod networks cannot be made.
fn support() -> Result<&'static Path, &'static str> {
    static SUPPORT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    SUPPORT
        .get_or_init(probe)
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(String::as_str)
}

fn probe() -> Result<PathBuf, String> {
    let root_hint = if rustix::process::geteuid().is_root() {
        ""
    } else {
        " (not running as root: network namespaces and veth pairs need CAP_SYS_ADMIN and \
         CAP_NET_ADMIN)"
    };
    let ip = find_ip().ok_or_else(|| {
        "iproute2's `ip` is not on PATH nor in /usr/sbin or /sbin (install iproute2)".to_owned()
    })?;
    let ns = new_netns().map_err(|e| format!("{e}{root_hint}"))?;
    run_ip(
        &ip,
        &ns,
        &[
            "link add b0 type bridge",
            "link add v0 type veth peer name v1",
            "link set v0 master b0",
        ],
    )
    .map_err(|e| format!("bridges or veth pairs cannot be made: {e}{root_hint}"))?;
    Ok(ip)
}

fn find_ip() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join("ip"))
        .find(|candidate| candidate.is_file())
}

fn ip_program() -> Result<&'static Path, NodeError> {
    support().map_err(|reason| NodeError::Unsupported(reason.to_owned()))
}

/// A new, empty network namespace held by an fd.
fn new_netns() -> Result<NetNs, NodeError> {
    // unshare(CLONE_NEWNET) moves only the calling thread, so a short-lived thread does it and
    // hands back an fd of its namespace; the namespace outlives the thread through that fd.
    std::thread::Builder::new()
        .name("netns-new".into())
        .spawn(|| {
            // SAFETY: only CLONE_NEWNET is unshared; the fd table stays shared with the process
            // (the hazard `unshare_unsafe` guards against is CLONE_FILES).
            unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }
                .map_err(|e| NodeError::io("creating a network namespace", e.into()))?;
            let file = std::fs::File::open("/proc/thread-self/ns/net")
                .map_err(|e| NodeError::io("opening /proc/thread-self/ns/net", e))?;
            Ok(NetNs(OwnedFd::from(file)))
        })
        .map_err(|e| NodeError::io("starting a thread to create a network namespace", e))?
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Runs `f` on a thread inside the network namespace `ns`.
pub(crate) fn in_netns<T: Send>(
    ns: BorrowedFd<'_>,
    f: impl FnOnce() -> T + Send,
) -> Result<T, NodeError> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("netns-enter".into())
            .spawn_scoped(scope, || {
                rustix::thread::move_into_link_name_space(ns, Some(LinkNameSpaceType::Network))
                    .map_err(|e| NodeError::io("entering a network namespace", e.into()))?;
                Ok(f())
            })
            .map_err(|e| NodeError::io("starting a thread to enter a network namespace", e))?
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Runs `commands` as one `ip -batch -` inside `ns` (it stops at the first failing line).
fn run_ip(ip: &Path, ns: &NetNs, commands: &[&str]) -> Result<String, NodeError> {
    let script = commands.join("\n") + "\n";
    let described = || format!("{} -batch - <<< {:?}", ip.display(), script.trim_end());
    let output = in_netns(ns.as_fd(), || {
        let mut child = Command::new(ip)
            .args(["-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        // The script is far smaller than a pipe buffer, so writing before reading cannot block.
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(script.as_bytes())?;
        child.wait_with_output()
    })?
    .map_err(|e| NodeError::io(format!("running `{}`", described()), e))?;
    if !output.status.success() {
        return Err(NodeError::Command {
            command: described(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn invalid(what: String, why: &str) -> NodeError {
    NodeError::io(what, io::Error::new(io::ErrorKind::InvalidInput, why))
}

/// One node's network: a network namespace of its own holding a bridge with the node's address,
/// so several served clusters on one machine never share addresses or ports.
#[derive(Clone)]
pub struct NodeNetwork {
    node: Arc<Node>,
}

struct Node {
    ns: Arc<NetNs>,
    ip: Ipv4Addr,
    prefix: u8,
    /// Jobs for the thread that lives in the node namespace and makes its sockets; it ends
    /// when the last handle to the node is dropped.
    sockets: mpsc::Sender<Box<dyn FnOnce() + Send>>,
    /// Numbers the node-side veth ends (`vp<n>`), unique within this node's namespace.
    next_link: AtomicU64,
}

impl fmt::Debug for NodeNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeNetwork")
            .field("node_ip", &self.node.ip)
            .field("prefix", &self.node.prefix)
            .finish_non_exhaustive()
    }
}

impl NodeNetwork {
    /// A node namespace with a bridge at `node_ip/prefix` (e.g. 10.244.0.1/24).
    ///
    /// Blocks for a few milliseconds (it runs `ip`).
    pub fn create(node_ip: Ipv4Addr, prefix: u8) -> Result<Self, NodeError> {
        if !(1..=30).contains(&prefix) {
            return Err(invalid(
                format!("creating node network {node_ip}/{prefix}"),
                "the prefix must be 1..=30 to leave room for pods",
            ));
        }
        let ip = ip_program()?;
        let ns = new_netns()?;
        run_ip(
            ip,
            &ns,
            &[
                "link set lo up",
                // An address of its own: a bridge without one takes the lowest MAC of its
                // ports, so a pod's veth leaving or joining could change it, and every pod's
                // cached ARP entry for the node (its default route) pointed at a MAC nobody
                // answered until the entry expired, 30-60 s without a route out.
                &format!("link add {BRIDGE} address {BRIDGE_MAC} type bridge"),
                &format!("addr add {node_ip}/{prefix} dev {BRIDGE}"),
                &format!("link set {BRIDGE} up"),
            ],
        )?;
        let sockets = socket_thread(&ns, node_ip)?;
        Ok(Self {
            node: Arc::new(Node {
                ns: Arc::new(ns),
                ip: node_ip,
                prefix,
                sockets,
                next_link: AtomicU64::new(0),
            }),
        })
    }

    pub fn node_ip(&self) -> Ipv4Addr {
        self.node.ip
    }

    /// The node's namespace itself: for a pod on the host network (`hostNetwork: true`), whose
    /// processes see the node's addresses and listeners.
    pub fn netns(&self) -> Arc<NetNs> {
        Arc::clone(&self.node.ns)
    }

    /// A listener inside the node namespace (the API server for pods, Service addresses).
    ///
    /// Like `tokio::net::TcpListener::bind`, it must be called within a tokio runtime.
    pub fn listen(&self, addr: SocketAddr) -> Result<tokio::net::TcpListener, NodeError> {
        let what = || format!("listening on {addr} in node {}'s namespace", self.node.ip);
        let (reply, answer) = mpsc::sync_channel(1);
        self.node.make_socket(addr, move |socket| {
            let _ = reply.send(socket);
        })?;
        let socket = answer
            .recv()
            .map_err(|_| node_thread_gone(self.node.ip))?
            .map_err(|e| NodeError::io(what(), e))?;
        socket
            .set_reuseaddr(true)
            .and_then(|()| socket.bind(addr))
            .and_then(|()| socket.listen(1024))
            .map_err(|e| NodeError::io(what(), e))
    }

    /// A connection made from inside the node namespace (to pod IPs, for port-forward and
    /// Service proxying).
    pub async fn connect(&self, addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.node
            .make_socket(addr, move |socket| {
                let _ = reply.send(socket);
            })
            .map_err(io::Error::other)?;
        let socket = answer
            .await
            .map_err(|_| io::Error::other(node_thread_gone(self.node.ip)))??;
        // It carries port-forward and proxied traffic: small frames must not wait for an ACK.
        socket.set_nodelay(true)?;
        socket.connect(addr).await
    }

    /// Makes `ip` a local address of the node namespace (a Service's ClusterIP). Adding an
    /// address twice is not an error.
    pub fn add_address(&self, ip: Ipv4Addr) -> Result<(), NodeError> {
        // On `lo`, not the bridge: pods send to it through their default route (the node), and
        // the node takes any of its local addresses as its own whichever link a packet came in.
        run_ip(
            ip_program()?,
            &self.node.ns,
            &[&format!("addr replace {ip}/32 dev lo")],
        )?;
        Ok(())
    }

    /// A pod's network namespace: loopback up, `eth0` with `ip` on the bridge, default route
    /// via the node. Removed when the returned value is dropped.
    ///
    /// `ip` must be in the node's subnet and not the node's own address. Blocks for a few
    /// milliseconds (it runs `ip`).
    pub fn add_pod(&self, ip: Ipv4Addr) -> Result<PodNetwork, NodeError> {
        let node = &self.node;
        let what = || {
            format!(
                "adding pod {ip} to node network {}/{}",
                node.ip, node.prefix
            )
        };
        let mask = u32::MAX << (32 - node.prefix);
        if u32::from(ip) & mask != u32::from(node.ip) & mask {
            return Err(invalid(what(), "the address is outside the node's subnet"));
        }
        if ip == node.ip {
            return Err(invalid(what(), "that is the node's own address"));
        }
        let program = ip_program()?;
        let ns = Arc::new(new_netns()?);
        let link = format!("vp{}", node.next_link.fetch_add(1, Ordering::Relaxed));
        let pod_ns_path = format!("/proc/{}/fd/{}", std::process::id(), fd_number(&ns));
        run_ip(
            program,
            &node.ns,
            &[
                &format!("link add {link} type veth peer name {POD_LINK} netns {pod_ns_path}"),
                &format!("link set {link} master {BRIDGE} up"),
            ],
        )?;
        // From here on the link exists, and dropping the pod removes it.
        let pod = PodNetwork {
            ip,
            ns,
            node: Arc::clone(node),
            link,
        };
        run_ip(
            program,
            &pod.ns,
            &[
                "link set lo up",
                &format!("addr add {ip}/{} dev {POD_LINK}", node.prefix),
                &format!("link set {POD_LINK} up"),
                &format!("route add default via {} dev {POD_LINK}", node.ip),
            ],
        )?;
        Ok(pod)
    }
}

fn fd_number(ns: &NetNs) -> i32 {
    use std::os::fd::AsRawFd;
    ns.as_fd().as_raw_fd()
}

fn node_thread_gone(node_ip: Ipv4Addr) -> NodeError {
    NodeError::io(
        format!("making a socket in node {node_ip}'s namespace"),
        io::Error::other("the node namespace's socket thread has stopped"),
    )
}

impl Node {
    /// Creates a socket for `addr`'s family on the node thread and hands it to `reply`.
    fn make_socket(
        &self,
        addr: SocketAddr,
        reply: impl FnOnce(io::Result<TcpSocket>) + Send + 'static,
    ) -> Result<(), NodeError> {
        let job = Box::new(move || {
            reply(match addr.ip() {
                IpAddr::V4(_) => TcpSocket::new_v4(),
                IpAddr::V6(_) => TcpSocket::new_v6(),
            });
        });
        self.sockets
            .send(job)
            .map_err(|_| node_thread_gone(self.ip))
    }
}

/// Starts the thread that stays in the node namespace and runs socket jobs until the node is
/// dropped.
fn socket_thread(
    ns: &NetNs,
    node_ip: Ipv4Addr,
) -> Result<mpsc::Sender<Box<dyn FnOnce() + Send>>, NodeError> {
    let ns =
        ns.0.try_clone()
            .map_err(|e| NodeError::io("duplicating the node namespace's fd", e))?;
    let (jobs, queue) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
    let (started, entered) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name(format!("netns-{node_ip}"))
        .spawn(move || {
            let entered = rustix::thread::move_into_link_name_space(
                ns.as_fd(),
                Some(LinkNameSpaceType::Network),
            );
            drop(ns);
            let ok = entered.is_ok();
            let _ = started.send(entered);
            if ok {
                for job in queue {
                    job();
                }
            }
        })
        .map_err(|e| NodeError::io("starting the node namespace's socket thread", e))?;
    entered
        .recv()
        .map_err(|_| node_thread_gone(node_ip))?
        .map_err(|e| NodeError::io("entering the node namespace", e.into()))?;
    Ok(jobs)
}

/// A pod's network namespace, wired to its node's bridge by a veth pair.
pub struct PodNetwork {
    ip: Ipv4Addr,
    ns: Arc<NetNs>,
    /// Keeps the node (and its namespace, where the veth's other end is) alive while the pod is.
    node: Arc<Node>,
    /// The node-side veth end.
    link: String,
}

impl fmt::Debug for PodNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PodNetwork")
            .field("ip", &self.ip)
            .field("node_ip", &self.node.ip)
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
}

impl PodNetwork {
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }
    pub fn netns(&self) -> Arc<NetNs> {
        Arc::clone(&self.ns)
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        // Deleting one end deletes the pair, so `eth0` leaves the pod's namespace even while
        // processes still hold that namespace.
        let removed = ip_program()
            .and_then(|ip| run_ip(ip, &self.node.ns, &[&format!("link del {}", self.link)]));
        if let Err(error) = removed {
            tracing::warn!(pod_ip = %self.ip, link = %self.link, %error, "removing a pod's veth pair");
        }
    }
}

#[cfg(test)]
mod tests;
