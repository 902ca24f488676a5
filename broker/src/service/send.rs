//! `Send`: validates a batch of messages at the edge, stamps what the leader must stamp
//! (store time and host), encodes the records and hands them to group commit.
//!
//! Only the leader accepts sends; nothing reaches the Raft log that would fail to apply. A
//! message with `DELAY = L > 0` is parked in `SCHEDULE_TOPIC_XXXX`, a timer message
//! (`TIMER_DELIVER_MS`, `TIMER_DELAY_SEC` or `TIMER_DELAY_MS` in the future) in the timer
//! wheel `rmq_sys_wheel_timer`, a transactional half message (`TRAN_MSG=true`) in
//! `RMQ_SYS_TRANS_HALF_TOPIC` until its transaction ends. Users may not
//! send to system topics, except a consumer's `%RETRY%<group>`, which its client uses when
//! `SendMessageBack` fails: such a message carries its reconsume count (`RECONSUME_TIME`) and
//! goes to `%DLQ%<group>` once that count passes the maximum.

use std::net::IpAddr;
use std::net::Ipv4Addr;
use std::net::SocketAddr;
use std::time::Duration;

use rocketraft_domain::send_queues;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common as common_pb;

use crate::error::BrokerError;
use crate::metadata::PERM_WRITE;
use crate::schedule::delayed::park;
use crate::schedule::delayed::requested_level;
use crate::schedule::timer;
use crate::schedule::timer::TIMER_KEYS;
use crate::service::BrokerService;
use crate::service::system_topics::DLQ_QUEUE_COUNT;
use crate::service::system_topics::dlq_topic;
use crate::state_machine::command::AppendedMessage;
use crate::store::properties;
use crate::store::properties::DELAY;
use crate::store::properties::MAX_RECONSUME_TIMES;
use crate::store::properties::RECONSUME_TIME;
use crate::store::record::MessageRecord;
use crate::store::record::RecordParts;
use crate::topic::AUTO_CREATED_QUEUE_COUNT;
use crate::topic::RETRY_TOPIC_PREFIX;
use crate::topic::is_system_topic;
use crate::topic::validate_group_name;
use crate::topic::validate_topic_name;
use crate::transaction::half::PGROUP;
use crate::transaction::half::TRAN_MSG;
use crate::transaction::half::park_half;

pub use rocketraft_domain::limits::SEND_BATCH_BODY_BYTES_MAX;
pub use rocketraft_domain::limits::SEND_BATCH_COUNT_MAX;
pub use rocketraft_domain::limits::SEND_BATCH_PROPERTIES_BYTES_MAX;
/// How long a send waits for its batch to commit before it reports `REPLICATION_TIMEOUT`.
/// Clients wait longer than this, so they learn the outcome rather than time out blind.
pub const SEND_COMMIT_TIMEOUT: Duration = Duration::from_secs(2);

/// Where one message of a send is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Placement {
    /// `None`: the send's own topic (no copy per message on the plain send path).
    topic: Option<String>,
    queue_id: i32,
    reconsume_times: i32,
    /// Dead letters are stored at once, never delayed.
    dead_letter: bool,
}

