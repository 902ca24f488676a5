//! The durable Raft log of a node: segment files ([`LogSegment`]) plus the vote (in two
//! copies, [`vote_file`]) and the purge mark, implementing openraft's `RaftLogStorage`.
//!
//! Invariants:
//! - entries are contiguous from `last_purged + 1` to `last_log_id`; no holes;
//! - an append is readable when `append` returns, and its `IOFlushed` callback fires only
//!   after the data is fsynced ([`FlushMode::Sync`]), so a leader never counts an entry
//!   toward commit before it would survive a crash;
//! - the vote is fsynced before `save_vote` returns; writes are issued in call order;
//! - a purge takes effect at once and reaches the disk in the background ([`Purger`]): until
//!   it does, a restart finds the older purge point with the entries behind it still there.

use std::fmt::Debug;
use std::io;
use std::marker::PhantomData;
use std::ops::Bound;
use std::ops::RangeBounds;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::RwLock;
use std::sync::RwLockWriteGuard;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::entry::RaftEntry;
use openraft::storage::IOFlushed;
use openraft::storage::LogState;
use openraft::storage::RaftLogReader;
use openraft::storage::RaftLogStorage;
use serde::Deserialize;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::disk::Disk;
use crate::disk::DiskFile;
use crate::durable_file;
use crate::durable_file::DurableFileError;
use crate::raft::codec;
use crate::raft::log::entry_cache::EntryCache;
use crate::raft::log::flusher::CurrentSegment;
use crate::raft::log::flusher::Flusher;
use crate::raft::log::flusher::Written;
use crate::raft::log::purger::PurgeJob;
use crate::raft::log::purger::Purger;
use crate::raft::log::repair;
use crate::raft::log::repair::RepairMark;
use crate::raft::log::segment::LogSegment;
use crate::raft::log::segment::RecordBatch;
use crate::raft::log::vote_file;
use crate::raft::types::Entry;
use crate::raft::types::LogId;
use crate::raft::types::LogTypes;
use crate::raft::types::TypeConfig;
use crate::raft::types::Vote;

/// The record format of the segments (see `log_segment`); kept in the log's `format` file.
/// Format 1 had no header checksum.
const RECORD_FORMAT: u32 = 2;

/// A segment is sealed and a new one started once it reaches this size.
/// Purges delete whole segments, so smaller ones bound the log (and the page cache it holds)
/// more tightly behind the snapshot.
pub const LOG_SEGMENT_SIZE_BYTES_DEFAULT: u64 = 16 * 1024 * 1024;
/// Entries read for one replication request stop after this many bytes (at least one entry
/// is always returned), so a message near the 4 MiB maximum never makes one RPC huge.
pub const REPLICATION_READ_BYTES_MAX: u64 = 8 * 1024 * 1024;

/// When an appended entry counts as durable (RocketMQ's flushDiskType).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FlushMode {
    /// fsync before acknowledging an append.
    Sync,
    /// Acknowledge once written; fsync every `interval`. Durability comes from replication.
    Async { interval: Duration },
}

impl FlushMode {
    /// How long after an entry is applied it may still be lost by a power loss of the whole
    /// group: until the next flusher rounds of a majority (twice the interval, for slack).
    /// Zero under `sync`. See `StateMachine::with_durability_lag`.
    pub fn durability_lag(self) -> Duration {
        match self {
            FlushMode::Sync => Duration::ZERO,
            FlushMode::Async { interval } => interval * 2,
        }
    }
}

#[derive(Debug, Clone)]
pub struct LogStoreConfig {
    pub disk: Arc<dyn Disk>,
    pub dir: PathBuf,
    pub segment_size_bytes: u64,
    pub flush: FlushMode,
    /// Where the log counts as purged if its purge mark is found damaged: the last entry of
    /// the node's durable snapshot. The log is purged only behind a snapshot, so no purge
    /// passed it, and openraft needs the purge point at or below the snapshot (it is
    /// rewritten as the mark).
    pub purged_if_mark_damaged: Option<LogId>,
}

/// What the log looks like on disk; shared by the writer and the readers.
#[derive(Debug)]
struct LogFiles {
    disk: Arc<dyn Disk>,
    /// Holds the `vote` and `purged` files.
    root: PathBuf,
    /// Holds the segment files.
    dir: PathBuf,
    /// Ordered by first index, contiguous.
    segments: Vec<LogSegment>,
    vote: Option<Vote>,
    last_purged: Option<LogId>,
    last_log_id: Option<LogId>,
    /// The newest entries, so replication reads skip the disk.
    cache: EntryCache,
    /// Bytes of the segments held, published for compaction.
    size: LogSize,
}

/// The bytes a log's segments hold, readable while openraft owns the log: compaction runs
/// when the log has grown by a set amount.
#[derive(Debug, Clone, Default)]
pub struct LogSize(Arc<AtomicU64>);

impl LogSize {
    pub fn bytes(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Serialize, Deserialize)]
struct PurgeMark {
    last_purged: Option<LogId>,
}

pub struct LogStore<C: LogTypes = TypeConfig> {
    files: Arc<RwLock<LogFiles>>,
    segment_size_bytes: u64,
    flusher: Flusher<C>,
    purger: Purger,
    /// Encoding buffer of appends, reused so a busy log allocates no per-append buffers.
    batch: RecordBatch,
}

pub struct LogReader<C: LogTypes = TypeConfig> {
    files: Arc<RwLock<LogFiles>>,
    types: PhantomData<fn() -> C>,
}

impl<C: LogTypes> Clone for LogReader<C> {
    fn clone(&self) -> Self {
        LogReader {
            files: self.files.clone(),
            types: PhantomData,
        }
    }
}

