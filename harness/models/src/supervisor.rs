//! The OpenShell supervisor model (`openshell-sandbox`, docs/upstream-facts.md section 2), one program for
//! the sandbox image's workload container and the supervisor image, dispatched on argv (the
//! placement of the topology decides which argv each container gets; see [`crate::placement`]):
//!
//! - in the workload container (`openshell-sandbox --workdir /sandbox`, e.g. combined):
//!   boundary and process side in one container.
//! - sidecar container: process side in the workload container (`--mode=process`), boundary in
//!   the sidecar (`--mode=network`), joined by the control socket in the
//!   `openshell-sidecar-state` emptyDir (F2.5, F2.6).
//! - dedicated pod (reported, #3144): boundary in a pod of its own (`--mode=boundary`); the
//!   workload pod is gated until the boundary attached.
//! - shared deployment (reported): one Deployment (`--mode=shared-boundary`) runs a boundary per
//!   sandbox.
//!
//! The boundary does token exchange and policy fetch (`grpc_retry`), the supervisor session and
//! the exit reports; the process side launches the main process only after bootstrap (F2.8).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::time::{Instant, sleep};

use crate::gateway::Gateway;
use crate::gateway::rpc::{ConnectRequest, ExitAck, SandboxConfig, ServerCert, Status};
use crate::model::{Link, MainState, MainStatus, OpenShellModel};
use crate::spec::{Diagnostics, backoff};
use conformance_core::target::workspace_pvc_name;
use conformance_kube_models::network::{NetError, Network, parse_endpoint};
use conformance_kube_models::program::{ContainerCtx, ContainerProgram, ShellProgram, Signal};
use conformance_upstream::{
    BOOTSTRAP_FAILED_EVENT, CONTROL_SOCKET_ENV, GATEWAY_ENDPOINT, SANDBOX_API_VERSION,
    SANDBOX_KIND, SIDECAR_STATE_VOLUME,
};
use kube_emulator::shell::DefaultHooks;
use kube_emulator::{Cluster, ResourceRef};

pub(crate) const CONTROL_SOCKET: &str = "/control.sock";

/// Writes log lines into one container's log (clonable into helper tasks).
#[derive(Clone)]
pub(crate) struct Log {
    cluster: Cluster,
    ns: String,
    pod: String,
    container: String,
    /// The Sandbox resource every line is for, where one supervisor serves several: the lines
    /// name it (`conformance_core::retries::SANDBOX_FIELD`), so that its attempts can be told
    /// apart from the others'.
    sandbox: Option<String>,
}

impl Log {
    fn of(ctx: &ContainerCtx) -> Self {
        Self {
            cluster: ctx.cluster.clone(),
            ns: ctx.namespace.clone(),
            pod: ctx.pod.clone(),
            container: ctx.container.clone(),
            sandbox: None,
        }
    }
    pub(crate) fn line(&self, text: &str) {
        match &self.sandbox {
            None => self
                .cluster
                .append_log(&self.ns, &self.pod, &self.container, text),
            Some(cr) => self.cluster.append_log(
                &self.ns,
                &self.pod,
                &self.container,
                &format!("{text} {}{cr}", conformance_core::retries::SANDBOX_FIELD),
            ),
        }
    }
}

/// Who the boundary works for and where it runs.
#[derive(Clone)]
struct Boundary {
    model: Arc<OpenShellModel>,
    cluster: Cluster,
    network: Network,
    ns: String,
    /// The pod the boundary runs in (its uid is bound into the token).
    pod_uid: String,
    sandbox_id: String,
    cr: String,
    endpoint: String,
    log: Log,
    /// The workload pod shares this pod (combined, sidecar): wait for this pod's main.
    same_pod: bool,
    /// The container's filesystem, where the projected token and the client TLS material are.
    mounts: kube_emulator::shell::Mounts,
    /// `OPENSHELL_K8S_SA_TOKEN_FILE` (F2.4).
    token_file: Option<String>,
    /// `OPENSHELL_TLS_CA`: the CA that must have signed the gateway's certificate (F3.5).
    ca_file: Option<String>,
}

/// Why bootstrap ended for good.
#[derive(Debug)]
struct Fatal {
    message: String,
}

#[derive(Debug)]
struct AttemptError {
    message: String,
    permanent: bool,
}

impl Boundary {
    fn b(&self) -> &crate::spec::Behaviour {
        &self.model.behaviour
    }

    /// One connection to the gateway, bounded by the 10 s connect timeout (F2.3).
    async fn connect(&self) -> Result<Arc<Gateway>, AttemptError> {
        let (host, port) = parse_endpoint(&self.endpoint).unwrap_or_default();
        match self
            .network
            .connect::<Gateway>(&self.cluster, &self.ns, &host, port)
        {
            Ok(gw) if gw.is_alive() => Ok(gw),
            Ok(_) => Err(AttemptError {
                message: format!(
                    "status: Unavailable, message: \"error trying to connect: tcp connect error: Connection refused (os error 111)\", endpoint {}",
                    self.endpoint
                ),
                permanent: false,
            }),
            Err(e @ NetError::Blackholed(_)) => {
                sleep(self.model.timings.connect_timeout).await;
                Err(AttemptError {
                    message: format!("status: Unavailable, message: \"transport error: {e}\""),
                    permanent: false,
                })
            }
            Err(e) => Err(AttemptError {
                message: format!("status: Unavailable, message: \"error trying to connect: {e}\""),
                permanent: false,
            }),
        }
    }

    fn status_err(s: &Status) -> AttemptError {
        AttemptError {
            message: format!("status: {}, message: \"{}\"", s.code, s.message),
            permanent: !s.retryable(),
        }
    }

