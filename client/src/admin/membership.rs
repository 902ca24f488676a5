//! `mqadmin node-add`, `node-remove` and `node-replace`: online membership changes of a
//! broker group, sent to its leader. A change that would remove the leader first hands
//! leadership to a voter that stays, since a leader does not remove itself.

use std::collections::BTreeMap;

use rocketraft_proto::broker as broker_pb;
use serde::Serialize;

use crate::admin::Admin;
use crate::admin::AdminError;

/// A node to add: it runs already, with `bootstrap = false`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNode {
    pub id: u64,
    /// Its broker API address.
    pub addr: String,
    /// Its Raft service address, if it has a `raft_listen`; else Raft is at `addr`.
    pub raft_addr: Option<String>,
}

/// What a membership change left, and how long it took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MembershipChanged {
    /// The voters after the change: node id -> broker API address.
    pub voters: BTreeMap<u64, String>,
    /// The added node's catch-up as a learner.
    pub catch_up_ms: u64,
    /// The membership change itself, once the node had caught up.
    pub change_ms: u64,
    /// The node that led when the change was made.
    pub leader_id: u64,
}

impl Admin {
    /// Adds node `add` to `group` as a voter once it caught up, and removes the nodes in
    /// `remove`, as one change.
    pub async fn change_membership(
        &self,
        group: &str,
        add: Option<NewNode>,
        remove: &[u64],
    ) -> Result<MembershipChanged, AdminError> {
        let refused = |status| AdminError::Refused {
            group: group.to_owned(),
            status,
        };
        let mut leader = self.group_leader(group).await?;
        let mut status = leader
            .node_status(broker_pb::NodeStatusRequest {})
            .await
            .map_err(refused)?
            .into_inner();
        if remove.contains(&status.node_id) {
            let staying = status
                .voters
                .keys()
                .copied()
                .find(|id| !remove.contains(id))
                .ok_or_else(|| {
                    refused(tonic::Status::invalid_argument(
                        "the change removes every voter of the group",
                    ))
                })?;
            tracing::info!(
                from = status.node_id,
                to = staying,
                "the leader is to be removed: transferring leadership first"
            );
            self.transfer_leader(group, staying).await?;
            leader = self.group_leader(group).await?;
            status = leader
                .node_status(broker_pb::NodeStatusRequest {})
                .await
                .map_err(refused)?
                .into_inner();
        }
        let request = match add {
            Some(node) => broker_pb::ChangeMembershipRequest {
                add_node_id: node.id,
                add_addr: node.addr,
                add_raft_addr: node.raft_addr.unwrap_or_default(),
                remove_node_ids: remove.to_vec(),
            },
            None => broker_pb::ChangeMembershipRequest {
                remove_node_ids: remove.to_vec(),
                ..Default::default()
            },
        };
        let response = leader
            .change_membership(self.admin_call(request))
            .await
            .map_err(refused)?
            .into_inner();
        Ok(MembershipChanged {
            voters: response.voters.into_iter().collect(),
            catch_up_ms: response.catch_up_ms,
            change_ms: response.change_ms,
            leader_id: status.node_id,
        })
    }
}
