//! `ConsumeQueue`: the per topic/queue index of a queue's messages in the CommitLog, stored
//! as files of fixed 20-byte units under `<dir>/consumequeue/<topic>/<queue_id>/`.
//!
//! Invariants: unit n of a queue is at byte `20·n` of the queue's address space (files are
//! named by their start byte offset, 20 digits); units are written only for CommitLog records
//! already appended, with strictly increasing CommitLog offsets, and without holes between
//! `min_offset` and `max_offset`; an all-zero unit marks the end (a valid unit has size > 0).
//! Each segment's blocks of units have checksums in a file of the same name under `sums/`
//! ([`SegmentSums`]): appends extend them; [`ConsumeQueue::block_intact`] tells a reader
//! whether to trust a block or to check its units against their records.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::store::cq_sums::{self, CQ_BLOCK_UNITS, SUMS_DIR, SegmentSums, UNIT_SUMS};
use crate::store::error::StoreError;
use crate::store::mapped_file::{self, Detached, FlushTarget, Footprint, MappedFile};

/// Bytes per unit: CommitLog offset i64, size i32, tags code i64 (big-endian).
pub const CQ_UNIT_SIZE: usize = 20;
const _: () = assert!(CQ_UNIT_SIZE == 8 + 4 + 8);
/// Sub-directory of the store holding all consume queues.
pub const CONSUME_QUEUE_DIR: &str = "consumequeue";

/// One ConsumeQueue unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CqUnit {
    pub commit_log_offset: i64,
    pub size: i32,
    pub tags_code: i64,
}

/// Where a queue ends: its last unit and that unit's queue offset. A snapshot carries the tail
/// of every queue, so a node that installs it past its own end (its source's retention
/// deleted what lies between) gives a queue none of whose records were shipped the same end
/// as every other replica, instead of starting it over at 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueTail {
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: u64,
    pub unit: CqUnit,
}

