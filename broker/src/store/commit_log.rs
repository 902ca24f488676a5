//! `CommitLog`: the append-only sequence of fixed-size mapped segments holding every message
//! record, in `<dir>/commitlog/`, addressed by a global byte offset.
//!
//! Invariants: segments are contiguous (`start(i+1) == start(i) + segment_size`) and each file
//! is named by its start offset; a record never spans two segments; every segment but the last
//! is sealed by a blank filler covering exactly its unused tail (so a record always leaves at
//! least [`END_FILE_MIN_BLANK_LENGTH`] bytes free); bytes past the write position are zero.
//! Recovery scans from the segment holding the checkpoint, validates length, magic and CRC
//! record by record, and truncates (zeroes) everything after the first invalid record.
//! Each segment's 4 KiB blocks carry checksums over every byte ([`CommitLogSegment`]): the
//! blocks recovery scans below the checkpoint's flushed offset must match them, and the ones
//! after it are sealed anew from the bytes it kept.
//!
//! Appends are staged in memory and reach the last segment's file with one `pwrite` per
//! [`CommitLog::write_staged`] (or every [`STAGED_BYTES_MAX`] bytes). Staged records count in
//! `max_offset` but are not readable: the store writes them before any `&self` read can run.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tracing::{info, warn};

use crate::store::commit_log_segment::COMMIT_LOG_BLOCK_BYTES;
use crate::store::commit_log_segment::CommitLogSegment;
use crate::store::cq_sums::SUMS_DIR;
use crate::store::error::StoreError;
use crate::store::mapped_file::{self, Detached, FlushTarget, MappedFile};
use crate::store::record::{
    self, BLANK_MAGIC_CODE, END_FILE_MIN_BLANK_LENGTH, RecordError, RecordView,
};

/// Sub-directory of the store holding the CommitLog segments.
pub const COMMIT_LOG_DIR: &str = "commitlog";
/// Staged bytes at which an append writes them out without waiting for `write_staged`: large
/// enough that a write's fixed cost vanishes, small enough to stay in cache.
pub const STAGED_BYTES_MAX: usize = 1024 * 1024;

/// What recovery found at the end of the CommitLog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitLogRecovery {
    /// Offset after the last valid record (where appends continue).
    pub commit_log_end: u64,
    /// Non-zero bytes dropped after the last valid record (torn tail, garbage, later segments).
    pub bytes_truncated: u64,
}

/// One entry found while walking a segment.
#[derive(Debug)]
pub(crate) enum Entry<'a> {
    /// A valid record (checked in place, body CRC included).
    Message(RecordView<'a>),
    /// A blank filler of this many bytes, ending exactly at the segment's end.
    Blank(usize),
    /// Zero bytes where a record would start: the end of the written data.
    End,
}

impl Entry<'_> {
    /// Bytes the entry takes (none for the end).
    pub(crate) fn size(&self) -> usize {
        match self {
            Entry::Message(view) => view.total_size(),
            Entry::Blank(size) => *size,
            Entry::End => 0,
        }
    }
}

/// Classifies the bytes at the start of `buf`, `remaining` bytes before the segment's end: a
/// record must leave room for a filler after it, a filler must end at the segment's end.
pub(crate) fn probe(buf: &[u8], remaining: usize) -> Result<Entry<'_>, RecordError> {
    let head = buf
        .get(..END_FILE_MIN_BLANK_LENGTH)
        .ok_or(RecordError::Truncated {
            needed: END_FILE_MIN_BLANK_LENGTH,
            available: buf.len(),
        })?;
    if head.iter().all(|b| *b == 0) {
        return Ok(Entry::End);
    }
    let total_size = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let magic = i32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    if magic == BLANK_MAGIC_CODE {
        return match usize::try_from(total_size) {
            Ok(size) if size == remaining => Ok(Entry::Blank(size)),
            _ => Err(RecordError::TotalSize { total_size }),
        };
    }
    let in_segment = &buf[..buf.len().min(remaining)];
    let view = RecordView::parse(in_segment)?;
    if view.total_size() + END_FILE_MIN_BLANK_LENGTH > remaining {
        return Err(RecordError::TotalSize { total_size });
    }
    Ok(Entry::Message(view))
}

/// A segment that takes no more appends (every one but the last), as retention sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedSegment {
    pub start: u64,
    /// Offset after its last byte (the next segment's start).
    pub end: u64,
    /// When its file last changed: when it was sealed, for a segment written in order.
    pub modified: SystemTime,
}

/// The CommitLog block one reader checked last ([`CommitLog::check_blocks`]): consecutive
/// records of a read share blocks, which are then checked once. Only valid while the reader
/// holds the store, which nothing writes meanwhile.
#[derive(Debug, Default)]
pub struct CheckedBlock(std::cell::Cell<Option<u64>>);

/// The CommitLog.
#[derive(Debug)]
pub struct CommitLog {
    dir: PathBuf,
    segment_size_bytes: u64,
    segments: Vec<CommitLogSegment>,
    /// Records appended after the last segment's write position and not yet written to it.
    staged: Vec<u8>,
}

