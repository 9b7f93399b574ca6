//! Which images run as local binaries, and what each image's file system and defaults are
//! (docs/upstream-facts.md F12.12: entrypoints, commands and paths of upstream's images).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::model::{GATEWAY_IMAGE_REPO, SANDBOX_IMAGE_REPO, SUPERVISOR_IMAGE_REPO};

/// The file names of the upstream binaries in a release directory.
pub const GATEWAY_BINARY: &str = "openshell-gateway";
pub const SUPERVISOR_BINARY: &str = "openshell-sandbox";

/// The sandbox user of OpenShell's sandbox images; the Kubernetes driver runs workloads as
/// this UID/GID (F12.12).
pub(crate) const SANDBOX_UID: u32 = 1000;

/// The supervisor's ids from its environment: the sandbox user it runs workloads as and the
/// proxy user network-init exempts in its nftables rules, besides the flags `--proxy-uid` and
/// `--proxy-gid` (F12.14).
const SUPERVISOR_ID_ENV: [&str; 4] = [
    "OPENSHELL_SANDBOX_UID",
    "OPENSHELL_SANDBOX_GID",
    "OPENSHELL_PROXY_UID",
    "OPENSHELL_PROXY_GID",
];

/// One image as a container process sees it: the host's base system plus these files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostImage {
    /// The image's `ENTRYPOINT` (used when the container gives no `command`).
    pub entrypoint: Vec<String>,
    /// The image's `CMD` (used when the container gives neither `command` nor `args`).
    pub cmd: Vec<String>,
    /// The image's `WORKDIR` (used when the container gives no `workingDir`).
    pub workdir: Option<String>,
    /// Host files the image carries, by their path in the image.
    pub files: Vec<(String, PathBuf)>,
    /// The image defines the `sandbox` user and group (UID/GID [`SANDBOX_UID`], offset on the
    /// host like every id a pod names).
    pub sandbox_user: bool,
    /// Programs the image installs that come from the host's base system here, with the
    /// package that provides them.
    pub host_programs: Vec<(String, String)>,
    /// Environment variables whose value is a uid or gid the image's program switches to
    /// itself: offset like the pod's own ids (see `ids`).
    pub id_env: Vec<String>,
    /// Flags whose value (`--flag N` or `--flag=N`) is such a uid or gid.
    pub id_flags: Vec<String>,
}

/// Images by repository (tags do not matter, as for the models).
#[derive(Clone, Debug, Default)]
pub struct HostImages {
    by_repository: BTreeMap<String, HostImage>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImagesError {
    #[error(
        "{0}: not found; expected the OpenShell release binaries `{GATEWAY_BINARY}` and `{SUPERVISOR_BINARY}` in that directory"
    )]
    Missing(PathBuf),
    #[error("{0}: not executable (chmod +x it)")]
    NotExecutable(PathBuf),
}

fn executable(path: PathBuf) -> Result<PathBuf, ImagesError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(&path).map_err(|_| ImagesError::Missing(path.clone()))?;
    if !meta.is_file() {
        return Err(ImagesError::Missing(path));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(ImagesError::NotExecutable(path));
    }
    Ok(path)
}

impl HostImages {
    /// OpenShell's images with the binaries of the release in `dir`: the gateway image runs
    /// `openshell-gateway`, the supervisor image carries `openshell-sandbox`, and the sandbox
    /// base image is the host's base system with the `sandbox` user and `/sandbox`.
    pub fn openshell(dir: &Path) -> Result<Self, ImagesError> {
        let gateway = executable(dir.join(GATEWAY_BINARY))?;
        let supervisor = executable(dir.join(SUPERVISOR_BINARY))?;
        let mut images = Self::default();
        images.insert(
            GATEWAY_IMAGE_REPO,
            HostImage {
                entrypoint: vec!["/usr/local/bin/openshell-gateway".into()],
                cmd: ["--bind-address", "0.0.0.0", "--port", "8080"]
                    .map(String::from)
                    .to_vec(),
                workdir: Some("/app".into()),
                files: vec![("/usr/local/bin/openshell-gateway".into(), gateway)],
                ..HostImage::default()
            },
        );
        images.insert(
            SUPERVISOR_IMAGE_REPO,
            HostImage {
                entrypoint: vec!["/openshell-sandbox".into()],
                files: vec![("/openshell-sandbox".into(), supervisor)],
                // Alpine's nftables: sidecar's network-init loads its ruleset with `nft`.
                host_programs: vec![("/usr/sbin/nft".into(), "nftables".into())],
                id_env: SUPERVISOR_ID_ENV.map(String::from).to_vec(),
                id_flags: ["--proxy-uid", "--proxy-gid"].map(String::from).to_vec(),
                ..HostImage::default()
            },
        );
        images.insert(
            SANDBOX_IMAGE_REPO,
            HostImage {
                cmd: vec!["/bin/bash".into()],
                workdir: Some("/sandbox".into()),
                sandbox_user: true,
                // The supervisor runs in it (combined, and the process side of sidecar).
                id_env: SUPERVISOR_ID_ENV.map(String::from).to_vec(),
                ..HostImage::default()
            },
        );
        Ok(images)
    }

