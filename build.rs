//! Generates the opreg contract from `proto/` with protox (no system protoc) and
//! writes the descriptor set next to it, for server reflection.

use std::{env, fs, path::PathBuf};

use prost::Message;

const PROTO_ROOT: &str = "proto";
const PROTO_FILES: &[&str] = &[
    "proto/opreg/v1/registry.proto",
    "proto/opreg/v1/admin.proto",
    "proto/opreg/v1/errors.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}");

    let descriptors = protox::compile(PROTO_FILES, [PROTO_ROOT])?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out_dir.join("opreg_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;

    // google.rpc.Status (in BatchClaim and BatchComplete results) is the type
    // tonic-types already generates, so statuses convert without copying.
    tonic_prost_build::configure()
        .extern_path(".google.rpc", "::tonic_types::pb")
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
