//! Cluster providers behind one trait ([`ClusterProvider`]): kind and k3d create (or reuse) a
//! local cluster from the config file in the repository, load local images and export logs;
//! `existing` connects to a kubeconfig context and never creates or deletes anything.

mod existing;
mod k3d;
mod kind;
mod provider;

use crate::options::{Provider, RealOptions};

pub use provider::{ClusterProvider, ClusterUp, create_private_dir, infra};

/// The provider for the resolved options.
pub fn provider(opts: &RealOptions) -> Box<dyn ClusterProvider> {
    match opts.provider {
        Provider::Kind => Box::new(kind::Kind::new(opts)),
        Provider::K3d => Box::new(k3d::K3d::new(opts)),
        Provider::Existing => Box::new(existing::Existing::new(opts)),
    }
}
