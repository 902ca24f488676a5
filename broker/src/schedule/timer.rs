//! Timer messages (RocketMQ 5's `TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`, `TIMER_DELAY_MS`):
//! delivery at any time up to the broker's `timer_max_delay`, to within a second.
//!
//! The wheel is hierarchical and made of FIFO queues of `rmq_sys_wheel_timer`, all in the
//! CommitLog: queue `q >= 1` holds messages that wait a hop of `2^(q-1)` s, queue 0 those that
//! are due in less than a second (waiting exactly until their deliver time). A message is
//! parked in the queue of the longest hop that does not pass its deliver time; when the hop
//! ends, the leader's schedule service ([`crate::schedule::service`]) parks it again for
//! the time left, or restores it to its real topic once its time has come. Every queue is a
//! delay queue like a delay level's: its heads are due in order, its progress is replicated,
//! and a hop is delivered with its queue's progress in one `DeliverDelayed` entry (compare
//! and set), so a leader kill neither loses nor repeats a hop.
//!
//! Invariants: a timer is never delivered before its deliver time; at most
//! `ceil(log2(delay in s)) + 1` hops for delays up to `2^17` s, each a rewrite of the message;
//! a parked message's hop is due at most `2^17` s (36 h) after it was written, so CommitLog
//! retention longer than that never deletes a waiting timer. Nothing of a waiting timer lives
//! in memory.

use std::time::Duration;

use crate::store::error::StoreError;
use crate::store::properties::REAL_QID;
use crate::store::properties::REAL_TOPIC;
use crate::store::record::MessageRecord;
use crate::topic::TIMER_TOPIC;

/// The due time of a parked message's current hop (shared with delay levels).
pub use crate::schedule::delayed::SCHEDULE_DELIVER_MS;
pub use rocketraft_domain::property_keys::TIMER_DELAY_MS;
pub use rocketraft_domain::property_keys::TIMER_DELAY_SEC;
pub use rocketraft_domain::property_keys::TIMER_DELIVER_MS;
pub use rocketraft_domain::property_keys::TIMER_KEYS;

/// Queues of the timer topic: queue 0 for the last hop (< 1 s), queues 1..=18 for hops of
/// 1 s to 2^17 s.
pub const TIMER_QUEUES: u32 = 19;
/// The longest hop, in seconds (queue `TIMER_QUEUES - 1`).
const HOP_SECS_MAX: i64 = 1 << (TIMER_QUEUES - 2);
/// How far ahead a timer may be set by default (RocketMQ 5: 3 days).
pub const TIMER_MAX_DELAY_DEFAULT: Duration = Duration::from_secs(3 * 24 * 3600);
/// The furthest a broker may allow.
pub const TIMER_MAX_DELAY_MAX: Duration = Duration::from_secs(30 * 24 * 3600);
/// A timer queue's progress lives in the replicated schedule progress under this key plus
/// its queue id (delay levels use keys 1 to their count).
pub const TIMER_PROGRESS_KEY_BASE: u32 = 1 << 16;

/// Why a send's timer cannot be honoured.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TimerError {
    #[error("{key} {value:?} is not a whole number")]
    NotANumber { key: &'static str, value: String },
    #[error("{key} is negative ({value})")]
    Negative { key: &'static str, value: i64 },
    #[error("a message sets one of TIMER_DELIVER_MS, TIMER_DELAY_SEC and TIMER_DELAY_MS, not {0}")]
    Conflicting(String),
    #[error("a timer message cannot also have a DELAY level")]
    WithDelayLevel,
    #[error(
        "the deliver time is {ahead_ms} ms ahead; this broker allows at most {max_ms} ms \
         (timer_max_delay_ms)"
    )]
    TooFarAhead { ahead_ms: i64, max_ms: i64 },
}

