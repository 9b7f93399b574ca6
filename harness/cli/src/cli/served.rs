//! `run --target served`: the real-cluster path, unchanged, against a served emulated cluster
//! that this process starts on a loopback port for the run and stops after it.
//!
//! The served cluster is disposable by construction (it lives as long as the run), so its one
//! context is allowed for faults. Everything else is the existing-cluster target of
//! `conformance-real`, which is handed a kubeconfig and a context and knows nothing more: real
//! helm installs the chart, real kubectl applies the Agent Sandbox manifest, the real
//! `openshell` CLI drives sandboxes through the harness's port-forward. What answers is the
//! kube emulator running its image models: OpenShell's behaviour comes from the model chosen
//! with `--model`, not from OpenShell.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use conformance_core::error::{Error, Result};
use conformance_core::target::{Target, TargetFactory, TargetInfo, TargetResult};
use conformance_core::timeline::Recorder;
use conformance_core::topology::Topology;
use conformance_real::options::{Provider, RealOptions};

use super::args::{RunArgs, real_options};

/// The one context of a served cluster's kubeconfig.
pub(crate) const CONTEXT: &str = kube_emulator::serve::CONTEXT;

/// The model the served cluster's images run when `--model` is not given: the release whose
/// chart the harness installs by default (`installed_by_default` in `fixtures/releases/`).
pub(crate) fn default_model() -> &'static str {
    &conformance_core::release::Releases::builtin()
        .installed_by_default()
        .name
}

/// What `--target served` runs: the model and defect switches of the served cluster's images,
/// and the real-path options pointing at it.
pub(crate) struct Plan {
    pub(crate) model: String,
    /// The real OpenShell binaries the gateway and supervisor images run, if given.
    pub(crate) binaries: Option<PathBuf>,
    pub(crate) defects: Vec<String>,
    pub(crate) opts: RealOptions,
    /// Cases run at once, each on a served cluster of its own.
    pub(crate) jobs: usize,
}

/// Checks the flags and the tools before anything starts, so a missing chart, manifest or CLI
/// is reported at once: a path the user gave that is not there is a usage error (exit 2), a
/// tool that cannot be found on `PATH` an infrastructure one (exit 3).
pub(crate) fn plan(args: &RunArgs) -> Result<Plan> {
    if args.real.context.is_some() || args.real.kubeconfig.is_some() {
        return Err(Error::usage(
            "--target served starts its own cluster and writes its kubeconfig; drop --context and --kubeconfig (or use --target existing for a cluster you serve yourself)",
        ));
    }
    if !args.real.load_images.is_empty() {
        return Err(Error::usage(
            "--load-image has no meaning on --target served: its images are models, not pulled",
        ));
    }
    if args.agent_sandbox.is_some() {
        return Err(Error::usage(
            "--agent-sandbox picks the emulated target's Agent Sandbox model; on --target served the manifest decides (--agent-sandbox-manifest or --agent-sandbox-version)",
        ));
    }
    let model = args
        .model
        .clone()
        .unwrap_or_else(|| default_model().to_string());
    // Refuse an unknown model or defect now, with the emulated target's words for it.
    conformance_models::spec::Selection::parse(&model, &args.defects, None)
        .map_err(|e| Error::usage(e.to_string()))?;
    if let Some(chart) = &args.real.chart_path
        && !chart.join("Chart.yaml").is_file()
    {
        return Err(Error::usage(format!(
            "--chart-path {}: no Chart.yaml there; give the directory of an unpacked OpenShell chart (or leave it out to install the published chart)",
            chart.display()
        )));
    }
    if let Some(manifest) = &args.real.agent_sandbox_manifest
        && !manifest.is_file()
    {
        return Err(Error::usage(format!(
            "--agent-sandbox-manifest {}: no such file",
            manifest.display()
        )));
    }
    // The user's paths before the machine's tools: a bad path is refused (exit 2) wherever
    // the run is started.
    let mut real = args.real.clone();
    real.allow_context.push(CONTEXT.to_string());
    real.context = Some(CONTEXT.to_string());
    let mut opts = real_options(&real, Provider::Existing, &args.artifacts)?;
    // Its cluster lives in this process: a journal of a killed run names nothing to restore.
    opts.cluster_ends_with_run = true;
    check_tool(
        &args.real.openshell_bin,
        "--openshell-bin",
        "the openshell CLI",
    )?;
    if let Some(dir) = &args.openshell_binaries {
        conformance_models::host::HostImages::openshell(dir)
            .map_err(|e| Error::usage(format!("--openshell-binaries: {e}")))?;
        if let Some(why) = conformance_node::unsupported() {
            return Err(Error::infra(format!(
                "--openshell-binaries: containers cannot run as processes here: {why}"
            )));
        }
    }
    check_tool("helm", "PATH", "helm 3")?;
    check_tool("kubectl", "PATH", "kubectl")?;
    Ok(Plan {
        model,
        binaries: args.openshell_binaries.clone(),
        defects: args.defects.clone(),
        opts,
        jobs: args.jobs(),
    })
}

