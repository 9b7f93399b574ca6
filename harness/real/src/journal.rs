//! The restore journal: before the harness changes something that will not heal by itself (a
//! gateway scaled to zero, a broken pod template), it writes how to undo it to a file, and
//! removes the entry once restored. If the process is killed in between, `openshell-conformance
//! restore` reads the file and repairs the cluster.

use conformance_core::user_file::Kind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use serde::{Deserialize, Serialize};

use crate::gateway::{self, Workload};
use conformance_core::error::{Error, Result, one_line};

/// How to undo one change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "undo", rename_all = "kebab-case")]
pub enum Undo {
    /// Scale the workload back to its original replica count and wait until ready.
    ScaleBack { workload: Workload, replicas: i32 },
    /// Put a Sandbox resource's pod template volumes back (they hold Secret names, modes and a
    /// token audience, no key material) and delete the harness's Secret, if it made one. A
    /// Sandbox that is gone needs no template.
    RestorePodTemplateVolumes {
        /// `agents.x-k8s.io/v1beta1` or `…/v1alpha1`.
        api_version: String,
        namespace: String,
        name: String,
        volumes: serde_json::Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret: Option<String>,
    },
    /// Delete a node-access pod the harness created (a supervisor kill on an existing cluster).
    DeletePod { namespace: String, name: String },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub id: String,
    /// The fault this entry belongs to (`gateway-stop`, …).
    pub fault: String,
    pub undo: Undo,
}

/// The journal file: the context it applies to and what is left to undo.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JournalFile {
    pub context: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// Written by a run whose cluster lived in its own process (`run --target served`): when
    /// the run is killed its cluster goes with it, so nothing is left to restore.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cluster_ended_with_run: bool,
    pub entries: Vec<Entry>,
}

/// A journal on disk. Every change is written with write-then-rename, so a kill leaves either
/// the old or the new file, never half of one.
#[derive(Clone, Debug)]
pub struct Journal {
    path: PathBuf,
    lock: std::sync::Arc<tokio::sync::Mutex<()>>,
    context: String,
    kubeconfig: Option<PathBuf>,
    cluster_ends_with_run: bool,
}

/// The journal's file name inside a run directory.
pub const FILE_NAME: &str = "restore-journal.json";

/// The lock of the journal at `path`, one per path in the process: the journals of cases that
/// run side by side (each on a served cluster of its own) are one file, read, changed and
/// renamed into place through one temporary name.
fn lock_of(path: &Path) -> std::sync::Arc<tokio::sync::Mutex<()>> {
    static LOCKS: std::sync::OnceLock<
        std::sync::Mutex<
            std::collections::BTreeMap<PathBuf, std::sync::Arc<tokio::sync::Mutex<()>>>,
        >,
    > = std::sync::OnceLock::new();
    LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry(crate::options::resolved(path))
        .or_default()
        .clone()
}

impl Journal {
    pub fn new(path: impl Into<PathBuf>, context: &str, kubeconfig: Option<PathBuf>) -> Self {
        let path = path.into();
        Self {
            lock: lock_of(&path),
            path,
            context: context.to_string(),
            kubeconfig,
            cluster_ends_with_run: false,
        }
    }

    /// Marks the journal of a run whose cluster ends with it (see
    /// [`JournalFile::cluster_ended_with_run`]).
    pub fn cluster_ends_with_run(mut self, yes: bool) -> Self {
        self.cluster_ends_with_run = yes;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads a journal file; a missing file is an empty journal.
    pub async fn read(path: &Path) -> Result<JournalFile> {
        match tokio::fs::read(path).await {
            // Not UTF-8 is not JSON: the same refusal as any other file that is no journal.
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| Error::config(path, "(document)", e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(JournalFile::default()),
            Err(e) => Err(Error::infra_from(
                format!("restore journal {}", path.display()),
                e,
            )),
        }
    }

    async fn write(path: &Path, file: &JournalFile) -> Result<()> {
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| Error::infra_from(format!("restore journal {}", dir.display()), e))?;
        }
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(file).expect("journal serializes");
        tokio::fs::write(&tmp, text)
            .await
            .map_err(|e| Error::infra_from(format!("restore journal {}", tmp.display()), e))?;
        tokio::fs::rename(&tmp, path)
            .await
            .map_err(|e| Error::infra_from(format!("restore journal {}", path.display()), e))
    }