/// Who runs the flusher's rounds.
enum FlusherDriver {
    Thread,
    /// The caller, through [`LogStore::run_flush_round`] (the crash simulation).
    #[cfg(test)]
    Manual,
}

/// The current segment's file, for the flusher's periodic rounds.
fn current_segment_of(files: Arc<RwLock<LogFiles>>) -> CurrentSegment {
    Box::new(move || {
        files
            .read()
            .ok()
            .and_then(|files| files.segments.last().map(|s| s.file().clone()))
    })
}

impl LogStore {
    /// Opens or creates the log under `config.dir`, cutting a torn tail if the last run crashed.
    pub fn open(config: LogStoreConfig) -> io::Result<LogStore> {
        LogStore::open_with(config, FlusherDriver::Thread)
    }
}

impl<C: LogTypes> LogStore<C> {
    /// [`LogStore::open`] with a flusher that syncs only in [`LogStore::run_flush_round`].
    #[cfg(test)]
    pub fn open_flushed_by_caller(config: LogStoreConfig) -> io::Result<LogStore<C>> {
        LogStore::open_with(config, FlusherDriver::Manual)
    }

    /// Runs one flusher round now (a store opened by [`LogStore::open_flushed_by_caller`]).
    #[cfg(test)]
    pub fn run_flush_round(&self) {
        if let Some(rounds) = self.flusher.manual_rounds() {
            rounds.run();
        }
    }

    /// The handle that runs this store's flusher rounds, which stays valid after the store
    /// moved into openraft (a store opened by [`LogStore::open_flushed_by_caller`]).
    #[cfg(test)]
    pub fn flush_rounds(&self) -> Option<crate::raft::log::flusher::ManualRounds<C>> {
        self.flusher.manual_rounds()
    }

    fn open_with(config: LogStoreConfig, flusher_driver: FlusherDriver) -> io::Result<LogStore<C>> {
        let disk = config.disk.clone();
        let segments_dir = config.dir.join("segments");
        disk.create_dir_all(&segments_dir)?;
        check_record_format(&*disk, &config.dir, &segments_dir)?;
        let vote = vote_file::open(&*disk, &config.dir)?;
        let last_purged = read_purge_mark(&*disk, &config.dir, config.purged_if_mark_damaged)?;
        let (segments, damage) = recover_segments(&disk, &segments_dir, last_purged.as_ref())?;
        if let Some(found) = damage {
            repair::record_damage(&*disk, &config.dir, found)?;
        }
        let mut files = LogFiles {
            disk: disk.clone(),
            root: config.dir.clone(),
            dir: segments_dir.clone(),
            segments,
            vote,
            last_purged,
            last_log_id: None,
            cache: EntryCache::default(),
            size: LogSize::default(),
        };
        files.last_log_id = files.read_last_log_id()?;
        files.publish_size();
        tracing::info!(
            dir = %config.dir.display(), segments = files.segments.len(),
            last_log_id = ?files.last_log_id, last_purged = ?files.last_purged, "raft log opened"
        );
        let files = Arc::new(RwLock::new(files));
        let (flusher, purger) = match flusher_driver {
            FlusherDriver::Thread => (
                Flusher::start(
                    config.flush,
                    disk.clone(),
                    segments_dir,
                    current_segment_of(files.clone()),
                )?,
                Purger::start(disk)?,
            ),
            #[cfg(test)]
            FlusherDriver::Manual => (
                Flusher::manual(
                    config.flush,
                    disk.clone(),
                    segments_dir,
                    current_segment_of(files.clone()),
                ),
                Purger::inline(disk),
            ),
        };
        Ok(LogStore {
            files,
            segment_size_bytes: config.segment_size_bytes,
            flusher,
            purger,
            batch: RecordBatch::default(),
        })
    }

    /// The index of the last entry the log holds or held before a purge, if any.
    pub fn last_index(&self) -> io::Result<Option<u64>> {
        let files = self
            .files
            .read()
            .map_err(|_| io::Error::other("raft log lock poisoned"))?;
        Ok(files.last_log_id.map(|log_id| log_id.index))
    }

    fn write_files(&self) -> io::Result<RwLockWriteGuard<'_, LogFiles>> {
        lock_for_write(&self.files)
    }

    /// Writes `entries` after the last one, encoding each once into the reused record batch
    /// and writing each segment's share with one write; rolls segments as they fill. Returns
    /// what the flusher must sync: a roll's sealed segment and new directory entry are synced
    /// there too, not here, so a roll never stalls appends behind an fsync.
    fn append_entries(&mut self, entries: &[Entry]) -> io::Result<Written> {
        let mut files = lock_for_write(&self.files)?;
        let batch = &mut self.batch;
        batch.clear();
        let mut expected_index = files.next_index();
        let mut encoded_sizes = Vec::with_capacity(entries.len());
        let mut written = Written::default();
        for entry in entries {
            let log_id = entry.log_id();
            if let Some(expected) = expected_index.filter(|expected| *expected != log_id.index) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "raft log append at index {}, expected {expected}",
                        log_id.index
                    ),
                ));
            }
            expected_index = Some(log_id.index + 1);
            let roll = files.segments.last().is_none_or(|last| {
                let size_bytes = last.size_bytes() + batch.size_bytes();
                last.end_index() + batch.len() as u64 != log_id.index
                    || (size_bytes > 0 && size_bytes >= self.segment_size_bytes)
            });
            if roll {
                files.write_batch(batch)?;
                written.sealed.extend(files.start_segment(log_id.index)?);
                written.created_segment = true;
            }
            encoded_sizes.push(u64::from(batch.push(entry)?));
        }
        files.write_batch(batch)?;
        if let Some(last) = entries.last() {
            files.last_log_id = Some(last.log_id());
        }
        for (entry, encoded_bytes) in entries.iter().zip(encoded_sizes) {
            files.cache.push(entry.clone(), encoded_bytes);
        }
        files.publish_size();
        written.current = files.segments.last().map(|s| s.file().clone());
        Ok(written)
    }
}

