//! What a case holds after it ends: nothing. Its cluster, models and tasks go with its runtime,
//! so a run of many cases (the whole proof is over a thousand) needs the memory of the cases
//! running at once, not of every case run so far.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use conformance_core::engine::EngineOptions;
use conformance_core::pool;
use conformance_core::target::{Target, TargetFactory, TargetInfo, TargetResult};
use conformance_core::testkit;
use conformance_core::timeline::Recorder;
use conformance_core::topology::Topology;
use kube_emulator::WeakCluster;

use crate::spec::Selection;
use crate::target::{EmulatedFactory, EmulatedTarget};

/// The emulated factory, keeping a handle on each cluster that does not keep it alive.
struct Watching {
    inner: EmulatedFactory,
    clusters: Mutex<Vec<WeakCluster>>,
}

#[async_trait]
impl TargetFactory for Watching {
    fn info(&self) -> TargetInfo {
        self.inner.info()
    }

    async fn provision(
        &self,
        topology: &Topology,
        _rec: &Recorder,
    ) -> TargetResult<Arc<dyn Target>> {
        let t = EmulatedTarget::start(self.inner.selection.clone(), topology);
        self.clusters.lock().unwrap().push(t.cluster.downgrade());
        Ok(Arc::new(t))
    }
}

#[test]
fn a_finished_case_frees_its_cluster() {
    let factory = Arc::new(Watching {
        inner: EmulatedFactory::new(Selection::contract()),
        clusters: Mutex::new(Vec::new()),
    });
    let case = testkit::case(testkit::standard_steps());
    let reports = pool::run_paused(
        factory.clone(),
        EngineOptions::default(),
        vec![case.clone(), case],
        1,
        &(),
    );
    assert_eq!(reports.len(), 2);
    assert!(
        reports.iter().all(|r| r.timeline.outcome().is_some()),
        "every case ran to its end"
    );
    let clusters = factory.clusters.lock().unwrap();
    assert_eq!(clusters.len(), 2, "each case provisions its own cluster");
    let alive = clusters.iter().filter(|c| c.is_alive()).count();
    assert_eq!(alive, 0, "clusters still held after their cases ended");
}
