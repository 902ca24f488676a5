//! The in-process network of the group simulation (`raft::group_sim`): RPCs between the
//! nodes of one process go straight to the target's `openraft::Raft`, through a
//! [`FaultPlan`] that drops, delays and partitions as the seed says. It also refuses what a
//! rebooted broker node refuses (`raft::log::repair`): replication until a leader consented
//! to its shorter log, and votes until it caught up, unless the candidate's log reaches the
//! consenting leader's last log id.
//!
//! Invariant: a node that is down, or cut off by the plan, receives nothing.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::Mutex;

use futures::Stream;
use openraft::RaftNetworkFactory;
use openraft::base::BoxFuture;
use openraft::base::BoxStream;
use openraft::errors::NetworkError;
use openraft::errors::RPCError;
use openraft::errors::ReplicationClosed;
use openraft::errors::StreamingError;
use openraft::errors::Unreachable;
use openraft::network::RPCOption;
use openraft::network::stream_append_sequential;
use openraft::network::v2::RaftNetworkV2;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::AppendEntriesResponse;
use openraft::raft::SnapshotResponse;
use openraft::raft::StreamAppendResult;
use openraft::raft::VoteRequest;
use openraft::raft::VoteResponse;
use openraft::rt::deterministic_rng::DeterministicRng;
use openraft::type_config::alias::LogIdOf;
use openraft::type_config::alias::SnapshotOf;
use openraft_rt_tokio::TokioRuntime;

use crate::raft::transport::faults::FaultPlan;
use crate::raft::transport::faults::Verdict;
use crate::raft::transport::node_addr::NodeAddr;
use crate::raft::transport::stalled_stream::until_stalled;
use crate::raft::types::NodeId;
use crate::raft::types::Vote;
use crate::state_machine::StateMachine;
use crate::state_machine::command::Command;
use crate::state_machine::command::CommandResult;
use crate::state_machine::snapshot::SnapshotData;

openraft::declare_raft_types!(
    /// The broker's Raft types on a runtime whose random numbers follow the seed.
    pub(crate) SimTypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = u64,
        Node = NodeAddr,
        Term = u64,
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>,
        AsyncRuntime = DeterministicRng<TokioRuntime>,
);

impl crate::raft::types::LogTypes for SimTypeConfig {}

pub(crate) type SimRaft = openraft::Raft<SimTypeConfig, StateMachine>;
type Snapshot = SnapshotOf<SimTypeConfig, SnapshotData>;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The nodes that run, and the network's faults.
pub(crate) struct SimNetwork {
    pub(crate) rafts: Mutex<BTreeMap<NodeId, SimRaft>>,
    pub(crate) faults: FaultPlan,
    /// Nodes that lost power under `async` and refuse replication until a leader accepted
    /// their shorter log.
    pub(crate) awaiting_consent: Mutex<BTreeSet<NodeId>>,
    /// Nodes that lost power under `async` and refuse votes until they caught up.
    pub(crate) refusing_votes: Mutex<BTreeSet<NodeId>>,
    /// Of those, the ones a leader of their term or later consented to, with its last log id:
    /// they vote for a candidate whose log reaches it.
    pub(crate) vote_floors: Mutex<BTreeMap<NodeId, LogIdOf<SimTypeConfig>>>,
    /// Votes and pre-votes granted through a vote floor.
    pub(crate) floor_votes: Mutex<u64>,
    /// Snapshots installed by a node that lagged behind a purge.
    pub(crate) snapshots_installed: Mutex<u64>,
}

impl SimNetwork {
    /// A network with no node running yet, faulted by `faults`.
    pub(crate) fn new(faults: FaultPlan) -> SimNetwork {
        SimNetwork {
            rafts: Mutex::new(BTreeMap::new()),
            faults,
            awaiting_consent: Mutex::default(),
            refusing_votes: Mutex::default(),
            vote_floors: Mutex::default(),
            floor_votes: Mutex::default(),
            snapshots_installed: Mutex::default(),
        }
    }

    /// The running node `target`, if the link to it delivers now.
    async fn reach(
        &self,
        from: NodeId,
        target: NodeId,
    ) -> Result<SimRaft, Unreachable<SimTypeConfig>> {
        match self.faults.verdict(from, target) {
            Verdict::Drop => {
                return Err(Unreachable::from_string(format!(
                    "{from} -> {target} dropped"
                )));
            }
            Verdict::Delay(delay) => tokio::time::sleep(delay).await,
            Verdict::Deliver => {}
        }
        lock(&self.rafts)
            .get(&target)
            .cloned()
            .ok_or_else(|| Unreachable::from_string(format!("node {target} is down")))
    }

