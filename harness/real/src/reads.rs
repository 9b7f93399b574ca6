//! Pure reads of the gateway's sandboxes, `GetSandbox` and `ListSandboxes`, through the
//! harness's own gRPC client: the same port-forward and client certificate as the CLI and the
//! phase watcher (`watch.rs`), without starting a CLI process per read. Actions (create, stop,
//! start, delete, exec) stay on the user's path, the CLI.
//!
//! A read answers what `openshell sandbox get|list -o json` would have answered: the sandbox
//! goes through [`SandboxJson`], the shape the CLI prints, so the [`SandboxView`] is the same
//! whichever source produced it. When the gateway will not serve this client (the client cannot
//! connect or list at the start, or a call is refused as Unimplemented, Unauthenticated or
//! PermissionDenied) the CLI serves the reads for the rest of the case; an `Unavailable` the
//! gateway itself answers is asked of the CLI for that call. The timeline says which source
//! serves, and why, each time it changes.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use conformance_core::target::{SandboxView, TargetError, TargetResult};
use conformance_core::timeline::{Event, GATEWAY_SANDBOX_KIND, Recorder};
use conformance_openshell_api::OpenShellClient;
use conformance_openshell_api::v1::{GetSandboxRequest, ListSandboxesRequest, Sandbox};
use tonic::transport::Channel;
use tonic::{Code, Response, Status};

use crate::cli::{OpenShellCli, SandboxJson};
use crate::watch::{ConnectError, GatewayEndpoint, error_chain, status_line};

/// Key of the timeline observation (subject [`GATEWAY_SANDBOX_KIND`]) that names the source of
/// the pure reads: [`GRPC_SOURCE`], or the CLI with the reason ([`cli_source`]).
pub(crate) const READ_SOURCE_KEY: &str = "gateway_read_source";

/// The [`READ_SOURCE_KEY`] value while the gRPC client serves the reads.
pub(crate) const GRPC_SOURCE: &str = "GetSandbox and ListSandboxes over gRPC";

/// The [`READ_SOURCE_KEY`] value while the CLI serves the reads, and why.
pub(crate) fn cli_source(why: &str) -> String {
    format!("`openshell sandbox get` and `sandbox list` because {why}")
}

/// Which path serves the reads.
#[derive(Clone)]
enum Path {
    Grpc(Channel),
    Cli(String),
}

/// The reads of one case: through `channel` while the gateway serves them, else the CLI.
pub(crate) struct GatewayReads {
    path: Mutex<Path>,
    cli: OpenShellCli,
    rec: Recorder,
    /// The deadline of each call: the CLI's, so a read waits as long whichever path serves it.
    within: Duration,
    /// The source recorded last, so each change is recorded once.
    recorded: Mutex<Option<String>>,
}

/// How a gRPC read ended when it did not answer.
enum Failed {
    /// The gateway will not serve this client the call: the CLI serves from now on.
    Refused(String),
    /// The CLI answers this call (the gateway said `Unavailable`).
    AskCli(String),
    /// What the CLI would have ended with too: the gateway's refusal, or no answer.
    Error(TargetError),
}

/// Whether a status means the gateway will not serve this client the call (not that it is
/// momentarily unable to).
fn is_refusal(code: Code) -> bool {
    matches!(
        code,
        Code::Unimplemented | Code::Unauthenticated | Code::PermissionDenied
    )
}

/// Whether the client produced the status (the connection failed or broke) rather than the
/// gateway answering it: tonic keeps the transport error as the status's source, and a status
/// decoded from the gateway's answer has none.
fn from_transport(s: &Status) -> bool {
    std::error::Error::source(s).is_some()
}

