//! Steering the group's Raft: [`setup`] (openraft's settings for a broker, founding a group),
//! [`propose`] (submitting commands and mapping their outcome), [`role`] (this node's role
//! and reacting to its changes), [`lease`] (whether it leads with a live quorum),
//! [`membership`] (online membership changes and the peers' addresses) and [`compaction`]
//! (snapshots and the log purge behind them).
//!
//! Invariant: a node acts as leader (serves leader-only work) only while it holds a lease a
//! quorum granted.

pub mod compaction;
pub mod lease;
pub mod membership;
pub mod propose;
pub mod role;
pub mod setup;
