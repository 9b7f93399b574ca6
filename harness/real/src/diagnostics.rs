//! Diagnostics bundles: on failure (or when asked) everything needed to understand a case
//! without the cluster: pod logs (current and previous, every container), events, the YAML of
//! Sandbox resources, pods, PVCs and the gateway workload, helm values and manifest, the CLI's
//! JSON of the sandboxes and the timeline, in a directory and a `.tar.gz`. Secrets, tokens and
//! keys are redacted before anything is written.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::api::{Api, DynamicObject, ListParams, LogParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::cli::OpenShellCli;
use crate::command::{Cmd, CommandRunner};
use crate::options::RealOptions;
use conformance_core::error::{Error, Result, one_line};
use conformance_core::timeline::Timeline;

const REDACTED: &str = "<redacted>";

/// Key names whose values are secret wherever they appear (YAML, JSON, env, flags).
fn secret_key(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    // `secretName: x`, `tokenRef` and the like name secrets; they are not secret themselves.
    if k.ends_with("name") || k.ends_with("ref") || k.ends_with("path") || k.ends_with("file") {
        return false;
    }
    if k == "uri" || k.ends_with("_uri") || k.ends_with("-uri") {
        return true;
    }
    [
        "token",
        "password",
        "passwd",
        "secret",
        "private",
        "apikey",
        "api_key",
        "api-key",
        "credential",
        "authorization",
        "tls.key",
        "key-encryption-key",
    ]
    .iter()
    .any(|s| k.contains(s))
        || k.ends_with(".key")
        || k == "key"
}

/// Redacts secret material in text: PEM blocks, bearer tokens, JWTs and values of secret keys
/// (`key: value`, `"key": "value"`, `key=value`).
pub(crate) fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_pem = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed.starts_with("-----BEGIN") {
            in_pem = true;
            out.push_str(&line[..line.find("-----BEGIN").unwrap_or(0)]);
            out.push_str(REDACTED);
            out.push_str(if line.ends_with('\n') { "\n" } else { "" });
            if trimmed.contains("-----END") {
                in_pem = false;
            }
            continue;
        }
        if in_pem {
            if trimmed.contains("-----END") {
                in_pem = false;
            }
            continue;
        }
        out.push_str(&redact_line(line));
    }
    out
}

