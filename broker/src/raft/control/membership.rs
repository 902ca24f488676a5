//! Online membership changes of a broker group, run on its leader: a node joins as a
//! learner, catches up from the log (or a snapshot plus the CommitLog), then becomes a voter;
//! voters and learners leave; a dead node's place goes to a new node in one joint change.
//!
//! Invariants:
//! - a change adds at most one node, and the voters change in one `change_membership` call:
//!   openraft commits it through joint consensus, so no step needs more than the old and the
//!   new majority, and a leader that fails midway leaves a joint config the next leader
//!   finishes;
//! - a node becomes a voter only after it caught up as a learner, so adding it never makes
//!   the group wait for a node that is still copying the log;
//! - the leader never removes itself (leadership moves first), and a change never leaves the
//!   group without voters or with more than [`VOTERS_MAX`].

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::time::Duration;
use std::time::Instant;

use openraft::ChangeMembers;
use openraft::ServerState;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::errors::ClientWriteError;
use openraft::errors::RaftError;

use crate::raft::transport::node_addr::BadNodeAddr;
use crate::raft::transport::node_addr::NodeAddr;
use crate::raft::types::NodeId;
use crate::raft::types::Raft;
use crate::raft::types::TypeConfig;
use crate::tls::PeerConnector;

/// Voters a group may have at most (a typo must not make a group of hundreds).
pub const VOTERS_MAX: usize = 7;
/// How long an added node may take to catch up as a learner before the change is given up
/// (the node then stays a learner: harmless, it does not vote; adding it again resumes).
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(600);

/// One membership change: a node to add, nodes to remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MembershipChange {
    /// Checked where it entered (`NodeAddr::from_str`).
    pub add: Option<(NodeId, NodeAddr)>,
    pub remove: BTreeSet<NodeId>,
}

/// The membership a change left, and what it took.
#[derive(Debug, Clone)]
pub struct ChangeOutcome {
    pub voters: BTreeMap<NodeId, NodeAddr>,
    pub catch_up: Duration,
    pub change: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("this node does not lead its group")]
    NotLeader,
    #[error(
        "node {0} leads the group and cannot remove itself; transfer leadership to another \
         voter first"
    )]
    RemovesLeader(NodeId),
    #[error("node {0} is not a member of this group")]
    NotAMember(NodeId),
    #[error("node {id} is already a member, at {addr}; remove it first to move it")]
    AlreadyMember { id: NodeId, addr: NodeAddr },
    #[error(transparent)]
    BadAddress(#[from] BadNodeAddr),
    #[error("node {id} cannot be both added and removed")]
    AddAndRemove { id: NodeId },
    #[error("the change leaves {0} voters; a group has 1 to {VOTERS_MAX}")]
    VoterCount(usize),
    #[error("nothing to change: name a node to add or nodes to remove")]
    Empty,
    #[error(
        "node {id} did not catch up within {timeout:?}; it stays a learner (it does not vote): \
         add it again to finish, or remove it"
    )]
    CatchUpTimeout { id: NodeId, timeout: Duration },
    #[error("raft refused the change")]
    Raft(#[source] RaftError<TypeConfig, ClientWriteError<TypeConfig>>),
}

/// The voters and learners of the group as this node knows them: node id -> addresses.
pub fn members(raft: &Raft) -> (BTreeMap<NodeId, NodeAddr>, BTreeMap<NodeId, NodeAddr>) {
    // Clone at once: the metrics guard must not be held (it blocks the Raft core).
    let membership = raft.metrics().borrow_watched().membership_config.clone();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let mut voter_addrs = BTreeMap::new();
    let mut learner_addrs = BTreeMap::new();
    for (id, node) in membership.nodes() {
        let into = if voters.contains(id) {
            &mut voter_addrs
        } else {
            &mut learner_addrs
        };
        into.insert(*id, node.clone());
    }
    (voter_addrs, learner_addrs)
}

/// The addresses of this node's peers, read when they are needed (they change with the
/// membership): the other nodes of the Raft membership, or the configured peers while this
/// node knows no membership yet (it has not joined).
#[derive(Clone)]
pub struct PeerAddrs {
    raft: Raft,
    configured: Vec<NodeAddr>,
    connector: PeerConnector,
}

impl PeerAddrs {
    pub fn new(raft: Raft, configured: Vec<NodeAddr>, connector: PeerConnector) -> PeerAddrs {
        PeerAddrs {
            raft,
            configured,
            connector,
        }
    }

    /// How connections to the peers are opened.
    pub fn connector(&self) -> &PeerConnector {
        &self.connector
    }

