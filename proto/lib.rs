//! The opreg contract: messages and gRPC stubs generated from `proto/` by `build.rs`.

// A public crate: everything it exports is documented, and nothing is
// `pub` that callers cannot reach.
#![warn(missing_docs, unreachable_pub)]

/// Package `opreg.v1`.
pub mod v1 {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("opreg.v1");
}

pub mod errors;
pub mod parameters;

/// The encoded `FileDescriptorSet` of the contract, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("opreg_descriptor");
