//! The broker API (proto `rocketraft.broker.Broker`): one file per RPC, this one wires them.

mod admin;
mod admin_reads;
pub use admin_reads::CONSUME_STATS_TOPICS_MAX;
pub mod blackhole;
mod consumers;
mod long_poll;
mod node_status;
mod offsets;
mod pull;
pub use pull::PULL_HOLDS_MAX_DEFAULT;
mod pop;
mod pulled;
mod query_messages;
mod queue_locks;
mod read_consume_queue;
mod search_offset;
mod send;
mod send_back;
mod system_topics;
mod transaction;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use rocketraft_domain::secrets::ADMIN_TOKEN_HEADER;
use rocketraft_proto::broker as pb;
use tonic::Request;
use tonic::Response;
use tonic::Status;

use crate::consumer_registry::ConsumerRegistry;
use crate::error::BrokerError;
use crate::group_commit::GroupCommit;
use crate::group_state::GroupState;
use crate::metrics::BrokerMetrics;
use crate::queue_locks::QueueLocks;
use crate::raft::log::repair::RepairState;
use crate::raft::transport::faults::FaultPlan;
use crate::raft::types::Raft;
use crate::schedule::delay_levels::DelayLevels;
use crate::schedule::service::ScheduleStatus;
use rocketraft_domain::clock::Clock;

/// What the broker API needs besides the group's Raft and state.
pub struct ServiceOptions {
    pub group_name: String,
    /// Stamped into every record as its store host.
    pub store_host: SocketAddr,
    /// Create an unknown topic on its first send instead of refusing it.
    pub auto_create_topic: bool,
    /// Create a consumer group's config on its first heartbeat.
    pub auto_create_group: bool,
    pub delay_levels: DelayLevels,
    /// How far ahead a timer message may be set.
    pub timer_max_delay: Duration,
    /// Live consumers, from heartbeats (leader only).
    pub consumers: Arc<ConsumerRegistry>,
    /// Queue locks of orderly consumers (leader only).
    pub queue_locks: Arc<QueueLocks>,
    /// Producers watching for transaction check-backs (leader only).
    pub transaction_checks: Arc<crate::transaction::checks::TransactionChecks>,
    /// Whether this node's schedule service runs.
    pub schedule: Arc<ScheduleStatus>,
    /// Pulls held open at once at most.
    pub pull_holds_max: usize,
    /// What the scrubber found and repaired, for `NodeStatus`.
    pub scrub: Arc<crate::scrub::ScrubStatus>,
    /// The token admin calls must carry, if one is configured.
    pub admin_token: Option<String>,
    /// Whether this node leads with a live quorum (held pulls end when it is cut off).
    pub leadership: tokio::sync::watch::Receiver<crate::raft::control::lease::Leadership>,
    /// The node's own fault plan, when `enable_fault_injection` is set (drills).
    pub fault_injection: Option<Arc<FaultPlan>>,
    /// The repair of this node's Raft log, for its status.
    pub repair: Arc<RepairState>,
    /// What the send, pull and commit paths count.
    pub metrics: Arc<BrokerMetrics>,
    /// The node's tasks: the service's own (group commit) are tracked with them.
    pub tasks: tokio_util::task::TaskTracker,
    /// The time store timestamps, deliver times, invisibility and locks are reckoned in.
    pub clock: Clock,
}

pub struct BrokerService {
    raft: Raft,
    group: Arc<GroupState>,
    group_commit: GroupCommit,
    group_name: String,
    store_host: SocketAddr,
    auto_create_topic: bool,
    auto_create_group: bool,
    delay_levels: DelayLevels,
    timer_max_delay: Duration,
    consumers: Arc<ConsumerRegistry>,
    queue_locks: Arc<QueueLocks>,
    transaction_checks: Arc<crate::transaction::checks::TransactionChecks>,
    schedule: Arc<ScheduleStatus>,
    fault_injection: Option<Arc<FaultPlan>>,
    repair: Arc<RepairState>,
    /// Pull requests received since the node started (`NodeStatus.pull_requests`).
    pull_requests: AtomicU64,
    /// One permit per pull held open (long polling), `pull_holds_max` in all.
    pull_holds: Arc<tokio::sync::Semaphore>,
    pull_holds_max: usize,
    scrub: Arc<crate::scrub::ScrubStatus>,
    admin_token: Option<String>,
    leadership: tokio::sync::watch::Receiver<crate::raft::control::lease::Leadership>,
    metrics: Arc<BrokerMetrics>,
    /// Pops of one group's queue take turns (`pop.rs`).
    pop_turns: crate::pop::turns::PopTurns,
    /// Where the next pop of any queue starts trying queues (`pop.rs`).
    pop_rotation: std::sync::atomic::AtomicUsize,
    clock: Clock,
}

