//! `Index`: message keys and unique ids to CommitLog offsets, for `query-msg` and for the
//! deduplication of retried sends. It lives on disk in RocketMQ's hash-slot layout, so the
//! memory it needs does not grow with the messages it holds.
//!
//! Files `<dir>/index/<sequence, 20 digits>`, fixed-size, preallocated and memory-mapped:
//! - a header: magic, slot count, entry capacity, and the entry count as of the last flush
//!   (u32 each);
//! - a slot table: per slot (a key's hash modulo the slot count), the newest entry of the
//!   slot as its number + 1, 0 for none (u32);
//! - entries of [`INDEX_ENTRY_SIZE`] bytes: the key's u64 FNV-1a hash, the record's CommitLog
//!   offset (i64), and the previous entry of the same slot as number + 1 (u32).
//!
//! All big-endian. An add writes one entry and one slot: O(1). The slot table of the file
//! taking entries is kept in memory ([`SlotTable`]) and written into the file when it fills. A lookup probes one slot per
//! file, newest file first, and walks that slot's chain keeping the entries of the key's hash.
//! When a file is full the next one starts; only the newest file ever changes, except when a
//! truncation reaches back into older ones.
//!
//! Invariants: entries are in non-decreasing CommitLog offset order across all files (so a
//! truncation drops a suffix); a (hash, offset) pair is stored once; a chain only goes to
//! older entries; a hash names candidates only, so callers verify the key against the record
//! read back. Durability: a flush writes each file's entry count into its header before the
//! files are synced, and the store's checkpoint, written after, counts the entries. At open,
//! the newest file keeps the entries its header counts that are in order, and its slot table
//! is rebuilt from them: nothing written after the last flush is trusted, and the store
//! re-dispatches what the checkpoint does not cover.
//!
//! Entries have a CRC-32 per block of 64 in `index/sums/<same name>` ([`SegmentSums`],
//! extended by each add). Apply's retry detection walks the index, and so does an add (is
//! its pair stored already?), so an entry damaged on one replica could make it decide
//! differently from the others: every walk checks each block it reads, and at open a file whose
//! counted whole blocks do not match is damage, and the index is rebuilt from the
//! CommitLog; a sealed file's slot table is checked against its entries and rewritten if it
//! differs. The newest file's last, partial block is kept only if its checksum covers exactly
//! its counted entries; otherwise (a crash between writing entries and checksums, or rot:
//! nothing tells which) it is dropped and the store dispatches its records again. No entry
//! is trusted without a checksum over it.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use tracing::warn;

use crate::store::consume_queue::CQ_UNIT_SIZE;
use crate::store::cq_sums::{CQ_BLOCK_UNITS, SUMS_DIR, SegmentSums, UNIT_SUMS};
use crate::store::error::StoreError;
use crate::store::mapped_file;
use crate::store::mapped_file::{Detached, FlushTarget, Footprint, MappedFile};
use crate::store::slot_table::{SLOT_SIZE, SlotTable};

/// Bytes per index entry: key hash u64 + CommitLog offset i64 + previous entry u32.
pub const INDEX_ENTRY_SIZE: usize = 20;
const _: () = assert!(INDEX_ENTRY_SIZE == 8 + 8 + 4);
// Entries share the ConsumeQueue's block checksums, which count 20-byte units.
const _: () = assert!(INDEX_ENTRY_SIZE == CQ_UNIT_SIZE);
/// Sub-directory of the store holding the index.
pub const INDEX_DIR: &str = "index";
/// Entries per slot when a file is full (RocketMQ: 20 M entries over 5 M slots).
pub const INDEX_ENTRIES_PER_SLOT: u32 = 4;
/// File of the in-memory index of earlier versions: removed at open (the store rebuilds
/// the index from the CommitLog, since none of it is then counted).
const LEGACY_FILE: &str = "entries";

const MAGIC: u32 = 0x5252_4958;
const HEADER_SIZE: usize = 16;
/// Why an index file whose header is all zeros does not open.
const HEADER_NEVER_WRITTEN: &str = "header never written (its creation did not finish)";
/// A slot or link that names no entry.
const NO_ENTRY: u32 = 0;

/// Stable 64-bit FNV-1a hash of a key (must never change: it is persisted).
pub fn key_hash(key: &str) -> u64 {
    rocketraft_domain::stable_hash::fnv1a_64(key.as_bytes())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    hash: u64,
    offset: i64,
    /// The previous entry of the same slot, as number + 1.
    previous: u32,
}

/// One index file.
#[derive(Debug)]
struct IndexFile {
    map: MappedFile,
    /// The CRC-32s of the entries' blocks.
    sums: SegmentSums,
    slots: u32,
    capacity: u32,
    count: u32,
    /// While the file takes entries, its slot table lives here and reaches the file when
    /// the file fills; `None`: the file's own table is current.
    live_slots: Option<SlotTable>,
}

/// An entry as stored: `previous` is the slot's entry before it, as number + 1.
fn encode_entry(hash: u64, offset: i64, previous: u32) -> [u8; INDEX_ENTRY_SIZE] {
    let mut bytes = [0u8; INDEX_ENTRY_SIZE];
    bytes[..8].copy_from_slice(&hash.to_be_bytes());
    bytes[8..16].copy_from_slice(&offset.to_be_bytes());
    bytes[16..].copy_from_slice(&previous.to_be_bytes());
    bytes
}

/// Where the entries of a block come from, for [`Index::repair_block`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockOrigin {
    /// How many entries the block holds.
    pub entries: usize,
    /// `(key hash, CommitLog offset)` of the entry before the block (in its file or the
    /// file before); `None`: the block starts the index.
    pub after: Option<(u64, i64)>,
}

/// What [`Index::repair_block`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockRepair {
    /// The entries and their checksum agreed already.
    Intact,
    /// The entries were damaged and are written again as they were.
    Rewritten,
    /// The entries were right and their checksum damaged: it is taken from them again.
    Resealed,
    /// What the CommitLog gives does not match the checksum: nothing was changed.
    Mismatch,
}

fn file_size(slots: u32, capacity: u32) -> u64 {
    (HEADER_SIZE + slots as usize * SLOT_SIZE + capacity as usize * INDEX_ENTRY_SIZE) as u64
}

fn u32_at(bytes: &[u8], pos: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[pos..pos + 4]);
    u32::from_be_bytes(word)
}

