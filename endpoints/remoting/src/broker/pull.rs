//! `PULL_MESSAGE`: a 4.x consumer's pull, served by this node from its own committed data (a
//! follower serves pulls as a leader does), with long polling, the tag-hash filter and SQL92.
//! The body is the pulled messages' stored records, the CommitLog's own bytes, which is what
//! RocketMQ serves: 4.x clients decode them and compute each message's offset id from them.
//!
//! Status codes, as a Java broker answers them:
//!
//! | node's pull status | 4.x reply | `nextBeginOffset` |
//! |---|---|---|
//! | `FOUND` | `SUCCESS` with the records | after the last message scanned |
//! | `NO_NEW_MESSAGE` (after the held wait) | `PULL_NOT_FOUND` | the pull's offset, or the queue's end |
//! | `NO_MATCHED_MESSAGE` | `PULL_RETRY_IMMEDIATELY` | past the filtered-out messages |
//! | `OFFSET_ILLEGAL` | `PULL_OFFSET_MOVED` | the nearest valid offset |
//!
//! Invariants: a pull is held at most [`LONG_POLLING_MS_MAX`], whatever its
//! `suspendTimeoutMillis`; every reply carries the four header fields clients read without
//! checking (`suggestWhichBrokerId`, `nextBeginOffset`, `minOffset`, `maxOffset`). The
//! `commitOffset` a pull carries is not stored: 4.x consumers persist their offsets every 5 s
//! and at shutdown with `UPDATE_CONSUMER_OFFSET`, and each store is a replicated write.

use rocketraft_domain::limits::LONG_POLLING_MS_MAX;
use rocketraft_proto::broker as pb;

use super::Answered;
use super::BrokerHandler;
use super::read;
use super::status_reply;
use super::subscriptions::PullFilter;
use super::subscriptions::pull_filter;
use crate::codes::response;
use crate::command::RemotingCommand;

/// `PullSysFlag` SUSPEND: the pull may be held until a message arrives.
const PULL_FLAG_SUSPEND: i32 = 0x2;
/// `PullSysFlag` SUBSCRIPTION: the pull carries its own expression, instead of the one its
/// group registered.
const PULL_FLAG_SUBSCRIPTION: i32 = 0x4;
/// `PullSysFlag` CLASS_FILTER: filtering by an uploaded Java class, which is not served.
const PULL_FLAG_CLASS_FILTER: i32 = 0x8;
/// The broker a pull's reply suggests the next pull go to: the group's first follower
/// (broker id 1 in the routes the nameserver gives 4.x clients; a group without one has the
/// client pick any of its nodes). A 4.x client keeps pulling from the node it was told until
/// its next route poll (30 s), so pulls pinned to the leader would stall that long when the
/// leader dies; a follower serves the same committed messages and outlives a leader change.
/// Measured with ali-ons across a leader kill: the slowest delivery after its send was 29 to
/// 31 s suggesting the leader, 12 to 23 ms suggesting id 1.
const SUGGESTED_BROKER_ID: i64 = 1;

/// A `PullMessageRequestHeader`, the parts served.
struct PullHeader<'a> {
    group: &'a str,
    topic: &'a str,
    queue_id: i32,
    queue_offset: i64,
    max_messages: i32,
    sys_flag: i32,
    suspend_ms: i64,
    sub_version: i64,
    subscription: Option<&'a str>,
    expression_type: Option<&'a str>,
}

impl BrokerHandler {
    pub(super) async fn pull(&self, request: &RemotingCommand) -> Answered {
        let header = read(request, |fields| {
            Ok(PullHeader {
                group: fields.required_str("consumerGroup")?,
                topic: fields.required_str("topic")?,
                queue_id: fields.required_i32("queueId")?,
                queue_offset: fields.required_i64("queueOffset")?,
                max_messages: fields.required_i32("maxMsgNums")?,
                sys_flag: fields.required_i32("sysFlag")?,
                suspend_ms: fields.optional_i64("suspendTimeoutMillis")?.unwrap_or(0),
                sub_version: fields.optional_i64("subVersion")?.unwrap_or(0),
                subscription: fields.get("subscription"),
                expression_type: fields.get("expressionType"),
            })
        })?;
        if header.sys_flag & PULL_FLAG_CLASS_FILTER != 0 {
            return Err(Box::new(RemotingCommand::system_error(
                request,
                "class filters (PullSysFlag CLASS_FILTER) are not supported; use tags or SQL92",
            )));
        }
        let filter = self.pull_filter(request, &header).await?;
        let pull = pb::PullRequest {
            group: header.group.to_owned(),
            topic: header.topic.to_owned(),
            queue_id: header.queue_id,
            queue_offset: header.queue_offset,
            // A count the node refuses (0, or past its batch maximum) gets its reason.
            max_messages: u32::try_from(header.max_messages).unwrap_or(0),
            tags: filter.tags,
            max_wait_ms: if header.sys_flag & PULL_FLAG_SUSPEND != 0 {
                header.suspend_ms.clamp(0, i64::from(LONG_POLLING_MS_MAX)) as u32
            } else {
                0
            },
            sql: filter.sql,
            stored_records: true,
        };
        let pulled = self
            .local_node()
            .await
            .map_err(|error| Box::new(RemotingCommand::system_error(request, error)))?
            .pull(pull)
            .await
            .map_err(|status| Box::new(status_reply(request, &status)))?
            .into_inner();
        Ok(pull_reply(request, pulled))
    }

