//! The durable Raft log of a node: segments on disk with an entry cache in front
//! ([`store`], [`segment`], [`entry_cache`]), fsynced by the [`flusher`] and purged behind
//! snapshots by the [`purger`]; the vote ([`vote_file`]); the checks a start runs on it
//! ([`layout_check`], [`boot_check`]); and [`repair`]: a node whose log was found damaged
//! re-fetches it from its peers before it votes again.
//!
//! Invariant: an entry this node acknowledged (appended and, in `sync` mode, fsynced) is
//! never lost by a crash of this node, and a damaged log never votes.

pub mod boot_check;
#[cfg(test)]
mod crash_sim;
pub mod entry_cache;
pub mod flusher;
pub mod layout_check;
pub mod purger;
pub mod repair;
pub mod segment;
pub mod store;
pub mod vote_file;
