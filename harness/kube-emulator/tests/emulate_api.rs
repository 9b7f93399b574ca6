//! The emulated API server through the production client stack (`kube::Client` over the
//! in-memory transport), in paused (virtual) time.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Pod};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    PropagationPolicy, WatchEvent, WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use kube_emulator::{Cluster, ClusterConfig, DEFAULT_EPOCH_UNIX, ResourceRef};
use serde_json::{Value, json};
use std::time::Duration;

/// A cluster serving one CRD in two versions (the Agent Sandbox one) besides the built-ins.
fn cluster() -> Cluster {
    Cluster::new(ClusterConfig {
        crds: vec![
            serde_saphyr::from_str(include_str!(
                "../../../fixtures/crds/sandboxes.agents.x-k8s.io.yaml"
            ))
            .unwrap(),
        ],
        ..ClusterConfig::default()
    })
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1"}]}
    }))
    .unwrap()
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

fn api_error(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn sts(name: &str, replicas: i32) -> StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}
    }))
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn creating_a_pod_assigns_uid_creation_timestamp_and_resource_version_deterministically() {
    let c = cluster();
    tokio::time::sleep(Duration::from_secs(90)).await;
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let created = pods
        .create(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    let md = &created.metadata;
    let uid = md.uid.clone().unwrap();
    assert_eq!(uid.len(), 36, "uid is UUID-shaped: {uid}");
    let ts = md.creation_timestamp.as_ref().unwrap().0.as_second();
    assert_eq!(
        ts,
        DEFAULT_EPOCH_UNIX as i64 + 90,
        "creationTimestamp is the epoch plus virtual time"
    );
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(
        created.spec.unwrap().restart_policy.as_deref(),
        Some("Always"),
        "pod defaults are applied"
    );

    // The same operations on a fresh cluster give the same uid and resourceVersion.
    let c2 = cluster();
    tokio::time::sleep(Duration::from_secs(90)).await;
    let again = Api::<Pod>::default_namespaced(c2.client())
        .create(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    assert_eq!(again.metadata.uid, Some(uid));
    assert_eq!(again.metadata.resource_version, md.resource_version);
}

#[tokio::test(start_paused = true)]
async fn get_of_a_missing_object_is_404_not_found_and_a_duplicate_create_is_409_already_exists() {
    let c = cluster();
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let (code, reason, msg) = api_error(pods.get("nope").await.unwrap_err());
    assert_eq!(
        (code, reason.as_str(), msg.as_str()),
        (404, "NotFound", "pods \"nope\" not found")
    );
    pods.create(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    let (code, reason, msg) = api_error(
        pods.create(&PostParams::default(), &pod("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (code, reason.as_str(), msg.as_str()),
        (409, "AlreadyExists", "pods \"a\" already exists")
    );
}

#[tokio::test(start_paused = true)]
async fn invalid_objects_are_422_and_unknown_namespaces_404() {
    let c = cluster();
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let (code, reason, msg) = api_error(
        pods.create(&PostParams::default(), &pod("Bad_Name"))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(
        msg.starts_with("Pod \"Bad_Name\" is invalid: metadata.name: Invalid value"),
        "{msg}"
    );
    let nopods: Api<Pod> = Api::namespaced(c.client(), "missing");
    let (code, _, msg) = api_error(
        nopods
            .create(&PostParams::default(), &pod("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (code, msg.as_str()),
        (404, "namespaces \"missing\" not found")
    );
}

#[tokio::test(start_paused = true)]
async fn list_returns_the_collection_resource_version_and_honours_label_and_field_selectors() {
    let c = cluster();
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    pods.create(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    let mut b = pod("b");
    b.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
    pods.create(&PostParams::default(), &b).await.unwrap();
    let all = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(all.items.len(), 2);
    assert_eq!(
        all.metadata.resource_version,
        Some(c.resource_version().to_string())
    );
    let web = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(
        web.items
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect::<Vec<_>>(),
        ["a"]
    );
    let by_name = pods
        .list(&ListParams::default().fields("metadata.name=b,status.phase=Pending"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    let (code, _, msg) = api_error(
        pods.list(&ListParams::default().fields("spec.bogus=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (code, msg.as_str()),
        (400, "field label not supported: spec.bogus")
    );
}

#[tokio::test(start_paused = true)]
async fn a_stale_resource_version_update_gets_409_conflict() {
    let c = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    let first = cms.create(&PostParams::default(), &cm("x")).await.unwrap();
    let mut winner = first.clone();
    winner.data = Some([("k".to_string(), "winner".to_string())].into());
    cms.replace("x", &PostParams::default(), &winner)
        .await
        .unwrap();
    let mut loser = first;
    loser.data = Some([("k".to_string(), "loser".to_string())].into());
    let (code, reason, msg) = api_error(
        cms.replace("x", &PostParams::default(), &loser)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert_eq!(
        msg,
        "Operation cannot be fulfilled on configmaps \"x\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(cms.get("x").await.unwrap().data.unwrap()["k"], "winner");
}

#[tokio::test(start_paused = true)]
async fn a_write_that_changes_nothing_keeps_the_resource_version() {
    let c = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    let first = cms.create(&PostParams::default(), &cm("x")).await.unwrap();
    let again = cms
        .replace("x", &PostParams::default(), &first)
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        first.metadata.resource_version
    );
}

#[tokio::test(start_paused = true)]
async fn watch_replays_events_newer_than_the_given_resource_version() {
    let c = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    let a = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let from = a.metadata.resource_version.clone().unwrap();
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(10), &from)
        .await
        .unwrap()
        .boxed();
    let mut seen = vec![];
    while let Some(ev) = stream.try_next().await.unwrap() {
        match ev {
            WatchEvent::Added(o) => seen.push(format!("ADDED {}", o.metadata.name.unwrap())),
            WatchEvent::Deleted(o) => seen.push(format!("DELETED {}", o.metadata.name.unwrap())),
            WatchEvent::Bookmark(_) => {}
            other => seen.push(format!("{other:?}")),
        }
    }
    assert_eq!(seen, ["ADDED b", "DELETED a"]);
}

#[tokio::test(start_paused = true)]
async fn a_watch_from_a_resource_version_older_than_the_window_gets_410_expired_and_a_relist_recovers()
 {
    let c = Cluster::new(ClusterConfig {
        event_window: 3,
        ..ClusterConfig::default()
    });
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    let old = cms
        .create(&PostParams::default(), &cm("c0"))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    for i in 1..6 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}")))
            .await
            .unwrap();
    }
    let mut stream = cms
        .watch(&WatchParams::default(), &old)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message.starts_with("too old resource version"),
                "{}",
                e.message
            );
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    assert!(
        stream.try_next().await.unwrap().is_none(),
        "the watch ends after 410"
    );
    let relist = cms.list(&ListParams::default()).await.unwrap();
    assert_eq!(relist.items.len(), 6);
    let rv = relist.metadata.resource_version.unwrap();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &cm("c6")).await.unwrap();
    assert!(
        matches!(stream.try_next().await.unwrap(), Some(WatchEvent::Added(o)) if o.metadata.name.as_deref() == Some("c6"))
    );
}

#[tokio::test(start_paused = true)]
async fn watch_sends_bookmarks_when_asked_and_ends_at_timeout_seconds() {
    let c = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let start = tokio::time::Instant::now();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(150), &rv)
        .await
        .unwrap()
        .boxed();
    let mut bookmarks = vec![];
    while let Some(ev) = stream.try_next().await.unwrap() {
        match ev {
            WatchEvent::Bookmark(b) => {
                bookmarks.push((start.elapsed().as_secs(), b.metadata.resource_version))
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(150),
        "the server ends the watch at timeoutSeconds"
    );
    // Every 60 s, and one just before the server ends the watch.
    assert_eq!(bookmarks, [(60, rv.clone()), (120, rv.clone()), (150, rv)]);
}

#[tokio::test(start_paused = true)]
async fn a_watch_without_bookmarks_sends_nothing_during_a_quiet_period() {
    let c = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    let start = tokio::time::Instant::now();
    let mut stream = cms
        .watch(
            &WatchParams::default().timeout(200).disable_bookmarks(),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    assert!(stream.try_next().await.unwrap().is_none());
    assert_eq!(start.elapsed(), Duration::from_secs(200));
}

#[tokio::test(start_paused = true)]
async fn a_label_filtered_watch_sees_an_object_leave_its_selection_as_deleted() {
    let c = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    let mut x = cm("x");
    x.metadata.labels = Some([("keep".to_string(), "yes".to_string())].into());
    let created = cms.create(&PostParams::default(), &x).await.unwrap();
    let rv = created.metadata.resource_version.unwrap();
    cms.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"keep": "no"}}})),
    )
    .await
    .unwrap();
    let mut stream = cms
        .watch(&WatchParams::default().labels("keep=yes").timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        stream.try_next().await.unwrap(),
        Some(WatchEvent::Deleted(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_runtime_watcher_over_a_600s_quiet_period_sees_a_later_change_exactly_once() {
    let c = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    cms.create(&PostParams::default(), &cm("before"))
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let w = watcher(cms.clone(), watcher::Config::default());
    let task = tokio::spawn(async move {
        let mut s = w.boxed();
        while let Some(ev) = s.next().await {
            if let Ok(ev) = ev {
                let _ = tx.send((tokio::time::Instant::now(), ev));
            }
        }
    });
    let start = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(600)).await;
    cms.create(&PostParams::default(), &cm("after"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    task.abort();
    let mut applies_of_after = 0;
    let mut inits = 0;
    while let Ok((at, ev)) = rx.try_recv() {
        match ev {
            watcher::Event::Init => inits += 1,
            watcher::Event::Apply(o) if o.metadata.name.as_deref() == Some("after") => {
                applies_of_after += 1;
                assert_eq!(
                    at - start,
                    Duration::from_secs(600),
                    "seen as soon as it happened"
                );
            }
            watcher::Event::InitApply(o) => assert_eq!(o.metadata.name.as_deref(), Some("before")),
            _ => {}
        }
    }
    assert_eq!(inits, 1, "the watcher never had to relist");
    assert_eq!(applies_of_after, 1);
}

#[tokio::test(start_paused = true)]
async fn merge_patch_changes_fields_and_a_stale_resource_version_in_it_conflicts() {
    let c = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    let first = cms.create(&PostParams::default(), &cm("x")).await.unwrap();
    let out = cms
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": null, "n": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        out.data.unwrap(),
        [("n".to_string(), "1".to_string())].into()
    );
    let stale = json!({"metadata": {"resourceVersion": first.metadata.resource_version}, "data": {"n": "2"}});
    assert_eq!(
        api_error(
            cms.patch("x", &PatchParams::default(), &Patch::Merge(stale))
                .await
                .unwrap_err()
        )
        .0,
        409
    );
}

#[tokio::test(start_paused = true)]
async fn json_patch_applies_operations_and_a_failed_test_is_422() {
    let c = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    cms.create(&PostParams::default(), &cm("x")).await.unwrap();
    let p: json_patch::Patch =
        serde_json::from_value(json!([{"op": "add", "path": "/data/z", "value": "26"}])).unwrap();
    let out = cms
        .patch("x", &PatchParams::default(), &Patch::Json::<()>(p))
        .await
        .unwrap();
    assert_eq!(out.data.unwrap()["z"], "26");
    let p: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/z", "value": "0"}])).unwrap();
    assert_eq!(
        api_error(
            cms.patch("x", &PatchParams::default(), &Patch::Json::<()>(p))
                .await
                .unwrap_err()
        )
        .0,
        422
    );
}

#[tokio::test(start_paused = true)]
async fn strategic_merge_patch_merges_containers_by_name() {
    let c = cluster();
    let sets: Api<StatefulSet> = Api::default_namespaced(c.client());
    sets.create(&PostParams::default(), &sts("gw", 1))
        .await
        .unwrap();
    let p =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "s:1"}]}}}});
    let out = sets
        .patch("gw", &PatchParams::default(), &Patch::Strategic(p))
        .await
        .unwrap();
    let names: Vec<String> = out
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["c", "side"]);
    assert_eq!(
        out.metadata.generation,
        Some(2),
        "a spec change bumps generation"
    );
}

#[tokio::test(start_paused = true)]
async fn server_side_apply_creates_then_merges() {
    let c = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    let pp = PatchParams::apply("harness");
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "1"}});
    cms.patch("x", &pp, &Patch::Apply(body)).await.unwrap();
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"b": "2"}});
    let out = cms.patch("x", &pp, &Patch::Apply(body)).await.unwrap();
    assert_eq!(out.data.unwrap().len(), 2);
    let (code, _, msg) = api_error(
        cms.patch("x", &PatchParams::default(), &Patch::Apply(json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(msg.contains("fieldManager: Required value"));
}

#[tokio::test(start_paused = true)]
async fn scale_up_and_down_through_the_scale_subresource_changes_spec_replicas_and_generation() {
    let c = cluster();
    let sets: Api<StatefulSet> = Api::default_namespaced(c.client());
    sets.create(&PostParams::default(), &sts("openshell", 1))
        .await
        .unwrap();
    let scale = sets.get_scale("openshell").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(1));
    assert_eq!(
        scale.status.unwrap().selector.as_deref(),
        Some("app=openshell")
    );
    let down = sets
        .patch_scale(
            "openshell",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    assert_eq!(down.spec.unwrap().replicas, Some(0));
    let s = sets.get("openshell").await.unwrap();
    assert_eq!(
        (s.spec.unwrap().replicas, s.metadata.generation),
        (Some(0), Some(2))
    );
    sets.patch_scale(
        "openshell",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    let s = sets.get("openshell").await.unwrap();
    assert_eq!(
        (s.spec.unwrap().replicas, s.metadata.generation),
        (Some(1), Some(3))
    );
}

#[tokio::test(start_paused = true)]
async fn status_writes_change_only_status_and_main_writes_ignore_status() {
    let c = cluster();
    let sets: Api<StatefulSet> = Api::default_namespaced(c.client());
    sets.create(&PostParams::default(), &sts("s", 1))
        .await
        .unwrap();
    let st = json!({"status": {"replicas": 1, "readyReplicas": 1}, "spec": {"replicas": 5}});
    let out = sets
        .patch_status("s", &PatchParams::default(), &Patch::Merge(st))
        .await
        .unwrap();
    assert_eq!(out.status.unwrap().ready_replicas, Some(1));
    assert_eq!(
        out.spec.unwrap().replicas,
        Some(1),
        "spec is ignored on /status"
    );
    assert_eq!(
        out.metadata.generation,
        Some(1),
        "status writes do not bump generation"
    );
    let out = sets
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyReplicas": 0}})),
        )
        .await
        .unwrap();
    assert_eq!(
        out.status.unwrap().ready_replicas,
        Some(1),
        "status is ignored on the main resource"
    );
}

fn owned_cm(name: &str, owner: &StatefulSet, block: bool) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [{
        "apiVersion": "apps/v1", "kind": "StatefulSet", "name": owner.metadata.name, "uid": owner.metadata.uid,
        "controller": true, "blockOwnerDeletion": block}]}}))
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn background_deletion_garbage_collects_owned_objects() {
    let c = cluster();
    let sets: Api<StatefulSet> = Api::default_namespaced(c.client());
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    let owner = sets
        .create(&PostParams::default(), &sts("o", 1))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &owned_cm("dep", &owner, false))
        .await
        .unwrap();
    sets.delete("o", &DeleteParams::background()).await.unwrap();
    assert_eq!(api_error(cms.get("dep").await.unwrap_err()).0, 404);
}

