//! The gRPC transport between the nodes of a broker group: [`network`] (the client side) and
//! [`service`] (the server side), with [`append_codec`] (the replication stream's wire
//! format) and [`append_route`] (its server end); [`stalled_stream`] ends a replication
//! stream that stopped advancing; [`node_addr`]: a member's broker API and Raft addresses;
//! [`faults`]: the faults tests and drills inject on outgoing calls.
//!
//! Invariant: a peer is told an entry was appended only after the local log took it.

mod append_codec;
pub mod append_route;
pub mod faults;
pub mod network;
pub mod node_addr;
pub mod service;
pub mod stalled_stream;
#[cfg(test)]
mod tests;
