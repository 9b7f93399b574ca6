//! The embedded emulated target: an in-process Kubernetes API server reached over an in-memory
//! transport, so scenarios run in tokio's paused (virtual) time.
//!
//! Start with [`Cluster`]: `Cluster::new(ClusterConfig::default())`, then `cluster.client()` for
//! a `kube::Client`, or the direct object methods for in-process controllers. Models plug in
//! through exec handlers ([`ExecHandler`]), logs ([`Cluster::append_log`]), port handlers
//! ([`PortForwardHandler`]), volumes and shell hooks.

pub mod clock;
pub mod cluster;
pub mod discovery;
pub mod error;
pub mod exec;
pub mod logs;
pub mod patch;
pub mod portforward;
pub mod resources;
pub mod selectors;
pub mod serve;
pub mod server;
pub mod shell;
pub mod store;
pub mod tables;
pub mod transport;
pub mod watch;

pub use cluster::{Cluster, ClusterConfig, DEFAULT_EPOCH_UNIX, ResourceRef};
pub use error::{ApiError, ApiResult};
pub use exec::{ExecHandler, ExecRequest};
pub use patch::PatchKind;
pub use portforward::PortForwardHandler;
pub use shell::ExecOutput;
pub use store::{DeleteOptions, ListOptions};
pub use watch::{WatchEvent, WatchParams};
