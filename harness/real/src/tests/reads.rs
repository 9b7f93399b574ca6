//! The pure reads over gRPC (`reads.rs`) against the tonic gateway stand-in of the watcher's
//! tests: the same view as the real v0.0.111 CLI prints for the same sandbox, no CLI process
//! while the gateway serves, the CLI when it refuses (for the case, or for one `Unavailable`
//! read), and the timeline naming the source each time it changes.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use conformance_core::phase::Phase;
use conformance_core::target::{SandboxView, TargetError};
use conformance_core::timeline::{Event, GATEWAY_SANDBOX_KIND, Recorder};
use conformance_openshell_api::v1::{SandboxCondition, SandboxPhase};
use conformance_testtools::{Tool, require};
use tonic::Code;

use super::notes;
use super::watch::{Gateway, LABEL, RUN, Relay, pki, sandbox, serve, server_tls};
use crate::cli::OpenShellCli;
use crate::command::{CmdOutput, CommandRunner, ScriptedRunner, SystemRunner, Unscripted};
use crate::reads::{GRPC_SOURCE, GatewayReads, READ_SOURCE_KEY, cli_source};
use crate::watch::{ConnectError, GatewayEndpoint};

/// The sources the timeline names for the reads, in order.
fn sources(rec: &Recorder) -> Vec<String> {
    rec.snapshot()
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Observation {
                key,
                subject: Some(subject),
                value,
            } if key == READ_SOURCE_KEY && subject == GATEWAY_SANDBOX_KIND => {
                value.as_str().map(str::to_string)
            }
            _ => None,
        })
        .collect()
}

/// A CLI over recorded outputs; a command without one fails the read that ran it.
fn scripted() -> (ScriptedRunner, OpenShellCli) {
    let r = ScriptedRunner::new(Unscripted::Fail);
    let cli = OpenShellCli::new(Arc::new(r.clone()), "openshell", "/run/xdg".into(), "gw");
    (r, cli)
}