#[tokio::test(start_paused = true)]
async fn foreground_deletion_keeps_the_owner_until_blocking_dependents_are_gone() {
    let c = cluster();
    let sets: Api<StatefulSet> = Api::default_namespaced(c.client());
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    let owner = sets
        .create(&PostParams::default(), &sts("o", 1))
        .await
        .unwrap();
    let mut dep = owned_cm("dep", &owner, true);
    dep.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &dep).await.unwrap();
    sets.delete("o", &DeleteParams::foreground()).await.unwrap();
    let o = sets.get("o").await.unwrap();
    assert!(o.metadata.deletion_timestamp.is_some());
    assert_eq!(
        o.metadata.finalizers,
        Some(vec!["foregroundDeletion".to_string()])
    );
    assert!(
        cms.get("dep")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    cms.patch(
        "dep",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_error(cms.get("dep").await.unwrap_err()).0, 404);
    assert_eq!(api_error(sets.get("o").await.unwrap_err()).0, 404);
}

#[tokio::test(start_paused = true)]
async fn orphan_deletion_leaves_dependents_without_the_owner_reference() {
    let c = cluster();
    let sets: Api<StatefulSet> = Api::default_namespaced(c.client());
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    let owner = sets
        .create(&PostParams::default(), &sts("o", 1))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &owned_cm("dep", &owner, false))
        .await
        .unwrap();
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    sets.delete("o", &dp).await.unwrap();
    assert_eq!(api_error(sets.get("o").await.unwrap_err()).0, 404);
    let dep = cms.get("dep").await.unwrap();
    assert_eq!(dep.metadata.owner_references.unwrap_or_default().len(), 0);
}

