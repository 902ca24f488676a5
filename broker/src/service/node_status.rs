//! `NodeStatus`: this node's view of its group, for operators, tests and benchmarks; and
//! `InjectFault`, the drill hook that cuts this node off from its group, or blackholes it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::raft::control::membership::members;
use crate::raft::control::role::raft_status;
use crate::raft::transport::node_addr::NodeAddr;
use crate::raft::types::NodeId;
use crate::service::BrokerService;

impl BrokerService {
    /// Isolates this node from its group's Raft traffic, blackholes it (nothing it is asked
    /// gets an answer), or heals it. Refused unless the node was started with
    /// `enable_fault_injection`.
    pub(super) fn handle_inject_fault(
        &self,
        isolate: bool,
        blackhole: bool,
    ) -> Result<(), BrokerError> {
        let Some(faults) = &self.fault_injection else {
            return Err(BrokerError::NoPermission(
                "fault injection is off on this node (enable_fault_injection = true, drills only)"
                    .into(),
            ));
        };
        let node_id = raft_status(&self.raft).node_id;
        if blackhole {
            tracing::warn!(
                node_id,
                "fault injection: blackholed (nothing it is asked is answered)"
            );
            faults.blackhole(node_id);
        } else if isolate {
            tracing::warn!(node_id, "fault injection: partitioned from the group");
            faults.isolate(node_id);
        } else {
            tracing::warn!(node_id, "fault injection: healed");
            faults.heal();
        }
        Ok(())
    }

    pub(super) fn handle_node_status(&self) -> pb::NodeStatusResponse {
        let status = raft_status(&self.raft);
        let (raft_log_repair_up_to, raft_log_repair) = self.repair.status();
        let store = self.group.store();
        let (voters, learners) = members(&self.raft);
        let api_addrs = |members: BTreeMap<NodeId, NodeAddr>| {
            members
                .into_iter()
                .map(|(id, addr)| (id, addr.api))
                .collect()
        };
        let (voters, learners) = (api_addrs(voters), api_addrs(learners));
        let throughput = self.metrics.throughput();
        let (messages_stored, messages_served) = throughput.totals();
        let rates = throughput.rates();
        let earliest_store_timestamp_ms = store
            .read_view(store.commit_log_min_offset())
            .map_or(0, |view| view.store_timestamp_ms());
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
            process_cpu_micros: rocketraft_domain::process::cpu_time().as_micros() as u64,
            process_id: std::process::id(),
            raft_log_repair_up_to,
            raft_log_repair,
            raft_log_after_power_loss: self.repair.after_power_loss(),
            pull_requests: self.pull_requests.load(Ordering::Relaxed),
            pulls_held: (self.pull_holds_max - self.pull_holds.available_permits()) as u64,
            scrub_passes: self.scrub.passes.load(Ordering::Relaxed),
            scrub_bytes_checked: self.scrub.bytes_checked.load(Ordering::Relaxed),
            scrub_records_repaired: self.scrub.records_repaired.load(Ordering::Relaxed),
            scrub_units_repaired: self.scrub.units_repaired.load(Ordering::Relaxed),
            scrub_index_repairs: self.scrub.index_repairs.load(Ordering::Relaxed),
            scrub_blocks_repaired: self.scrub.blocks_repaired.load(Ordering::Relaxed),
            scrub_unrepaired: self.scrub.unrepaired.load(Ordering::Relaxed),
            scrub_last_finding: self.scrub.last_finding(),
            disk_used_ratio: self.group.disk_used_ratio(),
            disk_full: self.group.disk_full(),
            voters,
            learners,
            messages_stored,
            messages_served,
            stored_per_second: rates.stored_per_s.to_vec(),
            served_per_second: rates.served_per_s.to_vec(),
            earliest_store_timestamp_ms,
        }
    }
}