impl CommitLog {
    /// Opens (creating if needed) `<store_dir>/commitlog` and recovers it, scanning from the
    /// start of the segment holding `recover_from` (the checkpoint's flushed offset).
    pub fn open(
        store_dir: &Path,
        segment_size_bytes: u64,
        recover_from: u64,
    ) -> Result<(CommitLog, CommitLogRecovery), StoreError> {
        let dir = store_dir.join(COMMIT_LOG_DIR);
        mapped_file::create_dir_durable(&dir.join(SUMS_DIR))?;
        let mut segments = Vec::new();
        let mut without_sums = Vec::new();
        for (start, path) in mapped_file::list_segments(&dir)? {
            let expected_start = segments.last().map_or(start, |s: &CommitLogSegment| {
                s.start_offset() + segment_size_bytes
            });
            if start != expected_start || !start.is_multiple_of(segment_size_bytes) {
                return Err(StoreError::SegmentGap {
                    path,
                    expected_start,
                });
            }
            let (segment, has_sums) =
                CommitLogSegment::open(&dir, path, start, segment_size_bytes)?;
            if !has_sums {
                without_sums.push(start);
            }
            segments.push(segment);
        }
        remove_orphan_sums(&dir, &segments)?;
        if !without_sums.is_empty() {
            warn!(
                segments = without_sums.len(),
                "commit log segments without block checksums (a data dir from before them): \
                 taking them from the bytes as found"
            );
        }
        let mut log = CommitLog {
            dir,
            segment_size_bytes,
            segments,
            staged: Vec::new(),
        };
        let bytes_truncated = log.recover(recover_from, &without_sums)?;
        let report = CommitLogRecovery {
            commit_log_end: log.max_offset(),
            bytes_truncated,
        };
        if bytes_truncated > 0 {
            warn!(
                bytes_truncated,
                commit_log_end = report.commit_log_end,
                "commit log: cut after the last valid record (a torn last write; damage if the \
                 checkpoint says the cut bytes were flushed)"
            );
        }
        info!(
            min_offset = log.min_offset(),
            max_offset = report.commit_log_end,
            "commit log recovered"
        );
        Ok((log, report))
    }

    /// Scans from the segment holding `recover_from`; returns the garbage bytes dropped.
    ///
    /// Block checksums: the blocks of that segment wholly below `recover_from` were flushed
    /// with their sums, so one that does not match is damage, and the log is cut at the
    /// record it falls in, as at an invalid record (the store then finds it lost flushed
    /// data). From the block holding `recover_from` on, the bytes were checked record by
    /// record and their sums (which may have reached the disk ahead of them, or not at all)
    /// are taken anew. Segments in `without_sums` had none and are sealed as they are.
    fn recover(&mut self, recover_from: u64, without_sums: &[u64]) -> Result<u64, StoreError> {
        let Some(first) = self.segments.first() else {
            return Ok(0);
        };
        let start_index = usize::try_from(
            recover_from.saturating_sub(first.start_offset()) / self.segment_size_bytes,
        )
        .unwrap_or(usize::MAX)
        .min(self.segments.len() - 1);
        for segment in &mut self.segments[..start_index] {
            segment.set_full();
            if without_sums.contains(&segment.start_offset()) {
                segment.seal_from(0)?;
            }
        }
        for index in start_index..self.segments.len() {
            let segment = &mut self.segments[index];
            let has_sums = !without_sums.contains(&segment.start_offset());
            let flushed_in_segment = if index == start_index {
                (recover_from.saturating_sub(segment.start_offset()) as usize)
                    .min(segment.size_bytes())
            } else {
                0
            };
            let valid_end = scan_segment(segment);
            let checked_to = flushed_in_segment.min(valid_end.unwrap_or(usize::MAX));
            let damaged = has_sums
                .then(|| segment.first_damaged(0, checked_to))
                .flatten();
            let cut = match (damaged, valid_end) {
                (Some(block), _) => {
                    let at = record_start_at_or_before(segment, block);
                    warn!(
                        path = %segment.path().display(),
                        block_position = block,
                        cut_at = at,
                        "commit log: a flushed block does not match its checksum, truncating at its record"
                    );
                    Some(at)
                }
                (None, end) => end,
            };
            let reseal_from = if has_sums { flushed_in_segment } else { 0 };
            match cut {
                None => {
                    segment.set_full();
                    segment.seal_from(reseal_from)?;
                }
                Some(valid_end) => {
                    let mut dropped = segment.recover_to(valid_end)? as u64;
                    segment.seal_from(reseal_from.min(valid_end))?;
                    for later in self.segments.drain(index + 1..) {
                        dropped += later.nonzero_span_after(0) as u64;
                        warn!(path = %later.path().display(), "deleting segment after torn tail");
                        later.delete()?;
                    }
                    return Ok(dropped);
                }
            }
        }
        Ok(0)
    }

    /// The segments before the last, oldest first.
    pub fn sealed_segments(&self) -> Result<Vec<SealedSegment>, StoreError> {
        let sealed = self.segments.len().saturating_sub(1);
        self.segments[..sealed]
            .iter()
            .map(|segment| {
                Ok(SealedSegment {
                    start: segment.start_offset(),
                    end: segment.start_offset() + self.segment_size_bytes,
                    modified: segment.modified()?,
                })
            })
            .collect()
    }

    /// Takes the `count` oldest segments out of the log into `detached` (retention); the last
    /// one always stays, so the log keeps its end. Returns the new `min_offset`.
    pub fn detach_oldest(&mut self, count: usize, detached: &mut Detached) -> u64 {
        let count = count.min(self.segments.len().saturating_sub(1));
        self.segments
            .drain(..count)
            .for_each(|segment| segment.detach(detached));
        self.min_offset()
    }

    /// Deletes every segment: the log is empty and takes its next start from
    /// [`CommitLog::append_raw`].
    pub fn clear(&mut self) -> Result<(), StoreError> {
        self.staged.clear();
        while let Some(segment) = self.segments.pop() {
            segment.delete()?;
        }
        Ok(())
    }

    /// Segment size in bytes.
    pub fn segment_size_bytes(&self) -> u64 {
        self.segment_size_bytes
    }

    /// First offset held (0 for an empty log).
    pub fn min_offset(&self) -> u64 {
        self.segments.first().map_or(0, |s| s.start_offset())
    }

    /// Offset where the next record goes (before any roll), staged records included.
    pub fn max_offset(&self) -> u64 {
        self.written_end() + self.staged.len() as u64
    }

