//! Generates the gRPC stubs from the repository's proto/ folder. protox compiles the .proto files
//! in Rust, so building the crate needs no protoc on the machine and its well-known types come
//! with protox itself.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let service = root.join("jobwire/v1/worker_service.proto");
    println!("cargo:rerun-if-changed={}", root.join("jobwire/v1").display());
    let fds = protox::compile([&service], [&root])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_fds(fds)?;
    Ok(())
}