fn redact_line(line: &str) -> String {
    let mut l = line.to_string();
    // Bearer tokens.
    if let Some(i) = l.to_ascii_lowercase().find("bearer ") {
        let start = i + "bearer ".len();
        let end = l[start..]
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            .map(|j| start + j)
            .unwrap_or(l.len());
        l.replace_range(start..end, REDACTED);
    }
    // JWTs: three base64url segments starting with eyJ.
    while let Some(i) = l.find("eyJ") {
        let end = l[i..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'))
            .map(|j| i + j)
            .unwrap_or(l.len());
        if l[i..end].matches('.').count() >= 2 {
            l.replace_range(i..end, REDACTED);
        } else {
            break;
        }
    }
    // key: value / "key": "value" / key=value
    for sep in [':', '='] {
        if let Some(i) = l.find(sep) {
            let key = l[..i]
                .trim()
                .trim_matches(|c| c == '"' || c == '\'' || c == '-' || c == ' ');
            let key = key.rsplit([' ', '"', '\'']).next().unwrap_or(key);
            let rest = l[i + 1..].trim();
            let rest_is_value =
                !rest.is_empty() && rest != "|" && rest != ">" && rest != "{" && rest != "[";
            if !key.is_empty() && secret_key(key) && rest_is_value && !rest.starts_with(REDACTED) {
                let newline = if l.ends_with('\n') { "\n" } else { "" };
                let comma = if rest.trim_end().ends_with(',') {
                    ","
                } else {
                    ""
                };
                l = format!("{} \"{REDACTED}\"{comma}{newline}", &l[..=i]);
            }
            break;
        }
    }
    l
}

/// Redacts values of secret keys in a JSON value, recursively; Secret objects lose all data.
pub(crate) fn redact_json(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            if m.get("kind").and_then(|k| k.as_str()) == Some("Secret") {
                for f in ["data", "stringData"] {
                    if let Some(serde_json::Value::Object(d)) = m.get_mut(f) {
                        for (_, x) in d.iter_mut() {
                            *x = serde_json::json!(REDACTED);
                        }
                    }
                }
            }
            for (k, x) in m.iter_mut() {
                if secret_key(k) && (x.is_string() || x.is_number()) {
                    *x = serde_json::json!(REDACTED);
                } else {
                    redact_json(x);
                }
            }
            // Environment entries: {name: TOKEN, value: …}.
            if let Some(name) = m.get("name").and_then(|n| n.as_str())
                && secret_key(name)
                && m.get("value").is_some_and(|x| x.is_string())
            {
                m.insert("value".into(), serde_json::json!(REDACTED));
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(redact_json),
        serde_json::Value::String(s) => {
            let r = redact(s);
            if &r != s {
                *s = r;
            }
        }
        _ => {}
    }
}

/// What goes into a bundle, and what could not be collected.
/// How a case's timeline names its diagnostics bundle: a note, this prefix and the archive's
/// path. The reports link the bundle from it.
pub(crate) const BUNDLE_NOTE: &str = "diagnostics bundle: ";

/// The archive of the diagnostics bundle `timeline` names, if it names one.
pub fn bundle_of(timeline: &conformance_core::timeline::Timeline) -> Option<PathBuf> {
    timeline.entries.iter().rev().find_map(|e| match &e.event {
        conformance_core::timeline::Event::Note { message } => {
            message.strip_prefix(BUNDLE_NOTE).map(PathBuf::from)
        }
        _ => None,
    })
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bundle {
    pub dir: PathBuf,
    pub archive: PathBuf,
    pub files: Vec<String>,
    /// Parts that could not be collected, with why; a bundle is still written.
    pub missing: Vec<String>,
}

struct Writer {
    dir: PathBuf,
    files: Vec<String>,
    missing: Vec<String>,
}

impl Writer {
    async fn text(&mut self, rel: &str, text: &str) {
        let path = self.dir.join(rel);
        if let Some(p) = path.parent() {
            let _ = tokio::fs::create_dir_all(p).await;
        }
        match tokio::fs::write(&path, redact(text)).await {
            Ok(()) => self.files.push(rel.to_string()),
            Err(e) => self.missing.push(format!("{rel}: {e}")),
        }
    }

    async fn yaml<T: Serialize>(&mut self, rel: &str, items: &[T]) {
        let mut docs = Vec::new();
        for it in items {
            let mut v = serde_json::to_value(it).unwrap_or_default();
            redact_json(&mut v);
            docs.push(serde_saphyr::to_string(&v).unwrap_or_default());
        }
        // Already redacted structurally; the text pass still catches PEM in strings.
        self.text(rel, &docs.join("---\n")).await;
    }

    fn miss(&mut self, what: &str, e: impl std::fmt::Display) {
        self.missing.push(format!("{what}: {e}"));
    }
}

/// What to collect from.
pub(crate) struct Sources<'a> {
    pub client: &'a Client,
    pub runner: &'a dyn CommandRunner,
    pub opts: &'a RealOptions,
    /// The Sandbox API version served (`v1beta1` or `v1alpha1`).
    pub sandbox_version: &'a str,
    pub cli: Option<&'a OpenShellCli>,
    pub timeline: Option<&'a Timeline>,
}

/// Collects a bundle into `dir` and packs it as `<dir>.tar.gz`. Collection is best effort:
/// whatever fails is listed in `missing.txt` and in the returned bundle.
pub(crate) async fn collect(src: &Sources<'_>, dir: &Path) -> Result<Bundle> {
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| Error::infra_from(format!("diagnostics: {}", dir.display()), e))?;
    let mut w = Writer {
        dir: dir.to_path_buf(),
        files: Vec::new(),
        missing: Vec::new(),
    };
    let ns = src.opts.namespace.as_str();
    for namespace in [ns, crate::pins::AGENT_SANDBOX_NAMESPACE] {
        collect_namespace(src, &mut w, namespace).await;
    }
    let sandboxes: Api<DynamicObject> = Api::namespaced_with(
        src.client.clone(),
        ns,
        &conformance_observe::sandbox_resource(src.sandbox_version),
    );
    match sandboxes.list(&ListParams::default()).await {
        Ok(l) => w.yaml(&format!("{ns}/sandboxes.yaml"), &l.items).await,
        Err(e) => w.miss("sandboxes", e),
    }
    for (what, sub) in [
        ("values", vec!["get", "values", "--all"]),
        ("manifest", vec!["get", "manifest"]),
    ] {
        let cmd = Cmd::new("helm")
            .args(sub)
            .arg(&src.opts.release)
            .args(["--namespace", ns])
            .args(src.opts.kube_flags("--kube-context"));
        match src.runner.run(&cmd).await {
            Ok(o) if o.success() => w.text(&format!("helm/{what}.yaml"), &o.stdout).await,
            Ok(o) => w.miss(&format!("helm {what}"), o.stderr.trim()),
            Err(e) => w.miss(&format!("helm {what}"), one_line(&e)),
        }
    }
    if let Some(cli) = src.cli {
        let cmd = cli.cmd(["sandbox", "list", "-o", "json"]);
        match src.runner.run(&cmd).await {
            Ok(o) if o.success() => w.text("openshell/sandboxes.json", &o.stdout).await,
            Ok(o) => w.miss("openshell sandbox list", o.stderr.trim()),
            Err(e) => w.miss("openshell sandbox list", one_line(&e)),
        }
    }
    if let Some(t) = src.timeline {
        w.text("timeline.jsonl", &t.to_jsonl()).await;
    }
    if !w.missing.is_empty() {
        let m = w.missing.join("\n") + "\n";
        w.text("missing.txt", &m).await;
    }
    let archive = dir.with_extension("tar.gz");
    pack(dir, &archive)?;
    Ok(Bundle {
        dir: dir.to_path_buf(),
        archive,
        files: w.files,
        missing: w.missing,
    })
}

