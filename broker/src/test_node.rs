//! A one-node broker group in this process, for unit tests that need a real Raft: real
//! files in a temporary directory, real gRPC on a 127.0.0.1 port the OS picks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;

use crate::config::BrokerConfig;
use crate::config::COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER;
use crate::node::BrokerNode;
use crate::node::Listeners;
use crate::node::NodeOptions;
use crate::raft::control::role::leader_ready;
use crate::raft::transport::faults::FaultPlan;

/// The founding node leads within this (its election timeout is 200–400 ms).
const LEADS_WITHIN: Duration = Duration::from_secs(5);

/// A one-node group (node 1) that leads, and its fault plan.
pub(crate) struct OneNode {
    pub(crate) node: BrokerNode,
    pub(crate) faults: Arc<FaultPlan>,
    pub(crate) dir: TempDir,
}

impl OneNode {
    pub(crate) async fn start() -> OneNode {
        let dir = tempfile::tempdir().expect("tempdir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let config = BrokerConfig::from_toml(&format!(
            r#"
            group = "broker-a"
            node_id = 1
            listen = "{addr}"
            peers = {{ 1 = "{addr}" }}
            data_dir = "{dir}"
            bootstrap = true
            raft = {{ heartbeat_interval_ms = 50, election_timeout_min_ms = 200, election_timeout_max_ms = 400 }}
            store = {{ commit_log_segment_bytes = {segment}, consume_queue_units_per_segment = 1024, raft_log_segment_bytes = 1048576, index_entries_per_file = 1024 }}
            "#,
            dir = dir.path().display(),
            segment = COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER,
        ))
        .expect("config");
        let faults = Arc::new(FaultPlan::new(7));
        let node = BrokerNode::start_on(
            config,
            Listeners {
                api: listener,
                raft: None,
            },
            NodeOptions {
                faults: Some(faults.clone()),
                ..NodeOptions::default()
            },
        )
        .await
        .expect("start");
        tokio::time::timeout(LEADS_WITHIN, leader_ready(node.raft()))
            .await
            .expect("the founding node leads in time")
            .expect("raft running");
        OneNode { node, faults, dir }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.node.addr()
    }
}
