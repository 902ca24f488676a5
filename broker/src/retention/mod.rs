//! The retention task every node runs on its own store: each round it reads how full the data
//! dir's disk is, refuses sends while it is past `disk_full_ratio` (pulls go on), lets queue
//! files idle for [`IDLE_ROUNDS_BEFORE_RELEASE`] rounds give their pages back, and deletes
//! the oldest CommitLog segments the policy selects (`store::retention`).
//!
//! Invariant: nothing a restart or a peer may still need is deleted. The task never deletes
//! at or past `keep_from` = the CommitLog end of the last durable snapshot, less one segment:
//! a restart cuts the store back to that snapshot or a later checkpoint and replays the Raft
//! log from there; a follower given the snapshot receives the CommitLog from at least one
//! segment before its end; and apply's retry dedup looks back one segment size
//! (`MessageStore::find_unique`), so every replica keeps what dedup reads whatever else it
//! deleted. Nor at or past the oldest entry a schedule queue still owes
//! (`schedule::pending`): a delayed message, timer or half message not yet in its topic is
//! kept however old it is. Nothing is deleted before the first snapshot
//! (`raft.log_compaction_interval_ms`).
//! Replicas delete independently: the same offsets hold the same bytes everywhere, only the
//! first offset differs.

pub mod policy;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;

use crate::config::RetentionSettings;
use crate::group_state::GroupState;
use crate::metrics::BrokerMetrics;
use crate::retention::policy::RetentionInput;
use crate::retention::policy::local_hour;
use crate::retention::policy::segments_to_delete;
use crate::schedule::pending::oldest_pending_offset;
use crate::store::Deleted;
use crate::store::StoreError;

/// Default interval between rounds (RocketMQ's `cleanResourceInterval`).
pub const RETENTION_INTERVAL_DEFAULT: Duration = Duration::from_secs(10);
/// Rounds a queue file must go unread and unwritten before it gives its pages back (about
/// 20-30 s at the default interval): an idle queue then holds no resident memory for its
/// files, while one read every few seconds keeps them.
pub const IDLE_ROUNDS_BEFORE_RELEASE: u32 = 3;

