//! Handing a message the listener refused back to the brokers, clustering only.
//!
//! First `SendMessageBack` to the leader of the group that stores the message (a copy goes to
//! `%RETRY%<group>` or, past the maximum, `%DLQ%<group>`). If that fails, the client sends the
//! copy to `%RETRY%<group>` itself as an ordinary delayed message with the same properties
//! and its reconsume count, and the broker applies the same dead-letter rule. If that fails
//! too, the message is not handed back: it stays in the queue's buffer, holding the offset,
//! and is consumed again after a pause.

use std::time::Duration;

use rocketraft_domain::names::RETRY_DELAY_LEVEL_BASE;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common as common_pb;

use crate::consumer::Shared;
use crate::message::MessageExt;
use crate::message::encode_properties;
use crate::message::property;

/// How long one hand-back call may take, retries included.
const SEND_BACK_TIMEOUT: Duration = Duration::from_secs(3);

/// Hands `message` back; true once a copy is stored (retry or dead letter).
pub async fn hand_back(shared: &Shared, message: &MessageExt, delay_level: i32) -> bool {
    let request = pb::SendMessageBackRequest {
        group: shared.config.group.clone(),
        commit_log_offset: message.commit_log_offset,
        delay_level,
        max_reconsume_times: shared
            .config
            .max_reconsume_times
            .map_or(0, |max| max as i32),
        deduplicate: false,
    };
    let sent_back = shared
        .brokers
        .on_leader(&message.group, SEND_BACK_TIMEOUT, |mut client, repeat| {
            // A repeat may follow a call whose copy was stored: deduplicate it.
            let call = pb::SendMessageBackRequest {
                deduplicate: repeat,
                ..request.clone()
            };
            async move { Ok(client.send_message_back(call).await?.into_inner()) }
        })
        .await;
    let error = match sent_back {
        Ok(response) => {
            tracing::debug!(
                msg_id = message.msg_id,
                topic = response.topic,
                "handed back"
            );
            return true;
        }
        Err(error) => error,
    };
    tracing::warn!(msg_id = message.msg_id, %error, "send back failed; sending the retry copy directly");
    let copy = retry_copy(shared, message, delay_level);
    let sent = shared
        .brokers
        .on_leader(&message.group, SEND_BACK_TIMEOUT, |mut client, _repeat| {
            let copy = copy.clone();
            async move { client.send(copy).await.map(|_| ()) }
        })
        .await;
    match sent {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(msg_id = message.msg_id, %error, "retry copy not stored; consuming it again locally");
            false
        }
    }
}

/// The copy a client sends to `%RETRY%<group>` when `SendMessageBack` fails.
fn retry_copy(shared: &Shared, message: &MessageExt, delay_level: i32) -> pb::SendRequest {
    let mut properties: std::collections::HashMap<&str, String> = message
        .properties
        .iter()
        .map(|(key, value)| (key, value.to_owned()))
        .collect();
    // The original topic, as the listener saw it.
    properties
        .entry(property::RETRY_TOPIC)
        .or_insert_with(|| message.topic.clone());
    properties
        .entry(property::ORIGIN_MESSAGE_ID)
        .or_insert_with(|| message.msg_id.clone());
    let reconsume_times = message.reconsume_times + 1;
    properties.insert(property::RECONSUME_TIME, reconsume_times.to_string());
    let max = match (delay_level < 0, shared.config.max_reconsume_times) {
        // Straight to the dead-letter topic: any count passes a maximum of 0.
        (true, _) => Some(0),
        (false, max) => max,
    };
    if let Some(max) = max {
        properties.insert(property::MAX_RECONSUME_TIMES, max.to_string());
    }
    let level = if delay_level > 0 {
        delay_level
    } else {
        RETRY_DELAY_LEVEL_BASE + message.reconsume_times
    };
    properties.insert(property::DELAY, level.to_string());
    // A retry waits its delay level, not the timer the message once had.
    let timers = property::TIMER_KEYS.into_iter();
    for internal in [property::REAL_TOPIC, property::REAL_QID]
        .into_iter()
        .chain(timers)
    {
        properties.remove(internal);
    }
    let topic = shared.retry_topic();
    pb::SendRequest {
        topic: topic.clone(),
        queue_id: 0,
        messages: vec![common_pb::Message {
            topic,
            body: message.body.clone(),
            properties: encode_properties(
                properties.iter().map(|(key, value)| (*key, value.as_str())),
            ),
            ..Default::default()
        }],
        born_timestamp_ms: message.born_timestamp_ms,
        born_host: String::new(),
        // `SendMessageBack` failed, perhaps after storing this very copy (same UNIQ_KEY and
        // reconsume count): the broker keeps one.
        deduplicate: true,
        queue_ids: Vec::new(),
    }
}