/// A program named with a path must be that file (exit 2: the user's path); a bare name must
/// be on `PATH` (exit 3: a tool the machine lacks).
fn check_tool(program: &str, flag: &str, what: &str) -> Result<()> {
    let path = Path::new(program);
    if path.components().count() > 1 {
        return if path.is_file() {
            Ok(())
        } else {
            Err(Error::usage(format!(
                "{flag} {program}: no such file ({what})"
            )))
        };
    }
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false);
    if found {
        Ok(())
    } else if flag == "--openshell-bin"
        && program != conformance_real::options::DEFAULT_OPENSHELL_BIN
    {
        // A name the user gave: theirs to fix, as a path that is not there.
        Err(Error::usage(format!(
            "{flag} {program}: no `{program}` on PATH; give {what} (a path, or a name on PATH)"
        )))
    } else if flag == "PATH" {
        Err(Error::infra(format!(
            "{what} (`{program}`) is not on PATH; install it (`make tools` puts helm and kubectl in .tools/bin)"
        )))
    } else {
        Err(Error::infra(format!(
            "{what} (`{program}`) is not on PATH; install it or pass {flag} FILE"
        )))
    }
}

impl Plan {
    /// The lines `--dry-run` prints before the real path's plan.
    pub(crate) fn header(&self) -> String {
        let defects = if self.defects.is_empty() {
            String::new()
        } else {
            format!(" with defect switches {}", self.defects.join(", "))
        };
        let mut header = format!(
            "# openshell-conformance run --target served: the real path below runs against a served emulated cluster\n\
             # per topology, when its first case runs: start a served cluster in-process on 127.0.0.1 (a free port), images running model {}{defects} on that topology; nothing pre-installed\n\
             # write its kubeconfig (context {CONTEXT}) to {}; the context is allowed for faults: the cluster lives only as long as the run\n",
            self.model,
            self.kubeconfig("$TOPOLOGY", 1).display(),
        );
        if self.jobs > 1 {
            header.push_str(&format!(
                "# --jobs {}: up to {} cases at once, longest first, each on a served cluster of its topology that no other case is on (its own API server, node and network namespaces); \
                 a case that finds none free starts one, with its own private directory {} (kubeconfig, CLI registration, helm values)\n",
                self.jobs,
                self.jobs,
                self.opts
                    .private_dir
                    .join(further_dir("$TOPOLOGY", "$N"))
                    .display(),
            ));
        }
        header
    }

    /// Where the `n`th served cluster of `topology` writes its kubeconfig: its private
    /// directory.
    fn kubeconfig(&self, topology: &str, n: usize) -> PathBuf {
        self.private_dir(topology, n)
            .join(format!("served-kubeconfig-{topology}"))
    }

