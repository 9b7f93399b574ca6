use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use super::{NodeNetwork, PodNetwork, in_netns, ip_program, run_ip, unsupported};

const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
const DEADLINE: Duration = Duration::from_secs(10);

/// Whether pod networks can be made here; otherwise says why (and fails in CI).
fn supported() -> bool {
    match unsupported() {
        None => true,
        Some(reason) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("pod networks must work in CI: {reason}")
        }
        Some(reason) => {
            eprintln!("skipped: {reason}");
            false
        }
    }
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done within {DEADLINE:?}"))
}

fn node(ip: Ipv4Addr) -> NodeNetwork {
    NodeNetwork::create(ip, 24).unwrap_or_else(|e| panic!("creating node network {ip}/24: {e}"))
}

fn pod(node: &NodeNetwork, ip: Ipv4Addr) -> PodNetwork {
    node.add_pod(ip)
        .unwrap_or_else(|e| panic!("adding pod {ip} to node {}: {e}", node.node_ip()))
}

/// A listener made inside the pod's namespace, as a container process's would be.
fn listen_in_pod(pod: &PodNetwork, port: u16) -> TcpListener {
    let ns = pod.netns();
    let listener = in_netns(ns.as_fd(), || std::net::TcpListener::bind((pod.ip(), port)))
        .expect("entering the pod namespace")
        .unwrap_or_else(|e| panic!("binding {}:{port} in the pod namespace: {e}", pod.ip()));
    listener.set_nonblocking(true).expect("non-blocking");
    TcpListener::from_std(listener).expect("registering the pod's listener")
}

/// A connection made from inside the pod's namespace, as a container process's would be.
async fn connect_from_pod(pod: &PodNetwork, addr: SocketAddr) -> TcpStream {
    let ns = pod.netns();
    let socket = in_netns(ns.as_fd(), TcpSocket::new_v4)
        .expect("entering the pod namespace")
        .expect("creating a socket in the pod namespace");
    within(
        &format!("pod {} connecting to {addr}", pod.ip()),
        socket.connect(addr),
    )
    .await
    .unwrap_or_else(|e| panic!("pod {} connecting to {addr}: {e}", pod.ip()))
}

/// Accepts one connection, answers `reply` and returns the peer's address.
fn answer_once(listener: TcpListener, reply: &str) -> tokio::task::JoinHandle<SocketAddr> {
    let reply = reply.to_owned();
    tokio::spawn(async move {
        let at = listener.local_addr().expect("listener address");
        let (mut stream, peer) = within(&format!("a connection to {at}"), listener.accept())
            .await
            .unwrap_or_else(|e| panic!("accepting on {at}: {e}"));
        stream.write_all(reply.as_bytes()).await.expect("answering");
        stream.shutdown().await.expect("closing");
        peer
    })
}

async fn read_reply(mut stream: TcpStream) -> String {
    let mut reply = String::new();
    within("the reply", stream.read_to_string(&mut reply))
        .await
        .expect("reading the reply");
    reply
}

async fn served_by(server: tokio::task::JoinHandle<SocketAddr>, what: &str) -> SocketAddr {
    within(what, server).await.expect("the server task")
}

/// The links of a namespace, as `ip link show` prints them.
fn links(ns: &crate::NetNs) -> String {
    run_ip(ip_program().expect("ip"), ns, &["link show"]).expect("listing links")
}

#[tokio::test]
async fn a_listener_in_a_pod_is_reachable_from_the_node_at_the_pod_ip() {
    if !supported() {
        return;
    }
    let node = node(NODE_IP);
    let pod = pod(&node, Ipv4Addr::new(10, 244, 0, 2));
    let server = answer_once(listen_in_pod(&pod, 8080), "pod here");

    let stream = within(
        "the node connecting to the pod",
        node.connect((pod.ip(), 8080).into()),
    )
    .await
    .expect("the node connecting to 10.244.0.2:8080");

    assert_eq!(read_reply(stream).await, "pod here");
    let peer = served_by(server, "the pod's listener").await;
    assert_eq!(
        peer.ip(),
        NODE_IP,
        "the pod sees the node's address as the peer"
    );
}

#[tokio::test]
async fn connecting_to_a_pod_port_without_a_listener_is_refused() {
    if !supported() {
        return;
    }
    let node = node(NODE_IP);
    let pod = pod(&node, Ipv4Addr::new(10, 244, 0, 2));

    let refused = within(
        "the node connecting to a closed port",
        node.connect((pod.ip(), 8080).into()),
    )
    .await
    .expect_err("nothing listens on 10.244.0.2:8080");

    assert_eq!(
        refused.kind(),
        std::io::ErrorKind::ConnectionRefused,
        "{refused}"
    );
}

#[tokio::test]
async fn a_pod_reaches_a_listener_on_the_node_address() {
    if !supported() {
        return;
    }
    let node = node(NODE_IP);
    let pod = pod(&node, Ipv4Addr::new(10, 244, 0, 7));
    let listener = node
        .listen((NODE_IP, 6443).into())
        .expect("listening on the node address");
    let server = answer_once(listener, "api server");

    let stream = connect_from_pod(&pod, (NODE_IP, 6443).into()).await;

    assert_eq!(read_reply(stream).await, "api server");
    let peer = served_by(server, "the node's listener").await;
    assert_eq!(
        peer.ip(),
        pod.ip(),
        "the node sees the pod's address as the peer"
    );
}