impl BrokerService {
    /// Stores a `Send`; `peer` is the producer's address as this node sees the connection,
    /// its born host unless the request names one.
    pub(super) async fn handle_send(
        &self,
        mut request: pb::SendRequest,
        peer: Option<SocketAddr>,
    ) -> Result<pb::SendResponse, BrokerError> {
        let started = std::time::Instant::now();
        self.ensure_leader()?;
        self.ensure_disk_has_room()?;
        validate_batch_size(&request.messages)?;
        let (named, messages) = (request.queue_ids.len(), request.messages.len());
        let queue_ids = send_queues::message_queue_ids(
            request.queue_id,
            std::mem::take(&mut request.queue_ids),
            messages,
        )
        .ok_or_else(|| {
            BrokerError::MessageIllegal(format!(
                "a send names {named} queue ids for {messages} messages: one per message, or none"
            ))
        })?;
        let placements = match request.topic.strip_prefix(RETRY_TOPIC_PREFIX) {
            Some(group) => self.place_retries(group, &request, &queue_ids).await?,
            None => {
                self.check_queues(&request.topic, &queue_ids).await?;
                queue_ids
                    .iter()
                    .map(|&queue_id| Placement {
                        topic: None,
                        queue_id,
                        reconsume_times: 0,
                        dead_letter: false,
                    })
                    .collect()
            }
        };
        let born_host = match request.born_host.as_str() {
            "" => peer.unwrap_or(UNKNOWN_BORN_HOST),
            named => parse_born_host(named)?,
        };
        let (records, message_count) = self.encode_send(&request, &placements, born_host)?;
        let appended = self
            .commit_records(records, message_count, request.deduplicate)
            .await?;
        let body_bytes = request
            .messages
            .iter()
            .map(|message| message.body.len())
            .sum();
        self.metrics
            .sent(&request.topic, message_count, body_bytes, started.elapsed());
        if request.topic.starts_with(RETRY_TOPIC_PREFIX) {
            let dead_letters = placements.iter().filter(|place| place.dead_letter).count();
            self.metrics
                .sent_back(placements.len() - dead_letters, dead_letters);
        }
        let results = appended
            .into_iter()
            .map(|message| pb::SendResult {
                queue_id: message.queue_id,
                queue_offset: message.queue_offset,
                commit_log_offset: message.commit_log_offset,
                offset_msg_id: offset_msg_id(self.store_host, message.commit_log_offset),
            })
            .collect();
        Ok(pb::SendResponse { results })
    }

    /// Appends encoded records through group commit; answers once they are applied. With
    /// `deduplicate` (a producer's retry), messages stored already are not stored again.
    pub(super) async fn commit_records(
        &self,
        records: Vec<u8>,
        message_count: usize,
        deduplicate: bool,
    ) -> Result<Vec<AppendedMessage>, BrokerError> {
        let proposed = std::time::Instant::now();
        let appended = tokio::time::timeout(
            SEND_COMMIT_TIMEOUT,
            self.group_commit
                .append(records, message_count, deduplicate),
        )
        .await
        .map_err(|_| BrokerError::CommitTimeout {
            timeout: SEND_COMMIT_TIMEOUT,
        })??;
        self.metrics.committed(proposed.elapsed());
        Ok(appended)
    }

    /// Where each message of a send to `%RETRY%<group>` goes: the retry topic (created on
    /// demand), or the dead-letter topic once its `RECONSUME_TIME` passes the maximum
    /// (`MAX_RECONSUME_TIMES`, else the group's). `queue_ids` holds each message's queue.
    async fn place_retries(
        &self,
        group: &str,
        request: &pb::SendRequest,
        queue_ids: &[i32],
    ) -> Result<Vec<Placement>, BrokerError> {
        validate_group_name(group).map_err(BrokerError::TopicIllegal)?;
        let config = self.group_config_or_default(group);
        let retry = self
            .system_topic(&request.topic, config.retry_queue_count)
            .await?;
        let mut placements = Vec::with_capacity(request.messages.len());
        for (message, queue_id) in request.messages.iter().zip(queue_ids) {
            let number = |key: &str, default: i32| -> Result<i32, BrokerError> {
                let value =
                    properties::find(&message.properties, key).map_err(BrokerError::illegal)?;
                value.map_or(Ok(default), |value| {
                    value.parse().map_err(|_| {
                        BrokerError::MessageIllegal(format!("{key} {value:?} is not a number"))
                    })
                })
            };
            let reconsume_times = number(RECONSUME_TIME, 0)?;
            let max = number(MAX_RECONSUME_TIMES, config.retry_max_times as i32)?;
            placements.push(if reconsume_times > max {
                let dlq = dlq_topic(group);
                self.system_topic(&dlq, DLQ_QUEUE_COUNT).await?;
                Placement {
                    topic: Some(dlq),
                    queue_id: 0,
                    reconsume_times,
                    dead_letter: true,
                }
            } else {
                Placement {
                    topic: None,
                    queue_id: queue_id.rem_euclid(retry.write_queue_count as i32),
                    reconsume_times,
                    dead_letter: false,
                }
            });
        }
        Ok(placements)
    }

