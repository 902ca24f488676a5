//! Wire definitions of rocketraft: the broker API that clients speak, the Raft transport between
//! the nodes of a broker group, the nameserver's, the response codes they share, and
//! RocketMQ 5.x's gRPC protocol.
//!
//! The code is generated at build time from `proto/*.proto` (see `build.rs`). Response codes are
//! one table (`ResponseCode`); a retired code stays reserved and is never reused.

pub mod codec;

/// Message types and response codes shared by every service.
pub mod common {
    tonic::include_proto!("rocketraft.common");
}

/// The broker API served by every broker node (followers redirect writes to the leader).
pub mod broker {
    tonic::include_proto!("rocketraft.broker");
}

/// The Raft transport between the nodes of one broker group.
pub mod raft {
    tonic::include_proto!("rocketraft.raft");
}

/// The route registry: broker registration and topic routes.
pub mod nameserver {
    tonic::include_proto!("rocketraft.nameserver");
}

/// RocketMQ 5.x's protocol (`apache.rocketmq.v2.MessagingService`), generated from
/// `proto/apache/rocketmq/v2`: served by the 5.x endpoint, called by tools and tests.
#[allow(clippy::large_enum_variant)] // Generated oneofs, as the protocol defines them.
pub mod v5 {
    tonic::include_proto!("apache.rocketmq.v2");
}

/// A `PopRequest.queue_id` asking for any readable queue of the topic in the broker group (as
/// RocketMQ 5.x's proxy pops): the broker tries them in turn and waits on all of them.
pub const POP_ANY_QUEUE: i32 = -1;

/// gRPC metadata key carrying the numeric [`common::ResponseCode`] of a failed call.
pub const RESPONSE_CODE_HEADER: &str = "rr-code";
/// gRPC metadata key carrying the leader's address when a follower answers `NOT_LEADER`.
pub const LEADER_ADDR_HEADER: &str = "rr-leader-addr";

/// The broker's response code of a failed call, if the broker set one (a transport failure
/// carries none).
pub fn response_code(status: &tonic::Status) -> Option<common::ResponseCode> {
    let code = status
        .metadata()
        .get(RESPONSE_CODE_HEADER)?
        .to_str()
        .ok()?
        .parse::<i32>()
        .ok()?;
    common::ResponseCode::try_from(code).ok()
}

/// The leader's address a follower named when it answered `NOT_LEADER`.
pub fn leader_addr(status: &tonic::Status) -> Option<&str> {
    status.metadata().get(LEADER_ADDR_HEADER)?.to_str().ok()
}

/// A failed call as the wire carries it: the gRPC code, the numeric [`common::ResponseCode`]
/// in `rr-code`, and for `NOT_LEADER` the leader's address in `rr-leader-addr`. Brokers and
/// nameservers answer every failure this way.
pub fn error_status(
    grpc_code: tonic::Code,
    code: common::ResponseCode,
    message: String,
    leader_addr: Option<&str>,
) -> tonic::Status {
    let mut status = tonic::Status::new(grpc_code, message);
    let metadata = status.metadata_mut();
    metadata.insert(RESPONSE_CODE_HEADER, (code as i32).into());
    if let Some(value) = leader_addr.and_then(|addr| addr.parse().ok()) {
        metadata.insert(LEADER_ADDR_HEADER, value);
    }
    status
}

/// `error` and each of its causes, joined by `: ` (what a remote caller is told).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut chain = error.to_string();
    let mut cause = error.source();
    while let Some(source) = cause {
        chain.push_str(": ");
        chain.push_str(&source.to_string());
        cause = source.source();
    }
    chain
}