    /// The filter `header`'s pull is served with: its own expression when it carries one,
    /// else its group's registered subscription of the topic.
    async fn pull_filter(
        &self,
        request: &RemotingCommand,
        header: &PullHeader<'_>,
    ) -> Answered<PullFilter> {
        let (expression_type, expression) = if header.sys_flag & PULL_FLAG_SUBSCRIPTION != 0 {
            (
                header.expression_type.unwrap_or_default().to_owned(),
                header.subscription.unwrap_or_default().to_owned(),
            )
        } else {
            let registered = self
                .registered_subscription(request, header.group, header.topic, header.sub_version)
                .await?;
            (registered.expression_type, registered.expression)
        };
        pull_filter(&expression_type, &expression).map_err(|error| {
            Box::new(RemotingCommand::response_to(
                request,
                response::SUBSCRIPTION_PARSE_FAILED,
                Some(error),
            ))
        })
    }

    /// `group`'s subscription of `topic`, as known here from heartbeats or else as the
    /// leader's consumer registry holds it.
    async fn registered_subscription(
        &self,
        request: &RemotingCommand,
        group: &str,
        topic: &str,
        sub_version: i64,
    ) -> Answered<pb::SubscriptionData> {
        if let Some(known) = self.subscriptions.find(group, topic, sub_version) {
            return Ok(known);
        }
        let registered = self
            .members(request, group)
            .await?
            .into_iter()
            .flat_map(|member| member.subscriptions)
            .find(|subscription| subscription.topic == topic)
            .ok_or_else(|| {
                Box::new(RemotingCommand::response_to(
                    request,
                    response::SUBSCRIPTION_NOT_EXIST,
                    Some(format!(
                        "the consumer group {group} has no subscription to {topic}: its \
                         consumers register one with their heartbeat"
                    )),
                ))
            })?;
        self.subscriptions
            .learn(group, registered.clone(), sub_version);
        Ok(registered)
    }
}

/// The 4.x reply to a pull the node answered with `pulled`.
fn pull_reply(request: &RemotingCommand, pulled: pb::PullResponse) -> RemotingCommand {
    let code = match pulled.status() {
        pb::PullStatus::Found => response::SUCCESS,
        pb::PullStatus::NoNewMessage => response::PULL_NOT_FOUND,
        pb::PullStatus::NoMatchedMessage => response::PULL_RETRY_IMMEDIATELY,
        pb::PullStatus::OffsetIllegal => response::PULL_OFFSET_MOVED,
    };
    let mut reply = RemotingCommand::response_to(request, code, None);
    reply.body = pulled.stored_records;
    let fields = &mut reply.ext_fields;
    fields.insert("suggestWhichBrokerId", SUGGESTED_BROKER_ID.to_string());
    fields.insert("nextBeginOffset", pulled.next_offset.to_string());
    fields.insert("minOffset", pulled.min_offset.to_string());
    fields.insert("maxOffset", pulled.max_offset.to_string());
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::request;

    fn answered(status: pb::PullStatus) -> RemotingCommand {
        let pull = RemotingCommand {
            code: request::PULL_MESSAGE,
            opaque: 9,
            ..RemotingCommand::default()
        };
        let pulled = pb::PullResponse {
            status: status as i32,
            stored_records: bytes::Bytes::from_static(b"records"),
            next_offset: 7,
            min_offset: 2,
            max_offset: 11,
            ..pb::PullResponse::default()
        };
        pull_reply(&pull, pulled)
    }

    #[test]
    fn each_pull_status_has_its_4x_code_and_every_reply_the_four_offsets() {
        for (status, code) in [
            (pb::PullStatus::Found, response::SUCCESS),
            (pb::PullStatus::NoNewMessage, response::PULL_NOT_FOUND),
            (
                pb::PullStatus::NoMatchedMessage,
                response::PULL_RETRY_IMMEDIATELY,
            ),
            (pb::PullStatus::OffsetIllegal, response::PULL_OFFSET_MOVED),
        ] {
            let reply = answered(status);
            assert_eq!((reply.code, reply.opaque), (code, 9), "{status:?}");
            let fields = &reply.ext_fields;
            assert_eq!(fields.get("suggestWhichBrokerId"), Some("1"));
            assert_eq!(fields.get("nextBeginOffset"), Some("7"));
            assert_eq!(fields.get("minOffset"), Some("2"));
            assert_eq!(fields.get("maxOffset"), Some("11"));
        }
        assert_eq!(&answered(pb::PullStatus::Found).body[..], b"records");
    }
}
