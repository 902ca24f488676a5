//! Cluster administration through the nameservers and the group leaders: what `mqadmin`
//! does, as a library so tools and tests share it. [`consumer_groups`]: members and
//! progress of consumer groups.

mod consumer_groups;

pub use consumer_groups::GroupMember;
pub use consumer_groups::GroupMembers;
pub use consumer_groups::QueueProgress;

use rocketraft_proto::broker as broker_pb;
use rocketraft_proto::broker::broker_client::BrokerClient;
use rocketraft_proto::nameserver as pb;
use rocketraft_proto::nameserver::name_server_client::NameServerClient;
use serde::Serialize;
use tonic::transport::Channel;

use crate::group::BrokerGroupClient;
use crate::group::GroupError;
use crate::subscription::Subscription;

/// How long one nameserver query may take.
const QUERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

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
}

pub struct Admin {
    nameservers: Vec<String>,
}

impl Admin {
    pub fn new(nameservers: Vec<String>) -> Admin {
        Admin { nameservers }
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
    /// every registered group; returns the groups it was created in.
    pub async fn create_topic(
        &self,
        topic: &str,
        queues: u32,
        group: Option<&str>,
    ) -> Result<Vec<String>, AdminError> {
        let info = self.cluster_info().await?;
        let targets: Vec<&pb::GroupRoute> = info
            .groups
            .iter()
            .filter(|route| group.is_none_or(|name| route.group == name))
            .collect();
        if targets.is_empty() {
            return Err(AdminError::UnknownGroup(
                group.unwrap_or("<any>").to_owned(),
            ));
        }
        let mut created = Vec::new();
        for route in targets {
            let mut leader =
                group_client(route)
                    .leader()
                    .await
                    .map_err(|source| AdminError::Group {
                        group: route.group.clone(),
                        source,
                    })?;
            let request = broker_pb::CreateTopicRequest {
                topic: topic.to_owned(),
                read_queue_count: queues,
                write_queue_count: queues,
                perm: 0,
            };
            leader
                .create_topic(request)
                .await
                .map_err(|status| AdminError::Refused {
                    group: route.group.clone(),
                    status,
                })?;
            created.push(route.group.clone());
        }
        Ok(created)
    }

    /// The min and max offset of every queue of `topic`, read from each group's leader.
    pub async fn topic_status(&self, topic: &str) -> Result<Vec<QueueStatus>, AdminError> {
        let route = self.topic_route(topic).await?;
        let mut statuses = Vec::new();
        for queues in &route.queues {
            let Some(group_route) = route.groups.iter().find(|g| g.group == queues.group) else {
                continue;
            };
            let group_error = |source| AdminError::Group {
                group: queues.group.clone(),
                source,
            };
            let mut leader = group_client(group_route)
                .leader()
                .await
                .map_err(group_error)?;
            for queue_id in 0..queues.read_queue_count.max(queues.write_queue_count) as i32 {
                let request = broker_pb::ReadConsumeQueueRequest {
                    topic: topic.to_owned(),
                    queue_id,
                    from_queue_offset: 0,
                    max_units: 1,
                };
                let response = leader
                    .read_consume_queue(request)
                    .await
                    .map_err(|status| AdminError::Refused {
                        group: queues.group.clone(),
                        status,
                    })?
                    .into_inner();
                statuses.push(QueueStatus {
                    group: queues.group.clone(),
                    queue_id,
                    min_offset: response.min_queue_offset,
                    max_offset: response.max_queue_offset,
                });
            }
        }
        Ok(statuses)
    }

    /// Asks the nameservers in order until one answers.
    async fn ask<T, F, Fut>(&self, call: F) -> Result<T, AdminError>
    where
        F: Fn(NameServerClient<tonic::transport::Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut last_error = String::from("no nameserver configured");
        for nameserver in &self.nameservers {
            let endpoint =
                match tonic::transport::Endpoint::from_shared(format!("http://{nameserver}")) {
                    Ok(endpoint) => endpoint
                        .connect_timeout(QUERY_TIMEOUT)
                        .timeout(QUERY_TIMEOUT),
                    Err(error) => {
                        last_error = format!("{nameserver}: {error}");
                        continue;
                    }
                };
            match endpoint.connect().await {
                Ok(channel) => match call(NameServerClient::new(channel)).await {
                    Ok(response) => return Ok(response.into_inner()),
                    Err(status) if status.code() == tonic::Code::NotFound => {
                        return Err(AdminError::Refused {
                            group: nameserver.clone(),
                            status,
                        });
                    }
                    Err(status) => last_error = format!("{nameserver}: {status}"),
                },
                Err(error) => last_error = format!("{nameserver}: {error}"),
            }
        }
        Err(AdminError::NameserversUnavailable { last_error })
    }
}

pub(crate) fn group_client(route: &pb::GroupRoute) -> BrokerGroupClient {
    BrokerGroupClient::new(
        route
            .nodes
            .values()
            .filter_map(|addr| addr.parse().ok())
            .collect(),
    )
}

pub use crate::consumer::ConsumeFrom;

/// A consumed message, as `mqadmin consume` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConsumedMessage {
    pub topic: String,
    pub group: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub msg_id: String,
    pub tags: Option<String>,
    pub keys: Option<String>,
    pub body: String,
    pub reconsume_times: i32,
    pub born_timestamp_ms: i64,
    pub store_timestamp_ms: i64,
}