#[tokio::test(start_paused = true)]
async fn finalizers_keep_a_deleted_object_until_they_are_removed() {
    let c = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
    let mut x = cm("x");
    x.metadata.finalizers = Some(vec!["example.com/f".into()]);
    cms.create(&PostParams::default(), &x).await.unwrap();
    let resp = cms.delete("x", &DeleteParams::default()).await.unwrap();
    assert!(
        resp.is_left(),
        "the object is returned while it waits for finalizers"
    );
    let held = cms.get("x").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    let p = json!({"metadata": {"finalizers": ["example.com/f", "example.com/new"]}});
    assert_eq!(
        api_error(
            cms.patch("x", &PatchParams::default(), &Patch::Merge(p))
                .await
                .unwrap_err()
        )
        .0,
        422
    );
    cms.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": []}})),
    )
    .await
    .unwrap();
    assert_eq!(api_error(cms.get("x").await.unwrap_err()).0, 404);
}

#[tokio::test(start_paused = true)]
async fn deleting_a_namespace_deletes_its_content_then_the_namespace() {
    let c = cluster();
    let nss: Api<Namespace> = Api::all(c.client());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
    )
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c.client(), "team");
    cms.create(&PostParams::default(), &cm("x")).await.unwrap();
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_error(nss.get("team").await.unwrap_err()).0, 404);
    assert_eq!(api_error(cms.get("x").await.unwrap_err()).0, 404);
    let (code, _, _) = api_error(
        cms.create(&PostParams::default(), &cm("y"))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 404);
}

