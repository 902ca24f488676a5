//! rocketraft broker: a node of a broker group whose CommitLog is replicated through Raft.
//! The library knows no endpoint, no SDK and no nameserver crate: the composition root
//! (`rocketraft-server`) wires a node with its endpoints.
//!
//! # Layout
//! - [`store`]: CommitLog (mmap segments), ConsumeQueues and the message index;
//! - [`raft`]: the Raft log ([`raft::log`]), transport ([`raft::transport`]) and control
//!   ([`raft::control`]) of a broker group;
//! - [`state_machine`]: the replicated commands, applying them, snapshots;
//!   [`group_state`] and [`metadata`]: the replicated state a node serves from;
//! - features, one folder each: [`pop`], [`transaction`], [`schedule`] (delay levels,
//!   timers and the leader-only ScheduleMessageService), [`retention`], [`scrub`];
//! - [`consumer_registry`] and [`queue_locks`]: live consumers and orderly locks (leader
//!   only); [`group_commit`]: coalescing concurrent sends into one Raft entry;
//! - [`service`]: the broker gRPC API; [`error`]: its errors and wire codes; [`metrics`]:
//!   what a node counts and reports to Prometheus;
//! - [`registration`]: telling the nameservers who this node is and whether it leads;
//! - [`node`]: a node's start in phases and its supervised shutdown; [`config`]: its TOML
//!   configuration; [`tls`]: TLS on its ports and to its peers.

pub mod config;
pub mod consumer_registry;
pub mod data_dir_lock;
pub mod disk;
pub mod durable_file;
pub mod error;
pub mod group_commit;
pub mod group_state;
pub mod metadata;
pub mod metrics;
pub mod node;
pub mod pop;
pub mod queue_locks;
pub mod raft;
pub mod registration;
pub mod retention;
pub mod schedule;
pub mod scrub;
pub mod seeded_rng;
pub mod service;
pub mod state_machine;
pub mod store;
#[cfg(test)]
mod test_node;
#[cfg(test)]
mod testing;
pub mod throughput;
pub mod tls;
pub mod topic;
pub mod transaction;
