//! `CommitLogSegment`: one CommitLog segment file and the checksums of its 4 KiB blocks, in
//! `commitlog/sums/<same name>` ([`SegmentSums`] over one-byte units). RocketMQ's record
//! format checks a record's body only (BODYCRC): a flipped bit in a record's header or
//! properties, in a filler, or in the zeros after it passes every record check. The block
//! checksums cover every written byte of the segment.
//!
//! Invariants: every write to the segment goes through this type. An append extends the
//! sums of the blocks it wrote over the new bytes only ([`SegmentSums::extend`]), so damage
//! to bytes written before stays visible; a cut reseals the block it ends in only if that
//! block matched before it; an overwrite (a repair with a peer's copy of the bytes) leaves
//! the sums alone: they were taken over the bytes as first written, which the repair
//! restores. Data and sums are flushed together, so below a flushed offset both are on disk
//! as they were written.

use std::path::Path;
use std::path::PathBuf;

use crate::store::cq_sums::SUMS_DIR;
use crate::store::cq_sums::SegmentSums;
use crate::store::cq_sums::SumsLayout;
use crate::store::error::StoreError;
use crate::store::mapped_file::Detached;
use crate::store::mapped_file::FlushTarget;
use crate::store::mapped_file::Footprint;
use crate::store::mapped_file::MappedFile;

/// Bytes of CommitLog under one checksum.
pub const COMMIT_LOG_BLOCK_BYTES: usize = 4096;

const COMMIT_LOG_SUMS: SumsLayout = SumsLayout {
    unit_bytes: 1,
    block_units: COMMIT_LOG_BLOCK_BYTES as u64,
};

/// One segment and its block checksums.
#[derive(Debug)]
pub struct CommitLogSegment {
    data: MappedFile,
    sums: SegmentSums,
}

impl CommitLogSegment {
    /// Creates a new, empty segment starting at `start_offset` in `dir` (the CommitLog's
    /// directory) and its sums in `dir/sums`.
    pub fn create(dir: &Path, start_offset: u64, size_bytes: u64) -> Result<Self, StoreError> {
        let data = MappedFile::create(dir, start_offset, size_bytes, Footprint::Preallocated)?;
        let sums = SegmentSums::create(
            &dir.join(SUMS_DIR),
            start_offset,
            size_bytes,
            COMMIT_LOG_SUMS,
            Footprint::Preallocated,
        )?;
        Ok(CommitLogSegment { data, sums })
    }

    /// Opens the segment at `path` (in `dir`) and its sums; `false` if it had none (a data
    /// dir from before block checksums, or a crash between creating the two): the caller
    /// seals them from the bytes once recovery knows where they end.
    pub fn open(
        dir: &Path,
        path: PathBuf,
        start_offset: u64,
        size_bytes: u64,
    ) -> Result<(Self, bool), StoreError> {
        let data = MappedFile::open(path, start_offset, size_bytes, Footprint::Preallocated)?;
        let (sums, found) = SegmentSums::open_or_create(
            &dir.join(SUMS_DIR),
            start_offset,
            size_bytes,
            COMMIT_LOG_SUMS,
            Footprint::Preallocated,
        )?;
        Ok((CommitLogSegment { data, sums }, found))
    }

    /// Appends `bytes` at the write position ([`MappedFile::write_append`]) and extends the
    /// sums of the blocks they fall in, hashing them from `bytes`.
    pub fn write_append(&mut self, bytes: &[u8]) -> Result<usize, StoreError> {
        let pos = self.data.write_append(bytes)?;
        extend_block_sums(&mut self.sums, &self.data, pos, bytes)?;
        Ok(pos)
    }

    /// Moves the write position over the zeros up to `pos` (the rest of a segment sealed by
    /// a filler), which the sums then cover.
    pub fn skip_zeros_to(&mut self, pos: usize) -> Result<(), StoreError> {
        let from = self.data.write_pos();
        self.data.skip_zeros_to(pos);
        let zeros = &self.data.written()[from..pos];
        extend_block_sums(&mut self.sums, &self.data, from, zeros)
    }

    /// Writes `bytes` over written bytes at `pos`: a repair with a peer's copy, which the
    /// sums, taken over the bytes as first written, check as they are.
    pub fn overwrite(&mut self, pos: usize, bytes: &[u8]) -> Result<(), StoreError> {
        self.data.overwrite(pos, bytes)
    }

    /// Declares the whole segment written (a sealed segment before where recovery starts).
    pub fn set_full(&mut self) {
        self.data.set_full();
    }

    /// Drops everything at or after `pos`. The block `pos` falls in is resealed over what is
    /// left of it if it matched before; if it did not, it keeps its entry and so stays
    /// visibly damaged until a repair.
    pub fn truncate_to(&mut self, pos: usize) -> Result<(), StoreError> {
        let block = block_of(pos);
        // A cut at a block's start keeps none of it (at the segment's end, there is no such
        // block): its entry goes with the later ones.
        let kept_part =
            (!pos.is_multiple_of(COMMIT_LOG_BLOCK_BYTES)).then(|| self.block_intact(block));
        self.data.truncate_to(pos);
        self.cut_sums(block, kept_part)
    }

    /// Recovery: the valid data ends at `pos` ([`MappedFile::recover_to`]); the sums of the
    /// blocks from `pos` on are forgotten (the caller reseals what it keeps). Returns the
    /// garbage bytes dropped.
    pub fn recover_to(&mut self, pos: usize) -> Result<usize, StoreError> {
        let dropped = self.data.recover_to(pos);
        self.sums
            .clear_from(pos.div_ceil(COMMIT_LOG_BLOCK_BYTES) as u64)?;
        Ok(dropped)
    }

