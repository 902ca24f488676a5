//! Starting openraft for a broker node: the settings a broker needs,
//! founding a new group, and letting a node with a replaced disk rejoin.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::SnapshotPolicy;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::errors::AllowNextRevertError;
use openraft::errors::Fatal;
use openraft::errors::InitializeError;
use openraft::errors::RaftError;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::raft::control::role::leader_ready;
use crate::raft::log::store::LogStore;
use crate::raft::transport::faults::FaultPlan;
use crate::raft::transport::network::NetworkFactory;
use crate::raft::transport::node_addr::NodeAddr;
use crate::raft::types::LogId;
use crate::raft::types::NodeId;
use crate::raft::types::Raft;
use crate::raft::types::TypeConfig;
use crate::state_machine::StateMachine;
use crate::tls::PeerConnector;

/// How long [`allow_empty_rejoin`] waits for a new leader to apply an entry of its term.
const LEADER_READY_WAIT: Duration = Duration::from_secs(1);

/// Why Raft could not be started, a group founded, or a node let back in.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("invalid raft settings")]
    Config(#[from] openraft::ConfigError),
    #[error("raft stopped")]
    Stopped(#[from] Fatal<TypeConfig>),
    #[error("founding the group failed")]
    Initialize(#[from] RaftError<TypeConfig, InitializeError<TypeConfig>>),
    #[error("node {node} may not rejoin with a shorter log")]
    Rejoin {
        node: NodeId,
        #[source]
        source: AllowNextRevertError<TypeConfig>,
    },
}

/// Starts Raft over the node's opened log and state machine; `may_elect` false keeps the node
/// from standing for election until `runtime_config().elect(true)`; once `stopped` is
/// cancelled, the node sends no more RPCs.
pub async fn start_raft(
    config: &BrokerConfig,
    log_store: LogStore,
    state_machine: StateMachine,
    faults: Option<Arc<FaultPlan>>,
    peers: PeerConnector,
    may_elect: bool,
    stopped: CancellationToken,
) -> Result<Raft, SetupError> {
    let raft_config = raft_config(config, may_elect)?;
    let network = NetworkFactory::new(
        config.node_id,
        config.store.commit_log_segment_bytes,
        faults,
        peers,
        stopped,
    );
    Raft::new(
        config.node_id,
        Arc::new(raft_config),
        network,
        log_store,
        state_machine,
    )
    .await
    .map_err(SetupError::from)
}

/// openraft settings for a broker.
fn raft_config(
    config: &BrokerConfig,
    may_elect: bool,
) -> Result<openraft::Config, openraft::ConfigError> {
    let timings = &config.raft;
    openraft_config(
        format!("{}/{}", config.cluster, config.group),
        (
            timings.heartbeat_interval_ms,
            timings.election_timeout_min_ms,
            timings.election_timeout_max_ms,
        ),
        may_elect,
    )
}

/// The openraft settings of a broker (and of the group simulation) with the given heartbeat
/// interval and election timeout bounds, in milliseconds.
pub fn openraft_config(
    cluster_name: String,
    (heartbeat_ms, election_min_ms, election_max_ms): (u64, u64, u64),
    may_elect: bool,
) -> Result<openraft::Config, openraft::ConfigError> {
    openraft::Config {
        cluster_name,
        heartbeat_interval: heartbeat_ms,
        election_timeout_min: election_min_ms,
        election_timeout_max: election_max_ms,
        enable_pre_vote: Some(true),
        enable_elect: may_elect,
        // A restarted node must win an election before it leads again.
        enable_leader_restore: Some(false),
        // Snapshots are taken and the log purged by retention, not by entry count.
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: u64::MAX,
        // A lagging follower catches up from the log while the log still has what it needs.
        replication_lag_threshold: 1 << 40,
        max_payload_entries: 1024,
        install_snapshot_timeout: 60_000,
        ..Default::default()
    }
    .validate()
}

/// Founds the group on its first start; a node that is already part of a group skips it.
pub async fn bootstrap(raft: &Raft, peers: &BTreeMap<NodeId, NodeAddr>) -> Result<(), SetupError> {
    let initialized = raft.is_initialized().await?;
    if initialized {
        return Ok(());
    }
    tracing::info!(?peers, "bootstrapping a new broker group");
    Ok(raft.initialize(peers.clone()).await?)
}

/// On the leader: lets the follower `node` come back with an empty log (its disk replaced),
/// to be rebuilt from the leader's log or snapshot. Without this, a follower whose log went
/// backwards is treated as a bug. Call it after stopping the node and before restarting it.
/// Returns this leader's last log index once it allowed it, and its last log id if it has
/// applied an entry of its own term within [`LEADER_READY_WAIT`] (so its last entry is of that
/// term and follows every entry of earlier terms). Not waiting longer matters: a leader
/// elected while most nodes wait for its consent cannot commit anything until it gave it.
pub async fn allow_empty_rejoin(raft: &Raft, node: NodeId) -> Result<Rejoin, SetupError> {
    raft.trigger()
        .allow_next_revert(&node, true)
        .await?
        .map_err(|source| SetupError::Rejoin { node, source })?;
    let ready = tokio::time::timeout(LEADER_READY_WAIT, leader_ready(raft)).await;
    Ok(Rejoin {
        last_log_index: raft.metrics().borrow_watched().last_log_index.unwrap_or(0),
        last_log_of_its_term: ready.ok().flatten(),
    })
}

/// What a leader answers when it let a node rejoin with a shorter log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejoin {
    pub last_log_index: u64,
    /// Its last log id, of its own term, if it was ready in time.
    pub last_log_of_its_term: Option<LogId>,
}