    /// Records an entry before the change it undoes is made.
    pub async fn add(&self, entry: Entry) -> Result<()> {
        let _g = self.lock.lock().await;
        let mut f = Self::read(&self.path).await?;
        f.context = self.context.clone();
        f.kubeconfig = self.kubeconfig.clone();
        f.cluster_ended_with_run = self.cluster_ends_with_run;
        f.entries.retain(|e| e.id != entry.id);
        f.entries.push(entry);
        Self::write(&self.path, &f).await
    }

    /// Drops an entry once its change is undone; the file goes when it is empty.
    pub async fn remove(&self, id: &str) -> Result<()> {
        let _g = self.lock.lock().await;
        let mut f = Self::read(&self.path).await?;
        f.entries.retain(|e| e.id != id);
        if f.entries.is_empty() {
            remove_file(&self.path).await
        } else {
            Self::write(&self.path, &f).await
        }
    }

    pub async fn entries(&self) -> Result<Vec<Entry>> {
        Ok(Self::read(&self.path).await?.entries)
    }
}

/// Removes a journal file (one already gone is fine): when it is empty, or its cluster ended
/// with its run.
async fn remove_file(path: &Path) -> Result<()> {
    match tokio::fs::remove_file(path).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::infra_from(
            format!("restore journal {}", path.display()),
            e,
        )),
        _ => Ok(()),
    }
}

/// What a new run does with a journal an earlier run left where it writes its own.
#[derive(Debug, PartialEq)]
pub enum Earlier {
    /// None there, or one with nothing left in it.
    None,
    /// A served run's journal (its cluster ended with it), with its entry count: the new run
    /// removes it ([`remove_ended`]) once every other check has passed.
    Ended(usize),
}

/// Checks for a journal an earlier run left at `path`, before a new run writes its own there:
/// a served run's is reported (its cluster is gone; nothing is removed here); one that holds faults on a cluster that
/// outlived its run is refused (exit 2), since the new run would merge its own entries into it
/// and judge a cluster that may still have them active.
pub async fn earlier(path: &Path) -> Result<Earlier> {
    if !tokio::fs::try_exists(path).await.unwrap_or(false) {
        return Ok(Earlier::None);
    }
    let file = Journal::read(path).await.map_err(|e| {
        Error::usage(format!(
            "{} is not a restore journal this harness wrote ({}); move it away or remove it",
            path.display(),
            one_line(&e)
        ))
    })?;
    if file.entries.is_empty() {
        return Ok(Earlier::None);
    }
    if file.cluster_ended_with_run {
        return Ok(Earlier::Ended(file.entries.len()));
    }
    Err(Error::usage(format!(
        "{} holds {} fault(s) an earlier run left active on context {}: undo them first with `openshell-conformance restore --journal {}`, or remove the file if that cluster is gone",
        path.display(),
        file.entries.len(),
        file.context,
        path.display()
    )))
}

/// Removes a journal [`earlier`] found [`Earlier::Ended`].
pub async fn remove_ended(path: &Path) -> Result<()> {
    remove_file(path).await
}

/// Carries out one undo.
pub async fn undo(client: &Client, u: &Undo, deadline: Duration) -> Result<()> {
    match u {
        Undo::ScaleBack { workload, replicas } => {
            gateway::scale(client, workload, *replicas).await?;
            gateway::wait_ready(client, workload, *replicas, &[], deadline)
                .await
                .map_err(|e| {
                    Error::infra_from(
                        format!(
                            "restore: wait for {}/{} to be ready",
                            workload.namespace, workload.name
                        ),
                        e,
                    )
                })
        }
        Undo::RestorePodTemplateVolumes {
            api_version,
            namespace,
            name,
            volumes,
            secret,
        } => {
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, "Sandbox"),
                "sandboxes",
            );
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
            // A merge patch replaces the whole list: the template is as it was.
            let patch =
                serde_json::json!({"spec": {"podTemplate": {"spec": {"volumes": volumes}}}});
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    return Err(Error::infra_from(
                        format!("restore: put back the pod template of Sandbox {namespace}/{name}"),
                        e,
                    ));
                }
            }
            if let Some(secret) = secret {
                let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
                match api.delete(secret, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => {
                        return Err(Error::infra_from(
                            format!("restore: delete Secret {namespace}/{secret}"),
                            e,
                        ));
                    }
                }
            }
            Ok(())
        }
        Undo::DeletePod { namespace, name } => {
            crate::faults::node_pod::delete_node_pod(client, namespace, name, deadline)
                .await
                .map_err(|e| {
                    Error::infra_from(format!("restore: delete pod {namespace}/{name}"), e)
                })
        }
    }
}

