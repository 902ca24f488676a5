//! A seeded crash simulation of one node's Raft log on a [`SimDisk`]: appends, conflict
//! truncations, purges and votes, interrupted by power losses at chosen disk operations,
//! torn tails and flipped bits (in segments, and in one copy of the vote), each followed by
//! recovery and a check against a model.
//!
//! Even seeds run `flush = sync`, odd ones `flush = async`, whose flusher rounds (the
//! interval's fsync) are steps of the simulation. The checker asserts, after every recovery:
//! - every entry the log returns is one that was written at its index, with its bytes, and
//!   not one an acknowledged truncation removed;
//! - every entry the mode promised to keep is there (with `sync`: every acknowledged one;
//!   with `async`: every one acknowledged before the last completed flusher round), unless
//!   recovery marked the range for repair, which it may only do when bits were flipped;
//! - an acknowledged vote and purge survive; no vote or purge is invented.
//!
//! `SIM_SEED=N` replays one seed exactly (the disk operations are numbered, and the log's
//! flusher has no thread: the simulation runs its rounds); `SIM_SEEDS=N` runs seeds `0..N`
//! (200 by default), a longer soak.
//!
//! Not covered here: files other than the Raft log's (the store's CommitLog, ConsumeQueues
//! and checkpoint), and several nodes (see issue 10's notes).

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use openraft::EntryPayload;
use openraft::storage::IOFlushed;
use openraft::storage::RaftLogReader;
use openraft::storage::RaftLogStorage;
use openraft::type_config::TypeConfigExt;

use crate::disk::Disk;
use crate::raft::log::repair;
use crate::raft::log::segment::LogSegment;
use crate::raft::log::store::FlushMode;
use crate::raft::log::store::LogStore;
use crate::raft::log::store::LogStoreConfig;
use crate::raft::log::vote_file;
use crate::raft::types::Entry;
use crate::raft::types::LogId;
use crate::raft::types::TypeConfig;
use crate::raft::types::Vote;
use crate::seeded_rng::SeededRng;
use crate::state_machine::command::Command;
use crate::testing::counters::Counters;
use crate::testing::sim_disk::SimDisk;

/// Seeds run by default.
const SEEDS_DEFAULT: u64 = 200;
/// Operations per seed.
const STEPS: u64 = 300;
/// Small segments, so appends roll often and purges delete files.
const SEGMENT_BYTES: u64 = 4096;

/// The entry written at `index` in `term`: its size and bytes follow from both.
fn entry(term: u64, index: u64) -> Entry {
    let len = 1 + (term.wrapping_mul(7919) ^ index.wrapping_mul(104_729)) % 700;
    let fill = (term.wrapping_mul(31) ^ index) as u8;
    Entry {
        log_id: LogId::new_term_index(term, index),
        payload: EntryPayload::Normal(Command::Append {
            records: Bytes::from(vec![fill; len as usize]),
        }),
    }
}

/// What the simulation did and what the log must show.
#[derive(Default)]
struct Model {
    /// Every version written at each index, and whether an acknowledged truncation removed it.
    written: BTreeMap<u64, Vec<(LogId, bool)>>,
    /// Entries acknowledged and not truncated since.
    acked: BTreeMap<u64, LogId>,
    /// Acknowledged entries no flusher round made durable yet (`async` only).
    unsynced: BTreeSet<u64>,
    term: u64,
    vote: Option<Vote>,
    vote_in_flight: Option<Vote>,
    purged_acked: Option<u64>,
    purge_asked_max: Option<u64>,
    /// Bits were flipped since the last check.
    flipped: bool,
}

/// What a sweep counts: the faults injected, and the checks they were put to.
const CRASHES: &str = "crashes";
const POWER_CUTS_MID_OPERATION: &str = "power cuts mid-operation";
const FLIPS: &str = "bits flipped in segments";
const VOTE_FLIPS: &str = "bits flipped in one copy of the vote";
const ACKED_ENTRIES_CHECKED: &str = "acknowledged entries checked";
const REPAIRS: &str = "repairs";
const CLASSES: &[&str] = &[
    CRASHES,
    POWER_CUTS_MID_OPERATION,
    FLIPS,
    VOTE_FLIPS,
    ACKED_ENTRIES_CHECKED,
    REPAIRS,
];

struct Sim {
    seed: u64,
    flush: FlushMode,
    rng: SeededRng,
    disk: SimDisk,
    dir: PathBuf,
    model: Model,
    counters: Counters,
}