/// Messages pulled per queue and round.
const CONSUME_PULL_BATCH: u32 = 32;
/// How long a pull waits for messages when a round found none.
const CONSUME_PULL_WAIT_MS: u32 = 200;

impl Admin {
    /// Reads up to `count` messages of `topic` matching `subscription` as consumer group
    /// `consumer_group`, from its committed offsets (or `from` where it has none), until
    /// `timeout`; then commits how far it read.
    pub async fn consume(
        &self,
        topic: &str,
        consumer_group: &str,
        subscription: &Subscription,
        from: ConsumeFrom,
        count: usize,
        timeout: std::time::Duration,
    ) -> Result<Vec<ConsumedMessage>, AdminError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let route = self.topic_route(topic).await?;
        let mut cursors = Vec::new();
        for queues in &route.queues {
            let Some(group_route) = route.groups.iter().find(|g| g.group == queues.group) else {
                continue;
            };
            let refused = |status| AdminError::Refused {
                group: queues.group.clone(),
                status,
            };
            let leader =
                group_client(group_route)
                    .leader()
                    .await
                    .map_err(|source| AdminError::Group {
                        group: queues.group.clone(),
                        source,
                    })?;
            for queue_id in 0..queues.read_queue_count as i32 {
                let mut client = leader.clone();
                let query = broker_pb::QueryOffsetRequest {
                    group: consumer_group.to_owned(),
                    topic: topic.to_owned(),
                    queue_id,
                };
                let committed = client
                    .query_offset(query)
                    .await
                    .map_err(refused)?
                    .into_inner()
                    .offset;
                let offset = match committed {
                    Some(offset) => offset,
                    None => start_offset(&mut client, topic, queue_id, from)
                        .await
                        .map_err(refused)?,
                };
                cursors.push((queues.group.clone(), client, queue_id, offset));
            }
        }
        let mut consumed = Vec::new();
        let mut wait_ms = 0;
        while consumed.len() < count && tokio::time::Instant::now() < deadline {
            let mut found_any = false;
            for (group, client, queue_id, offset) in &mut cursors {
                let request = broker_pb::PullRequest {
                    group: consumer_group.to_owned(),
                    topic: topic.to_owned(),
                    queue_id: *queue_id,
                    queue_offset: *offset,
                    max_messages: CONSUME_PULL_BATCH,
                    tags: subscription.tags(),
                    max_wait_ms: wait_ms,
                };
                let response = client
                    .pull(request)
                    .await
                    .map_err(|status| AdminError::Refused {
                        group: group.clone(),
                        status,
                    })?
                    .into_inner();
                let before = *offset;
                let mut stopped_early = false;
                for message in response.messages {
                    if consumed.len() >= count {
                        stopped_early = true;
                        break;
                    }
                    let tag = message.properties.get("TAGS").cloned();
                    *offset = message.queue_offset + 1;
                    if subscription.matches(tag.as_deref()) {
                        consumed.push(to_consumed(message, group, tag));
                    }
                }
                if !stopped_early {
                    // Units the broker skipped by hash need no second look.
                    *offset = response.next_offset.max(*offset);
                }
                found_any |= *offset > before;
            }
            wait_ms = if found_any { 0 } else { CONSUME_PULL_WAIT_MS };
        }
        for (group, client, queue_id, offset) in &mut cursors {
            let commit = broker_pb::CommitOffsetsRequest {
                group: consumer_group.to_owned(),
                offsets: vec![broker_pb::QueueOffsetEntry {
                    topic: topic.to_owned(),
                    queue_id: *queue_id,
                    offset: *offset,
                }],
            };
            client
                .commit_offsets(commit)
                .await
                .map_err(|status| AdminError::Refused {
                    group: group.clone(),
                    status,
                })?;
        }
        Ok(consumed)
    }
}

/// Where a group with no committed offset starts reading a queue.
async fn start_offset(
    client: &mut BrokerClient<Channel>,
    topic: &str,
    queue_id: i32,
    from: ConsumeFrom,
) -> Result<i64, tonic::Status> {
    if let ConsumeFrom::Timestamp(timestamp_ms) = from {
        let request = broker_pb::SearchOffsetRequest {
            topic: topic.to_owned(),
            queue_id,
            timestamp_ms,
        };
        return Ok(client.search_offset(request).await?.into_inner().offset);
    }
    let request = broker_pb::ReadConsumeQueueRequest {
        topic: topic.to_owned(),
        queue_id,
        from_queue_offset: 0,
        max_units: 1,
    };
    let bounds = client.read_consume_queue(request).await?.into_inner();
    Ok(if from == ConsumeFrom::First {
        bounds.min_queue_offset
    } else {
        bounds.max_queue_offset
    })
}

fn to_consumed(
    message: broker_pb::PulledMessage,
    group: &str,
    tags: Option<String>,
) -> ConsumedMessage {
    ConsumedMessage {
        msg_id: message
            .properties
            .get("UNIQ_KEY")
            .cloned()
            .unwrap_or_default(),
        keys: message.properties.get("KEYS").cloned(),
        tags,
        topic: message.topic,
        group: group.to_owned(),
        queue_id: message.queue_id,
        queue_offset: message.queue_offset,
        body: String::from_utf8_lossy(&message.body).into_owned(),
        reconsume_times: message.reconsume_times,
        born_timestamp_ms: message.born_timestamp_ms,
        store_timestamp_ms: message.store_timestamp_ms,
    }
}