impl BrokerService {
    pub fn new(raft: Raft, group: Arc<GroupState>, options: ServiceOptions) -> BrokerService {
        let group_commit = GroupCommit::start(raft.clone(), &options.tasks);
        BrokerService {
            raft,
            group,
            group_commit,
            group_name: options.group_name,
            store_host: options.store_host,
            auto_create_topic: options.auto_create_topic,
            auto_create_group: options.auto_create_group,
            delay_levels: options.delay_levels,
            timer_max_delay: options.timer_max_delay,
            consumers: options.consumers,
            queue_locks: options.queue_locks,
            transaction_checks: options.transaction_checks,
            schedule: options.schedule,
            fault_injection: options.fault_injection,
            repair: options.repair,
            metrics: options.metrics,
            pull_requests: AtomicU64::new(0),
            pull_holds: Arc::new(tokio::sync::Semaphore::new(options.pull_holds_max)),
            pull_holds_max: options.pull_holds_max,
            scrub: options.scrub,
            admin_token: options.admin_token,
            leadership: options.leadership,
            pop_turns: crate::pop::turns::PopTurns::default(),
            pop_rotation: std::sync::atomic::AtomicUsize::new(0),
            clock: options.clock,
        }
    }

    /// Fails with `NO_PERMISSION`, and logs who tried, unless `request` carries the admin
    /// token (when one is configured).
    fn require_admin<T>(
        &self,
        request: &Request<T>,
        call: &'static str,
    ) -> Result<(), BrokerError> {
        let Some(token) = &self.admin_token else {
            return Ok(());
        };
        if rocketraft_domain::secrets::carries(request, ADMIN_TOKEN_HEADER, token) {
            return Ok(());
        }
        tracing::warn!(
            call,
            peer = ?request.remote_addr(),
            "admin call refused: no or wrong admin token"
        );
        Err(BrokerError::NoPermission(format!(
            "{call} is an admin call: it needs this node's admin token ({ADMIN_TOKEN_HEADER})"
        )))
    }

    /// Fails with `NOT_LEADER` (and the leader's address, if known) unless this node leads.
    fn ensure_leader(&self) -> Result<(), BrokerError> {
        Ok(crate::raft::control::propose::ensure_leader(&self.raft)?)
    }

