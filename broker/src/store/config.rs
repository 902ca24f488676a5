//! `StoreConfig`: where the store lives, its segment sizes, and how a record's ConsumeQueue
//! tags code is derived; `validate()` is called by `MessageStore::open`.
//!
//! Invariants enforced by `validate`: CommitLog segments are a multiple of 4 KiB (the page
//! size, so every mapping and `msync` range is whole pages and segment boundaries are page
//! boundaries) between 4 KiB (room for a small record plus the 8-byte blank filler) and 1 GiB
//! (the blank filler's TOTALSIZE is an i32; 1 GiB is RocketMQ's default); ConsumeQueue files
//! hold between 1 and 50 million units (a 1 GB file).

use std::path::PathBuf;

use tracing::warn;

use crate::store::error::StoreError;
use crate::store::index::INDEX_ENTRIES_PER_SLOT;
use crate::store::properties::TAGS;
use crate::store::record::{END_FILE_MIN_BLANK_LENGTH, RECORD_SIZE_MAX, RecordView};
use rocketraft_domain::tags_code::tags_code_of;

/// Alignment of CommitLog segment sizes: the page size.
pub const SEGMENT_ALIGNMENT_BYTES: u64 = 4096;
/// Smallest CommitLog segment.
pub const COMMIT_LOG_SEGMENT_BYTES_MIN: u64 = 4096;
/// Largest CommitLog segment (and the default).
pub const COMMIT_LOG_SEGMENT_BYTES_MAX: u64 = 1 << 30;
/// Default CommitLog segment size (RocketMQ: 1 GiB).
pub const COMMIT_LOG_SEGMENT_BYTES_DEFAULT: u64 = 1 << 30;
/// Fewest units per ConsumeQueue file.
pub const CONSUME_QUEUE_UNITS_PER_SEGMENT_MIN: u64 = 1;
/// Most units per ConsumeQueue file (a 1 GB file).
pub const CONSUME_QUEUE_UNITS_PER_SEGMENT_MAX: u64 = 50_000_000;
/// Default units per ConsumeQueue file (RocketMQ: 300,000).
pub const CONSUME_QUEUE_UNITS_PER_SEGMENT_DEFAULT: u64 = 300_000;

/// Fewest entries per index file (one slot).
pub const INDEX_ENTRIES_PER_FILE_MIN: u32 = INDEX_ENTRIES_PER_SLOT;
/// Most entries per index file (a file of about 1.2 GB; RocketMQ's holds 20 M).
pub const INDEX_ENTRIES_PER_FILE_MAX: u32 = 50_000_000;
/// Default entries per index file: a file of 84 MB with 1 M slots.
pub const INDEX_ENTRIES_PER_FILE_DEFAULT: u32 = 4_000_000;

const _: () = assert!(COMMIT_LOG_SEGMENT_BYTES_MAX <= i32::MAX as u64);
const _: () = assert!(INDEX_ENTRIES_PER_FILE_DEFAULT <= INDEX_ENTRIES_PER_FILE_MAX);
const _: () = assert!(COMMIT_LOG_SEGMENT_BYTES_MIN.is_multiple_of(SEGMENT_ALIGNMENT_BYTES));
const _: () = assert!(COMMIT_LOG_SEGMENT_BYTES_MAX.is_multiple_of(SEGMENT_ALIGNMENT_BYTES));
const _: () = assert!(COMMIT_LOG_SEGMENT_BYTES_DEFAULT <= COMMIT_LOG_SEGMENT_BYTES_MAX);
const _: () = assert!(COMMIT_LOG_SEGMENT_BYTES_MIN > END_FILE_MIN_BLANK_LENGTH as u64);
const _: () =
    assert!(CONSUME_QUEUE_UNITS_PER_SEGMENT_DEFAULT <= CONSUME_QUEUE_UNITS_PER_SEGMENT_MAX);

/// Computes the ConsumeQueue tags code of a record. It is used both when a record is
/// appended and when ConsumeQueues are rebuilt from the CommitLog, so it must depend only on
/// the record's bytes.
pub type TagsCodeFn = fn(&RecordView<'_>) -> i64;

/// The default [`TagsCodeFn`]: Java `hashCode` of the `TAGS` property (0 if absent or if the
/// properties cannot be parsed).
pub fn default_tags_code(view: &RecordView<'_>) -> i64 {
    tags_code_of(view.property(TAGS).ok().flatten())
}

/// Message store configuration.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Store root: `commitlog/`, `consumequeue/`, `index/`, `checkpoint`.
    pub dir: PathBuf,
    /// CommitLog segment size in bytes.
    pub commit_log_segment_bytes: u64,
    /// ConsumeQueue file size in units of 20 bytes.
    pub consume_queue_units_per_segment: u64,
    /// Index file size in entries of 20 bytes (plus a slot per four entries).
    pub index_entries_per_file: u32,
    /// Tags code of a record (e.g. the deliver time for `SCHEDULE_TOPIC_XXXX`).
    pub tags_code_fn: TagsCodeFn,
}

