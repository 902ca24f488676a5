//! The scrubber: re-reads this node's whole CommitLog over and over at a bounded rate, so
//! bit rot in cold segments is found before a consumer or a catching-up peer needs the bytes.
//!
//! Every record is checked (layout, body CRC, segment bounds) and so is its ConsumeQueue unit,
//! and every whole 4 KiB block against its checksum, which covers the bytes no record check
//! does (headers, properties, fillers): a damaged block is mended with a peer's copy its
//! checksum covers, or, if the peer's bytes equal this node's, its checksum taken anew.
//! A damaged record or filler is fetched from a peer (replicas' CommitLogs are byte-identical
//! below their applied end) and written over in place. A unit that differs from its record is
//! told apart from a record whose header changed without breaking its layout by comparing the
//! record with a peer's copy: the record is repaired if they differ, the unit rewritten if not.
//! Damage no peer can help with is counted, logged, and looked at again on the next pass.
//! The checks and repairs that read the store's own state are the store's
//! ([`crate::store::scrub`]); this module paces them and asks the peers.
//!
//! A read that finds a unit pointing at the wrong bytes reports it ([`SuspectUnits`]); the
//! scrubber then checks, at once and unpaced, the CommitLog between the nearest units before
//! and after it that check out, which rewrites the unit from its record (or repairs the
//! record), so a consumer waits seconds for it, not a pass.
//!
//! After each pass the key index is checked too, at the same rate: block by block against its
//! checksums, a damaged block rebuilt from the CommitLog
//! ([`MessageStore::repair_index_block`](crate::store::MessageStore::repair_index_block)),
//! oldest first, so each block's predecessor, which anchors its rebuild, is whole; and each
//! slot table on disk (it has no checksum) against the one its entries give, a wrong slot
//! rewritten from them.
//!
//! Invariants: the store lock is held only to copy a chunk, to compare units, and to write a
//! repair, never across a peer call; a repair writes only bytes a peer's checks passed, over
//! the same range (the CommitLog end and queue offsets never move).

pub mod suspects;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rocketraft_proto::raft as pb;
use rocketraft_proto::raft::raft_client::RaftClient;
use tokio_util::sync::CancellationToken;

use crate::group_state::GroupState;
use crate::raft::control::membership::PeerAddrs;
use crate::raft::transport::network::RAFT_GRPC_MESSAGE_BYTES_MAX;
use crate::scrub::suspects::SuspectUnit;
use crate::scrub::suspects::SuspectUnits;
use crate::store::StoreError;
use crate::store::commit_log_segment::COMMIT_LOG_BLOCK_BYTES;
use crate::store::cq_sums::CQ_BLOCK_UNITS;
use crate::store::index::BlockRepair;
use crate::store::index::INDEX_ENTRY_SIZE;
use crate::store::scrub::CheckedRecord;
use crate::store::scrub::RECORD_OR_FILLER_BYTES_MAX;
use crate::store::scrub::WalkEnd;
use crate::store::scrub::valid_entry_len;
use crate::store::scrub::walk_records;
use crate::tls::PeerConnector;

/// CommitLog bytes read and checked per step.
pub const SCRUB_CHUNK_BYTES: usize = 1024 * 1024;
/// Default rate: a 100 GiB CommitLog is checked in about 3.5 hours.
pub const SCRUB_BYTES_PER_SEC_DEFAULT: u64 = 8 * 1024 * 1024;
/// Default pause between the end of one pass and the start of the next.
pub const SCRUB_PASS_INTERVAL_DEFAULT: Duration = Duration::from_secs(3600);
/// Key index blocks (of 64 entries, 1,280 bytes) checked per store lock.
const SCRUB_INDEX_BLOCKS_PER_STEP: u64 = 1024;
/// Units tried on each side of a suspect one for a neighbour that checks out.
const SUSPECT_NEIGHBOURS_TRIED: usize = 16;
/// CommitLog bytes checked at most around one suspect unit.
const SUSPECT_RANGE_BYTES_MAX: i64 = 64 * 1024 * 1024;

/// Whether a range is checked at the configured rate (a pass) or at once (a suspect unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pace {
    Rate,
    AtOnce,
}
/// How long one peer may take to answer a read.
const PEER_READ_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
pub struct ScrubOptions {
    /// At most this many CommitLog bytes are checked per second; 0 turns the scrubber off.
    pub bytes_per_sec: u64,
    pub pass_interval: Duration,
}

