//! `NodeStatus`: this node's view of its group, for operators, tests and benchmarks.

use openraft::ServerState;
use openraft::async_runtime::watch::WatchReceiver;
use rocketraft_proto::broker as pb;

use crate::service::BrokerService;

impl BrokerService {
    pub(super) fn handle_node_status(&self) -> pb::NodeStatusResponse {
        // Clone at once: the metrics guard must not be held (it blocks the Raft core).
        let metrics = self.raft.metrics().borrow_watched().clone();
        let leader_addr = metrics
            .current_leader
            .and_then(|leader| {
                metrics
                    .membership_config
                    .get_node(&leader)
                    .map(|node| node.addr.clone())
            })
            .unwrap_or_default();
        let role = match metrics.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        };
        let store = self.group.store();
        pb::NodeStatusResponse {
            node_id: metrics.id,
            group: self.group_name.clone(),
            role: role.to_owned(),
            leader_id: metrics.current_leader,
            leader_addr,
            term: metrics.current_term,
            last_applied_index: metrics.last_applied.map(|log_id| log_id.index),
            last_log_index: metrics.last_log_index,
            commit_log_min_offset: store.commit_log_min_offset(),
            commit_log_max_offset: store.commit_log_max_offset(),
            last_purged_index: metrics.purged.map(|log_id| log_id.index),
            snapshot_index: metrics.snapshot.map(|log_id| log_id.index),
        }
    }
}
