//! The real target: a kind, k3d or existing cluster behind the core [`Target`] and
//! [`TargetFactory`] traits. The factory checks the interlock before anything else, brings the
//! cluster up (or reuses it and checks it for leftovers) and installs Agent Sandbox once. The
//! first case of a topology installs OpenShell for it; its later cases reuse that installation
//! as long as it is healthy (each case's sandboxes deleted and verified gone, its faults
//! restored, the gateway ready and letting the harness in), and the factory uninstalls it after
//! the topology's last case ([`TargetFactory::release`]). Each case reaches the gateway through
//! the in-process port-forward and drives sandboxes through the `openshell` CLI.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};

use super::{interlock, interlock::Allowed};
use crate::cli::{OpenShellCli, app_version_from_helm_list};
use crate::cluster::{self, ClusterUp};
use crate::command::{CommandRunner, run_ok};
use crate::completeness::WALL_CLOCK_KEY;
use crate::faults::{FaultInjector, RestoreGuard};
use crate::gateway;
use crate::gateway_log::GatewayLog;
use crate::install::{self, Install};
use crate::journal::{self, Journal};
use crate::leftovers;
use crate::options::RealOptions;
use crate::pins;
use crate::portforward::GatewayForward;
use crate::reads::GatewayReads;
use crate::steps::Step;
use crate::watch;
use conformance_core::error::{Error, Result, one_line};
use conformance_core::scenario::DEFAULT_WORKSPACE;
use conformance_core::target::sandbox_resource_name;
use conformance_core::target::{
    Capability, ExecResult, Fault, Observers, SandboxSpec, SandboxView, Target, TargetError,
    TargetFactory, TargetInfo, TargetResult,
};
use conformance_core::timeline::{
    Event, GATEWAY_SANDBOX_KIND, MAIN_PROCESS_STARTS_SOURCE_KEY, ObjectState, Recorder,
    SAMPLING_INTERVAL_KEY,
};
use conformance_core::topology::Topology;
use conformance_observe::{self as observe, ObserveSpec};
use conformance_upstream::CLIENT_TLS_SECRET;

/// Checks that the API server answers.
pub async fn reachable(client: &Client, context: &str) -> Result<String> {
    let v = tokio::time::timeout(Duration::from_secs(20), client.apiserver_version())
        .await
        .map_err(|_| Error::infra(format!("cluster {context} did not answer within 20s")))?
        .map_err(|e| Error::infra_from(format!("cluster {context} is unreachable"), e))?;
    Ok(v.git_version)
}

/// The Sandbox API version the cluster serves: v1beta1, else v1alpha1 (the driver's own probe
/// order, docs/upstream-facts.md F3.1).
pub async fn sandbox_version(client: &Client, namespace: &str) -> TargetResult<&'static str> {
    for v in [
        conformance_upstream::SANDBOX_VERSION,
        conformance_upstream::SANDBOX_VERSION_V1ALPHA1,
    ] {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &observe::sandbox_resource(v));
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => return Ok(v),
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(TargetError::infra_from("probe Sandbox API", e)),
        }
    }
    Err(TargetError::infra(
        "the cluster serves no Sandbox API (agents.x-k8s.io v1beta1 or v1alpha1); is Agent Sandbox installed?",
    ))
}

/// Capabilities every real target has, before the CLI is asked: the faults it injects and a
/// main command.
fn base_capabilities() -> BTreeSet<Capability> {
    std::iter::once(Capability::MainCommand)
        .chain(crate::faults::CAPABILITIES)
        .collect()
}

/// Steps that make the gateway reachable for the CLI (for plans).
pub(crate) fn access_plan(opts: &RealOptions, tls: bool, topology: &str) -> Vec<Step> {
    let cli = cli_for(opts, Arc::new(crate::command::SystemRunner), topology);
    let once = "once per topology per run; later cases reuse the port and the registration";
    let mut v = vec![
        Step::kube(format!(
            "port-forward 127.0.0.1:$PORT -> a ready pod of {}/{} port {} (re-resolved per connection; {once})",
            opts.namespace,
            opts.release,
            pins::GATEWAY_GRPC_PORT
        )),
        Step::kube(format!(
            "create the CLI's private home {} (mode 0700) and remove a registration an earlier run left there ({once})",
            cli.home.display()
        )),
    ];
    if tls {
        v.push(Step::kube(format!(
            "read Secret {}/{CLIENT_TLS_SECRET} (ca.crt, tls.crt, tls.key) into {} (after each install: the chart's certgen issues new certificates)",
            opts.namespace,
            cli.mtls_dir().display()
        )));
    }
    v.push(Step::run_when(cli.gateway_add_cmd("$PORT", tls), once));
    v.push(Step::run_when(
        run_sandboxes_cmd(&cli, opts),
        "must succeed, else the case stops with the gateway's answer",
    ));
    v.push(Step::run(cli.cmd(["--version"])));
    v.push(Step::run(cli.cmd(["sandbox", "create", "--help"])));
    v.push(Step::run(leftovers::helm_list_cmd(opts)));
    v
}

/// Steps that observe a case (for plans).
pub(crate) fn observe_plan(opts: &RealOptions, topology: &str) -> Vec<Step> {
    let cli = cli_for(opts, Arc::new(crate::command::SystemRunner), topology);
    vec![
        Step::kube(format!(
            "watch Sandbox resources (v1beta1, else v1alpha1), Pods, PVCs, Events, StatefulSets and Deployments in {}",
            opts.namespace
        )),
        Step::grpc(
            "follow each sandbox of the run with the gateway's WatchSandbox stream (gRPC over the port-forward, with the CLI's client certificate), found through ListSandboxes with the run's label",
        ),
        Step::run_when(
            run_sandboxes_cmd(&cli, opts),
            "every 2s, as the phase poller, if the gateway refuses the stream",
        ),
        Step::grpc(
            "read sandboxes (the case's reads, the snapshot, the teardown's checks) with GetSandbox and ListSandboxes over the same connection; actions stay on the CLI",
        ),
        Step::run_when(
            cli.cmd(["sandbox", "get", "$NAME", "-o", "json"]),
            "instead of those reads, if the gateway refuses them (as `sandbox list` above)",
        ),
    ]
}

