//! `SendMessage`: a 5.x client's messages checked at the edge, turned into rocketraft
//! messages and sent to one queue by the SDK (which finds the group's leader). A request of
//! one message (what the official clients send) goes through the SDK's send lanes, so
//! concurrent requests to one queue share a broker request; a request of several goes as
//! one batch of its own.
//!
//! How the 5.x system properties are kept: the tag as `TAGS`, the keys as `KEYS`, the
//! client's message id as `UNIQ_KEY` (5.x clients make it; it is kept as sent), a FIFO
//! message's group as `__SHARDINGKEY` (and the queue its hash picks), a DELAY message's
//! delivery timestamp as a timer (`TIMER_DELIVER_MS`), the born time as the record's born
//! timestamp, the born host name as `__BORNHOST` and the client's address as the record's
//! born host. A TRANSACTION message becomes a half message (`crate::transaction`).
//!
//! Invariant: a request either fails whole, storing nothing, or every message of it is
//! stored (one Raft entry).

use rocketraft_domain::topic_type::TopicTypeMeaning;
use std::net::SocketAddr;

use rocketraft_client::message::Message;
use rocketraft_client::producer::Producer;
use rocketraft_client::producer::SendOptions;
use rocketraft_domain::limits::SEND_BATCH_BODY_BYTES_MAX;
use rocketraft_domain::limits::SEND_BATCH_COUNT_MAX;
use rocketraft_domain::names::validate_topic_name;
use rocketraft_domain::property_keys::BORN_HOST;
use rocketraft_domain::property_keys::PGROUP;
use rocketraft_domain::property_keys::SHARDING_KEY;
use rocketraft_domain::property_keys::SYSTEM_KEYS;
use rocketraft_domain::property_keys::TRAN_MSG;
use rocketraft_domain::property_keys::UNIQ_KEY;
use rocketraft_domain::time::now_ms;

use crate::message::delivery_ms;
use crate::message::to_ms;
use crate::pb;
use crate::pb::Code;
use crate::route;
use crate::status;
use crate::transaction::transaction_id;

/// One message's body at most (RocketMQ's default `maxMessageSize`); clients learn it from
/// their settings.
pub const MESSAGE_BODY_BYTES_MAX: usize = SEND_BATCH_BODY_BYTES_MAX;

/// A request checked and turned into one rocketraft batch.
#[derive(Debug)]
pub struct Batch {
    messages: Vec<Message>,
    ids: Vec<String>,
    /// The message types of the messages, each once.
    kinds: Vec<pb::MessageType>,
    options: SendOptions,
    /// Half messages of transactions, all of them.
    transactional: bool,
}

/// Why a request was refused before anything was sent.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused {
    pub code: Code,
    pub reason: String,
}

fn refuse(code: Code, reason: impl Into<String>) -> Refused {
    Refused {
        code,
        reason: reason.into(),
    }
}

/// Checks `request` from a client at `peer`; timers may reach at most `timer_max_delay_ms`
/// ahead.
pub fn to_batch(
    request: pb::SendMessageRequest,
    peer: Option<SocketAddr>,
    timer_max_delay_ms: u64,
) -> Result<Batch, Refused> {
    let count = request.messages.len();
    if count == 0 {
        return Err(refuse(
            Code::BadRequest,
            "a send holds at least one message",
        ));
    }
    if count > SEND_BATCH_COUNT_MAX {
        return Err(refuse(
            Code::BadRequest,
            format!("a send holds at most {SEND_BATCH_COUNT_MAX} messages, not {count}"),
        ));
    }
    let mut options = SendOptions {
        born_host: peer,
        ..SendOptions::default()
    };
    let mut batch = Batch {
        messages: Vec::with_capacity(count),
        ids: Vec::with_capacity(count),
        kinds: Vec::new(),
        options: SendOptions::default(),
        transactional: false,
    };
    let mut body_bytes = 0;
    for (index, message) in request.messages.into_iter().enumerate() {
        let system = message.system_properties.clone().unwrap_or_default();
        let converted = to_message(message, timer_max_delay_ms)?;
        body_bytes += converted.body.len();
        let transactional = system.message_type() == pb::MessageType::Transaction;
        if index == 0 {
            options.order_key = system.message_group.clone();
            options.born_timestamp_ms = system.born_timestamp.as_ref().map(to_ms);
            batch.transactional = transactional;
        } else if batch.transactional != transactional {
            return Err(refuse(
                Code::BadRequest,
                "a send holds transactional messages only, or none",
            ));
        } else if batch.messages[0].topic != converted.topic {
            return Err(refuse(Code::BadRequest, "a send goes to one topic"));
        } else if options.order_key != system.message_group {
            return Err(refuse(
                Code::IllegalMessageGroup,
                "a send holds messages of one message group",
            ));
        }
        if !batch.kinds.contains(&system.message_type()) {
            batch.kinds.push(system.message_type());
        }
        batch.ids.push(system.message_id);
        batch.messages.push(converted);
    }
    if body_bytes > SEND_BATCH_BODY_BYTES_MAX {
        return Err(refuse(
            Code::PayloadTooLarge,
            format!(
                "a send's bodies hold at most {SEND_BATCH_BODY_BYTES_MAX} bytes, not {body_bytes}"
            ),
        ));
    }
    batch.options = options;
    Ok(batch)
}

