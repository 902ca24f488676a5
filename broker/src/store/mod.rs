//! The on-disk message store: a CommitLog of RocketMQ records, per topic/queue ConsumeQueues,
//! a key index and a checkpoint, behind `MessageStore`, the API the Raft state machine applies
//! committed entries to.
//!
//! Invariants: the ConsumeQueues and the index only point at records already in the CommitLog
//! and everything below the CommitLog end is dispatched (append dispatches before returning,
//! recovery truncates what points past the end and re-dispatches what is missing); every
//! queue and physical offset is assigned from the store's own state, so applying the same
//! records in the same order yields byte-identical files on every replica.

pub mod checkpoint;
pub mod commit_log;
pub mod commit_log_segment;
pub mod config;
pub mod consume_queue;
pub mod cq_check;
pub mod cq_sums;
pub mod dispatch;
pub mod error;
pub mod index;
pub mod index_repair;
pub mod mapped_file;
pub mod power_loss;
pub mod properties;
pub mod record;
pub mod scrub;
pub mod slot_table;

pub use checkpoint::{Checkpoint, CheckpointState};
pub use commit_log::{CheckedBlock, CommitLog, CommitLogRecovery, SealedSegment};
pub use config::StoreConfig;
pub use consume_queue::{CQ_UNIT_SIZE, ConsumeQueue, CqUnit, QueueTail};
pub use error::StoreError;
pub use properties::Properties;
pub use record::{DecodedRecord, MessageRecord, RecordView};
pub use rocketraft_domain::tags_code::tags_code;

use std::ops::ControlFlow;

use tracing::{error, info, warn};

use crate::store::dispatch::{Dispatcher, RecordInfo};
use crate::store::mapped_file::Detached;
use crate::store::mapped_file::FlushTarget;
use crate::store::record::RecordError;

/// Most records `query_by_key` returns (the newest ones).
pub const QUERY_BY_KEY_RESULTS_MAX: usize = 64;
/// Most index entries of one key a query reads (`query_by_key_where`).
pub const QUERY_BY_KEY_CANDIDATES_MAX: usize = 4096;

/// Where an appended record went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    pub commit_log_offset: i64,
    pub queue_offset: i64,
    pub size: i32,
    pub store_timestamp_ms: i64,
}

/// Where a stored message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub queue_id: i32,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
    pub size: i32,
}

/// A record appended inside a batch: where it went, and its queue as the record names it
/// (read once, while the record was checked, so the caller need not parse it again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended<'r> {
    pub result: AppendResult,
    pub topic: &'r str,
    pub queue_id: i32,
}

/// What `MessageStore::open` found and repaired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryReport {
    /// CommitLog offset after the last valid record.
    pub commit_log_end: u64,
    /// Non-zero bytes dropped from the CommitLog's torn tail.
    pub bytes_truncated: u64,
    pub checkpoint: CheckpointState,
    /// ConsumeQueue units dropped because they pointed at or past the CommitLog end.
    pub cq_units_truncated: u64,
    /// Index entries dropped because they pointed at or past the CommitLog end.
    pub index_entries_truncated: u64,
    /// CommitLog offset re-dispatch started from.
    pub redispatch_from: u64,
    /// Records walked by re-dispatch.
    pub records_redispatched: u64,
    /// ConsumeQueue units (re)written by re-dispatch.
    pub cq_units_redispatched: u64,
    /// Index entries (re)written by re-dispatch.
    pub index_entries_redispatched: u64,
    /// ConsumeQueue blocks whose checksum did not match but whose units checked out against
    /// their records (a crash between writing the two), resealed.
    pub cq_blocks_resealed: u64,
    /// ConsumeQueue blocks holding units that are not their records', left to the scrubber.
    pub cq_blocks_damaged: u64,
}

/// Totals of one re-dispatch pass.
#[derive(Debug, Clone, Copy, Default)]
struct Redispatch {
    records: u64,
    units: u64,
    index_entries: u64,
}

/// Where a re-dispatch found the CommitLog must be cut.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// A record past the flushed offset is torn (see [`MessageStore::redispatch`]).
    Torn(u64),
    /// A record below the flushed offset lies in a block that does not match its checksum.
    Damaged(u64),
}

/// Writes of a store that a flush makes durable, taken by [`MessageStore::begin_flush`].
#[derive(Debug)]
#[must_use = "the data is durable only once `finish` returns"]
pub struct PendingFlush {
    targets: Vec<FlushTarget>,
    commit_log_end: u64,
    /// The checkpoint to write once the targets are synced, and the store directory.
    checkpoint: Option<(Checkpoint, std::path::PathBuf)>,
}

