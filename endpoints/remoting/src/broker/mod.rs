//! A broker node's 4.x face: what 4.x producers and consumers ask a broker, served on the
//! node's own port and carried to its group through the SDK. Requests go to the group's
//! leader, found and followed as the SDK follows it, so a 4.x client that still names a former
//! leader as broker id 0 (its route is refreshed every 30 s) is served through that node.
//!
//! Served so far: sends (`SEND_MESSAGE`, `SEND_MESSAGE_V2`, `SEND_BATCH_MESSAGE`), topic
//! creation, the client registry (`HEART_BEAT`, `UNREGISTER_CLIENT`,
//! `GET_CONSUMER_LIST_BY_GROUP`), offsets (`QUERY_CONSUMER_OFFSET`, `UPDATE_CONSUMER_OFFSET`,
//! `GET_MAX_OFFSET`, `GET_MIN_OFFSET`, `SEARCH_OFFSET_BY_TIMESTAMP`), pulls (`PULL_MESSAGE`),
//! hand-backs (`CONSUMER_SEND_MSG_BACK`), orderly queue locks (`LOCK_BATCH_MQ`,
//! `UNLOCK_BATCH_MQ`), transactions (`END_TRANSACTION`), finding messages
//! (`VIEW_MESSAGE_BY_ID`, `QUERY_MESSAGE`) and what admin tools read (`GET_ALL_TOPIC_CONFIG`,
//! `GET_TOPIC_STATS_INFO`, `GET_CONSUME_STATS`, `GET_CONSUMER_CONNECTION_LIST`,
//! `GET_PRODUCER_CONNECTION_LIST`, `QUERY_TOPIC_CONSUME_BY_WHO`, and this node's own
//! `GET_BROKER_RUNTIME_INFO`). Any other code is answered
//! `REQUEST_CODE_NOT_SUPPORTED`. The broker's own requests to its clients
//! (`NOTIFY_CONSUMER_IDS_CHANGED`, `CHECK_TRANSACTION_STATE`) go down the connections that
//! heartbeat their groups.
//!
//! Invariant: every answer but a pull's, a message lookup's or the runtime info comes from the
//! group's leader at the time of the request; those read this node's own committed data and
//! status. The only state kept here is what
//! heartbeats through this node said: subscriptions (which the leader's registry backs) and
//! the connections of each group.

mod clients;
mod connections;
mod consumer_notices;
mod messages;
mod offsets;
mod peer_groups;
mod pull;
mod queue_locks;
mod runtime_info;
mod send;
mod send_back;
mod stats;
mod subscriptions;
mod topics;
mod transactions;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rocketraft_client::brokers::Brokers;
use rocketraft_client::brokers::CallError;
use rocketraft_client::clients::BrokerClients;
use rocketraft_client::connector::Connector;
use rocketraft_client::group::GroupError;
use rocketraft_client::route::RouteCache;
use rocketraft_client::send_lanes::SendLanes;
use rocketraft_proto::broker as pb;
use rocketraft_proto::broker::broker_client::BrokerClient;
use rocketraft_proto::common::Message;
use rocketraft_proto::common::ResponseCode;
use tonic::transport::Channel;

use crate::codes::request;
use crate::codes::response;
use crate::command::RemotingCommand;
use crate::connection::Handler;
use crate::connection::Peer;
use crate::ext::ExtFieldError;
use crate::ext::ExtFields;

/// How long a request may take to reach the group's leader and be answered, through leader
/// changes: a 4.x client's default send timeout.
pub const LEADER_CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// Answers 4.x clients' broker requests for one node of a broker group.
pub struct BrokerHandler {
    group: String,
    brokers: Arc<Brokers>,
    /// Concurrent single sends to one topic share a request to the leader.
    lanes: SendLanes,
    /// The broker API of the node this handler serves on: pulls read its own data.
    own: SocketAddr,
    local: BrokerClients,
    subscriptions: subscriptions::Subscriptions,
    /// The 4.x connections of each consumer group, and of each producer group.
    consumers: Arc<peer_groups::PeerGroups>,
    producers: Arc<peer_groups::PeerGroups>,
}