fn open(disk: &SimDisk, dir: &Path, flush: FlushMode) -> std::io::Result<LogStore> {
    LogStore::open_flushed_by_caller(LogStoreConfig {
        disk: Arc::new(disk.clone()),
        dir: dir.to_path_buf(),
        segment_size_bytes: SEGMENT_BYTES,
        flush,
        purged_if_mark_damaged: None,
    })
}

impl Sim {
    fn new(seed: u64) -> Sim {
        Sim {
            seed,
            flush: match seed % 2 {
                0 => FlushMode::Sync,
                _ => FlushMode::Async {
                    interval: std::time::Duration::from_secs(3600),
                },
            },
            rng: SeededRng::new(seed),
            disk: SimDisk::default(),
            dir: PathBuf::from("/sim/raft/log"),
            model: Model {
                term: 1,
                ..Model::default()
            },
            counters: Counters::of(CLASSES),
        }
    }

    fn fail(&self, reason: String) -> String {
        format!(
            "seed {}: {reason} ({})",
            self.seed,
            crate::testing::seeds::replay(self.seed, "crash_sim")
        )
    }

    /// Maybe cuts the power a few disk operations from now.
    fn maybe_arm_power_cut(&mut self) {
        if self.rng.below(10) == 0 {
            let op = self.disk.ops() + 1 + self.rng.below(8);
            self.disk.fail_from_op(op);
        }
    }

    async fn run(mut self) -> Result<Counters, String> {
        let mut store =
            open(&self.disk, &self.dir, self.flush).map_err(|e| self.fail(format!("open: {e}")))?;
        for _ in 0..STEPS {
            let powered = match self.rng.below(100) {
                0..60 => self.append(&mut store).await?,
                60..68 => self.truncate(&mut store).await?,
                68..74 => self.purge(&mut store).await?,
                74..80 => self.save_vote(&mut store).await?,
                80..88 => self.flush_round(&store),
                _ => false,
            };
            if !powered {
                drop(store);
                store = self.crash_and_recover()?;
                store = self.check(store).await?;
            }
        }
        drop(store);
        let store = self.crash_and_recover()?;
        self.check(store).await?;
        Ok(self.counters)
    }

    /// The next index the log takes.
    async fn next_index(&self, store: &mut LogStore) -> Result<u64, String> {
        let state = store
            .get_log_state()
            .await
            .map_err(|e| self.fail(format!("log state: {e}")))?;
        Ok(state.last_log_id.map_or(0, |log_id| log_id.index + 1))
    }

    /// Whether the power is still on after an operation: an error is expected only when
    /// it went.
    fn powered(&self, result: std::io::Result<()>, operation: &str) -> Result<bool, String> {
        match result {
            Ok(()) => Ok(true),
            Err(_) if self.disk.powered_off() => Ok(false),
            Err(error) => Err(self.fail(format!("{operation} failed with the power on: {error}"))),
        }
    }

    /// Appends 1 to 6 entries; false if the power went.
    async fn append(&mut self, store: &mut LogStore) -> Result<bool, String> {
        let next = self.next_index(store).await?;
        let count = 1 + self.rng.below(6);
        let entries: Vec<Entry> = (next..next + count)
            .map(|index| entry(self.model.term, index))
            .collect();
        for entry in &entries {
            self.model
                .written
                .entry(entry.log_id.index)
                .or_default()
                .push((entry.log_id, false));
        }
        self.maybe_arm_power_cut();
        let (tx, rx) = TypeConfig::oneshot();
        let appended = store.append(entries.clone(), IOFlushed::signal(tx)).await;
        if !self.powered(appended, "append")? {
            return Ok(false);
        }
        if self.flush == FlushMode::Sync {
            store.run_flush_round();
        }
        let flushed = rx
            .await
            .map_err(|_| self.fail("append callback dropped".into()))?;
        if !self.powered(flushed, "append flush")? {
            return Ok(false);
        }
        for entry in entries {
            self.model.acked.insert(entry.log_id.index, entry.log_id);
            if self.flush != FlushMode::Sync {
                self.model.unsynced.insert(entry.log_id.index);
            }
        }
        Ok(true)
    }

    /// One flusher round (with `async`, the interval's fsync); false if the power went.
    fn flush_round(&mut self, store: &LogStore) -> bool {
        store.run_flush_round();
        if self.disk.powered_off() {
            return false;
        }
        self.model.unsynced.clear();
        true
    }

