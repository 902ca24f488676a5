//! Half messages and op records.
//!
//! A half message is parked in `RMQ_SYS_TRANS_HALF_TOPIC` queue 0 with `REAL_TOPIC` and
//! `REAL_QID` naming where it belongs; every check-back stores a copy in queue 1 with
//! `TRANSACTION_CHECK_TIMES` one higher (the id, `UNIQ_KEY`, stays). How the transaction
//! ended is one record in `RMQ_SYS_TRANS_OP_HALF_TOPIC` whose `UNIQ_KEY` is the half
//! message's and whose body is the outcome, so "has it ended, and how" is an index lookup.
//! A half message's tags code is its store time: its check is due a timeout after it.

use bytes::Bytes;
use rocketraft_proto::broker as pb;

use crate::store::error::StoreError;
use crate::store::properties::Properties;
use crate::store::properties::REAL_QID;
use crate::store::properties::REAL_TOPIC;
use crate::store::properties::UNIQ_KEY;
use crate::store::record::MessageRecord;
use crate::topic::TRANSACTION_HALF_TOPIC;
use crate::topic::TRANSACTION_OP_TOPIC;

pub use rocketraft_domain::property_keys::PGROUP;
pub use rocketraft_domain::property_keys::TRAN_HALF_OFFSET;
pub use rocketraft_domain::property_keys::TRAN_MSG;
pub use rocketraft_domain::property_keys::TRANSACTION_CHECK_TIMES;
/// Queue of the half topic holding half messages as sent.
pub const HALF_QUEUE_SENT: i32 = 0;
/// Queue of the half topic holding the copies stored at each check-back.
pub const HALF_QUEUE_CHECKED: i32 = 1;

/// How a transaction ended, as its op record's body says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Commit,
    Rollback,
    /// Dropped by the broker after its last check-back went unanswered.
    Discard,
}

impl Ending {
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Commit => "commit",
            Ending::Rollback => "rollback",
            Ending::Discard => "discard",
        }
    }

    pub fn parse(body: &[u8]) -> Option<Ending> {
        match body {
            b"commit" => Some(Ending::Commit),
            b"rollback" => Some(Ending::Rollback),
            b"discard" => Some(Ending::Discard),
            _ => None,
        }
    }
}

/// Parks a half message, as sent, in queue 0 of the half topic.
pub fn park_half(record: &mut MessageRecord) -> Result<(), StoreError> {
    let properties = &mut record.properties;
    properties.insert(REAL_TOPIC, record.topic.clone())?;
    properties.insert(REAL_QID, record.queue_id.to_string())?;
    record.topic = TRANSACTION_HALF_TOPIC.to_owned();
    record.queue_id = HALF_QUEUE_SENT;
    Ok(())
}

/// The committed message: the half message back under its real topic and queue, stored
/// at `now_ms`, without `TRAN_MSG` (a consumer that sends it on sends a plain message).
pub fn restore_half(half: &MessageRecord, now_ms: i64) -> Option<MessageRecord> {
    let mut record = half.clone();
    record.topic = record.properties.get(REAL_TOPIC)?.to_owned();
    record.queue_id = record.properties.get(REAL_QID)?.parse().ok()?;
    for internal in [
        REAL_TOPIC,
        REAL_QID,
        TRAN_MSG,
        TRANSACTION_CHECK_TIMES,
        TRAN_HALF_OFFSET,
    ] {
        record.properties.remove(internal);
    }
    record.queue_offset = 0;
    record.physical_offset = 0;
    record.store_timestamp_ms = now_ms;
    Some(record)
}

/// Where the half message `half` (stored at `stored_at`) was first stored: where lookups of
/// its transaction's op record start.
pub fn half_offset(half: &MessageRecord, stored_at: i64) -> i64 {
    half.properties
        .get(TRAN_HALF_OFFSET)
        .and_then(|offset| offset.parse().ok())
        .unwrap_or(stored_at)
}

/// The copy stored at a check-back of `half` (stored at `stored_at`): one more check, stored
/// at `now_ms`.
pub fn checked_copy(
    half: &MessageRecord,
    stored_at: i64,
    now_ms: i64,
) -> Result<MessageRecord, StoreError> {
    let mut record = half.clone();
    record
        .properties
        .insert(TRAN_HALF_OFFSET, half_offset(half, stored_at).to_string())?;
    let times = check_times(half) + 1;
    record
        .properties
        .insert(TRANSACTION_CHECK_TIMES, times.to_string())?;
    record.queue_id = HALF_QUEUE_CHECKED;
    record.queue_offset = 0;
    record.physical_offset = 0;
    record.store_timestamp_ms = now_ms;
    Ok(record)
}