#[tokio::test(start_paused = true)]
async fn a_namespace_with_a_terminating_pod_stays_terminating_and_refuses_new_content() {
    let c = cluster();
    let nss: Api<Namespace> = Api::all(c.client());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(c.client(), "team");
    pods.create(&PostParams::default(), &pod("p"))
        .await
        .unwrap();
    let ns_uid = nss.get("team").await.unwrap().metadata.uid.unwrap();
    c.bind_pod("team", "p", "node-1").unwrap();
    let start = tokio::time::Instant::now();
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    assert_eq!(
        nss.get("team")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase
            .as_deref(),
        Some("Terminating")
    );
    let (code, reason, _) = api_error(
        pods.create(&PostParams::default(), &pod("q"))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    kube::runtime::wait::await_condition(
        nss.clone(),
        "team",
        kube::runtime::conditions::is_deleted(&ns_uid),
    )
    .await
    .unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(30),
        "the pod's default grace period"
    );
}

#[tokio::test(start_paused = true)]
async fn graceful_pod_deletion_keeps_a_bound_pod_for_its_grace_period() {
    let c = cluster();
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let mut p = pod("gw");
    p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(5);
    let uid = pods
        .create(&PostParams::default(), &p)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    c.bind_pod("default", "gw", "node-1").unwrap();
    let start = tokio::time::Instant::now();
    pods.delete("gw", &DeleteParams::default()).await.unwrap();
    let t = pods.get("gw").await.unwrap();
    assert_eq!(t.metadata.deletion_grace_period_seconds, Some(5));
    kube::runtime::wait::await_condition(
        pods.clone(),
        "gw",
        kube::runtime::conditions::is_deleted(&uid),
    )
    .await
    .unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    // An unbound pod goes at once.
    pods.create(&PostParams::default(), &pod("pending"))
        .await
        .unwrap();
    assert!(
        pods.delete("pending", &DeleteParams::default())
            .await
            .unwrap()
            .is_left()
    );
    assert_eq!(api_error(pods.get("pending").await.unwrap_err()).0, 404);
}