    /// The private directory of the `n`th served cluster of `topology` (its kubeconfig, the
    /// CLI's registration, the helm values): the run's for the first, as with `--jobs 1`; for
    /// each further one (`--jobs` above 1) a directory of its own in it, since the CLI's gateway
    /// name and the values file are named after the topology only.
    fn private_dir(&self, topology: &str, n: usize) -> PathBuf {
        let dir = &self.opts.private_dir;
        if n == 1 {
            dir.clone()
        } else {
            dir.join(further_dir(topology, n))
        }
    }

    /// The options for the real path, as `--dry-run` plans them (one topology named, or a
    /// placeholder for the kubeconfig of each).
    pub(crate) fn dry_run_options(&self, topologies: &[&Topology]) -> RealOptions {
        let mut o = self.opts.clone();
        let name = match topologies {
            [one] => one.name.as_str(),
            _ => "$TOPOLOGY",
        };
        o.kubeconfig = Some(self.kubeconfig(name, 1));
        o
    }

    /// The factory: it starts the served cluster of a topology when the first case on it is
    /// provisioned.
    pub(crate) fn factory(self) -> Result<ServedFactory> {
        let runner: Arc<dyn conformance_real::command::CommandRunner> =
            Arc::new(conformance_real::command::SystemRunner);
        // Only for info(): it connects to nothing until provisioned, which it never is.
        let describe = conformance_real::target::RealFactory::new(self.opts.clone(), runner)?;
        Ok(ServedFactory {
            describe,
            pool: Default::default(),
            plan: self,
        })
    }

    /// Starts the `n`th served cluster of `topology`, writes its kubeconfig, and prepares the
    /// real path on it (reachability, leftovers, Agent Sandbox).
    async fn start(&self, topology: &Topology, n: usize) -> Result<Served> {
        conformance_real::cluster::create_private_dir(&self.opts)?;
        let mut opts = self.opts.clone();
        opts.private_dir = self.private_dir(&topology.name, n);
        conformance_real::cluster::create_private_dir(&opts)?;
        let kubeconfig = self.kubeconfig(&topology.name, n);
        let served = crate::serve::start_images(
            &self.model,
            &self.defects,
            &topology.name,
            "127.0.0.1:0".parse().expect("a loopback address"),
            Some(&kubeconfig),
            self.binaries.as_deref(),
        )
        .await
        .map_err(Error::from)?;
        let runs = match &self.binaries {
            Some(dir) => format!("real OpenShell binaries from {}", dir.display()),
            None => format!("model {}", self.model),
        };
        tell!(
            "{} on https://{} ({runs}); kubeconfig {}, context {CONTEXT}",
            cluster_name(&topology.name, n),
            served.addr,
            kubeconfig.display()
        );
        opts.kubeconfig = Some(kubeconfig);
        let runner: Arc<dyn conformance_real::command::CommandRunner> =
            Arc::new(conformance_real::command::SystemRunner);
        let real = conformance_real::target::RealFactory::new(opts, runner)?;
        real.prepare().await?;
        Ok(Served {
            real,
            _served: served,
        })
    }
}

/// The name of the private directory of a further served cluster of a topology.
fn further_dir(topology: &str, n: impl std::fmt::Display) -> String {
    format!("served-{topology}-{n}")
}

/// How messages name the `n`th served cluster of `topology` (the first as with `--jobs 1`).
fn cluster_name(topology: &str, n: usize) -> String {
    if n == 1 {
        format!("served cluster for {topology}")
    } else {
        format!("served cluster {n} for {topology}")
    }
}

/// A served cluster and the real path's factory on it.
struct Served {
    real: conformance_real::target::RealFactory,
    _served: crate::serve::ServedCluster,
}

/// One served cluster of the run, and whether a case runs on it.
struct Slot {
    topology: String,
    cluster: Arc<Served>,
    lease: Lease,
}