    /// Offset after the last byte written to a segment file.
    fn written_end(&self) -> u64 {
        self.segments
            .last()
            .map_or(0, |s| s.start_offset() + s.write_pos() as u64)
    }

    /// Stages one encoded record with its QUEUEOFFSET and PHYSICALOFFSET written into the
    /// staged copy (the caller's bytes are not changed); seals the current segment with a
    /// blank filler and rolls first if the record does not fit. Returns its offset. The
    /// record is readable once [`CommitLog::write_staged`] has written it.
    pub fn append(&mut self, record: &[u8], queue_offset: i64) -> Result<u64, StoreError> {
        let len = record.len();
        if (len + END_FILE_MIN_BLANK_LENGTH) as u64 > self.segment_size_bytes {
            return Err(StoreError::RecordTooLargeForSegment {
                size_bytes: len,
                segment_size_bytes: self.segment_size_bytes,
            });
        }
        self.make_room(len)?;
        let offset = self.max_offset();
        let start = self.staged.len();
        self.staged.extend_from_slice(record);
        if let Err(source) =
            record::patch_offsets(&mut self.staged[start..], queue_offset, offset as i64)
        {
            self.staged.truncate(start);
            return Err(StoreError::Corrupt { offset, source });
        }
        if self.staged.len() >= STAGED_BYTES_MAX {
            self.write_staged()?;
        }
        Ok(offset)
    }

    /// Writes the staged records to the last segment with one write. On failure they are
    /// dropped: the log ends where its file data ends.
    pub fn write_staged(&mut self) -> Result<(), StoreError> {
        if self.staged.is_empty() {
            return Ok(());
        }
        let mut staged = std::mem::take(&mut self.staged);
        let result = self.last_segment()?.write_append(&staged).map(drop);
        staged.clear();
        self.staged = staged;
        result
    }

    fn last_segment(&mut self) -> Result<&mut CommitLogSegment, StoreError> {
        if self.segments.is_empty() {
            self.roll(0)?;
        }
        let offset = self.max_offset();
        self.segments
            .last_mut()
            .ok_or(StoreError::OffsetOutOfRange {
                offset: offset as i64,
                min: offset,
                max: offset,
            })
    }

    /// Ensures the last segment has room for `len` bytes plus a future blank filler, after
    /// the staged records (written out first if it must roll).
    fn make_room(&mut self, len: usize) -> Result<(), StoreError> {
        let staged = self.staged.len();
        if len + END_FILE_MIN_BLANK_LENGTH + staged <= self.last_segment()?.remaining() {
            return Ok(());
        }
        self.write_staged()?;
        let segment = self.last_segment()?;
        let remaining = segment.remaining();
        if remaining > 0 {
            segment.write_append(&record::blank_filler(remaining))?;
            let pos = segment.write_pos() + remaining - END_FILE_MIN_BLANK_LENGTH;
            segment.skip_zeros_to(pos)?;
        }
        let next = segment.start_offset() + self.segment_size_bytes;
        self.roll(next)
    }

    fn roll(&mut self, start_offset: u64) -> Result<(), StoreError> {
        let segment = CommitLogSegment::create(&self.dir, start_offset, self.segment_size_bytes)?;
        self.segments.push(segment);
        Ok(())
    }

    fn segment_index(&self, offset: u64) -> Option<usize> {
        let first = self.segments.first()?.start_offset();
        let index = usize::try_from(offset.checked_sub(first)? / self.segment_size_bytes).ok()?;
        (index < self.segments.len()).then_some(index)
    }

    fn out_of_range(&self, offset: u64) -> StoreError {
        StoreError::OffsetOutOfRange {
            offset: offset as i64,
            min: self.min_offset(),
            max: self.max_offset(),
        }
    }

    /// `len` bytes at `offset`, within one segment and below the write position.
    pub fn read(&self, offset: u64, len: usize) -> Result<&[u8], StoreError> {
        debug_assert!(self.staged.is_empty(), "read with staged records");
        self.segment_index(offset)
            .and_then(|i| {
                let segment = &self.segments[i];
                segment.read((offset - segment.start_offset()) as usize, len)
            })
            .ok_or_else(|| self.out_of_range(offset))
    }

    /// Writes `bytes` over written bytes at `offset`, within one segment (a repair: the end
    /// does not move).
    pub fn overwrite(&mut self, offset: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.write_staged()?;
        let index = self
            .segment_index(offset)
            .ok_or_else(|| self.out_of_range(offset))?;
        let segment = &mut self.segments[index];
        let pos = (offset - segment.start_offset()) as usize;
        segment.overwrite(pos, bytes)
    }

    /// The first block wholly in `[from, to)` (and below the end) whose bytes do not match its
    /// checksum, as its offset.
    pub fn damaged_block(&self, from: u64, to: u64) -> Option<u64> {
        let mut pos = from.max(self.min_offset());
        let to = to.min(self.written_end());
        while pos < to {
            let segment = &self.segments[self.segment_index(pos)?];
            let start = segment.start_offset();
            let rel_to = ((to - start) as usize).min(segment.write_pos());
            if let Some(block) = segment.first_damaged((pos - start) as usize, rel_to) {
                return Some(start + block as u64);
            }
            pos = start + self.segment_size_bytes;
        }
        None
    }