    pub fn insert(&mut self, repository: &str, image: HostImage) {
        self.by_repository.insert(repository.to_string(), image);
    }

    /// The image for `image` (a reference with or without tag or digest), if it runs as a
    /// process.
    pub fn get(&self, image: &str) -> Option<&HostImage> {
        self.by_repository
            .get(conformance_kube_models::program::repository(image))
    }

    /// What the image `repository` needs of this machine and it lacks: each program it would
    /// take from the host's base system that is not there, with the package to install.
    pub fn missing_host_programs(&self, repository: &str) -> Vec<String> {
        self.by_repository
            .get(repository)
            .into_iter()
            .flat_map(|i| &i.host_programs)
            .filter(|(path, _)| !Path::new(path).is_file())
            .map(|(path, package)| format!("{path} (package {package})"))
            .collect()
    }

    pub fn repositories(&self) -> impl Iterator<Item = &str> {
        self.by_repository.keys().map(String::as_str)
    }
}

/// The argv Kubernetes runs for a container: `command` replaces the entrypoint and drops the
/// image's CMD; `args` replaces the CMD.
pub(crate) fn argv(
    image: &HostImage,
    command: Option<Vec<String>>,
    args: Option<Vec<String>>,
) -> Vec<String> {
    match (command, args) {
        (Some(c), Some(a)) => c.into_iter().chain(a).collect(),
        (Some(c), None) => c,
        (None, Some(a)) => image.entrypoint.iter().cloned().chain(a).collect(),
        (None, None) => image.entrypoint.iter().chain(&image.cmd).cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway() -> HostImage {
        HostImage {
            entrypoint: vec!["/gw".into()],
            cmd: vec!["--port".into(), "8080".into()],
            ..HostImage::default()
        }
    }

    fn v(s: &[&str]) -> Option<Vec<String>> {
        Some(s.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn a_container_without_command_or_args_runs_the_entrypoint_with_the_images_cmd() {
        assert_eq!(argv(&gateway(), None, None), ["/gw", "--port", "8080"]);
    }

    #[test]
    fn args_replace_the_images_cmd_but_keep_its_entrypoint() {
        assert_eq!(
            argv(&gateway(), None, v(&["--config", "c"])),
            ["/gw", "--config", "c"]
        );
    }

    #[test]
    fn a_command_replaces_the_entrypoint_and_drops_the_images_cmd() {
        assert_eq!(argv(&gateway(), v(&["sh"]), None), ["sh"]);
        assert_eq!(
            argv(&gateway(), v(&["sh"]), v(&["-c", "x"])),
            ["sh", "-c", "x"]
        );
    }

    #[test]
    fn a_release_directory_without_the_binaries_is_refused_naming_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let err = HostImages::openshell(dir.path()).unwrap_err().to_string();
        assert!(err.contains("openshell-gateway: not found"), "{err}");
    }

    #[test]
    fn images_are_found_by_repository_whatever_the_tag() {
        let dir = tempfile::tempdir().unwrap();
        for b in [GATEWAY_BINARY, SUPERVISOR_BINARY] {
            let p = dir.path().join(b);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let images = HostImages::openshell(dir.path()).unwrap();
        let gw = images
            .get("ghcr.io/nvidia/openshell/gateway:0.0.111")
            .unwrap();
        assert_eq!(gw.entrypoint, ["/usr/local/bin/openshell-gateway"]);
        assert!(images.get("busybox:1.37.0").is_none());
    }

    #[test]
    fn a_program_the_image_takes_from_the_host_is_reported_missing_with_its_package() {
        let mut images = HostImages::default();
        images.insert(
            "example/tools",
            HostImage {
                host_programs: vec![
                    ("/nonexistent/sbin/nft".into(), "nftables".into()),
                    ("/bin/sh".into(), "dash".into()),
                ],
                ..HostImage::default()
            },
        );
        assert_eq!(
            images.missing_host_programs("example/tools"),
            ["/nonexistent/sbin/nft (package nftables)"]
        );
        assert!(images.missing_host_programs("example/other").is_empty());
    }
}
