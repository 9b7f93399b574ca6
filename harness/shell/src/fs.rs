//! The in-memory directory tree behind a [`Volume`], and path resolution through [`Mounts`].
//!
//! Paths are handled as lists of components after lexical normalisation ("." dropped, ".."
//! pops, ".." at the root stays at the root as the kernel does). There are no symlinks,
//! permissions or timestamps: the shell only needs files, directories and read-only mounts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{FsError, ReadError};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    File(Vec<u8>),
    Dir(BTreeMap<String, Node>),
}

impl Default for Node {
    fn default() -> Self {
        Node::Dir(BTreeMap::new())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File { size: usize },
    Dir,
}

/// Splits `path` into normalised components; relative and absolute paths are treated alike.
pub(crate) fn components(path: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            other => out.push(other.to_string()),
        }
    }
    out
}

/// Renders components as an absolute path ("/" for none).
pub(crate) fn join(comps: &[String]) -> String {
    if comps.is_empty() {
        "/".to_string()
    } else {
        comps.iter().fold(String::new(), |acc, c| acc + "/" + c)
    }
}

fn lookup<'n>(root: &'n Node, comps: &[String]) -> Result<&'n Node, FsError> {
    let mut cur = root;
    for c in comps {
        cur = match cur {
            Node::Dir(entries) => entries.get(c).ok_or(FsError::NotFound)?,
            Node::File(_) => return Err(FsError::NotADirectory),
        };
    }
    Ok(cur)
}

/// The directory holding the last component, and that component. Errors if `comps` is empty
/// (the root has no parent) or a directory on the way is missing or a file.
fn parent_mut<'n, 'c>(
    root: &'n mut Node,
    comps: &'c [String],
) -> Result<(&'n mut BTreeMap<String, Node>, &'c String), FsError> {
    let (last, dirs) = comps.split_last().ok_or(FsError::Busy)?;
    let mut cur = root;
    for c in dirs {
        cur = match cur {
            Node::Dir(entries) => entries.get_mut(c).ok_or(FsError::NotFound)?,
            Node::File(_) => return Err(FsError::NotADirectory),
        };
    }
    match cur {
        Node::Dir(entries) => Ok((entries, last)),
        Node::File(_) => Err(FsError::NotADirectory),
    }
}

fn write_node(root: &mut Node, comps: &[String], data: &[u8], append: bool) -> Result<(), FsError> {
    if comps.is_empty() {
        return Err(FsError::IsADirectory);
    }
    let (dir, name) = parent_mut(root, comps)?;
    match dir.get_mut(name) {
        Some(Node::Dir(_)) => Err(FsError::IsADirectory),
        Some(Node::File(content)) => {
            if !append {
                content.clear();
            }
            content.extend_from_slice(data);
            Ok(())
        }
        None => {
            dir.insert(name.clone(), Node::File(data.to_vec()));
            Ok(())
        }
    }
}

fn mkdir_node(root: &mut Node, comps: &[String], parents: bool) -> Result<(), FsError> {
    if comps.is_empty() {
        return if parents {
            Ok(())
        } else {
            Err(FsError::Exists)
        };
    }
    if parents {
        let mut cur = root;
        for c in comps {
            cur = match cur {
                Node::Dir(entries) => entries.entry(c.clone()).or_default(),
                Node::File(_) => return Err(FsError::NotADirectory),
            };
        }
        return match cur {
            Node::Dir(_) => Ok(()),
            Node::File(_) => Err(FsError::Exists),
        };
    }
    let (dir, name) = parent_mut(root, comps)?;
    if dir.contains_key(name) {
        return Err(FsError::Exists);
    }
    dir.insert(name.clone(), Node::default());
    Ok(())
}

fn remove_node(root: &mut Node, comps: &[String], recursive: bool) -> Result<(), FsError> {
    if comps.is_empty() {
        // The root of a volume is a mount point: like the kernel, empty it but refuse to
        // remove the directory itself.
        return match root {
            Node::Dir(entries) if recursive => {
                entries.clear();
                Err(FsError::Busy)
            }
            _ => Err(FsError::IsADirectory),
        };
    }
    let (dir, name) = parent_mut(root, comps)?;
    match dir.get(name) {
        None => Err(FsError::NotFound),
        Some(Node::Dir(_)) if !recursive => Err(FsError::IsADirectory),
        Some(_) => {
            dir.remove(name);
            Ok(())
        }
    }
}

