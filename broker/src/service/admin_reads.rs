//! The read side of administration, one call per view an operator opens: the group's topics
//! (`ListTopics`), a topic's queues (`TopicStats`), a consumer group's progress
//! (`ConsumeStats`) and a topic's consumer groups (`TopicConsumers`).
//!
//! Invariant: any node answers from its applied state, so a follower may lag its leader but
//! never shows an uncommitted change; the leader answers linearizably (after a read barrier),
//! so a reader that follows the leader never sees an offset go back across a leader change.
//! The metadata is copied out before the store is read, so no call holds both locks. Only `TopicConsumers`' live subscribers come from the
//! leader's registry, which a follower holds empty.

use std::collections::BTreeSet;

use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::metadata::TopicConfig;
use crate::raft::control::propose::linearizable_read;
use crate::service::BrokerService;
use crate::store::MessageStore;
use crate::topic::validate_group_name;
use crate::topic::validate_topic_name;

/// Topics one `ConsumeStats` call may name at most.
pub const CONSUME_STATS_TOPICS_MAX: usize = 1024;

impl BrokerService {
    /// On the leader, waits until it has applied everything committed before the call; a
    /// follower answers from what it has applied.
    async fn admin_read_barrier(&self) -> Result<(), BrokerError> {
        if self.ensure_leader().is_ok() {
            linearizable_read(&self.raft).await?;
        }
        Ok(())
    }

    pub(super) async fn handle_list_topics(&self) -> Result<pb::ListTopicsResponse, BrokerError> {
        self.admin_read_barrier().await?;
        let metadata = self.group.metadata();
        let topics = metadata
            .topics
            .values()
            .map(|topic| pb::TopicInfo {
                name: topic.name.clone(),
                read_queue_count: topic.read_queue_count,
                write_queue_count: topic.write_queue_count,
                perm: topic.perm,
                message_type: metadata.topic_type(&topic.name).to_wire() as i32,
            })
            .collect();
        Ok(pb::ListTopicsResponse { topics })
    }

    pub(super) async fn handle_topic_stats(
        &self,
        topic: &str,
    ) -> Result<pb::TopicStatsResponse, BrokerError> {
        validate_topic_name(topic).map_err(BrokerError::TopicIllegal)?;
        self.admin_read_barrier().await?;
        let config = self
            .group
            .metadata()
            .topics
            .get(topic)
            .cloned()
            .ok_or_else(|| BrokerError::TopicNotExist(topic.to_owned()))?;
        let store = self.group.store();
        let queue_count = config.read_queue_count.max(config.write_queue_count) as i32;
        let queues = (0..queue_count)
            .map(|queue_id| {
                let (min_offset, max_offset) = store.consume_queue_offsets(topic, queue_id);
                pb::QueueStats {
                    queue_id,
                    min_offset,
                    max_offset,
                    last_store_timestamp_ms: store_time_at(&store, topic, queue_id, max_offset - 1),
                }
            })
            .collect();
        Ok(pb::TopicStatsResponse { queues })
    }

    /// Per readable queue of the topics named (or of those the group committed an offset
    /// on): the queue's offsets, the group's, and the store times around the group's place.
    /// A topic this broker group does not hold is left out.
    pub(super) async fn handle_consume_stats(
        &self,
        request: &pb::ConsumeStatsRequest,
    ) -> Result<pb::ConsumeStatsResponse, BrokerError> {
        validate_group_name(&request.group).map_err(BrokerError::BadRequest)?;
        if request.topics.len() > CONSUME_STATS_TOPICS_MAX {
            return Err(BrokerError::BadRequest(format!(
                "a consume stats call names at most {CONSUME_STATS_TOPICS_MAX} topics, got {}",
                request.topics.len()
            )));
        }
        for topic in &request.topics {
            validate_topic_name(topic).map_err(BrokerError::TopicIllegal)?;
        }
        self.admin_read_barrier().await?;
        let (topics, committed) = {
            let metadata = self.group.metadata();
            let committed = metadata
                .offsets
                .get(&request.group)
                .cloned()
                .unwrap_or_default();
            let names: BTreeSet<&String> = if request.topics.is_empty() {
                committed.keys().map(|(topic, _)| topic).collect()
            } else {
                request.topics.iter().collect()
            };
            let topics: Vec<TopicConfig> = names
                .into_iter()
                .filter_map(|name| metadata.topics.get(name).cloned())
                .collect();
            (topics, committed)
        };
        let store = self.group.store();
        let mut queues = Vec::new();
        for topic in &topics {
            for queue_id in 0..topic.read_queue_count as i32 {
                let name = &topic.name;
                let (min_offset, max_offset) = store.consume_queue_offsets(name, queue_id);
                let committed_offset = committed.get(&(name.clone(), queue_id)).copied();
                let consumed_to = committed_offset.unwrap_or(min_offset).max(min_offset);
                queues.push(pb::QueueConsumeStats {
                    topic: name.clone(),
                    queue_id,
                    min_offset,
                    max_offset,
                    committed_offset,
                    last_consumed_timestamp_ms: committed_offset.map_or(0, |offset| {
                        store_time_at(&store, name, queue_id, offset - 1)
                    }),
                    oldest_unconsumed_timestamp_ms: store_time_at(
                        &store,
                        name,
                        queue_id,
                        consumed_to,
                    ),
                });
            }
        }
        Ok(pb::ConsumeStatsResponse { queues })
    }

    /// The groups with a committed offset on `topic`, and (on the leader) those whose live
    /// members subscribe to it.
    pub(super) async fn handle_topic_consumers(
        &self,
        topic: &str,
    ) -> Result<pb::TopicConsumersResponse, BrokerError> {
        validate_topic_name(topic).map_err(BrokerError::TopicIllegal)?;
        self.admin_read_barrier().await?;
        let mut groups: BTreeSet<String> = self
            .group
            .metadata()
            .offsets
            .iter()
            .filter(|(_, offsets)| offsets.keys().any(|(name, _)| name == topic))
            .map(|(group, _)| group.clone())
            .collect();
        groups.extend(self.consumers.groups_subscribing(topic));
        Ok(pb::TopicConsumersResponse {
            groups: groups.into_iter().collect(),
        })
    }
}

/// Store time of the message at `queue_offset` of a queue; 0 when the queue holds none there
/// (not written yet, deleted by retention, or unreadable).
fn store_time_at(store: &MessageStore, topic: &str, queue_id: i32, queue_offset: i64) -> i64 {
    let (min, max) = store.consume_queue_offsets(topic, queue_id);
    if !(min..max).contains(&queue_offset) {
        return 0;
    }
    store
        .read_consume_queue(topic, queue_id, queue_offset, 1)
        .first()
        .and_then(|unit| {
            store
                .read_unit_view(topic, queue_id, queue_offset, unit)
                .ok()
        })
        .map_or(0, |view| view.store_timestamp_ms())
}
