//! How a delayed message is parked and restored.
//!
//! Parking: a record with `DELAY = L > 0` goes to `SCHEDULE_TOPIC_XXXX` queue `L - 1` with
//! `REAL_TOPIC` and `REAL_QID` naming where it belongs and `SCHEDULE_DELIVER_MS` its due
//! time (store time + the level's delay). The due time is the record's ConsumeQueue tags
//! code, computed from the record alone, so a rebuild after a crash gives the same queue even
//! if the delay levels were reconfigured since. Restoring puts the record back under its real
//! topic and queue without `DELAY`, so its tags code is its tag's hash again.

use crate::schedule::delay_levels::DelayLevels;
use crate::store::RecordView;
use crate::store::config::default_tags_code;
use crate::store::error::StoreError;
use crate::store::properties::DELAY;
use crate::store::properties::REAL_QID;
use crate::store::properties::REAL_TOPIC;
use crate::store::record::MessageRecord;
use crate::topic::SCHEDULE_TOPIC;
use crate::topic::TIMER_TOPIC;
use crate::topic::TRANSACTION_HALF_TOPIC;

pub use rocketraft_domain::property_keys::SCHEDULE_DELIVER_MS;

/// Why a message's `DELAY` property cannot be honoured.
#[derive(Debug, thiserror::Error)]
#[error("DELAY {value:?} is not a delay level (0 to {max})")]
pub struct DelayLevelError {
    pub value: String,
    pub max: u32,
}

/// The delay level a record asks for (clamped), or `None` when it is not delayed.
pub fn requested_level(
    record: &MessageRecord,
    levels: &DelayLevels,
) -> Result<Option<u32>, DelayLevelError> {
    let Some(value) = record.properties.get(DELAY) else {
        return Ok(None);
    };
    let level: u32 = value.trim().parse().map_err(|_| DelayLevelError {
        value: value.to_owned(),
        max: levels.max_level(),
    })?;
    Ok(levels.clamp(level))
}

/// Parks `record` in the schedule queue of `level` (already clamped), due `level`'s delay
/// after its store time.
pub fn park(
    record: &mut MessageRecord,
    level: u32,
    levels: &DelayLevels,
) -> Result<(), StoreError> {
    let due_ms = record.store_timestamp_ms + levels.delay(level).as_millis() as i64;
    let properties = &mut record.properties;
    properties.insert(DELAY, level.to_string())?;
    properties.insert(REAL_TOPIC, record.topic.clone())?;
    properties.insert(REAL_QID, record.queue_id.to_string())?;
    properties.insert(SCHEDULE_DELIVER_MS, due_ms.to_string())?;
    record.topic = SCHEDULE_TOPIC.to_owned();
    record.queue_id = level as i32 - 1;
    Ok(())
}

/// Where a parked record belongs, and its restored form (stamped `store_timestamp_ms`).
pub fn restore(mut record: MessageRecord, store_timestamp_ms: i64) -> Option<MessageRecord> {
    let topic = record.properties.get(REAL_TOPIC)?.to_owned();
    let queue_id: i32 = record.properties.get(REAL_QID)?.parse().ok()?;
    record.properties.remove(DELAY);
    record.properties.remove(SCHEDULE_DELIVER_MS);
    record.topic = topic;
    record.queue_id = queue_id;
    record.queue_offset = 0;
    record.physical_offset = 0;
    record.store_timestamp_ms = store_timestamp_ms;
    Some(record)
}

/// The broker's tags code: the due time for parked records (delay levels and timer hops),
/// the store time for half messages, the tag's hash otherwise.
pub fn broker_tags_code(view: &RecordView<'_>) -> i64 {
    if view.topic() == TRANSACTION_HALF_TOPIC {
        // A half message's check is due a timeout after it was stored.
        return view.store_timestamp_ms();
    }
    if view.topic() == SCHEDULE_TOPIC || view.topic() == TIMER_TOPIC {
        return view
            .property(SCHEDULE_DELIVER_MS)
            .ok()
            .flatten()
            .and_then(|due| due.parse().ok())
            .unwrap_or_else(|| view.store_timestamp_ms());
    }
    default_tags_code(view)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::properties::TAGS;
    use crate::store::record::tests::sample;
    use rocketraft_domain::tags_code::tags_code;

    #[test]
    fn park_and_restore_round_trip() {
        let levels = DelayLevels::parse("1s 2s 3s").expect("levels");
        let mut record = sample("Orders", 2, b"late");
        record.properties.insert(DELAY, "7").expect("delay");
        let level = requested_level(&record, &levels).expect("valid");
        assert_eq!(level, Some(3), "clamped to the highest level");
        park(&mut record, 3, &levels).expect("park");
        assert_eq!(
            (record.topic.as_str(), record.queue_id),
            (SCHEDULE_TOPIC, 2)
        );
        let encoded = record.encode().expect("encode");
        let view = RecordView::parse(&encoded).expect("view");
        assert_eq!(broker_tags_code(&view), record.store_timestamp_ms + 3000);

        let restored = restore(record, 42).expect("restore");
        assert_eq!((restored.topic.as_str(), restored.queue_id), ("Orders", 2));
        assert_eq!(restored.properties.get(DELAY), None);
        assert_eq!(restored.store_timestamp_ms, 42);
        let encoded = restored.encode().expect("encode");
        let view = RecordView::parse(&encoded).expect("view");
        assert_eq!(
            broker_tags_code(&view),
            tags_code(restored.properties.get(TAGS).expect("tag"))
        );
    }

    #[test]
    fn delay_property_must_be_a_level() {
        let levels = DelayLevels::parse("1s 2s").expect("levels");
        let mut record = sample("Orders", 0, b"x");
        assert_eq!(requested_level(&record, &levels).ok(), Some(None));
        record.properties.insert(DELAY, "0").expect("delay");
        assert_eq!(
            requested_level(&record, &levels).ok(),
            Some(None),
            "0 = now"
        );
        record.properties.insert(DELAY, "soon").expect("delay");
        assert!(requested_level(&record, &levels).is_err());
        record.properties.insert(DELAY, "-1").expect("delay");
        assert!(requested_level(&record, &levels).is_err());
    }
}