impl CqUnit {
    fn encode(&self) -> [u8; CQ_UNIT_SIZE] {
        let mut out = [0u8; CQ_UNIT_SIZE];
        out[..8].copy_from_slice(&self.commit_log_offset.to_be_bytes());
        out[8..12].copy_from_slice(&self.size.to_be_bytes());
        out[12..].copy_from_slice(&self.tags_code.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<CqUnit> {
        let bytes: &[u8; CQ_UNIT_SIZE] = bytes.try_into().ok()?;
        let mut offset = [0u8; 8];
        let mut size = [0u8; 4];
        let mut tags = [0u8; 8];
        offset.copy_from_slice(&bytes[..8]);
        size.copy_from_slice(&bytes[8..12]);
        tags.copy_from_slice(&bytes[12..]);
        Some(CqUnit {
            commit_log_offset: i64::from_be_bytes(offset),
            size: i32::from_be_bytes(size),
            tags_code: i64::from_be_bytes(tags),
        })
    }

    fn is_valid(&self) -> bool {
        self.commit_log_offset >= 0 && self.size > 0
    }
}

/// The directory of one queue.
pub fn queue_dir(store_dir: &Path, topic: &str, queue_id: i32) -> PathBuf {
    store_dir
        .join(CONSUME_QUEUE_DIR)
        .join(topic)
        .join(queue_id.to_string())
}

/// One file of units and the checksums of its blocks.
#[derive(Debug)]
struct Segment {
    units: MappedFile,
    sums: SegmentSums,
}

impl Segment {
    fn delete(self) -> Result<(), StoreError> {
        self.units.delete()?;
        self.sums.into_file().delete()
    }

    fn start_offset(&self) -> u64 {
        self.units.start_offset()
    }

    /// The written units of block `block`, from its start.
    fn block_bytes(&self, block: u64) -> &[u8] {
        &self.units.written()[block_range(block, self.units.write_pos())]
    }

    fn block_intact(&self, block: u64) -> bool {
        self.sums.get(block).covers(self.block_bytes(block))
    }

    /// Takes block `block`'s checksum from its written units as they are.
    fn seal(&mut self, block: u64) -> Result<(), StoreError> {
        let range = block_range(block, self.units.write_pos());
        self.sums.seal(block, &self.units.written()[range])
    }
}

/// Where in a segment the written units of block `block` lie, given the write position.
fn block_range(block: u64, write_pos: usize) -> std::ops::Range<usize> {
    let start = ((block * CQ_BLOCK_UNITS) as usize * CQ_UNIT_SIZE).min(write_pos);
    let end = (start + CQ_BLOCK_UNITS as usize * CQ_UNIT_SIZE).min(write_pos);
    start..end
}

/// One topic/queue ConsumeQueue.
#[derive(Debug)]
pub struct ConsumeQueue {
    topic: String,
    queue_id: i32,
    dir: PathBuf,
    units_per_segment: u64,
    segments: Vec<Segment>,
    min_offset: u64,
}

impl ConsumeQueue {
    /// Opens (creating the directory if needed) and recovers a queue: finds its first unit
    /// and its last valid unit, zeroing anything torn after it.
    pub fn open(
        store_dir: &Path,
        topic: &str,
        queue_id: i32,
        units_per_segment: u64,
    ) -> Result<ConsumeQueue, StoreError> {
        let dir = queue_dir(store_dir, topic, queue_id);
        let sums_dir = dir.join(SUMS_DIR);
        mapped_file::create_dir_durable(&sums_dir)?;
        let segment_bytes = units_per_segment * CQ_UNIT_SIZE as u64;
        let mut segments: Vec<Segment> = Vec::new();
        let mut unsummed = Vec::new();
        for (start, path) in mapped_file::list_segments(&dir)? {
            let expected_start = segments
                .last()
                .map_or(start, |s| s.start_offset() + segment_bytes);
            if start != expected_start || !start.is_multiple_of(segment_bytes) {
                return Err(StoreError::SegmentGap {
                    path,
                    expected_start,
                });
            }
            extend_short_file(&path, segment_bytes)?;
            let units = MappedFile::open(path, start, segment_bytes, Footprint::Grown)?;
            let (sums, found) = SegmentSums::open_or_create(
                &sums_dir,
                start,
                units_per_segment,
                UNIT_SUMS,
                Footprint::Grown,
            )?;
            if !found {
                warn!(
                    topic,
                    queue_id,
                    start,
                    "consume queue file without checksums (written before they were kept): \
                     they are taken from its units"
                );
                unsummed.push(start);
            }
            segments.push(Segment { units, sums });
        }
        let mut queue = ConsumeQueue {
            topic: topic.to_owned(),
            queue_id,
            dir,
            units_per_segment,
            segments,
            min_offset: 0,
        };
        queue.recover()?;
        for start in unsummed {
            queue.seal_segment(start)?;
        }
        Ok(queue)
    }

    /// Takes the checksums of every block of the segment starting at byte `start` (if it is
    /// still held) from its units as they are.
    fn seal_segment(&mut self, start: u64) -> Result<(), StoreError> {
        let first_unit = start / CQ_UNIT_SIZE as u64;
        let blocks = cq_sums::blocks_per_segment(self.units_per_segment);
        for block_start in (0..blocks).map(|block| first_unit + block * CQ_BLOCK_UNITS) {
            if block_start >= self.max_offset() {
                break;
            }
            self.seal_block(block_start)?;
        }
        Ok(())
    }

    fn recover(&mut self) -> Result<(), StoreError> {
        let Some(first) = self.segments.first() else {
            return Ok(());
        };
        let leading_zero_units = first
            .units
            .whole()
            .chunks_exact(CQ_UNIT_SIZE)
            .take_while(|u| u.iter().all(|b| *b == 0))
            .count();
        // An all-zero first segment is an empty queue starting at the segment's start.
        let leading_zero_units = if leading_zero_units as u64 == self.units_per_segment {
            0
        } else {
            leading_zero_units
        };
        let first_start = first.start_offset() / CQ_UNIT_SIZE as u64;
        self.min_offset = first_start + leading_zero_units as u64;
        let mut from = leading_zero_units * CQ_UNIT_SIZE;
        let mut last_offset = -1;
        for index in 0..self.segments.len() {
            let segment = &mut self.segments[index];
            let valid_end = scan_units(&segment.units.whole()[from..], &mut last_offset) + from;
            if valid_end < segment.units.size_bytes() {
                let dropped = segment.units.recover_to(valid_end);
                // The cut block keeps its checksum (checked once re-dispatch wrote it back);
                // those of later blocks named units that are gone.
                let cut_block = (valid_end / CQ_UNIT_SIZE) as u64 / CQ_BLOCK_UNITS;
                segment.sums.clear_from(cut_block + 1)?;
                for later in self.segments.drain(index + 1..) {
                    later.delete()?;
                }
                if dropped > 0 {
                    warn!(
                        topic = %self.topic,
                        queue_id = self.queue_id,
                        bytes_truncated = dropped,
                        "consume queue: truncated torn tail"
                    );
                }
                return Ok(());
            }
            segment.units.set_full();
            from = 0;
        }
        Ok(())
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn queue_id(&self) -> i32 {
        self.queue_id
    }

    /// First queue offset held.
    pub fn min_offset(&self) -> u64 {
        self.min_offset
    }

    /// Queue offset the next unit gets.
    pub fn max_offset(&self) -> u64 {
        self.segments.last().map_or(self.min_offset, |s| {
            (s.start_offset() + s.units.write_pos() as u64) / CQ_UNIT_SIZE as u64
        })
    }

    fn segment_bytes(&self) -> u64 {
        self.units_per_segment * CQ_UNIT_SIZE as u64
    }

    /// Makes an empty queue start at `queue_offset`: its earlier messages are not in this
    /// store (a snapshot installed from a node whose CommitLog no longer starts at 0).
    pub fn start_at(&mut self, queue_offset: u64) -> Result<(), StoreError> {
        assert_eq!(
            self.min_offset,
            self.max_offset(),
            "start_at on a non-empty queue"
        );
        for segment in self.segments.drain(..) {
            segment.delete()?;
        }
        self.min_offset = queue_offset;
        Ok(())
    }

    /// Deletes every unit: the queue is empty at offset 0 until the dispatcher starts it at
    /// its next unit's offset ([`ConsumeQueue::start_at`]).
    pub fn clear(&mut self) -> Result<(), StoreError> {
        while let Some(segment) = self.segments.pop() {
            segment.delete()?;
        }
        self.min_offset = 0;
        Ok(())
    }

    /// Stores the unit at `queue_offset`: appends when it equals `max_offset`; a lower offset
    /// holding an identical unit is an idempotent no-op (re-dispatch during recovery).
    pub fn put(&mut self, queue_offset: u64, unit: CqUnit) -> Result<(), StoreError> {
        let max_offset = self.max_offset();
        if queue_offset > max_offset || queue_offset < self.min_offset {
            return Err(StoreError::ConsumeQueueGap {
                topic: self.topic.clone(),
                queue_id: self.queue_id,
                queue_offset,
                max_offset,
            });
        }
        if queue_offset < max_offset {
            if self.get(queue_offset) == Some(unit) {
                return Ok(());
            }
            return Err(StoreError::ConsumeQueueConflict {
                topic: self.topic.clone(),
                queue_id: self.queue_id,
                queue_offset,
            });
        }
        let segment = self.writable_segment()?;
        let pos = segment.units.append(&unit.encode())? / CQ_UNIT_SIZE;
        let block = pos as u64 / CQ_BLOCK_UNITS;
        let range = block_range(block, segment.units.write_pos());
        segment.sums.extend(block, &segment.units.written()[range])
    }

    fn writable_segment(&mut self) -> Result<&mut Segment, StoreError> {
        let segment_bytes = self.segment_bytes();
        let max_byte = self.max_offset() * CQ_UNIT_SIZE as u64;
        let needs_new = self
            .segments
            .last()
            .is_none_or(|s| s.units.remaining() == 0);
        if needs_new {
            let start = max_byte - max_byte % segment_bytes;
            let sums = SegmentSums::create(
                &self.dir.join(SUMS_DIR),
                start,
                self.units_per_segment,
                UNIT_SUMS,
                Footprint::Grown,
            )?;
            let mut units = MappedFile::create(&self.dir, start, segment_bytes, Footprint::Grown)?;
            units.skip_zeros_to((max_byte - start) as usize);
            self.segments.push(Segment { units, sums });
        }
        let max_offset = self.max_offset();
        self.segments
            .last_mut()
            .ok_or_else(|| StoreError::ConsumeQueueGap {
                topic: self.topic.clone(),
                queue_id: self.queue_id,
                queue_offset: max_offset,
                max_offset,
            })
    }

    /// Rewrites the unit at `queue_offset`, which the queue holds (a repair: the queue's
    /// offsets do not move).
    pub fn overwrite(&mut self, queue_offset: u64, unit: CqUnit) -> Result<(), StoreError> {
        let byte = queue_offset * CQ_UNIT_SIZE as u64;
        let segment_bytes = self.segment_bytes();
        let held = (self.min_offset..self.max_offset()).contains(&queue_offset);
        let first = self.segments.first().map(Segment::start_offset);
        let segment = first
            .filter(|_| held)
            .and_then(|first| usize::try_from((byte - first) / segment_bytes).ok())
            .and_then(|index| self.segments.get_mut(index));
        let Some(segment) = segment else {
            return Err(StoreError::ConsumeQueueGap {
                topic: self.topic.clone(),
                queue_id: self.queue_id,
                queue_offset,
                max_offset: self.max_offset(),
            });
        };
        let pos = (byte - segment.start_offset()) as usize;
        segment.units.overwrite(pos, &unit.encode())
    }

    /// The unit at `queue_offset`, if held.
    pub fn get(&self, queue_offset: u64) -> Option<CqUnit> {
        if queue_offset < self.min_offset {
            return None;
        }
        self.read_unit(queue_offset)
    }

    /// The unit written at `queue_offset`, even if retention forgot it (below `min_offset`)
    /// while its segment is still here.
    fn read_unit(&self, queue_offset: u64) -> Option<CqUnit> {
        if queue_offset >= self.max_offset() {
            return None;
        }
        let byte = queue_offset * CQ_UNIT_SIZE as u64;
        let first = self.segments.first()?.start_offset();
        let segment = self
            .segments
            .get(usize::try_from(byte.checked_sub(first)? / self.segment_bytes()).ok()?)?;
        let pos = (byte - segment.start_offset()) as usize;
        CqUnit::decode(segment.units.read(pos, CQ_UNIT_SIZE)?)
    }

    /// The last unit written, at `max_offset - 1`, even if retention forgot it: a queue whose
    /// records retention deleted still ends with it (see [`ConsumeQueue::forget_below`]).
    fn last_unit(&self) -> Option<(u64, CqUnit)> {
        let last = self.max_offset().checked_sub(1)?;
        let unit = self.read_unit(last)?;
        unit.is_valid().then_some((last, unit))
    }

    /// This queue's [`QueueTail`], if it ever held a unit.
    pub fn tail(&self) -> Option<QueueTail> {
        let (queue_offset, unit) = self.last_unit()?;
        Some(QueueTail {
            topic: self.topic.clone(),
            queue_id: self.queue_id,
            queue_offset,
            unit,
        })
    }

    /// Makes this queue end where `tail` says, as it does on the node the tail came from: an
    /// empty queue behind it starts with the tail's unit (which the store then forgets if it
    /// points below its CommitLog, as retention left it on that node); a queue that ends
    /// there already is left alone; any other end means the replicas diverged.
    pub fn restore_tail(&mut self, tail: &QueueTail) -> Result<(), StoreError> {
        let end = tail.queue_offset + 1;
        let max_offset = self.max_offset();
        if max_offset == end {
            return Ok(());
        }
        if self.min_offset != max_offset || max_offset > end {
            return Err(StoreError::QueueEndMismatch {
                topic: self.topic.clone(),
                queue_id: self.queue_id,
                local: max_offset,
                source_end: end,
            });
        }
        self.start_at(tail.queue_offset)?;
        self.put(tail.queue_offset, tail.unit)
    }

    /// The segment and block holding `queue_offset`, if that unit is written.
    fn locate(&self, queue_offset: u64) -> Option<(usize, u64)> {
        if queue_offset >= self.max_offset() {
            return None;
        }
        let byte = queue_offset * CQ_UNIT_SIZE as u64;
        let first = self.segments.first()?.start_offset();
        let index = usize::try_from(byte.checked_sub(first)? / self.segment_bytes()).ok()?;
        let segment = self.segments.get(index)?;
        let unit_in_segment = (byte - segment.start_offset()) / CQ_UNIT_SIZE as u64;
        Some((index, unit_in_segment / CQ_BLOCK_UNITS))
    }

    /// The queue offsets of the block holding `queue_offset`, up to the last written unit.
    pub fn block_bounds(&self, queue_offset: u64) -> std::ops::Range<u64> {
        let in_segment = queue_offset % self.units_per_segment;
        let start = queue_offset - in_segment % CQ_BLOCK_UNITS;
        let segment_end = queue_offset - in_segment + self.units_per_segment;
        let end = (start + CQ_BLOCK_UNITS)
            .min(segment_end)
            .min(self.max_offset());
        start..end.max(start)
    }

    /// Whether the block holding `queue_offset` matches its checksum (a unit not written is
    /// in no block).
    pub fn block_intact(&self, queue_offset: u64) -> bool {
        self.locate(queue_offset)
            .is_none_or(|(index, block)| self.segments[index].block_intact(block))
    }

    /// Takes the block holding `queue_offset` as it is now: the caller checked its units.
    pub fn seal_block(&mut self, queue_offset: u64) -> Result<(), StoreError> {
        let Some((index, block)) = self.locate(queue_offset) else {
            return Ok(());
        };
        self.segments[index].seal(block)
    }

    /// The first queue offset of every block whose checksum does not match its units (open
    /// checks them all: a segment's units are read to recover it anyway).
    pub fn damaged_blocks(&self) -> Vec<u64> {
        let mut damaged = Vec::new();
        for segment in &self.segments {
            let first_unit = segment.start_offset() / CQ_UNIT_SIZE as u64;
            for block in 0..cq_sums::blocks_per_segment(self.units_per_segment) {
                let start = first_unit + block * CQ_BLOCK_UNITS;
                if start >= self.max_offset() {
                    break;
                }
                if !segment.block_intact(block) {
                    damaged.push(start);
                }
            }
        }
        damaged
    }

    /// Up to `max_units` units from `from` (clamped to `min_offset`).
    pub fn read(&self, from: u64, max_units: usize) -> Vec<CqUnit> {
        self.units(from).take(max_units).collect()
    }

    /// The units from `from` (clamped to `min_offset`) to the end, read as they are taken:
    /// a reader that stops early decodes no more than it took.
    pub fn units(&self, from: u64) -> impl Iterator<Item = CqUnit> + '_ {
        (from.max(self.min_offset)..self.max_offset()).map_while(|q| self.get(q))
    }

    /// Drops units at or after `queue_offset` (clamped to `[min, max]`).
    pub fn truncate_to(&mut self, queue_offset: u64) -> Result<(), StoreError> {
        let target = queue_offset.clamp(self.min_offset, self.max_offset());
        let byte = target * CQ_UNIT_SIZE as u64;
        while let Some(last) = self.segments.last() {
            let start = last.start_offset();
            if start > byte || (start == byte && self.segments.len() > 1) {
                if let Some(segment) = self.segments.pop() {
                    segment.delete()?;
                }
            } else {
                break;
            }
        }
        let Some(last) = self.segments.last_mut() else {
            return Ok(());
        };
        let pos = (byte - last.start_offset()) as usize;
        let block = (pos / CQ_UNIT_SIZE) as u64 / CQ_BLOCK_UNITS;
        // A block that checked out keeps a sum of what stays; a damaged one stays damaged.
        if block >= cq_sums::blocks_per_segment(self.units_per_segment) {
            return Ok(()); // the segment stays full
        }
        let intact = last.block_intact(block);
        last.units.truncate_to(pos);
        if intact {
            last.seal(block)?;
        }
        last.sums.clear_from(block + 1)
    }

    /// Drops units pointing at or beyond CommitLog offset `end`; returns how many.
    pub fn truncate_by_commit_log(&mut self, end: u64) -> Result<u64, StoreError> {
        let max_offset = self.max_offset();
        let first_dropped = self.first_unit_pointing_at_or_after(end);
        self.truncate_to(first_dropped)?;
        Ok(max_offset - first_dropped)
    }

    /// Forgets the units pointing below CommitLog offset `commit_log_min` (retention deleted
    /// the records they name): `min_offset` moves to the first unit still pointing into the
    /// log, and files holding only forgotten units are deleted, except the last one, which
    /// keeps the queue's end; they go to `detached`. Returns how many units were forgotten.
    pub fn forget_below(&mut self, commit_log_min: u64, detached: &mut Detached) -> u64 {
        let new_min = self.first_unit_pointing_at_or_after(commit_log_min);
        let forgotten = new_min - self.min_offset;
        let new_min_byte = new_min * CQ_UNIT_SIZE as u64;
        let below = self
            .segments
            .iter()
            .take(self.segments.len().saturating_sub(1))
            .take_while(|s| s.start_offset() + self.segment_bytes() <= new_min_byte)
            .count();
        self.segments.drain(..below).for_each(|s| {
            detached.push(s.units);
            detached.push(s.sums.into_file());
        });
        self.min_offset = new_min;
        forgotten
    }

    /// The first queue offset whose unit points at or beyond CommitLog offset
    /// `commit_log_offset` (`max_offset` if none does): units point in increasing order.
    fn first_unit_pointing_at_or_after(&self, commit_log_offset: u64) -> u64 {
        let (mut lo, mut hi) = (self.min_offset, self.max_offset());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(mid) {
                Some(unit) if (unit.commit_log_offset as u64) < commit_log_offset => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo
    }

    /// One sweep of the idle-page release over this queue's files (see
    /// [`MappedFile::release_if_idle`]); returns how many gave their pages back now.
    pub fn release_idle_pages(&mut self, idle_sweeps: u32) -> usize {
        self.segments
            .iter_mut()
            .map(|segment| {
                usize::from(segment.units.release_if_idle(idle_sweeps))
                    + usize::from(segment.sums.release_if_idle(idle_sweeps))
            })
            .sum()
    }

    /// Durably flushes changed segments.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        let mut targets = Vec::new();
        self.begin_flush(&mut targets);
        targets.iter().try_for_each(FlushTarget::sync)
    }

    /// Marks every segment clean and adds what makes their writes durable to `targets`.
    pub fn begin_flush(&mut self, targets: &mut Vec<FlushTarget>) {
        for segment in &mut self.segments {
            targets.extend(segment.units.begin_flush());
            targets.extend(segment.sums.begin_flush());
        }
    }
}

/// A queue file shorter than a segment (cut by hand or by a crashed copy) lost its tail
/// units; pad it with zeros (= "no unit") so recovery sees where the queue ends and the
/// missing units are re-dispatched from the CommitLog.
fn extend_short_file(path: &Path, segment_bytes: u64) -> Result<(), StoreError> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| StoreError::io("open consume queue file", path, e))?;
    let len = file
        .metadata()
        .map_err(|e| StoreError::io("stat consume queue file", path, e))?
        .len();
    if len < segment_bytes {
        warn!(path = %path.display(), len, segment_bytes, "consume queue file short, padding with zeros");
        file.set_len(segment_bytes)
            .and_then(|()| file.sync_all())
            .map_err(|e| StoreError::io("pad consume queue file", path, e))?;
    }
    Ok(())
}