/// One 5.x message as a rocketraft message, or why it is refused.
fn to_message(message: pb::Message, timer_max_delay_ms: u64) -> Result<Message, Refused> {
    let topic = message.topic.unwrap_or_default();
    if !topic.resource_namespace.is_empty() {
        return Err(refuse(
            Code::IllegalTopic,
            format!(
                "namespace {:?}: rocketraft has no namespaces; send without one",
                topic.resource_namespace
            ),
        ));
    }
    validate_topic_name(&topic.name).map_err(|reason| refuse(Code::IllegalTopic, reason))?;
    let system = message.system_properties.unwrap_or_default();
    if message.body.len() > MESSAGE_BODY_BYTES_MAX {
        return Err(refuse(
            Code::MessageBodyTooLarge,
            format!(
                "a message body holds at most {MESSAGE_BODY_BYTES_MAX} bytes, not {}",
                message.body.len()
            ),
        ));
    }
    if message.body.is_empty() {
        return Err(refuse(Code::BadRequest, "a message body may not be empty"));
    }
    if system.message_id.is_empty() || !is_property_text(&system.message_id) {
        return Err(refuse(
            Code::IllegalMessageId,
            format!(
                "message id {:?}: not empty, no control characters",
                system.message_id
            ),
        ));
    }
    let mut converted = Message::new(topic.name, message.body);
    for (key, value) in message.user_properties {
        if SYSTEM_KEYS.contains(&key.as_str()) || key.is_empty() || !is_property_text(&key) {
            return Err(refuse(
                Code::IllegalMessagePropertyKey,
                format!(
                    "property {key:?}: not empty, no control characters, not a system property"
                ),
            ));
        }
        if !is_property_text(&value) {
            return Err(refuse(
                Code::IllegalMessagePropertyKey,
                format!("property {key:?}: its value holds a control character"),
            ));
        }
        converted = converted.with_property(key, value);
    }
    if let Some(tag) = system.tag {
        if tag.trim().is_empty() || tag.contains('|') || !is_property_text(&tag) {
            return Err(refuse(
                Code::IllegalMessageTag,
                format!("tag {tag:?}: not blank, no '|', no control characters"),
            ));
        }
        converted = converted.with_tags(tag);
    }
    if let Some(key) = system
        .keys
        .iter()
        .find(|key| key.trim().is_empty() || key.contains(' ') || !is_property_text(key))
    {
        return Err(refuse(
            Code::IllegalMessageKey,
            format!("key {key:?}: not blank, no spaces, no control characters"),
        ));
    }
    converted = converted.with_keys(system.keys);
    converted = converted.with_property(UNIQ_KEY, system.message_id);
    if !system.born_host.is_empty() && is_property_text(&system.born_host) {
        converted = converted.with_property(BORN_HOST, system.born_host);
    }
    let kind = pb::MessageType::try_from(system.message_type).unwrap_or_default();
    let delivery = system.delivery_timestamp.as_ref().map(delivery_ms);
    match (kind, &system.message_group, delivery) {
        (pb::MessageType::Normal, None, None) => {}
        (pb::MessageType::Fifo, Some(group), None) => {
            if group.trim().is_empty() || !is_property_text(group) {
                return Err(refuse(
                    Code::IllegalMessageGroup,
                    format!("message group {group:?}: not blank, no control characters"),
                ));
            }
            converted = converted.with_property(SHARDING_KEY, group.clone());
        }
        (pb::MessageType::Delay, None, Some(at_ms)) => {
            let latest = now_ms().saturating_add(timer_max_delay_ms as i64);
            if at_ms > latest {
                return Err(refuse(
                    Code::IllegalDeliveryTime,
                    format!(
                        "delivery timestamp {at_ms} ms is more than {timer_max_delay_ms} ms ahead"
                    ),
                ));
            }
            converted = converted.with_deliver_time_ms(at_ms);
        }
        (pb::MessageType::Transaction, None, None) => {}
        (kind, group, delivery) => {
            return Err(refuse(
                Code::MessagePropertyConflictWithType,
                format!(
                    "a {} message with{} a message group and with{} a delivery timestamp",
                    kind.as_str_name(),
                    if group.is_some() { "" } else { "out" },
                    if delivery.is_some() { "" } else { "out" },
                ),
            ));
        }
    }
    Ok(converted)
}