    /// One "Policy fetch" attempt: TLS handshake, token exchange, GetSandboxConfig.
    async fn attempt(&self) -> Result<(String, SandboxConfig), AttemptError> {
        let gw = self.connect().await?;
        let handshake = if gw.server_certificate(&self.cr) == ServerCert::UnknownIssuer {
            Err("transport error: invalid peer certificate: certificate verify failed (UnknownIssuer)".to_string())
        } else {
            self.verify_gateway(&gw)
        };
        if let Err(message) = handshake
            && self.b().tls_validation
        {
            // No gRPC status: upstream retries it (F2.2); the contract fails fast (R4).
            return Err(AttemptError {
                message,
                permanent: self.b().tls_error_permanent,
            });
        }
        // Read at every attempt, as upstream reads the file the kubelet keeps current (F2.4).
        let sa_token = self
            .token_file
            .as_deref()
            .and_then(|p| self.mounts.read_file(p).ok().flatten())
            .and_then(|b| String::from_utf8(b).ok());
        let token = gw
            .issue_sandbox_token(&self.sandbox_id, &self.pod_uid, sa_token.as_deref())
            .map_err(|s| Self::status_err(&s))?;
        let cfg = gw
            .get_sandbox_config(&token)
            .map_err(|s| Self::status_err(&s))?;
        Ok((token, cfg))
    }

