//! Raft for a broker group (openraft over tonic). Every openraft type stays inside this
//! module and [`crate::state_machine`], so an openraft upgrade touches nothing else.
//!
//! - [`types`]: the type config; [`codec`]: the binary encoding of openraft values;
//! - [`log`]: the durable Raft log, its checks and its repair;
//! - [`transport`]: the gRPC transport between the group's nodes;
//! - [`control`]: setup, proposing, role, lease, membership and compaction.
//!
//! What the log's entries do when applied is [`crate::state_machine`]'s.

pub mod codec;
pub mod control;
#[cfg(test)]
mod group_sim;
pub mod log;
pub mod transport;
pub mod types;