fn lock_for_write(files: &RwLock<LogFiles>) -> io::Result<RwLockWriteGuard<'_, LogFiles>> {
    files
        .write()
        .map_err(|_| io::Error::other("raft log lock poisoned"))
}

impl LogFiles {
    /// The index the next appended entry must have; `None` while the log has never held an
    /// entry, when any index may start it. Segments can end at or below the purge point
    /// when recovery cut damaged entries there: the log then goes on after the purge point.
    fn next_index(&self) -> Option<u64> {
        let after_segments = self
            .segments
            .last()
            .filter(|last| !last.is_empty())
            .map(LogSegment::end_index);
        let after_purge = self.last_purged.as_ref().map(|p| p.index + 1);
        after_segments
            .max(after_purge)
            .or_else(|| self.last_log_id.as_ref().map(|log_id| log_id.index + 1))
    }

    fn write_batch(&mut self, batch: &mut RecordBatch) -> io::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let segment = self
            .segments
            .last_mut()
            .ok_or_else(|| io::Error::other("no segment"))?;
        segment.append(batch)?;
        batch.clear();
        Ok(())
    }

    /// Seals the current segment and starts one whose first entry is `first_index`. Returns
    /// the sealed segment's file, for the caller to have synced (an empty one is deleted).
    fn start_segment(&mut self, first_index: u64) -> io::Result<Option<Arc<dyn DiskFile>>> {
        let mut sealed = None;
        if self.segments.last().is_some_and(LogSegment::is_empty) {
            if let Some(empty) = self.segments.pop() {
                empty.delete()?;
            }
        } else if let Some(last) = self.segments.last() {
            sealed = Some(last.file().clone());
        }
        self.segments
            .push(LogSegment::create(&self.disk, &self.dir, first_index)?);
        Ok(sealed)
    }

    fn read_last_log_id(&self) -> io::Result<Option<LogId>> {
        let last_present = self.segments.iter().rev().find(|s| !s.is_empty());
        match last_present {
            Some(segment)
                if Some(segment.end_index() - 1) > self.last_purged.as_ref().map(|p| p.index) =>
            {
                let (entry, _) = segment.read(segment.end_index() - 1)?;
                Ok(Some(entry.log_id()))
            }
            _ => Ok(self.last_purged),
        }
    }

    fn segment_of(&self, index: u64) -> Option<&LogSegment> {
        let slot = self.segments.partition_point(|s| s.first_index() <= index);
        let segment = self.segments.get(slot.checked_sub(1)?)?;
        (index < segment.end_index()).then_some(segment)
    }

    /// Reads entries of `range` that are present, stopping after `bytes_max` bytes.
    /// The first index the log holds (purged entries and cut segments are gone).
    fn first_present(&self) -> u64 {
        let first_kept = self.last_purged.as_ref().map_or(0, |p| p.index + 1);
        let first_on_disk = self.segments.first().map_or(0, LogSegment::first_index);
        first_kept.max(first_on_disk)
    }

    fn read_range(&self, range: impl RangeBounds<u64>, bytes_max: u64) -> io::Result<Vec<Entry>> {
        let first_present = self.first_present();
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i + 1,
            Bound::Unbounded => 0,
        }
        .max(first_present);
        let end = match range.end_bound() {
            Bound::Included(i) => i + 1,
            Bound::Excluded(i) => *i,
            Bound::Unbounded => u64::MAX,
        }
        .min(self.next_index().unwrap_or(0));
        let mut entries = Vec::new();
        let mut bytes = 0u64;
        for index in start..end {
            let (entry, len) = match self.cache.get(index) {
                Some((entry, len)) => (entry.clone(), *len),
                None => {
                    let Some(segment) = self.segment_of(index) else {
                        break;
                    };
                    let (entry, len) = segment.read(index)?;
                    (entry, u64::from(len))
                }
            };
            entries.push(entry);
            bytes += len;
            if bytes >= bytes_max {
                break;
            }
        }
        Ok(entries)
    }

    /// Drops every entry after `last_kept` (all entries if `None`).
    fn truncate_after(&mut self, last_kept: Option<&LogId>) -> io::Result<()> {
        let first_dropped = last_kept.map_or(0, |log_id| log_id.index + 1);
        self.cache.truncate_from(first_dropped);
        while let Some(last) = self.segments.last_mut() {
            if last.first_index() >= first_dropped {
                if let Some(segment) = self.segments.pop() {
                    segment.delete()?;
                }
            } else {
                last.truncate_from(first_dropped)?;
                break;
            }
        }
        if self.last_log_id.as_ref().map(|last| last.index) >= Some(first_dropped) {
            self.last_log_id = last_kept.cloned().or(self.last_purged);
        }
        self.publish_size();
        Ok(())
    }

    /// Takes out the segments whose entries are all at or below `upto`, for deletion.
    fn take_purged_segments(&mut self, upto: u64) -> Vec<LogSegment> {
        self.cache.purge_upto(upto);
        let purged = self
            .segments
            .iter()
            .take_while(|s| s.end_index() <= upto + 1)
            .count();
        self.segments.drain(..purged).collect()
    }

    /// The index a purge must reach so that the segments wholly at or below `snapshot` hold at
    /// most `retained_bytes`, the newest kept first; 0 if they already do. Purges delete whole
    /// segments, so this is always the last index of a segment.
    fn purge_floor_for_bytes(&self, snapshot: u64, retained_bytes: u64) -> u64 {
        let mut kept = 0u64;
        for segment in self.segments.iter().rev().filter(|s| !s.is_empty()) {
            let last = segment.end_index() - 1;
            if last > snapshot {
                continue;
            }
            kept = kept.saturating_add(segment.size_bytes());
            if kept > retained_bytes {
                return last;
            }
        }
        0
    }

    fn publish_size(&self) {
        let bytes = self.segments.iter().map(LogSegment::size_bytes).sum();
        self.size.0.store(bytes, Ordering::Relaxed);
    }
}