#[tokio::test]
async fn a_pod_reaches_a_service_address_through_its_default_route() {
    if !supported() {
        return;
    }
    let node = node(NODE_IP);
    let pod = pod(&node, Ipv4Addr::new(10, 244, 0, 3));
    // Outside the pod's subnet: only the default route via the node leads there.
    let cluster_ip = Ipv4Addr::new(10, 96, 0, 10);
    node.add_address(cluster_ip).expect("adding the ClusterIP");
    node.add_address(cluster_ip)
        .expect("adding the same ClusterIP again");
    let listener = node
        .listen((cluster_ip, 443).into())
        .expect("listening on the ClusterIP");
    let server = answer_once(listener, "service");

    let stream = connect_from_pod(&pod, (cluster_ip, 443).into()).await;

    assert_eq!(read_reply(stream).await, "service");
    assert_eq!(
        served_by(server, "the ClusterIP's listener").await.ip(),
        pod.ip()
    );
}

#[tokio::test]
async fn two_pods_on_one_node_reach_each_other() {
    if !supported() {
        return;
    }
    let node = node(NODE_IP);
    let client = pod(&node, Ipv4Addr::new(10, 244, 0, 2));
    let server_pod = pod(&node, Ipv4Addr::new(10, 244, 0, 3));
    let server = answer_once(listen_in_pod(&server_pod, 9000), "neighbour");

    let stream = connect_from_pod(&client, (server_pod.ip(), 9000).into()).await;

    assert_eq!(read_reply(stream).await, "neighbour");
    assert_eq!(
        served_by(server, "the second pod's listener").await.ip(),
        client.ip()
    );
}

#[tokio::test]
async fn two_nodes_with_the_same_addresses_keep_their_pods_apart() {
    if !supported() {
        return;
    }
    let pod_ip = Ipv4Addr::new(10, 244, 0, 2);
    let (first, second) = (node(NODE_IP), node(NODE_IP));
    let (first_pod, second_pod) = (pod(&first, pod_ip), pod(&second, pod_ip));
    let first_server = answer_once(listen_in_pod(&first_pod, 8080), "first");
    let second_server = answer_once(listen_in_pod(&second_pod, 8080), "second");
    // The same node address and port, listened on by both nodes at once.
    let _first_api = first
        .listen((NODE_IP, 6443).into())
        .expect("first node's listener");
    let _second_api = second
        .listen((NODE_IP, 6443).into())
        .expect("second node's listener on the same address and port");

    let to_second = within(
        "connecting through the second node",
        second.connect((pod_ip, 8080).into()),
    )
    .await
    .expect("connecting through the second node");
    let to_first = within(
        "connecting through the first node",
        first.connect((pod_ip, 8080).into()),
    )
    .await
    .expect("connecting through the first node");

    assert_eq!(read_reply(to_second).await, "second");
    assert_eq!(read_reply(to_first).await, "first");
    served_by(first_server, "the first node's pod").await;
    served_by(second_server, "the second node's pod").await;
}

#[tokio::test]
async fn dropping_a_pod_network_removes_its_veth_pair() {
    if !supported() {
        return;
    }
    let node = node(NODE_IP);
    let pod = pod(&node, Ipv4Addr::new(10, 244, 0, 2));
    let link = pod.link.clone();
    // A container process would keep the pod's namespace alive past the pod network.
    let pod_ns = pod.netns();
    let node_ns = node.netns();
    assert!(
        links(&node_ns).contains(&format!(" {link}@")),
        "{}",
        links(&node_ns)
    );
    assert!(links(&pod_ns).contains(" eth0@"), "{}", links(&pod_ns));

    drop(pod);

    let (node_links, pod_links) = (links(&node_ns), links(&pod_ns));
    assert!(
        !node_links.contains(&format!(" {link}@")),
        "node links still hold {link}: {node_links}"
    );
    assert!(
        !pod_links.contains(" eth0"),
        "the pod's namespace still has eth0: {pod_links}"
    );
    assert!(pod_links.contains(" lo:"), "{pod_links}");
}

/// The MAC of the node's bridge (its address as the pods' default route sees it).
fn bridge_mac(node: &NodeNetwork) -> String {
    let out = run_ip(ip_program().unwrap(), &node.node.ns, &["link show br0"]).unwrap();
    out.split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .unwrap_or_else(|| panic!("no MAC in {out:?}"))
        .to_string()
}

#[test]
fn the_node_keeps_its_mac_while_pods_come_and_go_so_no_pod_loses_its_route() {
    if !supported() {
        return;
    }
    let node = node(NODE_IP);
    let first = bridge_mac(&node);
    // Each veth has a random MAC; a bridge that took the lowest of its ports' would change
    // with nearly every pod that joins or leaves.
    let mut pods = Vec::new();
    for i in 0..12u8 {
        pods.push(pod(&node, Ipv4Addr::new(10, 244, 0, 10 + i)));
        if i % 3 == 2 {
            pods.remove(0);
        }
        assert_eq!(bridge_mac(&node), first, "after pod change {i}");
    }
}

#[test]
fn a_pod_address_outside_the_node_subnet_or_on_the_node_is_refused() {
    if !supported() {
        return;
    }
    let node = node(NODE_IP);

    for (ip, why) in [
        (
            Ipv4Addr::new(10, 245, 0, 2),
            "the address is outside the node's subnet",
        ),
        (NODE_IP, "that is the node's own address"),
    ] {
        let refused = node
            .add_pod(ip)
            .expect_err("a pod address the node cannot route");
        assert_eq!(
            refused.to_string(),
            format!("adding pod {ip} to node network 10.244.0.1/24: {why}")
        );
    }
}

#[test]
fn a_node_prefix_without_room_for_pods_is_refused() {
    let refused = NodeNetwork::create(NODE_IP, 31).expect_err("a /31 node network");
    assert_eq!(
        refused.to_string(),
        "creating node network 10.244.0.1/31: the prefix must be 1..=30 to leave room for pods"
    );
}