impl IndexFile {
    fn create(dir: &Path, sequence: u64, capacity: u32) -> Result<IndexFile, StoreError> {
        let slots = (capacity / INDEX_ENTRIES_PER_SLOT).max(1);
        let sums = SegmentSums::create(
            &dir.join(SUMS_DIR),
            sequence,
            u64::from(capacity),
            UNIT_SUMS,
            Footprint::Preallocated,
        )?;
        let size = file_size(slots, capacity);
        let mut map = MappedFile::create(dir, sequence, size, Footprint::Preallocated)?;
        map.set_full();
        let mut file = IndexFile {
            map,
            sums,
            slots,
            capacity,
            count: 0,
            live_slots: Some(SlotTable::new(slots)?),
        };
        let mut header = [0u8; HEADER_SIZE];
        for (word, value) in header.chunks_exact_mut(4).zip([MAGIC, slots, capacity, 0]) {
            word.copy_from_slice(&value.to_be_bytes());
        }
        file.map.overwrite(0, &header)?;
        // Durable before any entry goes in: a file whose header a power loss took cannot
        // be told from garbage.
        file.map.flush()?;
        Ok(file)
    }

    /// Opens a file with the entry count of its header; the flag says whether its checksums
    /// were found (a file written before them has none).
    fn open(path: PathBuf, sequence: u64) -> Result<(IndexFile, bool), StoreError> {
        let bad = |reason: &'static str| StoreError::IndexFile {
            path: path.clone(),
            reason,
        };
        let mut head = [0u8; HEADER_SIZE];
        let len = fs::File::open(&path)
            .and_then(|mut file| {
                use std::io::Read;
                file.read_exact(&mut head)?;
                Ok(file.metadata()?.len())
            })
            .map_err(|e| StoreError::io("read index file header", &path, e))?;
        if head.iter().all(|byte| *byte == 0) {
            return Err(bad(HEADER_NEVER_WRITTEN));
        }
        if u32_at(&head, 0) != MAGIC {
            return Err(bad("no index file header"));
        }
        let (slots, capacity, count) = (u32_at(&head, 4), u32_at(&head, 8), u32_at(&head, 12));
        let size = file_size(slots, capacity);
        if slots == 0 || count > capacity || len != size {
            return Err(bad("header does not match the file"));
        }
        let sums_dir = path
            .parent()
            .map_or_else(|| PathBuf::from(SUMS_DIR), |dir| dir.join(SUMS_DIR));
        let (sums, found) = SegmentSums::open_or_create(
            &sums_dir,
            sequence,
            u64::from(capacity),
            UNIT_SUMS,
            Footprint::Preallocated,
        )?;
        let mut map = MappedFile::open(path, sequence, size, Footprint::Preallocated)?;
        map.set_full();
        let file = IndexFile {
            map,
            sums,
            slots,
            capacity,
            count,
            live_slots: None,
        };
        Ok((file, found))
    }

    /// Where in the file the entries of block `block` among the first `count` lie.
    fn block_range(&self, block: u64, count: u32) -> std::ops::Range<usize> {
        let start = (block * CQ_BLOCK_UNITS).min(u64::from(count)) as u32;
        let end = ((block + 1) * CQ_BLOCK_UNITS).min(u64::from(count)) as u32;
        self.entry_pos(start)..self.entry_pos(end)
    }

    /// The entries of block `block` among the first `count`.
    fn block_bytes(&self, block: u64, count: u32) -> &[u8] {
        &self.whole()[self.block_range(block, count)]
    }

    /// How many blocks the first `count` entries fill (the last block of a full file may be
    /// shorter than the others).
    fn whole_blocks(&self, count: u32) -> u64 {
        if count == self.capacity {
            u64::from(count).div_ceil(CQ_BLOCK_UNITS)
        } else {
            u64::from(count) / CQ_BLOCK_UNITS
        }
    }

    /// Whether the first `count` entries end in no partial block, or in one whose checksum
    /// covers exactly its entries among them.
    fn partial_block_covered(&self, count: u32) -> bool {
        let block = u64::from(count) / CQ_BLOCK_UNITS;
        u64::from(count) % CQ_BLOCK_UNITS == 0
            || self.sums.get(block).covers(self.block_bytes(block, count))
    }

    /// Whether every block the first `count` entries fill matches its checksum.
    fn whole_blocks_intact(&self, count: u32) -> bool {
        (0..self.whole_blocks(count))
            .all(|block| self.sums.get(block).covers(self.block_bytes(block, count)))
    }

    /// Takes the checksum of the first `count` entries' last, partial block from them, and
    /// forgets those of later blocks; with `all`, of every block (a file without checksums).
    fn seal_from(&mut self, count: u32, all: bool) -> Result<(), StoreError> {
        let last = u64::from(count).div_ceil(CQ_BLOCK_UNITS);
        let from = if all { 0 } else { self.whole_blocks(count) };
        for block in from..last {
            let range = self.block_range(block, count);
            self.sums.seal(block, &self.map.whole()[range])?;
        }
        self.sums.clear_from(last)
    }

    /// A sealed file's slot table must name each slot's newest entry: rewritten from the
    /// entries if it does not (its entries are checked; it is not). True if it was.
    fn repair_slot_table(&mut self) -> Result<bool, StoreError> {
        let mut table = SlotTable::new(self.slots)?;
        for number in 0..self.count {
            let slot = self.slot_number(self.entry(number).hash);
            table.set(slot, number + 1);
        }
        let expected = table.as_file_bytes(self.slots);
        let region = HEADER_SIZE..HEADER_SIZE + self.slots as usize * SLOT_SIZE;
        if self.whole()[region] == *expected {
            return Ok(false);
        }
        self.map.overwrite(HEADER_SIZE, expected)?;
        Ok(true)
    }

    /// Unmaps and deletes the file and its checksums.
    fn delete(self) -> Result<(), StoreError> {
        self.map.delete()?;
        self.sums.into_file().delete()
    }

    /// Keeps the longest in-order prefix of the first `counted` entries and relinks them
    /// into a cleared slot table.
    fn rebuild_slots(&mut self, counted: u32) -> Result<(), StoreError> {
        self.live_slots = Some(SlotTable::new(self.slots)?);
        self.count = 0;
        let mut last = i64::MIN;
        for number in 0..counted {
            let entry = self.entry(number);
            if entry.offset < 0 || entry.offset < last {
                warn!(
                    path = %self.map.path().display(),
                    kept = number,
                    counted,
                    "index file: dropped entries out of order"
                );
                break;
            }
            last = entry.offset;
            self.push(entry.hash, entry.offset)?;
        }
        Ok(())
    }

    fn slot_number(&self, hash: u64) -> usize {
        (hash % u64::from(self.slots)) as usize
    }

    /// The newest entry of `hash`'s slot, as number + 1.
    fn slot(&self, hash: u64) -> u32 {
        let slot = self.slot_number(hash);
        match &self.live_slots {
            Some(table) => table.get(slot),
            None => u32_at(self.whole(), HEADER_SIZE + slot * SLOT_SIZE),
        }
    }

    fn set_slot(&mut self, hash: u64, value: u32) -> Result<(), StoreError> {
        let slot = self.slot_number(hash);
        match &mut self.live_slots {
            Some(table) => {
                table.set(slot, value);
                Ok(())
            }
            None => self
                .map
                .overwrite(HEADER_SIZE + slot * SLOT_SIZE, &value.to_be_bytes()),
        }
    }

    fn entry_pos(&self, number: u32) -> usize {
        HEADER_SIZE + self.slots as usize * SLOT_SIZE + number as usize * INDEX_ENTRY_SIZE
    }

    fn whole(&self) -> &[u8] {
        self.map.whole()
    }

    fn entry(&self, number: u32) -> Entry {
        let bytes = &self.whole()[self.entry_pos(number)..][..INDEX_ENTRY_SIZE];
        let mut hash = [0u8; 8];
        let mut offset = [0u8; 8];
        hash.copy_from_slice(&bytes[..8]);
        offset.copy_from_slice(&bytes[8..16]);
        Entry {
            hash: u64::from_be_bytes(hash),
            offset: i64::from_be_bytes(offset),
            previous: u32_at(bytes, 16),
        }
    }

    fn last_offset(&self) -> Option<i64> {
        self.count
            .checked_sub(1)
            .map(|number| self.entry(number).offset)
    }

    fn is_full(&self) -> bool {
        self.count >= self.capacity
    }

    /// Appends an entry and makes it its slot's newest (the file has room).
    /// The last entry seals the file: its slot table is written into it.
    fn push(&mut self, hash: u64, offset: i64) -> Result<(), StoreError> {
        let bytes = encode_entry(hash, offset, self.slot(hash));
        self.map.overwrite(self.entry_pos(self.count), &bytes)?;
        let block = u64::from(self.count) / CQ_BLOCK_UNITS;
        let range = self.block_range(block, self.count + 1);
        self.sums.extend(block, &self.map.whole()[range])?;
        self.count += 1;
        self.set_slot(hash, self.count)?;
        if self.is_full()
            && let Some(table) = self.live_slots.take()
        {
            self.map
                .overwrite(HEADER_SIZE, table.as_file_bytes(self.slots))?;
        }
        Ok(())
    }

    /// Drops the newest entry, giving its slot back to the entry before it in the slot.
    fn pop(&mut self) -> Result<(), StoreError> {
        let Some(number) = self.count.checked_sub(1) else {
            return Ok(());
        };
        let entry = self.entry(number);
        self.set_slot(entry.hash, entry.previous)?;
        // A block that checked out keeps a checksum of what stays; a damaged one stays so.
        let block = u64::from(number) / CQ_BLOCK_UNITS;
        let intact = self
            .sums
            .get(block)
            .covers(self.block_bytes(block, self.count));
        self.count = number;
        if intact {
            let range = self.block_range(block, number);
            self.sums.seal(block, &self.map.whole()[range])?;
        }
        Ok(())
    }

    /// The entries of `hash`'s slot in this file (any hash), newest first, with their
    /// numbers.
    fn slot_entries(&self, hash: u64) -> impl Iterator<Item = (u32, Entry)> + '_ {
        let mut link = self.slot(hash);
        std::iter::from_fn(move || {
            // A link names an older counted entry; anything else ends the chain.
            if link == NO_ENTRY || link > self.count {
                return None;
            }
            let number = link - 1;
            let entry = self.entry(number);
            link = if entry.previous < link {
                entry.previous
            } else {
                NO_ENTRY
            };
            Some((number, entry))
        })
    }

    /// The offsets of `hash`'s entries in this file at or after CommitLog offset `since`,
    /// newest first. Each entry is used only once its block matched its checksum; a block
    /// that does not ends the chain with [`StoreError::IndexDamaged`] (a damaged entry could
    /// skip entries, name others, or end the chain early).
    ///
    /// A sealed file's slot table (on disk, without a checksum) is checked where a lookup
    /// reads it: the slot must name a counted entry of that slot, or none
    /// ([`StoreError::IndexSlotDamaged`] otherwise).
    fn chain(&self, hash: u64, since: i64) -> impl Iterator<Item = Result<i64, StoreError>> + '_ {
        let slot = self.slot_number(hash);
        let slot_damaged = StoreError::IndexSlotDamaged {
            sequence: self.sequence(),
            slot: slot as u64,
        };
        let sealed = self.live_slots.is_none();
        let mut head_damaged = (sealed && self.slot(hash) > self.count).then_some(slot_damaged);
        let mut entries = self.slot_entries(hash);
        let mut verified = None;
        let mut head_checked = !sealed;
        let mut done = false;
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            if let Some(damage) = head_damaged.take() {
                done = true;
                return Some(Err(damage));
            }
            for (number, entry) in entries.by_ref() {
                let block = u64::from(number) / CQ_BLOCK_UNITS;
                if verified != Some(block) {
                    if !self.block_intact(block) {
                        done = true;
                        return Some(Err(StoreError::IndexDamaged {
                            sequence: self.sequence(),
                            block,
                        }));
                    }
                    verified = Some(block);
                }
                if !head_checked {
                    head_checked = true;
                    if self.slot_number(entry.hash) != slot {
                        done = true;
                        return Some(Err(StoreError::IndexSlotDamaged {
                            sequence: self.sequence(),
                            slot: slot as u64,
                        }));
                    }
                }
                if entry.offset < since {
                    break;
                }
                if entry.hash == hash {
                    return Some(Ok(entry.offset));
                }
            }
            done = true;
            None
        })
    }

    /// The CommitLog offset of the first entry, if its block checks out.
    fn checked_first_offset(&self) -> Option<i64> {
        (self.count > 0 && self.block_intact(0)).then(|| self.entry(0).offset)
    }

    fn sequence(&self) -> u64 {
        self.map.start_offset()
    }

    /// How many blocks the entries fill (the last may be partial).
    fn blocks(&self) -> u64 {
        u64::from(self.count).div_ceil(CQ_BLOCK_UNITS)
    }

    /// Whether block `block`'s entries match its checksum.
    fn block_intact(&self, block: u64) -> bool {
        self.sums
            .get(block)
            .covers(self.block_bytes(block, self.count))
    }

    /// The newest entry of slot `slot`, as number + 1 (0: none), read back from the last
    /// entry; `None` if a block on the way does not match its checksum.
    fn newest_of_slot(&self, slot: usize) -> Option<u32> {
        let mut verified = None;
        for number in (0..self.count).rev() {
            let block = u64::from(number) / CQ_BLOCK_UNITS;
            if verified != Some(block) {
                if !self.block_intact(block) {
                    return None;
                }
                verified = Some(block);
            }
            if self.slot_number(self.entry(number).hash) == slot {
                return Some(number + 1);
            }
        }
        Some(NO_ENTRY)
    }

    /// Block `block` as stored, for entries with these `(hash, offset)` pairs: each links to
    /// the newest earlier entry of its slot, found by reading back from the block's start.
    fn rebuilt_block(&self, block: u64, pairs: &[(u64, i64)]) -> Vec<u8> {
        let first = (block * CQ_BLOCK_UNITS) as u32;
        // Per slot the block uses: its newest entry before the block, once found.
        let mut newest: HashMap<usize, Option<u32>> = pairs
            .iter()
            .map(|(hash, _)| (self.slot_number(*hash), None))
            .collect();
        let mut unresolved = newest.len();
        for number in (0..first).rev() {
            if unresolved == 0 {
                break;
            }
            let slot = self.slot_number(self.entry(number).hash);
            if let Some(link @ None) = newest.get_mut(&slot) {
                *link = Some(number + 1);
                unresolved -= 1;
            }
        }
        let mut bytes = Vec::with_capacity(pairs.len() * INDEX_ENTRY_SIZE);
        for (number, &(hash, offset)) in (first..).zip(pairs) {
            let link = newest
                .get_mut(&self.slot_number(hash))
                .expect("every slot of the block is listed");
            bytes.extend_from_slice(&encode_entry(hash, offset, link.unwrap_or(NO_ENTRY)));
            *link = Some(number + 1);
        }
        bytes
    }

    /// Writes the entry count into the header and hands back what makes the file durable,
    /// if it changed since the last flush.
    fn begin_flush(&mut self) -> Result<Option<FlushTarget>, StoreError> {
        if u32_at(self.whole(), 12) != self.count {
            self.map.overwrite(12, &self.count.to_be_bytes())?;
        }
        Ok(self.map.begin_flush())
    }

    /// What makes the file's checksums durable, if they changed.
    fn begin_flush_sums(&mut self) -> Option<FlushTarget> {
        self.sums.begin_flush()
    }
}