    /// The addresses of the other members.
    pub fn current(&self) -> Vec<NodeAddr> {
        let node_id = self.raft.metrics().borrow_watched().id;
        let (voters, learners) = members(&self.raft);
        if voters.is_empty() && learners.is_empty() {
            return self.configured.clone();
        }
        voters
            .into_iter()
            .chain(learners)
            .filter(|(id, _)| *id != node_id)
            .map(|(_, addr)| addr)
            .collect()
    }
}

/// Applies `change` on the leader `raft` and returns once the new membership is committed.
pub async fn change_membership(
    raft: &Raft,
    change: MembershipChange,
) -> Result<ChangeOutcome, MembershipError> {
    let (leader_id, is_leader) = {
        let metrics = raft.metrics().borrow_watched().clone();
        (metrics.id, metrics.state == ServerState::Leader)
    };
    if !is_leader {
        return Err(MembershipError::NotLeader);
    }
    let (voters, learners) = members(raft);
    let new_voters = plan(leader_id, &voters, &learners, &change)?;
    let started = Instant::now();
    // A voter added again (a retried call) is already there: nothing to catch up.
    if let Some((id, addr)) = change
        .add
        .as_ref()
        .filter(|(id, _)| !voters.contains_key(id))
    {
        tracing::info!(node = id, %addr, "adding a node as a learner; waiting for it to catch up");
        let node = addr.clone();
        // Not openraft's blocking add: it counts a learner as caught up within
        // `replication_lag_threshold`, which brokers set high (see `setup`).
        raft.add_learner(*id, node, false)
            .await
            .map_err(MembershipError::Raft)?;
        wait_caught_up(raft, *id).await?;
    }
    let catch_up = started.elapsed();
    let started = Instant::now();
    let voter_ids: BTreeSet<NodeId> = new_voters.keys().copied().collect();
    if voter_ids != voters.keys().copied().collect() {
        tracing::info!(?voter_ids, "changing the group's voters");
        raft.change_membership(ChangeMembers::ReplaceAllVoters(voter_ids), false)
            .await
            .map_err(MembershipError::Raft)?;
    }
    let leaving_learners: BTreeSet<NodeId> = change
        .remove
        .iter()
        .copied()
        .filter(|id| learners.contains_key(id))
        .collect();
    if !leaving_learners.is_empty() {
        tracing::info!(?leaving_learners, "removing learners");
        raft.change_membership(ChangeMembers::RemoveNodes(leaving_learners), false)
            .await
            .map_err(MembershipError::Raft)?;
    }
    let outcome = ChangeOutcome {
        voters: members(raft).0,
        catch_up,
        change: started.elapsed(),
    };
    tracing::info!(voters = ?outcome.voters, catch_up = ?outcome.catch_up, change = ?outcome.change, "membership changed");
    Ok(outcome)
}

/// Waits until learner `id` holds every entry the leader had when the wait began (it then
/// follows at line rate), or fails if this node stops leading or the wait times out.
async fn wait_caught_up(raft: &Raft, id: NodeId) -> Result<(), MembershipError> {
    let target = raft.metrics().borrow_watched().last_log_index.unwrap_or(0);
    let waited = raft
        .wait(Some(CATCH_UP_TIMEOUT))
        .metrics(
            |metrics| match &metrics.replication {
                // Not leading any more: stop waiting, and say so below.
                None => true,
                Some(replication) => replication
                    .get(&id)
                    .and_then(|matched| matched.as_ref())
                    .is_some_and(|matched| matched.index >= target),
            },
            "the new learner to catch up",
        )
        .await;
    match waited {
        Ok(metrics) if metrics.replication.is_some() => Ok(()),
        Ok(_) | Err(openraft::metrics::WaitError::ShuttingDown) => Err(MembershipError::NotLeader),
        Err(openraft::metrics::WaitError::Timeout(..)) => Err(MembershipError::CatchUpTimeout {
            id,
            timeout: CATCH_UP_TIMEOUT,
        }),
    }
}

