//! The admin tools' 4.x stats requests: a topic's queues (`GET_TOPIC_STATS_INFO`, what
//! `mqadmin topicStatus` and the dashboard's topic page show) and a consumer group's progress
//! (`GET_CONSUME_STATS`, `mqadmin consumerProgress` and the dashboard's consumer page).
//!
//! Invariant: both come from the leader's applied state in one call, and answer with the
//! object-keyed maps Java admin tools parse ([`crate::object_keyed`]), one entry per queue.

use rocketraft_proto::broker as pb;
use serde::Serialize;

use super::Answered;
use super::BrokerHandler;
use super::read;
use crate::command::RemotingCommand;
use crate::object_keyed::MessageQueue;
use crate::object_keyed::object_keyed_map;

/// `TopicOffset`: one queue of `TopicStatsTable`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TopicOffset {
    last_update_timestamp: i64,
    max_offset: i64,
    min_offset: i64,
}

/// `OffsetWrapper`: one queue of `ConsumeStats`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OffsetWrapper {
    broker_offset: i64,
    consumer_offset: i64,
    last_timestamp: i64,
}

impl BrokerHandler {
    /// `TopicStatsTable` of a topic: every queue's min and max offset and the store time of
    /// its last message.
    pub(super) async fn topic_stats(&self, request: &RemotingCommand) -> Answered {
        let stats = read(request, |fields| {
            Ok(pb::TopicStatsRequest {
                topic: fields.required_str("topic")?.to_owned(),
            })
        })?;
        let queues = self
            .on_leader(request, |mut client, _| {
                let stats = stats.clone();
                async move { client.topic_stats(stats).await }
            })
            .await?
            .queues;
        let entries: Vec<(MessageQueue, TopicOffset)> = queues
            .into_iter()
            .map(|queue| {
                let offsets = TopicOffset {
                    last_update_timestamp: queue.last_store_timestamp_ms,
                    max_offset: queue.max_offset,
                    min_offset: queue.min_offset,
                };
                (self.message_queue(&stats.topic, queue.queue_id), offsets)
            })
            .collect();
        offset_table_body(request, &entries)
    }

    /// `ConsumeStats` of a group: per readable queue of the topic named, or of every topic it
    /// committed an offset on, the queue's max offset, the group's offset (0 when it never
    /// committed one) and the store time of the last message it consumed. `consumeTps` is
    /// left out: the broker does not measure a group's consume rate.
    pub(super) async fn consume_stats(&self, request: &RemotingCommand) -> Answered {
        let stats = read(request, |fields| {
            Ok(pb::ConsumeStatsRequest {
                group: fields.required_str("consumerGroup")?.to_owned(),
                topics: fields
                    .get("topic")
                    .filter(|topic| !topic.is_empty())
                    .map(str::to_owned)
                    .into_iter()
                    .collect(),
            })
        })?;
        let queues = self
            .on_leader(request, |mut client, _| {
                let stats = stats.clone();
                async move { client.consume_stats(stats).await }
            })
            .await?
            .queues;
        let entries: Vec<(MessageQueue, OffsetWrapper)> = queues
            .into_iter()
            .map(|queue| {
                let offsets = OffsetWrapper {
                    broker_offset: queue.max_offset,
                    consumer_offset: queue.committed_offset.unwrap_or(0),
                    last_timestamp: queue.last_consumed_timestamp_ms,
                };
                (self.message_queue(&queue.topic, queue.queue_id), offsets)
            })
            .collect();
        offset_table_body(request, &entries)
    }

    /// A queue of this node's broker group.
    fn message_queue(&self, topic: &str, queue_id: i32) -> MessageQueue {
        MessageQueue {
            broker_name: self.group.clone(),
            queue_id,
            topic: topic.to_owned(),
        }
    }
}

/// A success whose body is `{"offsetTable":<entries as an object-keyed map>}`.
fn offset_table_body<V: Serialize>(
    request: &RemotingCommand,
    entries: &[(MessageQueue, V)],
) -> Answered {
    let map = object_keyed_map(entries)
        .map_err(|error| Box::new(RemotingCommand::system_error(request, error)))?;
    let body = format!("{{\"offsetTable\":{map}}}");
    Ok(RemotingCommand::success(request, body.into_bytes()))
}