/// The key index.
#[derive(Debug)]
pub struct Index {
    dir: PathBuf,
    entries_per_file: u32,
    /// Oldest first; never empty.
    files: Vec<IndexFile>,
}

impl Index {
    /// Opens (creating if needed) the index under `store_dir`; new files hold
    /// `entries_per_file` entries. Only the first `trusted` entries (the store's checkpoint
    /// counts them: they were synced before it was written) are kept; files that hold later
    /// entries get their slot tables rebuilt from what is kept, and files past it are
    /// deleted. The store re-dispatches the rest from the CommitLog.
    pub fn open(
        store_dir: &Path,
        entries_per_file: u32,
        trusted: u64,
    ) -> Result<Index, StoreError> {
        let dir = store_dir.join(INDEX_DIR);
        mapped_file::create_dir_durable(&dir.join(SUMS_DIR))?;
        let legacy = dir.join(LEGACY_FILE);
        if legacy.exists() {
            warn!(path = %legacy.display(), "removing the index of an earlier version; it is rebuilt");
            fs::remove_file(&legacy).map_err(|e| StoreError::io("remove index", &legacy, e))?;
            mapped_file::sync_dir(&dir)?;
        }
        let mut files: Vec<IndexFile> = Vec::new();
        let mut damaged = None;
        let mut untrusted_files = 0;
        let mut remaining = trusted;
        for (sequence, path) in mapped_file::list_segments(&dir)? {
            if remaining == 0 && !files.is_empty() {
                fs::remove_file(&path)
                    .map_err(|e| StoreError::io("remove index file", &path, e))?;
                let sums = dir.join(SUMS_DIR).join(mapped_file::file_name(sequence));
                if sums.exists() {
                    fs::remove_file(&sums)
                        .map_err(|e| StoreError::io("remove index sums", &sums, e))?;
                }
                untrusted_files += 1;
                continue;
            }
            let (mut file, summed) = match IndexFile::open(path, sequence) {
                // Its creation did not finish (a crash before its header was synced): it
                // holds no entry, and the files before it may lack theirs too.
                Err(StoreError::IndexFile { reason, .. }) if reason == HEADER_NEVER_WRITTEN => {
                    damaged = Some(sequence);
                    break;
                }
                opened => opened?,
            };
            let kept = u32::try_from(remaining).map_or(file.count, |r| r.min(file.count));
            // A file that takes entries again may end in a partial block. Its entries are
            // kept if its checksum covers exactly them; if not, the checksum may be of
            // entries written after the last flush (a crash), or they rotted, and nothing
            // tells which: they are dropped, and the store dispatches their records again.
            let takes_entries = kept < file.capacity;
            let kept = if takes_entries && !file.partial_block_covered(kept) {
                kept - kept % CQ_BLOCK_UNITS as u32
            } else {
                kept
            };
            if !summed {
                warn!(
                    sequence,
                    "index file without checksums (written before they were kept): they are taken from its entries"
                );
                file.seal_from(kept, true)?;
            }
            if !file.whole_blocks_intact(kept) {
                damaged = Some(sequence);
                break;
            }
            // The file still taking entries (not full) is rebuilt even when all of its
            // entries are trusted: slots written after its last flush may name others.
            if u64::from(file.count) > remaining || file.count < file.capacity {
                file.rebuild_slots(kept)?;
            }
            file.seal_from(file.count, false)?;
            if file.live_slots.is_none() && file.repair_slot_table()? {
                warn!(
                    sequence,
                    "index file: its slot table did not match its entries; rewritten"
                );
            }
            // Files after the one that takes entries hold only entries after it: dropped.
            remaining = if takes_entries {
                0
            } else {
                remaining - u64::from(file.count)
            };
            files.push(file);
        }
        if let Some(sequence) = damaged {
            tracing::error!(
                sequence,
                "index file damaged (an entry block does not match its checksum, or its \
                 header was never written): the index is rebuilt from the CommitLog"
            );
            files.drain(..).try_for_each(IndexFile::delete)?;
            remove_all_files(&dir)?;
        }
        if untrusted_files > 0 {
            warn!(
                files = untrusted_files,
                "index: removed files written after the last checkpoint"
            );
            mapped_file::sync_dir(&dir)?;
        }
        if files.is_empty() {
            files.push(IndexFile::create(&dir, 0, entries_per_file)?);
        }
        Ok(Index {
            dir,
            entries_per_file,
            files,
        })
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.files.iter().map(|file| file.count as usize).sum()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn newest(&mut self) -> &mut IndexFile {
        self.files
            .last_mut()
            .expect("the index keeps at least one file")
    }

    /// The CommitLog offset of the newest entry.
    pub fn last_offset(&self) -> Option<i64> {
        self.files.iter().rev().find_map(IndexFile::last_offset)
    }

    /// Maps `key` to the record at `offset`. Re-adding an existing pair is a no-op; a new
    /// pair older than the last entry is an error (entries must stay in offset order).
    pub fn add(&mut self, key: &str, offset: i64) -> Result<(), StoreError> {
        self.add_hashed(key_hash(key), offset)
    }

    /// [`Index::add`] for each `(key hash, offset)` pair, in order. The slots they go to are
    /// read first, in one pass: loads that do not depend on each other, which the CPU
    /// overlaps, where one add after the other waited out each slot's cache miss in turn
    /// (measured under W1: ~350 ns per add, the largest cost of dispatch).
    pub fn add_all(&mut self, pairs: &[(u64, i64)]) -> Result<(), StoreError> {
        let newest = self.newest();
        let touched = pairs
            .iter()
            .fold(0u32, |acc, (hash, _)| acc ^ newest.slot(*hash));
        std::hint::black_box(touched);
        pairs
            .iter()
            .try_for_each(|&(hash, offset)| self.add_hashed(hash, offset))
    }

    fn add_hashed(&mut self, hash: u64, offset: i64) -> Result<(), StoreError> {
        // The common add, a record newer than every entry, reads no chain: only a pair at or
        // before the last offset (a record's second key, a re-dispatch) may be stored.
        if let Some(last) = self.last_offset()
            && offset <= last
        {
            if self.contains(hash, offset)? {
                return Ok(());
            }
            if offset < last {
                return Err(StoreError::IndexOutOfOrder { offset, last });
            }
        }
        if self.newest().is_full() {
            let sequence = self.newest().map.start_offset() + 1;
            let file = IndexFile::create(&self.dir, sequence, self.entries_per_file)?;
            self.files.push(file);
        }
        self.newest().push(hash, offset)
    }

    /// Whether the pair is stored: a search of `hash` from `offset` on, checked as
    /// [`Index::lookup`]'s are. An add decides with it (store the pair or not), so a damaged
    /// block on the way is an error, never a pair skipped or stored twice.
    fn contains(&self, hash: u64, offset: i64) -> Result<bool, StoreError> {
        for found in self.lookup_hash(hash, offset) {
            if found? == offset {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Candidate CommitLog offsets for `key` at or after `since`, newest first (verify them
    /// against the record). A damaged entry block on the way is an
    /// [`StoreError::IndexDamaged`] item, never a missed or made-up candidate: stop there
    /// ([`Index::repair_block`] mends it). Files whose entries all lie below `since` (by the
    /// first entry of the file after them) are not read, so damage there does not matter.
    pub fn lookup(
        &self,
        key: &str,
        since: i64,
    ) -> impl Iterator<Item = Result<i64, StoreError>> + '_ {
        self.lookup_hash(key_hash(key), since)
    }

    /// [`Index::lookup`] of a key's hash.
    fn lookup_hash(
        &self,
        hash: u64,
        since: i64,
    ) -> impl Iterator<Item = Result<i64, StoreError>> + '_ {
        let files = &self.files;
        // A file holds no entry above the next one's first; an unreadable first stops nothing.
        (0..files.len())
            .rev()
            .take_while(move |i| {
                files
                    .get(i + 1)
                    .and_then(IndexFile::checked_first_offset)
                    .is_none_or(|first| first >= since)
            })
            .flat_map(move |i| files[i].chain(hash, since))
    }

    /// Every file as `(sequence, blocks its entries fill)`, oldest first.
    pub fn files(&self) -> Vec<(u64, u64)> {
        self.files
            .iter()
            .map(|file| (file.sequence(), file.blocks()))
            .collect()
    }

    /// Which of `blocks` of file `sequence` do not match their checksums (none if the file
    /// is gone or holds fewer blocks).
    pub fn damaged_blocks(&self, sequence: u64, blocks: std::ops::Range<u64>) -> Vec<u64> {
        self.file(sequence).map_or_else(Vec::new, |file| {
            (blocks.start..blocks.end.min(file.blocks()))
                .filter(|block| !file.block_intact(*block))
                .collect()
        })
    }

    /// Whether block `block` of file `sequence` does not match its checksum.
    pub fn is_damaged(&self, sequence: u64, block: u64) -> bool {
        self.file(sequence)
            .is_some_and(|file| block < file.blocks() && !file.block_intact(block))
    }

    fn file(&self, sequence: u64) -> Option<&IndexFile> {
        self.files.get(self.position(sequence)?)
    }

    fn file_mut(&mut self, sequence: u64) -> Option<&mut IndexFile> {
        let position = self.position(sequence)?;
        self.files.get_mut(position)
    }

    /// The file holding the entry just before block `block` of the file at `position`, and
    /// that entry's number; `None` if the block starts the index.
    fn entry_before(&self, position: usize, block: u64) -> Option<(&IndexFile, u32)> {
        match (block * CQ_BLOCK_UNITS).checked_sub(1) {
            Some(number) => Some((&self.files[position], number as u32)),
            None => {
                let previous = &self.files[position.checked_sub(1)?];
                Some((previous, previous.count.checked_sub(1)?))
            }
        }
    }

    fn position(&self, sequence: u64) -> Option<usize> {
        self.files
            .iter()
            .position(|file| file.sequence() == sequence)
    }

    /// A file whose slot table is on disk (without a checksum) as `(slots, entries)`; `None`
    /// for the file taking entries (its table is in memory) or no such file.
    pub fn slot_table_on_disk(&self, sequence: u64) -> Option<(u32, u32)> {
        let file = self.file(sequence)?;
        file.live_slots
            .is_none()
            .then_some((file.slots, file.count))
    }

    /// Records in `table` (one value per slot) the newest of entries `entries` of file
    /// `sequence` per slot, as number + 1, reading them oldest first; false, and nothing
    /// recorded, if the file no longer has `count` entries with its table on disk or a block
    /// among them does not match its checksum.
    pub fn newest_per_slot(
        &self,
        sequence: u64,
        count: u32,
        entries: std::ops::Range<u32>,
        table: &mut [u32],
    ) -> bool {
        let Some(file) = self.file(sequence) else {
            return false;
        };
        let blocks = u64::from(entries.start) / CQ_BLOCK_UNITS
            ..u64::from(entries.end).div_ceil(CQ_BLOCK_UNITS);
        if file.live_slots.is_some()
            || file.count != count
            || entries.end > count
            || table.len() != file.slots as usize
            || blocks.clone().any(|block| !file.block_intact(block))
        {
            return false;
        }
        for number in entries {
            table[file.slot_number(file.entry(number).hash)] = number + 1;
        }
        true
    }

    /// Which of `slots` of file `sequence`'s table on disk differ from `table`.
    pub fn slots_differing(
        &self,
        sequence: u64,
        table: &[u32],
        slots: std::ops::Range<usize>,
    ) -> Vec<u64> {
        let Some(file) = self.file(sequence).filter(|file| file.live_slots.is_none()) else {
            return Vec::new();
        };
        slots
            .filter(|slot| {
                table.get(*slot).is_some_and(|expected| {
                    u32_at(file.whole(), HEADER_SIZE + slot * SLOT_SIZE) != *expected
                })
            })
            .map(|slot| slot as u64)
            .collect()
    }

    /// The block (as `(sequence, block)`) holding the newest entry, if any.
    pub fn newest_block(&self) -> Option<(u64, u64)> {
        let file = self.files.iter().rev().find(|file| file.count > 0)?;
        Some((file.sequence(), u64::from(file.count - 1) / CQ_BLOCK_UNITS))
    }

    /// The block (as `(sequence, block)`) holding the entry just before block `block` of
    /// file `sequence`, which anchors its rebuild; `None` if it starts the index.
    pub fn block_before(&self, sequence: u64, block: u64) -> Option<(u64, u64)> {
        let (holder, number) = self.entry_before(self.position(sequence)?, block)?;
        Some((holder.sequence(), u64::from(number) / CQ_BLOCK_UNITS))
    }

    /// Where block `block` of file `sequence` comes from; `None` if there is no such block
    /// or the entry before it is itself in a damaged block (repair that one first).
    pub fn block_origin(&self, sequence: u64, block: u64) -> Option<BlockOrigin> {
        let position = self.position(sequence)?;
        let file = &self.files[position];
        if block >= file.blocks() {
            return None;
        }
        let entries = file.block_range(block, file.count).len() / INDEX_ENTRY_SIZE;
        let after = match self.entry_before(position, block) {
            None => None,
            Some((holder, number)) if holder.block_intact(u64::from(number) / CQ_BLOCK_UNITS) => {
                let entry = holder.entry(number);
                Some((entry.hash, entry.offset))
            }
            Some(_) => return None,
        };
        Some(BlockOrigin { entries, after })
    }

    /// Rebuilds block `block` of file `sequence` from `pairs`, the `(key hash, CommitLog
    /// offset)` pairs the CommitLog gives for its entries, in order ([`BlockOrigin`]). The
    /// result is written only if it matches the block's checksum, so a repair restores
    /// exactly what was there or changes nothing.
    pub fn repair_block(
        &mut self,
        sequence: u64,
        block: u64,
        pairs: &[(u64, i64)],
    ) -> Result<BlockRepair, StoreError> {
        let Some(file) = self.file_mut(sequence) else {
            return Ok(BlockRepair::Mismatch);
        };
        let range = file.block_range(block, file.count);
        if block >= file.blocks() || pairs.len() * INDEX_ENTRY_SIZE != range.len() {
            return Ok(BlockRepair::Mismatch);
        }
        let rebuilt = file.rebuilt_block(block, pairs);
        let sum = file.sums.get(block);
        if file.whole()[range.clone()] == *rebuilt {
            if sum.covers(&rebuilt) {
                return Ok(BlockRepair::Intact);
            }
            file.sums.seal(block, &rebuilt)?;
            return Ok(BlockRepair::Resealed);
        }
        if !sum.covers(&rebuilt) {
            return Ok(BlockRepair::Mismatch);
        }
        file.map.overwrite(range.start, &rebuilt)?;
        Ok(BlockRepair::Rewritten)
    }

    /// Rewrites slot `slot` of sealed file `sequence` from the file's entries if it does
    /// not name the slot's newest entry (a file still taking entries keeps its slots in
    /// memory: `Intact`). `Mismatch` if an entry block on the way is damaged: repair that
    /// first.
    pub fn repair_slot(&mut self, sequence: u64, slot: u64) -> Result<BlockRepair, StoreError> {
        let Some(file) = self.file_mut(sequence) else {
            return Ok(BlockRepair::Mismatch);
        };
        let Ok(slot) = usize::try_from(slot) else {
            return Ok(BlockRepair::Mismatch);
        };
        if file.live_slots.is_some() || slot >= file.slots as usize {
            return Ok(BlockRepair::Intact);
        }
        let Some(newest) = file.newest_of_slot(slot) else {
            return Ok(BlockRepair::Mismatch);
        };
        let at = HEADER_SIZE + slot * SLOT_SIZE;
        if u32_at(file.whole(), at) == newest {
            return Ok(BlockRepair::Intact);
        }
        file.map.overwrite(at, &newest.to_be_bytes())?;
        Ok(BlockRepair::Rewritten)
    }

    /// Deletes the oldest files whose entries all point below CommitLog offset
    /// `commit_log_min` (retention deleted those records); the newest file always stays.
    /// They go to `detached`. Returns how many entries went with them.
    pub fn forget_below(&mut self, commit_log_min: u64, detached: &mut Detached) -> u64 {
        let below = self
            .files
            .iter()
            .take(self.files.len() - 1)
            .take_while(|file| {
                file.last_offset()
                    .is_none_or(|last| (last as u64) < commit_log_min)
            })
            .count();
        self.files
            .drain(..below)
            .map(|file| {
                detached.push(file.map);
                detached.push(file.sums.into_file());
                u64::from(file.count)
            })
            .sum()
    }

    /// Drops entries pointing at or beyond CommitLog offset `end`; returns how many. Files
    /// left empty are deleted, except the oldest.
    pub fn truncate(&mut self, end: u64) -> Result<usize, StoreError> {
        let mut dropped = 0;
        loop {
            match self.newest().last_offset() {
                Some(offset) if offset as u64 >= end => {
                    self.newest().pop()?;
                    dropped += 1;
                }
                Some(_) => break,
                None if self.files.len() > 1 => {
                    let empty = self.files.pop().expect("more than one file");
                    empty.delete()?;
                }
                None => break,
            }
        }
        Ok(dropped)
    }

    /// Writes every file's entry count and fsyncs the files.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        let mut targets = Vec::new();
        self.begin_flush(&mut targets)?;
        targets.iter().try_for_each(FlushTarget::sync)
    }

    /// Writes every file's entry count (not yet durably) and adds what makes the files
    /// durable to `targets`.
    pub fn begin_flush(&mut self, targets: &mut Vec<FlushTarget>) -> Result<(), StoreError> {
        for file in &mut self.files {
            targets.extend(file.begin_flush()?);
            targets.extend(file.begin_flush_sums());
        }
        Ok(())
    }
}

/// Deletes every index file and checksum file left in `dir` (a damaged index is rebuilt).
fn remove_all_files(dir: &Path) -> Result<(), StoreError> {
    for dir in [dir.to_path_buf(), dir.join(SUMS_DIR)] {
        for (_, path) in mapped_file::list_segments(&dir)? {
            fs::remove_file(&path).map_err(|e| StoreError::io("remove index file", &path, e))?;
        }
        mapped_file::sync_dir(&dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: u32 = 8;

    /// An index of `n` keys `k{i}` at offsets `10·i` in files of `SMALL` entries, flushed.
    fn flushed(dir: &Path, n: i64) -> Index {
        let mut index = Index::open(dir, SMALL, 0).expect("open");
        for i in 0..n {
            index.add(&format!("k{i}"), i * 10).expect("add");
        }
        index.flush().expect("flush");
        index
    }

    /// Writes `bytes` at `at` of index file `sequence`, in place: an index that has the file
    /// mapped sees them at once.
    fn put(dir: &Path, sequence: u64, at: usize, bytes: &[u8]) {
        use std::os::unix::fs::FileExt;
        let path = dir.join(INDEX_DIR).join(mapped_file::file_name(sequence));
        let file = fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        file.write_all_at(bytes, at as u64).expect("write");
    }

    /// Flips one bit of byte `at` of index file `sequence`.
    fn flip(dir: &Path, sequence: u64, at: usize) {
        let path = dir.join(INDEX_DIR).join(mapped_file::file_name(sequence));
        let byte = fs::read(&path).expect("read")[at];
        put(dir, sequence, at, &[byte ^ 0x02]);
    }

    /// Where entry `number` of a file of `SMALL` entries starts.
    fn entry_at(number: usize) -> usize {
        HEADER_SIZE
            + (SMALL / INDEX_ENTRIES_PER_SLOT) as usize * SLOT_SIZE
            + number * INDEX_ENTRY_SIZE
    }

    /// What a lookup of `key` finds, which must not meet damage.
    fn found(index: &Index, key: &str) -> Vec<i64> {
        index
            .lookup(key, i64::MIN)
            .collect::<Result<_, _>>()
            .expect("no damaged block")
    }

    fn every_key_found(index: &Index, n: i64) {
        for i in 0..n {
            assert_eq!(found(index, &format!("k{i}")), [i * 10], "k{i}");
        }
    }

    #[test]
    fn checksums_follow_adds_truncations_and_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = flushed(dir.path(), 20);
        assert_eq!(index.truncate(150).expect("truncate"), 5);
        for i in 15..21 {
            index.add(&format!("k{i}"), i * 10).expect("add");
        }
        index.flush().expect("flush");
        drop(index);
        let index = Index::open(dir.path(), SMALL, 21).expect("reopen");
        assert_eq!(index.len(), 21, "nothing damaged: nothing dropped");
        every_key_found(&index, 21);
    }

    #[test]
    fn a_flipped_entry_drops_the_whole_index_for_a_rebuild() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(flushed(dir.path(), 20));
        let entries = HEADER_SIZE + (SMALL / INDEX_ENTRIES_PER_SLOT) as usize * SLOT_SIZE;
        // The CommitLog offset of entry 3 of the second file: still in order, still a
        // plausible offset, so nothing but its checksum tells.
        flip(dir.path(), 1, entries + 3 * INDEX_ENTRY_SIZE + 15);
        let index = Index::open(dir.path(), SMALL, 20).expect("reopen");
        assert_eq!(index.len(), 0, "the store re-dispatches the whole index");
        assert_eq!(index.files.len(), 1);
        let left = |dir: PathBuf| mapped_file::list_segments(&dir).expect("list").len();
        assert_eq!(left(dir.path().join(INDEX_DIR)), 1);
        assert_eq!(left(dir.path().join(INDEX_DIR).join(SUMS_DIR)), 1);
    }

    #[test]
    fn a_lookup_fails_at_damage_it_reaches_and_skips_files_below_where_it_starts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let index = flushed(dir.path(), 20);
        // Entry 3 of file 0 (offset 30): the mapping sees it at once.
        put(dir.path(), 0, entry_at(3) + 15, &[0x7f]);

        assert!(matches!(
            index.lookup("k3", 0).collect::<Vec<_>>()[..],
            [Err(StoreError::IndexDamaged {
                sequence: 0,
                block: 0
            })]
        ));
        // File 1 starts at 80: file 0 holds nothing from 100 on and is not read.
        assert_eq!(
            index
                .lookup("k19", 100)
                .collect::<Result<Vec<_>, _>>()
                .expect("no damage read"),
            [190]
        );
        assert_eq!(index.damaged_blocks(0, 0..1), [0]);
    }

    #[test]
    fn a_sealed_slot_naming_another_slots_entry_or_none_counted_fails_lookups_until_rewritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = flushed(dir.path(), 20);
        let file = &index.files[0];
        let slot_of = |i: u32| file.slot_number(key_hash(&format!("k{i}")));
        let (k, other) = (0..SMALL)
            .find_map(|i| Some((i, (0..SMALL).find(|j| slot_of(*j) != slot_of(i))?)))
            .expect("two slots in use");
        let (key, slot) = (format!("k{k}"), slot_of(k));
        let intact = file.slot(key_hash(&key));
        for wrong in [other + 1, SMALL + 1] {
            put(
                dir.path(),
                0,
                HEADER_SIZE + slot * SLOT_SIZE,
                &wrong.to_be_bytes(),
            );
            let found: Vec<_> = index.lookup(&key, 0).collect();
            assert!(
                matches!(
                    found[..],
                    [Err(StoreError::IndexSlotDamaged { sequence: 0, slot: s })] if s == slot as u64
                ),
                "slot -> {wrong}: {found:?}"
            );
            let repair = |index: &mut Index| index.repair_slot(0, slot as u64).expect("repair");
            assert_eq!(repair(&mut index), BlockRepair::Rewritten);
            assert_eq!(index.files[0].slot(key_hash(&key)), intact);
            assert_eq!(repair(&mut index), BlockRepair::Intact);
        }
        every_key_found(&index, 20);
    }