/// The purge point recorded in `root`. A mark that fails its checksum is replaced by
/// `if_damaged` (the last entry of the durable snapshot): every purge point it could have
/// held is at or below that, so the log loses only entries the snapshot holds.
fn read_purge_mark(
    disk: &dyn Disk,
    root: &Path,
    if_damaged: Option<LogId>,
) -> io::Result<Option<LogId>> {
    let path = root.join("purged");
    match durable_file::read_on(disk, &path) {
        Ok(bytes) => Ok(bytes
            .map(|bytes| codec::decode::<PurgeMark>("raft purge mark", &bytes))
            .transpose()?
            .and_then(|mark| mark.last_purged)),
        Err(DurableFileError::Corrupt { reason, .. }) => {
            tracing::error!(
                path = %path.display(), reason, purged_up_to = ?if_damaged,
                "raft purge mark damaged: the log is purged up to the snapshot's last entry"
            );
            let mark = PurgeMark {
                last_purged: if_damaged,
            };
            let encoded = codec::encode("raft purge mark", &mark)?;
            durable_file::write_atomic_on(disk, &path, &encoded)?;
            Ok(if_damaged)
        }
        Err(error) => Err(error.into()),
    }
}

/// Refuses a log written in another record format; records the format of a new log.
fn check_record_format(disk: &dyn Disk, root: &Path, segments_dir: &Path) -> io::Result<()> {
    let path = root.join("format");
    match durable_file::read_on(disk, &path)? {
        Some(bytes) if bytes == RECORD_FORMAT.to_le_bytes() => Ok(()),
        found => {
            let in_use = found.is_some()
                || !disk.list(segments_dir)?.is_empty()
                || vote_file::exists(disk, root)?;
            if in_use {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the raft log in {} was written by another rocketraft version (record \
                         format {}); this one reads format {RECORD_FORMAT}: wipe this node's data \
                         dir and let it rejoin its group",
                        root.display(),
                        found.map_or("1".to_string(), |bytes| format!("{bytes:?}")),
                    ),
                ));
            }
            durable_file::write_atomic_on(disk, &path, &RECORD_FORMAT.to_le_bytes())
                .map_err(io::Error::from)
        }
    }
}

/// The segments of `dir` with their valid prefixes, contiguous from the first; and the
/// damage found, if valid entries were cut (see `raft::repair`). Entries at or below the
/// purge point are covered by the snapshot: a segment holding only such entries (left by a
/// purge a crash interrupted, or by a cut) is deleted, and losing them is no damage.
fn recover_segments(
    disk: &Arc<dyn Disk>,
    dir: &Path,
    last_purged: Option<&LogId>,
) -> io::Result<(Vec<LogSegment>, Option<RepairMark>)> {
    let after_purge = last_purged.map_or(0, |log_id| log_id.index + 1);
    let mut segments: Vec<LogSegment> = Vec::new();
    // One past the last entry of the segments seen so far (kept, or deleted as purged).
    let mut previous_end: Option<u64> = None;
    // The last segment seen was cut for damage (not for an unsynced tail).
    let mut previous_cut_damaged = false;
    let mut damage: Option<RepairMark> = None;
    let mut note_damage = |cut_at_index: u64, up_to_index: u64| {
        if up_to_index < after_purge {
            return;
        }
        let found = RepairMark {
            cut_at_index: cut_at_index.max(after_purge),
            up_to_index,
        };
        damage = Some(match damage.take() {
            Some(known) => known.merge(found),
            None => found,
        });
    };
    for (first_index, path) in LogSegment::list(&**disk, dir)? {
        let recovered = LogSegment::recover(disk, first_index, path.clone())?;
        let segment = recovered.segment;
        // The next segment starts where the previous one ended, or, when that one ended at
        // or below the purge point, anywhere up to just past the purge point.
        let gap_from =
            previous_end.filter(|&end| first_index < end || first_index > end.max(after_purge));
        if gap_from.is_some_and(|end| first_index > end) && !previous_cut_damaged {
            // The previous segment lost an unsynced tail (cleanly or torn), so nothing after
            // it was ever promised: the flusher syncs a sealed segment before any later entry
            // counts as durable. Only damage to the previous segment makes this a loss.
            tracing::warn!(
                path = %path.display(),
                "raft log segment after a lost unsynced tail: deleted, never durable"
            );
            segment.delete()?;
            continue;
        }
        if let Some(end) = gap_from {
            // Written after entries that are now gone: its entries were held too.
            let cut_at_index = end;
            let held_up_to = recovered
                .damaged_up_to
                .unwrap_or(0)
                .max(segment.end_index().saturating_sub(1));
            if held_up_to >= cut_at_index {
                note_damage(cut_at_index, held_up_to);
            }
            tracing::error!(path = %path.display(), "raft log segment after a gap: deleted");
            segment.delete()?;
            continue;
        }
        if recovered.bytes_truncated > 0 {
            let bytes_truncated = recovered.bytes_truncated;
            match recovered.damaged_up_to {
                Some(up_to_index) => {
                    tracing::error!(
                        path = %path.display(), bytes_truncated, cut_at_index = segment.end_index(),
                        up_to_index, "raft log damaged: valid entries follow the cut"
                    );
                    note_damage(segment.end_index(), up_to_index);
                }
                None => {
                    tracing::warn!(path = %path.display(), bytes_truncated, "raft log torn tail cut")
                }
            }
        }
        // Even an empty one: a segment cut to nothing for damage at its first entry must not
        // let the next segment pass as the start of the log.
        previous_end = Some(segment.end_index());
        previous_cut_damaged = recovered.damaged_up_to.is_some();
        if segment.is_empty() || segment.end_index() <= after_purge {
            segment.delete()?;
        } else {
            segments.push(segment);
        }
    }
    Ok((segments, damage))
}