#[tokio::test(start_paused = true)]
async fn deleting_with_grace_zero_ends_a_pending_grace_period_at_once() {
    let c = cluster();
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    pods.create(&PostParams::default(), &pod("gw"))
        .await
        .unwrap();
    c.bind_pod("default", "gw", "node-1").unwrap();
    pods.delete("gw", &DeleteParams::default()).await.unwrap();
    pods.delete("gw", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert_eq!(api_error(pods.get("gw").await.unwrap_err()).0, 404);
}

#[tokio::test(start_paused = true)]
async fn a_pvc_gets_the_protection_finalizer_and_is_released_when_no_pod_uses_it() {
    let c = cluster();
    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(c.client());
    let pvc: PersistentVolumeClaim =
        serde_json::from_value(json!({"metadata": {"name": "workspace-x"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}}))
        .unwrap();
    let created = pvcs.create(&PostParams::default(), &pvc).await.unwrap();
    assert_eq!(
        created.metadata.finalizers,
        Some(vec!["kubernetes.io/pvc-protection".to_string()])
    );
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let user: Pod = serde_json::from_value(json!({"metadata": {"name": "user"}, "spec": {
        "containers": [{"name": "c", "image": "i:1"}],
        "volumes": [{"name": "w", "persistentVolumeClaim": {"claimName": "workspace-x"}}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &user).await.unwrap();
    pvcs.delete("workspace-x", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        pvcs.get("workspace-x")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some(),
        "in use: kept"
    );
    pods.delete("user", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_error(pvcs.get("workspace-x").await.unwrap_err()).0, 404);
}

#[tokio::test(start_paused = true)]
async fn sandboxes_are_served_in_v1beta1_and_v1alpha1_with_schema_defaults() {
    let c = cluster();
    let client = c.client();
    let beta = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("agents.x-k8s.io", "v1beta1", "Sandbox"),
        "sandboxes",
    );
    let alpha = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("agents.x-k8s.io", "v1alpha1", "Sandbox"),
        "sandboxes",
    );
    let b: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &beta);
    let a: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &alpha);
    let obj: DynamicObject = serde_json::from_value(json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
        "metadata": {"name": "default--demo"}, "spec": {"podTemplate": {"spec": {"containers": []}}}})).unwrap();
    let created = b.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(
        created.data["spec"]["operatingMode"], "Running",
        "the CRD default applies"
    );
    assert_eq!(created.metadata.generation, Some(1));
    let via_alpha = a.get("default--demo").await.unwrap();
    assert_eq!(
        via_alpha.types.unwrap().api_version,
        "agents.x-k8s.io/v1alpha1"
    );
    let (code, _, _) = api_error(
        b.patch(
            "default--demo",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        code, 415,
        "strategic merge patch is not supported for custom resources"
    );
    let st = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let out = b
        .patch_status("default--demo", &PatchParams::default(), &Patch::Merge(st))
        .await
        .unwrap();
    assert_eq!(out.metadata.generation, Some(1));
    let out = b
        .patch(
            "default--demo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"operatingMode": "Suspended"}})),
        )
        .await
        .unwrap();
    assert_eq!(out.metadata.generation, Some(2));
}

