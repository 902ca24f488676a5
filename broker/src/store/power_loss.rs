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

/// The files are read this many bytes at a time.
const READ_CHUNK_BYTES: usize = 1 << 20;
/// What a power loss keeps or loses as a unit: one page of the page cache.
const PAGE_BYTES: usize = 4096;

/// What [`lose_unsynced`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LostWrites {
    /// The last store checkpoint's flushed CommitLog offset: everything below it stays.
    pub flushed_offset: u64,
    /// CommitLog bytes past it that held data (up to each lost page's last non-zero byte),
    /// now zeros.
    pub bytes_lost: u64,
}

/// Zeroes every CommitLog byte of the store under `store_dir` at or past the last
/// checkpoint's flushed offset and syncs the files. The node must be stopped.
pub fn lose_unsynced(store_dir: &Path) -> Result<LostWrites, StoreError> {
    lose_unsynced_pages(store_dir, || true)
}

/// As [`lose_unsynced`], page by page: of the pages past the flushed offset that hold data,
/// zeroes those `lose_page` picks (in file order) and keeps the others, as a power loss does
/// when writeback had reached some pages and not others.
pub fn lose_unsynced_pages(
    store_dir: &Path,
    mut lose_page: impl FnMut() -> bool,
) -> Result<LostWrites, StoreError> {
    let (checkpoint, _) = Checkpoint::load(store_dir)?;
    let flushed_offset = checkpoint.commit_log_flushed_offset;
    let dir = store_dir.join(COMMIT_LOG_DIR);
    let zeros = [0u8; PAGE_BYTES];
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    let mut bytes_lost = 0;
    for (start, path) in list_segments(&dir)? {
        let io = |error| StoreError::io("zero unsynced CommitLog bytes", &path, error);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut at = flushed_offset.saturating_sub(start);
        let mut zeroed = false;
        while at < len {
            // Reads end on a page boundary, so no page is split between two.
            let whole = READ_CHUNK_BYTES - (at % PAGE_BYTES as u64) as usize;
            let size = usize::try_from(len - at).map_or(whole, |left| left.min(whole));
            let read = &mut chunk[..size];
            file.read_exact_at(read, at).map_err(io)?;
            // Pages end on multiples of the page size (the first may start inside one).
            let mut page_start = 0;
            while page_start < size {
                let page_end = (((at + page_start as u64) / PAGE_BYTES as u64 + 1)
                    * PAGE_BYTES as u64
                    - at) as usize;
                let page = &read[page_start..page_end.min(size)];
                // Preallocated space reads as zeros already: only data is written over.
                if let Some(last) = page.iter().rposition(|byte| *byte != 0)
                    && lose_page()
                {
                    file.write_all_at(&zeros[..page.len()], at + page_start as u64)
                        .map_err(io)?;
                    bytes_lost += last as u64 + 1;
                    zeroed = true;
                }
                page_start = page_end;
            }
            at += size as u64;
        }
        if zeroed {
            file.sync_all().map_err(io)?;
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

    /// A store in `dir` with segments of `segment_bytes` that flushed 100 records, then wrote
    /// records up to `records` to its files (the page cache) and stopped before the fsyncs
    /// and the checkpoint that would finish that flush. Returns its config, the flushed
    /// offset and where the writes end.
    fn written_past_a_flush(
        dir: &Path,
        segment_bytes: u64,
        records: usize,
    ) -> (StoreConfig, u64, u64) {
        let config = StoreConfig {
            commit_log_segment_bytes: segment_bytes,
            ..StoreConfig::new(dir)
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
        for i in 100..records {
            store.append(&record(i)).expect("append");
        }
        let written_end = store.commit_log_max_offset() as u64;
        drop(store.begin_flush().expect("write to the files"));
        (config, flushed, written_end)
    }

    #[test]
    fn what_the_last_checkpoint_did_not_flush_is_lost_and_recovery_ends_there() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Enough to fill the segment and start another, never flushed.
        let (config, flushed, written_end) = written_past_a_flush(dir.path(), 64 * 1024, 1000);
        assert!(written_end > 64 * 1024);

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

    #[test]
    fn a_record_past_the_flush_whose_tags_were_torn_is_cut_not_a_failed_open() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let config = StoreConfig::new(dir.path());
        let (mut store, _) = MessageStore::open(config.clone()).expect("open");
        let record = |i: usize| sample("T", 0, format!("body {i}").as_bytes());
        for i in 0..10 {
            store
                .append(&record(i).encode().expect("encode"))
                .expect("append");
        }
        store.flush().expect("checkpoint");
        let mut torn = None;
        for i in 10..20 {
            let appended = store
                .append(&record(i).encode().expect("encode"))
                .expect("append");
            if i == 15 {
                torn = Some(appended);
            }
        }
        drop(store.begin_flush().expect("write to the files"));
        drop(store);
        // The page holding record 15's properties was lost, its body's was not: its tags
        // (the properties' first entry) read as zeros.
        let torn = torn.expect("record 15");
        let encoded = record(15).encode().expect("encode");
        let tags_at = encoded
            .windows(4)
            .position(|window| window == b"TAGS")
            .expect("tags");
        let segment = dir
            .path()
            .join(crate::store::commit_log::COMMIT_LOG_DIR)
            .join(crate::store::mapped_file::file_name(0));
        let file = OpenOptions::new().write(true).open(segment).expect("open");
        file.write_all_at(&[0u8; 8], torn.commit_log_offset as u64 + tags_at as u64)
            .expect("tear");
        drop(file);

        let (store, report) = MessageStore::open(config).expect("a torn record is no failed open");
        assert_eq!(
            store.commit_log_max_offset(),
            torn.commit_log_offset,
            "cut at the torn record: {report:?}"
        );
        assert_eq!(store.consume_queue_offsets("T", 0).1, 15);
    }

    #[test]
    fn pages_kept_after_a_lost_one_are_not_taken_for_data_or_damage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (config, flushed, written_end) = written_past_a_flush(dir.path(), 256 * 1024, 600);

        // Writeback reached the page holding the flushed offset and every page after the
        // next one, but not that one.
        let mut pages = 0;
        let lost = lose_unsynced_pages(dir.path(), || {
            pages += 1;
            pages == 2
        })
        .expect("lose");
        assert!(pages > 3, "{pages} pages past the flush");
        assert!(lost.bytes_lost > 0 && lost.bytes_lost <= PAGE_BYTES as u64);
        let (store, report) = MessageStore::open(config).expect("reopen");
        let end = store.commit_log_max_offset() as u64;
        let lost_page = (flushed / PAGE_BYTES as u64 + 1) * PAGE_BYTES as u64;
        // A record may reach into the lost page by its properties (no CRC covers them: the
        // state machine cuts the store back to its checkpoint), never past it.
        assert!(
            end > flushed && end < lost_page + PAGE_BYTES as u64 && end < written_end,
            "recovery ends at the page lost, at {end}: {report:?}"
        );
        let (_, queued) = store.consume_queue_offsets("T", 0);
        assert!(queued > 100 && queued < 600, "{queued} queued");
        let last = store
            .read_consume_queue("T", 0, queued - 1, 1)
            .into_iter()
            .next()
            .expect("last unit");
        assert_eq!(
            last.commit_log_offset as u64 + last.size as u64,
            end,
            "no unit points past the CommitLog"
        );
    }
}
