//! Consumer groups seen from the cluster: who is in a group (`consumer-list`) and how far
//! it has consumed each queue (`consumer-progress`).

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use rocketraft_domain::sql_filter::EXPRESSION_TYPE_TAG;
use rocketraft_proto::broker as broker_pb;
use rocketraft_proto::nameserver as pb;
use serde::Serialize;

use crate::admin::Admin;
use crate::admin::AdminError;

/// One live member of a consumer group, as one broker group's leader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupMember {
    /// The broker group whose registry reported it.
    pub broker_group: String,
    pub client_id: String,
    pub subscriptions: Vec<MemberSubscription>,
    pub idle_ms: u64,
}

/// One topic a member subscribes to, as its heartbeats tell the leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberSubscription {
    pub topic: String,
    /// `TAG` or `SQL92`.
    pub expression_type: String,
    pub expression: String,
}

/// The members of a consumer group, and whether their subscriptions agree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupMembers {
    pub members: Vec<GroupMember>,
    /// False when members subscribe differently (some messages may go to no one).
    pub subscriptions_consistent: bool,
}

/// How far a consumer group has consumed one queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueProgress {
    pub topic: String,
    pub broker_group: String,
    pub queue_id: i32,
    /// The queue's first offset: retention deleted the messages before it.
    pub min_offset: i64,
    pub max_offset: i64,
    /// `None` when the group never committed an offset for this queue.
    pub committed_offset: Option<i64>,
    /// Messages not yet consumed and still held (from the committed offset, or the whole
    /// queue).
    pub lag: i64,
    /// Messages the group had not consumed when retention deleted them: its consumers go on
    /// from `min_offset`.
    pub skipped: i64,
    /// Store time of the oldest message not yet consumed (ms since the epoch): the lag in
    /// time. 0 when the group has consumed everything.
    pub oldest_unconsumed_timestamp_ms: i64,
}

impl Admin {
    /// The members of `consumer_group` on every broker group's leader.
    pub async fn consumer_list(&self, consumer_group: &str) -> Result<GroupMembers, AdminError> {
        let info = self.cluster_info().await?;
        let mut members = Vec::new();
        let mut subscriptions_consistent = true;
        for route in &info.groups {
            let refused = |status| AdminError::Refused {
                group: route.group.clone(),
                status,
            };
            let mut leader = self.leader_of(route).await?;
            let request = broker_pb::ListConsumersRequest {
                group: consumer_group.to_owned(),
            };
            let listed = leader
                .list_consumers(request)
                .await
                .map_err(refused)?
                .into_inner();
            subscriptions_consistent &= listed.subscriptions_consistent;
            members.extend(listed.members.into_iter().map(|member| {
                GroupMember {
                    broker_group: route.group.clone(),
                    client_id: member.client_id,
                    subscriptions: member
                        .subscriptions
                        .into_iter()
                        .map(|s| MemberSubscription {
                            topic: s.topic,
                            expression_type: if s.expression_type.is_empty() {
                                EXPRESSION_TYPE_TAG.to_owned()
                            } else {
                                s.expression_type
                            },
                            expression: s.expression,
                        })
                        .collect(),
                    idle_ms: member.idle_ms,
                }
            }));
        }
        Ok(GroupMembers {
            members,
            subscriptions_consistent,
        })
    }

    /// Per readable queue of the topics `consumer_group` subscribes (its live members'
    /// subscriptions, or `topic` if given): the max offset, the committed offset, and the
    /// lag in messages and in time. One call to each serving broker group's leader.
    pub async fn consumer_progress(
        &self,
        consumer_group: &str,
        topic: Option<&str>,
    ) -> Result<Vec<QueueProgress>, AdminError> {
        let named = topic.is_some();
        let topics: BTreeSet<String> = match topic {
            Some(topic) => [topic.to_owned()].into(),
            None => self
                .consumer_list(consumer_group)
                .await?
                .members
                .into_iter()
                .flat_map(|member| member.subscriptions.into_iter().map(|s| s.topic))
                .collect(),
        };
        if topics.is_empty() {
            return Err(AdminError::NoMembers(consumer_group.to_owned()));
        }
        // Broker group -> its route and the topics it serves.
        let mut serving: BTreeMap<String, (pb::GroupRoute, Vec<String>)> = BTreeMap::new();
        for topic in topics {
            let route = match self.topic_route(&topic).await {
                // A subscribed retry topic exists only once a message was handed back.
                Err(AdminError::NoRoute(_)) if !named => continue,
                route => route?,
            };
            for group_route in route.groups {
                serving
                    .entry(group_route.group.clone())
                    .or_insert_with(|| (group_route, Vec::new()))
                    .1
                    .push(topic.clone());
            }
        }
        let mut progress = Vec::new();
        for (broker_group, (route, topics)) in serving {
            let request = broker_pb::ConsumeStatsRequest {
                group: consumer_group.to_owned(),
                topics,
            };
            let stats = self
                .leader_of(&route)
                .await?
                .consume_stats(request)
                .await
                .map_err(|status| AdminError::Refused {
                    group: broker_group.clone(),
                    status,
                })?
                .into_inner();
            progress.extend(
                stats
                    .queues
                    .into_iter()
                    .map(|queue| QueueProgress::new(&broker_group, queue)),
            );
        }
        progress.sort_by(|a, b| {
            (&a.topic, &a.broker_group, a.queue_id).cmp(&(&b.topic, &b.broker_group, b.queue_id))
        });
        Ok(progress)
    }
}

impl QueueProgress {
    fn new(broker_group: &str, queue: broker_pb::QueueConsumeStats) -> QueueProgress {
        let consumed_to = queue.committed_offset.unwrap_or(queue.min_offset);
        QueueProgress {
            lag: queue.max_offset - consumed_to.max(queue.min_offset),
            skipped: (queue.min_offset - consumed_to).max(0),
            topic: queue.topic,
            broker_group: broker_group.to_owned(),
            queue_id: queue.queue_id,
            min_offset: queue.min_offset,
            max_offset: queue.max_offset,
            committed_offset: queue.committed_offset,
            oldest_unconsumed_timestamp_ms: queue.oldest_unconsumed_timestamp_ms,
        }
    }
}