impl PendingFlush {
    /// The CommitLog end this flush makes durable.
    pub fn commit_log_end(&self) -> i64 {
        self.commit_log_end as i64
    }

    /// fsyncs every dirty file, then writes the checkpoint that covers them.
    pub fn finish(self) -> Result<(), StoreError> {
        self.targets.iter().try_for_each(FlushTarget::sync)?;
        match &self.checkpoint {
            Some((checkpoint, dir)) => checkpoint.store(dir),
            None => Ok(()),
        }
    }
}

/// What one [`MessageStore::detach_oldest_segments`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deleted {
    /// CommitLog bytes deleted (whole segments).
    pub commit_log_bytes: u64,
    /// The CommitLog's first offset after the deletion.
    pub commit_log_min: u64,
    /// ConsumeQueue units no longer served, over all queues.
    pub cq_units: u64,
    /// Index entries deleted with their files.
    pub index_entries: u64,
}

/// The message store. Not internally synchronized: callers wrap it in a `RwLock`.
#[derive(Debug)]
pub struct MessageStore {
    config: StoreConfig,
    commit_log: CommitLog,
    dispatcher: Dispatcher,
    last_checkpoint: Checkpoint,
    /// Units reads found wrong, for the scrubber.
    suspects: std::sync::Arc<crate::scrub::suspects::SuspectUnits>,
}

fn to_offset(offset: i64, log: &CommitLog) -> Result<u64, StoreError> {
    u64::try_from(offset).map_err(|_negative| StoreError::OffsetOutOfRange {
        offset,
        min: log.min_offset(),
        max: log.max_offset(),
    })
}

impl MessageStore {
    /// Opens and recovers the store: CommitLog torn tail, ConsumeQueue units and index entries
    /// past its end, then re-dispatch of whatever the queues and index lack.
    pub fn open(config: StoreConfig) -> Result<(MessageStore, RecoveryReport), StoreError> {
        config.validate()?;
        mapped_file::create_dir_durable(&config.dir)?;
        let (checkpoint, checkpoint_state) = Checkpoint::load(&config.dir)?;
        let (commit_log, recovery) = CommitLog::open(
            &config.dir,
            config.commit_log_segment_bytes,
            checkpoint.commit_log_flushed_offset,
        )?;
        let mut dispatcher = Dispatcher::open(&config, checkpoint.index_entry_count)?;
        let (cq_units_truncated, index_entries_truncated) =
            dispatcher.truncate(recovery.commit_log_end)?;
        // Retention may have deleted segments after the queues last reached disk.
        let mut detached = Detached::default();
        dispatcher.forget_below(commit_log.min_offset(), &mut detached);
        detached.delete()?;
        let mut store = MessageStore {
            config,
            commit_log,
            dispatcher,
            last_checkpoint: checkpoint,
            suspects: Default::default(),
        };
        let redispatch_from = store.redispatch_start(&checkpoint)?;
        let done = store.redispatch(redispatch_from)?;
        let blocks = store.check_blocks()?;
        let report = RecoveryReport {
            commit_log_end: recovery.commit_log_end,
            bytes_truncated: recovery.bytes_truncated,
            checkpoint: checkpoint_state,
            cq_units_truncated,
            index_entries_truncated,
            redispatch_from,
            records_redispatched: done.records,
            cq_units_redispatched: done.units,
            index_entries_redispatched: done.index_entries,
            cq_blocks_resealed: blocks.resealed,
            cq_blocks_damaged: blocks.damaged,
        };
        info!(?report, "message store opened");
        Ok((store, report))
    }