/// Runs retention rounds on `group`'s store until `shutdown`.
pub async fn run_retention(
    group: Arc<GroupState>,
    data_dir: PathBuf,
    settings: RetentionSettings,
    metrics: Arc<BrokerMetrics>,
    shutdown: CancellationToken,
) {
    let interval = Duration::from_millis(settings.check_interval_ms);
    let mut held_back = HeldBack::default();
    loop {
        let round = {
            let (group, data_dir, settings) = (group.clone(), data_dir.clone(), settings.clone());
            tokio::task::spawn_blocking(move || {
                retention_round(&group, &data_dir, &settings, SystemTime::now())
            })
        };
        match round.await {
            Ok(Ok(round)) => {
                metrics.retention_deleted(round.deleted.commit_log_bytes);
                if round.held_back != held_back {
                    round.held_back.log();
                    held_back = round.held_back;
                }
            }
            Ok(Err(error)) => tracing::error!(%error, "retention round failed"),
            Err(error) => tracing::error!(%error, "retention round panicked"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// What went wrong in a round.
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    #[error("cannot read the disk usage of {}", .path.display())]
    DiskUsage {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("deleting CommitLog segments failed")]
    Store(#[from] StoreError),
}

/// What a round did.
#[derive(Debug, Default)]
struct Round {
    deleted: Deleted,
    held_back: HeldBack,
}

/// Segments the policy would have deleted but a schedule queue still needs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct HeldBack {
    segments: usize,
    /// The oldest entry a schedule queue still owes.
    pending_from: u64,
}

impl HeldBack {
    fn log(&self) {
        if self.segments == 0 {
            tracing::info!("retention no longer holds back segments for schedule queues");
        } else {
            tracing::warn!(
                segments = self.segments,
                pending_from = self.pending_from,
                "retention keeps segments the policy would delete: a delayed, timer or half \
                 message in them is not in its topic yet"
            );
        }
    }
}

/// One round at `now`.
fn retention_round(
    group: &GroupState,
    data_dir: &Path,
    settings: &RetentionSettings,
    now: SystemTime,
) -> Result<Round, RetentionError> {
    let disk_used_ratio = disk_used_ratio(data_dir)?;
    let full = disk_used_ratio >= settings.disk_full_ratio;
    let was_full = group.disk_full();
    group.set_disk_usage(disk_used_ratio, full);
    if full != was_full {
        if full {
            tracing::error!(
                disk_used_ratio,
                disk_full_ratio = settings.disk_full_ratio,
                "disk full: refusing sends until retention frees space"
            );
        } else {
            tracing::info!(
                disk_used_ratio,
                "disk below the full mark: accepting sends again"
            );
        }
    }
    let released = group
        .store_mut()
        .release_idle_queue_pages(IDLE_ROUNDS_BEFORE_RELEASE);
    if released > 0 {
        tracing::debug!(released, "idle queue files gave their pages back");
    }
    let Some(snapshot_end) = group.snapshot_end() else {
        return Ok(Round::default());
    };
    let (sealed, dedup_window) = {
        let store = group.store();
        (
            store.sealed_commit_log_segments()?,
            store.dedup_window_bytes(),
        )
    };
    let recoverable_from = snapshot_end.saturating_sub(dedup_window);
    let pending_from = oldest_pending_offset(group);
    let mut input = RetentionInput {
        now,
        hour: local_hour(now),
        disk_used_ratio,
        keep_from: recoverable_from.min(pending_from.unwrap_or(u64::MAX)),
    };
    let count = segments_to_delete(&sealed, &settings.policy(), &input);
    let mut held_back = HeldBack::default();
    if let Some(pending_from) = pending_from.filter(|from| *from < recoverable_from) {
        input.keep_from = recoverable_from;
        let segments = segments_to_delete(&sealed, &settings.policy(), &input);
        held_back = HeldBack {
            segments: segments.saturating_sub(count),
            pending_from,
        };
        if held_back.segments == 0 {
            held_back = HeldBack::default();
        }
    }
    if count == 0 {
        return Ok(Round {
            deleted: Deleted::default(),
            held_back,
        });
    }
    // Only taking the files out of the store holds it; deleting them does not.
    let (deleted, detached) = group.store_mut().detach_oldest_segments(count)?;
    detached.delete()?;
    tracing::info!(
        segments = count,
        bytes = deleted.commit_log_bytes,
        commit_log_min = deleted.commit_log_min,
        cq_units = deleted.cq_units,
        index_entries = deleted.index_entries,
        disk_used_ratio,
        "retention deleted the oldest CommitLog segments"
    );
    Ok(Round { deleted, held_back })
}

/// Fraction of the file system holding `path` in use, as `df` counts it (blocks reserved
/// for root count as unavailable).
pub fn disk_used_ratio(path: &Path) -> Result<f64, RetentionError> {
    let failed = |source| RetentionError::DiskUsage {
        path: path.to_path_buf(),
        source,
    };
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| failed(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call, and `stats` points
    // to writable memory of the right type, which statvfs fills on success.
    if unsafe { libc::statvfs(c_path.as_ptr(), stats.as_mut_ptr()) } != 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    // SAFETY: statvfs returned 0, so it initialised `stats`.
    let stats = unsafe { stats.assume_init() };
    let used = stats.f_blocks.saturating_sub(stats.f_bfree) as f64;
    let usable = used + stats.f_bavail as f64;
    Ok(if usable > 0.0 { used / usable } else { 1.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_usage_is_a_fraction_and_a_missing_dir_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ratio = disk_used_ratio(dir.path()).expect("statvfs");
        assert!((0.0..=1.0).contains(&ratio), "{ratio}");
        let missing = dir.path().join("missing");
        assert!(matches!(
            disk_used_ratio(&missing),
            Err(RetentionError::DiskUsage { .. })
        ));
    }
}
