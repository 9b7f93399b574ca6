//! The run's private directory: credentials (the kind/k3d kubeconfig, the gateway's client key,
//! the CLI's configuration) live here, mode 0700, never under the artifacts a CI job uploads.

use std::path::Path;

/// Creates `dir` (and its parents) and makes it readable by the owner only.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Writes a credential file readable by the owner only.
pub(crate) fn write_secret_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, contents)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}