/// A clonable handle to one in-memory directory tree (a volume). Clones share the same data,
/// so a PVC-backed volume can outlive pods and be mounted again.
#[derive(Clone, Default)]
pub struct Volume {
    root: Arc<Mutex<Node>>,
}

impl std::fmt::Debug for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volume").finish_non_exhaustive()
    }
}

impl Volume {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Node> {
        // A panic elsewhere while holding the lock cannot leave the tree half-updated (every
        // mutation is a single insert/remove/extend), so a poisoned lock is still usable.
        self.root
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Read a file by its path inside the volume ("/a/b" or "a/b"). None if absent or a
    /// directory.
    pub fn read(&self, path: &str) -> Option<Vec<u8>> {
        self.read_at(&components(path)).ok()
    }

    /// Create or replace a file, creating parent directories. Nothing happens if the path is
    /// a directory or a parent is a file (there is nowhere to put the file).
    pub fn write(&self, path: &str, data: &[u8]) {
        self.put(path, data, false);
    }

    /// Append to a file (creating it and its parent directories); same limits as `write`.
    pub fn append(&self, path: &str, data: &[u8]) {
        self.put(path, data, true);
    }

    fn put(&self, path: &str, data: &[u8], append: bool) {
        let comps = components(path);
        let mut root = self.lock();
        if let Some((_, dirs)) = comps.split_last()
            && mkdir_node(&mut root, dirs, true).is_ok()
        {
            let _ = write_node(&mut root, &comps, data, append);
        }
    }

    pub fn exists(&self, path: &str) -> bool {
        self.stat_at(&components(path)).is_ok()
    }

    /// Remove a file or a whole directory tree; false if absent (the root cannot be removed).
    pub fn remove(&self, path: &str) -> bool {
        let comps = components(path);
        !comps.is_empty() && remove_node(&mut self.lock(), &comps, true).is_ok()
    }

    /// Sorted entries of a directory (names only), None if it is not a directory.
    pub fn list(&self, path: &str) -> Option<Vec<String>> {
        self.list_at(&components(path)).ok()
    }

    pub(crate) fn stat_at(&self, comps: &[String]) -> Result<Kind, FsError> {
        match lookup(&self.lock(), comps)? {
            Node::File(data) => Ok(Kind::File { size: data.len() }),
            Node::Dir(_) => Ok(Kind::Dir),
        }
    }

    pub(crate) fn read_at(&self, comps: &[String]) -> Result<Vec<u8>, FsError> {
        match lookup(&self.lock(), comps)? {
            Node::File(data) => Ok(data.clone()),
            Node::Dir(_) => Err(FsError::IsADirectory),
        }
    }

    pub(crate) fn list_at(&self, comps: &[String]) -> Result<Vec<String>, FsError> {
        match lookup(&self.lock(), comps)? {
            Node::Dir(entries) => Ok(entries.keys().cloned().collect()),
            Node::File(_) => Err(FsError::NotADirectory),
        }
    }

    /// Runs a mutation; on a read-only mount it runs on a scratch copy instead so that the
    /// error is the one the kernel reports first (a missing parent is ENOENT, not EROFS), and
    /// an operation that would change nothing (`mkdir -p` of an existing directory) when
    /// `noop_ok` succeeds.
    fn mutate(
        &self,
        read_only: bool,
        noop_ok: bool,
        op: impl FnOnce(&mut Node) -> Result<(), FsError>,
    ) -> Result<(), FsError> {
        let mut root = self.lock();
        if !read_only {
            return op(&mut root);
        }
        let mut scratch = root.clone();
        op(&mut scratch)?;
        if noop_ok && scratch == *root {
            Ok(())
        } else {
            Err(FsError::ReadOnly)
        }
    }
}

#[derive(Clone)]
struct Mount {
    at: Vec<String>,
    volume: Volume,
    read_only: bool,
}

/// What a container sees: volumes mounted at absolute paths. Resolution is by longest mount
/// prefix on path-component boundaries; "/" should normally be mounted (the container's own
/// root filesystem). Paths that resolve to no mount behave as "No such file or directory".
#[derive(Clone, Default)]
pub struct Mounts {
    table: Vec<Mount>,
}

impl std::fmt::Debug for Mounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.table.iter().map(|m| (join(&m.at), m.read_only)))
            .finish()
    }
}

