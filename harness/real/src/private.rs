//! The run's private directory: credentials (the kind/k3d kubeconfig, the gateway's client key,
//! the CLI's configuration) live here, mode 0700, never under the artifacts a CI job uploads.
//!
//! Another local user must not be able to plant what the run then trusts: the directory is
//! created by the run with mode 0700 from the start (never chmod-ed afterwards, so a path that
//! was there is never adopted and made private behind its owner's back), and one that exists must
//! already be a private directory of this user. Key files are created exclusively, without
//! following a symbolic link, mode 0600 from their creation.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// The effective user id of this process, read from what it owns (`/proc/self`), so no libc
/// binding is needed.
fn my_uid() -> io::Result<u32> {
    std::fs::metadata("/proc/self").map(|m| m.uid())
}

/// Why `meta`, found at `path`, is not a private directory of this user, if it is not.
fn not_private_dir(path: &Path, meta: &std::fs::Metadata) -> io::Result<Option<String>> {
    let why = if meta.file_type().is_symlink() {
        "is a symbolic link".to_string()
    } else if !meta.is_dir() {
        "is not a directory".to_string()
    } else if meta.uid() != my_uid()? {
        format!("belongs to uid {}, not to this user", meta.uid())
    } else if meta.mode() & 0o077 != 0 {
        format!(
            "has mode {:04o}: other users can reach it (make it 0700, or name a new path)",
            meta.mode() & 0o7777
        )
    } else {
        return Ok(None);
    };
    Ok(Some(format!(
        "{} {why}; refusing to keep credentials there",
        path.display()
    )))
}

/// Creates `dir` as a private directory (its parents as needed, with the default mode), mode
/// 0700 from its creation. An existing `dir` is accepted only if it is already a private
/// directory of this user (not a symbolic link, owned by this user, no access for group or
/// others); its mode is never changed.
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        other => return other,
    }
    let meta = std::fs::symlink_metadata(dir)?;
    match not_private_dir(dir, &meta)? {
        Some(why) => Err(io::Error::new(io::ErrorKind::PermissionDenied, why)),
        None => Ok(()),
    }
}

/// Why `dir` cannot be a run's private directory, checked before the run starts: it must be
/// new, or an empty private directory of this user.
pub(crate) fn unusable_private_dir(dir: &Path) -> io::Result<Option<String>> {
    // What cannot be looked at (missing, or under a file) is for the check that the run can
    // make the directory there to report.
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return Ok(None);
    };
    if let Some(why) = not_private_dir(dir, &meta)? {
        return Ok(Some(why));
    }
    if std::fs::read_dir(dir)?.next().is_some() {
        return Ok(Some(format!(
            "{} is not empty: name a new path or an empty directory, so the run removes nothing \
             of yours when it ends",
            dir.display()
        )));
    }
    Ok(None)
}

/// Writes a credential file readable by the owner only: created exclusively with mode 0600,
/// never through a symbolic link. A regular file of this user already at `path` (an earlier
/// registration of the same gateway) is replaced; anything else there is refused.
pub(crate) fn write_secret_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    use std::io::Write;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
        Ok(meta) if meta.is_file() && meta.uid() == my_uid()? => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a regular file of this user; refusing to write a key through it",
                    path.display()
                ),
            ));
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(contents)
}

/// A fresh name part no other user can guess (128 bits from the kernel's generator), so a
/// private directory's path cannot be created first by someone else.
pub(crate) fn unguessable() -> io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_new_private_directory_is_0700_and_a_second_call_accepts_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b/private");
        create_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        create_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn an_existing_directory_others_can_enter_is_refused_and_its_mode_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("open");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = create_private_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("has mode 0755"), "{err}");
        assert_eq!(
            mode(&dir),
            0o755,
            "the mode of a path we did not make is kept"
        );
        assert!(unusable_private_dir(&dir).unwrap().is_some());
    }

    #[test]
    fn a_symbolic_link_is_never_taken_for_a_private_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        create_private_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = create_private_dir(&link).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        let why = unusable_private_dir(&link).unwrap().unwrap();
        assert!(why.contains("symbolic link"), "{why}");
    }

    #[test]
    fn a_private_dir_the_user_names_must_be_new_or_an_empty_private_directory() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(unusable_private_dir(&tmp.path().join("new")).unwrap(), None);
        let dir = tmp.path().join("mine");
        create_private_dir(&dir).unwrap();
        assert_eq!(unusable_private_dir(&dir).unwrap(), None);
        std::fs::write(dir.join("notes"), "x").unwrap();
        let why = unusable_private_dir(&dir).unwrap().unwrap();
        assert!(why.contains("is not empty"), "{why}");
    }

    #[test]
    fn a_key_file_is_0600_and_never_written_through_a_symbolic_link() {
        let tmp = tempfile::tempdir().unwrap();
        let key = tmp.path().join("tls.key");
        write_secret_file(&key, b"one").unwrap();
        assert_eq!(mode(&key), 0o600);
        write_secret_file(&key, b"two").unwrap();
        assert_eq!(std::fs::read(&key).unwrap(), b"two");
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::write(&elsewhere, "theirs").unwrap();
        let link = tmp.path().join("client.key");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        assert!(write_secret_file(&link, b"secret").is_err());
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "theirs");
    }

    #[test]
    fn two_unguessable_names_differ_and_are_32_hex_digits() {
        let (a, b) = (unguessable().unwrap(), unguessable().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
    }
}
