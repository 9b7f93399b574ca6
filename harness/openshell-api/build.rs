//! Compiles `proto/` with protox (pure Rust, no `protoc`) and generates prost messages plus tonic
//! client and server code from the resulting descriptors (docs/dependencies.md D9).

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/openshell.proto",
        "proto/datamodel.proto",
        "proto/sandbox.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    // Kept so tests can compare our declarations with upstream's descriptors.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("openshell_api.fds"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // A server implements what it serves; the rest answers UNIMPLEMENTED, as upstream does
        // for a method it does not have.
        .generate_default_stubs(true)
        .compile_fds(fds)?;
    Ok(())
}