enum Lease {
    Free,
    /// Taken by a case that is being provisioned.
    Claimed,
    /// The target of the case running on it: the cluster is free again once the engine has
    /// dropped that target, at the end of the case.
    Running(std::sync::Weak<dyn Target>),
}

impl Slot {
    fn free(&self) -> bool {
        match &self.lease {
            Lease::Free => true,
            Lease::Claimed => false,
            Lease::Running(t) => t.strong_count() == 0,
        }
    }
}

#[derive(Default)]
struct Pool {
    /// Only ever grows, so a slot's index names it for the run.
    slots: Vec<Slot>,
    /// Clusters started (or being started) per topology, to number the next.
    started: BTreeMap<String, usize>,
}

/// The existing-cluster factory on served clusters (the gateway model runs the topology it was
/// started with and refuses a chart configured for another), reporting itself as `served` with
/// the model its images run, so the report's title, the expectations and the JUnit properties
/// name the model under test, as on the emulated target. A case runs on a cluster of its
/// topology that no other case is running on, started when there is none: one cluster per
/// topology when cases run one at a time, up to `--jobs` per topology when they run side by
/// side, each with its own API server, node and network namespaces, so no case sees another's
/// faults. The clusters serve until the factory is dropped at the end of the run.
pub(crate) struct ServedFactory {
    plan: Plan,
    describe: conformance_real::target::RealFactory,
    pool: std::sync::Mutex<Pool>,
}

impl ServedFactory {
    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A free cluster of `topology`, claimed; or one started and claimed.
    async fn claim(&self, topology: &Topology) -> TargetResult<(usize, Arc<Served>)> {
        let n = {
            let mut pool = self.pool();
            if let Some((i, slot)) = pool
                .slots
                .iter_mut()
                .enumerate()
                .find(|(_, s)| s.topology == topology.name && s.free())
            {
                slot.lease = Lease::Claimed;
                return Ok((i, slot.cluster.clone()));
            }
            let n = pool.started.entry(topology.name.clone()).or_default();
            *n += 1;
            *n
        };
        // Started outside the lock: cases starting side by side start their clusters so.
        let cluster = Arc::new(self.plan.start(topology, n).await.map_err(|e| {
            conformance_core::target::TargetError::infra(format!(
                "{}: {}",
                cluster_name(&topology.name, n),
                conformance_core::error::one_line(&e)
            ))
        })?);
        let mut pool = self.pool();
        pool.slots.push(Slot {
            topology: topology.name.clone(),
            cluster: cluster.clone(),
            lease: Lease::Claimed,
        });
        Ok((pool.slots.len() - 1, cluster))
    }
}

#[async_trait]
impl TargetFactory for ServedFactory {
    fn info(&self) -> TargetInfo {
        let mut info = self.describe.info();
        info.kind = "served".into();
        info.model = Some(self.plan.model.clone());
        info.defects = self.plan.defects.clone();
        info
    }

    async fn provision(
        &self,
        topology: &Topology,
        rec: &Recorder,
    ) -> TargetResult<Arc<dyn Target>> {
        let (i, cluster) = self.claim(topology).await?;
        let target = cluster.real.provision(topology, rec).await;
        self.pool().slots[i].lease = match &target {
            Ok(t) => Lease::Running(Arc::downgrade(t)),
            Err(_) => Lease::Free,
        };
        target
    }

    /// Releases every cluster of the topology (each uninstalls what its cases shared).
    async fn release(&self, topology: &Topology) -> TargetResult<()> {
        let clusters: Vec<Arc<Served>> = self
            .pool()
            .slots
            .iter()
            .filter(|s| s.topology == topology.name)
            .map(|s| s.cluster.clone())
            .collect();
        let released =
            futures::future::join_all(clusters.iter().map(|c| c.real.release(topology))).await;
        released.into_iter().collect()
    }
}