/// What the scrubber did since the node started, for `NodeStatus`.
#[derive(Debug, Default)]
pub struct ScrubStatus {
    pub passes: AtomicU64,
    pub bytes_checked: AtomicU64,
    pub records_repaired: AtomicU64,
    pub blocks_repaired: AtomicU64,
    pub units_repaired: AtomicU64,
    pub index_repairs: AtomicU64,
    pub unrepaired: AtomicU64,
    /// Units reads found wrong, to check now.
    pub suspects: Arc<SuspectUnits>,
    last_finding: Mutex<String>,
}

impl ScrubStatus {
    /// A status whose suspects are those `suspects` (the store's) reports.
    pub fn new(suspects: Arc<SuspectUnits>) -> ScrubStatus {
        ScrubStatus {
            suspects,
            ..ScrubStatus::default()
        }
    }

    pub fn last_finding(&self) -> String {
        self.lock().clone()
    }

    fn found(&self, finding: String) {
        *self.lock() = finding;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, String> {
        self.last_finding
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Scrubs until `shutdown`: a pass over the CommitLog as it is when the pass starts, then a
/// pause of `pass_interval`.
pub async fn run_scrub(
    group: Arc<GroupState>,
    peers: PeerAddrs,
    options: ScrubOptions,
    status: Arc<ScrubStatus>,
    shutdown: CancellationToken,
) {
    if options.bytes_per_sec == 0 {
        return;
    }
    let scrubber = Scrubber {
        group,
        peers,
        options,
        status,
    };
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = scrubber.pass() => {}
        }
        scrubber.status.passes.fetch_add(1, Ordering::Relaxed);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = scrubber.pause(options.pass_interval) => {}
        }
    }
}

struct Scrubber {
    group: Arc<GroupState>,
    peers: PeerAddrs,
    options: ScrubOptions,
    status: Arc<ScrubStatus>,
}

/// What a peer's copy of a record did.
enum Outcome {
    /// It differed and was written over ours: check again from the same offset.
    Repaired,
    /// It is the same as ours.
    Matches,
    /// No peer had a valid copy (or writing it failed); counted as unrepaired.
    NoCopy,
}

impl Scrubber {
    /// One pass over the CommitLog as it is now, at the configured rate.
    async fn pass(&self) {
        let (start, end) = {
            let store = self.group.store();
            (store.commit_log_min_offset(), store.commit_log_max_offset())
        };
        self.check_range(start, end, Pace::Rate).await;
        self.check_index().await;
    }

    /// Checks every block of the key index against its checksum, and each slot table on
    /// disk against its file's entries, at the configured rate; rebuilds damaged blocks from
    /// the CommitLog and rewrites wrong slots from their entries.
    async fn check_index(&self) {
        let files = self.group.store().index().files();
        for (sequence, blocks) in files {
            let mut from = 0;
            while from < blocks {
                let to = (from + SCRUB_INDEX_BLOCKS_PER_STEP).min(blocks);
                let damaged = self
                    .group
                    .store()
                    .index()
                    .damaged_blocks(sequence, from..to);
                for block in damaged {
                    let repaired = self.group.store_mut().repair_index_block(sequence, block);
                    self.index_repaired(
                        &format!("key index file {sequence} block {block}"),
                        repaired,
                    );
                }
                self.pace_index((to - from) * CQ_BLOCK_UNITS * INDEX_ENTRY_SIZE as u64)
                    .await;
                from = to;
            }
            self.check_slot_table(sequence).await;
        }
    }