#[tokio::test(start_paused = true)]
async fn registering_a_crd_serves_its_resource_and_deleting_it_stops_serving() {
    let c = cluster();
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let crds = ResourceRef::new("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    c.create(&crds, None, crd).unwrap();
    let discovery = kube::Discovery::new(c.client()).run().await.unwrap();
    let (ar, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"))
        .unwrap();
    assert_eq!(ar.plural, "widgets");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    let widgets: Api<DynamicObject> = Api::namespaced_with(c.client(), "default", &ar);
    let w: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
    )
    .unwrap();
    widgets.create(&PostParams::default(), &w).await.unwrap();
    c.delete(&crds, None, "widgets.example.com", &Default::default())
        .unwrap();
    assert_eq!(
        api_error(widgets.list(&ListParams::default()).await.unwrap_err()).0,
        404
    );
}

#[tokio::test(start_paused = true)]
async fn discovery_lists_the_served_resources_with_subresources() {
    let c = cluster();
    let d = kube::Discovery::new(c.client()).run().await.unwrap();
    let (ar, caps) = d
        .resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "StatefulSet"))
        .unwrap();
    assert_eq!(ar.plural, "statefulsets");
    assert!(
        caps.subresources
            .iter()
            .any(|(s, _)| s.plural == "scale" && s.kind == "Scale"),
        "{:?}",
        caps.subresources
    );
    assert!(
        d.resolve_gvk(&GroupVersionKind::gvk(
            "agents.x-k8s.io",
            "v1beta1",
            "Sandbox"
        ))
        .is_some()
    );
    assert!(
        d.resolve_gvk(&GroupVersionKind::gvk(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy"
        ))
        .is_some()
    );
    let v = c.client().apiserver_version().await.unwrap();
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "33"));
}

