//! Snapshots of a broker group's state.
//!
//! A snapshot is the metadata tables at an applied log id plus the CommitLog up to
//! `commit_log_end`. The CommitLog is never copied into the snapshot: a sender ships only the
//! bytes the receiver lacks, read from its live store (committed CommitLog bytes never change,
//! and every node's CommitLog is a prefix of the leader's). The receiver stages those bytes in
//! a file and installs them with the metadata in one step.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use serde::Serialize;

use crate::group_state::GroupState;
use crate::metadata::Metadata;
use crate::metadata::TopicTypes;
use crate::metadata::Trailing;
use crate::pop::state::PopState;
use crate::raft::types::SnapshotMeta;
use crate::store::QueueTail;

/// Bytes of CommitLog moved per read when shipping or installing a snapshot.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;

/// The state captured at the snapshot's last applied log id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotState {
    pub meta: SnapshotMeta,
    pub metadata: Metadata,
    /// The CommitLog holds exactly the applied messages below this offset.
    pub commit_log_end: i64,
    /// The metadata's trailing tables ([`Metadata::split`]), last, in their order.
    #[serde(deserialize_with = "crate::metadata::deserialize_or_empty")]
    pub pops: PopState,
    #[serde(deserialize_with = "crate::metadata::deserialize_or_empty")]
    pub topic_types: TopicTypes,
    /// Where every ConsumeQueue ends at `commit_log_end` (empty in snapshots written before
    /// they were kept): a receiver that restarts its store past its end takes them.
    #[serde(deserialize_with = "crate::metadata::deserialize_or_empty")]
    pub queue_tails: Vec<QueueTail>,
}

impl SnapshotState {
    /// The metadata with its trailing tables.
    pub fn whole_metadata(&self) -> Metadata {
        self.metadata.clone().with_trailing(Trailing {
            pops: self.pops.clone(),
            topic_types: self.topic_types.clone(),
        })
    }
}

/// Where the CommitLog bytes of a snapshot come from.
pub enum CommitLogSource {
    /// The live store of the node that built the snapshot.
    Store(Arc<GroupState>),
    /// Bytes received from the leader, staged in a file; they start at `start_offset`.
    Staged { path: PathBuf, start_offset: i64 },
}

/// openraft's `SnapshotData` of a broker group.
pub struct SnapshotData {
    pub state: SnapshotState,
    pub commit_log: CommitLogSource,
}

/// Installs shipped CommitLog bytes, which arrive cut at any byte, into a store record by
/// record: each push appends the whole records it completes and keeps the cut-off rest.
#[derive(Debug)]
pub struct CommitLogInstaller {
    offset: i64,
    pending: Vec<u8>,
}

impl CommitLogInstaller {
    /// Installs from `offset`, where the store's CommitLog ends.
    pub fn new(offset: i64) -> CommitLogInstaller {
        CommitLogInstaller {
            offset,
            pending: Vec::new(),
        }
    }

    pub fn push(&mut self, group: &GroupState, bytes: &[u8]) -> io::Result<()> {
        self.pending.extend_from_slice(bytes);
        let whole = group.store().whole_raw_len(self.offset, &self.pending)?;
        if whole > 0 {
            group
                .store_mut()
                .append_raw_commit_log(self.offset, &self.pending[..whole])?;
            self.pending.drain(..whole);
            self.offset += whole as i64;
        }
        Ok(())
    }

