//! OpenShell's gRPC wire schema: our own `.proto` for the subset of the `openshell.v1.OpenShell`
//! service the harness and the `openshell` CLI use, with tonic client and server code.
//!
//! Wire-compatible with upstream (docs/upstream-facts.md F7.5, F7.6): `tests/` compares every
//! declaration with the descriptors of the official Python SDK and round-trips a tonic server
//! through the SDK's stub. Fields whose number or type differs between v0.0.111 and 0.1.x are
//! not declared, so requests from either client decode.

/// `openshell.datamodel.v1`: object metadata.
pub mod datamodel {
    /// Version 1 of the package.
    pub mod v1 {
        tonic::include_proto!("openshell.datamodel.v1");
    }
}

/// `openshell.sandbox.v1`: the sandbox configuration the CLI's `sandbox get` asks for.
pub mod sandbox {
    /// Version 1 of the package.
    pub mod v1 {
        tonic::include_proto!("openshell.sandbox.v1");
    }
}

/// `openshell.v1`: the gateway's service, its messages and enums.
// Generated code: a stream event holds a whole `Sandbox` inline, as prost lays oneofs out.
#[allow(clippy::large_enum_variant)]
pub mod v1 {
    tonic::include_proto!("openshell.v1");
}

pub use v1::open_shell_client::OpenShellClient;
pub use v1::open_shell_server::{OpenShell, OpenShellServer};

/// The encoded `FileDescriptorSet` of our `.proto` files (with their imports), as compiled.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/openshell_api.fds"));