/// The deliver time (ms since the epoch) the timer properties `values` ask for, given the
/// time of the send, or `None` for a message without a timer.
pub fn requested_deliver_ms(
    values: [Option<&str>; 3],
    now_ms: i64,
    max_delay: Duration,
) -> Result<Option<i64>, TimerError> {
    let set: Vec<(&'static str, &str)> = TIMER_KEYS
        .iter()
        .zip(values)
        .filter_map(|(key, value)| Some((*key, value?)))
        .collect();
    let (key, value) = match set.as_slice() {
        [] => return Ok(None),
        [one] => *one,
        several => {
            let keys: Vec<&str> = several.iter().map(|(key, _)| *key).collect();
            return Err(TimerError::Conflicting(keys.join(" and ")));
        }
    };
    let number: i64 = value.trim().parse().map_err(|_| TimerError::NotANumber {
        key,
        value: value.to_owned(),
    })?;
    if number < 0 {
        return Err(TimerError::Negative { key, value: number });
    }
    let deliver_ms = match key {
        TIMER_DELIVER_MS => number,
        TIMER_DELAY_SEC => now_ms.saturating_add(number.saturating_mul(1000)),
        _ => now_ms.saturating_add(number),
    };
    let max_ms = max_delay.as_millis() as i64;
    let ahead_ms = deliver_ms.saturating_sub(now_ms);
    if ahead_ms > max_ms {
        return Err(TimerError::TooFarAhead { ahead_ms, max_ms });
    }
    Ok(Some(deliver_ms))
}

/// The queue and the length in ms of the next hop of a timer `remaining_ms` (> 0) from its
/// deliver time: the longest hop that does not pass it, or the exact rest under a second.
pub fn next_hop(remaining_ms: i64) -> (i32, i64) {
    if remaining_ms < 1000 {
        return (0, remaining_ms);
    }
    let secs = (remaining_ms / 1000).min(HOP_SECS_MAX);
    let log2 = 63 - secs.leading_zeros() as i64;
    (log2 as i32 + 1, 1000 << log2)
}

/// Parks `record` (a message, or a timer whose hop ended) for the next hop towards
/// `deliver_ms`; `now_ms` is after the record's store time and before `deliver_ms`.
pub fn park_timer(
    record: &mut MessageRecord,
    deliver_ms: i64,
    now_ms: i64,
) -> Result<(), StoreError> {
    let (queue_id, hop_ms) = next_hop(deliver_ms - now_ms);
    let properties = &mut record.properties;
    if record.topic != TIMER_TOPIC {
        properties.insert(REAL_TOPIC, record.topic.clone())?;
        properties.insert(REAL_QID, record.queue_id.to_string())?;
        record.topic = TIMER_TOPIC.to_owned();
    }
    properties.remove(TIMER_DELAY_SEC);
    properties.remove(TIMER_DELAY_MS);
    properties.insert(TIMER_DELIVER_MS, deliver_ms.to_string())?;
    properties.insert(SCHEDULE_DELIVER_MS, (now_ms + hop_ms).to_string())?;
    record.queue_id = queue_id;
    record.queue_offset = 0;
    record.physical_offset = 0;
    record.store_timestamp_ms = now_ms;
    Ok(())
}

/// A parked timer's deliver time, if it has a valid one.
pub fn deliver_ms(record: &MessageRecord) -> Option<i64> {
    record.properties.get(TIMER_DELIVER_MS)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::tests::sample;

    const NOW: i64 = 1_800_000_000_000;
    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn hops_are_the_longest_power_of_two_seconds_that_fits() {
        assert_eq!(next_hop(1), (0, 1));
        assert_eq!(next_hop(999), (0, 999));
        assert_eq!(next_hop(1000), (1, 1000));
        assert_eq!(next_hop(1999), (1, 1000));
        assert_eq!(next_hop(2000), (2, 2000));
        assert_eq!(next_hop(5_500), (3, 4000));
        assert_eq!(next_hop(HOP_SECS_MAX * 1000), (18, HOP_SECS_MAX * 1000));
        assert_eq!(
            next_hop(TIMER_MAX_DELAY_MAX.as_millis() as i64),
            (18, HOP_SECS_MAX * 1000),
            "longer waits take the longest hop again"
        );
        assert_eq!(next_hop(HOP_SECS_MAX * 1000).0 as u32, TIMER_QUEUES - 1);
    }

    /// Hops a timer until its deliver time; returns the hop lengths.
    fn hops(delay_ms: i64, lateness_ms: i64) -> Vec<i64> {
        let deliver = NOW + delay_ms;
        let mut now = NOW;
        let mut hops = Vec::new();
        while now < deliver {
            let (_, hop) = next_hop(deliver - now);
            hops.push(hop);
            now += hop + lateness_ms;
        }
        hops
    }

    #[test]
    fn a_timer_reaches_its_deliver_time_exactly_in_few_hops() {
        assert_eq!(hops(7_300, 0), [4000, 2000, 1000, 300]);
        assert_eq!(hops(1000, 0), [1000]);
        let three_days = TIMER_MAX_DELAY_DEFAULT.as_millis() as i64 - 1;
        let taken = hops(three_days, 0);
        assert_eq!(taken.iter().sum::<i64>(), three_days, "never past it");
        assert!(taken.len() <= 20, "{} hops", taken.len());
        let late = hops(three_days, 25);
        assert!(late.len() <= 26, "late hops add few hops: {}", late.len());
    }

    #[test]
    fn the_deliver_time_comes_from_one_timer_property() {
        let max = DAY;
        let request = |values| requested_deliver_ms(values, NOW, max);
        assert_eq!(request([None, None, None]), Ok(None));
        assert_eq!(
            request([Some("1800000005000"), None, None]),
            Ok(Some(NOW + 5000))
        );
        assert_eq!(request([None, Some("5"), None]), Ok(Some(NOW + 5000)));
        assert_eq!(request([None, None, Some("5000")]), Ok(Some(NOW + 5000)));
        assert_eq!(
            request([Some("1"), None, None]),
            Ok(Some(1)),
            "a past time: now"
        );
        let max_ms = max.as_millis() as i64;
        let (at_max, past_max) = (max_ms.to_string(), (max_ms + 1).to_string());
        assert_eq!(request([None, None, Some(&at_max)]), Ok(Some(NOW + max_ms)));
        assert_eq!(
            request([None, None, Some(&past_max)]),
            Err(TimerError::TooFarAhead {
                ahead_ms: max_ms + 1,
                max_ms
            })
        );
        assert!(matches!(
            request([Some("1"), Some("2"), None]),
            Err(TimerError::Conflicting(_))
        ));
        assert!(matches!(
            request([None, Some("soon"), None]),
            Err(TimerError::NotANumber { .. })
        ));
        assert!(matches!(
            request([None, None, Some("-5")]),
            Err(TimerError::Negative { .. })
        ));
    }

    #[test]
    fn parking_keeps_the_real_topic_through_every_hop() {
        let mut record = sample("Orders", 3, b"body");
        let (topic, queue_id) = (record.topic.clone(), record.queue_id);
        record
            .properties
            .insert(TIMER_DELAY_SEC, "7")
            .expect("property");
        park_timer(&mut record, NOW + 7_300, NOW).expect("park");
        assert_eq!((record.topic.as_str(), record.queue_id), (TIMER_TOPIC, 3));
        assert_eq!(
            record.properties.get(SCHEDULE_DELIVER_MS),
            Some("1800000004000")
        );
        assert_eq!(record.properties.get(TIMER_DELAY_SEC), None);
        assert_eq!(deliver_ms(&record), Some(NOW + 7_300));
        park_timer(&mut record, NOW + 7_300, NOW + 7_000).expect("park again");
        assert_eq!(record.queue_id, 0);
        assert_eq!(
            record.properties.get(SCHEDULE_DELIVER_MS),
            Some("1800000007300")
        );
        assert_eq!(record.properties.get(REAL_TOPIC), Some(topic.as_str()));
        assert_eq!(
            record.properties.get(REAL_QID),
            Some(queue_id.to_string().as_str())
        );
    }
}