    /// The TLS client's check of the certificate the gateway presents: it must chain to the CA
    /// the pod mounted (`OPENSHELL_TLS_CA`) and name the endpoint's host, as rustls checks it
    /// for the real supervisor (F12.8). Nothing to check over plaintext, or when the pod has
    /// no CA or the gateway presents no certificate (a gateway without a config file).
    fn verify_gateway(&self, gw: &Gateway) -> Result<(), String> {
        use tokio_rustls::rustls;
        use tokio_rustls::rustls::client::danger::ServerCertVerifier;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
        let chain = gw.presented_chain();
        let ca = self
            .ca_file
            .as_deref()
            .and_then(|p| self.mounts.read_file(p).ok().flatten());
        let (Some(ca), false, true) = (ca, chain.is_empty(), self.endpoint.starts_with("https://"))
        else {
            return Ok(());
        };
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&ca) {
            let c = c.map_err(|e| format!("failed to parse the CA certificate: {e}"))?;
            roots
                .add(c)
                .map_err(|e| format!("failed to parse the CA certificate: {e}"))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("transport error: {e}"))?;
        let (host, _) = parse_endpoint(&self.endpoint).unwrap_or_default();
        let name = ServerName::try_from(host.clone())
            .map_err(|e| format!("transport error: invalid server name {host}: {e}"))?;
        let certs: Vec<CertificateDer<'static>> =
            chain.into_iter().map(CertificateDer::from).collect();
        let now =
            UnixTime::since_unix_epoch(std::time::Duration::from_secs(self.cluster.now_unix()));
        verifier
            .verify_server_cert(&certs[0], &certs[1..], &name, &[], now)
            .map(|_| ())
            .map_err(|e| format!("transport error: {e}"))
    }

    /// The `n`-th sleep of a retry back-off from `initial` capped at `cap`: no cap under the
    /// defect `backoff-uncapped`, the cap and more under `backoff-overshoots-cap`.
    fn backoff(
        &self,
        initial: std::time::Duration,
        cap: std::time::Duration,
        n: u32,
    ) -> std::time::Duration {
        if self.b().backoff_uncapped {
            return backoff(initial, std::time::Duration::MAX, n);
        }
        let d = backoff(initial, cap, n);
        if self.b().backoff_overshoots_cap && d == cap {
            d + self.model.timings.cap_overshoot
        } else {
            d
        }
    }

    /// `load_policy` wrapped in `grpc_retry` (F2.1, F2.2): 5 attempts, 1/2/4/4 s, permanent codes
    /// at once; the contract retries with capped backoff until cancelled (R1, R5).
    async fn bootstrap(&self) -> Result<(String, SandboxConfig), Fatal> {
        let t = &self.model.timings;
        let forever = self.b().bootstrap_retry_forever;
        let started = tokio::time::Instant::now();
        let mut n: u32 = 0;
        loop {
            n += 1;
            match self.attempt().await {
                Ok(x) => {
                    self.log.line(&format!(
                        "OCSF CONFIG:LOADED [INFO] policy loaded (sandbox_id={}, policy_version={}, attempts={n})",
                        self.sandbox_id, x.1.policy_version
                    ));
                    return Ok(x);
                }
                Err(e) => {
                    let permanent = e.permanent && self.b().permanent_errors_fail_fast;
                    if permanent {
                        return Err(Fatal {
                            message: format!("Policy fetch failed: {}", e.message),
                        });
                    }
                    if self.b().retries_give_up && started.elapsed() >= t.retries_give_up_after {
                        // Defect `retries-give-up-after-15m`.
                        let m = format!(
                            "Policy fetch failed: gave up after {}s of retries: {}",
                            t.retries_give_up_after.as_secs(),
                            e.message
                        );
                        self.log.line(&format!("ERROR openshell_sandbox: {m}"));
                        return Err(Fatal { message: m });
                    }
                    if !forever && n >= t.policy_fetch_attempts {
                        let m = format!(
                            "Policy fetch failed after {} attempts: {}",
                            t.policy_fetch_attempts, e.message
                        );
                        self.log.line(&format!("ERROR openshell_sandbox: {m}"));
                        return Err(Fatal { message: m });
                    }
                    let (delay, max) = if forever {
                        (
                            self.backoff(
                                t.policy_fetch_backoff_initial,
                                t.contract_bootstrap_backoff_cap,
                                n,
                            ),
                            "unbounded".to_string(),
                        )
                    } else {
                        (
                            self.backoff(
                                t.policy_fetch_backoff_initial,
                                t.policy_fetch_backoff_cap,
                                n,
                            ),
                            t.policy_fetch_attempts.to_string(),
                        )
                    };
                    let cause = if self.b().diagnostics == Diagnostics::Hidden {
                        String::new()
                    } else {
                        format!(" error=\"{}\"", e.message.replace('"', "'"))
                    };
                    self.log.line(&format!(
                        "WARN openshell_sandbox: Policy fetch failed, retrying attempt={n} max_attempts={max} retry_in={}ms{cause}",
                        delay.as_millis()
                    ));
                    sleep(delay).await;
                }
            }
        }
    }

    /// A fatal bootstrap error: logged (and, in the contract, posted as an Event on the Sandbox
    /// so the gateway can name it, R14).
    fn report_fatal(&self, f: &Fatal) -> String {
        match self.b().diagnostics {
            Diagnostics::Hidden => {
                self.log.line("Error: sandbox bootstrap failed");
                "sandbox bootstrap failed".into()
            }
            d => {
                self.log.line(&format!(
                    "OCSF LIFECYCLE:FAIL [HIGH] bootstrap failed: {}",
                    f.message
                ));
                self.log.line(&format!("Error: {}", f.message));
                if d == Diagnostics::Named {
                    let ev = json!({
                        "metadata": {"name": format!("{}.bootstrap.{}", self.cr, self.pod_uid), "namespace": self.ns},
                        "involvedObject": {"apiVersion": SANDBOX_API_VERSION, "kind": SANDBOX_KIND, "name": self.cr, "namespace": self.ns},
                        "reason": BOOTSTRAP_FAILED_EVENT,
                        "message": f.message,
                        "type": "Warning",
                        "source": {"component": "openshell-sandbox"},
                        "count": 1,
                    });
                    let _ = self.cluster.create(
                        &ResourceRef::new("", "v1", "events"),
                        Some(&self.ns),
                        ev,
                    );
                }
                f.message.clone()
            }
        }
    }

    /// Workspace reset for the defect `workspace-pvc-replaced-on-pod-replacement`.
    fn reset_workspace(&self) {
        let vol = self
            .cluster
            .pvc_volume(&self.ns, &workspace_pvc_name(&self.cr));
        for entry in vol.list("/").unwrap_or_default() {
            vol.remove(&entry);
        }
        self.log
            .line("INFO openshell_sandbox: workspace initialised (fresh volume)");
    }

    /// Defect `workspace-emptied-on-gateway-restart`: every file of the workspace truncated
    /// to 0 bytes, its names kept.
    fn empty_workspace(&self) {
        let vol = self
            .cluster
            .pvc_volume(&self.ns, &workspace_pvc_name(&self.cr));
        let mut dirs = vec![String::new()];
        while let Some(dir) = dirs.pop() {
            for name in vol.list(&format!("{dir}/")).unwrap_or_default() {
                let path = format!("{dir}/{name}");
                if vol.read(&path).is_some() {
                    vol.write(&path, b"");
                } else {
                    dirs.push(path);
                }
            }
        }
        self.log
            .line("INFO openshell_sandbox: workspace initialised (session re-established)");
    }

    /// Everything after bootstrap: attach (gated topologies), wait for the main process, the
    /// session with reconnects, and exit reports. Never returns unless the session is refused
    /// or a retry gave up.
    async fn serve(&self, link: Arc<Link>, token: String, cfg: SandboxConfig, adopted: bool) {
        let t = self.model.timings.clone();
        if cfg.reset_workspace {
            self.reset_workspace();
        }
        let gated = self.model.topology.scheduling_gate().is_some();
        if gated {
            let mut n = 0;
            let failing_since = Instant::now();
            loop {
                n += 1;
                let r = match self.connect().await {
                    Ok(gw) => gw.attach_boundary(&token).map_err(|s| s.to_string()),
                    Err(e) => Err(e.message),
                };
                match r {
                    Ok(()) => break,
                    Err(_) if self.attach_gives_up(failing_since) => return,
                    Err(e) => {
                        let d = self.backoff(t.session_backoff_initial, t.session_backoff_cap, n);
                        self.log.line(&format!(
                            "OCSF NET:FAIL [MED] boundary attach failed, retrying (attempt {n}, retry_in={}s): {e}",
                            d.as_secs()
                        ));
                        sleep(d).await;
                    }
                }
            }
        }
        link.bootstrapped.send_modify(|g| *g += 1);
        if adopted
            && self.b().replay_completed
            && matches!(link.main.borrow().status, MainStatus::Exited(_))
        {
            // Defect `completed-workload-replayed`: the restarted supervisor runs it again.
            link.relaunch.send_modify(|n| *n += 1);
        }
        // The session opens once the entrypoint started (F2.8 step 9; sidecar EntrypointStarted).
        if gated {
            if !self.await_workload(&link, &token).await {
                return;
            }
        } else {
            let mut main_rx = link.main.subscribe();
            let own = self.pod_uid.clone();
            let same_pod = self.same_pod;
            let _ = main_rx
                .wait_for(|m| m.status != MainStatus::NotStarted && (!same_pod || m.pod_uid == own))
                .await;
        }
        let reporter = {
            let me = self.clone();
            let link = link.clone();
            let token = token.clone();
            tokio::spawn(async move { me.report_exits(link, token).await })
        };
        let _reporter = AbortOnDrop(reporter);
        let mut reattach = adopted;
        // Whether this supervisor had a session that ended: the next one comes back after the
        // gateway was away.
        let mut had_session = false;
        // Failed sessions so far, the back-off's exponent (F2.7, F2.11).
        let mut n: u32 = 0;
        // Since when the session has been down (defect `retries-give-up-after-15m`).
        let mut lost_since: Option<tokio::time::Instant> = None;
        loop {
            if gated {
                // The workload pod may have been replaced (stop and start) since the last
                // session: never tell the gateway the sandbox is usable before it is.
                if !self.await_workload(&link, &token).await {
                    return;
                }
            }
            let instance = link.main.borrow().instance;
            let req = ConnectRequest {
                sandbox_id: self.sandbox_id.clone(),
                token: token.clone(),
                pod_uid: self.pod_uid.clone(),
                main_instance: Some(instance),
                reattach,
                policy_version: cfg.policy_version,
            };
            let res = match self.connect().await {
                Ok(gw) => gw
                    .connect_supervisor(&req)
                    .map(|s| (s, gw))
                    .map_err(|s| (s, true)),
                Err(e) => Err((Status::unavailable(e.message), false)),
            };
            // A session the gateway itself closed (a stop) ended cleanly, as upstream logs it
            // (F2.11): no attempt failed, and the supervisor waits for the sandbox to run again,
            // which is no back-off.
            let mut ended_cleanly = false;
            match res {
                Ok((mut session, gw)) => {
                    // The back-off is not reset by a session that worked: after one long
                    // outage every later reconnect first sleeps the cap (F2.11).
                    lost_since = None;
                    reattach = false;
                    self.log.line(&format!(
                        "OCSF NET:OPEN [INFO] supervisor session established (session_id={}, heartbeat_secs={})",
                        session.id,
                        session.heartbeat.as_secs()
                    ));
                    if had_session && self.b().workspace_emptied_on_reconnect {
                        self.empty_workspace();
                    }
                    had_session = true;
                    if session.relaunch_main {
                        link.relaunch.send_modify(|n| *n += 1);
                    }
                    let _ = session.alive.wait_for(|a| !*a).await;
                    if gw.is_alive() {
                        ended_cleanly = true;
                        self.log.line(&format!(
                            "OCSF NET:CLOSE [INFO] supervisor session ended cleanly ({})",
                            self.sandbox_id
                        ));
                    }
                }
                Err((s, reached)) if reached && !s.retryable() => {
                    self.log.line(&format!(
                        "OCSF NET:FAIL [HIGH] supervisor session refused, not retrying: {s}"
                    ));
                    std::future::pending::<()>().await;
                }
                Err(_) => {}
            }
            let lost = *lost_since.get_or_insert_with(tokio::time::Instant::now);
            if self.b().retries_give_up && lost.elapsed() >= t.retries_give_up_after {
                self.log.line(&format!(
                    "OCSF NET:FAIL [HIGH] supervisor session down for {}s, giving up",
                    t.retries_give_up_after.as_secs()
                ));
                return;
            }
            n += 1;
            let d = self.backoff(t.session_backoff_initial, t.session_backoff_cap, n);
            if !ended_cleanly {
                self.log.line(&format!(
                    "OCSF NET:FAIL [LOW] supervisor session failed, reconnecting (attempt {n})"
                ));
            }
            sleep(d).await;
        }
    }

    /// Whether the boundary's attach, failing since `since`, gives up now (defects
    /// `retries-give-up-after-15m` and `attach-gives-up-after-15m`); logged when it does.
    fn attach_gives_up(&self, since: Instant) -> bool {
        let after = self.model.timings.retries_give_up_after;
        let gives_up =
            (self.b().retries_give_up || self.b().attach_gives_up) && since.elapsed() >= after;
        if gives_up {
            self.log.line(&format!(
                "OCSF NET:FAIL [HIGH] boundary attach failing for {}s, giving up",
                after.as_secs()
            ));
        }
        gives_up
    }

    /// The workload pod of a gated topology as it stands: (uid, still behind its gate); None
    /// while it is absent or terminating.
    fn workload_pod(&self) -> Option<(String, bool)> {
        let p = self
            .cluster
            .get(&ResourceRef::pods(), Some(&self.ns), &self.cr)
            .ok()?;
        if p.pointer("/metadata/deletionTimestamp").is_some() {
            return None;
        }
        let uid = p.pointer("/metadata/uid")?.as_str()?.to_string();
        let gated = p
            .pointer("/spec/schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(|g| !g.is_empty());
        Some((uid, gated))
    }

    /// Gated topologies (R1: Ready means usable): waits until the main process was started in
    /// the *current* workload pod, attaching the boundary again for a replacement pod that
    /// waits behind its gate (stop and start make a new pod; the link may still describe the
    /// old one). False once the attach gave up (defects `retries-give-up-after-15m`,
    /// `attach-gives-up-after-15m`).
    async fn await_workload(&self, link: &Link, token: &str) -> bool {
        let t = self.model.timings.clone();
        let mut rx = link.main.subscribe();
        // Since when the replacement pod's attach has been failing.
        let mut failing_since: Option<Instant> = None;
        loop {
            if let Some((uid, gated)) = self.workload_pod() {
                if gated {
                    let attached = match self.connect().await {
                        Ok(gw) => gw.attach_boundary(token).is_ok(),
                        Err(_) => false,
                    };
                    if attached {
                        failing_since = None;
                    } else if self.attach_gives_up(*failing_since.get_or_insert_with(Instant::now))
                    {
                        return false;
                    }
                } else {
                    let m = rx.borrow_and_update().clone();
                    if m.pod_uid == uid && m.status != MainStatus::NotStarted {
                        return true;
                    }
                }
            }
            tokio::select! {
                biased;
                _ = rx.changed() => {}
                _ = sleep(t.session_backoff_initial) => {}
            }
        }
    }

    /// ReportMainProcessExit retried 250 ms → 2 s until acknowledged (F2.7), then the restart
    /// policy's relaunch (F9.1).
    async fn report_exits(&self, link: Arc<Link>, token: String) {
        let t = self.model.timings.clone();
        let mut rx = link.main.subscribe();
        loop {
            let m = rx
                .wait_for(|m| matches!(m.status, MainStatus::Exited(_)) && !m.terminal)
                .await
                .map(|m| m.clone());
            let Ok(m) = m else { return };
            let MainStatus::Exited(code) = m.status else {
                continue;
            };
            if link.main.borrow().terminal {
                continue;
            }
            let at = m.since.unwrap_or_else(Instant::now);
            let mut n = 0;
            let ack = loop {
                n += 1;
                if let Ok(gw) = self.connect().await
                    && let Ok(ack) = gw.report_main_exit(&token, m.instance, code, at)
                {
                    break ack;
                }
                sleep(backoff(t.exit_report_initial, t.exit_report_cap, n)).await;
            };
            match ack {
                ExitAck::RestartAfter(d) => {
                    sleep(d).await;
                    link.relaunch.send_modify(|n| *n += 1);
                    let _ = rx
                        .wait_for(|x| x.instance > m.instance && x.status == MainStatus::Running)
                        .await;
                    let inst = link.main.borrow().instance;
                    let mut n = 0;
                    loop {
                        n += 1;
                        if let Ok(gw) = self.connect().await
                            && gw.report_main_started(&token, inst).is_ok()
                        {
                            break;
                        }
                        sleep(backoff(t.exit_report_initial, t.exit_report_cap, n)).await;
                    }
                }
                ExitAck::Terminal | ExitAck::Ignored => {
                    link.main.send_modify(|x| {
                        if x.instance == m.instance {
                            x.terminal = true;
                        }
                    });
                }
            }
        }
    }

    /// Bootstrap, then serve. Returns only with a fatal error.
    async fn run(&self, link: Arc<Link>) -> Fatal {
        let adopted = {
            let m = link.main.borrow();
            m.status != MainStatus::NotStarted && (!self.same_pod || m.pod_uid == self.pod_uid)
        };
        match self.bootstrap().await {
            Ok((token, cfg)) => {
                self.serve(link, token, cfg, adopted).await;
                Fatal {
                    message: "supervisor session refused or given up".into(),
                }
            }
            Err(f) => f,
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The supervisor program (both images).
pub(crate) struct SupervisorProgram {
    pub model: Arc<OpenShellModel>,
}

fn flag(argv: &[String], name: &str) -> Option<String> {
    argv.iter()
        .find_map(|a| a.strip_prefix(&format!("{name}=")).map(str::to_string))
}

#[async_trait]
impl ContainerProgram for SupervisorProgram {
    async fn run(&self, ctx: ContainerCtx) -> i32 {
        let is_supervisor = ctx
            .argv
            .first()
            .is_some_and(|a| a.ends_with("openshell-sandbox"));
        if !is_supervisor {
            return ShellProgram.run(ctx).await;
        }
        if ctx.argv.get(1).map(String::as_str) == Some("copy-self") {
            ctx.log("Installed supervisor binary to /opt/openshell/bin/openshell-sandbox");
            return 0;
        }
        match flag(&ctx.argv, "--mode").as_deref() {
            None => self.in_workload_container(ctx).await,
            Some("network-init") => 0,
            Some("process") => self.process_container(ctx).await,
            Some("network") => self.boundary_container(ctx, true).await,
            Some("boundary") => self.boundary_container(ctx, false).await,
            Some("shared-boundary") => self.shared(ctx).await,
            Some(other) => {
                ctx.log(&format!("Error: unknown mode {other}"));
                2
            }
        }
    }
}

impl SupervisorProgram {
    fn boundary(&self, ctx: &ContainerCtx, cr: &str, id: &str, same_pod: bool) -> Boundary {
        Boundary {
            model: self.model.clone(),
            cluster: ctx.cluster.clone(),
            network: ctx.network.clone(),
            ns: ctx.namespace.clone(),
            pod_uid: ctx.pod_uid.clone(),
            sandbox_id: id.to_string(),
            cr: cr.to_string(),
            endpoint: ctx
                .env("OPENSHELL_ENDPOINT")
                .unwrap_or(GATEWAY_ENDPOINT)
                .to_string(),
            log: Log::of(ctx),
            same_pod,
            mounts: ctx.mounts.clone(),
            token_file: ctx.env("OPENSHELL_K8S_SA_TOKEN_FILE").map(str::to_string),
            ca_file: ctx.env("OPENSHELL_TLS_CA").map(str::to_string),
        }
    }

    /// Supervisor in the workload container: boundary and process side share it (F2.8).
    async fn in_workload_container(&self, ctx: ContainerCtx) -> i32 {
        let cr = ctx.pod.clone();
        let id = ctx
            .env("OPENSHELL_SANDBOX_ID")
            .unwrap_or_default()
            .to_string();
        let link = self.model.link(&cr);
        reset_main(&link, &ctx.pod_uid);
        link.bootstrapped.send_replace(0);
        // No readiness probe: running is ready (F4.15).
        ctx.set_ready(true);
        ctx.log(&format!(
            "INFO openshell_sandbox: Starting sandbox supervision (topology={})",
            self.model.topology.name
        ));
        let boundary = self.boundary(&ctx, &cr, &id, true);
        let sup = self.supervise(boundary, link.clone(), &cr);
        let sigs = ctx.signals();
        let proc_side = process_side(&self.model, &ctx, link.clone(), Go::Bootstrapped(0));
        tokio::pin!(sup, proc_side);
        let sig = tokio::select! {
            biased;
            code = &mut sup => return code,
            code = &mut proc_side => return code,
            s = signalled(sigs) => s,
        };
        // F1.19: a pod deleted under it, the supervisor forwards SIGTERM to the main process
        // and reports that exit until the gateway acknowledges it (which makes the sandbox
        // Error unless it is stopping or deleting, F1.2); the grace period's SIGKILL ends it
        // otherwise.
        if sig == Signal::Term
            && self.model.behaviour.main_exit_reported_on_shutdown
            && link.main.borrow().status == MainStatus::Running
            && self.model.signal_main(&cr, Signal::Term)
        {
            let mut main = link.main.subscribe();
            tokio::select! {
                biased;
                _ = &mut sup => {}
                _ = &mut proc_side => {}
                _ = main.wait_for(|m| m.terminal) => {}
            }
        }
        sig.exit_code()
    }

    /// The boundary as a supervisor process: killed by the harness, it either ends its
    /// container (0.0.111: PID 1, F2.9) or restarts in place and re-attaches (contract, 0.1.x).
    async fn supervise(&self, boundary: Boundary, link: Arc<Link>, cr: &str) -> i32 {
        link.boundary_alive.send_replace(true);
        loop {
            let (kill_tx, mut kill_rx) = tokio::sync::mpsc::unbounded_channel();
            self.model.register_supervisor(cr, kill_tx);
            tokio::select! {
                biased;
                fatal = boundary.run(link.clone()) => {
                    boundary.report_fatal(&fatal);
                    link.boundary_alive.send_replace(false);
                    return 1;
                }
                _ = kill_rx.recv() => {
                    boundary.log.line("OCSF PROC:TERMINATE [HIGH] supervisor process killed (signal 9)");
                    if !self.model.behaviour.supervisor_restarts_in_place {
                        link.boundary_alive.send_replace(false);
                        return 137;
                    }
                    sleep(self.model.timings.supervisor_restart_delay).await;
                    boundary.log.line("INFO openshell_sandbox: supervisor process restarted; re-attaching to the running workload");
                }
            }
        }
    }

    /// Sidecar network container or dedicated supervisor pod.
    async fn boundary_container(&self, mut ctx: ContainerCtx, sidecar: bool) -> i32 {
        let cr = ctx
            .env("OPENSHELL_SANDBOX_RESOURCE")
            .map_or_else(|| ctx.pod.clone(), str::to_string);
        let id = ctx
            .env("OPENSHELL_SANDBOX_ID")
            .unwrap_or_default()
            .to_string();
        let link = self.model.link(&cr);
        ctx.log(&format!(
            "INFO openshell_sandbox: Starting sandbox supervision (mode={})",
            if sidecar { "network" } else { "boundary" }
        ));
        ctx.set_ready(true);
        let boundary = self.boundary(&ctx, &cr, &id, sidecar);
        let mut bootstrapped = link.bootstrapped.subscribe();
        let start = *bootstrapped.borrow();
        let socket = {
            let cluster = ctx.cluster.clone();
            let uid = ctx.pod_uid.clone();
            let log = Log::of(&ctx);
            async move {
                if sidecar {
                    let _ = bootstrapped.wait_for(|g| *g > start).await;
                    // F2.6: the network sidecar creates the socket only after load_policy.
                    cluster
                        .empty_dir(&uid, SIDECAR_STATE_VOLUME)
                        .write(CONTROL_SOCKET, b"");
                    log.line("INFO openshell_sandbox: sidecar control socket listening at /run/openshell-sidecar/control.sock");
                }
                std::future::pending::<()>().await;
            }
        };
        // F2.12: a network sidecar whose process supervisor's control connection closes
        // exits 1 (for Kubernetes to restart it; under restartPolicy Never the pod fails).
        let control_closed = {
            let mut rx = link.process_control.subscribe();
            let uid = ctx.pod_uid.clone();
            async move {
                if !sidecar {
                    return std::future::pending().await;
                }
                let _ = rx.wait_for(|(u, open)| *u == uid && *open).await;
                let _ = rx.wait_for(|(u, open)| *u != uid || !*open).await;
            }
        };
        let log = Log::of(&ctx);
        let sup = self.supervise(boundary, link, &cr);
        tokio::select! {
            biased;
            code = sup => code,
            _ = socket => 0,
            () = control_closed => {
                log.line("WARN openshell_sandbox: Authoritative sidecar control channel exited; restarting sidecar");
                1
            }
            s = ctx.signalled() => s.exit_code(),
        }
    }

    /// A workload container whose boundary runs elsewhere: the process side only.
    async fn process_container(&self, ctx: ContainerCtx) -> i32 {
        let cr = ctx.pod.clone();
        let link = self.model.link(&cr);
        reset_main(&link, &ctx.pod_uid);
        let topo = ctx
            .env("OPENSHELL_SUPERVISOR_TOPOLOGY")
            .unwrap_or_default()
            .to_string();
        ctx.log(&format!(
            "INFO openshell_sandbox: Starting sandbox supervision (mode=process, topology={topo})"
        ));
        ctx.set_ready(true);
        // A sidecar's boundary shares the pod and signals through its control socket (docs/upstream-facts.md F2.5).
        let go = if ctx.env(CONTROL_SOCKET_ENV).is_some() {
            Go::ControlSocket
        } else {
            Go::Bootstrapped(0)
        };
        let sigs = ctx.signals();
        let p = process_side(&self.model, &ctx, link.clone(), go);
        tokio::select! {
            biased;
            code = p => {
                // Its end of the sidecar's control channel closes with it (F2.12).
                link.process_control.send_if_modified(|(uid, open)| {
                    let ours = *uid == ctx.pod_uid && *open;
                    if ours {
                        *open = false;
                    }
                    ours
                });
                code
            }
            s = signalled(sigs) => s.exit_code(),
        }
    }

    /// The shared supervisor Deployment (reported): one boundary per sandbox the gateway
    /// assigns.
    async fn shared(&self, mut ctx: ContainerCtx) -> i32 {
        ctx.log(&format!(
            "INFO openshell_sandbox: Starting shared sandbox supervision (topology={})",
            self.model.topology.name
        ));
        ctx.set_ready(true);
        let me = Arc::new(SupervisorProgram {
            model: self.model.clone(),
        });
        // By CR: the start epoch a boundary was spawned for. A boundary whose bootstrap failed
        // for good is not retried within that epoch (R4), but a stop and start (a new epoch)
        // is the documented recovery (R8): it gets a fresh boundary.
        let mut served: BTreeMap<String, (u64, AbortOnDrop)> = BTreeMap::new();
        let mut failed: BTreeMap<String, u64> = BTreeMap::new();
        let endpoint = ctx
            .env("OPENSHELL_ENDPOINT")
            .unwrap_or(GATEWAY_ENDPOINT)
            .to_string();
        let (host, port) = parse_endpoint(&endpoint).unwrap_or_default();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(String, u64)>();
        loop {
            while let Ok((cr, epoch)) = done_rx.try_recv() {
                if served.get(&cr).is_some_and(|(e, _)| *e == epoch) {
                    served.remove(&cr);
                }
                failed.insert(cr, epoch);
            }
            if let Ok(gw) =
                ctx.network
                    .connect::<Gateway>(&ctx.cluster, &ctx.namespace, &host, port)
                && let Ok(list) = gw.boundary_assignments()
            {
                let wanted: BTreeMap<String, (String, u64)> = list
                    .into_iter()
                    .map(|a| (a.cr_name, (a.sandbox_id, a.epoch)))
                    .collect();
                served.retain(|cr, _| wanted.contains_key(cr));
                failed.retain(|cr, e| wanted.get(cr).is_some_and(|w| w.1 == *e));
                for (cr, (id, epoch)) in wanted {
                    if served.contains_key(&cr) || failed.contains_key(&cr) {
                        continue;
                    }
                    let mut b = me.boundary(&ctx, &cr, &id, false);
                    b.log.sandbox = Some(cr.clone());
                    let link = self.model.link(&cr);
                    let me2 = me.clone();
                    let tx = done_tx.clone();
                    let cr2 = cr.clone();
                    served.insert(
                        cr.clone(),
                        (
                            epoch,
                            AbortOnDrop(tokio::spawn(async move {
                                me2.supervise(b, link, &cr2).await;
                                let _ = tx.send((cr2, epoch));
                            })),
                        ),
                    );
                }
            }
            tokio::select! {
                biased;
                s = ctx.signalled() => return s.exit_code(),
                _ = sleep(self.model.timings.session_backoff_initial * 2) => {}
            }
        }
    }
}

async fn signalled(
    mut rx: kube_emulator::sync::watch::Receiver<Option<conformance_kube_models::program::Signal>>,
) -> conformance_kube_models::program::Signal {
    loop {
        if let Some(s) = *rx.borrow_and_update() {
            return s;
        }
        if rx.changed().await.is_err() {
            return conformance_kube_models::program::Signal::Kill;
        }
    }
}

fn reset_main(link: &Link, pod_uid: &str) {
    link.main.send_if_modified(|m| {
        if m.pod_uid == pod_uid {
            return false;
        }
        *m = MainState {
            pod_uid: pod_uid.to_string(),
            ..Default::default()
        };
        true
    });
}

/// What the process side waits for before the first launch (F2.8).
enum Go {
    /// The boundary's bootstrap counter passes this value.
    Bootstrapped(u64),
    /// The sidecar's control socket appears (F2.6).
    ControlSocket,
}

/// Launches and relaunches the main process; returns the container's exit code when the
/// container must end (0.0.111 after a terminal exit, a sidecar that gave up, …).
async fn process_side(
    model: &Arc<OpenShellModel>,
    ctx: &ContainerCtx,
    link: Arc<Link>,
    go: Go,
) -> i32 {
    let log = Log::of(ctx);
    let b = model.behaviour;
    let t = model.timings.clone();
    let cr = ctx.pod.clone();
    if !b.workload_before_policy {
        match go {
            Go::Bootstrapped(v) => {
                let mut rx = link.bootstrapped.subscribe();
                let _ = rx.wait_for(|g| *g > v).await;
            }
            Go::ControlSocket => {
                let vol = ctx.cluster.empty_dir(&ctx.pod_uid, SIDECAR_STATE_VOLUME);
                let started = Instant::now();
                let mut last_note = Instant::now();
                while !vol.exists(CONTROL_SOCKET) {
                    if b.sidecar_gives_up && started.elapsed() >= t.sidecar_ready_timeout {
                        let m = format!(
                            "timed out waiting for sidecar control socket /run/openshell-sidecar/control.sock after {}s",
                            t.sidecar_ready_timeout.as_secs()
                        );
                        if b.diagnostics == Diagnostics::Hidden {
                            log.line("Error: sandbox bootstrap failed");
                        } else {
                            log.line(&format!("ERROR openshell_sandbox: {m}"));
                            log.line(&format!("Error: {m}"));
                            if b.diagnostics == Diagnostics::Named {
                                post_failure_event(ctx, &cr, &m);
                            }
                        }
                        return 1;
                    }
                    if last_note.elapsed() >= t.heartbeat * 2 {
                        last_note = Instant::now();
                        log.line(&format!(
                            "INFO openshell_sandbox: waiting for sidecar control socket (elapsed={}s)",
                            started.elapsed().as_secs()
                        ));
                    }
                    sleep(t.sidecar_poll).await;
                }
                link.process_control
                    .send_replace((ctx.pod_uid.clone(), true));
            }
        }
    }
    let spec: Option<Vec<String>> = ctx
        .env("OPENSHELL_MAIN_PROCESS_SPEC")
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .and_then(|v| v.get("command").cloned())
        .and_then(|c| serde_json::from_value(c).ok());
    let (kill_tx, mut kill_rx) = tokio::sync::mpsc::unbounded_channel();
    model.register_main(&cr, kill_tx);
    let mut relaunch = link.relaunch.subscribe();
    relaunch.borrow_and_update();
    let mut boundary_alive = link.boundary_alive.subscribe();
    // A relaunch request seen by `changed()` below: `changed()` marks the value seen, so
    // `has_changed()` alone would miss it and the request would be lost.
    let mut requested = false;
    loop {
        let launch = matches!(link.main.borrow().status, MainStatus::NotStarted);
        if launch || requested || relaunch.has_changed().unwrap_or(false) {
            requested = false;
            relaunch.borrow_and_update();
            if link.main.borrow().status == MainStatus::Running {
                // Already running (a relaunch request for a live process is a no-op).
            } else {
                let code = run_main(model, ctx, &link, &log, spec.clone(), &mut kill_rx).await;
                if link.main.borrow().terminal && !b.supervisor_restarts_in_place {
                    return code;
                }
                let _ = code;
                continue;
            }
        }
        tokio::select! {
            biased;
            r = relaunch.changed() => requested = r.is_ok(),
            _ = kill_rx.recv() => {}
            _ = boundary_alive.wait_for(|a| !*a), if !b.supervisor_restarts_in_place && ctx.env(CONTROL_SOCKET_ENV).is_some() => {
                log.line("ERROR openshell_sandbox: authoritative network-sidecar control channel closed");
                return 1;
            }
            _ = async {
                let mut rx = link.main.subscribe();
                let _ = rx.wait_for(|m| m.terminal).await;
            }, if !b.supervisor_restarts_in_place => {
                if let MainStatus::Exited(code) = link.main.borrow().status {
                    return code;
                }
            }
        }
    }
}

fn post_failure_event(ctx: &ContainerCtx, cr: &str, message: &str) {
    let ev = json!({
        "metadata": {"name": format!("{cr}.bootstrap.{}", ctx.pod_uid), "namespace": ctx.namespace},
        "involvedObject": {"apiVersion": SANDBOX_API_VERSION, "kind": SANDBOX_KIND, "name": cr, "namespace": ctx.namespace},
        "reason": BOOTSTRAP_FAILED_EVENT, "message": message, "type": "Warning", "count": 1,
    });
    let _ = ctx.cluster.create(
        &ResourceRef::new("", "v1", "events"),
        Some(&ctx.namespace),
        ev,
    );
}

/// One generation of the main process, until it exits or is killed.
async fn run_main(
    model: &OpenShellModel,
    ctx: &ContainerCtx,
    link: &Link,
    log: &Log,
    spec: Option<Vec<String>>,
    kill: &mut tokio::sync::mpsc::UnboundedReceiver<conformance_kube_models::program::Signal>,
) -> i32 {
    while kill.try_recv().is_ok() {}
    let mut instance = 0;
    link.main.send_modify(|m| {
        m.instance += 1;
        instance = m.instance;
        m.status = MainStatus::Running;
        m.since = Some(Instant::now());
        m.terminal = false;
    });
    let shown = spec
        .as_ref()
        .map_or_else(|| "(idle)".to_string(), |c| c.join(" "));
    log.line(&format!(
        "OCSF PROC:LAUNCH [INFO] main process started (instance={instance}) {shown}"
    ));
    model.main_started(&ctx.pod);
    let hooks = DefaultHooks::new(ctx.cluster.now_unix());
    let env = ctx.env.clone();
    let run = async {
        match &spec {
            // The CLI's default main process, a login shell (docs/upstream-facts.md F6.3), waits
            // for input on its session like an idle image; the emulated shell has no bash.
            Some(argv) if !argv.is_empty() && argv[..] != ["/bin/bash", "-l"] => {
                let out =
                    kube_emulator::shell::run(argv, &[], &env, "/sandbox", &ctx.mounts, &hooks)
                        .await;
                for s in [&out.stdout, &out.stderr] {
                    if !s.is_empty() {
                        log.line(String::from_utf8_lossy(s).trim_end());
                    }
                }
                out.exit_code
            }
            _ => std::future::pending().await,
        }
    };
    let code = tokio::select! {
        biased;
        c = run => c,
        // The workload ends on either signal (an idle image or a shell loop does not trap it).
        sig = kill.recv() => sig.unwrap_or(conformance_kube_models::program::Signal::Kill).exit_code(),
    };
    log.line(&format!(
        "OCSF PROC:TERMINATE [INFO] main process exited (instance={instance}) [exit:{code}]"
    ));
    link.main.send_modify(|m| {
        if m.instance == instance {
            m.status = MainStatus::Exited(code);
            m.since = Some(Instant::now());
        }
    });
    code
}