    /// Checks that every block holding a byte of `[offset, offset + len)` (one segment's)
    /// matches its checksum, the written part of a last, partial block included: a read
    /// serves no byte its checksum does not cover. The block `checked` names was checked by
    /// the same reader already and is skipped; the last block checked is left in it.
    pub fn check_blocks(
        &self,
        offset: u64,
        len: usize,
        checked: &CheckedBlock,
    ) -> Result<(), StoreError> {
        let segment = self
            .segment_index(offset)
            .map(|i| &self.segments[i])
            .ok_or_else(|| self.out_of_range(offset))?;
        // Blocks count from the segment's start, which a segment size that is no multiple of
        // the block size leaves unaligned.
        let start = segment.start_offset();
        let from = (offset - start) as usize;
        let mut pos = from / COMMIT_LOG_BLOCK_BYTES * COMMIT_LOG_BLOCK_BYTES;
        while pos < from + len {
            let block = start + pos as u64;
            if checked.0.get() != Some(block) {
                if !segment.block_intact_at(pos) {
                    return Err(StoreError::DamagedBlock { offset: block });
                }
                checked.0.set(Some(block));
            }
            pos += COMMIT_LOG_BLOCK_BYTES;
        }
        Ok(())
    }

    /// The written bytes of the block holding `offset`, and the block's offset.
    pub fn block_at(&self, offset: u64) -> Result<(u64, &[u8]), StoreError> {
        debug_assert!(self.staged.is_empty(), "read with staged records");
        let segment = self
            .segment_index(offset)
            .map(|i| &self.segments[i])
            .ok_or_else(|| self.out_of_range(offset))?;
        let (pos, bytes) = segment.block_at((offset - segment.start_offset()) as usize);
        Ok((segment.start_offset() + pos as u64, bytes))
    }

    /// Whether `bytes` are what the checksum of the block at `offset` covers.
    pub fn block_matches(&self, offset: u64, bytes: &[u8]) -> bool {
        self.segment_index(offset).is_some_and(|i| {
            let segment = &self.segments[i];
            segment.block_matches((offset - segment.start_offset()) as usize, bytes)
        })
    }

    /// Takes the checksum of the block holding `offset` anew from its bytes.
    pub fn reseal_block(&mut self, offset: u64) -> Result<(), StoreError> {
        let index = self
            .segment_index(offset)
            .ok_or_else(|| self.out_of_range(offset))?;
        let segment = &mut self.segments[index];
        let pos = (offset - segment.start_offset()) as usize;
        segment.reseal_block(pos)
    }

    /// Up to `max_len` raw bytes from `offset` (crossing segments), for shipping to another
    /// node. `offset` must be in `[min_offset, max_offset]`.
    pub fn read_bytes(&self, offset: u64, max_len: usize) -> Result<Vec<u8>, StoreError> {
        debug_assert!(self.staged.is_empty(), "read with staged records");
        if offset < self.min_offset() || offset > self.max_offset() {
            return Err(self.out_of_range(offset));
        }
        let end = self.max_offset().min(offset.saturating_add(max_len as u64));
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut pos = offset;
        while pos < end {
            let segment = self
                .segment_index(pos)
                .map(|i| &self.segments[i])
                .ok_or_else(|| self.out_of_range(pos))?;
            let rel = (pos - segment.start_offset()) as usize;
            let take = (segment.write_pos() - rel).min((end - pos) as usize);
            out.extend_from_slice(&segment.written()[rel..rel + take]);
            pos += take as u64;
        }
        Ok(out)
    }

    /// Writes shipped raw bytes (whole records and blank fillers laid out for this segment
    /// size) at exactly the current end. An empty log accepts any segment-aligned offset.
    pub fn append_raw(&mut self, offset: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.write_staged()?;
        let aligned_start =
            self.segments.is_empty() && offset.is_multiple_of(self.segment_size_bytes);
        if offset != self.max_offset() && !aligned_start {
            return Err(StoreError::RawAppendOffset {
                offset,
                expected: self.max_offset(),
            });
        }
        validate_layout(offset, bytes, self.segment_size_bytes)?;
        let mut written = 0;
        while written < bytes.len() {
            let pos = offset + written as u64;
            match self.segments.last() {
                Some(s) if s.remaining() > 0 => {}
                _ => self.roll(pos)?,
            }
            let segment = self.last_segment()?;
            let take = segment.remaining().min(bytes.len() - written);
            segment.write_append(&bytes[written..written + take])?;
            written += take;
        }
        Ok(())
    }

    /// Drops everything at or after `offset` (a record boundary in `[min, max]`): deletes
    /// later segments and zeroes the tail of the segment holding `offset`.
    pub fn truncate_to(&mut self, offset: u64) -> Result<(), StoreError> {
        self.write_staged()?;
        if offset > self.max_offset() || offset < self.min_offset() {
            return Err(self.out_of_range(offset));
        }
        while let Some(last) = self.segments.last() {
            let start = last.start_offset();
            if start > offset || (start == offset && self.segments.len() > 1) {
                if let Some(segment) = self.segments.pop() {
                    segment.delete()?;
                }
            } else {
                break;
            }
        }
        if let Some(last) = self.segments.last_mut() {
            let rel = (offset - last.start_offset()) as usize;
            last.truncate_to(rel)?;
        }
        Ok(())
    }

    /// Durably flushes every segment with unflushed changes.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.write_staged()?;
        self.segments
            .iter_mut()
            .try_for_each(CommitLogSegment::flush)
    }

    /// Writes the staged records, marks every segment clean and adds what makes their writes
    /// durable to `targets`.
    pub fn begin_flush(&mut self, targets: &mut Vec<FlushTarget>) -> Result<(), StoreError> {
        self.write_staged()?;
        targets.extend(
            self.segments
                .iter_mut()
                .flat_map(CommitLogSegment::begin_flush),
        );
        Ok(())
    }

    /// Calls `f(offset, record)` for every message record from `offset` (a record boundary)
    /// to the end, skipping blank fillers, until `f` breaks or fails.
    pub fn for_each_record_from<F>(&self, offset: u64, mut f: F) -> Result<(), StoreError>
    where
        F: FnMut(u64, RecordView<'_>) -> Result<ControlFlow<()>, StoreError>,
    {
        debug_assert!(self.staged.is_empty(), "read with staged records");
        if offset < self.min_offset() || offset > self.max_offset() {
            return Err(self.out_of_range(offset));
        }
        let mut pos = offset;
        while pos < self.max_offset() {
            let segment = self
                .segment_index(pos)
                .map(|i| &self.segments[i])
                .ok_or_else(|| self.out_of_range(pos))?;
            let rel = (pos - segment.start_offset()) as usize;
            let corrupt = |source| StoreError::Corrupt {
                offset: pos,
                source,
            };
            let data = &segment.written()[rel..];
            match probe(data, segment.size_bytes() - rel).map_err(corrupt)? {
                Entry::Message(view) => {
                    let len = view.total_size();
                    if f(pos, view)?.is_break() {
                        return Ok(());
                    }
                    pos += len as u64;
                }
                Entry::Blank(len) => pos += len as u64,
                Entry::End => {
                    return Err(corrupt(RecordError::TotalSize { total_size: 0 }));
                }
            }
        }
        Ok(())
    }
}

