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
