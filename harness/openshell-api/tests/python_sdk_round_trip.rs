//! Our server side speaks the real wire format: a tonic server built from our `.proto` answers
//! the official OpenShell Python SDK's generated stub (`openshell_pb2_grpc.OpenShellStub`,
//! grpcio) over plaintext TCP, and the SDK decodes every answer as upstream's gateway would
//! have sent it; the SDK's requests, including fields we do not declare, decode on our side.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conformance_openshell_api::datamodel::v1::ObjectMeta;
use conformance_openshell_api::v1::{
    CreateSandboxRequest, DeleteSandboxRequest, DeleteSandboxResponse, DeletionOutcome,
    ExecSandboxEvent, ExecSandboxExit, ExecSandboxRequest, ExecSandboxStderr, ExecSandboxStdout,
    GetSandboxRequest, HealthRequest, HealthResponse, ListSandboxesRequest, ListSandboxesResponse,
    Sandbox, SandboxCondition, SandboxPhase, SandboxResponse, SandboxRestartPolicy, SandboxSpec,
    SandboxStatus, SandboxStreamEvent, ServiceStatus, WatchSandboxRequest, exec_sandbox_event,
    sandbox_stream_event,
};
use conformance_openshell_api::{OpenShell, OpenShellServer};
use conformance_testtools::{Tool, require};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

/// A gateway stand-in holding fixed sandboxes; it records what it was asked.
#[derive(Default)]
struct Gateway {
    requests: Arc<Mutex<Vec<String>>>,
}

impl Gateway {
    fn saw(&self, what: String) {
        self.requests.lock().unwrap().push(what);
    }
}