    /// Rebuilds file `sequence`'s slot table from its entries, a step at a time (the store
    /// lock is held for one step only), then compares it with the one on disk. A file that
    /// changes meanwhile, or has a damaged block, is left to the next pass.
    async fn check_slot_table(&self, sequence: u64) {
        let Some((slots, count)) = self.group.store().index().slot_table_on_disk(sequence) else {
            return;
        };
        let mut table = vec![0u32; slots as usize];
        let step = (SCRUB_INDEX_BLOCKS_PER_STEP * CQ_BLOCK_UNITS) as u32;
        let mut from = 0;
        while from < count {
            let to = from.saturating_add(step).min(count);
            let read =
                self.group
                    .store()
                    .index()
                    .newest_per_slot(sequence, count, from..to, &mut table);
            if !read {
                return;
            }
            self.pace_index(u64::from(to - from) * INDEX_ENTRY_SIZE as u64)
                .await;
            from = to;
        }
        let step = step as usize;
        for start in (0..slots as usize).step_by(step) {
            let slots = start..(start + step).min(slots as usize);
            let wrong = self
                .group
                .store()
                .index()
                .slots_differing(sequence, &table, slots);
            for slot in wrong {
                let repaired = self.group.store_mut().repair_index_slot(sequence, slot);
                self.index_repaired(&format!("key index file {sequence} slot {slot}"), repaired);
            }
        }
    }

    async fn pace_index(&self, bytes: u64) {
        self.pause(Duration::from_secs_f64(
            bytes as f64 / self.options.bytes_per_sec as f64,
        ))
        .await;
    }

    fn index_repaired(&self, what: &str, repaired: Result<BlockRepair, StoreError>) {
        match repaired {
            Ok(BlockRepair::Intact) => {}
            Ok(outcome @ (BlockRepair::Rewritten | BlockRepair::Resealed)) => {
                let finding = format!("{what}: damaged, {outcome:?}");
                tracing::warn!(%finding, "scrub repaired");
                self.status.index_repairs.fetch_add(1, Ordering::Relaxed);
                self.status.found(finding);
            }
            Ok(BlockRepair::Mismatch) => self.unrepaired(format!(
                "{what}: damaged, and what it is rebuilt from does not match (lookups through \
                 it fail until the index is rebuilt at the next start)"
            )),
            Err(error) => self.unrepaired(format!("{what}: rebuilding it failed: {error}")),
        }
    }

    /// Waits `duration`, checking suspect units as they are reported.
    async fn pause(&self, duration: Duration) {
        let until = tokio::time::Instant::now() + duration;
        loop {
            self.check_suspects().await;
            tokio::select! {
                () = tokio::time::sleep_until(until) => return,
                () = self.status.suspects.reported() => {}
            }
        }
    }

    /// Checks the CommitLog around the block of each suspect unit reported (records and the
    /// CommitLog blocks holding them), at once, then reseals the ConsumeQueue block's checksum
    /// if all its units are now their records'.
    async fn check_suspects(&self) {
        while let Some(suspect) = self.status.suspects.take() {
            match self.block_range(&suspect) {
                Some((from, to)) => {
                    tracing::warn!(
                        ?suspect,
                        from,
                        to,
                        "checking the CommitLog around a suspect unit"
                    );
                    Box::pin(self.check_range(from, to, Pace::AtOnce)).await;
                    // A read checks every block its record touches, also those it shares
                    // with records outside the range, which the range's check leaves out.
                    let blocks = {
                        let store = self.group.store();
                        store
                            .commit_log_block_start(from)
                            .zip(store.commit_log_block_start(to - 1))
                    };
                    if let Some((first, last)) = blocks {
                        let blocks_end = last + COMMIT_LOG_BLOCK_BYTES as i64;
                        self.check_blocks(first, blocks_end).await;
                    }
                }
                None => tracing::warn!(
                    ?suspect,
                    "no intact unit near a suspect one bounds a check: left to the next pass"
                ),
            }
            let Ok(queue_offset) = u64::try_from(suspect.queue_offset) else {
                continue;
            };
            let resealed =
                self.group
                    .store_mut()
                    .reseal_block(&suspect.topic, suspect.queue_id, queue_offset);
            match resealed {
                Ok(true) => {}
                Ok(false) => self.unrepaired(format!(
                    "ConsumeQueue {}/{} block of unit {queue_offset} still holds a unit that is \
                     not its record's",
                    suspect.topic, suspect.queue_id
                )),
                Err(error) => self.unrepaired(format!(
                    "resealing ConsumeQueue {}/{} block of unit {queue_offset} failed: {error}",
                    suspect.topic, suspect.queue_id
                )),
            }
        }
    }