/// `sandbox list` of this run's sandboxes: the access check after install and the phase poller.
fn run_sandboxes_cmd(cli: &OpenShellCli, opts: &RealOptions) -> crate::command::Cmd {
    cli.cmd([
        "sandbox".to_string(),
        "list".to_string(),
        "-o".to_string(),
        "json".to_string(),
        "--selector".to_string(),
        format!("{}={}", pins::RUN_LABEL, opts.run_id),
    ])
}

fn cli_for(opts: &RealOptions, runner: Arc<dyn CommandRunner>, topology: &str) -> OpenShellCli {
    let mut cli = OpenShellCli::new(
        runner,
        &opts.openshell_bin,
        opts.private_dir.join(format!("cli-{topology}")),
        &format!("conformance-{topology}"),
    );
    cli.call_timeout = opts.timeouts.cli_call;
    cli.lifecycle_timeout = opts.timeouts.cli_lifecycle;
    cli
}

struct Cluster {
    up: ClusterUp,
    client: Client,
}

/// Makes real targets. Construct it with [`RealFactory::new`], which applies the interlock.
pub struct RealFactory {
    opts: RealOptions,
    runner: Arc<dyn CommandRunner>,
    pub allowed: Allowed,
    cluster: tokio::sync::Mutex<Option<Arc<Cluster>>>,
    /// Fault injectors of the targets provisioned so far, for the signal handler.
    injectors: Injectors,
    /// The gateway access of each topology, shared by its cases.
    access: AccessMap,
    /// The OpenShell installation the cases of the current topology share.
    shared: SharedInstall,
}

/// One OpenShell installation, made by the first case of its topology and reused by the next
/// ones while it stays usable. The cluster holds one release at a time, so there is at most one.
struct Setup {
    topology: String,
    install: Install,
    access: Arc<Access>,
    workload: gateway::Workload,
    sandbox_version: &'static str,
    detected: crate::cli::CliInfo,
    app: Option<semver::Version>,
    /// Why the installation cannot serve another case, once a case left it so.
    unusable: Mutex<Option<String>>,
}

type SharedInstall = Arc<tokio::sync::Mutex<Option<Arc<Setup>>>>;

/// How long the end of a case waits for the phase observer to record the gateway's last
/// commits before calling one missed: the stream's delays are milliseconds, the poller's its
/// 2 s period and a CLI call.
const OBSERVER_SETTLE: Duration = Duration::from_secs(5);

/// How long reusing an installation waits for its gateway to be ready before reinstalling: a
/// gateway that a restored fault left down is replaced rather than waited for as long as an
/// install would be.
const REUSE_READY: Duration = Duration::from_secs(60);

/// How the CLI reaches the gateway of one topology for the whole run: one port-forward (which
/// picks a ready gateway pod per connection, so it outlives reinstalls) and one `gateway add`
/// for its stable port. A second `gateway add` of the same name is refused by the CLI
/// (docs/upstream-facts.md F6.2), and a new port per case would leave the registration stale.
pub(crate) struct Access {
    forward: GatewayForward,
    cli: OpenShellCli,
}

/// Accesses by topology name.
type AccessMap = Arc<tokio::sync::Mutex<BTreeMap<String, Arc<Access>>>>;

/// Injectors of live targets; dead ones are skipped.
type Injectors = Arc<Mutex<Vec<std::sync::Weak<FaultInjector>>>>;

impl RealFactory {
    /// Refuses a context that is not disposable, before anything else happens.
    pub fn new(opts: RealOptions, runner: Arc<dyn CommandRunner>) -> Result<Self> {
        let allowed = interlock::check(&opts.context, &opts.allow_contexts)?;
        Ok(Self {
            opts,
            runner,
            allowed,
            cluster: Default::default(),
            injectors: Default::default(),
            access: Default::default(),
            shared: Default::default(),
        })
    }

    pub fn options(&self) -> &RealOptions {
        &self.opts
    }

    /// Waits for Ctrl-C or SIGTERM, restores every active fault of every live target, and
    /// returns the signal's name; the CLI then exits (130 / 143). Run it beside the engine
    /// (`tokio::select!`).
    pub async fn restore_on_signal(&self) -> &'static str {
        let name = crate::faults::wait_for_signal().await;
        tracing::warn!(signal = name, "restoring active faults before exiting");
        let live: Vec<Arc<FaultInjector>> = self
            .injectors
            .lock()
            .expect("injectors lock")
            .iter()
            .filter_map(|w| w.upgrade())
            .collect();
        for inj in live {
            for e in inj.restore_all().await {
                tracing::error!(error = %e, "restore after {name} failed; the journal keeps it");
            }
        }
        name
    }

    /// Brings the cluster up (or reuses it), connects, checks leftovers on a reused cluster and
    /// installs Agent Sandbox. Runs once; later calls return at once.
    pub async fn prepare(&self) -> Result<()> {
        self.cluster().await.map(|_| ())
    }

    async fn cluster(&self) -> Result<Arc<Cluster>> {
        let mut slot = self.cluster.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let o = &self.opts;
        tokio::fs::create_dir_all(&o.run_dir)
            .await
            .map_err(|e| Error::infra_from(format!("run directory {}", o.run_dir.display()), e))?;
        cluster::create_private_dir(o)?;
        let provider = cluster::provider(o);
        let up = provider.up(&*self.runner).await?;
        let client = crate::apiclient::client_for(up.kubeconfig.as_deref(), &up.context).await?;
        reachable(&client, &up.context).await?;
        if up.reused {
            let found = leftovers::find(&client, &*self.runner, o).await?;
            leftovers::handle(&client, &*self.runner, o, &found).await?;
        }
        provider.load_images(&*self.runner, &o.load_images).await?;
        install::install_agent_sandbox(&*self.runner, &opts_with(o, &up)).await?;
        let c = Arc::new(Cluster { up, client });
        *slot = Some(c.clone());
        Ok(c)
    }
}

