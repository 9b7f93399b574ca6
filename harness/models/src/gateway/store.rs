//! The gateway's durable store: one JSON document on the gateway's PVC volume, the way upstream
//! keeps an SQLite `objects` table on `openshell-data-openshell-0` (docs/upstream-facts.md F5.3).
//! It survives gateway restarts; sessions and logs do not (F1.17).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use conformance_core::phase::Phase;
use conformance_core::target::{RestartPolicy, SandboxView};
use kube_emulator::shell::Volume;

impl SandboxRecord {
    /// What the gateway reports of this sandbox (empty reasons and messages are none).
    pub(crate) fn view(&self) -> SandboxView {
        SandboxView {
            name: self.name.clone(),
            phase: self.phase.clone(),
            reason: self.reason.clone().filter(|s| !s.is_empty()),
            message: self.message.clone().filter(|s| !s.is_empty()),
            exit_code: self.exit_code,
            // The model numbers no writes, and answers nothing stale after a restart.
            resource_version: None,
        }
    }
}

/// Where the database lives inside the gateway's data volume (`sqlite:/var/openshell/openshell.db`).
pub(crate) const DB_PATH: &str = "/openshell.db";

/// One sandbox row (`object_type = "sandbox"`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: String,
    pub name: String,
    pub cr_name: String,
    pub phase: Phase,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// The labels the client gave at create (`ListSandboxes` filters on them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub restart_policy: Option<RestartPolicy>,
    #[serde(default)]
    pub restart_count: u32,
    /// `main_process_instance_id` of the running generation, as the supervisor reported it.
    #[serde(default)]
    pub main_instance: Option<u64>,
    /// The last sandbox pod a supervisor bootstrapped from (to tell a replacement pod).
    #[serde(default)]
    pub last_pod_uid: Option<String>,
    /// A workspace reset is owed to the next bootstrap (defect `workspace-pvc-replaced…`).
    #[serde(default)]
    pub workspace_reset_pending: bool,
    /// Relaunch the completed main on the next session (defect `completed-workload-replayed`).
    #[serde(default)]
    pub replay_pending: bool,
    /// The 0.1.x boundary attached: the workload pod's gate may open.
    #[serde(default)]
    pub boundary_attached: bool,
    /// The first supervisor session's shell lag was served (defect `ready-before-shell-usable`).
    #[serde(default)]
    pub shell_lag_served: bool,
    /// How many times the sandbox turned Ready (defect `ready-again-before-shell-usable`).
    #[serde(default)]
    pub readies: u64,
    /// StartSandbox calls accepted so far (a new boundary epoch on the gateway topology).
    #[serde(default)]
    pub starts: u64,
    /// Kubernetes Events already turned into status (their resourceVersions).
    #[serde(default)]
    pub seen_events: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Db {
    /// Incremented at each gateway start.
    pub boots: u64,
    /// Sandbox ids are `sbx-<n>` (deterministic; upstream uses UUIDs).
    pub next_id: u64,
    pub sandboxes: BTreeMap<String, SandboxRecord>,
}

/// Told the gateway's view of every sandbox each time the store is written, while the write
/// is still in progress: an observer that must see every change, however brief, cannot rely
/// on reading the store later (the next change may already have replaced it).
pub(crate) type ViewHook = Arc<dyn Fn(&[SandboxView]) + Send + Sync>;

/// Where the model keeps the [`ViewHook`]; shared by every gateway process it starts, so a
/// hook set once sees the stores of restarted gateways too.
pub(crate) type ViewSink = Arc<Mutex<Option<ViewHook>>>;

/// The store: the document in memory, written through to the volume on every change.
pub struct Store {
    volume: Volume,
    pub db: Db,
    sink: ViewSink,
    /// Every write, in order, for the served `WatchSandbox` streams (one snapshot per write,
    /// so a watcher sees each committed phase however brief; sent only while one listens).
    changes: tokio::sync::broadcast::Sender<Arc<Db>>,
}

impl Store {
    /// Opens the store; a missing or unreadable file is a fresh database.
    pub fn open(volume: Volume) -> Self {
        let db = volume
            .read(DB_PATH)
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Self {
            volume,
            db,
            sink: ViewSink::default(),
            changes: tokio::sync::broadcast::channel(1024).0,
        }
    }

    /// Tells `sink`'s hook about every write from now on.
    pub(crate) fn with_sink(mut self, sink: ViewSink) -> Self {
        self.sink = sink;
        self
    }

    pub(crate) fn save(&self) {
        let bytes = serde_json::to_vec_pretty(&self.db).expect("the store serializes");
        self.volume.write(DB_PATH, &bytes);
        if self.changes.receiver_count() > 0 {
            let _ = self.changes.send(Arc::new(self.db.clone()));
        }
        let hook = self.sink.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(hook) = hook {
            let views: Vec<SandboxView> = self
                .db
                .sandboxes
                .values()
                .map(SandboxRecord::view)
                .collect();
            hook(&views);
        }
    }

    /// Snapshots of the database after each write from now on.
    pub(crate) fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<Db>> {
        self.changes.subscribe()
    }

    pub fn get(&self, name: &str) -> Option<&SandboxRecord> {
        self.db.sandboxes.get(name)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut SandboxRecord> {
        self.db.sandboxes.get_mut(name)
    }

    pub fn names(&self) -> Vec<String> {
        self.db.sandboxes.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopening_the_volume() {
        let v = Volume::new();
        let mut s = Store::open(v.clone());
        s.db.boots = 1;
        s.db.sandboxes.insert(
            "demo".into(),
            SandboxRecord {
                name: "demo".into(),
                phase: Phase::Stopped,
                ..Default::default()
            },
        );
        s.save();
        let s2 = Store::open(v);
        assert_eq!(s2.db.boots, 1);
        assert_eq!(s2.get("demo").unwrap().phase, Phase::Stopped);
    }
}
