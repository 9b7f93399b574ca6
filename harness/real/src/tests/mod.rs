//! Tests of the real path's parts that need more than one module: the CLI driver against
//! recorded outputs, the cluster lifecycle with a scripted runner, and the kube-rs parts
//! against the kube emulator, and the proofs against the real chart and CLI (`real_tools`).

mod cli;
mod cluster;
mod completeness;
mod emulated;
mod reads;
mod real_tools;
mod watch;

/// The notes a recorder holds, in order.
pub(crate) fn notes(rec: &conformance_core::timeline::Recorder) -> Vec<String> {
    rec.snapshot()
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            conformance_core::timeline::Event::Note { message } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// A temporary directory as the run makes its private ones: mode 0700 from its creation
/// (tempfile leaves the mode to the umask, and a private directory others can enter is refused).
pub(crate) fn private_tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir()
        .unwrap()
}