/// Options pointing at the kubeconfig `up` produced.
fn opts_with(o: &RealOptions, up: &ClusterUp) -> RealOptions {
    let mut o = o.clone();
    o.kubeconfig = up.kubeconfig.clone();
    o.context = up.context.clone();
    o
}

#[async_trait]
impl TargetFactory for RealFactory {
    fn info(&self) -> TargetInfo {
        TargetInfo {
            kind: self.opts.provider.name().into(),
            capabilities: base_capabilities(),
            versions: BTreeMap::from([
                (
                    "agent-sandbox".to_string(),
                    self.opts.agent_sandbox.version(),
                ),
                ("chart".to_string(), install::chart_label(&self.opts)),
            ]),
            // The release the chart installs, so cases of a topology it cannot run are skipped
            // with the reason before anything is installed; install() refines it from helm.
            openshell: self.opts.openshell_version().ok().flatten(),
            ..TargetInfo::default()
        }
    }

    async fn provision(
        &self,
        _topology: &Topology,
        rec: &Recorder,
    ) -> TargetResult<Arc<dyn Target>> {
        let c = self.cluster().await.map_err(infra)?;
        let mut t = RealTarget::new(
            opts_with(&self.opts, &c.up),
            self.runner.clone(),
            c.client.clone(),
            self.info(),
            rec.clone(),
        );
        t.injectors = Some(self.injectors.clone());
        t.access = self.access.clone();
        t.shared = self.shared.clone();
        Ok(Arc::new(t))
    }

    async fn release(&self, topology: &Topology) -> TargetResult<()> {
        if self.shared.lock().await.is_none() {
            return Ok(());
        }
        let c = self.cluster().await.map_err(infra)?;
        let opts = opts_with(&self.opts, &c.up);
        release_shared(
            &self.shared,
            &topology.name,
            &*self.runner,
            &c.client,
            &opts,
        )
        .await
    }
}

/// What `install` set up for a case: the shared installation and the case's own fault
/// injector.
struct Installed {
    install: Install,
    cli: OpenShellCli,
    access: Arc<Access>,
    injector: Arc<FaultInjector>,
    _guard: RestoreGuard,
    sandbox_version: &'static str,
    setup: Arc<Setup>,
    /// The case's reads of the gateway's sandboxes (gRPC, else the CLI).
    reads: Arc<GatewayReads>,
}

/// One case on a real cluster.
pub struct RealTarget {
    opts: RealOptions,
    runner: Arc<dyn CommandRunner>,
    client: Client,
    info: Mutex<TargetInfo>,
    rec: Recorder,
    installed: tokio::sync::Mutex<Option<Arc<Installed>>>,
    /// The release `helm install` was started for, until install() completes: an install that
    /// fails after it (a gateway that never gets ready or refuses the harness) must still leave
    /// nothing behind, so teardown removes it.
    helm_started: Mutex<Option<Install>>,
    created: Mutex<BTreeSet<String>>,
    /// Those of `created` the case deleted itself (the CLI said so): teardown only waits until
    /// they are gone, without a second `sandbox delete`.
    deleted: Mutex<BTreeSet<String>>,
    /// Sandboxes being created, for the phase stream to look for at once.
    expected: watch::Expected,
    /// The gateway's log from the start of observation, for checking that the observer missed
    /// none of the phase commits it holds.
    gateway_log: Mutex<Option<GatewayLog>>,
    /// The first supervisor found off the harness's clock: the case's error at its end.
    supervisor_off_clock: Mutex<Option<TargetError>>,
    injectors: Option<Injectors>,
    access: AccessMap,
    shared: SharedInstall,
}

impl RealTarget {
    /// Records the clock skew of sandbox `name`'s supervisor from its log, once it answered
    /// the create; one off the harness's clock is kept as the case's error (docs/architecture.md,
    /// "The scaled clock"). A log that cannot be read measures nothing.
    async fn check_supervisor_clock(&self, name: &str) {
        let Ok(Some(lines)) = conformance_core::target::Target::supervisor_log(self, name).await
        else {
            return;
        };
        let scale = conformance_core::clock::scale();
        if let Err(e) = crate::clock_skew::check_supervisor(&self.rec, name, &lines, scale) {
            self.supervisor_off_clock
                .lock()
                .expect("off-clock lock")
                .get_or_insert(e);
        }
    }

    pub fn new(
        opts: RealOptions,
        runner: Arc<dyn CommandRunner>,
        client: Client,
        info: TargetInfo,
        rec: Recorder,
    ) -> Self {
        Self {
            opts,
            runner,
            client,
            info: Mutex::new(info),
            rec,
            installed: Default::default(),
            helm_started: Default::default(),
            created: Default::default(),
            deleted: Default::default(),
            expected: Default::default(),
            gateway_log: Default::default(),
            supervisor_off_clock: Default::default(),
            injectors: None,
            access: Default::default(),
            shared: Default::default(),
        }
    }

    /// Shares the gateway registrations of `other`, as the targets one factory provisions do.
    #[cfg(test)]
    pub(crate) fn share_access_of(&mut self, other: &RealTarget) {
        self.access = other.access.clone();
        self.shared = other.shared.clone();
    }

    async fn installed(&self) -> TargetResult<Arc<Installed>> {
        self.installed
            .lock()
            .await
            .clone()
            .ok_or_else(|| TargetError::infra("the target was used before install()"))
    }

    /// The fault injector of the installed case, for signal handlers and diagnostics.
    pub async fn injector(&self) -> Option<Arc<FaultInjector>> {
        self.installed
            .lock()
            .await
            .as_ref()
            .map(|i| i.injector.clone())
    }

