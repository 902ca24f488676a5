//! Pop consumption for 5.x consumers: `ReceiveMessage` pops from the leader of the queue's
//! broker group (the broker's `Pop`, whose state goes through Raft), `AckMessage`,
//! `ChangeInvisibleDuration` and `ForwardMessageToDeadLetterQueue` change what is in flight
//! (`ChangePopped`).
//!
//! A receipt handle names one delivery: `<broker group>:<queue id>:<queue offset>:<receipt>`,
//! the receipt being the log index of the entry that made it; an ack or change with a handle
//! of an earlier delivery, or after the invisible time ended, is refused with
//! `INVALID_RECEIPT_HANDLE` and its reason. Every received message carries its delivery
//! attempt and a SHA1 digest of its body (uppercase hex).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rocketraft_client::brokers::Brokers;
use rocketraft_client::brokers::CallError;
use rocketraft_client::message::MessageExt;
use rocketraft_domain::limits::LONG_POLLING_MS_MAX;
use rocketraft_domain::limits::POP_BATCH_COUNT_MAX;
use rocketraft_domain::limits::POP_CHANGE_INVISIBLE_MS_MIN;
use rocketraft_domain::limits::POP_INVISIBLE_MS_MAX;
use rocketraft_domain::limits::POP_INVISIBLE_MS_MIN;
use rocketraft_domain::names::validate_group_name;
use rocketraft_domain::names::validate_topic_name;
use rocketraft_domain::property_keys::SHARDING_KEY;
use rocketraft_domain::property_keys::TIMER_DELIVER_MS;
use rocketraft_domain::time::now_ms;
use rocketraft_proto::POP_ANY_QUEUE;
use rocketraft_proto::broker as broker_pb;
use rocketraft_proto::common::ResponseCode;
use tokio_util::sync::CancellationToken;

use crate::message::timestamp;
use crate::message::to_v5;
use crate::pb;
use crate::pb::Code;
use crate::receive_stream::ReceiveStream;
use crate::receive_stream::Tracking;
use crate::renewals::Delivery;
use crate::renewals::DeliveryKey;
use crate::renewals::Renew;
use crate::renewals::Renewals;
use crate::status;

/// Messages one receive returns at most (the brokers' pop limit).
const RECEIVE_BATCH_MAX: i32 = POP_BATCH_COUNT_MAX as i32;
/// The shortest and longest invisible time a receive may ask for (the brokers' limits); a
/// change may ask for anything from 0 (visible again at once) to the longest.
const INVISIBLE_MIN: Duration = Duration::from_millis(POP_INVISIBLE_MS_MIN);
const INVISIBLE_MAX: Duration = Duration::from_millis(POP_INVISIBLE_MS_MAX);
/// What a change of 0 asks the brokers for: the shortest change, which makes the message
/// visible again at once (a change of 0 is an ack there).
const VISIBLE_AT_ONCE: Duration = Duration::from_millis(POP_CHANGE_INVISIBLE_MS_MIN);
/// How long a receive may wait for messages at most (the brokers' long-polling limit).
const LONG_POLLING_MAX: Duration = Duration::from_millis(LONG_POLLING_MS_MAX as u64);
/// Answered this much before the client's long-polling timeout, so the answer arrives before
/// the client gives up on the call.
const LONG_POLLING_MARGIN: Duration = Duration::from_millis(500);
/// How long a call to a group's leader may take besides any long polling.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// Where one delivery is, as its receipt handle says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Handle {
    group: String,
    queue_id: i32,
    queue_offset: i64,
    receipt: u64,
}

impl Handle {
    fn text(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.group, self.queue_id, self.queue_offset, self.receipt
        )
    }

    fn parse(text: &str) -> Option<Handle> {
        let mut parts = text.split(':');
        let handle = Handle {
            group: parts.next().filter(|group| !group.is_empty())?.to_owned(),
            queue_id: parts.next()?.parse().ok().filter(|id| *id >= 0)?,
            queue_offset: parts.next()?.parse().ok().filter(|offset| *offset >= 0)?,
            receipt: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(handle)
    }
}

/// A refusal: the code and reason.
type Refusal = (Code, String);