async fn collect_namespace(src: &Sources<'_>, w: &mut Writer, ns: &str) {
    let c = src.client.clone();
    let lp = ListParams::default();
    let pods: Api<Pod> = Api::namespaced(c.clone(), ns);
    match pods.list(&lp).await {
        Ok(list) => {
            w.yaml(&format!("{ns}/pods.yaml"), &list.items).await;
            for p in &list.items {
                let name = p.name_any();
                let spec = p.spec.as_ref();
                let containers: Vec<String> = spec
                    .map(|s| {
                        s.init_containers
                            .iter()
                            .flatten()
                            .chain(s.containers.iter())
                            .map(|c| c.name.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                for cname in containers {
                    for previous in [false, true] {
                        let lp = LogParams {
                            container: Some(cname.clone()),
                            previous,
                            timestamps: true,
                            ..LogParams::default()
                        };
                        let rel = format!(
                            "{ns}/logs/{name}/{cname}{}.log",
                            if previous { ".previous" } else { "" }
                        );
                        match pods.logs(&name, &lp).await {
                            Ok(text) => w.text(&rel, &text).await,
                            // Most containers have no previous instance; that is not missing.
                            Err(_) if previous => {}
                            Err(e) => w.miss(&rel, e),
                        }
                    }
                }
            }
        }
        Err(e) => w.miss(&format!("{ns}/pods"), e),
    }
    match Api::<Event>::namespaced(c.clone(), ns).list(&lp).await {
        Ok(l) => w.yaml(&format!("{ns}/events.yaml"), &l.items).await,
        Err(e) => w.miss(&format!("{ns}/events"), e),
    }
    match Api::<PersistentVolumeClaim>::namespaced(c.clone(), ns)
        .list(&lp)
        .await
    {
        Ok(l) => w.yaml(&format!("{ns}/pvcs.yaml"), &l.items).await,
        Err(e) => w.miss(&format!("{ns}/pvcs"), e),
    }
    match Api::<StatefulSet>::namespaced(c.clone(), ns)
        .list(&lp)
        .await
    {
        Ok(l) => w.yaml(&format!("{ns}/statefulsets.yaml"), &l.items).await,
        Err(e) => w.miss(&format!("{ns}/statefulsets"), e),
    }
    match Api::<Deployment>::namespaced(c, ns).list(&lp).await {
        Ok(l) => w.yaml(&format!("{ns}/deployments.yaml"), &l.items).await,
        Err(e) => w.miss(&format!("{ns}/deployments"), e),
    }
}

/// Packs a directory as a gzip-compressed tar whose entries are relative to its parent.
pub(crate) fn pack(dir: &Path, archive: &Path) -> Result<()> {
    let f = std::fs::File::create(archive)
        .map_err(|e| Error::infra_from(format!("diagnostics: {}", archive.display()), e))?;
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let name = dir
        .file_name()
        .map(PathBuf::from)
        .unwrap_or_else(|| "bundle".into());
    tar.append_dir_all(&name, dir)
        .and_then(|_| tar.into_inner())
        .and_then(|gz| gz.finish())
        .map_err(|e| Error::infra_from(format!("diagnostics: {}", archive.display()), e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_blocks_bearer_tokens_jwts_and_secret_keys_are_redacted() {
        let text = "ca.crt: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\n\
                    Authorization: Bearer abc.def\n\
                    jwt eyJhbGciOi.eyJzdWIiOi.sig-x_y here\n\
                    OPENSHELL_TOKEN=s3cr3t\n\
                    phase: Ready\n";
        let r = redact(text);
        for leaked in ["MIIB", "abc.def", "eyJhbGciOi", "s3cr3t"] {
            assert!(!r.contains(leaked), "{leaked} leaked in {r}");
        }
        assert!(r.contains("phase: Ready"), "{r}");
    }

    #[test]
    fn secret_objects_and_env_values_lose_their_data_in_yaml_dumps() {
        let mut v = serde_json::json!({
            "kind": "Secret", "data": {"ca.crt": "QUJD", "tls.key": "S0VZ"},
            "spec": {"env": [{"name": "OPENSHELL_DB_PASSWORD", "value": "pw"}, {"name": "MODE", "value": "x"}]}
        });
        redact_json(&mut v);
        assert_eq!(v["data"]["ca.crt"], REDACTED);
        assert_eq!(v["data"]["tls.key"], REDACTED);
        assert_eq!(v["spec"]["env"][0]["value"], REDACTED);
        assert_eq!(v["spec"]["env"][1]["value"], "x");
    }

    #[test]
    fn a_bundle_directory_packs_into_a_tar_gz_that_lists_its_files() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("bundle-1");
        std::fs::create_dir_all(dir.join("openshell")).unwrap();
        std::fs::write(dir.join("openshell/pods.yaml"), "kind: Pod\n").unwrap();
        let archive = d.path().join("bundle-1.tar.gz");
        pack(&dir, &archive).unwrap();
        let gz = flate2::read::GzDecoder::new(std::fs::File::open(&archive).unwrap());
        let mut ar = tar::Archive::new(gz);
        let names: Vec<String> = ar
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert!(
            names.contains(&"bundle-1/openshell/pods.yaml".to_string()),
            "{names:?}"
        );
    }
}
