//! RocketMQ 5.x's gRPC protocol (`apache.rocketmq.v2.MessagingService`) served on a
//! rocketraft cluster, so apps written for the official 5.x clients (Java, Go, C#, C++,
//! Python, Node.js, Rust) run unmodified.
//!
//! Like a RocketMQ 5.x proxy in cluster mode the endpoint holds no message state: it answers
//! routes from the nameservers and forwards each call to the leader of the broker group that
//! owns the queue, through the rocketraft SDK, which follows leader changes. A broker node
//! serves it on a port of its own (`grpc_v5_listen`); every node reaches every topic of the
//! cluster, and routes name the endpoint itself as every queue's broker address, so a client
//! given one node's address never sees a leader change.

/// The protocol's messages and service (`rocketraft-proto` generates them).
pub use rocketraft_proto::v5 as pb;

mod access;
mod clients;
mod consume;
mod message;
mod receive_stream;
mod renewals;
mod route;
mod send;
mod server;
mod service;
mod status;
mod telemetry;
mod transaction;

pub use access::AccessKeys;
pub use renewals::RENEW_MAX;
pub use server::Proxy;
pub use server::ProxyConfig;
pub use server::ProxyError;
pub use server::V5_REQUEST_BYTES_MAX;