/// Sends a checked batch; the response has one entry per message, in order. Transactional
/// messages go as half messages of `producer`'s group, which its check-backs then reach. A
/// message type the topic does not take is refused (RocketMQ's topic message type check).
pub async fn send(producer: &Producer, batch: Batch) -> pb::SendMessageResponse {
    if let Some(refused) = refuse_type(producer, &batch).await {
        return pb::SendMessageResponse {
            status: status::status(refused.code, refused.reason),
            entries: Vec::new(),
        };
    }
    let transactional = batch.transactional;
    let messages: Vec<Message> = if transactional {
        batch
            .messages
            .into_iter()
            .map(|message| {
                message
                    .with_property(TRAN_MSG, "true")
                    .with_property(PGROUP, producer.group())
            })
            .collect()
    } else {
        batch.messages
    };
    let sent = match <[Message; 1]>::try_from(messages) {
        Ok([message]) => producer
            .send_with(message, batch.options)
            .await
            .map(|result| vec![result]),
        Err(messages) => producer.send_batch_with(messages, batch.options).await,
    };
    match sent {
        Ok(results) => pb::SendMessageResponse {
            status: status::ok(),
            entries: results
                .into_iter()
                .zip(batch.ids)
                .map(|(result, message_id)| pb::SendResultEntry {
                    status: status::ok(),
                    message_id,
                    transaction_id: if transactional {
                        transaction_id(&result.group, result.commit_log_offset)
                    } else {
                        String::new()
                    },
                    offset: result.queue_offset,
                })
                .collect(),
        },
        Err(error) => pb::SendMessageResponse {
            status: status::of_send_error(&error),
            entries: Vec::new(),
        },
    }
}

/// Why `batch` holds a message type its topic does not take, if it does. A topic without a
/// route is left to the send, which says so.
async fn refuse_type(producer: &Producer, batch: &Batch) -> Option<Refused> {
    let topic = &batch.messages.first()?.topic;
    let route = producer.route(topic).await.ok()?;
    let kind = batch
        .kinds
        .iter()
        .find(|kind| !route::takes(&route, **kind))?;
    let mut takes: Vec<&str> = route
        .groups
        .iter()
        .map(|group| group.message_type.name())
        .collect();
    takes.sort_unstable();
    takes.dedup();
    Some(refuse(
        Code::MessagePropertyConflictWithType,
        format!(
            "topic {topic} takes {} messages, not {}",
            takes.join(" and "),
            kind.as_str_name()
        ),
    ))
}

