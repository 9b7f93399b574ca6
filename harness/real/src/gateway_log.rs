//! The gateway's log during a case, for [`crate::completeness`]: every container of every
//! gateway pod followed from the start of the case (with the kubelet's timestamps), since a
//! gateway pod that a fault deletes takes its log with it; at the end the pods still there are
//! read once more, so what was logged up to that moment is all there.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use kube::{Client, ResourceExt};

use crate::completeness::GatewayLogRead;
use crate::gateway::{self, Workload};
use conformance_core::error::one_line;

/// One container instance's log: (pod name, pod uid, container).
type Source = (String, String, String);

#[derive(Default)]
struct Collected {
    /// Lines per source, each with the kubelet's timestamp (so a line read twice is one).
    lines: BTreeMap<Source, BTreeSet<String>>,
    /// Why a source could not be read, until it is.
    problems: BTreeMap<Source, String>,
}

type Shared = Arc<Mutex<Collected>>;

/// Follows the gateway's log from [`GatewayLog::start`] until [`GatewayLog::finish`].
pub(crate) struct GatewayLog {
    client: Client,
    workload: Workload,
    started: tokio::time::Instant,
    collected: Shared,
    task: tokio::task::JoinHandle<()>,
}

/// How far back each read goes: the case's start, and this much more for clock granularity.
const SLACK: Duration = Duration::from_secs(2);

fn lock(c: &Shared) -> std::sync::MutexGuard<'_, Collected> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

fn source_name(s: &Source) -> String {
    format!("{}/{}", s.0, s.2)
}

impl GatewayLog {
    /// Starts following the logs of `workload`'s pods, those there now and those to come.
    pub(crate) fn start(client: Client, workload: Workload) -> Self {
        let started = tokio::time::Instant::now();
        let collected: Shared = Default::default();
        let task = tokio::spawn(discover(
            client.clone(),
            workload.clone(),
            started,
            collected.clone(),
        ));
        Self {
            client,
            workload,
            started,
            collected,
            task,
        }
    }

    /// Reads the pods still there once more (their current and previous containers), stops
    /// following, and returns everything read since the start.
    pub(crate) async fn finish(self) -> GatewayLogRead {
        match gateway::pods(&self.client, &self.workload).await {
            Ok(pods) => {
                let api = Api::<Pod>::namespaced(self.client.clone(), &self.workload.namespace);
                for p in &pods {
                    for (source, container) in sources(p) {
                        for previous in [false, true] {
                            let lp = params(&container, self.started, false, previous);
                            match api.logs(&source.0, &lp).await {
                                Ok(text) => add(&self.collected, &source, text.lines()),
                                // Most containers have no previous instance.
                                Err(_) if previous => {}
                                Err(e) => {
                                    lock(&self.collected)
                                        .problems
                                        .entry(source.clone())
                                        .or_insert_with(|| one_line(&e));
                                }
                            }
                        }
                    }
                }
            }
            Err(e) => {
                let mut c = lock(&self.collected);
                c.problems.insert(
                    (String::new(), String::new(), String::new()),
                    format!("the gateway's pods: {}", one_line(&e)),
                );
            }
        }
        self.task.abort();
        let c = lock(&self.collected);
        let mut text = String::new();
        for lines in c.lines.values() {
            for l in lines {
                text.push_str(l);
                text.push('\n');
            }
        }
        GatewayLogRead {
            text,
            unreadable: c
                .problems
                .iter()
                .filter(|(s, _)| c.lines.get(*s).is_none_or(BTreeSet::is_empty))
                .map(|(s, why)| {
                    if s.0.is_empty() {
                        why.clone()
                    } else {
                        format!("{}: {why}", source_name(s))
                    }
                })
                .collect(),
        }
    }
}

impl Drop for GatewayLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The containers of pod `p` as log sources.
fn sources(p: &Pod) -> Vec<(Source, String)> {
    let (name, uid) = (p.name_any(), p.uid().unwrap_or_default());
    p.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| ((name.clone(), uid.clone(), c.name.clone()), c.name.clone()))
        .collect()
}

fn params(
    container: &str,
    started: tokio::time::Instant,
    follow: bool,
    previous: bool,
) -> LogParams {
    LogParams {
        container: Some(container.to_string()),
        follow,
        previous,
        timestamps: true,
        since_seconds: Some((started.elapsed() + SLACK).as_secs() as i64 + 1),
        ..LogParams::default()
    }
}

fn add<'a>(c: &Shared, source: &Source, lines: impl Iterator<Item = &'a str>) {
    let mut c = lock(c);
    let set = c.lines.entry(source.clone()).or_default();
    set.extend(lines.filter(|l| !l.is_empty()).map(str::to_string));
}

/// Finds the workload's pods as they come and follows each container's log.
async fn discover(client: Client, workload: Workload, started: tokio::time::Instant, c: Shared) {
    let mut followed: BTreeSet<Source> = BTreeSet::new();
    let mut followers = tokio::task::JoinSet::new();
    let mut wake = gateway::pods_wake(&client, &workload);
    loop {
        if let Ok(pods) = gateway::pods(&client, &workload).await {
            for p in &pods {
                for (source, container) in sources(p) {
                    if followed.insert(source.clone()) {
                        followers.spawn(follow(
                            Api::<Pod>::namespaced(client.clone(), &workload.namespace),
                            source,
                            container,
                            started,
                            c.clone(),
                        ));
                    }
                }
            }
        }
        while followers.try_join_next().is_some() {}
        let _ = tokio::time::timeout(Duration::from_secs(1), wake.next()).await;
    }
}

/// Follows one container's log while its pod (this uid) exists; a container that restarts is
/// followed again (the second read repeats lines, which count once).
async fn follow(
    api: Api<Pod>,
    source: Source,
    container: String,
    started: tokio::time::Instant,
    c: Shared,
) {
    let (name, uid) = (&source.0, &source.1);
    loop {
        match api
            .log_stream(name, &params(&container, started, true, false))
            .await
        {
            Ok(stream) => {
                lock(&c).problems.remove(&source);
                let mut lines = stream.lines();
                while let Some(Ok(line)) = lines.next().await {
                    add(&c, &source, std::iter::once(line.as_str()));
                }
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return,
            // A container not started yet answers 400 until it is; the last answer is kept
            // in case the container is never read.
            Err(e) => {
                lock(&c).problems.insert(source.clone(), one_line(&e));
            }
        }
        match api.get_opt(name).await {
            Ok(Some(p)) if p.uid().as_deref() == Some(uid.as_str()) => {}
            Ok(_) => return,
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
