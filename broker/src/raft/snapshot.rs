//! Snapshots of a broker group's state.
//!
//! A snapshot is the metadata tables at an applied log id plus the CommitLog up to
//! `commit_log_end`. The CommitLog is never copied into the snapshot: a sender ships only the
//! bytes the receiver lacks, read from its live store (committed CommitLog bytes never change,
//! and every node's CommitLog is a prefix of the leader's). The receiver stages those bytes in
//! a file and installs them with the metadata in one step.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use serde::Serialize;

use crate::group_state::GroupState;
use crate::metadata::Metadata;
use crate::raft::types::SnapshotMeta;

/// Bytes of CommitLog moved per read when shipping or installing a snapshot.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;

/// The state captured at the snapshot's last applied log id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotState {
    pub meta: SnapshotMeta,
    pub metadata: Metadata,
    /// The CommitLog holds exactly the applied messages below this offset.
    pub commit_log_end: i64,
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