/// Where the record or filler holding segment position `pos` starts (the segment's records
/// are valid up to there).
fn record_start_at_or_before(segment: &MappedFile, pos: usize) -> usize {
    let data = segment.whole();
    let mut at = 0;
    while at < pos {
        match probe(&data[at..], data.len() - at) {
            Ok(entry @ (Entry::Message(_) | Entry::Blank(_))) if at + entry.size() <= pos => {
                at += entry.size();
            }
            _ => break,
        }
    }
    at
}

/// Scans one segment; `None` if it is sealed by a blank filler, else the valid end position.
fn scan_segment(segment: &MappedFile) -> Option<usize> {
    let data = segment.whole();
    let mut pos = 0;
    while pos < data.len() {
        match probe(&data[pos..], data.len() - pos) {
            Ok(Entry::Message(view)) => pos += view.total_size(),
            Ok(Entry::Blank(_)) => return None,
            Ok(Entry::End) => return Some(pos),
            Err(error) => {
                warn!(
                    path = %segment.path().display(),
                    position = pos,
                    %error,
                    "commit log: invalid record, truncating here"
                );
                return Some(pos);
            }
        }
    }
    Some(pos)
}

/// Deletes the sums of segments that are gone (a crash between deleting a segment and its
/// sums).
fn remove_orphan_sums(dir: &Path, segments: &[CommitLogSegment]) -> Result<(), StoreError> {
    for (start, path) in mapped_file::list_segments(&dir.join(SUMS_DIR))? {
        if segments
            .iter()
            .all(|segment| segment.start_offset() != start)
        {
            warn!(path = %path.display(), "removing the checksums of a deleted segment");
            std::fs::remove_file(&path)
                .map_err(|error| StoreError::io("remove commit log sums", &path, error))?;
        }
    }
    Ok(())
}

/// Checks that `bytes`, placed at `offset`, are whole records and blank fillers that match
/// the segment layout, before any of them is written.
fn validate_layout(offset: u64, bytes: &[u8], segment_size_bytes: u64) -> Result<(), StoreError> {
    let whole = whole_entries_len(offset, bytes, segment_size_bytes)?;
    if whole < bytes.len() {
        return Err(StoreError::RawLayout {
            offset: offset + whole as u64,
            reason: "last record or filler is cut off",
        });
    }
    Ok(())
}

