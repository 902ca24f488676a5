//! Cluster administration through the nameservers and the group leaders: what `mqadmin`
//! does, as a library so tools and tests share it. [`consume`]: reading as a consumer
//! group (`mqadmin consume`); [`consumer_groups`]: members and progress of consumer groups;
//! [`query`]: messages by id or key; [`membership`]: adding, removing and replacing nodes;
//! [`node_status`]: what each node of a group reports about itself.

mod consume;
mod consumer_groups;
mod membership;
mod node_status;
mod query;

pub use consume::ConsumeRequest;
pub use consume::ConsumedMessage;
pub use consume::DeliveryResult;
pub use consumer_groups::GroupMember;
pub use consumer_groups::GroupMembers;
pub use consumer_groups::MemberSubscription;
pub use consumer_groups::QueueProgress;
pub use membership::MembershipChanged;
pub use membership::NewNode;
pub use node_status::NodeReport;

use rocketraft_proto::broker as broker_pb;
use rocketraft_proto::common::TopicMessageType;
use rocketraft_proto::nameserver as pb;
use rocketraft_proto::nameserver::name_server_client::NameServerClient;
use serde::Serialize;

use crate::connector::ClientTls;
use crate::connector::Connector;
use crate::group::BrokerGroupClient;
use crate::group::GroupError;
use crate::nameservers::Refusal;
use crate::nameservers::Unanswered;
use crate::nameservers::ask_side_by_side;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("no nameserver answered: {last_error}")]
    NameserversUnavailable { last_error: String },
    #[error("no broker group serves topic {0:?}")]
    NoRoute(String),
    #[error("consumer group {0:?} has no live member; name the topic to inspect")]
    NoMembers(String),
    #[error("no broker group named {0:?} is registered")]
    UnknownGroup(String),
    #[error("broker group {group}: {source}")]
    Group {
        group: String,
        #[source]
        source: GroupError,
    },
    #[error("broker group {group} refused: {status}")]
    Refused {
        group: String,
        status: tonic::Status,
    },
}

/// Min and max offset of one queue of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueStatus {
    pub group: String,
    pub queue_id: i32,
    pub min_offset: i64,
    pub max_offset: i64,
    /// Store time of the queue's last message (ms since the epoch); 0 when it holds none.
    pub last_store_timestamp_ms: i64,
}

/// A consumer group's settings, as [`Admin::update_group`] sets them whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupSettings {
    /// Reconsumes before `%DLQ%<group>` (0: the broker's default, 16).
    pub retry_max_times: u32,
    /// Queues of `%RETRY%<group>` (0: the broker's default, 1).
    pub retry_queue_count: u32,
    /// The group's 5.x (pop) consumers receive in order, one batch per queue at a time.
    pub consume_orderly: bool,
}

pub struct Admin {
    nameservers: Vec<String>,
    /// Sent with admin calls, for brokers that require one (`admin_token`).
    admin_token: Option<String>,
    connector: Connector,
}

impl Admin {
    pub fn new(nameservers: Vec<String>) -> Admin {
        Admin {
            nameservers,
            admin_token: None,
            connector: Connector::plain(),
        }
    }

    /// Connects to the brokers over TLS, verifying them against `tls`'s CA.
    pub fn with_tls(mut self, tls: ClientTls) -> Admin {
        self.connector = Connector::tls(tls);
        self
    }

    /// A client of the group `route` describes, following its leader.
    pub(crate) fn group_client(&self, route: &pb::GroupRoute) -> BrokerGroupClient {
        BrokerGroupClient::with_connector(
            route
                .nodes
                .values()
                .filter_map(|addr| addr.parse().ok())
                .collect(),
            self.connector.clone(),
        )
    }

    /// A connection to the current leader of the group `route` describes.
    pub(crate) async fn leader_of(
        &self,
        route: &pb::GroupRoute,
    ) -> Result<broker_pb::broker_client::BrokerClient<tonic::transport::Channel>, AdminError> {
        self.group_client(route)
            .leader()
            .await
            .map_err(|source| AdminError::Group {
                group: route.group.clone(),
                source,
            })
    }

    /// Sends `token` with every admin call (topic changes, leader transfer, node
    /// replacement).
    pub fn with_admin_token(mut self, token: impl Into<String>) -> Admin {
        self.admin_token = Some(token.into());
        self
    }

