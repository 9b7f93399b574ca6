//! The manifest an earlier run of ours leaves in its artifacts directory, written by tests
//! that need an earlier run without running one.

use std::path::Path;

/// Writes the manifest an earlier run of ours leaves in `art`, listing `files` (under `art`) as
/// they are now.
pub fn manifest_listing(art: &Path, files: &[&str]) {
    let entries: Vec<serde_json::Value> = files
        .iter()
        .map(|f| {
            let bytes = std::fs::read(art.join(f)).unwrap();
            let sha: String = ring::digest::digest(&ring::digest::SHA256, &bytes)
                .as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            serde_json::json!({"path": f, "size": bytes.len(), "sha256": sha})
        })
        .collect();
    let manifest = serde_json::json!({"written_by": "openshell-conformance", "files": entries});
    std::fs::write(
        art.join(".openshell-conformance-manifest.json"),
        manifest.to_string(),
    )
    .unwrap();
}