/// How many leading bytes of `bytes`, placed at `offset`, are whole records and blank fillers
/// that match the segment layout: shipped bytes cut anywhere stop before the cut entry.
pub fn whole_entries_len(
    offset: u64,
    bytes: &[u8],
    segment_size_bytes: u64,
) -> Result<usize, StoreError> {
    let mut pos = 0;
    while pos < bytes.len() {
        let at = offset + pos as u64;
        let remaining = (segment_size_bytes - at % segment_size_bytes) as usize;
        let len = match probe(&bytes[pos..], remaining) {
            Ok(entry @ (Entry::Message(_) | Entry::Blank(_))) => entry.size(),
            Ok(Entry::End) => {
                return Err(StoreError::RawLayout {
                    offset: at,
                    reason: "zero bytes where a record should start",
                });
            }
            // Too few bytes to tell: the entry is cut off.
            Err(RecordError::Truncated { .. }) => return Ok(pos),
            Err(source) => return Err(StoreError::Corrupt { offset: at, source }),
        };
        if pos + len > bytes.len() {
            return Ok(pos);
        }
        pos += len;
    }
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::tests::sample;
    use crate::store::record::{DecodedRecord, decode};
    use std::fs::OpenOptions;
    use std::io::{Seek, SeekFrom, Write};

    const SEGMENT: u64 = 4096;

    fn encoded(i: usize) -> Vec<u8> {
        sample(
            "TopicTest",
            0,
            format!("body-{i:04}-{}", "x".repeat(300)).as_bytes(),
        )
        .encode()
        .expect("encode")
    }

    fn fill(log: &mut CommitLog, n: usize) -> Vec<u64> {
        let offsets = (0..n)
            .map(|i| log.append(&encoded(i), 0).expect("append"))
            .collect();
        log.write_staged().expect("write staged");
        offsets
    }

    #[test]
    fn blank_filler_and_segment_roll() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), SEGMENT, 0).expect("open");
        let len = encoded(0).len() as u64;
        let per_segment = (SEGMENT - END_FILE_MIN_BLANK_LENGTH as u64) / len;
        let offsets = fill(&mut log, per_segment as usize + 1);
        assert_eq!(offsets[1], len);
        assert_eq!(
            *offsets.last().expect("last"),
            SEGMENT,
            "rolled to segment 2"
        );
        let filler_at = per_segment * len;
        let filler = log.read_bytes(filler_at, SEGMENT as usize).expect("read");
        let expected = (SEGMENT - filler_at) as usize;
        assert_eq!(
            decode(&filler).expect("decode"),
            DecodedRecord::Blank {
                size_bytes: expected
            }
        );
        let mut seen = Vec::new();
        log.for_each_record_from(0, |offset, view| {
            assert_eq!(view.physical_offset() as u64, offset);
            seen.push(offset);
            Ok(ControlFlow::Continue(()))
        })
        .expect("walk");
        assert_eq!(seen, offsets);
    }

    #[test]
    fn appends_reach_the_file_when_written_or_when_the_stage_is_full() {
        let dir = tempfile::tempdir().expect("tempdir");
        let segment = 4 * STAGED_BYTES_MAX as u64;
        let (mut log, _) = CommitLog::open(dir.path(), segment, 0).expect("open");
        let path = log.dir.join(mapped_file::file_name(0));
        let on_disk = |at: u64, len: usize| {
            let bytes = std::fs::read(&path).expect("read file");
            bytes[at as usize..at as usize + len].to_vec()
        };
        let len = encoded(0).len();
        assert_eq!(log.append(&encoded(0), 7).expect("append"), 0);
        assert_eq!(log.max_offset(), len as u64, "staged records count");
        assert!(on_disk(0, len).iter().all(|b| *b == 0), "not written yet");
        log.write_staged().expect("write staged");
        let view = RecordView::parse(log.read(0, len).expect("read")).expect("parse");
        assert_eq!((view.queue_offset(), view.physical_offset()), (7, 0));
        assert_eq!(on_disk(0, len), log.read(0, len).expect("read"));

        let mut last = 0;
        for _ in 0..STAGED_BYTES_MAX.div_ceil(len) {
            last = log.append(&encoded(1), 0).expect("append");
        }
        assert!(log.staged.is_empty());
        assert!(
            on_disk(last, len).iter().any(|b| *b != 0),
            "a full stage is written without being asked"
        );
    }

    #[test]
    fn record_larger_than_segment_is_a_typed_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), SEGMENT, 0).expect("open");
        let big = sample("T", 0, &[0u8; SEGMENT as usize])
            .encode()
            .expect("encode");
        assert!(matches!(
            log.append(&big, 0),
            Err(StoreError::RecordTooLargeForSegment { .. })
        ));
        assert_eq!(log.max_offset(), 0);
    }

    #[test]
    fn torn_tail_is_truncated_on_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), SEGMENT, 0).expect("open");
        let offsets = fill(&mut log, 5);
        let end = log.max_offset();
        log.flush().expect("flush");
        drop(log);
        let path = dir
            .path()
            .join(COMMIT_LOG_DIR)
            .join(mapped_file::file_name(0));
        let mut file = OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open file");
        file.seek(SeekFrom::Start(end)).expect("seek");
        let half = encoded(99);
        file.write_all(&half[..half.len() / 2]).expect("write");
        file.write_all(b"garbage").expect("write");
        drop(file);

        let (mut log, report) = CommitLog::open(dir.path(), SEGMENT, 0).expect("reopen");
        assert_eq!(report.commit_log_end, end);
        assert_eq!(report.bytes_truncated, (half.len() / 2 + 7) as u64);
        let next = log.append(&encoded(5), 0).expect("append");
        assert_eq!(next, end);
        log.write_staged().expect("write staged");
        let mut count = 0;
        log.for_each_record_from(0, |_, _| {
            count += 1;
            Ok(ControlFlow::Continue(()))
        })
        .expect("walk");
        assert_eq!(count, offsets.len() + 1);
    }

    #[test]
    fn corrupt_crc_in_the_middle_truncates_there() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), SEGMENT, 0).expect("open");
        let offsets = fill(&mut log, 12);
        log.flush().expect("flush");
        drop(log);
        // Flip a body byte of record 3 (in segment 0); records 4.. and segment 1 are dropped.
        let path = dir
            .path()
            .join(COMMIT_LOG_DIR)
            .join(mapped_file::file_name(0));
        let mut file = OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open file");
        file.seek(SeekFrom::Start(offsets[3] + 100)).expect("seek");
        file.write_all(b"#").expect("write");
        drop(file);
        let (log, report) = CommitLog::open(dir.path(), SEGMENT, 0).expect("reopen");
        assert_eq!(report.commit_log_end, offsets[3]);
        assert!(report.bytes_truncated > 0);
        assert_eq!(log.max_offset(), offsets[3]);
        assert_eq!(mapped_file::list_segments(&log.dir).expect("list").len(), 1);
    }

    #[test]
    fn recovery_from_checkpoint_segment_keeps_earlier_segments_sealed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), SEGMENT, 0).expect("open");
        fill(&mut log, 30);
        let end = log.max_offset();
        log.flush().expect("flush");
        drop(log);
        let (log, report) = CommitLog::open(dir.path(), SEGMENT, end).expect("reopen");
        assert_eq!(
            report,
            CommitLogRecovery {
                commit_log_end: end,
                bytes_truncated: 0
            }
        );
        assert_eq!(log.min_offset(), 0);
    }

    #[test]
    fn truncate_then_reappend_is_byte_identical() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), SEGMENT, 0).expect("open");
        let offsets = fill(&mut log, 20);
        let before = log.read_bytes(0, usize::MAX).expect("read");
        log.truncate_to(offsets[7]).expect("truncate");
        assert_eq!(log.max_offset(), offsets[7]);
        for i in 7..20 {
            log.append(&encoded(i), 0).expect("append");
        }
        log.write_staged().expect("write staged");
        assert_eq!(log.read_bytes(0, usize::MAX).expect("read"), before);
        assert!(matches!(
            log.truncate_to(log.max_offset() + 1),
            Err(StoreError::OffsetOutOfRange { .. })
        ));
        log.truncate_to(0).expect("truncate all");
        assert_eq!((log.min_offset(), log.max_offset()), (0, 0));
    }

    #[test]
    fn append_raw_copies_a_log_byte_for_byte() {
        let src_dir = tempfile::tempdir().expect("tempdir");
        let dst_dir = tempfile::tempdir().expect("tempdir");
        let (mut src, _) = CommitLog::open(src_dir.path(), SEGMENT, 0).expect("open");
        fill(&mut src, 25);
        let (mut dst, _) = CommitLog::open(dst_dir.path(), SEGMENT, 0).expect("open");
        let mut offset = 0;
        while offset < src.max_offset() {
            let chunk = src.read_bytes(offset, 5000).expect("read");
            // Ship whole records only: cut the chunk at the last record boundary.
            let mut cut = 0;
            while cut < chunk.len() {
                let at = offset + cut as u64;
                let remaining = (SEGMENT - at % SEGMENT) as usize;
                match probe(&chunk[cut..], remaining) {
                    Ok(entry @ (Entry::Message(_) | Entry::Blank(_)))
                        if cut + entry.size() <= chunk.len() =>
                    {
                        cut += entry.size()
                    }
                    _ => break,
                }
            }
            dst.append_raw(offset, &chunk[..cut]).expect("append_raw");
            offset += cut as u64;
        }
        assert_eq!(
            dst.read_bytes(0, usize::MAX).expect("read"),
            src.read_bytes(0, usize::MAX).expect("read")
        );
        assert!(matches!(
            dst.append_raw(0, &encoded(0)),
            Err(StoreError::RawAppendOffset { .. })
        ));
        let max = dst.max_offset();
        let half = encoded(1);
        assert!(matches!(
            dst.append_raw(max, &half[..half.len() - 1]),
            Err(StoreError::RawLayout { .. })
        ));
        assert_eq!(dst.max_offset(), max);
    }

    /// Segments of 16 checksum blocks.
    const BLOCKED: u64 = 16 * crate::store::commit_log_segment::COMMIT_LOG_BLOCK_BYTES as u64;

    /// Flips the low bit of byte `at` of `file` (a path under the CommitLog's directory).
    fn flip_at(dir: &Path, file: &str, at: u64) {
        let path = dir.join(COMMIT_LOG_DIR).join(file);
        crate::store::tests::flip_bits(&path, at as usize, 0x01);
    }

    #[test]
    fn every_write_keeps_the_block_checksums_whole_across_rolls_cuts_and_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), BLOCKED, 0).expect("open");
        // Past two fillers (zeros after each up to its segment's end), then a cut mid-block.
        let offsets = fill(&mut log, 400);
        assert!(log.max_offset() > 2 * BLOCKED);
        log.truncate_to(offsets[390]).expect("truncate");
        fill(&mut log, 7);
        assert_eq!(log.damaged_block(0, log.max_offset()), None);
        let end = log.max_offset();
        log.flush().expect("flush");
        drop(log);
        let (log, report) = CommitLog::open(dir.path(), BLOCKED, end).expect("reopen");
        assert_eq!(report.commit_log_end, end);
        assert_eq!(log.damaged_block(0, end), None);

        // A copy shipped raw keeps its own checksums, equal to the source's.
        let copy_dir = tempfile::tempdir().expect("tempdir");
        let (mut copy, _) = CommitLog::open(copy_dir.path(), BLOCKED, 0).expect("open");
        let bytes = log.read_bytes(0, usize::MAX).expect("read");
        copy.append_raw(0, &bytes).expect("append raw");
        assert_eq!(copy.damaged_block(0, end), None);
        let sums = |dir: &Path| {
            std::fs::read(
                dir.join(COMMIT_LOG_DIR)
                    .join(SUMS_DIR)
                    .join(mapped_file::file_name(BLOCKED)),
            )
            .expect("sums")
        };
        copy.flush().expect("flush");
        assert_eq!(sums(copy_dir.path()), sums(dir.path()));
    }

    #[test]
    fn a_cut_at_a_segment_start_or_a_block_start_keeps_the_checksums_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), BLOCKED, 0).expect("open");
        let offsets = fill(&mut log, 400);
        let second_segment = offsets
            .iter()
            .copied()
            .find(|offset| *offset >= BLOCKED)
            .expect("a record in the second segment");
        assert_eq!(second_segment, BLOCKED, "it starts the segment");
        assert!(log.max_offset() > 2 * BLOCKED);
        log.truncate_to(second_segment)
            .expect("a cut at the start of a segment");
        assert_eq!(log.max_offset(), BLOCKED);
        assert_eq!(log.damaged_block(0, BLOCKED), None);
        fill(&mut log, 3);
        let at_block_start = offsets
            .iter()
            .copied()
            .find(|offset| *offset > 4096 && offset % 4096 == 0);
        if let Some(cut) = at_block_start {
            log.truncate_to(cut).expect("a cut at a block's start");
        }
        fill(&mut log, 3);
        let end = log.max_offset();
        assert_eq!(log.damaged_block(0, end), None);
        log.flush().expect("flush");
        drop(log);
        let (log, report) = CommitLog::open(dir.path(), BLOCKED, end).expect("reopen");
        assert_eq!(report.commit_log_end, end);
        assert_eq!(log.damaged_block(0, end), None);
    }

    #[test]
    fn a_flipped_byte_outside_every_body_below_the_flushed_offset_cuts_the_log_at_its_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), BLOCKED, 0).expect("open");
        let offsets = fill(&mut log, 40);
        let end = log.max_offset();
        log.flush().expect("flush");
        drop(log);
        // The last property byte of record 20 but the separator: its body CRC still passes.
        let len = encoded(20).len() as u64;
        let at = offsets[20] + len - 3;
        flip_at(dir.path(), &mapped_file::file_name(0), at);

        let (log, report) = CommitLog::open(dir.path(), BLOCKED, end).expect("reopen");
        let block_start = at / 4096 * 4096;
        let cut_at = *offsets
            .iter()
            .filter(|offset| **offset <= block_start)
            .max()
            .expect("a record before the block");
        assert_eq!(report.commit_log_end, cut_at, "{report:?}");
        assert_eq!(log.max_offset(), cut_at);
    }

    #[test]
    fn past_the_flushed_offset_checksums_are_taken_anew_and_a_log_without_them_is_sealed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), BLOCKED, 0).expect("open");
        fill(&mut log, 300);
        let flushed = 3 * BLOCKED / 2;
        let end = log.max_offset();
        log.flush().expect("flush");
        drop(log);
        // The sums of blocks past the flushed offset never reached the disk as written.
        let sums_file = format!("{SUMS_DIR}/{}", mapped_file::file_name(BLOCKED));
        flip_at(dir.path(), &sums_file, 8 * 10 + 6);
        let (log, report) = CommitLog::open(dir.path(), BLOCKED, flushed).expect("reopen");
        assert_eq!(report.commit_log_end, end);
        assert_eq!(log.damaged_block(0, end), None);
        drop(log);

        std::fs::remove_dir_all(dir.path().join(COMMIT_LOG_DIR).join(SUMS_DIR)).expect("rm");
        let (log, report) = CommitLog::open(dir.path(), BLOCKED, end).expect("reopen");
        assert_eq!(report.commit_log_end, end);
        assert_eq!(log.damaged_block(0, end), None, "sealed as found");
    }

    #[test]
    fn the_checksums_of_a_segment_that_is_gone_are_removed_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), BLOCKED, 0).expect("open");
        fill(&mut log, 10);
        drop(log);
        // A crash between deleting a segment and its checksums.
        let sums_dir = dir.path().join(COMMIT_LOG_DIR).join(SUMS_DIR);
        let orphan = sums_dir.join(mapped_file::file_name(5 * BLOCKED));
        std::fs::copy(sums_dir.join(mapped_file::file_name(0)), &orphan).expect("copy");
        drop(CommitLog::open(dir.path(), BLOCKED, 0).expect("reopen"));
        assert!(!orphan.exists());
        assert!(sums_dir.join(mapped_file::file_name(0)).exists());
    }

    #[test]
    fn a_read_checks_every_block_its_range_touches_the_partial_last_one_included() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), BLOCKED, 0).expect("open");
        fill(&mut log, 100);
        let end = log.max_offset();
        assert_ne!(end % 4096, 0, "the last block is partial");
        let last_block = end / 4096 * 4096;
        let checked = CheckedBlock::default();
        log.check_blocks(4000, 200, &checked).expect("intact");
        assert_eq!(checked.0.get(), Some(4096));

        flip_at(dir.path(), &mapped_file::file_name(0), end - 1);
        assert_eq!(
            log.damaged_block(0, end),
            None,
            "a pass checks whole blocks only"
        );
        let error = log.check_blocks(end - 10, 10, &CheckedBlock::default());
        assert!(
            matches!(error, Err(StoreError::DamagedBlock { offset }) if offset == last_block),
            "{error:?}"
        );

        flip_at(dir.path(), &mapped_file::file_name(0), 4097);
        let error = log.check_blocks(4000, 200, &CheckedBlock::default());
        assert!(
            matches!(error, Err(StoreError::DamagedBlock { offset: 4096 })),
            "{error:?}"
        );
        // The same reader checked that block before the rot: it is not read again.
        log.check_blocks(4100, 10, &checked)
            .expect("checked once per reader");
    }

    #[test]
    fn blocks_count_from_a_segment_start_that_a_segment_size_leaves_unaligned() {
        const UNALIGNED: u64 = 2 * 4096 + 1000;
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), UNALIGNED, 0).expect("open");
        let offsets = fill(&mut log, 100);
        let second = offsets
            .iter()
            .copied()
            .find(|offset| *offset >= UNALIGNED + 4096)
            .expect("a record in the second segment's second block");
        let record_len = encoded(0).len();
        let block = UNALIGNED + 4096;
        flip_at(
            dir.path(),
            &mapped_file::file_name(UNALIGNED),
            second - UNALIGNED + 1,
        );
        let error = log.check_blocks(second, record_len, &CheckedBlock::default());
        assert!(
            matches!(error, Err(StoreError::DamagedBlock { offset }) if offset == block),
            "{error:?}"
        );
        assert_eq!(log.damaged_block(UNALIGNED, log.max_offset()), Some(block));
    }

    #[test]
    fn a_damaged_block_is_found_mended_with_a_copy_its_checksum_covers_or_resealed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = CommitLog::open(dir.path(), BLOCKED, 0).expect("open");
        fill(&mut log, 100);
        let end = log.max_offset();
        let (start, intact) = log
            .block_at(5000)
            .map(|(s, b)| (s, b.to_vec()))
            .expect("block");
        assert_eq!(start, 4096);
        flip_at(dir.path(), &mapped_file::file_name(0), 5000);
        assert_eq!(log.damaged_block(0, end), Some(4096));
        assert!(log.block_matches(4096, &intact));
        let (_, damaged) = log.block_at(4096).expect("block");
        assert!(!log.block_matches(4096, damaged));
        log.overwrite(4096, &intact).expect("repair");
        assert_eq!(log.damaged_block(0, end), None);

        // Rot in the checksum: the bytes are right, the sum is taken anew.
        flip_at(
            dir.path(),
            &format!("{SUMS_DIR}/{}", mapped_file::file_name(0)),
            8 * 2 + 5,
        );
        assert_eq!(log.damaged_block(0, end), Some(8192));
        log.reseal_block(8192).expect("reseal");
        assert_eq!(log.damaged_block(0, end), None);
    }
}