fn bounds_debug<RB: RangeBounds<u64>>(range: &RB) -> String {
    format!("{:?}..{:?}", range.start_bound(), range.end_bound())
}

impl<C: LogTypes> RaftLogReader<C> for LogReader<C> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let files = self
            .files
            .read()
            .map_err(|_| io::Error::other("raft log lock poisoned"))?;
        files.read_range(range.clone(), u64::MAX).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("read raft log {}: {error}", bounds_debug(&range)),
            )
        })
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, io::Error> {
        let files = self
            .files
            .read()
            .map_err(|_| io::Error::other("raft log lock poisoned"))?;
        if start < files.first_present() {
            // A replication stream that outlived a purge (openraft resumes a broken stream
            // from its old position): entries from a later index would be taken for the
            // ones it asked for, and the follower would refuse the gap and stop. Nothing is
            // sent; the leader replaces the stream with a snapshot.
            tracing::debug!(
                start,
                first_present = files.first_present(),
                "replication read below the purged log"
            );
            return Ok(Vec::new());
        }
        files.read_range(start..end, REPLICATION_READ_BYTES_MAX)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        let files = self
            .files
            .read()
            .map_err(|_| io::Error::other("raft log lock poisoned"))?;
        Ok(files.vote)
    }
}

/// How long a log must see no append before its entry cache is released.
pub const ENTRY_CACHE_IDLE_RELEASE: Duration = Duration::from_secs(5);

impl<C: LogTypes> LogStore<C> {
    /// A reader of this log, for tasks that run beside Raft.
    pub fn reader(&self) -> LogReader<C> {
        LogReader {
            files: self.files.clone(),
            types: PhantomData,
        }
    }
}

impl<C: LogTypes> LogReader<C> {
    /// The bytes this log's segments hold, kept current as it changes.
    pub fn size(&self) -> io::Result<LogSize> {
        let files = self
            .files
            .read()
            .map_err(|_| io::Error::other("raft log lock poisoned"))?;
        Ok(files.size.clone())
    }

    /// See `LogFiles::purge_floor_for_bytes`: where compaction must purge to so that at most
    /// `retained_bytes` of segments stay behind the snapshot at `snapshot`.
    pub fn purge_floor_for_bytes(&self, snapshot: u64, retained_bytes: u64) -> io::Result<u64> {
        let files = self
            .files
            .read()
            .map_err(|_| io::Error::other("raft log lock poisoned"))?;
        Ok(files.purge_floor_for_bytes(snapshot, retained_bytes))
    }

    /// Releases the entry cache if nothing was appended for `idle`; returns the bytes freed.
    pub fn release_idle_cache(&self, idle: Duration) -> u64 {
        match self.files.write() {
            Ok(mut files) => files.cache.release_if_idle(std::time::Instant::now(), idle),
            Err(_) => 0,
        }
    }
}

/// Releases `log`'s entry cache whenever it has been idle for [`ENTRY_CACHE_IDLE_RELEASE`],
/// until `shutdown`.
pub async fn release_idle_entry_cache(log: LogReader, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(ENTRY_CACHE_IDLE_RELEASE) => {}
        }
        let released = log.release_idle_cache(ENTRY_CACHE_IDLE_RELEASE);
        if released > 0 {
            tracing::debug!(released, "raft log idle: entry cache released");
        }
    }
}

impl<C: LogTypes> RaftLogReader<C> for LogStore<C> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        self.reader().try_get_log_entries(range).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.reader().read_vote().await
    }
}

impl<C: LogTypes> RaftLogStorage<C> for LogStore<C> {
    type LogReader = LogReader<C>;