impl StoreConfig {
    /// Defaults (1 GiB segments, 300,000-unit queue files, TAGS hash) rooted at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StoreConfig {
            dir: dir.into(),
            commit_log_segment_bytes: COMMIT_LOG_SEGMENT_BYTES_DEFAULT,
            consume_queue_units_per_segment: CONSUME_QUEUE_UNITS_PER_SEGMENT_DEFAULT,
            index_entries_per_file: INDEX_ENTRIES_PER_FILE_DEFAULT,
            tags_code_fn: default_tags_code,
        }
    }

    /// Checks the sizes (see the module doc for the rules and why).
    pub fn validate(&self) -> Result<(), StoreError> {
        let segment = self.commit_log_segment_bytes;
        if !(COMMIT_LOG_SEGMENT_BYTES_MIN..=COMMIT_LOG_SEGMENT_BYTES_MAX).contains(&segment)
            || !segment.is_multiple_of(SEGMENT_ALIGNMENT_BYTES)
        {
            return Err(StoreError::InvalidConfig {
                reason: format!(
                    "commit_log_segment_bytes = {segment}: must be a multiple of \
                     {SEGMENT_ALIGNMENT_BYTES} in [{COMMIT_LOG_SEGMENT_BYTES_MIN}, \
                     {COMMIT_LOG_SEGMENT_BYTES_MAX}]"
                ),
            });
        }
        let units = self.consume_queue_units_per_segment;
        if !(CONSUME_QUEUE_UNITS_PER_SEGMENT_MIN..=CONSUME_QUEUE_UNITS_PER_SEGMENT_MAX)
            .contains(&units)
        {
            return Err(StoreError::InvalidConfig {
                reason: format!(
                    "consume_queue_units_per_segment = {units}: must be in \
                     [{CONSUME_QUEUE_UNITS_PER_SEGMENT_MIN}, {CONSUME_QUEUE_UNITS_PER_SEGMENT_MAX}]"
                ),
            });
        }
        let entries = self.index_entries_per_file;
        if !(INDEX_ENTRIES_PER_FILE_MIN..=INDEX_ENTRIES_PER_FILE_MAX).contains(&entries) {
            return Err(StoreError::InvalidConfig {
                reason: format!(
                    "index_entries_per_file = {entries}: must be in \
                     [{INDEX_ENTRIES_PER_FILE_MIN}, {INDEX_ENTRIES_PER_FILE_MAX}]"
                ),
            });
        }
        if segment < (RECORD_SIZE_MAX + END_FILE_MIN_BLANK_LENGTH) as u64 {
            warn!(
                segment_size_bytes = segment,
                record_size_max = RECORD_SIZE_MAX,
                "commit log segments smaller than the largest record: large records will be rejected"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(segment: u64, units: u64) -> StoreConfig {
        StoreConfig {
            commit_log_segment_bytes: segment,
            consume_queue_units_per_segment: units,
            ..StoreConfig::new("/tmp/x")
        }
    }

    #[test]
    fn defaults_are_valid() {
        StoreConfig::new("/tmp/x").validate().expect("defaults");
    }

    #[test]
    fn segment_bytes_limits() {
        with(COMMIT_LOG_SEGMENT_BYTES_MIN, 1)
            .validate()
            .expect("min");
        with(COMMIT_LOG_SEGMENT_BYTES_MAX, 1)
            .validate()
            .expect("max");
        for bad in [
            COMMIT_LOG_SEGMENT_BYTES_MIN - 1,
            COMMIT_LOG_SEGMENT_BYTES_MAX + 1,
            COMMIT_LOG_SEGMENT_BYTES_MAX + SEGMENT_ALIGNMENT_BYTES,
            3 * SEGMENT_ALIGNMENT_BYTES + 8,
        ] {
            assert!(matches!(
                with(bad, 1).validate(),
                Err(StoreError::InvalidConfig { .. })
            ));
        }
    }

    #[test]
    fn index_entries_per_file_limits() {
        let index = |entries| StoreConfig {
            index_entries_per_file: entries,
            ..StoreConfig::new("/tmp/x")
        };
        for good in [INDEX_ENTRIES_PER_FILE_MIN, INDEX_ENTRIES_PER_FILE_MAX] {
            index(good).validate().expect("in range");
        }
        for bad in [
            INDEX_ENTRIES_PER_FILE_MIN - 1,
            INDEX_ENTRIES_PER_FILE_MAX + 1,
        ] {
            let error = index(bad).validate().expect_err("out of range");
            assert!(
                error.to_string().contains("index_entries_per_file"),
                "{error}"
            );
        }
    }

    #[test]
    fn units_per_segment_limits() {
        with(4096, CONSUME_QUEUE_UNITS_PER_SEGMENT_MAX)
            .validate()
            .expect("max");
        for bad in [
            CONSUME_QUEUE_UNITS_PER_SEGMENT_MIN - 1,
            CONSUME_QUEUE_UNITS_PER_SEGMENT_MAX + 1,
        ] {
            assert!(matches!(
                with(4096, bad).validate(),
                Err(StoreError::InvalidConfig { .. })
            ));
        }
    }
}
