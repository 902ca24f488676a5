//! `mqadmin node-add`, `node-remove` and `node-replace`: online membership changes of a
//! broker group, sent to its leader. A change that would remove the leader first hands
//! leadership to a voter that stays, since a leader does not remove itself.

use std::collections::BTreeMap;

use rocketraft_proto::broker as broker_pb;
use serde::Serialize;

use crate::admin::Admin;
use crate::admin::AdminError;

/// What a membership change left, and how long it took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MembershipChanged {
    /// The voters after the change: node id -> address.
    pub voters: BTreeMap<u64, String>,
    /// The added node's catch-up as a learner.
    pub catch_up_ms: u64,
    /// The membership change itself, once the node had caught up.
    pub change_ms: u64,
    /// The node that led when the change was made.
    pub leader_id: u64,
}

impl Admin {
    /// Adds node `add` (id, address; it runs already with `bootstrap = false`) to `group` as
    /// a voter once it caught up, and removes the nodes in `remove`, as one change.
    pub async fn change_membership(
        &self,
        group: &str,
        add: Option<(u64, String)>,
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
        let (add_node_id, add_addr) = add.unwrap_or_default();
        let request = broker_pb::ChangeMembershipRequest {
            add_node_id,
            add_addr,
            remove_node_ids: remove.to_vec(),
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