/// What `restore` did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RestoreReport {
    pub restored: Vec<String>,
    pub failed: Vec<String>,
    /// Entries of a journal whose cluster ended with its run: nothing to undo, the journal is
    /// removed.
    pub ended: usize,
}

impl std::fmt::Display for RestoreReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.ended > 0 {
            return writeln!(
                f,
                "nothing to restore: the journal is from a served run (`run --target served`), whose cluster ended with it; its {} entr{} named faults on that cluster only. The journal is removed.",
                self.ended,
                if self.ended == 1 { "y" } else { "ies" }
            );
        }
        if self.restored.is_empty() && self.failed.is_empty() {
            return writeln!(f, "nothing to restore");
        }
        for r in &self.restored {
            writeln!(f, "restored: {r}")?;
        }
        for r in &self.failed {
            writeln!(f, "FAILED: {r}")?;
        }
        Ok(())
    }
}

/// Repairs the cluster from a journal left by a killed run: undoes every entry, last written
/// first (a change made on top of another is undone before it: a Sandbox template broken while
/// the Agent Sandbox controller was paused is put back before the controller resumes), removing
/// each one that succeeds. The caller builds `client` for the journal's context
/// ([`Journal::read`] tells which) after the interlock allowed it.
pub async fn restore_from(
    path: &Path,
    client: &Client,
    deadline: Duration,
) -> Result<RestoreReport> {
    let file = Journal::read(path).await?;
    let journal = Journal::new(path, &file.context, file.kubeconfig.clone());
    let mut report = RestoreReport::default();
    for e in file.entries.iter().rev() {
        let label = format!("{} ({}): {:?}", e.fault, e.id, e.undo);
        match undo(client, &e.undo, deadline).await {
            Ok(()) => {
                journal.remove(&e.id).await?;
                report.restored.push(label);
            }
            Err(err) => report.failed.push(format!("{label}: {}", one_line(&err))),
        }
    }
    if report.failed.is_empty() {
        Ok(report)
    } else {
        Err(Error::infra(format!(
            "restore left {} change(s) undone; the journal {} keeps them:\n{report}",
            report.failed.len(),
            path.display()
        )))
    }
}

/// `openshell-conformance restore`: reads the journal, checks its context against the
/// interlock, connects and undoes what is left. A journal that is not there is a usage error
/// naming the path: a mistyped path must not read as "nothing to restore".
pub async fn restore(
    path: &Path,
    allow_contexts: &[String],
    deadline: Duration,
) -> Result<RestoreReport> {
    let cannot = |why: &str| {
        format!(
            "restore --journal {}: {why}; give the {FILE_NAME} of the run to repair \
             (a run that undid all its faults removes its journal: then no restore is needed)",
            path.display()
        )
    };
    match tokio::fs::metadata(path).await {
        Err(e) => return Err(Error::usage_from(cannot("cannot be read"), e)),
        Ok(m) if !m.is_file() => return Err(Error::usage(cannot("not a file"))),
        Ok(m) if m.len() > Kind::Journal.cap() => {
            return Err(Error::usage(cannot(&format!(
                "{} bytes, more than a restore journal may have ({} MiB)",
                m.len(),
                Kind::Journal.cap() >> 20
            ))));
        }
        Ok(_) => {}
    }
    // The user named this file: one that cannot be read is a usage error like a missing one.
    let file = Journal::read(path).await.map_err(|e| match e {
        Error::Config { message, .. } => {
            Error::usage(cannot(&format!("not a restore journal ({message})")))
        }
        other => Error::usage(cannot(&format!(
            "cannot be read ({})",
            conformance_core::error::one_line(&other)
        ))),
    })?;
    if file.entries.is_empty() {
        return Ok(RestoreReport::default());
    }
    if file.cluster_ended_with_run {
        remove_file(path).await?;
        return Ok(RestoreReport {
            ended: file.entries.len(),
            ..RestoreReport::default()
        });
    }
    crate::interlock::check(&file.context, allow_contexts)?;
    let client = crate::apiclient::client_for(file.kubeconfig.as_deref(), &file.context).await?;
    restore_from(path, &client, deadline).await
}
