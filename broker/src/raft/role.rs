//! This node's role in its group, watched without exposing openraft's metrics types.
//!
//! Built on openraft's server metrics, which change only with the vote, the server state or
//! the membership, not with every applied entry.

use openraft::ServerState;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::metrics::RaftServerMetrics;
use openraft::type_config::alias::WatchReceiverOf;

use crate::raft::types::Raft;
use crate::raft::types::TypeConfig;

/// What a node is in its group right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role {
    pub is_leader: bool,
    /// The term of the node's current vote.
    pub term: u64,
}

pub struct RoleWatch {
    metrics: WatchReceiverOf<TypeConfig, RaftServerMetrics<TypeConfig>>,
}

impl RoleWatch {
    pub fn new(raft: &Raft) -> RoleWatch {
        RoleWatch {
            metrics: raft.server_metrics(),
        }
    }

    pub fn current(&self) -> Role {
        let metrics = self.metrics.borrow_watched();
        Role {
            is_leader: metrics.state == ServerState::Leader,
            term: metrics.vote.leader_id().term,
        }
    }

    /// Waits until the role differs from `last`; `None` once Raft has stopped.
    pub async fn changed_from(&mut self, last: Role) -> Option<Role> {
        loop {
            self.metrics.changed().await.ok()?;
            let role = self.current();
            if role != last {
                return Some(role);
            }
        }
    }
}
