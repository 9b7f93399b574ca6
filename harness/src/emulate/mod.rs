//! The embedded emulated target: an in-process Kubernetes API server reached over an in-memory
//! transport, so scenarios run in tokio's paused (virtual) time.

pub mod shell;