    /// A new leader overwrote a short suffix: drops the last 0 to 5 entries.
    async fn truncate(&mut self, store: &mut LogStore) -> Result<bool, String> {
        let next = self.next_index(store).await?;
        let floor = self.model.purge_asked_max.map_or(0, |p| p + 1);
        if next <= floor {
            return Ok(true);
        }
        let keep_up_to = next.saturating_sub(1 + self.rng.below(6)).max(floor);
        let Some(last_kept) = self.model.acked.get(&keep_up_to).copied() else {
            return Ok(true);
        };
        self.model.term += 1;
        // Asking for the cut gives up the entries above it, whether or not it completes.
        self.model.acked.retain(|index, _| *index <= keep_up_to);
        self.model.unsynced.retain(|index| *index <= keep_up_to);
        self.maybe_arm_power_cut();
        let truncated = store.truncate_after(Some(last_kept)).await;
        if !self.powered(truncated, "truncate")? {
            return Ok(false);
        }
        for (_, versions) in self.model.written.range_mut(keep_up_to + 1..) {
            versions.iter_mut().for_each(|(_, removed)| *removed = true);
        }
        Ok(true)
    }

    /// Purges up to an acknowledged entry below the last one.
    async fn purge(&mut self, store: &mut LogStore) -> Result<bool, String> {
        let candidates: Vec<LogId> = self.model.acked.values().copied().collect();
        if candidates.len() < 2 {
            return Ok(true);
        }
        let log_id = candidates[self.rng.below(candidates.len() as u64 - 1) as usize];
        if self.model.purge_asked_max >= Some(log_id.index) {
            return Ok(true);
        }
        self.model.purge_asked_max = Some(log_id.index);
        self.maybe_arm_power_cut();
        let purged = store.purge(log_id).await;
        if !self.powered(purged, "purge")? {
            return Ok(false);
        }
        self.model.purged_acked = Some(log_id.index);
        self.model.acked.retain(|index, _| *index > log_id.index);
        self.model.unsynced.retain(|index| *index > log_id.index);
        Ok(true)
    }

    async fn save_vote(&mut self, store: &mut LogStore) -> Result<bool, String> {
        self.model.term += 1;
        let vote = Vote::new(self.model.term, 1 + self.rng.below(3));
        self.model.vote_in_flight = Some(vote);
        self.maybe_arm_power_cut();
        let saved = store.save_vote(&vote).await;
        if !self.powered(saved, "save vote")? {
            return Ok(false);
        }
        self.model.vote = Some(vote);
        Ok(true)
    }

    /// Power loss (at a quiet moment, or the one armed), sometimes bit rot in a segment, then
    /// reopens the log.
    fn crash_and_recover(&mut self) -> Result<LogStore, String> {
        self.counters.bump(CRASHES);
        self.counters
            .add(POWER_CUTS_MID_OPERATION, u64::from(self.disk.powered_off()));
        self.disk.crash(&mut self.rng);
        if self.rng.below(4) == 0 {
            self.flip_segment()?;
        }
        if self.rng.below(4) == 0 {
            self.flip_vote_copy()?;
        }
        open(&self.disk, &self.dir, self.flush)
            .map_err(|error| self.fail(format!("reopen after a crash: {error}")))
    }

    fn flip_segment(&mut self) -> Result<(), String> {
        let segments_dir = self.dir.join("segments");
        let segments = LogSegment::list(&self.disk, &segments_dir)
            .map_err(|e| self.fail(format!("list: {e}")))?;
        if segments.is_empty() {
            return Ok(());
        }
        let (_, path) = &segments[self.rng.below(segments.len() as u64) as usize];
        let len = self
            .disk
            .read(path)
            .map_err(|e| self.fail(format!("read: {e}")))?
            .len() as u64;
        if len == 0 {
            return Ok(());
        }
        let (offset, bit) = (self.rng.below(len), self.rng.below(8) as u8);
        self.disk
            .flip_bit(path, offset, bit)
            .map_err(|e| self.fail(format!("flip: {e}")))?;
        self.model.flipped = true;
        self.counters.bump(FLIPS);
        Ok(())
    }

    /// Flips a bit in one copy of the vote, if there is one: recovery must read the vote from
    /// the other copy (which holds it, or the vote before a save that never returned).
    fn flip_vote_copy(&mut self) -> Result<(), String> {
        let copies = vote_file::copy_paths(&self.dir);
        let path = &copies[self.rng.below(2) as usize];
        let Ok(bytes) = self.disk.read(path) else {
            return Ok(());
        };
        let (offset, bit) = (self.rng.below(bytes.len() as u64), self.rng.below(8) as u8);
        self.disk
            .flip_bit(path, offset, bit)
            .map_err(|e| self.fail(format!("flip the vote: {e}")))?;
        self.counters.bump(VOTE_FLIPS);
        Ok(())
    }

