//! Wire definitions of rocketraft: the broker API that clients speak, the Raft transport between
//! the nodes of a broker group, and the response codes both share.
//!
//! The code is generated at build time from `proto/*.proto` (see `build.rs`). Response codes are
//! one table (`ResponseCode`); a retired code stays reserved and is never reused.

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

/// gRPC metadata key carrying the numeric [`common::ResponseCode`] of a failed call.
pub const RESPONSE_CODE_HEADER: &str = "rr-code";
/// gRPC metadata key carrying the leader's address when a follower answers `NOT_LEADER`.
pub const LEADER_ADDR_HEADER: &str = "rr-leader-addr";
