//! `NodeStatus`: this node's view of its group, for operators, tests and benchmarks.

use rocketraft_proto::broker as pb;

use crate::raft::role::raft_status;
use crate::service::BrokerService;

impl BrokerService {
    pub(super) fn handle_node_status(&self) -> pb::NodeStatusResponse {
        let status = raft_status(&self.raft);
        let store = self.group.store();
        pb::NodeStatusResponse {
            node_id: status.node_id,
            group: self.group_name.clone(),
            role: status.role.to_owned(),
            leader_id: status.leader_id,
            leader_addr: status.leader_addr,
            term: status.term,
            last_applied_index: status.last_applied_index,
            last_log_index: status.last_log_index,
            commit_log_min_offset: store.commit_log_min_offset(),
            commit_log_max_offset: store.commit_log_max_offset(),
            last_purged_index: status.last_purged_index,
            snapshot_index: status.snapshot_index,
            schedule_service_running: self.schedule.is_running(),
        }
    }
}