    async fn get_log_state(&mut self) -> Result<LogState<C>, io::Error> {
        let files = self
            .files
            .read()
            .map_err(|_| io::Error::other("raft log lock poisoned"))?;
        Ok(LogState {
            last_purged_log_id: files.last_purged,
            last_log_id: files.last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.reader()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let mut files = self.write_files()?;
        vote_file::save(&*files.disk, &files.root, vote)?;
        files.vote = Some(*vote);
        Ok(())
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<C>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let written_to = self.append_entries(&entries)?;
        self.flusher.after_write(written_to, callback);
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        tracing::debug!(?last_log_id, "raft log truncate after");
        self.write_files()?.truncate_after(last_log_id.as_ref())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        tracing::debug!(?log_id, "raft log purge");
        let mark = codec::encode(
            "raft purge mark",
            &PurgeMark {
                last_purged: Some(log_id),
            },
        )?;
        let job = {
            let mut files = self.write_files()?;
            let segments = files.take_purged_segments(log_id.index);
            if files
                .last_log_id
                .as_ref()
                .is_none_or(|last| last.index < log_id.index)
            {
                files.last_log_id = Some(log_id);
            }
            files.last_purged = Some(log_id);
            files.publish_size();
            PurgeJob {
                mark_path: files.root.join("purged"),
                mark,
                segments,
            }
        };
        self.purger.purge(job)
    }
}

#[cfg(test)]
mod tests {
    use openraft::EntryPayload;
    use openraft::type_config::TypeConfigExt;

    use super::*;
    use crate::disk::OsDisk;
    use crate::raft::log::segment::RECORD_HEADER_SIZE;
    use crate::state_machine::command::Command;

    fn entry(term: u64, index: u64) -> Entry {
        let records = bytes::Bytes::from(vec![index as u8; 300]);
        Entry {
            log_id: LogId::new_term_index(term, index),
            payload: EntryPayload::Normal(Command::Append { records }),
        }
    }

    fn config(dir: &std::path::Path) -> LogStoreConfig {
        LogStoreConfig {
            disk: OsDisk::shared(),
            dir: dir.to_path_buf(),
            segment_size_bytes: 4096,
            flush: FlushMode::Sync,
            purged_if_mark_damaged: None,
        }
    }

    fn open(dir: &std::path::Path) -> LogStore {
        LogStore::open(config(dir)).expect("open log")
    }

    async fn append(store: &mut LogStore, entries: impl IntoIterator<Item = Entry>) {
        let (tx, rx) = TypeConfig::oneshot();
        store
            .append(
                entries.into_iter().collect::<Vec<_>>(),
                IOFlushed::signal(tx),
            )
            .await
            .expect("append");
        rx.await.expect("callback fired").expect("flushed");
    }

    /// Writes entries `0..count` to a new log in `dir` and closes it; returns its segments.
    async fn written_segments(dir: &Path, count: u64) -> Vec<(u64, PathBuf)> {
        let mut store = open(dir);
        append(&mut store, (0..count).map(|i| entry(1, i))).await;
        drop(store);
        LogSegment::list(&OsDisk, &dir.join("segments")).expect("list")
    }

    /// Writes entries `0..count` to a new log in `dir`, lets `alter` change the bytes of its
    /// last segment file (as a crash or bit rot would), and reopens it.
    async fn reopened_after(dir: &Path, count: u64, alter: impl FnOnce(&mut Vec<u8>)) -> LogStore {
        let (_, last_path) = written_segments(dir, count).await.pop().expect("a segment");
        let mut bytes = std::fs::read(&last_path).expect("read");
        alter(&mut bytes);
        std::fs::write(&last_path, &bytes).expect("write");
        open(dir)
    }

    async fn indexes(store: &mut LogStore) -> Vec<u64> {
        let entries = store.try_get_log_entries(..).await.expect("read");
        entries.iter().map(|e| e.log_id.index).collect()
    }

    #[tokio::test]
    async fn a_replication_read_below_the_purged_log_gets_nothing_not_later_entries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = open(dir.path());
        append(&mut store, (0..20).map(|i| entry(1, i))).await;
        store
            .purge(LogId::new_term_index(1, 9))
            .await
            .expect("purge");
        let mut reader = store.get_log_reader().await;
        let read = |entries: Vec<Entry>| entries.iter().map(|e| e.log_id.index).collect::<Vec<_>>();
        assert_eq!(
            read(reader.limited_get_log_entries(9, 15).await.expect("read")),
            Vec::<u64>::new(),
            "entry 9 is purged: nothing, rather than 10.. taken for 9.."
        );
        assert_eq!(
            read(reader.limited_get_log_entries(10, 15).await.expect("read")),
            (10..15).collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn the_byte_floor_keeps_the_newest_whole_segments_behind_the_snapshot_within_budget() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = open(dir.path());
        append(&mut store, (0..40).map(|i| entry(1, i))).await;
        let reader = store.get_log_reader().await;
        // (last index, bytes) of each segment, newest first, from the files themselves.
        let listed = LogSegment::list(&OsDisk, &dir.path().join("segments")).expect("list");
        assert!(
            listed.len() > 3,
            "4 KiB segments must roll: {}",
            listed.len()
        );
        let mut spans: Vec<(u64, u64)> = listed
            .iter()
            .enumerate()
            .map(|(i, (first, path))| {
                let last = listed.get(i + 1).map_or(39, |(next, _)| next - 1);
                assert!(last >= *first);
                (last, std::fs::metadata(path).expect("stat").len())
            })
            .collect();
        spans.reverse();
        let floor = |snapshot, budget| {
            reader
                .purge_floor_for_bytes(snapshot, budget)
                .expect("floor")
        };
        // Snapshot at the last entry: every segment is wholly behind it.
        let (newest_two, third_last) = (spans[0].1 + spans[1].1, spans[2].0);
        assert_eq!(
            floor(39, newest_two),
            third_last,
            "exactly at the budget: kept"
        );
        assert_eq!(
            floor(39, newest_two - 1),
            spans[1].0,
            "one byte over: the older goes"
        );
        assert_eq!(floor(39, u64::MAX), 0, "within budget: nothing to purge");
        assert_eq!(
            floor(39, 0),
            39,
            "no budget: everything behind the snapshot goes"
        );
        // Snapshot inside the newest segment: that segment is not behind it and not counted.
        let inside_newest = spans[1].0 + 1;
        assert!(
            inside_newest < spans[0].0,
            "the newest segment holds two entries or more"
        );
        assert_eq!(floor(inside_newest, spans[1].1), third_last);
        assert_eq!(floor(inside_newest, 0), spans[1].0);
    }

    #[tokio::test]
    async fn entries_and_vote_survive_restart_across_segments() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = open(dir.path());
        append(&mut store, (0..40).map(|i| entry(1, i))).await;
        store.save_vote(&Vote::new(3, 2)).await.expect("vote");
        let segments = LogSegment::list(&OsDisk, &dir.path().join("segments"))
            .expect("list")
            .len();
        assert!(segments > 1, "4 KiB segments must roll, got {segments}");
        drop(store);

        let mut store = open(dir.path());
        assert_eq!(indexes(&mut store).await, (0..40).collect::<Vec<_>>());
        assert_eq!(
            store.read_vote().await.expect("vote"),
            Some(Vote::new(3, 2))
        );
        let state = store.get_log_state().await.expect("state");
        assert_eq!(state.last_log_id, Some(LogId::new_term_index(1, 39)));
    }

    #[tokio::test]
    async fn torn_tail_is_cut_on_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = reopened_after(dir.path(), 5, |bytes| {
            bytes.extend_from_slice(&[200, 0, 0, 0, 1, 2, 3, 4, 5, 6]); // half a header
        })
        .await;
        assert_eq!(indexes(&mut store).await, vec![0, 1, 2, 3, 4]);
        assert_eq!(
            repair::load(&OsDisk, dir.path()).expect("mark"),
            None,
            "a torn tail needs no repair"
        );
        append(&mut store, [entry(1, 5)]).await;
        assert_eq!(indexes(&mut store).await, vec![0, 1, 2, 3, 4, 5]);
    }