    /// The offset the CommitLog now ends at; an error if a cut-off record is left over.
    pub fn finish(self) -> io::Result<i64> {
        if !self.pending.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "snapshot CommitLog ends inside a record: {} bytes at {} do not complete one",
                    self.pending.len(),
                    self.offset
                ),
            ));
        }
        Ok(self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::TopicMessageType;
    use crate::pop::state::Pop;
    use crate::pop::state::PopQueueKey;
    use crate::store::CqUnit;

    fn state_with_pops() -> SnapshotState {
        let mut pops = PopState::default();
        let pop = Pop {
            key: PopQueueKey {
                group: "g".into(),
                topic: "T".into(),
                queue_id: 1,
            },
            from_offset: 0,
            next_offset: 3,
            fresh: vec![0, 2],
            revived: Vec::new(),
            dead: Vec::new(),
            now_ms: 0,
            invisible_until_ms: 10_000,
        };
        pops.apply_pop(&pop, 5).expect("applies");
        pops.set_orderly("g", true);
        SnapshotState {
            meta: SnapshotMeta::default(),
            metadata: Metadata::default(),
            commit_log_end: 4096,
            pops,
            topic_types: TopicTypes::from([("T".to_owned(), TopicMessageType::Fifo)]),
            queue_tails: vec![QueueTail {
                topic: "T".into(),
                queue_id: 1,
                queue_offset: 2,
                unit: CqUnit {
                    commit_log_offset: 400,
                    size: 120,
                    tags_code: 7,
                },
            }],
        }
    }

    /// `state`, written by a build that did not know its last `dropped` bytes' tables yet
    /// (they are empty in `state`), reads back as `state`.
    fn assert_reads_without_its_last(state: &SnapshotState, dropped: usize) {
        let mut bytes = crate::raft::codec::encode("snapshot", state).expect("encode");
        bytes.truncate(bytes.len() - dropped);
        let decoded: SnapshotState =
            crate::raft::codec::decode("snapshot", &bytes).expect("decode");
        assert_eq!(&decoded, state);
    }

    #[test]
    fn the_trailing_tables_round_trip_and_a_snapshot_from_before_them_reads_them_as_empty() {
        let state = state_with_pops();
        assert_reads_without_its_last(&state, 0);

        // Written before queue tails: ends after the topic types (an empty list is its 8-byte
        // length).
        let mut before_tails = state;
        before_tails.queue_tails = Vec::new();
        assert_reads_without_its_last(&before_tails, 8);

        // Written before topic types: ends after the pop state (an empty map: 8 bytes).
        let mut before_types = before_tails;
        before_types.topic_types = TopicTypes::new();
        assert_reads_without_its_last(&before_types, 8 + 8);

        // Written before pop consumption: ends before the pop state.
        let mut before_pops = before_types;
        before_pops.pops = PopState::default();
        assert_reads_without_its_last(&before_pops, 8 + 8 + 16);
    }
    use crate::store::MessageStore;
    use crate::store::StoreConfig;
    use crate::store::record::tests::sample;

    fn group(dir: &std::path::Path) -> GroupState {
        let (store, _) = MessageStore::open(StoreConfig::new(dir)).expect("open store");
        GroupState::new(store, Metadata::default())
    }

    #[test]
    fn records_cut_anywhere_are_installed_whole_and_a_cut_end_is_an_error() {
        let (src_dir, dst_dir) = (
            tempfile::tempdir().expect("dir"),
            tempfile::tempdir().expect("dir"),
        );
        let source = group(src_dir.path());
        for i in 0..3 {
            let record = sample("T", 0, format!("body {i}").as_bytes());
            source
                .store_mut()
                .append(&record.encode().expect("encode"))
                .expect("append");
        }
        let bytes = source.store().read_commit_log(0, usize::MAX).expect("read");
        let (first, rest) = bytes.split_at(bytes.len() / 2 + 7);

        let target = group(dst_dir.path());
        let mut installer = CommitLogInstaller::new(0);
        installer.push(&target, first).expect("first part");
        assert!(target.store().commit_log_max_offset() < first.len() as i64);
        installer.push(&target, rest).expect("the rest");
        assert_eq!(installer.finish().expect("whole"), bytes.len() as i64);
        assert_eq!(
            target.store().read_commit_log(0, usize::MAX).expect("read"),
            bytes
        );

        let mut cut = CommitLogInstaller::new(bytes.len() as i64);
        let next = sample("T", 0, b"cut off").encode().expect("encode");
        cut.push(&target, &next[..next.len() - 1])
            .expect("kept back");
        let error = cut.finish().expect_err("a cut record is left");
        assert!(
            error.to_string().contains("ends inside a record"),
            "{error}"
        );
        assert_eq!(target.store().commit_log_max_offset(), bytes.len() as i64);
    }
}
