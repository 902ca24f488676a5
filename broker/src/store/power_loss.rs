//! What a power loss takes from a stopped node's store, for failover drills (`broker
//! lose-unsynced`, the drill's `crash-all-unsynced`): the CommitLog bytes past the last store
//! checkpoint's flushed offset. They were written through the page cache and may never have
//! reached the disk; the checkpoint is the store's own record of what did.
//!
//! The bytes are zeroed, not cut: segments are preallocated, so a fresh disk block reads as
//! zeros, which is what the file would hold after such a loss. Recovery then finds the
//! CommitLog ending at the flushed offset, drops the ConsumeQueue units and index entries
//! that point past it, and the state machine replays what followed from the Raft log.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::store::checkpoint::Checkpoint;
use crate::store::commit_log::COMMIT_LOG_DIR;
use crate::store::error::StoreError;
use crate::store::mapped_file::list_segments;

/// Zeroes are written this many bytes at a time.
const ZERO_CHUNK_BYTES: usize = 1 << 20;

/// What [`lose_unsynced`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LostWrites {
    /// The last store checkpoint's flushed CommitLog offset: everything below it stays.
    pub flushed_offset: u64,
    /// CommitLog bytes past it that held data (up to each segment's last non-zero byte),
    /// now zeros.
    pub bytes_lost: u64,
}

/// Zeroes every CommitLog byte of the store under `store_dir` at or past the last
/// checkpoint's flushed offset and syncs the files. The node must be stopped.
pub fn lose_unsynced(store_dir: &Path) -> Result<LostWrites, StoreError> {
    let (checkpoint, _) = Checkpoint::load(store_dir)?;
    let flushed_offset = checkpoint.commit_log_flushed_offset;
    let dir = store_dir.join(COMMIT_LOG_DIR);
    let zeros = vec![0u8; ZERO_CHUNK_BYTES];
    let mut chunk = vec![0u8; ZERO_CHUNK_BYTES];
    let mut bytes_lost = 0;
    for (start, path) in list_segments(&dir)? {
        let io = |error| StoreError::io("zero unsynced CommitLog bytes", &path, error);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let from = flushed_offset.saturating_sub(start);
        let mut at = from;
        let mut data_end = from;
        while at < len {
            let size = usize::try_from(len - at)
                .map_or(ZERO_CHUNK_BYTES, |left| left.min(ZERO_CHUNK_BYTES));
            let read = &mut chunk[..size];
            file.read_exact_at(read, at).map_err(io)?;
            // Preallocated space reads as zeros already: only data is written over.
            if let Some(last) = read.iter().rposition(|byte| *byte != 0) {
                file.write_all_at(&zeros[..size], at).map_err(io)?;
                data_end = at + last as u64 + 1;
            }
            at += size as u64;
        }
        if data_end > from {
            file.sync_all().map_err(io)?;
            bytes_lost += data_end - from;
        }
    }
    Ok(LostWrites {
        flushed_offset,
        bytes_lost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MessageStore;
    use crate::store::StoreConfig;
    use crate::store::record::tests::sample;

    #[test]
    fn what_the_last_checkpoint_did_not_flush_is_lost_and_recovery_ends_there() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = StoreConfig {
            commit_log_segment_bytes: 64 * 1024,
            ..StoreConfig::new(dir.path())
        };
        let (mut store, _) = MessageStore::open(config.clone()).expect("open");
        let record = |i: usize| {
            sample("T", 0, format!("body {i}").as_bytes())
                .encode()
                .expect("encode")
        };
        for i in 0..100 {
            store.append(&record(i)).expect("append");
        }
        store.flush().expect("checkpoint");
        let flushed = store.commit_log_max_offset() as u64;
        // Enough to fill the segment and start another, never flushed.
        for i in 100..1000 {
            store.append(&record(i)).expect("append");
        }
        let written_end = store.commit_log_max_offset() as u64;
        assert!(written_end > 64 * 1024);
        // The writes reach the page cache (the files), and the crash comes before the fsyncs
        // and the checkpoint that would finish this flush.
        let unfinished = store.begin_flush().expect("write to the files");
        drop(unfinished);
        drop(store);

        let lost = lose_unsynced(dir.path()).expect("lose");
        assert_eq!(lost.flushed_offset, flushed);
        assert!(
            lost.bytes_lost > 0 && lost.bytes_lost <= written_end - flushed,
            "{lost:?}, written to {written_end}"
        );
        let (store, report) = MessageStore::open(config).expect("reopen");
        assert_eq!(store.commit_log_max_offset() as u64, flushed, "{report:?}");
        assert_eq!(store.consume_queue_offsets("T", 0).1, 100);
        assert_eq!(
            lose_unsynced(dir.path()).expect("again").bytes_lost,
            0,
            "nothing past the flush any more"
        );
    }
}