    /// Checks that every one of `queue_ids` is a writable queue of `topic`, creating the topic
    /// first if it is unknown and auto-creation is on.
    async fn check_queues(&self, topic: &str, queue_ids: &[i32]) -> Result<(), BrokerError> {
        validate_topic_name(topic).map_err(BrokerError::TopicIllegal)?;
        if is_system_topic(topic) {
            return Err(BrokerError::TopicIllegal(format!(
                "{topic} is a system topic"
            )));
        }
        let known = self.group.metadata().topics.get(topic).cloned();
        let config = match known {
            Some(config) => config,
            None if self.auto_create_topic => {
                self.auto_create_topic(topic, AUTO_CREATED_QUEUE_COUNT)
                    .await?
            }
            None => return Err(BrokerError::TopicNotExist(topic.to_owned())),
        };
        if config.perm & PERM_WRITE == 0 {
            return Err(BrokerError::TopicIllegal(format!(
                "{topic} is not writable (perm {})",
                config.perm
            )));
        }
        let writable = 0..config.write_queue_count as i32;
        match queue_ids
            .iter()
            .find(|queue_id| !writable.contains(queue_id))
        {
            Some(&queue_id) => Err(BrokerError::QueueIllegal {
                queue_id,
                reason: format!(
                    "{topic} has write queues 0 to {}",
                    config.write_queue_count - 1
                ),
            }),
            None => Ok(()),
        }
    }

    /// Validates the request and encodes its messages as store records, concatenated; a
    /// delayed message is parked in the schedule topic.
    fn encode_send(
        &self,
        request: &pb::SendRequest,
        placements: &[Placement],
        born_host: SocketAddr,
    ) -> Result<(Vec<u8>, usize), BrokerError> {
        let store_timestamp_ms = self.clock.now_ms();
        let body_bytes: usize = request.messages.iter().map(|m| m.body.len()).sum();
        let mut records =
            Vec::with_capacity(body_bytes + request.messages.len() * RECORD_OVERHEAD_ESTIMATE);
        for (message, placement) in request.messages.iter().zip(placements) {
            if !message.topic.is_empty() && message.topic != request.topic {
                return Err(BrokerError::MessageIllegal(format!(
                    "a batch goes to one topic: {} in a send to {}",
                    message.topic, request.topic
                )));
            }
            let [delay, tran, timer_values @ ..] = properties::validate_find(
                &message.properties,
                [DELAY, TRAN_MSG, TIMER_KEYS[0], TIMER_KEYS[1], TIMER_KEYS[2]],
            )
            .map_err(BrokerError::illegal)?;
            let half = tran.is_some_and(|value| value.eq_ignore_ascii_case("true"));
            let special = placement.dead_letter
                || half
                || delay.is_some()
                || timer_values.iter().any(Option::is_some);
            let parts = RecordParts {
                queue_id: placement.queue_id,
                flag: message.flag,
                queue_offset: 0,
                physical_offset: 0,
                sys_flag: 0,
                born_timestamp_ms: match message.born_timestamp_ms {
                    0 => request.born_timestamp_ms,
                    own => own,
                },
                born_host: match message.born_host.as_str() {
                    "" => born_host,
                    own => parse_message_born_host(own)?,
                },
                store_timestamp_ms,
                store_host: self.store_host,
                reconsume_times: placement.reconsume_times,
                prepared_transaction_offset: 0,
                body: &message.body,
                topic: placement.topic.as_deref().unwrap_or(&request.topic),
                properties: &message.properties,
            };
            if !special {
                // The common case: the producer's encoded properties are stored as they are.
                parts
                    .encode_into(&mut records)
                    .map_err(BrokerError::illegal)?;
                continue;
            }
            let mut record = MessageRecord::from_parts(&parts).map_err(BrokerError::illegal)?;
            if placement.dead_letter {
                record.properties.remove(DELAY);
            } else if half {
                self.validate_half(&record, store_timestamp_ms)?;
                park_half(&mut record).map_err(BrokerError::illegal)?;
            } else {
                let delayed = self.delayed_placement(&record, store_timestamp_ms)?;
                park_delayed(&mut record, delayed, store_timestamp_ms, &self.delay_levels)?;
            }
            record
                .encode_into(&mut records)
                .map_err(BrokerError::illegal)?;
        }
        Ok((records, request.messages.len()))
    }
}