    /// Where re-dispatch starts: the checkpoint's dispatched offset; the CommitLog start when
    /// queues the checkpoint counted are missing; the record of the index's newest entry
    /// when the index holds fewer entries than the checkpoint counted.
    ///
    /// An index loses entries only at its end (its newest file keeps what its last flush
    /// counted) or at its front (retention deleted its oldest files after the checkpoint was
    /// written); entries are in CommitLog order, so re-dispatching from its newest entry's
    /// record restores a lost end, and a lost front needs nothing.
    fn redispatch_start(&mut self, checkpoint: &Checkpoint) -> Result<u64, StoreError> {
        let (min, end) = (self.commit_log.min_offset(), self.commit_log.max_offset());
        let mut from = checkpoint.dispatched_offset.clamp(min, end);
        let queues_lost = self.dispatcher.queue_count() < checkpoint.consume_queue_count
            || self.dispatcher.queue_offset_sum() < checkpoint.consume_queue_offset_sum;
        if queues_lost {
            warn!("consume queues behind the checkpoint, rebuilding from the commit log start");
            from = min;
        }
        if (self.dispatcher.index().len() as u64) < checkpoint.index_entry_count {
            let resume = self
                .dispatcher
                .index()
                .last_offset()
                .map_or(min, |last| (last as u64).clamp(min, end));
            if resume < from {
                warn!(
                    from = resume,
                    "index behind the checkpoint, re-dispatching from its newest entry"
                );
                from = resume;
            }
        }
        Ok(from)
    }

    /// Re-dispatches from `from`; if a queue turns out to have a hole (it lost units the
    /// checkpoint could not tell us about), starts over from the CommitLog start.
    ///
    /// A record past the checkpoint's flushed offset that disagrees with the queue unit
    /// already written for its queue offset is torn: a power loss can keep a later page of an
    /// unflushed write and lose an earlier one, leaving a record whose body (checked by its
    /// CRC) survived but whose header or properties (which no CRC covers) did not. The
    /// CommitLog is cut there; nothing past the flushed offset was promised, and the state
    /// machine replays it from the Raft log.
    ///
    /// Below the flushed offset, a record is dispatched only if the blocks holding it match
    /// their checksums: recovery checks them in the segment it scans only, and a queue or an
    /// index rebuilt from older segments must not take a rotted queue id, queue offset or key
    /// as the record's. The CommitLog is cut at such a record too: the store then lost
    /// flushed data, which the node repairs by rebuilding from its group (`node.rs`), instead
    /// of stopping on the conflict or the wrong entries the rot would make.
    fn redispatch(&mut self, from: u64) -> Result<Redispatch, StoreError> {
        let min = self.commit_log.min_offset();
        let (done, cut) = match self.dispatch_from(from, from == min) {
            Err(StoreError::ConsumeQueueGap {
                topic, queue_id, ..
            }) if from > min => {
                warn!(%topic, queue_id, "consume queue has a hole, re-dispatching from the start");
                self.dispatch_from(min, true)
            }
            other => other,
        }?;
        let flushed = self.last_checkpoint.commit_log_flushed_offset;
        let offset = match cut {
            None => return Ok(done),
            Some(Cut::Torn(offset)) => {
                warn!(
                    offset,
                    flushed, "a record past the flushed offset is torn: the CommitLog is cut there"
                );
                offset
            }
            Some(Cut::Damaged(offset)) => {
                tracing::error!(
                    offset,
                    flushed,
                    "a flushed record re-dispatched lies in a block that does not match its \
                     checksum: the CommitLog is cut there"
                );
                offset
            }
        };
        self.truncate(offset as i64)?;
        Ok(done)
    }

    /// Dispatches the records from `from`; stops at a torn record past the flushed offset, or
    /// at a record below it in a damaged block, and returns where it is.
    fn dispatch_from(
        &mut self,
        from: u64,
        allow_start: bool,
    ) -> Result<(Redispatch, Option<Cut>), StoreError> {
        let mut done = Redispatch::default();
        let mut cut = None;
        let flushed = self.last_checkpoint.commit_log_flushed_offset;
        let tags_code_fn = self.config.tags_code_fn;
        let dispatcher = &mut self.dispatcher;
        let index_entries_before = dispatcher.index().len();
        let commit_log = &self.commit_log;
        let checked = CheckedBlock::default();
        let scanned = self.commit_log.for_each_record_from(from, |offset, view| {
            if offset < flushed {
                match commit_log.check_blocks(offset, view.total_size(), &checked) {
                    Err(StoreError::DamagedBlock { .. }) => {
                        cut = Some(Cut::Damaged(offset));
                        return Ok(ControlFlow::Break(()));
                    }
                    // Any other error (none is expected for a record the scan is walking)
                    // stops the open.
                    intact => intact?,
                }
            }
            let info = RecordInfo::from_view(&view, tags_code_fn(&view))?;
            let queue_offset =
                u64::try_from(info.queue_offset).map_err(|_negative| StoreError::Corrupt {
                    offset,
                    source: RecordError::FieldLengths,
                })?;
            let unit_added = match dispatcher.dispatch(offset, &info, queue_offset, allow_start) {
                Err(StoreError::ConsumeQueueConflict { .. }) if offset >= flushed => {
                    cut = Some(Cut::Torn(offset));
                    return Ok(ControlFlow::Break(()));
                }
                other => other?,
            };
            done.records += 1;
            done.units += u64::from(unit_added);
            Ok(ControlFlow::Continue(()))
        });
        let finished = self.finish_dispatch();
        done.index_entries = (self.dispatcher.index().len() - index_entries_before) as u64;
        scanned.and(finished)?;
        Ok((done, cut))
    }