    /// The CommitLog range that holds the records of every unit of `suspect`'s block (see
    /// [`Scrubber::suspect_range`]).
    fn block_range(&self, suspect: &SuspectUnit) -> Option<(i64, i64)> {
        let queue_offset = u64::try_from(suspect.queue_offset).ok()?;
        let block =
            self.group
                .store()
                .block_bounds(&suspect.topic, suspect.queue_id, queue_offset)?;
        let unit_at = |queue_offset: u64| SuspectUnit {
            queue_offset: queue_offset as i64,
            ..suspect.clone()
        };
        let (from, _) = self.suspect_range(&unit_at(block.start))?;
        let (_, to) = self.suspect_range(&unit_at(block.end.max(block.start + 1) - 1))?;
        (to - from <= SUSPECT_RANGE_BYTES_MAX).then_some((from, to))
    }

    /// The CommitLog range that holds `suspect`'s record: from the record of the nearest
    /// earlier unit that checks out (or the CommitLog's start, if the suspect is its queue's
    /// first unit and close to it) to the end of the nearest later one's (or the end).
    fn suspect_range(&self, suspect: &SuspectUnit) -> Option<(i64, i64)> {
        let store = self.group.store();
        let (topic, queue_id) = (suspect.topic.as_str(), suspect.queue_id);
        let (first, end) = store.consume_queue_offsets(topic, queue_id);
        let intact = |queue_offset: i64| {
            let unit = store
                .consume_queue_units(topic, queue_id, queue_offset)
                .next()?;
            store
                .read_unit_view(topic, queue_id, queue_offset, &unit)
                .is_ok()
                .then_some(unit)
        };
        let to = (suspect.queue_offset + 1..end)
            .take(SUSPECT_NEIGHBOURS_TRIED)
            .find_map(intact)
            .map_or(store.commit_log_max_offset(), |unit| {
                unit.commit_log_offset + i64::from(unit.size)
            });
        let from = match (first..suspect.queue_offset)
            .rev()
            .take(SUSPECT_NEIGHBOURS_TRIED)
            .find_map(intact)
        {
            Some(unit) => unit.commit_log_offset,
            None if suspect.queue_offset == first => store.commit_log_min_offset(),
            None => return None,
        };
        (to - from <= SUSPECT_RANGE_BYTES_MAX).then_some((from, to))
    }

    /// Checks the records from `offset` (a record's start) to `end`, repairing what is wrong.
    async fn check_range(&self, mut offset: i64, end: i64, pace: Pace) {
        let (tags_code_fn, segment_bytes) = self.group.store().layout();
        let mut want = SCRUB_CHUNK_BYTES;
        // The offset last repaired: damage found there again is not repaired twice.
        let mut repaired_at = None;
        // Blocks are checked whole, so the one a chunk's end cuts is checked with the next
        // chunk: from the start of the first block not checked yet.
        let mut blocks_from = offset;
        while offset < end {
            let len = want.min((end - offset) as usize);
            let chunk = match self.group.store().read_commit_log(offset, len) {
                Ok(chunk) => chunk,
                Err(error) => {
                    // The CommitLog no longer holds this range (a snapshot replaced it).
                    tracing::info!(offset, %error, "scrub pass ends early");
                    return;
                }
            };
            let walk = walk_records(offset, &chunk, segment_bytes, tags_code_fn);
            let wrong: Vec<(CheckedRecord, Option<_>)> = {
                let store = self.group.store();
                store
                    .wrong_units(&walk.records)
                    .into_iter()
                    .map(|(record, found)| (record.clone(), found))
                    .collect()
            };
            for (record, found) in wrong {
                self.repair_unit_or_record(&record, found, segment_bytes)
                    .await;
            }
            let next = match walk.end {
                WalkEnd::Whole { next } => {
                    want = SCRUB_CHUNK_BYTES;
                    next
                }
                WalkEnd::Continues { offset: at, needed } if at + needed as i64 <= end => {
                    want = needed.max(SCRUB_CHUNK_BYTES);
                    at
                }
                WalkEnd::Continues { offset: at, needed } => {
                    let error = format!("a record of {needed} bytes would pass the end {end}");
                    self.damaged(at, error, segment_bytes, &mut repaired_at)
                        .await
                }
                WalkEnd::Damaged { offset: at, error } => {
                    self.damaged(at, error.to_string(), segment_bytes, &mut repaired_at)
                        .await
                }
            };
            self.check_blocks(blocks_from, next).await;
            blocks_from = self
                .group
                .store()
                .commit_log_block_start(next)
                .map_or(next, |start| start.max(blocks_from));
            let checked = (next - offset).max(0) as u64;
            self.status
                .bytes_checked
                .fetch_add(checked, Ordering::Relaxed);
            offset = next;
            if pace == Pace::Rate {
                self.pause(Duration::from_secs_f64(
                    checked as f64 / self.options.bytes_per_sec as f64,
                ))
                .await;
            }
        }
    }