    /// The local port of the gateway port-forward, once installed.
    pub async fn gateway_port(&self) -> Option<u16> {
        self.installed
            .lock()
            .await
            .as_ref()
            .map(|i| i.access.forward.port())
    }

    async fn diagnostics_with(
        &self,
        i: &Installed,
        dir: &Path,
        timeline: Option<&conformance_core::timeline::Timeline>,
    ) -> Result<crate::diagnostics::Bundle> {
        let src = crate::diagnostics::Sources {
            client: &self.client,
            runner: &*self.runner,
            opts: &self.opts,
            sandbox_version: i.sandbox_version,
            cli: Some(&i.cli),
            timeline,
        };
        crate::diagnostics::collect(&src, dir).await
    }

    /// Collects a diagnostics bundle of this case into `dir` (and `dir.tar.gz`).
    pub async fn diagnostics(
        &self,
        dir: &Path,
        timeline: Option<&conformance_core::timeline::Timeline>,
    ) -> Result<crate::diagnostics::Bundle> {
        let i = self.installed.lock().await.clone();
        let version = match &i {
            Some(i) => i.sandbox_version,
            None => sandbox_version(&self.client, &self.opts.namespace)
                .await
                .unwrap_or(conformance_upstream::SANDBOX_VERSION),
        };
        let src = crate::diagnostics::Sources {
            client: &self.client,
            runner: &*self.runner,
            opts: &self.opts,
            sandbox_version: version,
            cli: i.as_ref().map(|i| &i.cli),
            timeline,
        };
        crate::diagnostics::collect(&src, dir).await
    }

    /// Installs OpenShell for `topology`: helm with the chart, the namespace labelled with the
    /// run, the gateway ready, reached and letting the harness in.
    async fn fresh_install(&self, topology: &Topology) -> TargetResult<Arc<Setup>> {
        let o = &self.opts;
        let inst = Install::new(o, topology).map_err(infra)?;
        *self.helm_started.lock().expect("helm_started lock") = Some(inst.clone());
        inst.run(&*self.runner).await.map_err(infra)?;
        let label =
            Patch::Merge(serde_json::json!({"metadata": {"labels": {pins::RUN_LABEL: o.run_id}}}));
        Api::<Namespace>::all(self.client.clone())
            .patch(&o.namespace, &PatchParams::default(), &label)
            .await
            .map_err(|e| TargetError::infra_from("install: label namespace", e))?;
        let workload = gateway::resolve(&self.client, &o.namespace, &o.release).await?;
        let (want, _) = gateway::replicas(&self.client, &workload).await?;
        gateway::wait_ready(
            &self.client,
            &workload,
            want.max(1),
            &[],
            o.timeouts.gateway_ready,
        )
        .await?;
        let access = self.access(&topology.name, &workload, inst.tls).await?;
        // One call that needs the harness to be let in, before any case step relies on it.
        access
            .cli
            .check_access(&format!("{}={}", pins::RUN_LABEL, o.run_id))
            .await?;
        let detected = access.cli.detect().await?;
        let helm = run_ok(&*self.runner, &leftovers::helm_list_cmd(o))
            .await
            .map_err(|e| TargetError::infra_from("install: list Helm releases", e))?;
        let app = app_version_from_helm_list(&helm.stdout, &o.release);
        let sandbox_version = sandbox_version(&self.client, &o.namespace).await?;
        self.helm_started.lock().expect("helm_started lock").take();
        Ok(Arc::new(Setup {
            topology: topology.name.clone(),
            install: inst,
            access,
            workload,
            sandbox_version,
            detected,
            app,
            unusable: Mutex::new(None),
        }))
    }

    /// Whether an installation can serve another case: no case marked it unusable, its gateway
    /// is ready, and the gateway lets the harness in (asked through the case's `reads` when
    /// there are, else the CLI). Err says why not.
    async fn usable(
        &self,
        s: &Setup,
        reads: Option<&GatewayReads>,
    ) -> std::result::Result<(), String> {
        if let Some(why) = s.unusable.lock().expect("unusable lock").clone() {
            return Err(why);
        }
        let (want, _) = gateway::replicas(&self.client, &s.workload)
            .await
            .map_err(|e| one_line(&e))?;
        gateway::wait_ready(&self.client, &s.workload, want.max(1), &[], REUSE_READY)
            .await
            .map_err(|e| one_line(&e))?;
        let selector = format!("{}={}", pins::RUN_LABEL, self.opts.run_id);
        match reads {
            Some(r) => r.check_access(&selector).await,
            None => s.access.cli.check_access(&selector).await,
        }
        .map_err(|e| one_line(&e))
    }

