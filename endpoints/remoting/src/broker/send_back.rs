//! `CONSUMER_SEND_MSG_BACK`: a 4.x consumer could not consume a message and hands it back by
//! its CommitLog offset; the group's leader stores a copy in `%RETRY%<group>`, delayed by its
//! delay level, or in `%DLQ%<group>` once its reconsume count reached the maximum, as the
//! SDK's `sendMessageBack` does.
//!
//! Any node of the group takes it: Java sends it to broker id 0, the C++ client to the
//! message's store host. A repeat after a lost reply is stored once (the leader deduplicates
//! it by the message's reconsume count).
//!
//! Invariant: `maxReconsumeTimes` is honoured only from clients of RocketMQ 3.4.9 on, as a
//! Java broker honours it; older clients, and a negative value (Java's "unset"), get the
//! group's maximum.

use bytes::Bytes;
use rocketraft_proto::broker as pb;

use super::Answered;
use super::BrokerHandler;
use super::read;
use crate::command::RemotingCommand;

/// `MQVersion.Version.V3_4_9.ordinal()`: the first client version whose
/// `maxReconsumeTimes` a broker honours.
const MAX_RECONSUME_TIMES_SINCE_VERSION: i32 = 121;

impl BrokerHandler {
    pub(super) async fn send_back(&self, request: &RemotingCommand) -> Answered {
        let back = read(request, |fields| {
            let max_reconsume_times = match request.version >= MAX_RECONSUME_TIMES_SINCE_VERSION {
                true => fields.optional_i32("maxReconsumeTimes")?.unwrap_or(0),
                false => 0,
            };
            Ok(pb::SendMessageBackRequest {
                group: fields.required_str("group")?.to_owned(),
                commit_log_offset: fields.required_i64("offset")?,
                delay_level: fields.required_i32("delayLevel")?,
                max_reconsume_times: max_reconsume_times.max(0),
                deduplicate: false,
            })
        })?;
        self.on_leader(request, |mut client, repeat| {
            let back = pb::SendMessageBackRequest {
                deduplicate: repeat,
                ..back.clone()
            };
            async move { client.send_message_back(back).await }
        })
        .await?;
        Ok(RemotingCommand::success(request, Bytes::new()))
    }
}