/// Length in bytes of the valid units at the start of `bytes`; `last_offset` carries the
/// previous unit's CommitLog offset (offsets must increase).
fn scan_units(bytes: &[u8], last_offset: &mut i64) -> usize {
    let mut valid = 0;
    for chunk in bytes.chunks_exact(CQ_UNIT_SIZE) {
        match CqUnit::decode(chunk) {
            Some(unit) if unit.is_valid() && unit.commit_log_offset > *last_offset => {
                *last_offset = unit.commit_log_offset;
                valid += CQ_UNIT_SIZE;
            }
            _ => break,
        }
    }
    valid
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNITS: u64 = 4;

    fn unit(i: u64) -> CqUnit {
        CqUnit {
            commit_log_offset: (i * 100) as i64,
            size: 100,
            tags_code: i as i64 - 2,
        }
    }

    fn filled(dir: &Path, n: u64) -> ConsumeQueue {
        let mut cq = ConsumeQueue::open(dir, "T", 1, UNITS).expect("open");
        for i in 0..n {
            cq.put(i, unit(i)).expect("put");
        }
        cq
    }

    #[test]
    fn a_queue_holding_one_unit_takes_a_page_of_disk_for_it_and_a_page_for_its_sums() {
        use crate::store::config::CONSUME_QUEUE_UNITS_PER_SEGMENT_DEFAULT;
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let units = CONSUME_QUEUE_UNITS_PER_SEGMENT_DEFAULT;
        let mut cq = ConsumeQueue::open(dir.path(), "T", 1, units).expect("open");
        cq.put(0, unit(0)).expect("put");
        cq.flush().expect("flush");
        let queue_dir = queue_dir(dir.path(), "T", 1);
        let allocated = |path: &Path| std::fs::metadata(path).expect("stat").blocks() * 512;
        let name = mapped_file::file_name(0);
        let file = queue_dir.join(&name);
        let sums = queue_dir.join(SUMS_DIR).join(&name);
        assert_eq!(
            std::fs::metadata(&file).expect("stat").len(),
            units * CQ_UNIT_SIZE as u64,
            "the file spans the whole segment"
        );
        assert_eq!(allocated(&file), mapped_file::GROWN_FIRST_STEP_BYTES as u64);
        assert_eq!(allocated(&sums), mapped_file::GROWN_FIRST_STEP_BYTES as u64);
        drop(cq);
        let reopened = ConsumeQueue::open(dir.path(), "T", 1, units).expect("reopen");
        assert_eq!(reopened.get(0), Some(unit(0)));
        assert_eq!(reopened.max_offset(), 1);
    }

    #[test]
    fn unit_layout_is_20_bytes_big_endian() {
        let u = CqUnit {
            commit_log_offset: 0x0102,
            size: 3,
            tags_code: -1,
        };
        let bytes = u.encode();
        assert_eq!(&bytes[..8], &[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(&bytes[8..12], &[0, 0, 0, 3]);
        assert_eq!(&bytes[12..], &[0xFF; 8]);
        assert_eq!(CqUnit::decode(&bytes), Some(u));
    }

    #[test]
    fn put_get_read_across_segments_and_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cq = filled(dir.path(), 10);
        assert_eq!((cq.min_offset(), cq.max_offset()), (0, 10));
        assert_eq!(cq.get(5), Some(unit(5)));
        assert_eq!(cq.read(3, 4), (3..7).map(unit).collect::<Vec<_>>());
        assert_eq!(cq.read(8, 100).len(), 2);
        cq.flush().expect("flush");
        drop(cq);
        let cq = ConsumeQueue::open(dir.path(), "T", 1, UNITS).expect("reopen");
        assert_eq!((cq.min_offset(), cq.max_offset()), (0, 10));
        assert_eq!(cq.read(0, 100), (0..10).map(unit).collect::<Vec<_>>());
        let files = mapped_file::list_segments(&queue_dir(dir.path(), "T", 1)).expect("list");
        assert_eq!(
            files[1].0,
            UNITS * CQ_UNIT_SIZE as u64,
            "unit n at byte 20n"
        );
    }

    #[test]
    fn put_rules_append_idempotent_gap_conflict() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cq = filled(dir.path(), 3);
        cq.put(1, unit(1))
            .expect("identical re-dispatch is a no-op");
        assert!(matches!(
            cq.put(1, unit(2)),
            Err(StoreError::ConsumeQueueConflict { .. })
        ));
        assert!(matches!(
            cq.put(5, unit(5)),
            Err(StoreError::ConsumeQueueGap { .. })
        ));
        assert_eq!(cq.max_offset(), 3);
    }

    #[test]
    fn truncate_by_commit_log_drops_units_at_or_beyond() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cq = filled(dir.path(), 10);
        assert_eq!(cq.truncate_by_commit_log(450).expect("truncate"), 5);
        assert_eq!(cq.max_offset(), 5);
        assert_eq!(cq.truncate_by_commit_log(400).expect("truncate"), 1);
        assert_eq!(cq.max_offset(), 4);
        cq.put(4, unit(4)).expect("re-append");
        cq.flush().expect("flush");
        drop(cq);
        let cq = ConsumeQueue::open(dir.path(), "T", 1, UNITS).expect("reopen");
        assert_eq!(cq.max_offset(), 5);
    }

    #[test]
    fn torn_unit_is_dropped_on_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cq = filled(dir.path(), 2);
        cq.flush().expect("flush");
        drop(cq);
        let path = queue_dir(dir.path(), "T", 1).join(mapped_file::file_name(0));
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[2 * CQ_UNIT_SIZE + 3] = 9; // half-written unit: offset set, size still 0
        std::fs::write(&path, &bytes).expect("write");
        let cq = ConsumeQueue::open(dir.path(), "T", 1, UNITS).expect("reopen");
        assert_eq!(cq.max_offset(), 2);
        assert_eq!(std::fs::read(&path).expect("read")[2 * CQ_UNIT_SIZE + 3], 0);
    }

    #[test]
    fn empty_queue_can_start_mid_segment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cq = ConsumeQueue::open(dir.path(), "T", 1, UNITS).expect("open");
        cq.start_at(6).expect("start");
        cq.put(6, unit(6)).expect("put");
        cq.put(7, unit(7)).expect("put");
        cq.put(8, unit(8)).expect("put");
        assert_eq!(cq.get(5), None);
        cq.flush().expect("flush");
        drop(cq);
        let cq = ConsumeQueue::open(dir.path(), "T", 1, UNITS).expect("reopen");
        assert_eq!((cq.min_offset(), cq.max_offset()), (6, 9));
        assert_eq!(cq.read(0, 10), (6..9).map(unit).collect::<Vec<_>>());
    }

    /// Flips one bit of byte `at` of the file named by `start` in the queue's directory (or its
    /// `sums/`).
    fn flip(dir: &Path, sums: bool, start: u64, at: usize) {
        let mut path = queue_dir(dir, "T", 1);
        if sums {
            path = path.join(SUMS_DIR);
        }
        let path = path.join(mapped_file::file_name(start));
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[at] ^= 0x04;
        std::fs::write(&path, &bytes).expect("write");
    }

    #[test]
    fn blocks_keep_their_checksums_through_puts_truncations_and_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cq = filled(dir.path(), 10);
        assert!(cq.damaged_blocks().is_empty());
        cq.truncate_to(6).expect("truncate");
        cq.truncate_to(4).expect("truncate at a segment start");
        assert!(cq.damaged_blocks().is_empty());
        for i in 4..9 {
            cq.put(i, unit(i)).expect("put");
        }
        cq.flush().expect("flush");
        drop(cq);
        let cq = ConsumeQueue::open(dir.path(), "T", 1, UNITS).expect("reopen");
        assert_eq!(cq.max_offset(), 9);
        assert!(cq.damaged_blocks().is_empty());
    }

    #[test]
    fn blocks_are_64_units_and_never_cross_a_segment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cq = ConsumeQueue::open(dir.path(), "T", 1, 200).expect("open");
        for i in 0..210 {
            cq.put(i, unit(i)).expect("put");
        }
        assert_eq!(cq.block_bounds(70), 64..128);
        assert_eq!(cq.block_bounds(199), 192..200);
        assert_eq!(cq.block_bounds(205), 200..210);
        assert!(cq.damaged_blocks().is_empty());
        cq.flush().expect("flush");
        drop(cq);
        // Rot in unit 70's tags code: only its block is damaged.
        flip(dir.path(), false, 0, 70 * CQ_UNIT_SIZE + 15);
        let mut cq = ConsumeQueue::open(dir.path(), "T", 1, 200).expect("reopen");
        assert_eq!(
            cq.max_offset(),
            210,
            "a flipped tags code still looks like a unit"
        );
        assert_eq!(cq.damaged_blocks(), vec![64]);
        assert!(!cq.block_intact(127) && cq.block_intact(128) && cq.block_intact(63));
        cq.seal_block(100).expect("seal");
        assert!(cq.damaged_blocks().is_empty());
    }

    #[test]
    fn a_torn_tail_cut_at_open_forgets_the_checksums_of_blocks_after_the_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cq = ConsumeQueue::open(dir.path(), "T", 1, 200).expect("open");
        for i in 0..150 {
            cq.put(i, unit(i)).expect("put");
        }
        cq.flush().expect("flush");
        drop(cq);
        // A power cut: the checksums reached the disk, units 70.. did not.
        let path = queue_dir(dir.path(), "T", 1).join(mapped_file::file_name(0));
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[70 * CQ_UNIT_SIZE..150 * CQ_UNIT_SIZE].fill(0);
        std::fs::write(&path, &bytes).expect("write");
        let mut cq = ConsumeQueue::open(dir.path(), "T", 1, 200).expect("reopen");
        assert_eq!(cq.max_offset(), 70);
        assert_eq!(
            cq.damaged_blocks(),
            vec![64],
            "the cut block: its units decide"
        );
        // Other units take the lost places (the CommitLog lost them too).
        for i in 70..150 {
            cq.put(
                i,
                CqUnit {
                    tags_code: 99,
                    ..unit(i)
                },
            )
            .expect("put");
        }
        assert_eq!(
            cq.damaged_blocks(),
            vec![64],
            "a block after the cut starts afresh"
        );
    }

    #[test]
    fn a_flipped_checksum_damages_its_block_and_truncation_keeps_it_damaged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cq = filled(dir.path(), 7);
        cq.flush().expect("flush");
        drop(cq);
        flip(dir.path(), true, UNITS * CQ_UNIT_SIZE as u64, 6);
        let mut cq = ConsumeQueue::open(dir.path(), "T", 1, UNITS).expect("reopen");
        assert_eq!(cq.damaged_blocks(), vec![4]);
        cq.truncate_to(5).expect("truncate");
        assert_eq!(
            cq.damaged_blocks(),
            vec![4],
            "a damaged block is not resealed by a cut"
        );
        cq.put(5, unit(5)).expect("put");
        cq.put(6, unit(6)).expect("put");
        assert_eq!(cq.damaged_blocks(), vec![4]);
    }

    #[test]
    fn a_queue_file_without_checksums_takes_them_from_its_units() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cq = filled(dir.path(), 6);
        cq.flush().expect("flush");
        drop(cq);
        std::fs::remove_dir_all(queue_dir(dir.path(), "T", 1).join(SUMS_DIR)).expect("rm sums");
        let mut cq = ConsumeQueue::open(dir.path(), "T", 1, UNITS).expect("reopen");
        assert!(cq.damaged_blocks().is_empty());
        cq.put(6, unit(6)).expect("put");
        assert!(cq.damaged_blocks().is_empty());
    }

    #[test]
    fn queue_truncated_to_empty_reopens_at_zero() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cq = filled(dir.path(), 3);
        cq.truncate_to(0).expect("truncate");
        cq.flush().expect("flush");
        drop(cq);
        let cq = ConsumeQueue::open(dir.path(), "T", 1, UNITS).expect("reopen");
        assert_eq!((cq.min_offset(), cq.max_offset()), (0, 0));
    }
}