    /// Deletes the case's sandboxes through the CLI and waits until neither the gateway nor
    /// the cluster has them, so the next case on the installation starts without them.
    async fn delete_own_sandboxes(&self, i: &Installed) -> Vec<String> {
        let mut errors = Vec::new();
        let names: Vec<String> = self
            .created
            .lock()
            .expect("created lock")
            .iter()
            .cloned()
            .collect();
        let deleted = self.deleted.lock().expect("deleted lock").clone();
        for n in names.iter().filter(|n| !deleted.contains(*n)) {
            if let Err(e) = i.cli.delete(n).await {
                errors.push(format!("delete sandbox {n}: {}", one_line(&e)));
            }
        }
        if names.is_empty() || !errors.is_empty() {
            return errors;
        }
        let resources: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.opts.namespace,
            &observe::sandbox_resource(i.sandbox_version),
        );
        let gone = gateway::wait_until(
            "teardown: the case's sandboxes gone from the gateway and the cluster",
            self.opts.timeouts.cli_lifecycle,
            gateway::POLL,
            gateway::Wake::on(resources.clone(), Default::default()),
            || async {
                let mut left = Vec::new();
                for n in &names {
                    if i.reads.get(n).await?.is_some() {
                        left.push(format!("gateway sandbox {n}"));
                    }
                    let cr = sandbox_resource_name(DEFAULT_WORKSPACE, n);
                    match resources.get_opt(&cr).await {
                        Ok(None) => {}
                        Ok(Some(_)) => left.push(format!("Sandbox {cr}")),
                        Err(e) => {
                            return Err(TargetError::infra_from(format!("get Sandbox {cr}"), e));
                        }
                    }
                }
                let seen = if left.is_empty() {
                    "none left".to_string()
                } else {
                    format!("still there: {}", left.join(", "))
                };
                Ok((left.is_empty().then_some(()), seen))
            },
        )
        .await;
        if let Err(e) = gone {
            errors.push(one_line(&e));
        }
        errors
    }

    /// What the factory does after the topology's last case, for tests of one target.
    #[cfg(test)]
    pub(crate) async fn release(&self, topology: &str) -> TargetResult<()> {
        release_shared(
            &self.shared,
            topology,
            &*self.runner,
            &self.client,
            &self.opts,
        )
        .await
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The topology's gateway access: made and registered on its first case, reused after.
    async fn access(
        &self,
        topology: &str,
        workload: &gateway::Workload,
        tls: bool,
    ) -> TargetResult<Arc<Access>> {
        let mut map = self.access.lock().await;
        if let Some(a) = map.get(topology) {
            // Each install issues new certificates (the chart's certgen hook).
            if tls {
                self.write_mtls(&a.cli.mtls_dir()).await?;
            }
            return Ok(a.clone());
        }
        let forward = GatewayForward::start(
            self.client.clone(),
            workload.clone(),
            pins::GATEWAY_GRPC_PORT,
            SocketAddr::from(([127, 0, 0, 1], 0)),
            Duration::from_secs(5),
        )
        .await?;
        let cli = cli_for(&self.opts, self.runner.clone(), topology);
        cli.prepare_home().map_err(|e| {
            TargetError::infra_from(
                format!("install: prepare the CLI's home {}", cli.home.display()),
                e,
            )
        })?;
        if tls {
            self.write_mtls(&cli.mtls_dir()).await?;
        }
        run_ok(&*self.runner, &cli.gateway_add_cmd(forward.port(), tls))
            .await
            .map_err(|e| TargetError::infra_from("install: register the gateway", e))?;
        let a = Arc::new(Access { forward, cli });
        map.insert(topology.to_string(), a.clone());
        Ok(a)
    }

    /// Writes the client certificate of a TLS gateway where the CLI looks for it.
    async fn write_mtls(&self, dir: &Path) -> TargetResult<()> {
        let secret = Api::<Secret>::namespaced(self.client.clone(), &self.opts.namespace)
            .get(CLIENT_TLS_SECRET)
            .await
            .map_err(|e| TargetError::infra_from(format!("read Secret {CLIENT_TLS_SECRET}"), e))?;
        let data = secret.data.unwrap_or_default();
        tokio::fs::create_dir_all(dir).await.map_err(|e| {
            TargetError::infra_from(format!("client certificate: create {}", dir.display()), e)
        })?;
        for key in ["ca.crt", "tls.crt", "tls.key"] {
            let v = data.get(key).ok_or_else(|| {
                TargetError::infra(format!("Secret {CLIENT_TLS_SECRET} has no `{key}`"))
            })?;
            crate::private::write_secret_file(&dir.join(key), &v.0).map_err(|e| {
                TargetError::infra_from(
                    format!("client certificate: write {}", dir.join(key).display()),
                    e,
                )
            })?;
        }
        Ok(())
    }
}

/// How the harness's own gRPC client reaches the gateway: the CLI's port-forward, presenting
/// what the CLI presents (the client certificate written for it). Err says why it cannot.
fn gateway_endpoint(
    access: &Access,
    tls: bool,
) -> std::result::Result<watch::GatewayEndpoint, watch::ConnectError> {
    let tls = if tls {
        Some(watch::ClientCert::read(&access.cli.mtls_dir())?)
    } else {
        None
    };
    Ok(watch::GatewayEndpoint {
        port: access.forward.port(),
        tls,
    })
}

fn infra(e: Error) -> TargetError {
    TargetError::infra_of(e)
}

#[async_trait]
impl Target for RealTarget {
    fn info(&self) -> TargetInfo {
        self.info.lock().expect("info lock").clone()
    }