    #[tokio::test]
    async fn damage_before_valid_entries_is_cut_and_marked_for_repair() {
        let dir = tempfile::tempdir().expect("tempdir");
        let segments = written_segments(dir.path(), 40).await;
        assert!(segments.len() > 2);
        // A flipped byte in entry 1 of the first segment: its later entries and the later
        // segments all hold entries the node may have acknowledged.
        let (first_index, first_path) = &segments[0];
        assert_eq!(*first_index, 0);
        let mut bytes = std::fs::read(first_path).expect("read");
        let second_record = (RECORD_HEADER_SIZE as usize + 300) * 3 / 2;
        bytes[second_record] ^= 1;
        std::fs::write(first_path, &bytes).expect("write");

        let mut store = open(dir.path());
        assert_eq!(indexes(&mut store).await, vec![0]);
        let mark = repair::load(&OsDisk, dir.path())
            .expect("mark")
            .expect("a repair is due");
        assert_eq!((mark.cut_at_index, mark.up_to_index), (1, 39));
        drop(store);
        let _ = open(dir.path());
        assert_eq!(
            repair::load(&OsDisk, dir.path()).expect("mark"),
            Some(mark),
            "a restart keeps the mark though the damage is gone from disk"
        );
    }

    #[tokio::test]
    async fn a_damaged_last_record_is_marked_for_repair_not_cut_as_a_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = reopened_after(dir.path(), 5, |bytes| {
            let end = bytes.len();
            bytes[end - 1] ^= 0x10; // the last entry's last byte
        })
        .await;
        assert_eq!(indexes(&mut store).await, vec![0, 1, 2, 3]);
        let mark = repair::load(&OsDisk, dir.path()).expect("mark");
        assert_eq!(
            mark.map(|m| (m.cut_at_index, m.up_to_index)),
            Some((4, 4)),
            "entry 4 was written whole and may have been acknowledged"
        );
    }

    #[tokio::test]
    async fn a_flipped_length_is_damage_even_when_it_points_past_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = reopened_after(dir.path(), 3, |bytes| {
            // Make the last record claim more bytes than the file holds, as a torn one would.
            let mut start = 0usize;
            for _ in 0..2 {
                let len = u32::from_le_bytes(bytes[start..start + 4].try_into().expect("len"));
                start += RECORD_HEADER_SIZE as usize + len as usize;
            }
            bytes[start + 3] ^= 0x01;
        })
        .await;
        assert_eq!(indexes(&mut store).await, vec![0, 1]);
        let mark = repair::load(&OsDisk, dir.path()).expect("mark");
        assert_eq!(mark.map(|m| (m.cut_at_index, m.up_to_index)), Some((2, 2)));
    }

    #[tokio::test]
    async fn a_log_in_another_record_format_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = open(dir.path());
        append(&mut store, (0..3).map(|i| entry(1, i))).await;
        drop(store);
        std::fs::remove_file(dir.path().join("format")).expect("remove the format file");
        let error = LogStore::open(config(dir.path())).err().expect("refused");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(
            error.to_string().contains("wipe this node's data dir"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn segments_after_a_lost_unsynced_tail_are_dropped_without_a_repair() {
        let dir = tempfile::tempdir().expect("tempdir");
        let segments = written_segments(dir.path(), 40).await;
        assert!(segments.len() > 2);
        // A power loss kept the second segment's file name and some of its data but not the
        // first segment's last record (the kernel wrote them back out of order).
        let (_, first_path) = &segments[0];
        let (second_first, _) = segments[1];
        let bytes = std::fs::read(first_path).expect("read");
        let record = RECORD_HEADER_SIZE as usize
            + u32::from_le_bytes(bytes[..4].try_into().expect("len")) as usize;
        let kept = bytes.len() - record;
        std::fs::write(first_path, &bytes[..kept]).expect("write");

        let mut store = open(dir.path());
        assert_eq!(
            indexes(&mut store).await,
            (0..second_first - 1).collect::<Vec<_>>()
        );
        assert_eq!(
            repair::load(&OsDisk, dir.path()).expect("mark"),
            None,
            "nothing after an unsynced tail was ever durable"
        );
        append(&mut store, [entry(2, second_first - 1)]).await;
    }

    /// A log of 40 entries in `dir` purged up to `purge_to(first)`, where `first` is the
    /// first index of its second to last segment, with byte `flip_at` of that segment
    /// flipped while it is closed. Returns `first`.
    async fn purged_then_flipped(dir: &Path, purge_to: fn(u64) -> u64, flip_at: usize) -> u64 {
        let mut store = open(dir);
        append(&mut store, (0..40).map(|i| entry(1, i))).await;
        let segments = LogSegment::list(&OsDisk, &dir.join("segments")).expect("list");
        assert!(segments.len() > 2);
        let (first, path) = segments[segments.len() - 2].clone();
        store
            .purge(LogId::new_term_index(1, purge_to(first)))
            .await
            .expect("purge");
        drop(store);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[flip_at] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        first
    }

    #[tokio::test]
    async fn damage_at_the_purge_point_leaves_a_log_that_goes_on_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Purge up to a few entries into the last full segment, then flip a byte in its
        // second entry: recovery cuts that segment down to purged entries only.
        let first = purged_then_flipped(
            dir.path(),
            |first| first + 3,
            (RECORD_HEADER_SIZE as usize + 300) * 3 / 2,
        )
        .await;
        let purged = first + 3;

        let mut store = open(dir.path());
        assert_eq!(indexes(&mut store).await, Vec::<u64>::new());
        let mark = repair::load(&OsDisk, dir.path())
            .expect("mark")
            .expect("acknowledged entries past the purge point were cut");
        assert_eq!((mark.cut_at_index, mark.up_to_index), (purged + 1, 39));
        // The log goes on after the purge point, not after the cut below it.
        append(&mut store, [entry(2, purged + 1)]).await;
        drop(store);

        let mut store = open(dir.path());
        assert_eq!(
            indexes(&mut store).await,
            vec![purged + 1],
            "the new segment is no gap: everything before it is purged"
        );
        assert_eq!(repair::load(&OsDisk, dir.path()).expect("mark"), Some(mark));
    }

    #[tokio::test]
    async fn damage_at_the_first_entry_after_the_purge_point_leaves_no_hole() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Purge every segment before the second to last, then flip a byte in its first
        // entry: recovery cuts it to nothing, and the last segment follows a gap.
        let first = purged_then_flipped(
            dir.path(),
            |first| first - 1,
            RECORD_HEADER_SIZE as usize + 10,
        )
        .await;

        let mut store = open(dir.path());
        assert_eq!(
            indexes(&mut store).await,
            Vec::<u64>::new(),
            "the last segment's entries would follow a hole"
        );
        let state = store.get_log_state().await.expect("state");
        assert_eq!(state.last_log_id, state.last_purged_log_id);
        let mark = repair::load(&OsDisk, dir.path())
            .expect("mark")
            .expect("acknowledged entries past the purge point were cut");
        assert_eq!((mark.cut_at_index, mark.up_to_index), (first, 39));
    }

    #[tokio::test]
    async fn truncate_and_purge_at_segment_boundaries_persist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = open(dir.path());
        append(&mut store, (0..30).map(|i| entry(1, i))).await;
        let boundaries: Vec<u64> = LogSegment::list(&OsDisk, &dir.path().join("segments"))
            .expect("list")
            .iter()
            .map(|(first, _)| *first)
            .collect();
        let boundary = boundaries[2];
        store
            .truncate_after(Some(LogId::new_term_index(1, boundary - 1)))
            .await
            .expect("truncate");
        append(&mut store, (boundary..boundary + 3).map(|i| entry(2, i))).await;
        store
            .purge(LogId::new_term_index(1, boundaries[1]))
            .await
            .expect("purge");
        drop(store);
        // The purger deleted the purged segment before the store was dropped.
        let first_left =
            LogSegment::list(&OsDisk, &dir.path().join("segments")).expect("list")[0].0;
        assert_eq!(first_left, boundaries[1]);

        let mut store = open(dir.path());
        let expected: Vec<u64> = (boundaries[1] + 1..boundary + 3).collect();
        assert_eq!(indexes(&mut store).await, expected);
        let state = store.get_log_state().await.expect("state");
        assert_eq!(
            state.last_purged_log_id,
            Some(LogId::new_term_index(1, boundaries[1]))
        );
        assert_eq!(
            state.last_log_id,
            Some(LogId::new_term_index(2, boundary + 2))
        );
    }

    #[tokio::test]
    async fn a_damaged_purge_mark_is_replaced_by_the_snapshot_s_last_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = open(dir.path());
        append(&mut store, (0..30).map(|i| entry(1, i))).await;
        store
            .purge(LogId::new_term_index(1, 5))
            .await
            .expect("purge");
        drop(store);
        let mark = dir.path().join("purged");
        let mut bytes = std::fs::read(&mark).expect("read the mark");
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        std::fs::write(&mark, bytes).expect("damage the mark");

        let snapshot = LogId::new_term_index(1, 20);
        let mut store = LogStore::open(LogStoreConfig {
            purged_if_mark_damaged: Some(snapshot),
            ..config(dir.path())
        })
        .expect("open with a damaged purge mark");
        let state = store.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id, Some(snapshot));
        assert_eq!(indexes(&mut store).await, (21..30).collect::<Vec<u64>>());
        drop(store);

        // The mark was rewritten: it opens without the fallback too.
        let mut store = open(dir.path());
        let state = store.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id, Some(snapshot));
    }

    #[tokio::test]
    async fn append_with_a_hole_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = open(dir.path());
        append(&mut store, [entry(1, 0)]).await;
        let (tx, _rx) = TypeConfig::oneshot();
        let error = store
            .append(vec![entry(1, 2)], IOFlushed::signal(tx))
            .await
            .expect_err("hole");
        assert!(error.to_string().contains("expected 1"), "{error}");
    }

    #[tokio::test]
    async fn replication_reads_are_capped_by_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = open(dir.path());
        append(&mut store, (0..10).map(|i| entry(1, i))).await;
        let mut reader = store.get_log_reader().await;
        {
            let files = reader.files.read().expect("lock");
            let one = files.read_range(0..10, 1).expect("read");
            assert_eq!(one.len(), 1, "at least one entry");
            assert_eq!(files.read_range(0..10, u64::MAX).expect("read").len(), 10);
        }
        assert_eq!(
            reader
                .limited_get_log_entries(0, 10)
                .await
                .expect("read")
                .len(),
            10
        );
    }
}
