//! Finding stored messages, as 4.x admin tools and clients ask: by offset message id
//! (`VIEW_MESSAGE_BY_ID`, which names a CommitLog offset) and by key or message id within a
//! topic and a time range (`QUERY_MESSAGE`). Both answer with stored records, the CommitLog's
//! own bytes.
//!
//! Invariant: read from this node's committed data, as pulls are: every node of a group holds
//! the same bytes at the same offset, so a tool that dials the node an offset message id names
//! is answered by that node while it is up, leader or not.

use rocketraft_proto::broker as pb;

use super::Answered;
use super::BrokerHandler;
use super::read;
use super::status_reply;
use crate::codes::response;
use crate::command::RemotingCommand;

/// The extension field that says a `QUERY_MESSAGE` key is a message id (`UNIQ_KEY`).
const UNIQUE_KEY_QUERY: &str = "_UNIQUE_KEY_QUERY";
/// Messages a message id query returns at most (a Java broker's `defaultQueryMaxNum`).
const UNIQUE_KEY_QUERY_MAX: u32 = 32;

impl BrokerHandler {
    /// The stored record at the header's `offset`; `SYSTEM_ERROR` when no message starts there.
    pub(super) async fn view_message(&self, request: &RemotingCommand) -> Answered {
        let view = read(request, |fields| {
            Ok(pb::ViewMessageRequest {
                commit_log_offset: fields.required_i64("offset")?,
            })
        })?;
        let viewed = self
            .local_node()
            .await
            .map_err(|error| Box::new(RemotingCommand::system_error(request, error)))?
            .view_message(view)
            .await;
        match viewed {
            Ok(viewed) => Ok(RemotingCommand::success(
                request,
                viewed.into_inner().stored_record,
            )),
            Err(status) if status.code() == tonic::Code::NotFound => {
                Err(Box::new(RemotingCommand::system_error(
                    request,
                    format!(
                        "can not find message by the offset, {}: {}",
                        view.commit_log_offset,
                        status.message()
                    ),
                )))
            }
            Err(status) => Err(Box::new(status_reply(request, &status))),
        }
    }

    /// The messages of the header's `topic` whose key (or, with `_UNIQUE_KEY_QUERY`, message
    /// id) is `key`, stored between `beginTimestamp` and `endTimestamp` inclusive, newest
    /// first; `QUERY_NOT_FOUND` when there is none. The reply's index fields name the newest
    /// message found.
    pub(super) async fn query_message(&self, request: &RemotingCommand) -> Answered {
        let query = read(request, |fields| {
            let by_message_id = fields.get(UNIQUE_KEY_QUERY) == Some("true");
            let max_num = fields.required_i32("maxNum")?;
            Ok(pb::QueryMessagesRequest {
                key: fields.required_str("key")?.to_owned(),
                topic: fields.required_str("topic")?.to_owned(),
                begin_timestamp_ms: fields.required_i64("beginTimestamp")?.max(0),
                end_timestamp_ms: fields.required_i64("endTimestamp")?.saturating_add(1),
                max_messages: if by_message_id {
                    UNIQUE_KEY_QUERY_MAX
                } else {
                    u32::try_from(max_num).unwrap_or(0)
                },
                stored_records: true,
            })
        })?;
        let found = self
            .local_node()
            .await
            .map_err(|error| Box::new(RemotingCommand::system_error(request, error)))?
            .query_messages(query)
            .await
            .map_err(|status| Box::new(status_reply(request, &status)))?
            .into_inner();
        if found.stored_records.is_empty() {
            return Err(Box::new(RemotingCommand::response_to(
                request,
                response::QUERY_NOT_FOUND,
                Some("can not find message, maybe time range not correct".to_owned()),
            )));
        }
        let mut reply = RemotingCommand::success(request, found.stored_records);
        reply.ext_fields.insert(
            "indexLastUpdateTimestamp",
            found.newest_store_timestamp_ms.to_string(),
        );
        reply.ext_fields.insert(
            "indexLastUpdatePhyoffset",
            found.newest_commit_log_offset.to_string(),
        );
        Ok(reply)
    }
}