    /// Takes the sums of the blocks holding written bytes in `[from, write_pos)` anew from
    /// the bytes as they are: bytes past a flushed offset that recovery checked record by
    /// record, or a segment that had no sums.
    pub fn seal_from(&mut self, from: usize) -> Result<(), StoreError> {
        let end = self.data.write_pos().div_ceil(COMMIT_LOG_BLOCK_BYTES) as u64;
        for block in block_of(from)..end {
            let range = self.block_range(block);
            self.sums.seal(block, &self.data.written()[range])?;
        }
        Ok(())
    }

    /// The first whole block at or after `from` and below `to` whose bytes do not match its
    /// checksum, as its position in the segment. `to` may pass the write position while
    /// recovery has not set it yet; the blocks below it must hold data.
    pub fn first_damaged(&self, from: usize, to: usize) -> Option<usize> {
        let first = from.div_ceil(COMMIT_LOG_BLOCK_BYTES);
        let last = to.min(self.data.size_bytes()) / COMMIT_LOG_BLOCK_BYTES;
        (first..last)
            .map(|block| block * COMMIT_LOG_BLOCK_BYTES)
            .find(|start| {
                let bytes = &self.data.whole()[*start..start + COMMIT_LOG_BLOCK_BYTES];
                !self.sums.intact(block_of(*start), bytes)
            })
    }

    /// Whether the written bytes of the block holding `pos` (the written part of a last,
    /// partial block included) match its checksum.
    pub fn block_intact_at(&self, pos: usize) -> bool {
        self.block_intact(block_of(pos))
    }

    /// The written bytes of the block holding `pos`, and where the block starts.
    pub fn block_at(&self, pos: usize) -> (usize, &[u8]) {
        let range = self.block_range(block_of(pos));
        (range.start, &self.data.written()[range])
    }

    /// Whether `bytes` are what the checksum of the block starting at `pos` covers.
    pub fn block_matches(&self, pos: usize, bytes: &[u8]) -> bool {
        self.sums.intact(block_of(pos), bytes)
    }

    /// Takes the checksum of the block holding `pos` anew from its bytes: the bytes were found
    /// equal to a peer's copy, so the checksum was what rotted.
    pub fn reseal_block(&mut self, pos: usize) -> Result<(), StoreError> {
        let block = block_of(pos);
        let range = self.block_range(block);
        self.sums.seal(block, &self.data.written()[range])
    }

    /// Durably flushes the segment and its sums.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.data.flush()?;
        self.sums
            .begin_flush()
            .map_or(Ok(()), |target| target.sync())
    }

    /// Marks the segment and its sums clean and hands back what makes their writes durable.
    pub fn begin_flush(&mut self) -> impl Iterator<Item = FlushTarget> {
        self.data
            .begin_flush()
            .into_iter()
            .chain(self.sums.begin_flush())
    }

    /// Deletes the segment and its sums.
    pub fn delete(self) -> Result<(), StoreError> {
        self.data.delete()?;
        self.sums.into_file().delete()
    }

    /// Hands the segment and its sums to `detached`, to delete later.
    pub fn detach(self, detached: &mut Detached) {
        detached.push(self.data);
        detached.push(self.sums.into_file());
    }

    fn block_intact(&self, block: u64) -> bool {
        let range = self.block_range(block);
        self.sums.intact(block, &self.data.written()[range])
    }

    /// The written part of block `block`.
    fn block_range(&self, block: u64) -> std::ops::Range<usize> {
        let start = (block as usize * COMMIT_LOG_BLOCK_BYTES).min(self.data.write_pos());
        let end = (start + COMMIT_LOG_BLOCK_BYTES).min(self.data.write_pos());
        start..end
    }

    /// After a cut at block `block`: if the cut kept part of it (`kept_part`: whether it
    /// matched before), reseals it if it did and forgets the later blocks; otherwise forgets
    /// it and the later ones.
    fn cut_sums(&mut self, block: u64, kept_part: Option<bool>) -> Result<(), StoreError> {
        let Some(intact_before) = kept_part else {
            return self.sums.clear_from(block);
        };
        if intact_before {
            let range = self.block_range(block);
            self.sums.seal(block, &self.data.written()[range])?;
        }
        self.sums.clear_from(block + 1)
    }
}

/// A segment reads as its file; every write goes through the segment.
impl std::ops::Deref for CommitLogSegment {
    type Target = MappedFile;

    fn deref(&self) -> &MappedFile {
        &self.data
    }
}

/// Extends the sums of the blocks that `new`, just written at `pos`, falls in: each over the
/// block's bytes before `pos` (read from the mapping) and then its part of `new`, hashed from
/// the caller's buffer so that fresh pages are not faulted into the mapping to be read back.
fn extend_block_sums(
    sums: &mut SegmentSums,
    data: &MappedFile,
    pos: usize,
    new: &[u8],
) -> Result<(), StoreError> {
    let end = pos + new.len();
    let mut block_start = pos / COMMIT_LOG_BLOCK_BYTES * COMMIT_LOG_BLOCK_BYTES;
    while block_start < end {
        let new_from = block_start.max(pos);
        let new_to = (block_start + COMMIT_LOG_BLOCK_BYTES).min(end);
        let before = &data.written()[block_start..new_from];
        sums.extend_split(
            block_of(block_start),
            before,
            &new[new_from - pos..new_to - pos],
        )?;
        block_start += COMMIT_LOG_BLOCK_BYTES;
    }
    Ok(())
}

fn block_of(pos: usize) -> u64 {
    (pos / COMMIT_LOG_BLOCK_BYTES) as u64
}