#[tokio::test(start_paused = true)]
async fn an_unsupported_verb_is_405_method_not_allowed() {
    let c = cluster();
    let req = http::Request::post("/api/v1/namespaces/default/configmaps/x")
        .body(Vec::new())
        .unwrap();
    let err = c.client().request::<Value>(req).await.unwrap_err();
    let (code, reason, _) = api_error(err);
    assert_eq!((code, reason.as_str()), (405, "MethodNotAllowed"));
}

#[tokio::test(start_paused = true)]
async fn a_malformed_body_is_a_400_status_not_a_crash() {
    let c = cluster();
    let req = http::Request::post("/api/v1/namespaces/default/configmaps")
        .body(b"{not json".to_vec())
        .unwrap();
    let (code, reason, _) = api_error(c.client().request::<Value>(req).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));
    // The server still answers.
    Api::<ConfigMap>::default_namespaced(c.client())
        .list(&ListParams::default())
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn in_process_writes_and_http_clients_share_one_store_and_one_resource_version_sequence() {
    let c = cluster();
    let cms = ResourceRef::of::<ConfigMap>();
    let direct = c
        .create(
            &cms,
            Some("default"),
            json!({"metadata": {"name": "direct"}}),
        )
        .unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(c.client());
    let via_http = api
        .create(&PostParams::default(), &cm("http"))
        .await
        .unwrap();
    let rv = |v: &str| v.parse::<u64>().unwrap();
    assert!(
        rv(via_http.metadata.resource_version.as_deref().unwrap())
            > rv(direct["metadata"]["resourceVersion"].as_str().unwrap())
    );
    assert_eq!(
        api.get("direct").await.unwrap().metadata.uid.as_deref(),
        direct["metadata"]["uid"].as_str()
    );
    let (items, _) = c.list(&cms, Some("default"), &Default::default()).unwrap();
    assert_eq!(items.len(), 2);
}