/// Text a property may hold: no control characters (the property encoding's separators are
/// among them).
fn is_property_text(text: &str) -> bool {
    !text.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_DELAY_MS: u64 = 60_000;

    fn message(body_bytes: usize) -> pb::Message {
        pb::Message {
            topic: Some(pb::Resource {
                resource_namespace: String::new(),
                name: "T".into(),
            }),
            user_properties: Default::default(),
            system_properties: Some(pb::SystemProperties {
                message_id: "01ABCDEF".into(),
                message_type: pb::MessageType::Normal as i32,
                ..Default::default()
            }),
            body: vec![b'x'; body_bytes].into(),
        }
    }

    fn with(
        mut message: pb::Message,
        change: impl FnOnce(&mut pb::SystemProperties),
    ) -> pb::Message {
        change(message.system_properties.as_mut().expect("set above"));
        message
    }

    fn check(messages: Vec<pb::Message>) -> Result<Batch, Refused> {
        to_batch(pb::SendMessageRequest { messages }, None, MAX_DELAY_MS)
    }

    fn refused_with(messages: Vec<pb::Message>) -> Code {
        check(messages).expect_err("refused").code
    }

    #[test]
    fn a_body_may_hold_the_limit_and_not_a_byte_more() {
        assert!(check(vec![message(MESSAGE_BODY_BYTES_MAX)]).is_ok());
        assert_eq!(
            refused_with(vec![message(MESSAGE_BODY_BYTES_MAX + 1)]),
            Code::MessageBodyTooLarge
        );
        assert_eq!(refused_with(vec![message(0)]), Code::BadRequest);
    }

    #[test]
    fn a_send_may_hold_the_count_and_byte_limits_and_no_more() {
        assert!(check(vec![message(1); SEND_BATCH_COUNT_MAX]).is_ok());
        assert_eq!(
            refused_with(vec![message(1); SEND_BATCH_COUNT_MAX + 1]),
            Code::BadRequest
        );
        let half = SEND_BATCH_BODY_BYTES_MAX / 2;
        assert!(check(vec![message(half), message(half)]).is_ok());
        assert_eq!(
            refused_with(vec![message(half), message(half + 1)]),
            Code::PayloadTooLarge
        );
        assert_eq!(refused_with(Vec::new()), Code::BadRequest);
    }

    #[test]
    fn system_properties_become_rocketraft_properties() {
        let message = with(message(3), |system| {
            system.tag = Some("TagA".into());
            system.keys = vec!["k1".into(), "k2".into()];
            system.born_host = "app-host".into();
            system.born_timestamp = Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 5_000_000,
            });
        });
        let batch = check(vec![message]).expect("accepted");
        let stored = &batch.messages[0];
        assert_eq!(stored.tags.as_deref(), Some("TagA"));
        assert_eq!(stored.keys, ["k1", "k2"]);
        assert_eq!(stored.properties[UNIQ_KEY], "01ABCDEF");
        assert_eq!(stored.properties[BORN_HOST], "app-host");
        assert_eq!(batch.ids, ["01ABCDEF"]);
        assert_eq!(batch.options.born_timestamp_ms, Some(1_700_000_000_005));
        assert_eq!(batch.options.order_key, None);
    }

    #[test]
    fn bad_names_and_properties_get_their_codes() {
        let tag = |tag: &str| with(message(1), |system| system.tag = Some(tag.into()));
        assert_eq!(refused_with(vec![tag("a|b")]), Code::IllegalMessageTag);
        assert_eq!(refused_with(vec![tag(" ")]), Code::IllegalMessageTag);
        let key = |key: &str| with(message(1), |system| system.keys = vec![key.into()]);
        assert_eq!(refused_with(vec![key("a b")]), Code::IllegalMessageKey);
        assert_eq!(refused_with(vec![key("")]), Code::IllegalMessageKey);
        let property = |key: &str, value: &str| {
            let mut message = message(1);
            message.user_properties.insert(key.into(), value.into());
            message
        };
        assert!(check(vec![property("shop", "north")]).is_ok());
        assert_eq!(
            refused_with(vec![property(UNIQ_KEY, "forged")]),
            Code::IllegalMessagePropertyKey
        );
        assert_eq!(
            refused_with(vec![property("shop", "a\u{1}b")]),
            Code::IllegalMessagePropertyKey
        );
        let id = with(message(1), |system| system.message_id.clear());
        assert_eq!(refused_with(vec![id]), Code::IllegalMessageId);
        let mut namespaced = message(1);
        namespaced.topic.as_mut().expect("set").resource_namespace = "ns".into();
        assert_eq!(refused_with(vec![namespaced]), Code::IllegalTopic);
    }

    #[test]
    fn a_message_type_must_match_its_properties() {
        let fifo = |group: &str| {
            with(message(1), |system| {
                system.message_type = pb::MessageType::Fifo as i32;
                system.message_group = Some(group.into());
            })
        };
        let batch = check(vec![fifo("g1"), fifo("g1")]).expect("one group");
        assert_eq!(batch.options.order_key.as_deref(), Some("g1"));
        assert_eq!(batch.messages[1].properties[SHARDING_KEY], "g1");
        assert_eq!(
            refused_with(vec![fifo("g1"), fifo("g2")]),
            Code::IllegalMessageGroup
        );
        let normal_with_group = with(fifo("g1"), |system| {
            system.message_type = pb::MessageType::Normal as i32;
        });
        assert_eq!(
            refused_with(vec![normal_with_group]),
            Code::MessagePropertyConflictWithType
        );
        let delay = |at_ms: i64| {
            with(message(1), |system| {
                system.message_type = pb::MessageType::Delay as i32;
                system.delivery_timestamp = Some(prost_types::Timestamp {
                    seconds: at_ms / 1000,
                    nanos: 0,
                });
            })
        };
        let soon = now_ms() + 10_000;
        let batch = check(vec![delay(soon)]).expect("within the timer limit");
        assert_eq!(
            batch.messages[0].properties[rocketraft_domain::property_keys::TIMER_DELIVER_MS],
            (soon / 1000 * 1000).to_string()
        );
        assert_eq!(
            refused_with(vec![delay(now_ms() + MAX_DELAY_MS as i64 + 5_000)]),
            Code::IllegalDeliveryTime
        );
        let transactional = || {
            with(message(1), |system| {
                system.message_type = pb::MessageType::Transaction as i32;
            })
        };
        assert!(
            check(vec![transactional(), transactional()])
                .expect("halves")
                .transactional
        );
        assert_eq!(
            refused_with(vec![transactional(), message(1)]),
            Code::BadRequest,
            "halves travel alone"
        );
        let delay_without_time = with(message(1), |system| {
            system.message_type = pb::MessageType::Delay as i32;
        });
        assert_eq!(
            refused_with(vec![delay_without_time]),
            Code::MessagePropertyConflictWithType
        );
    }
}