impl Mounts {
    pub fn new() -> Self {
        Self::default()
    }

    /// Mounts `volume` at `path`, replacing an earlier mount at the same path.
    pub fn mount(&mut self, path: &str, volume: Volume, read_only: bool) {
        let at = components(path);
        self.table.retain(|m| m.at != at);
        self.table.push(Mount {
            at,
            volume,
            read_only,
        });
    }

    /// The mount holding `abs`, with the path inside it and whether it is read-only.
    fn resolve<'m, 'p>(&'m self, abs: &'p [String]) -> Option<(&'m Volume, &'p [String], bool)> {
        self.table
            .iter()
            .filter(|m| abs.starts_with(&m.at))
            .max_by_key(|m| m.at.len())
            .map(|m| (&m.volume, &abs[m.at.len()..], m.read_only))
    }

    /// Names directly under `abs` that lead to a mount point deeper down. They make `abs` a
    /// directory even if no volume holds it (e.g. "/data" when only "/data/x" is mounted).
    fn mount_children(&self, abs: &[String]) -> Vec<String> {
        self.table
            .iter()
            .filter(|m| m.at.len() > abs.len() && m.at.starts_with(abs))
            .map(|m| m.at[abs.len()].clone())
            .collect()
    }

    /// Reads the file at `path` as a program in the container would: `Ok(None)` when there is
    /// no such file, `Err` when it cannot be read (a directory).
    pub fn read_file(&self, path: &str) -> Result<Option<Vec<u8>>, ReadError> {
        match self.read(&components(path)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(FsError::NotFound) => Ok(None),
            Err(kind) => Err(ReadError {
                path: path.to_string(),
                kind,
            }),
        }
    }

    pub(crate) fn stat(&self, abs: &[String]) -> Result<Kind, FsError> {
        let found = match self.resolve(abs) {
            Some((volume, rel, _)) => volume.stat_at(rel),
            None => Err(FsError::NotFound),
        };
        match found {
            Err(FsError::NotFound) if !self.mount_children(abs).is_empty() => Ok(Kind::Dir),
            other => other,
        }
    }

    pub(crate) fn read(&self, abs: &[String]) -> Result<Vec<u8>, FsError> {
        match self.resolve(abs) {
            Some((volume, rel, _)) => volume.read_at(rel),
            None if !self.mount_children(abs).is_empty() => Err(FsError::IsADirectory),
            None => Err(FsError::NotFound),
        }
    }

    /// Sorted directory entries, including the names of mount points directly below.
    pub(crate) fn list(&self, abs: &[String]) -> Result<Vec<String>, FsError> {
        let children = self.mount_children(abs);
        let mut names = match self.resolve(abs) {
            Some((volume, rel, _)) => match volume.list_at(rel) {
                Err(FsError::NotFound) if !children.is_empty() => Vec::new(),
                other => other?,
            },
            None if !children.is_empty() => Vec::new(),
            None => return Err(FsError::NotFound),
        };
        names.extend(children);
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn mutate(
        &self,
        abs: &[String],
        noop_ok: bool,
        op: impl FnOnce(&mut Node, &[String]) -> Result<(), FsError>,
    ) -> Result<(), FsError> {
        match self.resolve(abs) {
            Some((volume, rel, read_only)) => {
                volume.mutate(read_only, noop_ok, |root| op(root, rel))
            }
            None => Err(FsError::NotFound),
        }
    }

    /// Writes (or with `append`, appends) to a file whose parent directory must exist.
    pub(crate) fn write(&self, abs: &[String], data: &[u8], append: bool) -> Result<(), FsError> {
        self.mutate(abs, false, |root, rel| write_node(root, rel, data, append))
    }

    pub(crate) fn mkdir(&self, abs: &[String], parents: bool) -> Result<(), FsError> {
        if self.resolve(abs).is_none() && !self.mount_children(abs).is_empty() {
            return if parents {
                Ok(())
            } else {
                Err(FsError::Exists)
            };
        }
        self.mutate(abs, true, |root, rel| mkdir_node(root, rel, parents))
    }

    pub(crate) fn remove(&self, abs: &[String], recursive: bool) -> Result<(), FsError> {
        self.mutate(abs, false, |root, rel| remove_node(root, rel, recursive))
    }
}