/// The voters after `change`, or why the change is refused. Pure: checked before anything
/// is proposed, so a refused change leaves the group as it was.
fn plan(
    leader_id: NodeId,
    voters: &BTreeMap<NodeId, NodeAddr>,
    learners: &BTreeMap<NodeId, NodeAddr>,
    change: &MembershipChange,
) -> Result<BTreeMap<NodeId, NodeAddr>, MembershipError> {
    if change.add.is_none() && change.remove.is_empty() {
        return Err(MembershipError::Empty);
    }
    if let Some((id, _)) = &change.add
        && change.remove.contains(id)
    {
        return Err(MembershipError::AddAndRemove { id: *id });
    }
    if change.remove.contains(&leader_id) {
        return Err(MembershipError::RemovesLeader(leader_id));
    }
    if let Some(id) = change
        .remove
        .iter()
        .find(|id| !voters.contains_key(id) && !learners.contains_key(id))
    {
        return Err(MembershipError::NotAMember(*id));
    }
    let mut new_voters = voters.clone();
    new_voters.retain(|id, _| !change.remove.contains(id));
    if let Some((id, addr)) = &change.add {
        // A voter at another address must leave first: moving a node in place would let
        // two machines answer as one node. A learner (a change that did not finish) at the
        // same address is added again, which resumes it.
        if let Some(known) = voters.get(id).or_else(|| learners.get(id))
            && known != addr
        {
            return Err(MembershipError::AlreadyMember {
                id: *id,
                addr: known.clone(),
            });
        }
        new_voters.insert(*id, addr.clone());
    }
    if new_voters.is_empty() || new_voters.len() > VOTERS_MAX {
        return Err(MembershipError::VoterCount(new_voters.len()));
    }
    Ok(new_voters)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(id: NodeId) -> NodeAddr {
        NodeAddr::shared(format!("127.0.0.1:{}", 9000 + id))
    }

    fn nodes(ids: &[NodeId]) -> BTreeMap<NodeId, NodeAddr> {
        ids.iter().map(|id| (*id, addr(*id))).collect()
    }

    fn change(add: Option<NodeId>, remove: &[NodeId]) -> MembershipChange {
        MembershipChange {
            add: add.map(|id| (id, addr(id))),
            remove: remove.iter().copied().collect(),
        }
    }

    fn ids(voters: BTreeMap<NodeId, NodeAddr>) -> Vec<NodeId> {
        voters.into_keys().collect()
    }

    #[test]
    fn grows_shrinks_and_replaces_in_one_change() {
        let voters = nodes(&[1, 2, 3]);
        let none = BTreeMap::new();
        let grown = plan(1, &voters, &none, &change(Some(4), &[])).expect("grow");
        assert_eq!(ids(grown), [1, 2, 3, 4]);
        let shrunk = plan(1, &voters, &none, &change(None, &[3])).expect("shrink");
        assert_eq!(ids(shrunk), [1, 2]);
        let replaced = plan(1, &voters, &none, &change(Some(4), &[3])).expect("replace");
        assert_eq!(ids(replaced), [1, 2, 4]);
    }

    #[test]
    fn refuses_what_would_hurt_the_group() {
        let voters = nodes(&[1, 2, 3]);
        let learners = nodes(&[4]);
        let refused =
            |change: MembershipChange| plan(1, &voters, &learners, &change).expect_err("refused");
        assert!(matches!(refused(change(None, &[])), MembershipError::Empty));
        assert!(matches!(
            refused(change(None, &[1])),
            MembershipError::RemovesLeader(1)
        ));
        assert!(matches!(
            refused(change(None, &[9])),
            MembershipError::NotAMember(9)
        ));
        assert!(matches!(
            refused(change(Some(5), &[5])),
            MembershipError::AddAndRemove { id: 5 }
        ));
        for moved_to in [
            NodeAddr::shared("127.0.0.1:1"),
            NodeAddr::split(addr(2).api, "127.0.0.1:2"),
        ] {
            let moved = MembershipChange {
                add: Some((2, moved_to)),
                remove: BTreeSet::new(),
            };
            assert!(matches!(
                refused(moved),
                MembershipError::AlreadyMember { id: 2, .. }
            ));
        }
    }

    #[test]
    fn voter_count_is_bounded_at_both_ends() {
        let none = BTreeMap::new();
        let alone = nodes(&[1]);
        let full = nodes(&(1..=VOTERS_MAX as NodeId).collect::<Vec<_>>());
        assert!(matches!(
            plan(1, &full, &none, &change(Some(VOTERS_MAX as NodeId + 1), &[])),
            Err(MembershipError::VoterCount(count)) if count == VOTERS_MAX + 1
        ));
        // At the maximum, a replacement still fits.
        let at_max = plan(1, &full, &none, &change(Some(99), &[2])).expect("replace at max");
        assert_eq!(at_max.len(), VOTERS_MAX);
        assert_eq!(
            ids(plan(1, &alone, &none, &change(Some(2), &[])).expect("grow from one")),
            [1, 2]
        );
    }

    #[test]
    fn a_learner_left_by_an_unfinished_change_is_resumed_or_removed() {
        let voters = nodes(&[1, 2, 3]);
        let learners = nodes(&[4]);
        let resumed = plan(1, &voters, &learners, &change(Some(4), &[])).expect("resume");
        assert_eq!(ids(resumed), [1, 2, 3, 4]);
        let removed = plan(1, &voters, &learners, &change(None, &[4])).expect("remove learner");
        assert_eq!(ids(removed), [1, 2, 3]);
    }
}
