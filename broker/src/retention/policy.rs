//! Retention, RocketMQ's way: which of the oldest CommitLog segments to delete now.
//!
//! A sealed segment expires once its file is older than `file_reserved`. Expired segments are
//! deleted at the `delete_hour` of the day (local time, as RocketMQ's `deleteWhen`; any hour
//! if none is set), or at once when the
//! disk is filled past `disk_max_used_ratio`; above that mark the oldest segment also goes
//! when it has not expired, one per round, until the disk is below it again. Deletion is
//! always a prefix of the log, and never reaches past `keep_from`, which the caller derives
//! from what recovery, snapshot shipping and retry dedup still need (`crate::retention`).
//!
//! Pure: time and disk usage are inputs, so tests drive it with a fake clock.

use std::time::{Duration, SystemTime};

use crate::store::SealedSegment;

/// Default age at which a sealed segment expires (RocketMQ's `fileReservedTime`).
pub const FILE_RESERVED_DEFAULT: Duration = Duration::from_secs(72 * 3600);
/// Default disk usage above which segments are deleted before the delete hour, and the
/// oldest even before it expires (RocketMQ's `diskMaxUsedSpaceRatio`).
pub const DISK_MAX_USED_RATIO_DEFAULT: f64 = 0.75;
/// Default disk usage at which sends are refused (`DISK_FULL`) while pulls go on.
pub const DISK_FULL_RATIO_DEFAULT: f64 = 0.90;

/// When segments may be deleted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetentionPolicy {
    pub file_reserved: Duration,
    /// The hour of the day (local time, 0-23) expired segments are deleted; `None`: any hour.
    pub delete_hour: Option<u8>,
    pub disk_max_used_ratio: f64,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy {
            file_reserved: FILE_RESERVED_DEFAULT,
            delete_hour: None,
            disk_max_used_ratio: DISK_MAX_USED_RATIO_DEFAULT,
        }
    }
}

/// What the world looks like this round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetentionInput {
    pub now: SystemTime,
    /// The hour of the day (local time) at `now`.
    pub hour: u8,
    /// Fraction of the data dir's file system in use.
    pub disk_used_ratio: f64,
    /// No byte at or past this offset may be deleted.
    pub keep_from: u64,
}

/// How many of the oldest `sealed` segments (oldest first) to delete this round.
pub fn segments_to_delete(
    sealed: &[SealedSegment],
    policy: &RetentionPolicy,
    input: &RetentionInput,
) -> usize {
    let disk_pressed = input.disk_used_ratio >= policy.disk_max_used_ratio;
    let in_delete_hour = policy.delete_hour.is_none_or(|hour| hour == input.hour);
    let deletable = sealed
        .iter()
        .take_while(|segment| segment.end <= input.keep_from)
        .count();
    let expired = if in_delete_hour || disk_pressed {
        sealed[..deletable]
            .iter()
            .take_while(|segment| is_expired(segment, policy, input.now))
            .count()
    } else {
        0
    };
    if disk_pressed && expired == 0 {
        deletable.min(1)
    } else {
        expired
    }
}

fn is_expired(segment: &SealedSegment, policy: &RetentionPolicy, now: SystemTime) -> bool {
    now.duration_since(segment.modified)
        .is_ok_and(|age| age >= policy.file_reserved)
}

/// The hour of the day (UTC) at `time`.
pub fn utc_hour(time: SystemTime) -> u8 {
    ((unix_seconds(time) / 3600) % 24) as u8
}