    async fn install(&self, topology: &Topology) -> TargetResult<()> {
        let o = &self.opts;
        if let Some(why) = o.topology_skip_reason(topology).map_err(infra)? {
            return Err(TargetError::Unsupported(why));
        }
        let setup = {
            let mut cur = self.shared.lock().await;
            let reuse = match cur.as_ref() {
                Some(s) if s.topology == topology.name => match self.usable(s, None).await {
                    Ok(()) => true,
                    Err(why) => {
                        self.rec.note(format!(
                            "the OpenShell installation of topology {} that an earlier case made cannot serve this case ({why}); reinstalling",
                            s.topology
                        ));
                        false
                    }
                },
                Some(s) => {
                    self.rec.note(format!(
                        "uninstalling the OpenShell installation of topology {} before installing {}",
                        s.topology, topology.name
                    ));
                    false
                }
                None => false,
            };
            if reuse {
                self.rec.note(format!(
                    "reusing the OpenShell installation of topology {} (installed once per topology; the earlier case left its gateway ready and its sandboxes gone)",
                    topology.name
                ));
            } else {
                // One release at a time: the one there goes first, whatever --keep says.
                if let Some(old) = cur.take() {
                    uninstall(&*self.runner, &self.client, o, &old.install).await?;
                }
                *cur = Some(self.fresh_install(topology).await?);
            }
            cur.clone().expect("installed above")
        };
        let journal = Journal::new(
            o.run_dir.join(journal::FILE_NAME),
            &o.context,
            o.kubeconfig.clone(),
        )
        .cluster_ends_with_run(o.cluster_ends_with_run);
        let mut injector = FaultInjector::new(
            self.client.clone(),
            journal,
            setup.workload.clone(),
            &o.namespace,
            topology.supervisor.clone(),
            &topology.workload.container,
        );
        // kind and k3d nodes are containers the harness can exec into (a PID-1 supervisor is
        // killed from there); an existing cluster's nodes are out of reach.
        if o.provider != crate::options::Provider::Existing {
            injector.set_node_runner(self.runner.clone());
        }
        injector.set_sandbox_version(setup.sandbox_version);
        let injector = Arc::new(injector);
        injector.set_recorder(self.rec.clone());
        if let Some(reg) = &self.injectors {
            let mut reg = reg.lock().expect("injectors lock");
            reg.retain(|w| w.strong_count() > 0);
            reg.push(Arc::downgrade(&injector));
        }
        {
            let mut info = self.info.lock().expect("info lock");
            let detected = &setup.detected;
            // The gateway's version decides behaviour; the CLI's stands in when helm has none.
            info.openshell = Some(
                setup
                    .app
                    .clone()
                    .unwrap_or_else(|| detected.version.clone()),
            );
            info.versions
                .insert("openshell-cli".into(), detected.version.to_string());
            if let Some(a) = &setup.app {
                info.versions.insert("chart-app".into(), a.to_string());
            }
            info.versions
                .insert("sandbox-api".into(), setup.sandbox_version.to_string());
            info.capabilities
                .extend(detected.capabilities.iter().copied());
        }
        let reads = GatewayReads::open(
            gateway_endpoint(&setup.access, setup.install.tls),
            &format!("{}={}", pins::RUN_LABEL, o.run_id),
            setup.access.cli.clone(),
            self.rec.clone(),
        )
        .await;
        *self.installed.lock().await = Some(Arc::new(Installed {
            reads: Arc::new(reads),
            install: setup.install.clone(),
            cli: setup.access.cli.clone(),
            access: setup.access.clone(),
            _guard: RestoreGuard::new(injector.clone()),
            injector,
            sandbox_version: setup.sandbox_version,
            setup,
        }));
        Ok(())
    }