impl GatewayReads {
    /// Connects to `endpoint` and lists the run's sandboxes (`selector`) once, so a gateway that
    /// will not serve this client is known before the case reads anything, as the watcher does;
    /// on any failure the CLI serves the case's reads. `endpoint` is Err with the reason when
    /// the client has no way to reach the gateway (an unreadable client certificate).
    pub(crate) async fn open(
        endpoint: Result<GatewayEndpoint, ConnectError>,
        selector: &str,
        cli: OpenShellCli,
        rec: Recorder,
    ) -> Self {
        let within = cli.call_timeout;
        let path = match endpoint {
            Ok(ep) => match ep.connect(within).await {
                Ok(channel) => match list_on(&channel, selector, within).await {
                    Ok(_) => Path::Grpc(channel),
                    Err(s) => Path::Cli(format!("ListSandboxes: {}", status_line(&s))),
                },
                Err(why) => Path::Cli(why.reason()),
            },
            Err(why) => Path::Cli(why.reason()),
        };
        let reads = Self {
            path: Mutex::new(path.clone()),
            cli,
            rec,
            within,
            recorded: Mutex::new(None),
        };
        match path {
            Path::Grpc(_) => reads.served(GRPC_SOURCE),
            Path::Cli(why) => {
                tracing::warn!(reason = %why, "gRPC reads refused; reading through the CLI");
                reads.served(&cli_source(&why));
            }
        }
        reads
    }

    /// Records `source` as serving the reads when it is not the one recorded last: a note for
    /// people, an observation for reports.
    fn served(&self, source: &str) {
        let mut last = self.recorded.lock().unwrap_or_else(|p| p.into_inner());
        if last.as_deref() == Some(source) {
            return;
        }
        *last = Some(source.to_string());
        self.rec
            .note(format!("the gateway's sandboxes are read with {source}"));
        self.rec.record(Event::Observation {
            key: READ_SOURCE_KEY.to_string(),
            subject: Some(GATEWAY_SANDBOX_KIND.to_string()),
            value: serde_json::Value::from(source),
        });
    }

    fn channel(&self) -> Option<Channel> {
        match &*self.path.lock().unwrap_or_else(|p| p.into_inner()) {
            Path::Grpc(c) => Some(c.clone()),
            Path::Cli(_) => None,
        }
    }

    /// The CLI serves from now on, because `why`.
    fn refused(&self, why: &str) {
        tracing::warn!(reason = %why, "gRPC reads refused; reading through the CLI");
        *self.path.lock().unwrap_or_else(|p| p.into_inner()) = Path::Cli(why.to_string());
        self.served(&cli_source(why));
    }