    /// Appends one encoded record: assigns its queue offset and CommitLog offset, writes it
    /// with both patched into the stored copy, and dispatches it.
    pub fn append(&mut self, record: &[u8]) -> Result<AppendResult, StoreError> {
        self.append_batch(|batch| batch.append(record).map(|appended| appended.result))
    }

    /// [`MessageStore::append`] with an explicit ConsumeQueue tags code. The override must be
    /// what `StoreConfig::tags_code_fn` computes for this record, or a later rebuild of the
    /// queue from the CommitLog reports `ConsumeQueueConflict`.
    pub fn append_with_tags_code(
        &mut self,
        record: &[u8],
        tags_code: Option<i64>,
    ) -> Result<AppendResult, StoreError> {
        self.append_batch(|batch| {
            batch
                .append_with_tags_code(record, tags_code)
                .map(|appended| appended.result)
        })
    }

    /// Runs `f`, which appends records through the [`AppendBatch`] it is given, then adds
    /// their index entries and writes them to the CommitLog file, each together: a batch
    /// costs a few writes instead of a page fault every few records, and its index slot
    /// loads overlap. If either fails, the batch's records are dropped from the
    /// ConsumeQueues and the index again, and the store ends where it did before.
    ///
    /// Adds read the index's newest entries (its last offset, the pairs stored at it), so
    /// the block holding them is checked first and, if it rotted, rebuilt from the CommitLog
    /// ([`MessageStore::repair_index_block`]).
    pub fn append_batch<T, E: From<StoreError>>(
        &mut self,
        f: impl FnOnce(&mut AppendBatch<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        self.mend_newest_index_block()?;
        let start = self.commit_log.max_offset();
        let result = f(&mut AppendBatch { store: self });
        if let Err(error) = self.finish_dispatch() {
            if let Err(rollback) = self.truncate(start as i64) {
                error!(%rollback, "rolling back a batch whose index entries failed failed");
            }
            return Err(error.into());
        }
        if let Err(error) = self.commit_log.write_staged() {
            let end = self.commit_log.max_offset();
            if let Err(rollback) = self.dispatcher.truncate(end) {
                error!(%rollback, "rolling back an unwritten batch failed");
            }
            return Err(error.into());
        }
        result
    }

    /// Writes raw CommitLog bytes shipped from another replica (whole records and fillers,
    /// same segment size) at exactly the current end, then dispatches every record in them.
    pub fn append_raw_commit_log(&mut self, offset: i64, bytes: &[u8]) -> Result<(), StoreError> {
        let offset = to_offset(offset, &self.commit_log)?;
        self.commit_log.append_raw(offset, bytes)?;
        if let Err(err) = self.dispatch_from(offset, true) {
            if let Err(rollback) = self.truncate(offset as i64) {
                error!(%rollback, "rolling back a failed raw append failed");
            }
            return Err(err);
        }
        Ok(())
    }

    /// How many leading bytes of shipped CommitLog bytes for `offset` are whole records and
    /// fillers, ready for [`MessageStore::append_raw_commit_log`].
    pub fn whole_raw_len(&self, offset: i64, bytes: &[u8]) -> Result<usize, StoreError> {
        let offset = to_offset(offset, &self.commit_log)?;
        commit_log::whole_entries_len(offset, bytes, self.commit_log.segment_size_bytes())
    }

    /// Makes the CommitLog end at `commit_log_offset`, where shipped bytes will continue it:
    /// cut back to it if the store holds it ([`MessageStore::truncate`]), else start over
    /// there ([`MessageStore::restart_at`]).
    pub fn continue_at(&mut self, commit_log_offset: i64) -> Result<(), StoreError> {
        if commit_log_offset > self.commit_log_max_offset() {
            self.restart_at(commit_log_offset)
        } else {
            self.truncate(commit_log_offset)
        }
    }

    /// Empties the store so that it goes on at `commit_log_offset`, a segment boundary past its
    /// end: the CommitLog of a snapshot from a node whose retention deleted everything before
    /// it. The ConsumeQueues restart at the queue offsets the shipped records carry; the index
    /// starts empty.
    pub fn restart_at(&mut self, commit_log_offset: i64) -> Result<(), StoreError> {
        let offset = to_offset(commit_log_offset, &self.commit_log)?;
        let end = self.commit_log.max_offset();
        if offset <= end || !offset.is_multiple_of(self.commit_log.segment_size_bytes()) {
            return Err(StoreError::RawAppendOffset {
                offset,
                expected: end,
            });
        }
        warn!(
            from = self.commit_log.min_offset(),
            end,
            restart_at = offset,
            "emptying the store: the snapshot starts past its end"
        );
        self.commit_log.clear()?;
        self.dispatcher.clear()?;
        Ok(())
    }

    /// Where every queue ends ([`QueueTail`]), for a snapshot taken at this store's end.
    pub fn queue_tails(&self) -> Vec<QueueTail> {
        self.dispatcher.queue_tails()
    }

    /// Ends every queue where `tails` (a snapshot's, taken where this store now ends) say:
    /// after [`MessageStore::restart_at`] a queue none of whose records were shipped would
    /// otherwise start over at 0 and give its next message another queue offset than the
    /// other replicas do. Fails on a queue that ends elsewhere: the replicas diverged.
    pub fn restore_queue_tails(&mut self, tails: &[QueueTail]) -> Result<(), StoreError> {
        for tail in tails {
            self.dispatcher
                .queue_mut(&tail.topic, tail.queue_id)?
                .restore_tail(tail)?;
        }
        let mut detached = Detached::default();
        self.dispatcher
            .forget_below(self.commit_log.min_offset(), &mut detached);
        detached.delete()
    }

    /// Drops CommitLog bytes, ConsumeQueue units and index entries at or after
    /// `commit_log_end` (a record boundary).
    pub fn truncate(&mut self, commit_log_end: i64) -> Result<(), StoreError> {
        let end = to_offset(commit_log_end, &self.commit_log)?;
        self.lower_checkpoint_to(end)?;
        self.commit_log.truncate_to(end)?;
        self.dispatcher.truncate(end)?;
        Ok(())
    }

    /// Before a cut below the last checkpoint's flushed offset: a checkpoint that says the
    /// CommitLog is flushed up to `end` only, durable before the cut writes anything. The
    /// cut changes bytes and block checksums below the old flushed offset, and a power loss
    /// may keep any of those pages and lose others; recovery trusts (and checks against
    /// their checksums) only the bytes below the flushed offset, which this keeps true. The
    /// counts stay: ConsumeQueues or an index found behind them are rebuilt from the
    /// CommitLog.
    fn lower_checkpoint_to(&mut self, end: u64) -> Result<(), StoreError> {
        if end >= self.last_checkpoint.commit_log_flushed_offset {
            return Ok(());
        }
        let lowered = Checkpoint {
            commit_log_flushed_offset: end,
            dispatched_offset: self.last_checkpoint.dispatched_offset.min(end),
            ..self.last_checkpoint
        };
        lowered.store(&self.config.dir)?;
        self.last_checkpoint = lowered;
        Ok(())
    }

    /// Durably flushes the CommitLog, the ConsumeQueues and the index, then writes the
    /// checkpoint (skipped when nothing changed since the last one).
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.begin_flush()?.finish()
    }