    /// Fails with `DISK_FULL` while retention finds this node's disk past `disk_full_ratio`:
    /// a message stored now could not be replicated or kept.
    fn ensure_disk_has_room(&self) -> Result<(), BrokerError> {
        if self.group.disk_full() {
            return Err(BrokerError::DiskFull);
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl pb::broker_server::Broker for BrokerService {
    async fn send(
        &self,
        request: Request<pb::SendRequest>,
    ) -> Result<Response<pb::SendResponse>, Status> {
        let peer = request.remote_addr();
        Ok(Response::new(
            self.handle_send(request.into_inner(), peer).await?,
        ))
    }

    async fn node_status(
        &self,
        _request: Request<pb::NodeStatusRequest>,
    ) -> Result<Response<pb::NodeStatusResponse>, Status> {
        Ok(Response::new(self.handle_node_status()))
    }

    async fn create_topic(
        &self,
        request: Request<pb::CreateTopicRequest>,
    ) -> Result<Response<pb::CreateTopicResponse>, Status> {
        self.require_admin(&request, "CreateTopic")?;
        self.handle_create_topic(request.into_inner()).await?;
        Ok(Response::new(pb::CreateTopicResponse {}))
    }

    async fn delete_topic(
        &self,
        request: Request<pb::DeleteTopicRequest>,
    ) -> Result<Response<pb::DeleteTopicResponse>, Status> {
        self.require_admin(&request, "DeleteTopic")?;
        self.handle_delete_topic(request.into_inner()).await?;
        Ok(Response::new(pb::DeleteTopicResponse {}))
    }

    async fn upsert_group(
        &self,
        request: Request<pb::UpsertGroupRequest>,
    ) -> Result<Response<pb::UpsertGroupResponse>, Status> {
        self.require_admin(&request, "UpsertGroup")?;
        self.handle_upsert_group(request.into_inner()).await?;
        Ok(Response::new(pb::UpsertGroupResponse {}))
    }

    async fn query_group(
        &self,
        request: Request<pb::QueryGroupRequest>,
    ) -> Result<Response<pb::QueryGroupResponse>, Status> {
        let settings = self.handle_query_group(&request.into_inner().group).await?;
        Ok(Response::new(pb::QueryGroupResponse { settings }))
    }

    async fn prepare_node_replacement(
        &self,
        request: Request<pb::PrepareNodeReplacementRequest>,
    ) -> Result<Response<pb::PrepareNodeReplacementResponse>, Status> {
        self.require_admin(&request, "PrepareNodeReplacement")?;
        let rejoin = self
            .handle_prepare_node_replacement(request.into_inner().node_id)
            .await?;
        let response = match rejoin.last_log_of_its_term {
            Some(last_log) => pb::PrepareNodeReplacementResponse {
                leader_last_log_index: last_log.index,
                leader_last_log_term: last_log.committed_leader_id().term,
            },
            None => pb::PrepareNodeReplacementResponse {
                leader_last_log_index: rejoin.last_log_index,
                leader_last_log_term: 0,
            },
        };
        Ok(Response::new(response))
    }

    async fn pull(
        &self,
        request: Request<pb::PullRequest>,
    ) -> Result<Response<pb::PullResponse>, Status> {
        Ok(Response::new(self.handle_pull(request.into_inner()).await?))
    }

    async fn pop(
        &self,
        request: Request<pb::PopRequest>,
    ) -> Result<Response<pb::PopResponse>, Status> {
        Ok(Response::new(self.handle_pop(request.into_inner()).await?))
    }

    async fn change_popped(
        &self,
        request: Request<pb::ChangePoppedRequest>,
    ) -> Result<Response<pb::ChangePoppedResponse>, Status> {
        Ok(Response::new(
            self.handle_change_popped(request.into_inner()).await?,
        ))
    }

    async fn commit_offsets(
        &self,
        request: Request<pb::CommitOffsetsRequest>,
    ) -> Result<Response<pb::CommitOffsetsResponse>, Status> {
        self.handle_commit_offsets(request.into_inner()).await?;
        Ok(Response::new(pb::CommitOffsetsResponse {}))
    }

    async fn query_offset(
        &self,
        request: Request<pb::QueryOffsetRequest>,
    ) -> Result<Response<pb::QueryOffsetResponse>, Status> {
        let offset = self.handle_query_offset(request.into_inner()).await?;
        Ok(Response::new(pb::QueryOffsetResponse { offset }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let peer = request.remote_addr();
        self.handle_heartbeat(request.into_inner(), peer).await?;
        Ok(Response::new(pb::HeartbeatResponse {}))
    }

    async fn list_consumers(
        &self,
        request: Request<pb::ListConsumersRequest>,
    ) -> Result<Response<pb::ListConsumersResponse>, Status> {
        Ok(Response::new(
            self.handle_list_consumers(&request.into_inner().group)?,
        ))
    }

    async fn unregister_consumer(
        &self,
        request: Request<pb::UnregisterConsumerRequest>,
    ) -> Result<Response<pb::UnregisterConsumerResponse>, Status> {
        self.handle_unregister_consumer(request.into_inner())?;
        Ok(Response::new(pb::UnregisterConsumerResponse {}))
    }

    async fn lock_queues(
        &self,
        request: Request<pb::LockQueuesRequest>,
    ) -> Result<Response<pb::LockQueuesResponse>, Status> {
        Ok(Response::new(
            self.handle_lock_queues(request.into_inner())?,
        ))
    }

    async fn unlock_queues(
        &self,
        request: Request<pb::UnlockQueuesRequest>,
    ) -> Result<Response<pb::UnlockQueuesResponse>, Status> {
        self.handle_unlock_queues(request.into_inner())?;
        Ok(Response::new(pb::UnlockQueuesResponse {}))
    }

    type WatchConsumersStream = consumers::MembershipStream;
    type WatchTransactionChecksStream = transaction::CheckStream;

    async fn end_transaction(
        &self,
        request: Request<pb::EndTransactionRequest>,
    ) -> Result<Response<pb::EndTransactionResponse>, Status> {
        Ok(Response::new(
            self.handle_end_transaction(request.into_inner()).await?,
        ))
    }

    async fn end_transactions(
        &self,
        request: Request<pb::EndTransactionsRequest>,
    ) -> Result<Response<pb::EndTransactionsResponse>, Status> {
        Ok(Response::new(
            self.handle_end_transactions(request.into_inner()).await?,
        ))
    }

    async fn watch_transaction_checks(
        &self,
        request: Request<pb::WatchTransactionChecksRequest>,
    ) -> Result<Response<Self::WatchTransactionChecksStream>, Status> {
        Ok(Response::new(
            self.handle_watch_transaction_checks(request.into_inner())?,
        ))
    }

    async fn watch_consumers(
        &self,
        request: Request<pb::WatchConsumersRequest>,
    ) -> Result<Response<Self::WatchConsumersStream>, Status> {
        Ok(Response::new(
            self.handle_watch_consumers(request.into_inner().group)?,
        ))
    }

    async fn search_offset(
        &self,
        request: Request<pb::SearchOffsetRequest>,
    ) -> Result<Response<pb::SearchOffsetResponse>, Status> {
        let offset = self.handle_search_offset(request.into_inner())?;
        Ok(Response::new(pb::SearchOffsetResponse { offset }))
    }

    async fn send_message_back(
        &self,
        request: Request<pb::SendMessageBackRequest>,
    ) -> Result<Response<pb::SendMessageBackResponse>, Status> {
        Ok(Response::new(
            self.handle_send_message_back(request.into_inner()).await?,
        ))
    }

    async fn transfer_leader(
        &self,
        request: Request<pb::TransferLeaderRequest>,
    ) -> Result<Response<pb::TransferLeaderResponse>, Status> {
        self.require_admin(&request, "TransferLeader")?;
        Ok(Response::new(
            self.handle_transfer_leader(request.into_inner().to_node_id)
                .await?,
        ))
    }

    async fn change_membership(
        &self,
        request: Request<pb::ChangeMembershipRequest>,
    ) -> Result<Response<pb::ChangeMembershipResponse>, Status> {
        self.require_admin(&request, "ChangeMembership")?;
        Ok(Response::new(
            self.handle_change_membership(request.into_inner()).await?,
        ))
    }

    async fn inject_fault(
        &self,
        request: Request<pb::InjectFaultRequest>,
    ) -> Result<Response<pb::InjectFaultResponse>, Status> {
        self.require_admin(&request, "InjectFault")?;
        let fault = request.into_inner();
        self.handle_inject_fault(fault.isolate, fault.blackhole)?;
        Ok(Response::new(pb::InjectFaultResponse {}))
    }

    async fn query_messages(
        &self,
        request: Request<pb::QueryMessagesRequest>,
    ) -> Result<Response<pb::QueryMessagesResponse>, Status> {
        Ok(Response::new(
            self.handle_query_messages(&request.into_inner())?,
        ))
    }

    async fn read_consume_queue(
        &self,
        request: Request<pb::ReadConsumeQueueRequest>,
    ) -> Result<Response<pb::ReadConsumeQueueResponse>, Status> {
        Ok(Response::new(
            self.handle_read_consume_queue(request.into_inner())?,
        ))
    }

    async fn list_topics(
        &self,
        _request: Request<pb::ListTopicsRequest>,
    ) -> Result<Response<pb::ListTopicsResponse>, Status> {
        Ok(Response::new(self.handle_list_topics().await?))
    }

    async fn topic_stats(
        &self,
        request: Request<pb::TopicStatsRequest>,
    ) -> Result<Response<pb::TopicStatsResponse>, Status> {
        Ok(Response::new(
            self.handle_topic_stats(&request.into_inner().topic).await?,
        ))
    }

    async fn consume_stats(
        &self,
        request: Request<pb::ConsumeStatsRequest>,
    ) -> Result<Response<pb::ConsumeStatsResponse>, Status> {
        Ok(Response::new(
            self.handle_consume_stats(&request.into_inner()).await?,
        ))
    }

    async fn topic_consumers(
        &self,
        request: Request<pb::TopicConsumersRequest>,
    ) -> Result<Response<pb::TopicConsumersResponse>, Status> {
        Ok(Response::new(
            self.handle_topic_consumers(&request.into_inner().topic)
                .await?,
        ))
    }

    async fn view_message(
        &self,
        request: Request<pb::ViewMessageRequest>,
    ) -> Result<Response<pb::ViewMessageResponse>, Status> {
        Ok(Response::new(self.handle_view_message(
            request.into_inner().commit_log_offset,
        )?))
    }
}
