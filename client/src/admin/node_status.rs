//! `mqadmin broker-status`: what every node of a broker group reports about itself (role,
//! term, log and CommitLog extent, disk, repair and scrub findings), asked of each node
//! directly, so a node that cannot be reached is reported as such rather than hidden.

use std::time::Duration;

use rocketraft_proto::broker as broker_pb;

use crate::admin::Admin;
use crate::admin::AdminError;

/// How long one node may take to report its status.
const NODE_STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// One node's answer, or why there is none.
#[derive(Debug, Clone)]
pub struct NodeReport {
    pub node_id: u64,
    pub addr: String,
    pub status: Result<broker_pb::NodeStatusResponse, String>,
}

impl Admin {
    /// The status of every node the nameservers list for broker group `group`, by node id.
    pub async fn node_statuses(&self, group: &str) -> Result<Vec<NodeReport>, AdminError> {
        let route = self.group_route(group).await?;
        let nodes = self.group_client(&route);
        let asked = route.nodes.iter().map(|(node_id, addr)| {
            let nodes = &nodes;
            async move {
                let status = match addr.parse() {
                    Err(_) => Err(format!("{addr:?} is not an ip:port address")),
                    Ok(addr) => {
                        match tokio::time::timeout(NODE_STATUS_TIMEOUT, nodes.node_status(addr))
                            .await
                        {
                            Ok(answered) => answered.map_err(|error| error.to_string()),
                            Err(_) => Err(format!("no answer within {NODE_STATUS_TIMEOUT:?}")),
                        }
                    }
                };
                NodeReport {
                    node_id: *node_id,
                    addr: addr.clone(),
                    status,
                }
            }
        });
        let mut reports = futures::future::join_all(asked).await;
        reports.sort_by_key(|report| report.node_id);
        Ok(reports)
    }
}