    /// One sweep of the idle-page release: a queue file read or written by none of the last
    /// `idle_sweeps` sweeps gives its pages back (an idle queue then costs no resident memory
    /// for its files, and its page cache is free to go); returns how many files did now.
    pub fn release_idle_queue_pages(&mut self, idle_sweeps: u32) -> usize {
        self.dispatcher.release_idle_pages(idle_sweeps)
    }

    /// The part of [`MessageStore::flush`] that needs the store: notes what is dirty and
    /// what the checkpoint will say. [`PendingFlush::finish`] then does the slow part (the
    /// fsyncs and the checkpoint write) without the store, so appends and reads go on
    /// meanwhile; until it returns, the data is not known to be durable.
    pub fn begin_flush(&mut self) -> Result<PendingFlush, StoreError> {
        let mut targets = Vec::new();
        self.commit_log.begin_flush(&mut targets)?;
        self.dispatcher.begin_flush(&mut targets)?;
        let end = self.commit_log.max_offset();
        let checkpoint = Checkpoint {
            commit_log_flushed_offset: end,
            dispatched_offset: end,
            consume_queue_count: self.dispatcher.queue_count(),
            consume_queue_offset_sum: self.dispatcher.queue_offset_sum(),
            index_entry_count: self.dispatcher.index().len() as u64,
        };
        let changed = checkpoint != self.last_checkpoint;
        if changed {
            self.last_checkpoint = checkpoint;
        }
        Ok(PendingFlush {
            targets,
            commit_log_end: end,
            checkpoint: changed.then(|| (checkpoint, self.config.dir.clone())),
        })
    }