/// Pops for a receive by client `client_id`; what its stream answers: a status, then the
/// messages, then the time. An `auto_renew` receive's deliveries are renewed by `renewals`
/// once the stream handed them all over ([`crate::receive_stream`]).
pub async fn receive(
    brokers: &Brokers,
    renewals: &Arc<Renewals>,
    (client_id, termination): (Option<String>, Option<CancellationToken>),
    request: pb::ReceiveMessageRequest,
) -> ReceiveStream {
    let mut tracking = Tracking::new(renewals.clone());
    let popping = pop(brokers, renewals, &mut tracking, client_id, request);
    // A client that leaves ends its held receive: what a pop was taking comes back once its
    // invisible time ends, as for any delivery that was never acked.
    let popped = match termination {
        Some(ended) => tokio::select! {
            popped = popping => popped,
            () = ended.cancelled() => Ok(Vec::new()),
        },
        None => popping.await,
    };
    ReceiveStream::new(responses(popped), Some(tracking))
}

fn responses(popped: Result<Vec<pb::Message>, Refusal>) -> Vec<pb::ReceiveMessageResponse> {
    match popped {
        Ok(messages) if messages.is_empty() => vec![status_response(status::status(
            Code::MessageNotFound,
            "no message to receive",
        ))],
        Ok(messages) => {
            let mut responses = Vec::with_capacity(messages.len() + 2);
            responses.push(status_response(status::ok()));
            responses.extend(
                messages
                    .into_iter()
                    .map(|message| pb::ReceiveMessageResponse {
                        content: Some(pb::receive_message_response::Content::Message(message)),
                    }),
            );
            responses.push(pb::ReceiveMessageResponse {
                content: Some(pb::receive_message_response::Content::DeliveryTimestamp(
                    timestamp(now_ms()),
                )),
            });
            responses
        }
        Err((code, reason)) => vec![status_response(status::status(code, reason))],
    }
}

fn status_response(status: Option<pb::Status>) -> pb::ReceiveMessageResponse {
    pb::ReceiveMessageResponse {
        content: status.map(pb::receive_message_response::Content::Status),
    }
}

async fn pop(
    brokers: &Brokers,
    renewals: &Renewals,
    tracking: &mut Tracking,
    client_id: Option<String>,
    request: pb::ReceiveMessageRequest,
) -> Result<Vec<pb::Message>, Refusal> {
    let group = consumer_group(request.group.as_ref())?;
    let queue = request.message_queue.unwrap_or_default();
    let topic = queue.topic.unwrap_or_default().name;
    validate_topic_name(&topic).map_err(|reason| (Code::IllegalTopic, reason))?;
    let broker_group = queue.broker.unwrap_or_default().name;
    if !(1..=RECEIVE_BATCH_MAX).contains(&request.batch_size) {
        return Err((
            Code::BadRequest,
            format!(
                "a receive takes 1 to {RECEIVE_BATCH_MAX} messages, not {}",
                request.batch_size
            ),
        ));
    }
    let invisible = if request.auto_renew {
        renewals.invisible()
    } else {
        invisible_duration(request.invisible_duration.as_ref(), INVISIBLE_MIN)?
    };
    let (tags, sql) = filter(request.filter_expression.unwrap_or_default())?;
    let long_polling = request
        .long_polling_timeout
        .and_then(|timeout| Duration::try_from(timeout).ok())
        .unwrap_or(LONG_POLLING_MAX);
    let wait = long_polling
        .saturating_sub(LONG_POLLING_MARGIN)
        .min(LONG_POLLING_MAX);
    // Learns the topic's groups and their leaders.
    brokers
        .route(&topic)
        .await
        .map_err(|error| (Code::TopicNotFound, error.to_string()))?;
    // The client names one queue, but a consumer waiting on one empty queue while others
    // fill would starve: the broker group pops any of the topic's queues (as RocketMQ's proxy).
    let pop = broker_pb::PopRequest {
        group,
        topic,
        queue_id: POP_ANY_QUEUE,
        max_messages: request.batch_size as u32,
        invisible_ms: invisible.as_millis() as u64,
        tags,
        sql,
        max_wait_ms: wait.as_millis() as u32,
    };
    let response = brokers
        .on_leader(&broker_group, wait + CALL_TIMEOUT, |mut client, _repeat| {
            let pop = pop.clone();
            async move { Ok(client.pop(pop).await?.into_inner()) }
        })
        .await
        .map_err(refusal)?;
    Ok(response
        .messages
        .into_iter()
        .filter_map(|popped| {
            let message = MessageExt::from_pulled(popped.message?, &broker_group);
            if request.auto_renew {
                tracking.track(
                    DeliveryKey {
                        broker_group: broker_group.clone(),
                        queue_id: message.queue_id,
                        queue_offset: message.queue_offset,
                        first_receipt: popped.receipt,
                    },
                    Delivery {
                        consumer_group: pop.group.clone(),
                        topic: pop.topic.clone(),
                        client_id: client_id.clone(),
                        receipt: popped.receipt,
                    },
                );
            }
            Some(received(
                &message,
                &broker_group,
                popped.attempt,
                popped.receipt,
                invisible,
            ))
        })
        .collect())
}