/// When a message is due, from its `DELAY` level or timer properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Delayed {
    Now,
    Level(u32),
    /// At this time, ms since the epoch (in the future).
    At(i64),
}

impl BrokerService {
    /// When `record` is due if it is stored at `now_ms`: a delay level, a timer (at most
    /// `timer_max_delay` ahead; a time already past is now), or now.
    pub(super) fn delayed_placement(
        &self,
        record: &MessageRecord,
        now_ms: i64,
    ) -> Result<Delayed, BrokerError> {
        self.delayed_placement_within(record, now_ms, self.timer_max_delay)
    }

    /// [`Self::delayed_placement`] with a timer allowed up to `timer_max_delay` ahead.
    pub(super) fn delayed_placement_within(
        &self,
        record: &MessageRecord,
        now_ms: i64,
        timer_max_delay: Duration,
    ) -> Result<Delayed, BrokerError> {
        let values = TIMER_KEYS.map(|key| record.properties.get(key));
        let deliver_ms = timer::requested_deliver_ms(values, now_ms, timer_max_delay)
            .map_err(BrokerError::illegal)?;
        let level = requested_level(record, &self.delay_levels).map_err(BrokerError::illegal)?;
        if record.properties.get(DELAY).is_some() && deliver_ms.is_some() {
            return Err(BrokerError::illegal(timer::TimerError::WithDelayLevel));
        }
        Ok(match (deliver_ms, level) {
            (Some(at), _) if at > now_ms => Delayed::At(at),
            (_, Some(level)) => Delayed::Level(level),
            _ => Delayed::Now,
        })
    }

    /// Checks a half message: its producer group, and the delay it will wait after commit.
    fn validate_half(&self, record: &MessageRecord, now_ms: i64) -> Result<(), BrokerError> {
        let group = record.properties.get(PGROUP).ok_or_else(|| {
            BrokerError::MessageIllegal(
                "a transactional (half) message names its producer group in PGROUP".into(),
            )
        })?;
        validate_group_name(group).map_err(BrokerError::MessageIllegal)?;
        if is_system_topic(&record.topic) {
            return Err(BrokerError::MessageIllegal(format!(
                "a transactional message goes to a user topic, not {}",
                record.topic
            )));
        }
        self.delayed_placement(record, now_ms).map(|_| ())
    }
}

/// Parks `record` where `delayed` says, as stored at `now_ms`.
pub(super) fn park_delayed(
    record: &mut MessageRecord,
    delayed: Delayed,
    now_ms: i64,
    levels: &crate::schedule::delay_levels::DelayLevels,
) -> Result<(), BrokerError> {
    match delayed {
        Delayed::Now => Ok(()),
        Delayed::Level(level) => park(record, level, levels).map_err(BrokerError::illegal),
        Delayed::At(at) => timer::park_timer(record, at, now_ms).map_err(BrokerError::illegal),
    }
}

/// A message's encoded record beyond its body, for sizing a batch's buffer: header, topic
/// and the usual properties.
const RECORD_OVERHEAD_ESTIMATE: usize = 256;