    /// One unary call on `channel`, classified. A call whose connection failed or broke is
    /// made once more: the channel connects again through the port-forward, which picks a
    /// ready gateway pod as the CLI's own new connection would.
    async fn call<T, F, Fut>(&self, channel: Channel, rpc: &str, f: F) -> Result<T, Failed>
    where
        F: Fn(OpenShellClient<Channel>) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let mut retried = false;
        loop {
            let answer =
                tokio::time::timeout(self.within, f(OpenShellClient::new(channel.clone()))).await;
            let s = match answer {
                Ok(Ok(r)) => return Ok(r.into_inner()),
                Ok(Err(s)) => s,
                Err(_) => {
                    return Err(Failed::Error(TargetError::infra(format!(
                        "{rpc} did not answer within {:?}",
                        self.within
                    ))));
                }
            };
            if from_transport(&s) {
                if !retried {
                    retried = true;
                    continue;
                }
                // The CLI's own connection would not have reached the gateway either: an
                // infrastructure failure, as the CLI's transport error is.
                return Err(Failed::Error(TargetError::infra(format!(
                    "{rpc}: the gateway did not answer: {}: {}",
                    status_line(&s),
                    error_chain(&s)
                ))));
            }
            if is_refusal(s.code()) {
                return Err(Failed::Refused(format!("{rpc}: {}", status_line(&s))));
            }
            if s.code() == Code::Unavailable {
                return Err(Failed::AskCli(format!("{rpc}: {}", status_line(&s))));
            }
            // As the CLI reports a status (`cli.rs` `parse_refusal`): its code and message.
            return Err(Failed::Error(crate::scaled_race::refusal(
                &format!("{:?}", s.code()),
                s.message(),
                conformance_core::clock::scale(),
            )));
        }
    }

    /// `sandbox get NAME -o json` as the CLI prints it, or None when the gateway does not have
    /// it.
    pub(crate) async fn get_json(&self, name: &str) -> TargetResult<Option<SandboxJson>> {
        let Some(channel) = self.channel() else {
            return self.cli.get_json(name).await;
        };
        let req = GetSandboxRequest {
            name: name.to_string(),
        };
        let answer = self
            .call(channel, "GetSandbox", |mut c| {
                let req = req.clone();
                async move { c.get_sandbox(req).await }
            })
            .await;
        match answer {
            Ok(r) => {
                self.served(GRPC_SOURCE);
                let s = r.sandbox.ok_or_else(|| {
                    TargetError::infra(format!("GetSandbox {name} answered without a sandbox"))
                })?;
                Ok(Some(SandboxJson::from_sandbox(&s)))
            }
            Err(Failed::Error(TargetError::Refused { code, message }))
                if cli_reads_as_absent(&code, &message) =>
            {
                self.served(GRPC_SOURCE);
                Ok(None)
            }
            Err(f) => self.after_failure(f, self.cli.get_json(name)).await,
        }
    }

    pub(crate) async fn get(&self, name: &str) -> TargetResult<Option<SandboxView>> {
        Ok(self.get_json(name).await?.map(|s| s.view()))
    }

    /// `sandbox list -o json --selector SELECTOR` as the CLI prints it.
    pub(crate) async fn list(&self, selector: &str) -> TargetResult<Vec<SandboxJson>> {
        let Some(channel) = self.channel() else {
            return self.cli.list(Some(selector)).await;
        };
        match list_classified(self, channel, selector).await {
            Ok(list) => {
                self.served(GRPC_SOURCE);
                Ok(list.iter().map(SandboxJson::from_sandbox).collect())
            }
            Err(f) => self.after_failure(f, self.cli.list(Some(selector))).await,
        }
    }

    /// Whether the gateway still lets the harness in: a list of the run's sandboxes. A refusal
    /// goes to the CLI's own check, whose error says what to look at.
    pub(crate) async fn check_access(&self, selector: &str) -> TargetResult<()> {
        let Some(channel) = self.channel() else {
            return self.cli.check_access(selector).await;
        };
        match list_classified(self, channel, selector).await {
            Ok(_) => {
                self.served(GRPC_SOURCE);
                Ok(())
            }
            // The CLI's check says what to look at, whatever kept the gateway from answering.
            Err(Failed::Refused(why)) => {
                self.refused(&why);
                self.cli.check_access(selector).await
            }
            Err(_) => self.cli.check_access(selector).await,
        }
    }

    /// What a failed gRPC read ends with: the CLI's answer for a refusal (and from now on) or
    /// an `Unavailable`, else the error the CLI would have ended with.
    async fn after_failure<T>(
        &self,
        f: Failed,
        cli: impl Future<Output = TargetResult<T>>,
    ) -> TargetResult<T> {
        match f {
            Failed::Refused(why) => {
                self.refused(&why);
                cli.await
            }
            Failed::AskCli(why) => {
                tracing::debug!(reason = %why, "this read goes to the CLI");
                self.served(&cli_source(&why));
                cli.await
            }
            Failed::Error(e) => Err(e),
        }
    }
}

async fn list_classified(
    reads: &GatewayReads,
    channel: Channel,
    selector: &str,
) -> Result<Vec<Sandbox>, Failed> {
    let req = ListSandboxesRequest {
        label_selector: selector.to_string(),
    };
    reads
        .call(channel, "ListSandboxes", |mut c| {
            let req = req.clone();
            async move { c.list_sandboxes(req).await }
        })
        .await
        .map(|r| r.sandboxes)
}

async fn list_on(channel: &Channel, selector: &str, within: Duration) -> Result<(), Status> {
    let mut c = OpenShellClient::new(channel.clone());
    let req = ListSandboxesRequest {
        label_selector: selector.to_string(),
    };
    match tokio::time::timeout(within, c.list_sandboxes(req)).await {
        Ok(r) => r.map(|_| ()),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no answer within {within:?}"
        ))),
    }
}

/// Whether the CLI's `sandbox get` reads this refusal as "no such sandbox": it looks for "not
/// found" in what it printed (`cli.rs` `not_found`), which holds NotFound's own description.
fn cli_reads_as_absent(code: &str, message: &str) -> bool {
    let m = message.to_lowercase();
    code == "NotFound" || m.contains("not found") || m.contains("notfound")
}

impl crate::cli::ReadSandbox for GatewayReads {
    async fn read(&self, name: &str) -> TargetResult<Option<SandboxView>> {
        self.get(name).await
    }
}
