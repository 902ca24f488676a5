//! Raft log compaction: the Raft log is only needed back to the state machine's last durable
//! checkpoint (plus a tail for followers that lag a little), so each node takes a snapshot (a
//! flushed checkpoint) and purges its log behind it, every interval and whenever the log has
//! grown by a set number of bytes. The second keeps a busy log small: restarts read less of
//! it, and the page cache it holds is freed and reused while still warm. What stays behind
//! the snapshot is bounded twice, by entries and by bytes of whole segments, so large
//! entries cannot make the retained tail gigabytes.
//!
//! openraft's own snapshot policy is off; this is the one place that
//! decides when log entries go. A follower that needs a purged entry is sent a snapshot,
//! which ships only the CommitLog bytes it lacks.

use std::time::Duration;

use openraft::async_runtime::watch::WatchReceiver;
use tokio_util::sync::CancellationToken;

use crate::raft::log::store::LOG_SEGMENT_SIZE_BYTES_DEFAULT;
use crate::raft::log::store::LogReader;
use crate::raft::log::store::LogSize;
use crate::raft::types::LogTypes;
use crate::raft::types::Raft;
use crate::state_machine::StateMachine;

/// When a node compacts its log.
#[derive(Debug, Clone)]
pub struct CompactionPolicy {
    /// At least this often while entries arrive.
    pub interval: Duration,
    /// And as soon as the log holds this many more bytes than after the last compaction.
    pub growth_bytes: u64,
    /// At most this many entries are kept behind the snapshot,
    pub retained: u64,
    /// and at most this many bytes of whole segments: with entries near the group-commit
    /// limit, `retained` entries alone could hold gigabytes of disk and page cache.
    pub retained_bytes: u64,
}

/// Default period between compactions.
pub const COMPACTION_INTERVAL_DEFAULT: Duration = Duration::from_secs(60);
/// Default number of entries kept behind the snapshot, so a briefly lagging follower still
/// catches up from the log.
pub const RETAINED_ENTRIES_DEFAULT: u64 = 1024;
/// Default bytes of whole log segments kept behind the snapshot (a busy W1 log keeps about
/// 1,024 entries within it; entries of megabytes keep fewer).
pub const RETAINED_BYTES_DEFAULT: u64 = 128 * 1024 * 1024;
/// Default growth of the log, in bytes, that starts a compaction before the interval ends.
/// One default segment: a busy log then frees about a segment at a time, and new entries go
/// into the page cache just freed (warm) instead of first into new pages; with four segments
/// W1 `async` ran 15-20% slower on a cluster's second run.
pub const COMPACTION_GROWTH_BYTES_DEFAULT: u64 = LOG_SEGMENT_SIZE_BYTES_DEFAULT;
/// How often the log's growth is checked.
const GROWTH_CHECK_INTERVAL: Duration = Duration::from_millis(100);
/// How long one compaction may wait for its snapshot and purge.
const COMPACTION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a compaction waits for the snapshot it asked for before it asks again.
const SNAPSHOT_ASK_AGAIN: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    #[error("raft: {0}")]
    Raft(String),
    #[error("timed out waiting for the {0}")]
    Timeout(&'static str),
}

/// Takes a snapshot of everything applied so far, then purges the log up to
/// `purge_point(snapshot index)`, never past the snapshot. Returns the index purged up to, if
/// anything was purged.
pub async fn compact_log<C: LogTypes>(
    raft: &openraft::Raft<C, StateMachine>,
    purge_point: impl Fn(u64) -> u64,
    timeout: Duration,
) -> Result<Option<u64>, CompactionError> {
    let raft_error = |error: &dyn std::fmt::Display| CompactionError::Raft(error.to_string());
    let deadline = tokio::time::Instant::now() + timeout;
    let mut metrics = raft.metrics();
    let applied = metrics
        .borrow_watched()
        .last_applied
        .map_or(0, |log_id| log_id.index);
    // openraft drops a trigger while a snapshot is being built, and that one may predate
    // `applied`: ask again every SNAPSHOT_ASK_AGAIN until a snapshot covers it.
    let mut ask_at = tokio::time::Instant::now();
    let snapshot_index = loop {
        let snapshot = metrics.borrow_watched().snapshot;
        if let Some(log_id) = snapshot.filter(|log_id| log_id.index >= applied) {
            break log_id.index;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(CompactionError::Timeout("snapshot"));
        }
        if now >= ask_at {
            raft.trigger()
                .snapshot()
                .await
                .map_err(|e| raft_error(&e))?;
            ask_at = (now + SNAPSHOT_ASK_AGAIN).min(deadline);
        }
        if let Ok(changed) = tokio::time::timeout_at(ask_at, metrics.changed()).await {
            changed.map_err(|e| raft_error(&e))?;
        }
    };
    let purge_upto = purge_point(snapshot_index).min(snapshot_index);
    let purged = metrics.borrow_watched().purged.map(|log_id| log_id.index);
    if purge_upto == 0 || purged >= Some(purge_upto) {
        return Ok(None);
    }
    raft.trigger()
        .purge_log(purge_upto)
        .await
        .map_err(|e| raft_error(&e))?;
    loop {
        let purged = metrics.borrow_watched().purged;
        if purged.is_some_and(|log_id| log_id.index >= purge_upto) {
            return Ok(Some(purge_upto));
        }
        tokio::time::timeout_at(deadline, metrics.changed())
            .await
            .map_err(|_| CompactionError::Timeout("purge"))?
            .map_err(|e| raft_error(&e))?;
    }
}

/// Compacts `raft`'s log, whose size `log_size` tracks, as `policy` says until `shutdown`.
pub async fn run_compaction(
    raft: Raft,
    policy: CompactionPolicy,
    log: LogReader,
    log_size: LogSize,
    shutdown: CancellationToken,
) {
    // Whichever bound purges further: both then hold.
    let purge_point = |snapshot: u64| {
        let byte_floor = log
            .purge_floor_for_bytes(snapshot, policy.retained_bytes)
            .unwrap_or_else(|error| {
                tracing::warn!(%error, "raft log size unknown; purging by entries only");
                0
            });
        snapshot.saturating_sub(policy.retained).max(byte_floor)
    };
    let mut last_round = tokio::time::Instant::now();
    let mut size_after_last = log_size.bytes();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(GROWTH_CHECK_INTERVAL.min(policy.interval)) => {}
        }
        let grown = log_size.bytes().saturating_sub(size_after_last) >= policy.growth_bytes;
        if !grown && last_round.elapsed() < policy.interval {
            continue;
        }
        match compact_log(&raft, purge_point, COMPACTION_TIMEOUT).await {
            Ok(Some(purged)) => tracing::debug!(purged, grown, "raft log compacted"),
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "raft log compaction failed; retrying next round"),
        }
        last_round = tokio::time::Instant::now();
        size_after_last = log_size.bytes();
    }
}