fn sandbox(name: &str, phase: SandboxPhase) -> Sandbox {
    Sandbox {
        metadata: Some(ObjectMeta {
            id: format!("id-{name}"),
            name: name.into(),
            labels: HashMap::from([("suite".into(), "conformance".into())]),
            resource_version: 7,
            created_time: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 0,
            }),
            ..Default::default()
        }),
        spec: Some(SandboxSpec {
            command: vec!["sleep".into(), "infinity".into()],
            restart_policy: SandboxRestartPolicy::OnFailure as i32,
            ..Default::default()
        }),
        status: Some(SandboxStatus {
            phase: phase as i32,
            exit_code: (phase == SandboxPhase::Error).then_some(137),
            conditions: vec![SandboxCondition {
                r#type: "Ready".into(),
                status: "False".into(),
                reason: "PodFailed".into(),
                transition_time: Some(prost_types::Timestamp {
                    seconds: 1_700_000_060,
                    nanos: 0,
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

#[tonic::async_trait]
impl OpenShell for Gateway {
    async fn health(&self, _: Request<HealthRequest>) -> Result<Response<HealthResponse>, Status> {
        Ok(Response::new(HealthResponse {
            status: ServiceStatus::Healthy as i32,
            version: "0.0.111-model".into(),
        }))
    }

    async fn create_sandbox(
        &self,
        request: Request<CreateSandboxRequest>,
    ) -> Result<Response<SandboxResponse>, Status> {
        let r = request.into_inner();
        let spec = r.spec.unwrap_or_default();
        let image = spec.template.unwrap_or_default().image;
        self.saw(format!(
            "create {} {:?} {image} {:?}",
            r.name, r.labels, spec.command
        ));
        Ok(Response::new(SandboxResponse {
            sandbox: Some(sandbox(&r.name, SandboxPhase::Provisioning)),
        }))
    }

    async fn get_sandbox(
        &self,
        request: Request<GetSandboxRequest>,
    ) -> Result<Response<SandboxResponse>, Status> {
        let name = request.into_inner().name;
        self.saw(format!("get {name}"));
        match name.as_str() {
            "failed-one" => Ok(Response::new(SandboxResponse {
                sandbox: Some(sandbox(&name, SandboxPhase::Error)),
            })),
            _ => Err(Status::not_found(format!("sandbox {name} not found"))),
        }
    }

    async fn list_sandboxes(
        &self,
        request: Request<ListSandboxesRequest>,
    ) -> Result<Response<ListSandboxesResponse>, Status> {
        self.saw(format!("list {}", request.into_inner().label_selector));
        Ok(Response::new(ListSandboxesResponse {
            sandboxes: vec![
                sandbox("a", SandboxPhase::Ready),
                sandbox("b", SandboxPhase::Stopped),
                sandbox("c", SandboxPhase::Completed),
            ],
            next_page_token: String::new(),
        }))
    }

    async fn delete_sandbox(
        &self,
        request: Request<DeleteSandboxRequest>,
    ) -> Result<Response<DeleteSandboxResponse>, Status> {
        let name = request.into_inner().name;
        // `deleted` (v0.0.111's field 1, reserved in 0.1.5) is set too: the SDK must skip it.
        Ok(Response::new(DeleteSandboxResponse {
            deleted: true,
            outcome: DeletionOutcome::Accepted as i32,
            sandbox_id: format!("id-{name}"),
        }))
    }

    async fn exec_sandbox(
        &self,
        request: Request<ExecSandboxRequest>,
    ) -> Result<Response<BoxStream<ExecSandboxEvent>>, Status> {
        let r = request.into_inner();
        self.saw(format!("exec {} {:?} {:?}", r.sandbox, r.command, r.stdin));
        let event = |p| Ok(ExecSandboxEvent { payload: Some(p) });
        let events = vec![
            event(exec_sandbox_event::Payload::Stdout(ExecSandboxStdout {
                data: b"out\n".to_vec(),
            })),
            event(exec_sandbox_event::Payload::Stderr(ExecSandboxStderr {
                data: b"err\n".to_vec(),
            })),
            event(exec_sandbox_event::Payload::Exit(ExecSandboxExit {
                exit_code: 3,
            })),
        ];
        Ok(Response::new(Box::pin(tokio_stream::iter(events))))
    }

    async fn watch_sandbox(
        &self,
        request: Request<WatchSandboxRequest>,
    ) -> Result<Response<BoxStream<SandboxStreamEvent>>, Status> {
        let r = request.into_inner();
        self.saw(format!("watch {} {}", r.sandbox, r.follow_status));
        let events = [
            SandboxPhase::Provisioning,
            SandboxPhase::Ready,
            SandboxPhase::Error,
        ]
        .map(|p| {
            Ok(SandboxStreamEvent {
                payload: Some(sandbox_stream_event::Payload::Sandbox(sandbox(
                    &r.sandbox, p,
                ))),
            })
        });
        Ok(Response::new(Box::pin(tokio_stream::iter(events))))
    }
}

/// The SDK's side: calls the stub and prints, as JSON, what it decoded. Requests carry fields
/// we do not declare (`workspace_scope`, a policy) that our server must skip.
const CLIENT: &str = r#"
import json, sys
import grpc
from openshell._proto import openshell_pb2 as pb, openshell_pb2_grpc as rpc
from openshell._proto import datamodel_pb2 as dm, sandbox_pb2 as sb
stub = rpc.OpenShellStub(grpc.insecure_channel(sys.argv[1]))
T = 10
out = {}
h = stub.Health(pb.HealthRequest(), timeout=T)
out["health"] = [pb.ServiceStatus.Name(h.status), h.version]
created = stub.CreateSandbox(pb.CreateSandboxRequest(
    name="fresh", labels={"suite": "conformance"},
    workspace_scope=dm.WorkspaceSelector(workspace="team"),
    spec=pb.SandboxSpec(command=["sleep", "1"], template=pb.SandboxTemplate(image="busybox"),
                        policy=sb.SandboxPolicy(version=3))),
    timeout=T)
out["created"] = [created.sandbox.metadata.name, pb.SandboxPhase.Name(created.sandbox.status.phase)]
s = stub.GetSandbox(pb.GetSandboxRequest(name="failed-one"), timeout=T).sandbox
c = s.status.conditions[0]
out["sandbox"] = {
    "id": s.metadata.id, "name": s.metadata.name, "labels": dict(s.metadata.labels),
    "resource_version": s.metadata.resource_version,
    "created": s.metadata.created_time.seconds,
    "phase": pb.SandboxPhase.Name(s.status.phase),
    "has_exit_code": s.status.HasField("exit_code"), "exit_code": s.status.exit_code,
    "condition": [c.type, c.status, c.reason, c.transition_time.seconds],
    "command": list(s.spec.command),
    "restart_policy": pb.SandboxRestartPolicy.Name(s.spec.restart_policy),
}
try:
    stub.GetSandbox(pb.GetSandboxRequest(name="gone"), timeout=T)
    out["missing"] = "answered"
except grpc.RpcError as e:
    out["missing"] = [e.code().name, e.details()]
l = stub.ListSandboxes(pb.ListSandboxesRequest(label_selector="suite=conformance", page_size=5), timeout=T)
out["list"] = [[x.metadata.name, pb.SandboxPhase.Name(x.status.phase), x.status.HasField("exit_code")] for x in l.sandboxes]
d = stub.DeleteSandbox(pb.DeleteSandboxRequest(name="a", allow_missing=True), timeout=T)
out["delete"] = [pb.DeletionOutcome.Name(d.outcome), d.sandbox_id]
ev = []
for e in stub.ExecSandbox(pb.ExecSandboxRequest(sandbox="id-a", command=["sh", "-c", "exit 3"], stdin=b"in"), timeout=T):
    kind = e.WhichOneof("payload")
    ev.append([kind, e.exit.exit_code if kind == "exit" else getattr(e, kind).data.decode()])
out["exec"] = ev
out["watch"] = [pb.SandboxPhase.Name(e.sandbox.status.phase) for e in
                stub.WatchSandbox(pb.WatchSandboxRequest(sandbox="w", follow_status=True), timeout=T)]
try:
    stub.StopSandbox(pb.StopSandboxRequest(name="a"), timeout=T)
    out["stop"] = "answered"
except grpc.RpcError as e:
    out["stop"] = e.code().name
print(json.dumps(out))
"#;

#[tokio::test]
async fn the_official_python_sdk_decodes_what_our_server_answers() {
    let test = "the_official_python_sdk_decodes_what_our_server_answers";
    let Some(sdk) = require(Tool::OpenshellPythonSdk, test) else {
        return;
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let gateway = Gateway::default();
    let requests = gateway.requests.clone();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(OpenShellServer::new(gateway))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );

    let deadline = Duration::from_secs(60);
    let client = tokio::process::Command::new("python3")
        .arg("-c")
        .arg(CLIENT)
        .arg(addr.to_string())
        .env("PYTHONPATH", &sdk)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(deadline, client)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the SDK client did not finish within {deadline:?}; requests seen: {:?}",
                requests.lock().unwrap()
            )
        })
        .expect("python3 runs");
    server.abort();
    assert!(
        out.status.success(),
        "the SDK client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the client prints JSON");
    let expected = serde_json::json!({
        "health": ["SERVICE_STATUS_HEALTHY", "0.0.111-model"],
        "created": ["fresh", "SANDBOX_PHASE_PROVISIONING"],
        "sandbox": {
            "id": "id-failed-one", "name": "failed-one", "labels": {"suite": "conformance"},
            "resource_version": 7, "created": 1_700_000_000,
            "phase": "SANDBOX_PHASE_ERROR", "has_exit_code": true, "exit_code": 137,
            "condition": ["Ready", "False", "PodFailed", 1_700_000_060],
            "command": ["sleep", "infinity"],
            "restart_policy": "SANDBOX_RESTART_POLICY_ON_FAILURE",
        },
        "missing": ["NOT_FOUND", "sandbox gone not found"],
        "list": [
            ["a", "SANDBOX_PHASE_READY", false],
            ["b", "SANDBOX_PHASE_STOPPED", false],
            ["c", "SANDBOX_PHASE_COMPLETED", false],
        ],
        "delete": ["DELETION_OUTCOME_ACCEPTED", "id-a"],
        "exec": [["stdout", "out\n"], ["stderr", "err\n"], ["exit", 3]],
        "watch": ["SANDBOX_PHASE_PROVISIONING", "SANDBOX_PHASE_READY", "SANDBOX_PHASE_ERROR"],
        "stop": "UNIMPLEMENTED",
    });
    assert_eq!(got, expected);
    // The SDK's requests decoded on our side, undeclared fields (workspace_scope, policy,
    // page_size, allow_missing) skipped.
    assert_eq!(
        *requests.lock().unwrap(),
        [
            r#"create fresh {"suite": "conformance"} busybox ["sleep", "1"]"#,
            "get failed-one",
            "get gone",
            "list suite=conformance",
            r#"exec id-a ["sh", "-c", "exit 3"] [105, 110]"#,
            "watch w true",
        ]
    );
}