    /// The CommitLog segments retention may consider: all but the last, oldest first.
    pub fn sealed_commit_log_segments(&self) -> Result<Vec<SealedSegment>, StoreError> {
        self.commit_log.sealed_segments()
    }

    /// Takes the `count` oldest CommitLog segments (never the last) out of the store, with the
    /// ConsumeQueue and index files that point only into them. Queues keep their offsets: their
    /// `min_offset` moves up, so readers behind it are sent to the new minimum. The files are
    /// returned, to be deleted once the caller has released the store.
    pub fn detach_oldest_segments(
        &mut self,
        count: usize,
    ) -> Result<(Deleted, Detached), StoreError> {
        self.commit_log.write_staged()?;
        let mut detached = Detached::default();
        let min_before = self.commit_log.min_offset();
        let commit_log_min = self.commit_log.detach_oldest(count, &mut detached);
        let (cq_units, index_entries) = self.dispatcher.forget_below(commit_log_min, &mut detached);
        let deleted = Deleted {
            commit_log_bytes: commit_log_min - min_before,
            commit_log_min,
            cq_units,
            index_entries,
        };
        Ok((deleted, detached))
    }

    pub fn commit_log_min_offset(&self) -> i64 {
        self.commit_log.min_offset() as i64
    }

    pub fn commit_log_max_offset(&self) -> i64 {
        self.commit_log.max_offset() as i64
    }

    /// Up to `max_len` raw CommitLog bytes from `offset` (for shipping to another replica).
    pub fn read_commit_log(&self, offset: i64, max_len: usize) -> Result<Vec<u8>, StoreError> {
        self.commit_log
            .read_bytes(to_offset(offset, &self.commit_log)?, max_len)
    }

    /// Up to `max_units` units of a queue from queue offset `from` (empty if unknown).
    pub fn read_consume_queue(
        &self,
        topic: &str,
        queue_id: i32,
        from: i64,
        max_units: usize,
    ) -> Vec<CqUnit> {
        self.consume_queue_units(topic, queue_id, from)
            .take(max_units)
            .collect()
    }

