//! A supervisor's log as the container runtime stamped it, read the same way on every target.

use conformance_core::effect::{SupervisorAt, label_selector};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use kube::{Client, ResourceExt};

/// The lines of the log `at` names in namespace `ns`, each prefixed with the runtime's
/// RFC 3339 timestamp (`timestamps=true`). A supervisor in pods of its own may have been
/// replaced: the logs of every matching pod, oldest pod first.
pub async fn timestamped_log(
    client: &Client,
    ns: &str,
    at: &SupervisorAt,
) -> Result<Vec<String>, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (names, container) = match at {
        SupervisorAt::Container { pod, container } => (vec![pod.clone()], container),
        SupervisorAt::Labelled { labels, container } => {
            let mut found = pods
                .list(&ListParams::default().labels(&label_selector(labels)))
                .await?
                .items;
            found.sort_by_key(|p| (p.creation_timestamp(), p.name_any()));
            (found.iter().map(ResourceExt::name_any).collect(), container)
        }
    };
    let params = LogParams {
        container: Some(container.clone()),
        timestamps: true,
        ..Default::default()
    };
    let mut lines = Vec::new();
    for name in names {
        let text = pods.logs(&name, &params).await?;
        lines.extend(text.lines().map(str::to_string));
    }
    Ok(lines)
}