fn plain(port: u16) -> Result<GatewayEndpoint, ConnectError> {
    Ok(GatewayEndpoint { port, tls: None })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_reads_the_same_through_grpc_as_through_the_real_cli() {
    let test = "a_sandbox_reads_the_same_through_grpc_as_through_the_real_cli";
    let Some(bin) = require(Tool::OpenshellCli, test) else {
        return;
    };
    let gw = Gateway::default();
    let addr = serve(gw.clone(), None).await;
    // Every phase v0.0.111 declares and one it does not (42). Completed (9) is left out:
    // v0.0.111 never sends it (docs/upstream-facts.md F7.6) and its CLI does not know the name.
    // Each carries what the CLI does not print (F6.4): an exit code, a restart count and the
    // Ready condition's cause.
    let mut names = Vec::new();
    for value in (0..=8).chain([42]) {
        let name = format!("s{value}");
        let mut s = sandbox(&name, &LABEL, SandboxPhase::Unspecified);
        s.metadata.as_mut().unwrap().workspace = "default".into();
        let st = s.status.as_mut().unwrap();
        st.phase = value;
        st.exit_code = Some(3);
        st.restart_count = 2;
        st.conditions = vec![SandboxCondition {
            r#type: "Ready".into(),
            status: "False".into(),
            reason: "MainProcessExited".into(),
            message: "exited with 3".into(),
            ..Default::default()
        }];
        gw.put(s);
        names.push(name);
    }
    // No status at all.
    let mut bare = sandbox("bare", &LABEL, SandboxPhase::Unspecified);
    bare.status = None;
    gw.put(bare);
    names.push("bare".into());
    gw.put(sandbox(
        "foreign",
        &[("openshell-conformance.io/run", "r0")],
        SandboxPhase::Ready,
    ));

    let home = crate::tests::private_tempdir();
    let cli = OpenShellCli::new(
        Arc::new(SystemRunner),
        bin.to_str().unwrap(),
        home.path().to_path_buf(),
        "proof",
    );
    cli.prepare_home().unwrap();
    let add = SystemRunner
        .run(&cli.gateway_add_cmd(addr.port(), false))
        .await
        .unwrap();
    assert!(add.success(), "gateway add: {add:?}");
    let rec = Recorder::new();
    let reads = GatewayReads::open(plain(addr.port()), RUN, cli.clone(), rec.clone()).await;

    for name in names.iter().map(String::as_str).chain(["missing"]) {
        let calls = gw.get_calls.load(Ordering::SeqCst);
        let by_cli = cli.get(name).await.unwrap();
        let mut by_grpc = reads.get(name).await.unwrap();
        // The gRPC read also carries the Ready condition's cause, which the CLI's JSON lacks
        // (F6.4); apart from it the two agree.
        if let Some(v) = by_grpc.as_mut() {
            let has_condition = name != "bare";
            assert_eq!(
                (v.reason.take(), v.message.take()),
                if has_condition {
                    (
                        Some("MainProcessExited".into()),
                        Some("exited with 3".into()),
                    )
                } else {
                    (None, None)
                },
                "sandbox {name}"
            );
        }
        assert_eq!(by_grpc, by_cli, "sandbox {name}");
        assert_eq!(by_cli.is_some(), name != "missing", "sandbox {name}");
        // Both asked the gateway: the comparison is not the CLI against itself.
        assert!(
            gw.get_calls.load(Ordering::SeqCst) >= calls + 2,
            "sandbox {name}: each source asked the gateway"
        );
    }
    let by_cli: Vec<_> = cli.list(Some(RUN)).await.unwrap();
    let by_grpc: Vec<_> = reads.list(RUN).await.unwrap();
    let views = |l: &[crate::cli::SandboxJson]| {
        let without_cause = |s: &crate::cli::SandboxJson| SandboxView {
            reason: None,
            message: None,
            ..s.view()
        };
        let mut v: Vec<_> = l.iter().map(|s| (s.id.clone(), without_cause(s))).collect();
        v.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        v
    };
    assert_eq!(views(&by_grpc), views(&by_cli));
    assert_eq!(by_grpc.len(), names.len());
    assert_eq!(sources(&rec), [GRPC_SOURCE]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_over_grpc_without_a_cli_process_and_the_timeline_says_so() {
    let gw = Gateway::default();
    let addr = serve(gw.clone(), None).await;
    gw.put(sandbox("a", &LABEL, SandboxPhase::Ready));
    let (runner, cli) = scripted();
    let rec = Recorder::new();
    let reads = GatewayReads::open(plain(addr.port()), RUN, cli, rec.clone()).await;
    let a = reads.get("a").await.unwrap().unwrap();
    assert_eq!((a.name.as_str(), a.phase), ("a", Phase::Ready));
    assert_eq!(reads.get("gone").await.unwrap(), None);
    let list = reads.list(RUN).await.unwrap();
    assert_eq!(list.len(), 1);
    reads.check_access(RUN).await.unwrap();
    assert!(runner.lines().is_empty(), "CLI calls: {:?}", runner.lines());
    assert_eq!(sources(&rec), [GRPC_SOURCE]);
    assert!(
        notes(&rec)
            .iter()
            .any(|n| n == &format!("the gateway's sandboxes are read with {GRPC_SOURCE}")),
        "notes: {:?}",
        notes(&rec)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_refuses_get_sandbox_leaves_the_reads_to_the_cli_for_the_case() {
    let gw = Gateway::default();
    let addr = serve(gw.clone(), None).await;
    gw.put(sandbox("a", &LABEL, SandboxPhase::Ready));
    gw.get_answers
        .lock()
        .unwrap()
        .push_back((Code::Unimplemented, "GetSandbox is not served here".into()));
    let (runner, cli) = scripted();
    runner.respond(
        "openshell sandbox get a",
        CmdOutput::ok(r#"{"id":"id-a","name":"a","phase":"Stopped"}"#),
    );
    let rec = Recorder::new();
    let reads = GatewayReads::open(plain(addr.port()), RUN, cli, rec.clone()).await;
    for _ in 0..2 {
        let a = reads.get("a").await.unwrap().unwrap();
        // What the CLI said, not the gateway's store.
        assert_eq!(a.phase, Phase::Stopped);
    }
    assert_eq!(
        gw.get_calls.load(Ordering::SeqCst),
        1,
        "asked once, then left"
    );
    assert_eq!(runner.lines().len(), 2, "{:?}", runner.lines());
    let why = "GetSandbox: Unimplemented: GetSandbox is not served here";
    assert_eq!(sources(&rec), [GRPC_SOURCE.to_string(), cli_source(why)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_answer_sends_that_read_to_the_cli_and_the_next_one_to_grpc() {
    let gw = Gateway::default();
    let addr = serve(gw.clone(), None).await;
    gw.put(sandbox("a", &LABEL, SandboxPhase::Ready));
    gw.get_answers
        .lock()
        .unwrap()
        .push_back((Code::Unavailable, "compute driver is not ready".into()));
    let (runner, cli) = scripted();
    runner.respond(
        "openshell sandbox get a",
        CmdOutput::ok(r#"{"id":"id-a","name":"a","phase":"Provisioning"}"#),
    );
    let rec = Recorder::new();
    let reads = GatewayReads::open(plain(addr.port()), RUN, cli, rec.clone()).await;
    let first = reads.get("a").await.unwrap().unwrap();
    let second = reads.get("a").await.unwrap().unwrap();
    assert_eq!(
        (first.phase, second.phase),
        (Phase::Provisioning, Phase::Ready)
    );
    assert_eq!(runner.lines().len(), 1, "{:?}", runner.lines());
    assert_eq!(
        sources(&rec),
        [
            GRPC_SOURCE.to_string(),
            cli_source("GetSandbox: Unavailable: compute driver is not ready"),
            GRPC_SOURCE.to_string()
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_other_answers_read_as_the_cli_reports_them() {
    let gw = Gateway::default();
    let addr = serve(gw.clone(), None).await;
    gw.put(sandbox("a", &LABEL, SandboxPhase::Ready));
    {
        let mut answers = gw.get_answers.lock().unwrap();
        answers.push_back((Code::FailedPrecondition, "sandbox is being deleted".into()));
        // The CLI reads any failure that says "not found" as no sandbox (`cli.rs` `not_found`).
        answers.push_back((Code::Internal, "workspace not found".into()));
    }
    let (runner, cli) = scripted();
    let rec = Recorder::new();
    let reads = GatewayReads::open(plain(addr.port()), RUN, cli, rec.clone()).await;
    assert_eq!(
        reads.get("a").await.unwrap_err(),
        TargetError::refused("FailedPrecondition", "sandbox is being deleted")
    );
    assert_eq!(reads.get("a").await.unwrap(), None);
    assert!(runner.lines().is_empty(), "CLI calls: {:?}", runner.lines());
    assert_eq!(sources(&rec), [GRPC_SOURCE]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_the_gateway_does_not_trust_reads_through_the_cli_and_says_why() {
    let p = pki();
    let other = pki();
    let gw = Gateway::default();
    let addr = serve(gw.clone(), Some(server_tls(&p))).await;
    gw.put(sandbox("a", &LABEL, SandboxPhase::Ready));
    // A client certificate from another CA: the gateway ends the handshake.
    let (runner, cli) = scripted();
    runner.respond(
        "openshell sandbox get a",
        CmdOutput::ok(r#"{"id":"id-a","name":"a","phase":"Ready"}"#),
    );
    let rec = Recorder::new();
    let mut client = other.client.clone();
    client.ca = p.client.ca.clone();
    let endpoint = Ok(GatewayEndpoint {
        port: addr.port(),
        tls: Some(client),
    });
    let reads = GatewayReads::open(endpoint, RUN, cli, rec.clone()).await;
    assert_eq!(reads.get("a").await.unwrap().unwrap().phase, Phase::Ready);
    assert_eq!(runner.lines().len(), 1, "{:?}", runner.lines());
    assert_eq!(gw.get_calls.load(Ordering::SeqCst), 0);
    let s = sources(&rec);
    assert_eq!(s.len(), 1, "{s:?}");
    assert!(
        s[0].starts_with("`openshell sandbox get` and `sandbox list` because ListSandboxes: "),
        "the source names the CLI and the failed call: {}",
        s[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_the_clients_certificate_carries_the_reads() {
    let p = pki();
    let gw = Gateway::default();
    let addr = serve(gw.clone(), Some(server_tls(&p))).await;
    gw.put(sandbox("a", &LABEL, SandboxPhase::Stopped));
    let (runner, cli) = scripted();
    let rec = Recorder::new();
    let endpoint = Ok(GatewayEndpoint {
        port: addr.port(),
        tls: Some(p.client.clone()),
    });
    let reads = GatewayReads::open(endpoint, RUN, cli, rec.clone()).await;
    assert_eq!(reads.get("a").await.unwrap().unwrap().phase, Phase::Stopped);
    assert!(runner.lines().is_empty(), "CLI calls: {:?}", runner.lines());
    assert_eq!(sources(&rec), [GRPC_SOURCE]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_client_certificate_reads_through_the_cli_and_says_why() {
    let (runner, cli) = scripted();
    runner.respond("openshell sandbox list", CmdOutput::ok("[]"));
    let rec = Recorder::new();
    let unreadable = ConnectError::Certificate {
        path: "/x/ca.crt".into(),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "not there"),
    };
    let why = "read the client certificate /x/ca.crt: not there";
    assert_eq!(unreadable.reason(), why);
    let reads = GatewayReads::open(Err(unreadable), RUN, cli, rec.clone()).await;
    assert!(reads.list(RUN).await.unwrap().is_empty());
    assert_eq!(runner.lines().len(), 1, "{:?}", runner.lines());
    assert_eq!(sources(&rec), [cli_source(why)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_while_the_gateway_is_out_of_reach_fails_as_the_clis_would_and_the_next_goes_over_grpc()
 {
    let gw = Gateway::default();
    let addr = serve(gw.clone(), None).await;
    let relay = Relay::start(addr).await;
    gw.put(sandbox("a", &LABEL, SandboxPhase::Ready));
    let (runner, cli) = scripted();
    let rec = Recorder::new();
    let reads = GatewayReads::open(plain(relay.port), RUN, cli, rec.clone()).await;
    assert!(reads.get("a").await.unwrap().is_some());
    relay.cut();
    // The CLI's own connection would not get through either: an infrastructure failure, not a
    // refusal, and no second wait on the CLI.
    let err = reads.get("a").await.unwrap_err();
    assert!(
        matches!(&err, TargetError::Infra { message, .. } if message.starts_with("GetSandbox: the gateway did not answer")),
        "{err:?}"
    );
    assert!(runner.lines().is_empty(), "CLI calls: {:?}", runner.lines());
    relay.heal();
    gw.set_phase("a", SandboxPhase::Stopped);
    assert_eq!(reads.get("a").await.unwrap().unwrap().phase, Phase::Stopped);
    assert!(runner.lines().is_empty(), "CLI calls: {:?}", runner.lines());
    assert_eq!(sources(&rec), [GRPC_SOURCE]);
}
