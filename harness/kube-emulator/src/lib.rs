#![warn(unreachable_pub)]
//! An in-process Kubernetes API server for tests: store, admission, watch (with replay, 410 and
//! bookmarks), patches, scale, garbage collection, finalizers, exec/logs/port-forward over
//! WebSocket, and a POSIX shell subset for exec ([`shell`], the `emulator-shell` crate).
//! Reached over an in-memory transport (so it runs in tokio's paused, virtual time) or over
//! TCP ([`serve`]). It knows nothing of the
//! programs that run on it: controllers and container programs plug in from outside.
//!
//! Start with [`Cluster`]: `Cluster::new(ClusterConfig::default())`, then `cluster.client()` for
//! a `kube::Client`, or the direct object methods for in-process controllers. Models plug in
//! through exec handlers ([`ExecHandler`]), logs ([`Cluster::append_log`]), port handlers
//! ([`PortForwardHandler`]), volumes and shell hooks.

mod backend;
mod clock;
mod cluster;
mod discovery;
mod error;
mod exec;
mod kinds;
mod logs;
mod openapi;
mod patch;
mod pb;
mod plugin;
mod pointer;
mod portforward;
mod registry;
mod resources;
mod response;
mod selectors;
pub mod serve;
mod server;
mod spdy;
mod store;
pub mod sync;
mod tables;
mod tokens;
mod transport;
mod validation;
mod volumes;
mod watch;

pub use backend::{ClusterConfig, DEFAULT_EPOCH_UNIX};
pub use clock::parse_unix;
pub use cluster::{Cluster, WeakCluster, container_mounts, populate_volumes};
pub use emulator_shell as shell;
pub use emulator_shell::ExecOutput;
pub use error::{ApiError, ApiResult};
pub use patch::PatchKind;
pub use plugin::{ExecHandler, ExecRequest, PortForwardHandler};
pub use pointer::{Pointer, pointer};
pub use registry::Freshness;
pub use resources::ResourceRef;
pub use store::{DeleteOptions, ListOptions};
pub use tokens::{API_AUDIENCE, BoundObject, TokenRequest};
pub use volumes::{MountFailure, is_api_volume};
pub use watch::{WatchEvent, WatchParams};