fn validate_batch_size(messages: &[common_pb::Message]) -> Result<(), BrokerError> {
    if messages.is_empty() {
        return Err(BrokerError::BadRequest(
            "a send carries at least one message".into(),
        ));
    }
    if messages.len() > SEND_BATCH_COUNT_MAX {
        return Err(BrokerError::MessageIllegal(format!(
            "a batch has at most {SEND_BATCH_COUNT_MAX} messages, got {}",
            messages.len()
        )));
    }
    let body_bytes: usize = messages.iter().map(|message| message.body.len()).sum();
    if body_bytes > SEND_BATCH_BODY_BYTES_MAX {
        return Err(BrokerError::MessageIllegal(format!(
            "a batch has at most {SEND_BATCH_BODY_BYTES_MAX} body bytes, got {body_bytes}"
        )));
    }
    let property_bytes: usize = messages
        .iter()
        .map(|message| message.properties.len())
        .sum();
    if property_bytes > SEND_BATCH_PROPERTIES_BYTES_MAX {
        return Err(BrokerError::MessageIllegal(format!(
            "a batch has at most {SEND_BATCH_PROPERTIES_BYTES_MAX} property bytes \
             (SEND_BATCH_PROPERTIES_BYTES_MAX), got {property_bytes}"
        )));
    }
    Ok(())
}

/// The born host of a message whose producer is not known (no address on the connection).
const UNKNOWN_BORN_HOST: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

fn parse_born_host(born_host: &str) -> Result<SocketAddr, BrokerError> {
    born_host.parse().map_err(|_| {
        BrokerError::BadRequest(format!("born_host {born_host:?} is not an ip:port address"))
    })
}

/// A message's own born host; refused alone (`MESSAGE_ILLEGAL`), not with its whole request,
/// so a producer's send lane can tell which message was bad.
fn parse_message_born_host(born_host: &str) -> Result<SocketAddr, BrokerError> {
    born_host.parse().map_err(|_| {
        BrokerError::MessageIllegal(format!(
            "a message's born_host {born_host:?} is not an ip:port address"
        ))
    })
}

/// RocketMQ's offset message id: store host (IPv4 + port, or IPv6 + port) and the commitlog
/// offset, as upper-case hex.
pub fn offset_msg_id(store_host: SocketAddr, commit_log_offset: i64) -> String {
    let mut bytes = Vec::with_capacity(28);
    match store_host {
        SocketAddr::V4(addr) => bytes.extend_from_slice(&addr.ip().octets()),
        SocketAddr::V6(addr) => bytes.extend_from_slice(&addr.ip().octets()),
    }
    bytes.extend_from_slice(&i32::from(store_host.port()).to_be_bytes());
    bytes.extend_from_slice(&commit_log_offset.to_be_bytes());
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut id = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        id.push(char::from(HEX[usize::from(byte >> 4)]));
        id.push(char::from(HEX[usize::from(byte & 0xF)]));
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_msg_id_matches_rocketmq_layout() {
        let id = offset_msg_id("10.1.2.3:10911".parse().expect("addr"), 0x1234);
        assert_eq!(id, "0A01020300002A9F0000000000001234");
    }

    #[test]
    fn batch_limits_at_the_boundary() {
        let message = |size: usize| common_pb::Message {
            body: vec![0u8; size].into(),
            ..Default::default()
        };
        assert!(validate_batch_size(&vec![message(1); SEND_BATCH_COUNT_MAX]).is_ok());
        assert!(validate_batch_size(&vec![message(1); SEND_BATCH_COUNT_MAX + 1]).is_err());
        assert!(validate_batch_size(&[message(SEND_BATCH_BODY_BYTES_MAX)]).is_ok());
        assert!(validate_batch_size(&[message(SEND_BATCH_BODY_BYTES_MAX + 1)]).is_err());
        let with_properties = |bytes: usize| common_pb::Message {
            properties: vec![b'p'; bytes].into(),
            ..message(1)
        };
        let at_max = vec![with_properties(SEND_BATCH_PROPERTIES_BYTES_MAX / 4); 4];
        assert!(validate_batch_size(&at_max).is_ok());
        let mut past_max = at_max;
        past_max.push(with_properties(1));
        assert!(validate_batch_size(&past_max).is_err());
        assert!(validate_batch_size(&[]).is_err());
    }
}
