//! This node's role in its group, watched, and its Raft status, without exposing openraft's
//! metrics types.
//!
//! The role watch is built on openraft's server metrics, which change only with the vote, the
//! server state or the membership, not with every applied entry.

use openraft::ServerState;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::metrics::RaftMetrics;
use openraft::metrics::RaftServerMetrics;
use openraft::type_config::alias::WatchReceiverOf;

use crate::raft::types::LogId;
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

    /// Whether this node is a voter or a learner of its group: false for a node that was
    /// removed, or that runs but was not added yet. Read from the same watch as
    /// [`RoleWatch::changed`]: openraft publishes these metrics before its full ones, so a
    /// membership change seen here may not have reached [`Raft::metrics`] yet.
    pub fn is_member(&self) -> bool {
        let metrics = self.metrics.borrow_watched();
        metrics.membership_config.get_node(&metrics.id).is_some()
    }

    /// The ids of the group's voters and learners as this node knows them, from the same
    /// watch as [`RoleWatch::is_member`].
    pub fn member_ids(&self) -> Vec<u64> {
        let metrics = self.metrics.borrow_watched();
        metrics
            .membership_config
            .nodes()
            .map(|(id, _)| *id)
            .collect()
    }

    /// Waits until the vote, the server state or the membership changes; `None` once Raft
    /// has stopped.
    pub async fn changed(&mut self) -> Option<()> {
        self.metrics.changed().await.ok()
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

/// Calls `on_change` now and at every change of this node's role (leader or not, and the
/// term); returns once Raft has stopped. For leader-only state kept in memory, which must
/// be reset whenever leadership comes or goes.
pub async fn on_every_role_change(raft: Raft, mut on_change: impl FnMut()) {
    let mut roles = RoleWatch::new(&raft);
    let mut role = roles.current();
    on_change();
    while let Some(changed) = roles.changed_from(role).await {
        on_change();
        role = changed;
    }
}

/// Waits until this node is a leader that may act on the group's state: it leads, and it
/// has applied an entry of its own term, so everything committed in earlier terms is applied
/// too. Returns its last log id then, which is of its term (a leader appends only entries of
/// its term after those of earlier ones); `None` once Raft has stopped.
pub async fn leader_ready(raft: &Raft) -> Option<LogId> {
    let mut metrics = raft.metrics();
    loop {
        if let Some(last_log) = ready_leader_last_log(&metrics.borrow_watched()) {
            return Some(last_log);
        }
        metrics.changed().await.ok()?;
    }
}

/// Whether this node is, right now, a leader as [`leader_ready`] waits for one: its store
/// holds everything committed before its term, and what commits in its term it applies
/// itself. A queue offset beyond what such a node holds was not committed; a follower, or a
/// leader still applying its predecessors' entries, may simply not have it yet.
pub fn is_ready_leader(raft: &Raft) -> bool {
    ready_leader_last_log(&raft.metrics().borrow_watched()).is_some()
}

/// The last log id of a ready leader, of its term; `None` if `now` is not one.
fn ready_leader_last_log(now: &RaftMetrics<TypeConfig>) -> Option<LogId> {
    let applied_term = now
        .last_applied
        .as_ref()
        .map(|log_id| log_id.committed_leader_id().term);
    (now.state == ServerState::Leader && applied_term == Some(now.current_term))
        .then(|| LogId::new_term_index(now.current_term, now.last_log_index.unwrap_or(0)))
}

/// Why leadership did not move where it was asked to.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransferError {
    #[error("node {0} is not a voter of this group")]
    NotAVoter(u64),
    #[error("this node does not lead its group")]
    NotLeader,
    #[error("node {to} did not take over within {timeout:?}")]
    Timeout {
        to: u64,
        timeout: std::time::Duration,
    },
    /// Raft stopped on this node (with openraft's reason when it gave one).
    #[error("raft stopped on this node")]
    Stopped(#[source] Option<openraft::errors::Fatal<crate::raft::types::TypeConfig>>),
}

/// Hands leadership to voter `to` (planned maintenance) and waits until this node follows
/// it; returns the new term. The old leader stops accepting writes at once and the new one
/// has every committed entry, so nothing acknowledged is lost.
pub async fn transfer_leadership(
    raft: &Raft,
    to: u64,
    timeout: std::time::Duration,
) -> Result<u64, TransferError> {
    let mut metrics = raft.metrics();
    {
        // Clone at once: the guard must not be held across an await.
        let now = metrics.borrow_watched().clone();
        if !now.membership_config.voter_ids().any(|id| id == to) {
            return Err(TransferError::NotAVoter(to));
        }
        if now.state != ServerState::Leader {
            return Err(TransferError::NotLeader);
        }
        if now.id == to {
            return Ok(now.current_term);
        }
    }
    raft.trigger()
        .transfer_leader(to)
        .await
        .map_err(|fatal| TransferError::Stopped(Some(fatal)))?;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        {
            let now = metrics.borrow_watched();
            if now.current_leader == Some(to) && now.state != ServerState::Leader {
                return Ok(now.current_term);
            }
        }
        match tokio::time::timeout_at(deadline, metrics.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(TransferError::Stopped(None)),
            Err(_) => return Err(TransferError::Timeout { to, timeout }),
        }
    }
}

/// A snapshot of this node's Raft state, for status reports.
#[derive(Debug, Clone)]
pub struct RaftStatus {
    pub node_id: u64,
    /// "leader", "follower", "candidate", "learner" or "shutdown".
    pub role: &'static str,
    pub leader_id: Option<u64>,
    /// Empty when no leader is known.
    pub leader_addr: String,
    pub term: u64,
    pub last_applied_index: Option<u64>,
    pub last_log_index: Option<u64>,
    pub last_purged_index: Option<u64>,
    pub snapshot_index: Option<u64>,
}

pub fn raft_status(raft: &Raft) -> RaftStatus {
    // Clone at once: the metrics guard must not be held (it blocks the Raft core).
    let metrics = raft.metrics().borrow_watched().clone();
    let leader_addr = metrics
        .current_leader
        .and_then(|leader| {
            metrics
                .membership_config
                .get_node(&leader)
                .map(|node| node.api.clone())
        })
        .unwrap_or_default();
    let role = match metrics.state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    };
    RaftStatus {
        node_id: metrics.id,
        role,
        leader_id: metrics.current_leader,
        leader_addr,
        term: metrics.current_term,
        last_applied_index: metrics.last_applied.map(|log_id| log_id.index),
        last_log_index: metrics.last_log_index,
        last_purged_index: metrics.purged.map(|log_id| log_id.index),
        snapshot_index: metrics.snapshot.map(|log_id| log_id.index),
    }
}
