//! `GET_BROKER_RUNTIME_INFO`: what `mqadmin clusterList` and the dashboard's cluster page show
//! of each broker node (RocketMQ's `KVTable`), from this node's own status: its rates, its
//! totals, its CommitLog and disk, and its Raft role and term.
//!
//! Invariant: every key `clusterList` parses is present, so it never fails on a missing one.
//! Totals count from the node's start: the day-boundary totals RocketMQ keeps
//! (`msg*TotalYesterdayMorning`, `msg*TotalTodayMorning`) are 0, so a tool's "today" column
//! shows the messages since the start. Thread-pool queue sizes and waits are 0: a node has no
//! such queues (its requests run as tasks).

use std::collections::BTreeMap;

use rocketraft_proto::broker as pb;
use serde::Serialize;

use super::Answered;
use super::BrokerHandler;
use super::json_reply;
use crate::command::RemotingCommand;

/// `KVTable`.
#[derive(Serialize)]
struct KvTable {
    table: BTreeMap<&'static str, String>,
}

impl BrokerHandler {
    pub(super) async fn runtime_info(&self, request: &RemotingCommand) -> Answered {
        let status = self
            .local_node()
            .await
            .map_err(|error| Box::new(RemotingCommand::system_error(request, error)))?
            .node_status(pb::NodeStatusRequest {})
            .await
            .map_err(|status| Box::new(super::status_reply(request, &status)))?
            .into_inner();
        json_reply(
            request,
            &KvTable {
                table: runtime_table(&status),
            },
        )
    }
}

/// The runtime info keys of a node with `status`.
fn runtime_table(status: &pb::NodeStatusResponse) -> BTreeMap<&'static str, String> {
    let rates = |per_second: &[f64]| {
        per_second
            .iter()
            .map(|rate| format!("{rate:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let zero = || "0".to_owned();
    BTreeMap::from([
        (
            "brokerVersionDesc",
            format!("rocketraft {}", env!("CARGO_PKG_VERSION")),
        ),
        ("brokerVersion", crate::BROKER_VERSION.to_string()),
        ("putTps", rates(&status.stored_per_second)),
        ("getTransferedTps", rates(&status.served_per_second)),
        ("msgPutTotalTodayNow", status.messages_stored.to_string()),
        ("msgGetTotalTodayNow", status.messages_served.to_string()),
        ("msgPutTotalTodayMorning", zero()),
        ("msgPutTotalYesterdayMorning", zero()),
        ("msgGetTotalTodayMorning", zero()),
        ("msgGetTotalYesterdayMorning", zero()),
        ("sendThreadPoolQueueSize", zero()),
        ("pullThreadPoolQueueSize", zero()),
        ("sendThreadPoolQueueHeadWaitTimeMills", zero()),
        ("pullThreadPoolQueueHeadWaitTimeMills", zero()),
        ("pageCacheLockTimeMills", zero()),
        (
            "earliestMessageTimeStamp",
            status.earliest_store_timestamp_ms.to_string(),
        ),
        (
            "commitLogMinOffset",
            status.commit_log_min_offset.to_string(),
        ),
        (
            "commitLogMaxOffset",
            status.commit_log_max_offset.to_string(),
        ),
        ("commitLogDiskRatio", status.disk_used_ratio.to_string()),
        ("raftRole", status.role.clone()),
        ("raftTerm", status.term.to_string()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_three_windows_and_totals_count_from_the_start() {
        let status = pb::NodeStatusResponse {
            role: "leader".into(),
            term: 4,
            messages_stored: 1200,
            messages_served: 300,
            stored_per_second: vec![10.0, 2.5, 1.0 / 3.0],
            served_per_second: vec![0.0, 0.0, 0.0],
            disk_used_ratio: 0.25,
            ..pb::NodeStatusResponse::default()
        };
        let table = runtime_table(&status);
        assert_eq!(table["putTps"], "10.00 2.50 0.33");
        assert_eq!(table["getTransferedTps"], "0.00 0.00 0.00");
        assert_eq!(table["msgPutTotalTodayNow"], "1200");
        assert_eq!(table["msgPutTotalTodayMorning"], "0");
        assert_eq!(table["commitLogDiskRatio"], "0.25");
        assert_eq!(table["raftRole"], "leader");
        assert!(table["brokerVersionDesc"].starts_with("rocketraft "));
    }
}
