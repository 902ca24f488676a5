//! Generates the protobuf and tonic code from `proto/*.proto` with `protox`, a pure-Rust
//! protobuf compiler, so a fresh machine needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/common.proto",
        "proto/broker.proto",
        "proto/raft.proto",
        "proto/nameserver.proto",
        // RocketMQ 5.x's protocol (package `apache.rocketmq.v2`), as the official clients
        // speak it to the 5.x endpoint.
        "proto/apache/rocketmq/v2/definition.proto",
        "proto/apache/rocketmq/v2/service.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .bytes(".")
        .codec_path("crate::codec::ExactCodec")
        .compile_fds(descriptors)?;
    Ok(())
}