/// A popped message as a 5.x consumer receives it.
fn received(
    message: &MessageExt,
    broker_group: &str,
    attempt: u32,
    receipt: u64,
    invisible: Duration,
) -> pb::Message {
    let kind = if message.properties.contains_key(SHARDING_KEY) {
        pb::MessageType::Fifo
    } else if message.properties.contains_key(TIMER_DELIVER_MS) {
        pb::MessageType::Delay
    } else {
        pb::MessageType::Normal
    };
    let mut v5 = to_v5(message, kind);
    if let Some(system) = v5.system_properties.as_mut() {
        system.receipt_handle = Some(
            Handle {
                group: broker_group.to_owned(),
                queue_id: message.queue_id,
                queue_offset: message.queue_offset,
                receipt,
            }
            .text(),
        );
        system.delivery_attempt = Some(attempt as i32);
        system.invisible_duration = prost_types::Duration::try_from(invisible).ok();
    }
    v5
}

/// `handle` with the receipt its delivery has now, if this endpoint renews it (the renewal
/// stops: the consumer is done with the message or sets its time itself).
async fn current(renewals: &Renewals, mut handle: Handle) -> Handle {
    let key = DeliveryKey {
        broker_group: handle.group.clone(),
        queue_id: handle.queue_id,
        queue_offset: handle.queue_offset,
        first_receipt: handle.receipt,
    };
    if let Some(receipt) = renewals.take(&key).await {
        handle.receipt = receipt;
    }
    handle
}

impl Renew for Arc<Brokers> {
    async fn renew(
        &self,
        key: &DeliveryKey,
        delivery: &Delivery,
        invisible: Duration,
    ) -> Result<Option<u64>, String> {
        let handle = Handle {
            group: key.broker_group.clone(),
            queue_id: key.queue_id,
            queue_offset: key.queue_offset,
            receipt: delivery.receipt,
        };
        let changed = change_one(
            self,
            (&delivery.consumer_group, &delivery.topic),
            &handle,
            invisible.as_millis() as u64,
            false,
        )
        .await;
        match changed {
            Ok(result) if result.outcome() == broker_pb::ChangeOutcome::ChangeDone => {
                Ok(Some(result.receipt))
            }
            Ok(_no_longer_in_flight) => Ok(None),
            Err((_, reason)) => Err(reason),
        }
    }
}

/// Acks the request's messages; one result per entry, in order.
pub async fn ack(
    brokers: &Brokers,
    renewals: &Renewals,
    request: pb::AckMessageRequest,
) -> pb::AckMessageResponse {
    let checked = consumer_group(request.group.as_ref()).and_then(|group| {
        let topic = request.topic.clone().unwrap_or_default().name;
        validate_topic_name(&topic).map_err(|reason| (Code::IllegalTopic, reason))?;
        Ok((group, topic))
    });
    let (group, topic) = match checked {
        Ok(checked) => checked,
        Err((code, reason)) => {
            return pb::AckMessageResponse {
                status: status::status(code, reason),
                entries: Vec::new(),
            };
        }
    };
    let mut statuses: Vec<Option<pb::Status>> = vec![None; request.entries.len()];
    // Entry indexes by the queue their handle names, so each queue's acks go in one call.
    let mut by_queue: BTreeMap<(String, i32), Vec<(usize, Handle)>> = BTreeMap::new();
    for (index, entry) in request.entries.iter().enumerate() {
        match Handle::parse(&entry.receipt_handle) {
            Some(handle) => {
                let handle = current(renewals, handle).await;
                by_queue
                    .entry((handle.group.clone(), handle.queue_id))
                    .or_default()
                    .push((index, handle));
            }
            None => statuses[index] = invalid_handle(&entry.receipt_handle),
        }
    }
    for ((broker_group, queue_id), handles) in by_queue {
        let changes = handles
            .iter()
            .map(|(_, handle)| broker_pb::PoppedChange {
                queue_offset: handle.queue_offset,
                receipt: handle.receipt,
                invisible_ms: 0,
                dead_letter: false,
            })
            .collect();
        let outcome = change(brokers, &broker_group, &group, &topic, queue_id, changes).await;
        for (position, (index, _)) in handles.iter().enumerate() {
            statuses[*index] = match &outcome {
                Ok(results) => results.get(position).map_or_else(
                    || status::status(Code::InternalError, "no result"),
                    result_status,
                ),
                Err((code, reason)) => status::status(*code, reason.clone()),
            };
        }
    }
    let entries: Vec<pb::AckMessageResultEntry> = request
        .entries
        .into_iter()
        .zip(statuses)
        .map(|(entry, status)| pb::AckMessageResultEntry {
            message_id: entry.message_id,
            receipt_handle: entry.receipt_handle,
            status,
        })
        .collect();
    pb::AckMessageResponse {
        status: overall(&entries),
        entries,
    }
}

