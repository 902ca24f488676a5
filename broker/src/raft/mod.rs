//! Raft for a broker group (openraft over tonic). Every openraft type stays inside this
//! module, so an openraft upgrade touches nothing else.
//!
//! - `types`: the type config and the replicated [`types::Command`]s;
//! - `log_store` + `log_segment` + `entry_cache` + `log_flusher` + `log_purger`: the durable
//!   Raft log; `repair`: a node whose log was found damaged re-fetches it before it votes
//!   again; `boot_check`: whether an `async` log may have lost its unsynced tail to a reboot;
//! - `state_machine` + `snapshot`: applying commands to the store, snapshots;
//! - `network` (client) and `service` (server): the gRPC transport, with `append_codec` (the
//!   replication stream's wire format) and `append_route` (its server end); `faults`: test
//!   faults;
//!   `stalled_stream`: ends a replication stream that stopped advancing;
//! - `propose`: submitting commands and mapping their outcome; `role`: this node's role;
//!   `lease`: whether it leads with a live quorum;
//! - `compaction`: snapshots and log purge behind them;
//! - `setup`: openraft's settings for a broker, founding a group; `membership`: online
//!   membership changes (add, remove, replace nodes) and the peers' addresses;
//!   `node_addr`: a member's broker API and Raft addresses;
//! - `codec`: the binary encoding of openraft values.

mod append_codec;
pub mod append_route;
pub mod boot_check;
pub mod codec;
pub mod compaction;
pub mod entry_cache;
pub mod faults;
#[cfg(test)]
mod group_sim;
pub mod layout_check;
pub mod lease;
#[cfg(test)]
mod log_crash_sim;
pub mod log_flusher;
pub mod log_purger;
pub mod log_segment;
pub mod log_store;
pub mod membership;
pub mod network;
pub mod node_addr;
pub mod propose;
pub mod repair;
pub mod role;
pub mod service;
pub mod setup;
pub mod snapshot;
pub mod stalled_stream;
pub mod state_machine;
#[cfg(test)]
mod state_machine_sim;
#[cfg(test)]
mod transport_tests;
pub mod types;
pub mod vote_file;