    /// The ids of `topic`'s queues that this store holds, in no order.
    pub fn queue_ids(&self, topic: &str) -> impl Iterator<Item = i32> + '_ {
        self.dispatcher.queue_ids(topic)
    }

    /// `(min, max)` queue offsets of a queue; `(0, 0)` if unknown.
    pub fn consume_queue_offsets(&self, topic: &str, queue_id: i32) -> (i64, i64) {
        self.dispatcher
            .queue(topic, queue_id)
            .map_or((0, 0), |q| (q.min_offset() as i64, q.max_offset() as i64))
    }

    /// The first queue offset of a queue whose message was stored at or after
    /// `timestamp_ms`, or the max offset when all are older. Store timestamps grow with the
    /// queue offset (one leader stamps them in log order), so a binary search finds it.
    pub fn search_offset_by_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp_ms: i64,
    ) -> Result<i64, StoreError> {
        let (mut low, mut high) = self.consume_queue_offsets(topic, queue_id);
        while low < high {
            let middle = low + (high - low) / 2;
            let Some(unit) = self
                .read_consume_queue(topic, queue_id, middle, 1)
                .into_iter()
                .next()
            else {
                break;
            };
            if self
                .read_message(unit.commit_log_offset)?
                .store_timestamp_ms
                < timestamp_ms
            {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        Ok(low)
    }

    /// The message record at CommitLog `commit_log_offset`.
    pub fn read_message(&self, commit_log_offset: i64) -> Result<MessageRecord, StoreError> {
        let (bytes, offset) = self.record_bytes(commit_log_offset)?;
        match record::decode_at(bytes, offset)? {
            DecodedRecord::Message(message) => Ok(message),
            DecodedRecord::Blank { .. } => Err(StoreError::Corrupt {
                offset,
                source: RecordError::Magic {
                    magic: record::BLANK_MAGIC_CODE,
                },
            }),
        }
    }

    /// The message record at `commit_log_offset`, read in place (a filler is an error).
    pub fn read_view(&self, commit_log_offset: i64) -> Result<RecordView<'_>, StoreError> {
        let (bytes, offset) = self.record_bytes(commit_log_offset)?;
        RecordView::parse(bytes).map_err(|source| StoreError::Corrupt { offset, source })
    }

    /// The message at `queue_offset` of `topic`/`queue_id`, whose unit is `unit`, read in
    /// place and checked to be that message (its record names the queue, the queue offset,
    /// the CommitLog offset and the size of the unit): a damaged unit is an error, never
    /// another message.
    pub fn read_unit_view(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: i64,
        unit: &CqUnit,
    ) -> Result<RecordView<'_>, StoreError> {
        let view = self.read_view(unit.commit_log_offset)?;
        let is_its_message = view.topic() == topic
            && view.queue_id() == queue_id
            && view.queue_offset() == queue_offset
            && view.physical_offset() == unit.commit_log_offset
            && i32::try_from(view.total_size()).is_ok_and(|size| size == unit.size);
        if !is_its_message {
            return Err(StoreError::UnitMismatch {
                topic: topic.to_owned(),
                queue_id,
                queue_offset,
                commit_log_offset: unit.commit_log_offset,
                found: format!(
                    "a record of {}/{} at queue offset {}, CommitLog offset {}, {} bytes \
                     (the unit says {} bytes)",
                    view.topic(),
                    view.queue_id(),
                    view.queue_offset(),
                    view.physical_offset(),
                    view.total_size(),
                    unit.size
                ),
            });
        }
        Ok(view)
    }

    /// [`MessageStore::read_unit_view`] for a message about to be served: every CommitLog
    /// block holding its record is checked against its checksum too (`checked` is the
    /// reader's last block, checked once), so rot in a record's header or properties, which
    /// its body CRC does not cover, is an error rather than served.
    pub fn read_served_view(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: i64,
        unit: &CqUnit,
        checked: &CheckedBlock,
    ) -> Result<RecordView<'_>, StoreError> {
        let view = self.read_unit_view(topic, queue_id, queue_offset, unit)?;
        self.commit_log
            .check_blocks(view.physical_offset() as u64, view.total_size(), checked)?;
        Ok(view)
    }

    /// The bytes of the record (or filler) at `commit_log_offset`, by its TOTALSIZE.
    fn record_bytes(&self, commit_log_offset: i64) -> Result<(&[u8], u64), StoreError> {
        let offset = to_offset(commit_log_offset, &self.commit_log)?;
        let head = self.commit_log.read(offset, 4)?;
        let total_size = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let len = usize::try_from(total_size)
            .ok()
            .filter(|len| *len <= record::RECORD_SIZE_MAX)
            .ok_or(StoreError::Corrupt {
                offset,
                source: RecordError::TotalSize { total_size },
            })?;
        Ok((self.commit_log.read(offset, len)?, offset))
    }

    /// The stored copy of `topic` whose `UNIQ_KEY` is `unique_key` and whose reconsume count
    /// is `reconsume_times`, if any (the newest): a message's copy of one hand-back (or its
    /// first send, count 0).
    ///
    /// Apply decides with it whether a send is a retry, so every replica must answer alike:
    /// only the last [`MessageStore::dedup_window_start`] bytes are searched, a range no
    /// replica's retention ever deletes (see `keep_from`), whatever else it deleted.
    pub fn find_unique(
        &self,
        topic: &str,
        unique_key: &str,
        reconsume_times: i32,
    ) -> Result<Option<Stored>, StoreError> {
        self.find_unique_since(
            topic,
            unique_key,
            reconsume_times,
            self.dedup_window_start(),
        )
    }

    /// [`MessageStore::find_unique`] searching from CommitLog offset `since` on: for a record
    /// that can only come after a known one (a transaction's op record after its half
    /// message), every replica holding `since` answers alike.
    pub fn find_unique_since(
        &self,
        topic: &str,
        unique_key: &str,
        reconsume_times: i32,
        since: u64,
    ) -> Result<Option<Stored>, StoreError> {
        let since = i64::try_from(since).unwrap_or(i64::MAX);
        for candidate in self.dispatcher.index().lookup(unique_key, since) {
            let commit_log_offset = candidate?;
            let view = self.read_view(commit_log_offset)?;
            if view.topic() == topic
                && view.reconsume_times() == reconsume_times
                && view.property(properties::UNIQ_KEY)? == Some(unique_key)
            {
                return Ok(Some(Stored {
                    queue_id: view.queue_id(),
                    queue_offset: view.queue_offset(),
                    commit_log_offset,
                    size: view.total_size() as i32,
                }));
            }
        }
        Ok(None)
    }

    /// Where [`MessageStore::find_unique`] stops looking: [`MessageStore::dedup_window_bytes`]
    /// before the end.
    pub fn dedup_window_start(&self) -> u64 {
        self.commit_log
            .max_offset()
            .saturating_sub(self.dedup_window_bytes())
    }

    /// How far back apply looks for an earlier copy of a retried send: one segment size, a
    /// setting every replica of a group shares (the CommitLog layout depends on it), so every
    /// replica searches the same range. Retention must keep it.
    pub fn dedup_window_bytes(&self) -> u64 {
        self.commit_log.segment_size_bytes()
    }

    /// Messages whose `UNIQ_KEY` or one of whose `KEYS` equals `key`, newest first, at most
    /// [`QUERY_BY_KEY_RESULTS_MAX`]. Entries left pointing below the CommitLog's first
    /// offset (retention deleted their records) are not read.
    pub fn query_by_key(&self, key: &str) -> Result<Vec<RecordView<'_>>, StoreError> {
        self.query_by_key_where(key, QUERY_BY_KEY_RESULTS_MAX, |_| true)
    }

    /// [`MessageStore::query_by_key`] keeping only the messages `keep` takes, at most `max`
    /// of them; at most [`QUERY_BY_KEY_CANDIDATES_MAX`] of the key's index entries are read,
    /// so a key shared by many messages costs a bounded amount of work.
    pub fn query_by_key_where(
        &self,
        key: &str,
        max: usize,
        keep: impl Fn(&RecordView<'_>) -> bool,
    ) -> Result<Vec<RecordView<'_>>, StoreError> {
        let mut found = Vec::new();
        let min = self.commit_log.min_offset() as i64;
        let candidates = self.dispatcher.index().lookup(key, min);
        for candidate in candidates.take(QUERY_BY_KEY_CANDIDATES_MAX) {
            let offset = candidate?;
            let view = self.read_view(offset)?;
            let matches = view.property(properties::UNIQ_KEY)? == Some(key)
                || view
                    .property(properties::KEYS)?
                    .is_some_and(|keys| properties::split_keys(keys).any(|k| k == key));
            if matches && keep(&view) {
                found.push(view);
                if found.len() >= max {
                    break;
                }
            }
        }
        Ok(found)
    }
}