/// The response status of an ack: OK if every entry is, the entries' code if they share one,
/// else `MULTIPLE_RESULTS`.
fn overall(entries: &[pb::AckMessageResultEntry]) -> Option<pb::Status> {
    let mut codes = entries.iter().map(|entry| {
        entry
            .status
            .as_ref()
            .map_or(Code::InternalError, pb::Status::code)
    });
    let Some(first) = codes.next() else {
        return status::status(Code::BadRequest, "an ack names at least one message");
    };
    if codes.all(|code| code == first) {
        return entries[0].status.clone();
    }
    status::status(Code::MultipleResults, "the entries' results differ")
}

/// Changes how long one delivered message stays invisible.
pub async fn change_invisible(
    brokers: &Brokers,
    renewals: &Renewals,
    request: pb::ChangeInvisibleDurationRequest,
) -> pb::ChangeInvisibleDurationResponse {
    // A failure answers the handle the client sent: the official Java client replaces its
    // message's handle with the answer's before it checks the status, and must still be able
    // to ack after a transient failure.
    let sent_handle = request.receipt_handle.clone();
    let refused = |status: Option<pb::Status>| pb::ChangeInvisibleDurationResponse {
        status,
        receipt_handle: sent_handle.clone(),
    };
    let refusal = |(code, reason): Refusal| refused(status::status(code, reason));
    let group = match consumer_group(request.group.as_ref()) {
        Ok(group) => group,
        Err(rejected) => return refusal(rejected),
    };
    let topic = request.topic.unwrap_or_default().name;
    let Some(handle) = Handle::parse(&request.receipt_handle) else {
        return pb::ChangeInvisibleDurationResponse {
            status: invalid_handle(&request.receipt_handle),
            receipt_handle: String::new(),
        };
    };
    // A change of 0 (the Node.js client's nack) makes the message visible again at once, as
    // RocketMQ's proxy does.
    let invisible = match invisible_duration(request.invisible_duration.as_ref(), Duration::ZERO) {
        Ok(invisible) => invisible.max(VISIBLE_AT_ONCE),
        Err(rejected) => return refusal(rejected),
    };
    let handle = current(renewals, handle).await;
    let changed = change_one(
        brokers,
        (&group, &topic),
        &handle,
        invisible.as_millis() as u64,
        false,
    )
    .await;
    match changed {
        Ok(result) if result.outcome() == broker_pb::ChangeOutcome::ChangeDone => {
            pb::ChangeInvisibleDurationResponse {
                status: status::ok(),
                receipt_handle: Handle {
                    receipt: result.receipt,
                    ..handle
                }
                .text(),
            }
        }
        Ok(result) => refused(result_status(&result)),
        Err(rejected) => refusal(rejected),
    }
}

/// Moves one delivered message to the group's dead-letter topic (a push consumer that gave
/// up on it).
pub async fn forward_to_dead_letters(
    brokers: &Brokers,
    renewals: &Renewals,
    request: pb::ForwardMessageToDeadLetterQueueRequest,
) -> Option<pb::Status> {
    let group = match consumer_group(request.group.as_ref()) {
        Ok(group) => group,
        Err((code, reason)) => return status::status(code, reason),
    };
    let topic = request.topic.unwrap_or_default().name;
    let Some(handle) = Handle::parse(&request.receipt_handle) else {
        return invalid_handle(&request.receipt_handle);
    };
    let handle = current(renewals, handle).await;
    match change_one(brokers, (&group, &topic), &handle, 0, true).await {
        Ok(result) => result_status(&result),
        Err((code, reason)) => status::status(code, reason),
    }
}