    /// The running node `target`, for replication: refused while it awaits consent.
    async fn reach_for_replication(
        &self,
        from: NodeId,
        target: NodeId,
    ) -> Result<SimRaft, Unreachable<SimTypeConfig>> {
        self.reach_unless(from, target, &self.awaiting_consent, "waits for consent")
            .await
    }

    /// The running node `target`, for a vote by a candidate whose last log id is
    /// `candidate_last`: refused while it catches up, unless that reaches its vote floor
    /// (`RepairState::refuses_vote_for`).
    async fn reach_for_vote(
        &self,
        from: NodeId,
        target: NodeId,
        candidate_last: Option<&LogIdOf<SimTypeConfig>>,
    ) -> Result<SimRaft, Unreachable<SimTypeConfig>> {
        let raft = self.reach(from, target).await?;
        if !lock(&self.refusing_votes).contains(&target) {
            return Ok(raft);
        }
        match lock(&self.vote_floors).get(&target) {
            Some(floor) if candidate_last >= Some(floor) => {
                *lock(&self.floor_votes) += 1;
                Ok(raft)
            }
            _ => Err(Unreachable::from_string(format!(
                "node {target} catches up before it votes"
            ))),
        }
    }

    /// The running node `target`, unless it is in `refusing` (then it answers `why`).
    async fn reach_unless(
        &self,
        from: NodeId,
        target: NodeId,
        refusing: &Mutex<BTreeSet<NodeId>>,
        why: &str,
    ) -> Result<SimRaft, Unreachable<SimTypeConfig>> {
        let raft = self.reach(from, target).await?;
        if lock(refusing).contains(&target) {
            return Err(Unreachable::from_string(format!("node {target} {why}")));
        }
        Ok(raft)
    }
}

/// Node `from`'s links to the others.
pub(crate) struct SimNetworkFactory {
    pub(crate) from: NodeId,
    pub(crate) network: Arc<SimNetwork>,
}

impl RaftNetworkFactory<SimTypeConfig> for SimNetworkFactory {
    type Network = SimLink;

    async fn new_client(&mut self, target: NodeId, _node: &NodeAddr) -> SimLink {
        SimLink {
            from: self.from,
            target,
            network: self.network.clone(),
        }
    }
}

/// The link from one node to another.
pub(crate) struct SimLink {
    from: NodeId,
    target: NodeId,
    network: Arc<SimNetwork>,
}

fn network_error(error: &(impl std::error::Error + 'static)) -> RPCError<SimTypeConfig> {
    RPCError::Network(NetworkError::new(error))
}

impl RaftNetworkV2<SimTypeConfig> for SimLink {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<SimTypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<SimTypeConfig>, RPCError<SimTypeConfig>> {
        let raft = self
            .network
            .reach_for_replication(self.from, self.target)
            .await?;
        raft.append_entries(rpc)
            .await
            .map_err(|e| network_error(&e))
    }

    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<
        's,
        Result<
            BoxStream<'s, Result<StreamAppendResult<SimTypeConfig>, RPCError<SimTypeConfig>>>,
            RPCError<SimTypeConfig>,
        >,
    >
    where
        S: Stream<Item = AppendEntriesRequest<SimTypeConfig>> + Send + Unpin + 'static,
    {
        stream_append_sequential(self, until_stalled(input), option)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<SimTypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<SimTypeConfig>, RPCError<SimTypeConfig>> {
        let raft = self
            .network
            .reach_for_vote(self.from, self.target, rpc.last_log_id.as_ref())
            .await?;
        raft.vote(rpc).await.map_err(|e| network_error(&e))
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<SimTypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<SimTypeConfig>, RPCError<SimTypeConfig>> {
        let raft = self
            .network
            .reach_for_vote(self.from, self.target, rpc.last_log_id.as_ref())
            .await?;
        raft.pre_vote(rpc).await.map_err(|e| network_error(&e))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<SimTypeConfig>, StreamingError<SimTypeConfig>> {
        let raft = self
            .network
            .reach_for_replication(self.from, self.target)
            .await?;
        let installed = raft
            .install_full_snapshot(vote, snapshot)
            .await
            .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
        *lock(&self.network.snapshots_installed) += 1;
        Ok(installed)
    }
}
