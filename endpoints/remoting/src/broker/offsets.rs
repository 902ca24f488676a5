//! The offsets' 4.x requests: a group's committed offset (`QUERY_CONSUMER_OFFSET`,
//! `UPDATE_CONSUMER_OFFSET`) and a queue's bounds (`GET_MIN_OFFSET`, `GET_MAX_OFFSET`,
//! `SEARCH_OFFSET_BY_TIMESTAMP`), each answered with the header field `offset`.
//!
//! Invariant: a group with no committed offset for a queue that still holds its first message
//! (its min offset is 0) is told 0, as a Java broker tells it: a group that starts
//! `CONSUME_FROM_LAST_OFFSET` on a young topic misses none of its first messages. Otherwise it
//! is told `QUERY_NOT_FOUND`, and the client applies its `ConsumeFromWhere`.

use rocketraft_proto::broker as pb;

use super::BrokerHandler;
use super::refused;
use crate::codes::request;
use crate::codes::response;
use crate::command::RemotingCommand;
use crate::ext::ExtFieldError;

/// A reply whose header says `offset`.
fn offset_reply(request: &RemotingCommand, offset: i64) -> RemotingCommand {
    let mut reply = RemotingCommand::success(request, bytes::Bytes::new());
    reply.ext_fields.insert("offset", offset.to_string());
    reply
}

impl BrokerHandler {
    /// A queue's `(min, max)` offsets, read on the leader.
    async fn bounds(
        &self,
        topic: &str,
        queue_id: i32,
    ) -> Result<(i64, i64), rocketraft_client::brokers::CallError> {
        let read = pb::ReadConsumeQueueRequest {
            topic: topic.to_owned(),
            queue_id,
            from_queue_offset: 0,
            max_units: 1,
        };
        let units = self
            .on_leader(|mut client, _| {
                let read = read.clone();
                async move { client.read_consume_queue(read).await }
            })
            .await?;
        Ok((units.min_queue_offset, units.max_queue_offset))
    }

    pub(super) async fn query_offset(&self, request: &RemotingCommand) -> RemotingCommand {
        let fields = &request.ext_fields;
        let query = (|| {
            Ok::<_, ExtFieldError>(pb::QueryOffsetRequest {
                group: fields.required_str("consumerGroup")?.to_owned(),
                topic: fields.required_str("topic")?.to_owned(),
                queue_id: fields.required_i32("queueId")?,
            })
        })();
        let query = match query {
            Ok(query) => query,
            Err(error) => return RemotingCommand::system_error(request, error),
        };
        let committed = self
            .on_leader(|mut client, _| {
                let query = query.clone();
                async move { client.query_offset(query).await }
            })
            .await;
        match committed {
            Ok(pb::QueryOffsetResponse {
                offset: Some(offset),
            }) => offset_reply(request, offset),
            Ok(_) => match self.bounds(&query.topic, query.queue_id).await {
                Ok((0, _)) => offset_reply(request, 0),
                Ok(_) => RemotingCommand::response_to(
                    request,
                    response::QUERY_NOT_FOUND,
                    Some("the group has committed no offset for this queue".into()),
                ),
                Err(error) => refused(request, &error),
            },
            Err(error) => refused(request, &error),
        }
    }

    pub(super) async fn update_offset(&self, request: &RemotingCommand) -> RemotingCommand {
        let fields = &request.ext_fields;
        let commit = (|| {
            Ok::<_, ExtFieldError>(pb::CommitOffsetsRequest {
                group: fields.required_str("consumerGroup")?.to_owned(),
                offsets: vec![pb::QueueOffsetEntry {
                    topic: fields.required_str("topic")?.to_owned(),
                    queue_id: fields.required_i32("queueId")?,
                    offset: fields.required_i64("commitOffset")?,
                }],
            })
        })();
        let commit = match commit {
            Ok(commit) => commit,
            Err(error) => return RemotingCommand::system_error(request, error),
        };
        let committed = self
            .on_leader(|mut client, _| {
                let commit = commit.clone();
                async move { client.commit_offsets(commit).await }
            })
            .await;
        match committed {
            Ok(_) => RemotingCommand::success(request, bytes::Bytes::new()),
            Err(error) => refused(request, &error),
        }
    }

    /// `GET_MIN_OFFSET` or `GET_MAX_OFFSET`.
    pub(super) async fn queue_bound(&self, request: &RemotingCommand) -> RemotingCommand {
        let fields = &request.ext_fields;
        let queue = (|| {
            Ok::<_, ExtFieldError>((
                fields.required_str("topic")?,
                fields.required_i32("queueId")?,
            ))
        })();
        let (topic, queue_id) = match queue {
            Ok(queue) => queue,
            Err(error) => return RemotingCommand::system_error(request, error),
        };
        match self.bounds(topic, queue_id).await {
            Ok((min, max)) => offset_reply(
                request,
                if request.code == request::GET_MIN_OFFSET {
                    min
                } else {
                    max
                },
            ),
            Err(error) => refused(request, &error),
        }
    }

    pub(super) async fn search_offset(&self, request: &RemotingCommand) -> RemotingCommand {
        let fields = &request.ext_fields;
        let search = (|| {
            Ok::<_, ExtFieldError>(pb::SearchOffsetRequest {
                topic: fields.required_str("topic")?.to_owned(),
                queue_id: fields.required_i32("queueId")?,
                timestamp_ms: fields.required_i64("timestamp")?,
            })
        })();
        let search = match search {
            Ok(search) => search,
            Err(error) => return RemotingCommand::system_error(request, error),
        };
        let found = self
            .on_leader(|mut client, _| {
                let search = search.clone();
                async move { client.search_offset(search).await }
            })
            .await;
        match found {
            Ok(found) => offset_reply(request, found.offset),
            Err(error) => refused(request, &error),
        }
    }
}
