//! `StoreError`: every way the message store can fail, as one typed enum.
//!
//! Invariants: I/O failures keep their `#[source] io::Error` and the path they touched;
//! corruption names the CommitLog (or file) offset where it was found; a violated limit
//! names the constant it violated, so callers can map errors to wire codes without parsing text.

use std::io;
use std::path::PathBuf;

use crate::store::record::RecordError;

/// Errors returned by the message store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file system operation failed.
    #[error("{op} {path}")]
    Io {
        /// What was being done, e.g. "create segment", "flush segment".
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The process holds as many memory mappings as the host allows (`vm.max_map_count`):
    /// every queue holding messages keeps two.
    #[error(
        "cannot map {path}: this process holds as many memory mappings as vm.max_map_count \
         allows (two for every queue holding messages); raise it with sysctl, or hold fewer \
         queues in each process"
    )]
    MappingsExhausted {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Bytes at `offset` are not a valid record (bad length, magic, field lengths or CRC).
    #[error("corrupt record at offset {offset}")]
    Corrupt {
        /// CommitLog offset of the record, or its position in the buffer decoded (`decode`,
        /// the records of one replicated command).
        offset: u64,
        #[source]
        source: RecordError,
    },
    /// A ConsumeQueue unit points at a record that is not its message (the unit is damaged,
    /// or the record is): never served as that message.
    #[error(
        "ConsumeQueue {topic}/{queue_id} unit {queue_offset} points at CommitLog offset \
         {commit_log_offset}, which holds {found}: the unit or the record is damaged (the \
         scrubber was asked to repair it from the group)"
    )]
    UnitMismatch {
        topic: String,
        queue_id: i32,
        queue_offset: i64,
        commit_log_offset: i64,
        found: String,
    },
    /// A read found the CommitLog block at `offset` not matching its checksum: its bytes are
    /// never served until a repair mends them.
    #[error(
        "CommitLog block at offset {offset} does not match its checksum (the scrubber was \
         asked to repair it from the group)"
    )]
    DamagedBlock { offset: u64 },
    /// A value exceeds one of the named limits.
    #[error("{limit} exceeded: {actual} > {max}")]
    LimitExceeded {
        /// The name of the constant, e.g. "MESSAGE_BODY_SIZE_MAX".
        limit: &'static str,
        max: usize,
        actual: usize,
    },
    /// A topic name is empty or contains a character outside `[A-Za-z0-9_%|-]`.
    #[error("invalid topic {topic:?}: {reason}")]
    InvalidTopic { topic: String, reason: &'static str },
    /// A queue id is negative.
    #[error("invalid queue id {queue_id}: must be >= 0")]
    InvalidQueueId { queue_id: i32 },
    /// A property key or value cannot be encoded, or encoded properties cannot be parsed.
    #[error("invalid property {key:?}: {reason}")]
    InvalidProperty { key: String, reason: &'static str },
    /// A record cannot fit in one CommitLog segment (with room for the blank filler).
    #[error("record of {size_bytes} bytes does not fit a segment of {segment_size_bytes} bytes")]
    RecordTooLargeForSegment {
        size_bytes: usize,
        segment_size_bytes: u64,
    },
    /// Raw bytes were offered at an offset other than the current end of the CommitLog.
    #[error("raw append at offset {offset}, but the commit log ends at {expected}")]
    RawAppendOffset { offset: u64, expected: u64 },
    /// Raw bytes do not consist of whole records and blank fillers laid out for our segment size.
    #[error("raw bytes at offset {offset} are not whole records: {reason}")]
    RawLayout { offset: u64, reason: &'static str },
    /// An offset outside `[min, max]` of a log (negative as a request gave it).
    #[error("offset {offset} out of range [{min}, {max}]")]
    OffsetOutOfRange { offset: i64, min: u64, max: u64 },
    /// A segment file has a size other than the configured segment size.
    #[error("segment {path} is {actual} bytes, expected {expected}")]
    SegmentSize {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },
    /// Segment files are not contiguous (a file is missing in the middle).
    #[error("segment {path} does not start at expected offset {expected_start}")]
    SegmentGap { path: PathBuf, expected_start: u64 },
    /// Writing past the end of a mapped file (a caller bug turned into an error).
    #[error("mapped file {path} full: {len} bytes at {position} exceed {size}")]
    SegmentFull {
        path: PathBuf,
        position: usize,
        len: usize,
        size: usize,
    },
    /// A ConsumeQueue put would leave a hole: `queue_offset` is beyond the queue's end.
    #[error(
        "consume queue {topic}/{queue_id}: put at {queue_offset} but max offset is {max_offset}"
    )]
    ConsumeQueueGap {
        topic: String,
        queue_id: i32,
        queue_offset: u64,
        max_offset: u64,
    },
    /// A queue a snapshot installed ends elsewhere than on the node the snapshot came from.
    #[error(
        "consume queue {topic}/{queue_id} ends at {local} here but at {source_end} where the \
         snapshot came from: the replicas diverged"
    )]
    QueueEndMismatch {
        topic: String,
        queue_id: i32,
        local: u64,
        source_end: u64,
    },
    /// A re-dispatched unit differs from the unit already stored at that queue offset.
    #[error("consume queue {topic}/{queue_id}: unit at {queue_offset} differs from re-dispatch")]
    ConsumeQueueConflict {
        topic: String,
        queue_id: i32,
        queue_offset: u64,
    },
    /// An index entry for an offset below the last indexed offset that is not already present.
    #[error("index entry at commit log offset {offset} is older than last indexed offset {last}")]
    IndexOutOfOrder { offset: i64, last: i64 },
    /// Entries of an index file that do not match their block's checksum.
    #[error("index file {sequence}: entry block {block} does not match its checksum")]
    IndexDamaged { sequence: u64, block: u64 },
    /// A sealed index file's slot names no entry of that slot (its slot table rotted).
    #[error("index file {sequence}: slot {slot} does not name an entry of that slot")]
    IndexSlotDamaged { sequence: u64, slot: u64 },
    /// An index file whose header is missing or does not match the file.
    #[error("index file {path}: {reason}")]
    IndexFile { path: PathBuf, reason: &'static str },
    /// The memory for the index's slot table could not be mapped.
    #[error("map the index slot table: {source}")]
    SlotTable { source: std::io::Error },
    /// The store configuration is invalid.
    #[error("invalid store config: {reason}")]
    InvalidConfig { reason: String },
}

impl StoreError {
    /// Builds an [`StoreError::Io`] from an operation name and a path; used as
    /// `.map_err(|source| StoreError::io("open segment", &path, source))`.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Damage a key index lookup met, which `MessageStore::repair_index` mends.
    pub fn is_index_damage(&self) -> bool {
        matches!(
            self,
            StoreError::IndexDamaged { .. } | StoreError::IndexSlotDamaged { .. }
        )
    }
}

/// The Raft storage traits speak `io::Error`; a store failure travels inside one, whole.
impl From<StoreError> for io::Error {
    fn from(error: StoreError) -> Self {
        io::Error::other(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn io_error_keeps_source_and_path() {
        let err = StoreError::io(
            "flush segment",
            "/x/00000000000000000000",
            io::Error::other("disk gone"),
        );
        assert_eq!(err.to_string(), "flush segment /x/00000000000000000000");
        assert_eq!(
            err.source().map(|s| s.to_string()),
            Some("disk gone".to_owned())
        );
    }
}
