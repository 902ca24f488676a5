//! The openraft type configuration of a broker group: its entries carry the state machine's
//! [`Command`]s and answer with their [`CommandResult`]s.

use crate::state_machine::command::Command;
use crate::state_machine::command::CommandResult;

openraft::declare_raft_types!(
    /// Raft types of a broker group: standard Raft leader ids (the term alone is committed),
    /// node ids are `u64` and a node is known by its broker API and Raft addresses.
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = u64,
        Node = crate::raft::transport::node_addr::NodeAddr,
        Term = u64,
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>,
);

/// Type configurations whose entries, votes, log ids and results are the broker's: the Raft
/// log store and the state machine serve any of them (the broker's own, and the crash
/// simulation's, which differs only in its async runtime).
pub trait LogTypes:
    openraft::RaftTypeConfig<
        D = Command,
        R = CommandResult,
        NodeId = u64,
        Node = crate::raft::transport::node_addr::NodeAddr,
        Term = u64,
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>,
        Entry = Entry,
        Vote = Vote,
    >
{
}

impl LogTypes for TypeConfig {}

/// The node id of a broker node within its group.
pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig, crate::state_machine::StateMachine>;
pub type Entry = <TypeConfig as openraft::RaftTypeConfig>::Entry;
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
pub type Snapshot = openraft::type_config::alias::SnapshotOf<
    TypeConfig,
    crate::state_machine::snapshot::SnapshotData,
>;
