//! Generates the RocketMQ 5.x protocol's code (package `apache.rocketmq.v2`) with `protox`, a
//! pure-Rust protobuf compiler, so a fresh machine needs no system `protoc`. The server, and
//! a client for tools and tests that call an endpoint directly.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/apache/rocketmq/v2/definition.proto",
        "proto/apache/rocketmq/v2/service.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .bytes(".")
        // As the broker API: each message's length is reserved before it is written.
        .codec_path("rocketraft_proto::codec::ExactCodec")
        .compile_fds(descriptors)?;
    Ok(())
}