impl BrokerHandler {
    /// A handler for the node at `own` of the broker group `group`, whose nodes serve the
    /// broker API on `nodes`, reached through `connector`.
    pub fn new(
        group: String,
        own: SocketAddr,
        nodes: Vec<SocketAddr>,
        connector: Connector,
    ) -> BrokerHandler {
        // The group is known by its nodes; no topic route is ever asked for.
        let routes = RouteCache::with_connector(Vec::new(), Duration::ZERO, connector.clone());
        let local = BrokerClients::new(connector.clone());
        let brokers = Arc::new(Brokers::new(routes, connector));
        brokers.know_group(&group, nodes);
        BrokerHandler {
            group,
            lanes: SendLanes::new(brokers.clone()),
            brokers,
            own,
            local,
            subscriptions: subscriptions::Subscriptions::default(),
            consumers: Arc::default(),
            producers: Arc::default(),
        }
    }

    /// The broker API of this handler's own node.
    async fn local_node(&self) -> Result<BrokerClient<Channel>, GroupError> {
        self.local.get(self.own).await
    }

    /// Runs `call` on the group's leader (told whether it repeats an earlier attempt that may
    /// have taken effect), following leader changes for [`LEADER_CALL_TIMEOUT`]; a failure is
    /// the 4.x answer to `request` that says why ([`refused`]).
    async fn on_leader<T, F, Fut>(&self, request: &RemotingCommand, call: F) -> Answered<T>
    where
        F: Fn(BrokerClient<Channel>, bool) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.brokers
            .on_leader(&self.group, LEADER_CALL_TIMEOUT, |client, repeat| {
                let called = call(client, repeat);
                async move { called.await.map(tonic::Response::into_inner) }
            })
            .await
            .map_err(|error| Box::new(refused(request, &error)))
    }

    async fn send(&self, request: &RemotingCommand, peer: SocketAddr) -> Answered {
        let mut send = send::send_request(request, peer).map_err(|error| {
            Box::new(match error {
                send::SendRequestError::Field(error) => {
                    RemotingCommand::system_error(request, error)
                }
                error => RemotingCommand::response_to(
                    request,
                    response::MESSAGE_ILLEGAL,
                    Some(error.to_string()),
                ),
            })
        })?;
        if send.messages.len() == 1
            && let Some(message) = send.messages.pop()
        {
            return self.send_one(request, send, message).await;
        }
        let sent = self
            .on_leader(request, |mut client, repeat| {
                // A repeat may find the first attempt stored: the leader answers with it.
                let send = pb::SendRequest {
                    deduplicate: repeat,
                    ..send.clone()
                };
                async move { client.send(send).await }
            })
            .await?;
        Ok(send::send_reply(request, &sent.results))
    }

    /// A single message's send, through its topic's lane: the sends of every 4.x producer of
    /// this node to the topic leave together, one request per batch (each message keeps its
    /// producer's born time and host).
    async fn send_one(
        &self,
        request: &RemotingCommand,
        send: pb::SendRequest,
        message: Message,
    ) -> Answered {
        let message = Message {
            born_timestamp_ms: send.born_timestamp_ms,
            born_host: send.born_host,
            ..message
        };
        let deadline = tokio::time::Instant::now() + LEADER_CALL_TIMEOUT;
        let sent = self
            .lanes
            .send_to_queue(&self.group, &send.topic, send.queue_id, message, deadline)
            .await
            .map_err(|error| Box::new(refused(request, &error)))?;
        Ok(send::send_reply(request, &[sent]))
    }

    async fn create_topic(&self, request: &RemotingCommand) -> Answered {
        let create = read(request, |fields| {
            Ok(pb::CreateTopicRequest {
                topic: fields.required_str("topic")?.to_owned(),
                read_queue_count: non_negative(fields.required_i32("readQueueNums")?),
                write_queue_count: non_negative(fields.required_i32("writeQueueNums")?),
                perm: fields.optional_i32("perm")?.map_or(0, non_negative),
                message_type: 0,
            })
        })?;
        self.on_leader(request, |mut client, _| {
            let create = create.clone();
            async move { client.create_topic(create).await }
        })
        .await?;
        Ok(RemotingCommand::success(request, Bytes::new()))
    }
}

