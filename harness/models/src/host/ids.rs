//! The host ids of process containers' users. Containers run without a user namespace, so a
//! uid a pod names (the chart's `runAsUser: 1000`) would be that host user, who could then read
//! the container's environment and files through `/proc/<pid>/` (issue 44). The node therefore
//! offsets every non-zero uid and gid a pod names into a range of 65536 ids that no user or
//! group of this machine holds and no process of it runs as: `u` becomes `base + u`. Id 0
//! stays the host's root: OpenShell's supervisor needs real capabilities (network namespaces,
//! nftables, Landlock), and a root process's `/proc/<pid>/` is closed to other users.
//!
//! Inside the container the offset ids are the ids (`id -u` prints `base + 1000`): the image's
//! `passwd`, its volumes' group and the ids an image's program switches to itself (the
//! supervisor's sandbox and proxy users, see [`HostImage::id_env`]) are offset alike.

use std::path::Path;

use super::images::HostImage;

/// How many ids a pod may name (0 to 65535), as in a container runtime's user namespace.
pub(super) const RANGE: u32 = 65536;
/// Where bases are looked for: systemd's range for container ids (docs/upstream-facts.md
/// F12.14), in steps of [`RANGE`].
const FIRST: u32 = 0x0008_0000;
const LAST: u32 = 0x6FFF_FFFF;

/// The offset of one node's pod ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct IdOffset {
    base: u32,
}

impl IdOffset {
    /// A base no entry of `/etc/passwd` or `/etc/group` and no running process falls in.
    /// Starts at a slot chosen by this process's id, so runs side by side get different ones.
    pub(super) fn pick() -> Result<Self, String> {
        let mut taken = vec![];
        for file in ["/etc/passwd", "/etc/group"] {
            let text = std::fs::read_to_string(file).map_err(|e| {
                format!(
                    "cannot read {file} to choose host ids no user holds for the pods' users: \
                     {e}"
                )
            })?;
            taken.extend(
                text.lines()
                    .filter_map(|l| l.split(':').nth(2)?.parse::<u32>().ok()),
            );
        }
        taken.extend(process_ids());
        Self::pick_free(&taken, std::process::id()).ok_or_else(|| {
            format!(
                "no range of {RANGE} host ids between {FIRST} and {LAST} is free of users, \
                 groups and processes of this machine; the pods' users need one (remove the \
                 users or groups there, or run where such a range is free)"
            )
        })
    }

    fn pick_free(taken: &[u32], seed: u32) -> Option<Self> {
        let slots = (LAST - FIRST + 1) / RANGE;
        (0..slots)
            .map(|n| FIRST + ((seed.wrapping_add(n)) % slots) * RANGE)
            .find(|base| !taken.iter().any(|&t| t >= *base && t - base < RANGE))
            .map(|base| Self { base })
    }

    #[cfg(test)]
    fn with_base(base: u32) -> Self {
        Self { base }
    }

    /// The host id of the pod's id `id` (`what` names it for the error).
    pub(super) fn host(&self, id: u32, what: &str) -> Result<u32, String> {
        match id {
            0 => Ok(0),
            id if id < RANGE => Ok(self.base + id),
            id => Err(format!(
                "{what} {id}: process containers take ids below {RANGE} (they are offset into \
                 a range of host ids no user holds)"
            )),
        }
    }

    /// `env` with the values of the image's id variables offset.
    pub(super) fn env(
        &self,
        image: &HostImage,
        env: Vec<(String, String)>,
    ) -> Result<Vec<(String, String)>, String> {
        env.into_iter()
            .map(|(k, v)| {
                if !image.id_env.contains(&k) {
                    return Ok((k, v));
                }
                let id = self.parsed(&v, &k)?;
                Ok((k, id.to_string()))
            })
            .collect()
    }

    /// `argv` with the values of the image's id flags (`--flag N` or `--flag=N`) offset.
    pub(super) fn argv(&self, image: &HostImage, argv: Vec<String>) -> Result<Vec<String>, String> {
        let mut out: Vec<String> = Vec::with_capacity(argv.len());
        let mut next_is_id: Option<String> = None;
        for a in argv {
            if let Some(flag) = next_is_id.take() {
                out.push(self.parsed(&a, &flag)?.to_string());
                continue;
            }
            match a.split_once('=') {
                Some((flag, v)) if image.id_flags.iter().any(|f| f == flag) => {
                    out.push(format!("{flag}={}", self.parsed(v, flag)?));
                }
                _ => {
                    if image.id_flags.contains(&a) {
                        next_is_id = Some(a.clone());
                    }
                    out.push(a);
                }
            }
        }
        Ok(out)
    }

    fn parsed(&self, v: &str, what: &str) -> Result<u32, String> {
        let id = v
            .trim()
            .parse()
            .map_err(|_| format!("{what} {v:?} is not a numeric id"))?;
        self.host(id, what)
    }
}

/// Every real, effective, saved and filesystem uid and gid of the running processes.
fn process_ids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter_map(|e| std::fs::read_to_string(Path::new(&e.path()).join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.starts_with("Uid:") || l.starts_with("Gid:"))
                .flat_map(|l| l.split_whitespace().skip(1).filter_map(|n| n.parse().ok()))
                .collect::<Vec<u32>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_holds_no_taken_id_and_root_stays_root() {
        let first = IdOffset::pick_free(&[], 0).unwrap();
        assert_eq!(first.base, FIRST);
        // A user inside the first slot moves the base to the next one.
        let moved = IdOffset::pick_free(&[FIRST + 1000], 0).unwrap();
        assert_eq!(moved.base, FIRST + RANGE);
        assert_eq!(moved.host(0, "runAsUser"), Ok(0));
        assert_eq!(moved.host(1000, "runAsUser"), Ok(FIRST + RANGE + 1000));
        assert!(
            moved
                .host(RANGE, "runAsUser")
                .unwrap_err()
                .contains("below 65536")
        );
    }

    #[test]
    fn the_ids_an_image_names_in_its_environment_and_flags_are_offset() {
        let ids = IdOffset::with_base(FIRST);
        let image = HostImage {
            id_env: vec!["SANDBOX_UID".into()],
            id_flags: vec!["--proxy-uid".into(), "--proxy-gid".into()],
            ..HostImage::default()
        };
        let env = ids
            .env(
                &image,
                vec![
                    ("SANDBOX_UID".into(), "1000".into()),
                    ("OTHER".into(), "1000".into()),
                ],
            )
            .unwrap();
        assert_eq!(env[0].1, (FIRST + 1000).to_string());
        assert_eq!(env[1].1, "1000");
        let argv = ids
            .argv(
                &image,
                [
                    "/x",
                    "--proxy-uid",
                    "1337",
                    "--proxy-gid=1000",
                    "--port",
                    "1",
                ]
                .map(String::from)
                .to_vec(),
            )
            .unwrap();
        assert_eq!(
            argv,
            vec![
                "/x".to_string(),
                "--proxy-uid".into(),
                (FIRST + 1337).to_string(),
                format!("--proxy-gid={}", FIRST + 1000),
                "--port".into(),
                "1".into(),
            ]
        );
        assert!(
            ids.env(&image, vec![("SANDBOX_UID".into(), "x".into())])
                .is_err()
        );
    }
}