    /// Checks the CommitLog blocks wholly in `[from, to)` against their checksums (they cover
    /// every byte, where a record's checks cover its body and layout only) and mends each
    /// damaged one.
    async fn check_blocks(&self, mut from: i64, to: i64) {
        loop {
            let damaged = self.group.store().damaged_commit_log_block(from, to);
            let Some(block) = damaged else { return };
            let finding = format!("CommitLog block at offset {block} does not match its checksum");
            tracing::error!(offset = block, "scrub found a damaged CommitLog block");
            self.status.found(finding.clone());
            self.repair_block(block, &finding).await;
            // Past the damaged block's first byte: the next whole block, in this segment or
            // the next (whose blocks start at its own start).
            from = block + 1;
        }
    }

    /// Mends the CommitLog block at `block` with a peer's copy of its bytes that its checksum
    /// covers; if a peer's bytes equal this node's, the checksum is what rotted, and is taken
    /// anew. A copy that is neither (the peer's bytes damaged too) is not used.
    async fn repair_block(&self, block: i64, finding: &str) {
        let ours = match self.group.store().commit_log_block(block) {
            Ok((_, ours)) => ours,
            Err(error) => return self.unrepaired(format!("{finding}; reading it failed: {error}")),
        };
        let mut last_error = String::from("no peers");
        for peer in self.peers.current().iter().map(|peer| &peer.raft) {
            let copy = match read_peer(self.peers.connector(), peer, block, ours.len()).await {
                Ok(copy) if copy.len() >= ours.len() => copy,
                Ok(copy) => {
                    last_error = format!(
                        "{peer}: it holds {} of its {} bytes",
                        copy.len(),
                        ours.len()
                    );
                    continue;
                }
                Err(error) => {
                    last_error = format!("{peer}: {error}");
                    continue;
                }
            };
            let copy = &copy[..ours.len()];
            let mut store = self.group.store_mut();
            let mended = if store.commit_log_block_matches(block, copy) {
                store.repair_commit_log(block, copy)
            } else if copy == ours.as_slice() {
                store.reseal_commit_log_block(block)
            } else {
                last_error = format!("{peer}: its copy differs and does not match the checksum");
                continue;
            };
            drop(store);
            return match mended {
                Ok(()) => {
                    self.status.blocks_repaired.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(offset = block, peer, "scrub mended a CommitLog block");
                }
                Err(error) => {
                    self.unrepaired(format!("{finding}; writing the repair failed: {error}"))
                }
            };
        }
        self.unrepaired(format!(
            "{finding}; no peer had a copy it covers ({last_error})"
        ));
    }

    /// Handles damage at `at`; returns where to go on.
    async fn damaged(
        &self,
        at: i64,
        error: String,
        segment_bytes: u64,
        repaired_at: &mut Option<i64>,
    ) -> i64 {
        let next_segment = (at as u64 / segment_bytes + 1) as i64 * segment_bytes as i64;
        let finding = format!("damaged CommitLog record at offset {at}: {error}");
        tracing::error!(offset = at, %error, "scrub found a damaged CommitLog record");
        self.status.found(finding.clone());
        if *repaired_at == Some(at) {
            self.unrepaired(format!("{finding}; still damaged after a repair"));
            return next_segment;
        }
        match self.repair_record(at, segment_bytes, None).await {
            Outcome::Repaired => {
                *repaired_at = Some(at);
                at
            }
            Outcome::Matches | Outcome::NoCopy => next_segment,
        }
    }