/// Appends inside [`MessageStore::append_batch`]. Its records are not readable until the
/// batch ends, and nothing can read the store before then: the batch borrows it exclusively.
pub struct AppendBatch<'a> {
    store: &'a mut MessageStore,
}

impl AppendBatch<'_> {
    /// See [`MessageStore::append`].
    pub fn append<'r>(&mut self, record: &'r [u8]) -> Result<Appended<'r>, StoreError> {
        self.append_with_tags_code(record, None)
    }

    /// See [`MessageStore::append_with_tags_code`].
    pub fn append_with_tags_code<'r>(
        &mut self,
        record: &'r [u8],
        tags_code: Option<i64>,
    ) -> Result<Appended<'r>, StoreError> {
        let store = &mut *self.store;
        let at = store.commit_log.max_offset();
        let corrupt = |source| StoreError::Corrupt { offset: at, source };
        let view = RecordView::parse(record).map_err(corrupt)?;
        if view.total_size() != record.len() {
            return Err(corrupt(RecordError::FieldLengths));
        }
        let code = tags_code.unwrap_or_else(|| (store.config.tags_code_fn)(&view));
        let info = RecordInfo::from_view(&view, code)?;
        let queue_offset = store
            .dispatcher
            .queue_mut(info.topic, info.queue_id)?
            .max_offset();
        let offset = store.commit_log.append(record, queue_offset as i64)?;
        if let Err(err) = store
            .dispatcher
            .dispatch(offset, &info, queue_offset, false)
        {
            if let Err(rollback) = store.truncate(at as i64) {
                error!(%rollback, "rolling back a failed dispatch failed");
            }
            return Err(err);
        }
        Ok(Appended {
            result: AppendResult {
                commit_log_offset: offset as i64,
                queue_offset: queue_offset as i64,
                size: info.size,
                store_timestamp_ms: info.store_timestamp_ms,
            },
            topic: info.topic,
            queue_id: info.queue_id,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests;
