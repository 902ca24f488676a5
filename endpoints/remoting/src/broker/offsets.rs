//! The offsets' 4.x requests: a group's committed offset (`QUERY_CONSUMER_OFFSET`,
//! `UPDATE_CONSUMER_OFFSET`) and a queue's bounds (`GET_MIN_OFFSET`, `GET_MAX_OFFSET`,
//! `SEARCH_OFFSET_BY_TIMESTAMP`), each answered with the header field `offset`.
//!
//! Invariant: a group with no committed offset for a queue that still holds its first message
//! (its min offset is 0) is told 0, as a Java broker tells it: a group that starts
//! `CONSUME_FROM_LAST_OFFSET` on a young topic misses none of its first messages. Otherwise it
//! is told `QUERY_NOT_FOUND`, and the client applies its `ConsumeFromWhere`.

use bytes::Bytes;
use rocketraft_proto::broker as pb;

use super::Answered;
use super::BrokerHandler;
use super::read;
use crate::codes::request;
use crate::codes::response;
use crate::command::RemotingCommand;

/// A reply whose header says `offset`.
fn offset_reply(request: &RemotingCommand, offset: i64) -> RemotingCommand {
    let mut reply = RemotingCommand::success(request, Bytes::new());
    reply.ext_fields.insert("offset", offset.to_string());
    reply
}

impl BrokerHandler {
    /// A queue's `(min, max)` offsets, read on the leader.
    async fn bounds(
        &self,
        request: &RemotingCommand,
        topic: &str,
        queue_id: i32,
    ) -> Answered<(i64, i64)> {
        let read = pb::ReadConsumeQueueRequest {
            topic: topic.to_owned(),
            queue_id,
            from_queue_offset: 0,
            max_units: 1,
        };
        let units = self
            .on_leader(request, |mut client, _| {
                let read = read.clone();
                async move { client.read_consume_queue(read).await }
            })
            .await?;
        Ok((units.min_queue_offset, units.max_queue_offset))
    }

    pub(super) async fn query_offset(&self, request: &RemotingCommand) -> Answered {
        let query = read(request, |fields| {
            Ok(pb::QueryOffsetRequest {
                group: fields.required_str("consumerGroup")?.to_owned(),
                topic: fields.required_str("topic")?.to_owned(),
                queue_id: fields.required_i32("queueId")?,
            })
        })?;
        let committed = self
            .on_leader(request, |mut client, _| {
                let query = query.clone();
                async move { client.query_offset(query).await }
            })
            .await?;
        if let Some(offset) = committed.offset {
            return Ok(offset_reply(request, offset));
        }
        match self.bounds(request, &query.topic, query.queue_id).await? {
            (0, _) => Ok(offset_reply(request, 0)),
            _ => Err(Box::new(RemotingCommand::response_to(
                request,
                response::QUERY_NOT_FOUND,
                Some("the group has committed no offset for this queue".into()),
            ))),
        }
    }

    pub(super) async fn update_offset(&self, request: &RemotingCommand) -> Answered {
        let commit = read(request, |fields| {
            Ok(pb::CommitOffsetsRequest {
                group: fields.required_str("consumerGroup")?.to_owned(),
                offsets: vec![pb::QueueOffsetEntry {
                    topic: fields.required_str("topic")?.to_owned(),
                    queue_id: fields.required_i32("queueId")?,
                    offset: fields.required_i64("commitOffset")?,
                }],
            })
        })?;
        self.on_leader(request, |mut client, _| {
            let commit = commit.clone();
            async move { client.commit_offsets(commit).await }
        })
        .await?;
        Ok(RemotingCommand::success(request, Bytes::new()))
    }

    /// `GET_MIN_OFFSET` or `GET_MAX_OFFSET`.
    pub(super) async fn queue_bound(&self, request: &RemotingCommand) -> Answered {
        let (topic, queue_id) = read(request, |fields| {
            Ok((
                fields.required_str("topic")?,
                fields.required_i32("queueId")?,
            ))
        })?;
        let (min, max) = self.bounds(request, topic, queue_id).await?;
        let bound = if request.code == request::GET_MIN_OFFSET {
            min
        } else {
            max
        };
        Ok(offset_reply(request, bound))
    }

    pub(super) async fn search_offset(&self, request: &RemotingCommand) -> Answered {
        let search = read(request, |fields| {
            Ok(pb::SearchOffsetRequest {
                topic: fields.required_str("topic")?.to_owned(),
                queue_id: fields.required_i32("queueId")?,
                timestamp_ms: fields.required_i64("timestamp")?,
            })
        })?;
        let found = self
            .on_leader(request, |mut client, _| {
                let search = search.clone();
                async move { client.search_offset(search).await }
            })
            .await?;
        Ok(offset_reply(request, found.offset))
    }
}