/// One change (see `broker_pb::PoppedChange`) of the delivery `handle` names, for a
/// (consumer group, topic), and its result.
async fn change_one(
    brokers: &Brokers,
    (group, topic): (&str, &str),
    handle: &Handle,
    invisible_ms: u64,
    dead_letter: bool,
) -> Result<broker_pb::ChangeResult, Refusal> {
    let changes = vec![broker_pb::PoppedChange {
        queue_offset: handle.queue_offset,
        receipt: handle.receipt,
        invisible_ms,
        dead_letter,
    }];
    change(
        brokers,
        &handle.group,
        group,
        topic,
        handle.queue_id,
        changes,
    )
    .await?
    .into_iter()
    .next()
    .ok_or_else(|| (Code::InternalError, "the broker answered no result".into()))
}

async fn change(
    brokers: &Brokers,
    broker_group: &str,
    group: &str,
    topic: &str,
    queue_id: i32,
    changes: Vec<broker_pb::PoppedChange>,
) -> Result<Vec<broker_pb::ChangeResult>, Refusal> {
    brokers
        .route(topic)
        .await
        .map_err(|error| (Code::TopicNotFound, error.to_string()))?;
    let request = broker_pb::ChangePoppedRequest {
        group: group.to_owned(),
        topic: topic.to_owned(),
        queue_id,
        changes,
    };
    let response = brokers
        .on_leader(broker_group, CALL_TIMEOUT, |mut client, _repeat| {
            let request = request.clone();
            async move { Ok(client.change_popped(request).await?.into_inner()) }
        })
        .await
        .map_err(refusal)?;
    Ok(response.results)
}

/// The 5.x status of one change's result.
fn result_status(result: &broker_pb::ChangeResult) -> Option<pb::Status> {
    let reason = match result.outcome() {
        broker_pb::ChangeOutcome::ChangeDone => return status::ok(),
        broker_pb::ChangeOutcome::ChangeNotInFlight => {
            "nothing is in flight there: acked already, or never delivered"
        }
        broker_pb::ChangeOutcome::ChangeStaleReceipt => {
            "the message was delivered again since: use the newer receipt handle"
        }
        broker_pb::ChangeOutcome::ChangeExpired => {
            "its invisible time ended: it will be delivered again"
        }
    };
    status::status(Code::InvalidReceiptHandle, reason)
}

fn invalid_handle(text: &str) -> Option<pb::Status> {
    status::status(
        Code::InvalidReceiptHandle,
        format!("receipt handle {text:?} is not one this endpoint gave out"),
    )
}

fn consumer_group(group: Option<&pb::Resource>) -> Result<String, Refusal> {
    let name = group.map_or("", |group| group.name.as_str());
    validate_group_name(name).map_err(|reason| (Code::IllegalConsumerGroup, reason))?;
    Ok(name.to_owned())
}

/// An invisible time of `min` to [`INVISIBLE_MAX`].
fn invisible_duration(
    duration: Option<&prost_types::Duration>,
    min: Duration,
) -> Result<Duration, Refusal> {
    duration
        .and_then(|duration| Duration::try_from(*duration).ok())
        .filter(|duration| (min..=INVISIBLE_MAX).contains(duration))
        .ok_or_else(|| {
            (
                Code::IllegalInvisibleTime,
                format!("an invisible time is {min:?} to {INVISIBLE_MAX:?}, got {duration:?}"),
            )
        })
}

/// The brokers' tags or SQL92 filter for a 5.x filter expression.
fn filter(expression: pb::FilterExpression) -> Result<(Vec<String>, String), Refusal> {
    let text = expression.expression.trim().to_owned();
    match expression.r#type() {
        pb::FilterType::Sql => {
            if text.is_empty() {
                return Err((
                    Code::IllegalFilterExpression,
                    "an empty SQL92 filter".into(),
                ));
            }
            Ok((Vec::new(), text))
        }
        pb::FilterType::Tag | pb::FilterType::Unspecified => {
            if text.is_empty() || text == "*" {
                return Ok((Vec::new(), String::new()));
            }
            let tags: Vec<String> = text.split("||").map(|tag| tag.trim().to_owned()).collect();
            if tags.iter().any(String::is_empty) {
                return Err((
                    Code::IllegalFilterExpression,
                    format!("tag expression {text:?} holds an empty tag"),
                ));
            }
            Ok((tags, String::new()))
        }
    }
}