    /// A unit differs from its record: the record is repaired if a peer's copy differs,
    /// else the unit is rewritten.
    async fn repair_unit_or_record(
        &self,
        record: &CheckedRecord,
        found: Option<crate::store::CqUnit>,
        segment_bytes: u64,
    ) {
        let finding = format!(
            "ConsumeQueue {}/{} unit {} is {found:?}, its record at {} calls for {:?}",
            record.topic, record.queue_id, record.queue_offset, record.offset, record.unit
        );
        tracing::error!(%finding, "scrub found a wrong ConsumeQueue unit");
        self.status.found(finding.clone());
        match self
            .repair_record(
                record.offset,
                segment_bytes,
                Some(record.unit.size as usize),
            )
            .await
        {
            Outcome::Repaired | Outcome::NoCopy => return,
            Outcome::Matches => {}
        }
        let Ok(queue_offset) = u64::try_from(record.queue_offset) else {
            return self.unrepaired(format!("{finding}; negative queue offset"));
        };
        if found.is_none() {
            return self.unrepaired(format!("{finding}; the queue ends before it"));
        }
        let rewritten = self.group.store_mut().repair_unit(
            &record.topic,
            record.queue_id,
            queue_offset,
            record.unit,
        );
        match rewritten {
            Ok(()) => {
                self.status.units_repaired.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    topic = record.topic,
                    queue_id = record.queue_id,
                    queue_offset,
                    "scrub rewrote a ConsumeQueue unit from its record"
                );
            }
            Err(error) => self.unrepaired(format!("{finding}; rewrite failed: {error}")),
        }
    }

    /// Writes a peer's copy of the record or filler at `at` over this node's if it differs
    /// (with `same_len`: a copy of that length, compared first).
    async fn repair_record(&self, at: i64, segment_bytes: u64, same_len: Option<usize>) -> Outcome {
        let mut last_error = String::from("no peers");
        // `ReadCommitLog` is a Raft service call.
        for peer in self.peers.current().iter().map(|peer| &peer.raft) {
            let copy = match read_peer(self.peers.connector(), peer, at, RECORD_OR_FILLER_BYTES_MAX)
                .await
            {
                Ok(copy) => copy,
                Err(error) => {
                    last_error = format!("{peer}: {error}");
                    continue;
                }
            };
            let len = match valid_entry_len(&copy, at, segment_bytes) {
                Ok(len) if same_len.is_none_or(|same| same == len) => len,
                Ok(len) => {
                    last_error = format!("{peer}: its record at {at} is {len} bytes");
                    continue;
                }
                Err(error) => {
                    last_error = format!("{peer}: its copy at {at} is no valid record: {error}");
                    continue;
                }
            };
            let copy = &copy[..len];
            let mut store = self.group.store_mut();
            if store
                .read_commit_log(at, len)
                .is_ok_and(|ours| ours == copy)
            {
                return Outcome::Matches;
            }
            return match store.repair_commit_log(at, copy) {
                Ok(()) => {
                    drop(store);
                    self.status.records_repaired.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        offset = at,
                        len,
                        peer,
                        "scrub repaired a CommitLog record from a peer"
                    );
                    Outcome::Repaired
                }
                Err(error) => {
                    drop(store);
                    self.unrepaired(format!(
                        "CommitLog at {at}: writing the repair failed: {error}"
                    ));
                    Outcome::NoCopy
                }
            };
        }
        self.unrepaired(format!(
            "CommitLog at {at}: no peer had a valid copy ({last_error})"
        ));
        Outcome::NoCopy
    }

    fn unrepaired(&self, finding: String) {
        tracing::error!(%finding, "scrub could not repair");
        self.status.unrepaired.fetch_add(1, Ordering::Relaxed);
        self.status.found(finding);
    }
}

/// Up to `max_bytes` of the peer's CommitLog from `offset`.
async fn read_peer(
    connector: &PeerConnector,
    peer: &str,
    offset: i64,
    max_bytes: usize,
) -> Result<Vec<u8>, String> {
    let read = async {
        let channel = connector
            .endpoint(peer)?
            .connect()
            .await
            .map_err(|error| error.to_string())?;
        let mut client =
            RaftClient::new(channel).max_decoding_message_size(RAFT_GRPC_MESSAGE_BYTES_MAX);
        client
            .read_commit_log(pb::ReadCommitLogRequest {
                offset,
                max_bytes: max_bytes as u32,
            })
            .await
            .map(|response| response.into_inner().data.to_vec())
            .map_err(|status| status.message().to_owned())
    };
    tokio::time::timeout(PEER_READ_TIMEOUT, read)
        .await
        .map_err(|_| format!("no answer within {PEER_READ_TIMEOUT:?}"))?
}