impl Handler for BrokerHandler {
    async fn handle(&self, request: RemotingCommand, peer: &Peer) -> RemotingCommand {
        let answered = match request.code {
            request::SEND_MESSAGE | request::SEND_MESSAGE_V2 | request::SEND_BATCH_MESSAGE => {
                self.send(&request, peer.addr()).await
            }
            request::UPDATE_AND_CREATE_TOPIC => self.create_topic(&request).await,
            request::HEART_BEAT => self.heartbeat(&request, peer).await,
            request::UNREGISTER_CLIENT => self.unregister(&request).await,
            request::GET_CONSUMER_LIST_BY_GROUP => self.consumer_list(&request).await,
            request::QUERY_CONSUMER_OFFSET => self.query_offset(&request).await,
            request::UPDATE_CONSUMER_OFFSET => self.update_offset(&request).await,
            request::GET_MAX_OFFSET | request::GET_MIN_OFFSET => self.queue_bound(&request).await,
            request::SEARCH_OFFSET_BY_TIMESTAMP => self.search_offset(&request).await,
            request::PULL_MESSAGE => self.pull(&request).await,
            request::CONSUMER_SEND_MSG_BACK => self.send_back(&request).await,
            request::LOCK_BATCH_MQ => self.lock_queues(&request).await,
            request::UNLOCK_BATCH_MQ => self.unlock_queues(&request).await,
            request::END_TRANSACTION => self.end_transaction(&request).await,
            request::VIEW_MESSAGE_BY_ID => self.view_message(&request).await,
            request::QUERY_MESSAGE => self.query_message(&request).await,
            request::GET_ALL_TOPIC_CONFIG => self.all_topic_configs(&request).await,
            request::GET_TOPIC_STATS_INFO => self.topic_stats(&request).await,
            request::GET_CONSUME_STATS => self.consume_stats(&request).await,
            request::GET_CONSUMER_CONNECTION_LIST => self.consumer_connections(&request).await,
            request::GET_PRODUCER_CONNECTION_LIST => self.producer_connections(&request).await,
            request::QUERY_TOPIC_CONSUME_BY_WHO => self.topic_consumers(&request).await,
            request::GET_BROKER_RUNTIME_INFO => self.runtime_info(&request).await,
            _ => Err(Box::new(RemotingCommand::not_supported(&request))),
        };
        answered.unwrap_or_else(|early| *early)
    }
}

/// A handler's outcome: its value, or the answer it ends with early (a bad field, a refusal),
/// boxed as the rare case.
type Answered<T = RemotingCommand> = Result<T, Box<RemotingCommand>>;

/// What `read` takes from `request`'s fields; a bad field is a `SYSTEM_ERROR` naming it.
fn read<'a, T>(
    request: &'a RemotingCommand,
    read: impl FnOnce(&'a ExtFields) -> Result<T, ExtFieldError>,
) -> Answered<T> {
    read(&request.ext_fields)
        .map_err(|error| Box::new(RemotingCommand::system_error(request, error)))
}

/// A success whose body is `body` as JSON.
fn json_reply(request: &RemotingCommand, body: &impl serde::Serialize) -> Answered {
    serde_json::to_vec(body)
        .map(|body| RemotingCommand::success(request, body))
        .map_err(|error| Box::new(RemotingCommand::system_error(request, error)))
}

/// A queue count or permission from a header: negative values are 0, which the broker
/// refuses with a message naming the field.
fn non_negative(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

/// The 4.x answer to a request the group did not serve: the broker's reason, under the 4.x
/// code a client acts on (it retries another broker on `SYSTEM_ERROR`,
/// `SERVICE_NOT_AVAILABLE` and `TOPIC_NOT_EXIST`; it gives up on `MESSAGE_ILLEGAL`).
fn refused(request: &RemotingCommand, error: &CallError) -> RemotingCommand {
    let code = match error {
        CallError::Unavailable { .. } => response::SERVICE_NOT_AVAILABLE,
        CallError::Rejected { status, .. } => status_code(status),
    };
    RemotingCommand::response_to(request, code, Some(error.to_string()))
}

/// The 4.x answer to a request this node refused with `status`.
fn status_reply(request: &RemotingCommand, status: &tonic::Status) -> RemotingCommand {
    RemotingCommand::response_to(
        request,
        status_code(status),
        Some(status.message().to_owned()),
    )
}

/// The 4.x code of a node's refusal.
fn status_code(status: &tonic::Status) -> i32 {
    match rocketraft_proto::response_code(status) {
        Some(ResponseCode::MessageIllegal | ResponseCode::TopicIllegal) => {
            response::MESSAGE_ILLEGAL
        }
        Some(ResponseCode::TopicNotExist | ResponseCode::TopicRouteNotExist) => {
            response::TOPIC_NOT_EXIST
        }
        Some(ResponseCode::NoPermission) => response::NO_PERMISSION,
        Some(ResponseCode::SubscriptionGroupNotExist) => response::SUBSCRIPTION_GROUP_NOT_EXIST,
        Some(ResponseCode::LimitExceeded) => response::SYSTEM_BUSY,
        Some(
            ResponseCode::DiskFull | ResponseCode::ServiceUnavailable | ResponseCode::StoreError,
        ) => response::SERVICE_NOT_AVAILABLE,
        _ => response::SYSTEM_ERROR,
    }
}