/// A small scenario; returns every watch event it produced, serialized.
async fn scenario_timeline() -> Vec<String> {
    let start = tokio::time::Instant::now();
    let c = cluster();
    let pods: Api<Pod> = Api::default_namespaced(c.client());
    let mut events = pods
        .watch(&WatchParams::default().timeout(100), "0")
        .await
        .unwrap()
        .boxed();
    let sets: Api<StatefulSet> = Api::default_namespaced(c.client());
    let owner = sets
        .create(&PostParams::default(), &sts("gw", 1))
        .await
        .unwrap();
    let mut p = pod("gw-0");
    p.metadata.generate_name = None;
    p.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "name": "gw", "uid": owner.metadata.uid, "controller": true, "blockOwnerDeletion": true}))
        .unwrap(),
    ]);
    pods.create(&PostParams::default(), &p).await.unwrap();
    c.bind_pod("default", "gw-0", "node-1").unwrap();
    tokio::time::sleep(Duration::from_secs(7)).await;
    sets.delete("gw", &DeleteParams::foreground())
        .await
        .unwrap();
    let mut out = vec![];
    while let Some(ev) = events.try_next().await.unwrap() {
        out.push(format!(
            "{} {}",
            start.elapsed().as_secs(),
            serde_json::to_string(&ev).unwrap()
        ));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn the_same_scenario_gives_a_byte_identical_timeline_twice() {
    let first = scenario_timeline().await;
    let second = scenario_timeline().await;
    assert!(
        first.len() >= 5,
        "ADDED, bind, terminating, deleted...: {first:#?}"
    );
    assert_eq!(first, second);
}

#[tokio::test(start_paused = true)]
async fn scanning_and_inspecting_read_what_list_and_get_return() {
    let c = cluster();
    let pods = ResourceRef::pods();
    for (ns, name, app) in [
        ("default", "b", "web"),
        ("default", "a", "web"),
        ("default", "c", "db"),
        ("kube-system", "d", "web"),
    ] {
        c.create(
            &pods,
            Some(ns),
            json!({"metadata": {"name": name, "labels": {"app": app}},
                   "spec": {"containers": [{"name": "main", "image": "busybox:1"}]}}),
        )
        .unwrap();
    }
    let opts = kube_emulator::ListOptions::default();
    let (listed, _) = c.list(&pods, Some("default"), &opts).unwrap();
    let scanned = c
        .scan(&pods, Some("default"), &opts, |p| Some(p.clone()))
        .unwrap();
    assert_eq!(scanned, listed);
    let names = c
        .scan(&pods, None, &opts, |p| {
            (p.pointer("/metadata/labels/app")? == "web")
                .then(|| p.pointer("/metadata/name")?.as_str().map(String::from))
                .flatten()
        })
        .unwrap();
    assert_eq!(names, ["a", "b", "d"]);
    let got = c.get(&pods, Some("default"), "c").unwrap();
    let inspected = c
        .inspect(&pods, Some("default"), "c", |p| p.clone())
        .unwrap();
    assert_eq!(inspected, got);
    assert_eq!(
        c.inspect(&pods, Some("default"), "nope", |_| ())
            .unwrap_err()
            .code,
        404
    );
}

#[tokio::test(start_paused = true)]
async fn an_in_process_status_merge_patch_changes_only_the_status_and_honours_its_preconditions() {
    let c = cluster();
    let pods = ResourceRef::pods();
    c.create(
        &pods,
        Some("default"),
        json!({"metadata": {"name": "p", "labels": {"app": "web"}},
               "spec": {"containers": [{"name": "main", "image": "busybox:1"}]},
               "status": {"phase": "Pending", "message": "waiting"}}),
    )
    .unwrap();
    let before = c.get(&pods, Some("default"), "p").unwrap();
    let kind = kube_emulator::PatchKind::Merge;
    c.patch_status(
        &pods,
        Some("default"),
        "p",
        kind,
        &json!({"metadata": {"labels": {"app": "db"}}, "spec": {"nodeName": "n1"},
                "status": {"phase": "Running", "message": null}}),
    )
    .unwrap();
    let after = c.get(&pods, Some("default"), "p").unwrap();
    assert_eq!(after["status"]["phase"], "Running");
    assert!(after["status"].get("message").is_none());
    assert_eq!(after["status"]["qosClass"], before["status"]["qosClass"]);
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(after["metadata"]["labels"], json!({"app": "web"}));
    let stale = before["metadata"]["resourceVersion"].clone();
    let err = c
        .patch_status(
            &pods,
            Some("default"),
            "p",
            kind,
            &json!({"metadata": {"resourceVersion": stale}, "status": {"phase": "Failed"}}),
        )
        .unwrap_err();
    assert_eq!(err.code, 409);
    let (listed, _) = c
        .list(
            &pods,
            Some("default"),
            &kube_emulator::ListOptions::default(),
        )
        .unwrap();
    assert_eq!(listed, vec![after]);
}