/// The 5.x refusal of a call to a group's leader that failed.
fn refusal(error: CallError) -> Refusal {
    match &error {
        CallError::Rejected { status, .. } => {
            let code = match rocketraft_proto::response_code(status) {
                Some(ResponseCode::TopicNotExist) => Code::TopicNotFound,
                Some(ResponseCode::SubscriptionGroupNotExist) => Code::ConsumerGroupNotFound,
                Some(ResponseCode::LimitExceeded) => Code::TooManyRequests,
                _ => Code::BadRequest,
            };
            (code, status.message().to_owned())
        }
        CallError::Unavailable { .. } => (Code::HaNotAvailable, error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_handle_round_trips_and_forgeries_are_refused() {
        let handle = Handle {
            group: "broker-a".into(),
            queue_id: 3,
            queue_offset: 42,
            receipt: 1234,
        };
        assert_eq!(Handle::parse(&handle.text()), Some(handle));
        for forged in [
            "",
            "broker-a:3:42",
            "broker-a:3:42:1:9",
            ":3:42:1",
            "b:-1:0:1",
            "b:0:x:1",
        ] {
            assert_eq!(Handle::parse(forged), None, "{forged:?}");
        }
    }

    #[test]
    fn a_broker_refusal_gets_its_5x_code() {
        let refused = |code| {
            let status = rocketraft_proto::error_status(
                tonic::Code::FailedPrecondition,
                code,
                "refused".into(),
                None,
            );
            refusal(CallError::Rejected {
                group: "broker-a".into(),
                status,
            })
            .0
        };
        assert_eq!(refused(ResponseCode::TopicNotExist), Code::TopicNotFound);
        assert_eq!(
            refused(ResponseCode::SubscriptionGroupNotExist),
            Code::ConsumerGroupNotFound
        );
        assert_eq!(refused(ResponseCode::LimitExceeded), Code::TooManyRequests);
        assert_eq!(refused(ResponseCode::MessageIllegal), Code::BadRequest);
    }

    #[test]
    fn filter_expressions_become_tags_or_sql() {
        let tag = |text: &str| pb::FilterExpression {
            r#type: pb::FilterType::Tag as i32,
            expression: text.into(),
        };
        assert_eq!(filter(tag("*")), Ok((Vec::new(), String::new())));
        assert_eq!(
            filter(tag("TagA || TagB")),
            Ok((vec!["TagA".to_owned(), "TagB".to_owned()], String::new()))
        );
        assert_eq!(
            filter(tag("TagA ||")).map_err(|e| e.0),
            Err(Code::IllegalFilterExpression)
        );
        let sql = pb::FilterExpression {
            r#type: pb::FilterType::Sql as i32,
            expression: "a > 1".into(),
        };
        assert_eq!(filter(sql), Ok((Vec::new(), "a > 1".to_owned())));
    }

    #[test]
    fn invisible_times_at_the_boundary() {
        let of = |duration: Duration| prost_types::Duration::try_from(duration).ok();
        let receive = |duration| invisible_duration(of(duration).as_ref(), INVISIBLE_MIN);
        assert!(receive(INVISIBLE_MIN).is_ok());
        assert!(receive(INVISIBLE_MAX).is_ok());
        let short = INVISIBLE_MIN - Duration::from_millis(1);
        assert_eq!(
            receive(short).map_err(|e| e.0),
            Err(Code::IllegalInvisibleTime)
        );
        let long = INVISIBLE_MAX + Duration::from_millis(1);
        assert!(receive(long).is_err());
        assert!(invisible_duration(None, INVISIBLE_MIN).is_err());
        // A change may ask for 0: visible again at once, as RocketMQ's proxy takes it.
        let change = |duration| invisible_duration(of(duration).as_ref(), Duration::ZERO);
        assert_eq!(change(Duration::ZERO), Ok(Duration::ZERO));
        assert!(change(long).is_err());
    }
}
