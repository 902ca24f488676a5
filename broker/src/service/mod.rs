//! The broker API (proto `rocketraft.broker.Broker`): one file per RPC, this one wires them.

mod node_status;
mod read_consume_queue;
mod send;

use std::net::SocketAddr;
use std::sync::Arc;

use rocketraft_proto::broker as pb;
use tonic::Request;
use tonic::Response;
use tonic::Status;

use crate::error::BrokerError;
use crate::group_commit::GroupCommit;
use crate::group_state::GroupState;
use crate::raft::types::Raft;

pub struct BrokerService {
    raft: Raft,
    group: Arc<GroupState>,
    group_commit: GroupCommit,
    group_name: String,
    /// Stamped into every record as its store host.
    store_host: SocketAddr,
}

impl BrokerService {
    pub fn new(
        raft: Raft,
        group: Arc<GroupState>,
        group_name: String,
        store_host: SocketAddr,
    ) -> BrokerService {
        let group_commit = GroupCommit::start(raft.clone());
        BrokerService {
            raft,
            group,
            group_commit,
            group_name,
            store_host,
        }
    }

    /// Fails with `NOT_LEADER` (and the leader's address, if known) unless this node leads.
    fn ensure_leader(&self) -> Result<(), BrokerError> {
        self.raft
            .as_leader()
            .map(|_| ())
            .map_err(|forward| BrokerError::NotLeader {
                leader_addr: forward.leader_node.map(|node| node.addr),
            })
    }
}

#[tonic::async_trait]
impl pb::broker_server::Broker for BrokerService {
    async fn send(
        &self,
        request: Request<pb::SendRequest>,
    ) -> Result<Response<pb::SendResponse>, Status> {
        Ok(Response::new(self.handle_send(request.into_inner()).await?))
    }

    async fn node_status(
        &self,
        _request: Request<pb::NodeStatusRequest>,
    ) -> Result<Response<pb::NodeStatusResponse>, Status> {
        Ok(Response::new(self.handle_node_status()))
    }

    async fn read_consume_queue(
        &self,
        request: Request<pb::ReadConsumeQueueRequest>,
    ) -> Result<Response<pb::ReadConsumeQueueResponse>, Status> {
        Ok(Response::new(
            self.handle_read_consume_queue(request.into_inner())?,
        ))
    }
}