    /// `message` as an admin call: with the admin token, if one was given.
    fn admin_call<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = &self.admin_token {
            rocketraft_domain::secrets::attach(
                &mut request,
                rocketraft_domain::secrets::ADMIN_TOKEN_HEADER,
                token,
            );
        }
        request
    }

    pub async fn cluster_info(&self) -> Result<pb::ClusterInfo, AdminError> {
        self.ask(
            |mut client| async move { client.get_cluster_info(pb::GetClusterInfoRequest {}).await },
        )
        .await
    }

    pub async fn topic_list(&self) -> Result<Vec<String>, AdminError> {
        Ok(self
            .ask(
                |mut client| async move { client.get_topic_list(pb::GetTopicListRequest {}).await },
            )
            .await?
            .topics)
    }

    pub async fn topic_route(&self, topic: &str) -> Result<pb::TopicRoute, AdminError> {
        let request = pb::GetTopicRouteRequest {
            topic: topic.to_owned(),
        };
        match self
            .ask(|mut client| {
                let request = request.clone();
                async move { client.get_topic_route(request).await }
            })
            .await
        {
            Err(AdminError::Refused { status, .. }) if status.code() == tonic::Code::NotFound => {
                Err(AdminError::NoRoute(topic.to_owned()))
            }
            other => other,
        }
    }

    /// Creates (or updates) `topic` with `queues` read and write queues in `group`, or in
    /// every registered group; returns the groups it was created in. A new topic takes every
    /// message type; an existing one keeps its type.
    pub async fn create_topic(
        &self,
        topic: &str,
        queues: u32,
        group: Option<&str>,
    ) -> Result<Vec<String>, AdminError> {
        self.create_typed_topic(topic, queues, TopicMessageType::Unspecified, group)
            .await
    }

    /// [`Admin::create_topic`] that sets the topic's message type, which the RocketMQ 5.x
    /// endpoint holds its sends to (`Unspecified`: keep the topic's, `Mixed` for a new one).
    pub async fn create_typed_topic(
        &self,
        topic: &str,
        queues: u32,
        message_type: TopicMessageType,
        group: Option<&str>,
    ) -> Result<Vec<String>, AdminError> {
        let request = broker_pb::CreateTopicRequest {
            topic: topic.to_owned(),
            read_queue_count: queues,
            write_queue_count: queues,
            perm: 0,
            message_type: message_type as i32,
        };
        self.on_every_group(group, |mut leader| {
            let request = self.admin_call(request.clone());
            async move { leader.create_topic(request).await.map(|_| ()) }
        })
        .await
    }

    /// Sets consumer group `consumer_group`'s settings in broker group `group`, or in every
    /// registered group; returns the groups it was set in.
    pub async fn update_group(
        &self,
        consumer_group: &str,
        settings: GroupSettings,
        group: Option<&str>,
    ) -> Result<Vec<String>, AdminError> {
        let request = broker_pb::UpsertGroupRequest {
            group: consumer_group.to_owned(),
            retry_max_times: settings.retry_max_times,
            retry_queue_count: settings.retry_queue_count,
            consume_orderly: settings.consume_orderly,
        };
        self.on_every_group(group, |mut leader| {
            let request = self.admin_call(request.clone());
            async move { leader.upsert_group(request).await.map(|_| ()) }
        })
        .await
    }

    /// Makes `call` on the leader of broker group `group`, or of every registered group, in
    /// turn; returns the groups it was made in, or the first refusal.
    async fn on_every_group<F, Fut>(
        &self,
        group: Option<&str>,
        call: F,
    ) -> Result<Vec<String>, AdminError>
    where
        F: Fn(broker_pb::broker_client::BrokerClient<tonic::transport::Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<(), tonic::Status>>,
    {
        let mut done = Vec::new();
        for route in self.target_groups(group).await? {
            let leader = self.leader_of(&route).await?;
            call(leader).await.map_err(|status| AdminError::Refused {
                group: route.group.clone(),
                status,
            })?;
            done.push(route.group);
        }
        Ok(done)
    }

    /// Broker group `group`'s route, or every registered group's.
    async fn target_groups(&self, group: Option<&str>) -> Result<Vec<pb::GroupRoute>, AdminError> {
        let targets: Vec<pb::GroupRoute> = self
            .cluster_info()
            .await?
            .groups
            .into_iter()
            .filter(|route| group.is_none_or(|name| route.group == name))
            .collect();
        if targets.is_empty() {
            return Err(AdminError::UnknownGroup(
                group.unwrap_or("<any>").to_owned(),
            ));
        }
        Ok(targets)
    }

    /// Moves the leadership of broker group `group` to node `to`; returns the new term.
    pub async fn transfer_leader(&self, group: &str, to: u64) -> Result<u64, AdminError> {
        let request = broker_pb::TransferLeaderRequest { to_node_id: to };
        let response = self
            .group_leader(group)
            .await?
            .transfer_leader(self.admin_call(request))
            .await
            .map_err(|status| AdminError::Refused {
                group: group.to_owned(),
                status,
            })?;
        Ok(response.into_inner().term)
    }

    /// Lets stopped node `node` of `group` come back with an empty data dir (a replaced
    /// disk): call it after stopping the node and before starting it on the new disk.
    pub async fn prepare_node_replacement(&self, group: &str, node: u64) -> Result<(), AdminError> {
        let request = broker_pb::PrepareNodeReplacementRequest { node_id: node };
        self.group_leader(group)
            .await?
            .prepare_node_replacement(self.admin_call(request))
            .await
            .map_err(|status| AdminError::Refused {
                group: group.to_owned(),
                status,
            })?;
        Ok(())
    }

    /// A connection to the leader of the broker group named `group`.
    pub(crate) async fn group_leader(
        &self,
        group: &str,
    ) -> Result<broker_pb::broker_client::BrokerClient<tonic::transport::Channel>, AdminError> {
        self.leader_of(&self.group_route(group).await?).await
    }

    /// The nameservers' route to the broker group named `group`: its nodes and leader.
    pub(crate) async fn group_route(&self, group: &str) -> Result<pb::GroupRoute, AdminError> {
        self.cluster_info()
            .await?
            .groups
            .into_iter()
            .find(|route| route.group == group)
            .ok_or_else(|| AdminError::UnknownGroup(group.to_owned()))
    }

    /// The min and max offset of every queue of `topic`, and the store time of its last
    /// message: one call to each serving group's leader.
    pub async fn topic_status(&self, topic: &str) -> Result<Vec<QueueStatus>, AdminError> {
        let route = self.topic_route(topic).await?;
        let mut statuses = Vec::new();
        for queues in &route.queues {
            let Some(group_route) = route.groups.iter().find(|g| g.group == queues.group) else {
                continue;
            };
            let request = broker_pb::TopicStatsRequest {
                topic: topic.to_owned(),
            };
            let stats = self
                .leader_of(group_route)
                .await?
                .topic_stats(request)
                .await
                .map_err(|status| AdminError::Refused {
                    group: queues.group.clone(),
                    status,
                })?
                .into_inner();
            statuses.extend(stats.queues.into_iter().map(|queue| QueueStatus {
                group: queues.group.clone(),
                queue_id: queue.queue_id,
                min_offset: queue.min_offset,
                max_offset: queue.max_offset,
                last_store_timestamp_ms: queue.last_store_timestamp_ms,
            }));
        }
        Ok(statuses)
    }

    /// Asks the nameservers side by side ([`crate::nameservers`]); the first that has the
    /// answer gives it.
    async fn ask<T, F, Fut>(&self, call: F) -> Result<T, AdminError>
    where
        F: Fn(NameServerClient<tonic::transport::Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let answer = ask_side_by_side(&self.nameservers, |index| {
            let endpoint = self.connector.nameserver_endpoint(&self.nameservers[index]);
            let call = &call;
            async move {
                let channel = endpoint
                    .map_err(Refusal::Failed)?
                    .connect()
                    .await
                    .map_err(|error| Refusal::Failed(error.to_string()))?;
                match call(NameServerClient::new(channel)).await {
                    Ok(response) => Ok(response.into_inner()),
                    Err(status) if status.code() == tonic::Code::NotFound => {
                        Err(Refusal::NotFound((index, status)))
                    }
                    Err(status) => Err(Refusal::Failed(status.to_string())),
                }
            }
        })
        .await;
        answer.map_err(|unanswered| match unanswered {
            Unanswered::NotFound((index, status)) => AdminError::Refused {
                group: self.nameservers[index].clone(),
                status,
            },
            Unanswered::Failed(last_error) => AdminError::NameserversUnavailable { last_error },
        })
    }
}

pub use crate::consumer::ConsumeFrom;