/// The hour of the day at `time` in the machine's time zone (`TZ`, else `/etc/localtime`),
/// as RocketMQ reads `deleteWhen`; UTC if the zone cannot be applied.
pub fn local_hour(time: SystemTime) -> u8 {
    let Ok(seconds) = libc::time_t::try_from(unix_seconds(time)) else {
        return utc_hour(time);
    };
    // SAFETY: `tm` is plain old data (its one pointer, the zone name, may be null), and
    // `localtime_r` writes only to the `tm` it is given.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let converted = unsafe { libc::localtime_r(&seconds, &mut tm) };
    match u8::try_from(tm.tm_hour) {
        Ok(hour) if !converted.is_null() && hour < 24 => hour,
        _ => utc_hour(time),
    }
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);
    const SEGMENT: u64 = 4096;

    /// Segments sealed an hour apart, the newest an hour before `now`.
    fn sealed(count: u64, now: SystemTime) -> Vec<SealedSegment> {
        (0..count)
            .map(|i| SealedSegment {
                start: i * SEGMENT,
                end: (i + 1) * SEGMENT,
                modified: now - HOUR * (count - i) as u32,
            })
            .collect()
    }

    fn input(now: SystemTime, disk_used_ratio: f64) -> RetentionInput {
        RetentionInput {
            now,
            hour: utc_hour(now),
            disk_used_ratio,
            keep_from: u64::MAX,
        }
    }

    fn policy(reserved_hours: u32) -> RetentionPolicy {
        RetentionPolicy {
            file_reserved: HOUR * reserved_hours,
            ..RetentionPolicy::default()
        }
    }

    #[test]
    fn segments_older_than_the_reserved_time_go_and_younger_ones_stay() {
        let now = SystemTime::UNIX_EPOCH + HOUR * 1000;
        let segments = sealed(5, now); // ages 5h, 4h, 3h, 2h, 1h
        assert_eq!(
            segments_to_delete(&segments, &policy(3), &input(now, 0.1)),
            3
        );
        assert_eq!(
            segments_to_delete(&segments, &policy(6), &input(now, 0.1)),
            0
        );
        // Exactly the reserved age expires; a second less does not.
        let just = input(now - Duration::from_secs(1), 0.1);
        assert_eq!(segments_to_delete(&segments, &policy(5), &just), 0);
        assert_eq!(
            segments_to_delete(&segments, &policy(5), &input(now, 0.1)),
            1
        );
    }

    #[test]
    fn nothing_past_keep_from_goes_even_when_expired_or_the_disk_is_full() {
        let now = SystemTime::UNIX_EPOCH + HOUR * 1000;
        let segments = sealed(5, now);
        let mut kept = input(now, 0.99);
        kept.keep_from = 2 * SEGMENT;
        assert_eq!(segments_to_delete(&segments, &policy(0), &kept), 2);
        kept.keep_from = 2 * SEGMENT - 1;
        assert_eq!(segments_to_delete(&segments, &policy(0), &kept), 1);
        kept.keep_from = 0;
        assert_eq!(segments_to_delete(&segments, &policy(0), &kept), 0);
    }

    #[test]
    fn the_delete_hour_holds_expired_segments_back_unless_the_disk_is_pressed() {
        let now = SystemTime::UNIX_EPOCH + HOUR * (24 * 40 + 4); // 04:00 UTC
        let segments = sealed(3, now);
        let mut at_four = policy(1);
        at_four.delete_hour = Some(4);
        assert_eq!(segments_to_delete(&segments, &at_four, &input(now, 0.1)), 3);
        let later = now + HOUR;
        let segments = sealed(3, later);
        assert_eq!(
            segments_to_delete(&segments, &at_four, &input(later, 0.1)),
            0
        );
        assert_eq!(
            segments_to_delete(&segments, &at_four, &input(later, 0.75)),
            3
        );
    }

    #[test]
    fn a_pressed_disk_takes_the_oldest_segment_even_before_it_expires() {
        let now = SystemTime::UNIX_EPOCH + HOUR * 1000;
        let segments = sealed(4, now);
        assert_eq!(
            segments_to_delete(&segments, &policy(72), &input(now, 0.74)),
            0
        );
        assert_eq!(
            segments_to_delete(&segments, &policy(72), &input(now, 0.75)),
            1
        );
        assert_eq!(segments_to_delete(&[], &policy(72), &input(now, 0.99)), 0);
    }

    #[test]
    fn the_local_hour_advances_with_the_clock() {
        // Mid-January 1970: no daylight saving change within the day, in any zone.
        let start = SystemTime::UNIX_EPOCH + HOUR * 24 * 14;
        let first = local_hour(start);
        assert!(first < 24);
        for later in 1..24u8 {
            assert_eq!(
                local_hour(start + HOUR * u32::from(later)),
                (first + later) % 24
            );
        }
    }

    #[test]
    fn the_hour_is_utc() {
        assert_eq!(utc_hour(SystemTime::UNIX_EPOCH), 0);
        assert_eq!(
            utc_hour(SystemTime::UNIX_EPOCH + HOUR * 24 * 365 + HOUR * 23),
            23
        );
    }
}