    #[test]
    fn rot_in_the_partial_last_block_is_dropped_at_open_not_taken_as_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(flushed(dir.path(), 20));
        // File 2 holds k16..k19, a partial block; rot in k17's offset.
        flip(dir.path(), 2, entry_at(1) + 15);
        let index = Index::open(dir.path(), SMALL, 20).expect("reopen");
        assert_eq!(
            index.len(),
            16,
            "the block goes, for the store to dispatch again"
        );
        every_key_found(&index, 16);
        assert_eq!(index.lookup("k17", 0).count(), 0);
    }

    #[test]
    fn a_flipped_slot_of_a_sealed_file_is_rewritten_from_its_entries() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(flushed(dir.path(), 20));
        flip(dir.path(), 0, HEADER_SIZE + 3);
        let index = Index::open(dir.path(), SMALL, 20).expect("reopen");
        assert_eq!(index.len(), 20);
        every_key_found(&index, 20);
    }

    #[test]
    fn an_add_that_reads_a_damaged_entry_is_an_error_not_a_pair_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = flushed(dir.path(), 6);
        // The newest entry of "x"'s slot rots into ("x", 50): read unchecked, the add of that
        // pair (a record's second key, at the last offset) would find it stored.
        let hash = key_hash("x");
        let head = index.files[0].slot(hash);
        assert_ne!(
            head, NO_ENTRY,
            "x's slot has an entry among six in two slots"
        );
        put(
            dir.path(),
            0,
            entry_at(head as usize - 1),
            &encode_entry(hash, 50, 0)[..16],
        );

        assert!(matches!(
            index.add("x", 50),
            Err(StoreError::IndexDamaged {
                sequence: 0,
                block: 0
            })
        ));
    }

    #[test]
    fn a_file_whose_header_was_never_written_has_the_index_rebuilt_not_a_failed_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(flushed(dir.path(), 20));
        // A crash between creating file 2 (zeros, synced) and syncing its header.
        put(dir.path(), 2, 0, &[0u8; HEADER_SIZE]);
        let index = Index::open(dir.path(), SMALL, 20).expect("opens");
        assert_eq!(index.len(), 0, "the store re-dispatches the whole index");
    }

    #[test]
    fn fnv1a_is_stable() {
        assert_eq!(key_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(key_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn add_lookup_dedup_and_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = Index::open(dir.path(), SMALL, 0).expect("open");
        index.add("k1", 0).expect("add");
        index.add("k2", 0).expect("add");
        index.add("k1", 100).expect("add");
        index.add("k1", 100).expect("duplicate is a no-op");
        assert_eq!(found(&index, "k1"), [100, 0]);
        assert_eq!(index.lookup("nope", 0).count(), 0);
        assert_eq!(index.len(), 3);
        assert!(matches!(
            index.add("k3", 50),
            Err(StoreError::IndexOutOfOrder { .. })
        ));
    }

    #[test]
    fn re_adding_an_older_stored_pair_is_a_no_op() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = Index::open(dir.path(), SMALL, 0).expect("open");
        for offset in [0, 10, 20, 30] {
            index.add("reused", offset).expect("add");
            index.add(&format!("uniq-{offset}"), offset).expect("add");
        }
        index.add("reused", 10).expect("stored deeper in the chain");
        index
            .add("uniq-20", 20)
            .expect("stored, not the newest of all");
        assert!(matches!(
            index.add("reused", 15),
            Err(StoreError::IndexOutOfOrder { .. })
        ));
        assert_eq!(index.len(), 8);
        assert_eq!(found(&index, "reused"), [30, 20, 10, 0]);
    }

    #[test]
    fn full_files_roll_and_lookups_and_truncation_span_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = Index::open(dir.path(), SMALL, 0).expect("open");
        for i in 0..20 {
            index.add(&format!("k{i}"), i * 10).expect("add");
            index.add("every", i * 10).expect("add");
        }
        assert_eq!(index.len(), 40);
        assert_eq!(index.files.len(), 5, "8 entries per file");
        assert_eq!(found(&index, "k3"), [30]);
        assert_eq!(index.lookup("every", 0).count(), 20);
        index
            .add("k3", 30)
            .expect("a pair in an older file is found");
        assert_eq!(index.len(), 40);
        assert_eq!(index.truncate(55).expect("truncate"), 28);
        assert_eq!(index.files.len(), 2, "emptied files are deleted");
        assert_eq!(found(&index, "every"), [50, 40, 30, 20, 10, 0]);
        assert_eq!(index.lookup("k6", 0).count(), 0);
        index.add("k6", 60).expect("add after truncation");
        assert_eq!(found(&index, "k6"), [60]);
        assert_eq!(index.truncate(0).expect("clear"), 13);
        assert!(index.is_empty());
        assert_eq!(index.files.len(), 1);
    }

    #[test]
    fn reopen_keeps_flushed_entries_and_drops_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = Index::open(dir.path(), SMALL, 0).expect("open");
        for i in 0..10 {
            index.add(&format!("k{i}"), i * 10).expect("add");
        }
        index.flush().expect("flush");
        for i in 10..20 {
            index.add(&format!("k{i}"), i * 10).expect("add");
        }
        index
            .flush()
            .expect("a flush the checkpoint did not follow");
        assert_eq!(index.files.len(), 3);
        drop(index);
        let mut index = Index::open(dir.path(), SMALL, 10).expect("reopen");
        assert_eq!(
            index.len(),
            8,
            "entries the checkpoint does not count are dropped, and so is the partial last \
             block of the file that takes entries again (k8, k9: its checksum is of all 8 of \
             its entries): the store dispatches them again"
        );
        assert_eq!(
            index.files.len(),
            2,
            "the file holding only later entries is gone"
        );
        assert_eq!(index.lookup("k9", 0).count(), 0);
        for i in 0..8 {
            assert_eq!(
                found(&index, &format!("k{i}")),
                [i * 10],
                "the full file's slot table was written into it when it filled"
            );
        }
        assert_eq!(
            index.lookup("k11", 0).count(),
            0,
            "its slot was rebuilt without it"
        );
        for i in 8..12 {
            index
                .add(&format!("k{i}"), i * 10)
                .expect("re-dispatch adds it again");
        }
        every_key_found(&index, 12);
    }

    #[test]
    fn a_damaged_header_is_an_error_and_the_legacy_index_is_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let index_dir = dir.path().join(INDEX_DIR);
        fs::create_dir_all(&index_dir).expect("mkdir");
        fs::write(index_dir.join(LEGACY_FILE), [0u8; 32]).expect("legacy");
        let index = Index::open(dir.path(), SMALL, 0).expect("open");
        assert!(!index_dir.join(LEGACY_FILE).exists());
        let path = index.files[0].map.path().to_owned();
        drop(index);
        let mut bytes = fs::read(&path).expect("read");
        bytes[0] ^= 0xff;
        fs::write(&path, &bytes).expect("damage");
        let error = Index::open(dir.path(), SMALL, 0).expect_err("damaged header");
        assert!(matches!(error, StoreError::IndexFile { .. }), "{error}");
    }
}