    async fn observe(&self, rec: Recorder) -> TargetResult<Observers> {
        let i = self.installed().await?;
        let spec = ObserveSpec {
            namespace: self.opts.namespace.clone(),
            sandbox_resource: observe::sandbox_resource(i.sandbox_version),
        };
        // The wall clock at this point of the timeline, so its entries can be set beside the
        // cluster's own timestamped records (the gateway's log lines of phase changes).
        rec.record(Event::Observation {
            key: WALL_CLOCK_KEY.into(),
            subject: None,
            value: serde_json::json!(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64)
            ),
        });
        let mut obs = observe::spawn(self.client.clone(), &spec)(rec.clone());
        *self.gateway_log.lock().expect("gateway_log lock") = Some(GatewayLog::start(
            self.client.clone(),
            i.setup.workload.clone(),
        ));
        // A real cluster keeps no count of main-process starts: the pod runs with
        // restartPolicy Never, so its restartCount stays 0 (docs/upstream-facts.md F1.14,
        // F4.13), and the 0.0.x CLI prints no restart count (F9.1 adds one later). The workload's own start marks are the
        // only view, read when the scenario counts; a damaged workspace therefore also shows
        // in the start counts here, unlike on the emulated target.
        rec.record(Event::Observation {
            key: MAIN_PROCESS_STARTS_SOURCE_KEY.into(),
            subject: None,
            value: serde_json::json!(
                "the workload's start marks in its workspace, read through the Kubernetes API (in the running sandbox container, else a reader pod) when the scenario counts starts"
            ),
        });
        obs.push(observe::spawn_events(
            self.client.clone(),
            &self.opts.namespace,
            rec.clone(),
        ));
        let selector = format!("{}={}", pins::RUN_LABEL, self.opts.run_id);
        let every = Duration::from_secs(2);
        let fallback = poll_fallback(i.cli.clone(), selector.clone(), rec.clone(), every);
        let endpoint = match gateway_endpoint(&i.access, i.install.tls) {
            Ok(e) => e,
            Err(why) => {
                obs.push(tokio::spawn(fallback(why.reason())));
                return Ok(obs);
            }
        };
        obs.push(tokio::spawn(watch::observe_phases(
            endpoint,
            selector,
            rec,
            watch::WatchSettings::default(),
            self.expected.clone(),
            fallback,
        )));
        Ok(obs)
    }

    async fn snapshot(&self) -> TargetResult<Vec<ObjectState>> {
        let i = self.installed().await?;
        let spec = ObserveSpec {
            namespace: self.opts.namespace.clone(),
            sandbox_resource: observe::sandbox_resource(i.sandbox_version),
        };
        let mut v = observe::snapshot(self.client.clone(), &spec)
            .await
            .map_err(|e| TargetError::infra_from("snapshot: list the observed objects", e))?;
        let selector = format!("{}={}", pins::RUN_LABEL, self.opts.run_id);
        if let Ok(list) = i.reads.list(&selector).await {
            v.extend(list.iter().map(|s| s.view().to_state()));
        }
        Ok(v)
    }

    async fn create_sandbox(&self, spec: &SandboxSpec) -> TargetResult<SandboxView> {
        let i = self.installed().await?;
        let mut spec = spec.clone();
        spec.labels
            .insert(pins::RUN_LABEL.into(), self.opts.run_id.clone());
        self.created
            .lock()
            .expect("created lock")
            .insert(spec.name.clone());
        self.deleted
            .lock()
            .expect("deleted lock")
            .remove(&spec.name);
        self.expected.expect(&spec.name);
        let caps = self.info().capabilities;
        let view = i.cli.create_reading(&spec, &caps, &*i.reads).await?;
        self.check_supervisor_clock(&spec.name).await;
        Ok(view)
    }

    async fn get_sandbox(&self, name: &str) -> TargetResult<Option<SandboxView>> {
        self.installed().await?.reads.get(name).await
    }

    async fn exec(&self, sandbox: &str, argv: &[String]) -> TargetResult<ExecResult> {
        self.installed().await?.cli.exec(sandbox, argv).await
    }

    async fn probe_exec(&self, sandbox: &str, argv: &[String]) -> TargetResult<ExecResult> {
        // The workload container is `agent` in every topology at 0.0.111 (docs/upstream-facts.md
        // F3.4).
        let pod = sandbox_resource_name(DEFAULT_WORKSPACE, sandbox);
        crate::kexec::exec(&self.client, &self.opts.namespace, &pod, "agent", argv).await
    }

    async fn read_workspace(&self, sandbox: &str, path: &str) -> TargetResult<Option<String>> {
        let cr = sandbox_resource_name(DEFAULT_WORKSPACE, sandbox);
        crate::workspace::read(
            &self.client,
            &self.opts.namespace,
            &cr,
            path,
            &self.opts.run_id,
            Duration::from_secs(120),
        )
        .await
    }

    async fn sample_main_process_starts(&self, sandbox: &str, marks: &str) -> TargetResult<()> {
        let read = self.read_workspace(sandbox, marks).await;
        crate::workspace::record_start_marks(&self.rec, sandbox, read);
        Ok(())
    }

    async fn stop_sandbox(&self, name: &str) -> TargetResult<()> {
        self.installed().await?.cli.stop(name).await
    }

    async fn start_sandbox(&self, name: &str) -> TargetResult<()> {
        self.installed().await?.cli.start(name).await
    }

    async fn delete_sandbox(&self, name: &str) -> TargetResult<()> {
        self.installed().await?.cli.delete(name).await?;
        self.deleted
            .lock()
            .expect("deleted lock")
            .insert(name.to_string());
        Ok(())
    }

    async fn inject(&self, fault: &Fault) -> TargetResult<()> {
        self.installed().await?.injector.inject(fault).await
    }

    async fn restore(&self, fault: &Fault) -> TargetResult<()> {
        self.installed().await?.injector.restore(fault).await
    }

    async fn verify_restored(&self, fault: &Fault) -> TargetResult<()> {
        self.installed()
            .await?
            .injector
            .verify_restored(fault)
            .await
    }

    async fn verify_observation(&self) -> TargetResult<()> {
        let Some(log) = self.gateway_log.lock().expect("gateway_log lock").take() else {
            return Ok(());
        };
        let read = log.finish().await;
        let sandboxes = self.created.lock().expect("created lock").clone();
        // A gateway or supervisor off the harness's clock is named first: what else it did
        // ran at its speed.
        let on_clock = crate::clock_skew::check(&self.rec, &read, conformance_core::clock::scale())
            .and(
                match self
                    .supervisor_off_clock
                    .lock()
                    .expect("off-clock lock")
                    .take()
                {
                    Some(e) => Err(e),
                    None => Ok(()),
                },
            );
        let complete =
            crate::completeness::verify(&self.rec, &read, &sandboxes, OBSERVER_SETTLE).await;
        on_clock.and(complete)
    }

    async fn supervisor_log(&self, sandbox: &str) -> TargetResult<Option<Vec<String>>> {
        let injector = self.installed().await?.injector.clone();
        let at = injector.layout().supervisor_log(sandbox);
        conformance_observe::timestamped_log(&self.client, &injector.sandbox_namespace, &at)
            .await
            .map(Some)
            .map_err(|e| TargetError::infra_from("reading the supervisor's log", e))
    }

    async fn teardown(&self) -> TargetResult<()> {
        let Some(i) = self.installed.lock().await.take() else {
            let started = self.helm_started.lock().expect("helm_started lock").take();
            return match started {
                Some(inst) if !self.opts.keep => {
                    uninstall(&*self.runner, &self.client, &self.opts, &inst).await
                }
                _ => Ok(()),
            };
        };
        let mut errors = i.injector.restore_all().await;
        // Evidence first: teardown is about to remove the release and the sandboxes.
        let timeline = self.rec.snapshot();
        if wants_diagnostics(self.opts.diagnostics, &timeline) {
            let dir = self.opts.run_dir.join("diagnostics").join(format!(
                "{}-{}",
                i.install.topology,
                self.rec.elapsed().as_millis()
            ));
            match self.diagnostics_with(&i, &dir, Some(&timeline)).await {
                Ok(b) => self.rec.note(format!(
                    "{}{}",
                    crate::diagnostics::BUNDLE_NOTE,
                    b.archive.display()
                )),
                Err(e) => errors.push(format!("diagnostics: {}", one_line(&e))),
            }
        }
        if !self.opts.keep {
            let deleted = self.delete_own_sandboxes(&i).await;
            // A case that leaves the installation unusable (sandboxes it could not remove, a
            // gateway that is not back) makes the next case of the topology reinstall rather
            // than fail for it; the installation itself goes after the topology's last case.
            let why = if deleted.is_empty() {
                self.usable(&i.setup, Some(&i.reads)).await.err()
            } else {
                Some(deleted.join("; "))
            };
            if let Some(why) = why {
                self.rec.note(format!(
                    "this case leaves the OpenShell installation of topology {} unusable ({why}); the next case of the topology reinstalls it",
                    i.setup.topology
                ));
                *i.setup.unusable.lock().expect("unusable lock") = Some(why);
            }
            errors.extend(deleted);
        }
        drop(i);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(TargetError::infra(format!(
                "teardown: {}",
                errors.join("; ")
            )))
        }
    }
}

/// Uninstalls the installation `topology`'s cases shared, after its last case (unless --keep).
async fn release_shared(
    shared: &SharedInstall,
    topology: &str,
    runner: &dyn CommandRunner,
    client: &Client,
    opts: &RealOptions,
) -> TargetResult<()> {
    let mut cur = shared.lock().await;
    if cur.as_ref().is_none_or(|s| s.topology != topology) {
        return Ok(());
    }
    let s = cur.take().expect("checked above");
    if opts.keep {
        return Ok(());
    }
    uninstall(runner, client, opts, &s.install).await
}