    /// Checks the recovered log against the model, then takes it as the new baseline.
    async fn check(&mut self, mut store: LogStore) -> Result<LogStore, String> {
        let state = store
            .get_log_state()
            .await
            .map_err(|e| self.fail(format!("log state: {e}")))?;
        let entries = store
            .try_get_log_entries(..)
            .await
            .map_err(|e| self.fail(format!("read log: {e}")))?;
        let vote = store
            .read_vote()
            .await
            .map_err(|e| self.fail(format!("vote: {e}")))?;
        let mark = repair::load(&self.disk, &self.dir)
            .map_err(|e| self.fail(format!("repair mark: {e}")))?;
        let purged = state.last_purged_log_id.map(|log_id| log_id.index);

        for found in &entries {
            let index = found.log_id.index;
            let known =
                self.model.written.get(&index).and_then(|versions| {
                    versions.iter().find(|(log_id, _)| *log_id == found.log_id)
                });
            match known {
                None => {
                    return Err(self.fail(format!("entry {:?} was never written", found.log_id)));
                }
                Some((_, true)) => {
                    return Err(self.fail(format!(
                        "entry {:?} came back after an acknowledged truncation",
                        found.log_id
                    )));
                }
                Some(_) => {}
            }
            let expected = entry(found.log_id.committed_leader_id().term, index);
            if format!("{:?}", found.payload) != format!("{:?}", expected.payload)
                || payload_bytes(found) != payload_bytes(&expected)
            {
                return Err(self.fail(format!("entry {index} has other bytes than written")));
            }
        }
        if purged < self.model.purged_acked || purged > self.model.purge_asked_max {
            return Err(self.fail(format!(
                "purge point {purged:?}; acknowledged {:?}, asked at most {:?}",
                self.model.purged_acked, self.model.purge_asked_max
            )));
        }
        if let Some(mark) = &mark
            && !self.model.flipped
        {
            return Err(self.fail(format!("repair mark {mark:?} without damage")));
        }
        let present: BTreeMap<u64, LogId> =
            entries.iter().map(|e| (e.log_id.index, e.log_id)).collect();
        for (index, log_id) in self.model.acked.range(purged.map_or(0, |p| p + 1)..) {
            if present.get(index) == Some(log_id) || self.model.unsynced.contains(index) {
                continue;
            }
            self.counters.bump(ACKED_ENTRIES_CHECKED);
            let marked = mark
                .as_ref()
                .is_some_and(|m| m.cut_at_index <= *index && *index <= m.up_to_index);
            if !marked {
                return Err(self.fail(format!(
                    "acknowledged entry {log_id:?} lost without a repair mark (found {:?})",
                    present.get(index)
                )));
            }
        }
        if vote != self.model.vote && vote != self.model.vote_in_flight {
            return Err(self.fail(format!(
                "vote {vote:?}; acknowledged {:?}, in flight {:?}",
                self.model.vote, self.model.vote_in_flight
            )));
        }

        // The recovered log is the new truth: a repair would refetch the marked range from
        // the leader; here the cut log simply goes on.
        if mark.is_some() {
            self.counters.bump(REPAIRS);
            let mark_path = self.dir.join("repair");
            self.disk
                .remove_file(&mark_path)
                .and_then(|()| self.disk.sync_dir(&self.dir))
                .map_err(|e| self.fail(format!("clear mark: {e}")))?;
        }
        self.model.acked = present;
        self.model.unsynced.clear();
        self.model.vote = vote;
        self.model.vote_in_flight = None;
        self.model.purged_acked = purged;
        self.model.purge_asked_max = purged;
        self.model.flipped = false;
        Ok(store)
    }
}

fn payload_bytes(entry: &Entry) -> Option<&[u8]> {
    match &entry.payload {
        EntryPayload::Normal(Command::Append { records }) => Some(records),
        _ => None,
    }
}

fn seeds() -> std::ops::Range<u64> {
    crate::testing::seeds::seeds(SEEDS_DEFAULT)
}

#[test]
fn seeded_power_losses_lose_no_acknowledged_entry() {
    let mut total = Counters::of(CLASSES);
    for seed in seeds() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let counters = runtime
            .block_on(Sim::new(seed).run())
            .unwrap_or_else(|failure| panic!("{failure}"));
        total.merge(&counters);
    }
    eprintln!("raft log crash simulation, seeds {:?}: {total}", seeds());
    total.assert_every_class_fired(&seeds(), SEEDS_DEFAULT);
}