/// The check-back of the copy `half` stored at `commit_log_offset`: the message as its
/// producer sent it (its real topic and queue), and the copy's place, where `EndTransaction`
/// finds it; also that message as a stored record, which a 4.x check-back carries.
pub fn check_of(
    half: &MessageRecord,
    commit_log_offset: i64,
    queue_offset: i64,
) -> Result<pb::TransactionCheck, StoreError> {
    let mut sent = half.clone();
    if let Some(topic) = half.properties.get(REAL_TOPIC) {
        sent.topic = topic.to_owned();
    }
    if let Some(queue_id) = half.properties.get(REAL_QID).and_then(|id| id.parse().ok()) {
        sent.queue_id = queue_id;
    }
    sent.physical_offset = commit_log_offset;
    sent.queue_offset = queue_offset;
    let stored_record = sent.encode()?;
    Ok(pb::TransactionCheck {
        message: Some(pb::PulledMessage {
            topic: sent.topic,
            queue_id: half.queue_id,
            queue_offset,
            commit_log_offset,
            body: half.body.clone(),
            properties: Bytes::from(half.properties.encode()),
            flag: half.flag,
            reconsume_times: half.reconsume_times,
            born_timestamp_ms: half.born_timestamp_ms,
            store_timestamp_ms: half.store_timestamp_ms,
            born_host: half.born_host.to_string(),
            store_host: half.store_host.to_string(),
        }),
        msg_id: half.properties.get(UNIQ_KEY).unwrap_or_default().to_owned(),
        check_times: check_times(half),
        stored_record: stored_record.into(),
    })
}

/// Check-backs a stored copy has had.
pub fn check_times(half: &MessageRecord) -> i32 {
    half.properties
        .get(TRANSACTION_CHECK_TIMES)
        .and_then(|times| times.parse().ok())
        .unwrap_or(0)
}

/// The record saying that the transaction of `half` ended with `ending`, stored at `now_ms`.
pub fn op_record(
    half: &MessageRecord,
    ending: Ending,
    now_ms: i64,
) -> Result<MessageRecord, StoreError> {
    let mut properties = Properties::new();
    if let Some(id) = half.properties.get(UNIQ_KEY) {
        properties.insert(UNIQ_KEY, id)?;
    }
    Ok(MessageRecord {
        queue_id: 0,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp_ms: now_ms,
        born_host: half.store_host,
        store_timestamp_ms: now_ms,
        store_host: half.store_host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: Bytes::from_static(ending.as_str().as_bytes()),
        topic: TRANSACTION_OP_TOPIC.to_owned(),
        properties,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::properties::DELAY;
    use crate::store::record::tests::sample;

    #[test]
    fn a_half_message_parks_is_checked_and_restores_with_its_delay() {
        let mut record = sample("Orders", 3, b"pay");
        record.properties.insert(UNIQ_KEY, "ID1").expect("id");
        record.properties.insert(TRAN_MSG, "true").expect("tran");
        record.properties.insert(DELAY, "2").expect("delay");
        park_half(&mut record).expect("park");
        assert_eq!(
            (record.topic.as_str(), record.queue_id),
            (TRANSACTION_HALF_TOPIC, HALF_QUEUE_SENT)
        );
        let checked = checked_copy(&record, 100, 7).expect("checked");
        assert_eq!((check_times(&record), check_times(&checked)), (0, 1));
        assert_eq!(checked.queue_id, HALF_QUEUE_CHECKED);
        let again = checked_copy(&checked, 200, 8).expect("again");
        assert_eq!(check_times(&again), 2);
        let check = check_of(&again, 4096, 5).expect("check");
        let crate::store::record::DecodedRecord::Message(stored) =
            crate::store::record::decode(&check.stored_record).expect("a record")
        else {
            panic!("a blank, not a record");
        };
        assert_eq!(
            (stored.topic.as_str(), stored.queue_id),
            ("Orders", 3),
            "a 4.x check-back carries the message under its real topic and queue"
        );
        assert_eq!((stored.physical_offset, stored.queue_offset), (4096, 5));
        assert_eq!(stored.properties.get(UNIQ_KEY), Some("ID1"));
        assert_eq!(
            half_offset(&again, 300),
            100,
            "the first store, through every copy"
        );
        let restored = restore_half(&again, 9).expect("restore");
        assert_eq!((restored.topic.as_str(), restored.queue_id), ("Orders", 3));
        assert_eq!(restored.store_timestamp_ms, 9);
        assert_eq!(
            restored.properties.get(DELAY),
            Some("2"),
            "delayed after commit"
        );
        assert_eq!(restored.properties.get(UNIQ_KEY), Some("ID1"));
        for gone in [
            TRAN_MSG,
            TRANSACTION_CHECK_TIMES,
            TRAN_HALF_OFFSET,
            REAL_TOPIC,
            REAL_QID,
        ] {
            assert_eq!(restored.properties.get(gone), None, "{gone}");
        }
        let op = op_record(&again, Ending::Rollback, 10).expect("op");
        assert_eq!(op.topic, TRANSACTION_OP_TOPIC);
        assert_eq!(op.properties.get(UNIQ_KEY), Some("ID1"));
        assert_eq!(Ending::parse(&op.body), Some(Ending::Rollback));
    }
}