/// Uninstalls the release and deletes the gateway's data PVCs, which `helm uninstall` keeps
/// (docs/upstream-facts.md F5.10).
async fn uninstall(
    runner: &dyn CommandRunner,
    client: &Client,
    opts: &RealOptions,
    inst: &Install,
) -> TargetResult<()> {
    inst.uninstall(runner)
        .await
        .map_err(|e| TargetError::infra(one_line(&e)))?;
    leftovers::delete_data_pvcs(client, opts, Duration::from_secs(120))
        .await
        .map_err(|e| TargetError::infra(one_line(&e)))
}

/// The observer of the gateway's phases when the WatchSandbox stream cannot be used: the
/// `sandbox list` poller, after a timeline note that says why.
pub(crate) fn poll_fallback(
    cli: OpenShellCli,
    selector: String,
    rec: Recorder,
    every: Duration,
) -> watch::Fallback {
    Box::new(move |why: String| {
        Box::pin(async move {
            watch::record_observer(
                &rec,
                &watch::poll_observer(every, &why),
                &watch::fallback_note(every, &why),
            );
            phase_poller(cli, selector, rec, every).await
        })
    })
}

/// Polls `openshell sandbox list -o json` and records the gateway's phase of every sandbox of
/// the run; a sandbox that leaves the list is recorded as deleted.
pub(crate) async fn phase_poller(
    cli: OpenShellCli,
    selector: String,
    rec: Recorder,
    every: Duration,
) {
    // The CLI can only be asked, not watched: say on the timeline that these states are
    // samples, so a `never` check's pass states how coarse it is.
    rec.record(Event::Observation {
        key: SAMPLING_INTERVAL_KEY.to_string(),
        subject: Some(GATEWAY_SANDBOX_KIND.to_string()),
        value: serde_json::Value::from(every.as_millis() as u64),
    });
    rec.record(Event::Note {
        message: format!(
            "the gateway's sandbox phases are polled with `openshell sandbox list` every {}s; a phase held for less may not be on this timeline",
            every.as_secs_f64()
        ),
    });
    let mut known: BTreeSet<String> = BTreeSet::new();
    let mut phases: BTreeMap<String, conformance_core::phase::Phase> = BTreeMap::new();
    // What `get` said on entry into the current phase, kept while the phase holds.
    let mut exit_codes: BTreeMap<String, i32> = BTreeMap::new();
    let mut last_refusal: Option<String> = None;
    loop {
        match cli.list(Some(&selector)).await {
            Ok(list) => {
                last_refusal = None;
                let now: BTreeSet<String> = list.iter().map(|s| s.name.clone()).collect();
                for s in &list {
                    let mut view = s.view();
                    // `list` never prints an exit code or a restart count; where a CLI prints
                    // them at all it is in `get` (docs/upstream-facts.md F6.4, F9.1). Asked once
                    // per entry into a phase a process exit leads to; absent stays unknown.
                    let entered = phases.get(&s.name) != Some(&s.phase);
                    if entered {
                        exit_codes.remove(&s.name);
                    }
                    if entered
                        && ended_phase(&s.phase)
                        && let Ok(Some(detail)) = cli.get_json(&s.name).await
                    {
                        if let Some(code) = detail.exit_code() {
                            exit_codes.insert(s.name.clone(), code);
                        }
                        if let Some(n) = detail.restart_count() {
                            rec.record(Event::Observation {
                                key: "restart_count".to_string(),
                                subject: Some(format!("{GATEWAY_SANDBOX_KIND}/{}", s.name)),
                                value: serde_json::Value::from(n),
                            });
                        }
                    }
                    view.exit_code = view.exit_code.or(exit_codes.get(&s.name).copied());
                    phases.insert(s.name.clone(), s.phase.clone());
                    rec.observe(view.to_state());
                }
                for gone in known.difference(&now) {
                    crate::watch::record_deleted(&rec, gone);
                    phases.remove(gone);
                    exit_codes.remove(gone);
                }
                known = now;
            }
            // The gateway may be down on purpose; the watchers keep observing meanwhile, and
            // what the gateway would say is unknown until it answers again.
            Err(e) => {
                let detail = e.to_string();
                // A refusal is not an outage: the gateway answered and said no (for example
                // Unauthenticated). Say so once per distinct answer, where the user looks.
                if matches!(e, TargetError::Refused { .. }) {
                    if last_refusal.as_deref() != Some(detail.as_str()) {
                        tracing::warn!(error = %e, "the gateway refused the phase poll");
                        rec.note(format!(
                            "the gateway refused `openshell sandbox list`: {detail}"
                        ));
                        last_refusal = Some(detail.clone());
                    }
                } else {
                    tracing::debug!(error = %e, "phase poll failed");
                }
                for name in &known {
                    rec.observe(SandboxView::unreachable_state(name, &detail));
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// Phases a sandbox reaches when its process ended, where an exit code may be known.
fn ended_phase(p: &conformance_core::phase::Phase) -> bool {
    use conformance_core::phase::Phase;
    matches!(p, Phase::Error | Phase::Completed | Phase::Restarting)
}

/// Whether a case's timeline calls for a bundle: a failed check, or a stage that failed or
/// errored.
pub fn wants_diagnostics(
    policy: crate::options::DiagnosticsPolicy,
    timeline: &conformance_core::timeline::Timeline,
) -> bool {
    use crate::options::DiagnosticsPolicy;
    use conformance_core::timeline::{Event, StageStatus};
    match policy {
        DiagnosticsPolicy::Always => true,
        DiagnosticsPolicy::Never => false,
        DiagnosticsPolicy::OnFailure => {
            crate::completeness::noted_missed(timeline)
                || timeline.entries.iter().any(|e| match &e.event {
                    Event::Check(c) => !c.passed,
                    Event::Stage(s) => matches!(s.status, StageStatus::Failed | StageStatus::Error),
                    _ => false,
                })
        }
    }
}
