//! `SegmentSums`: the block checksums of one ConsumeQueue segment, in a file of the same name
//! under the queue's `sums/` directory (key index files and CommitLog segments, in their
//! own [`SumsLayout`], have theirs the same way). A unit damaged at rest (a flipped tags code that a tag
//! filter would skip its message by, an offset or size that still looks valid) is found by
//! the first read of its block, not only by a scrub pass over the CommitLog.
//!
//! Layout: entry `b` (8 bytes at `8·b`) covers the units `[64·b, 64·b + count)` of the
//! segment as `count: u32, crc32: u32` (big-endian) of those units' bytes. An all-zero entry
//! covers no unit (the CRC-32 of nothing is 0), so a fresh, sparse file is correct for an
//! empty segment.
//!
//! Invariants: a block is *intact* when its entry covers exactly the units written in it and
//! the CRC matches their bytes; an entry is only ever extended over bytes it did not cover
//! ([`SegmentSums::extend`]) or recomputed over bytes just checked ([`SegmentSums::seal`]),
//! so damage that happened before a change stays visible after it.

use std::path::Path;

use tracing::warn;

use crate::store::consume_queue::CQ_UNIT_SIZE;
use crate::store::error::StoreError;
use crate::store::mapped_file::{FlushTarget, Footprint, MappedFile};

/// Units covered by one checksum.
pub const CQ_BLOCK_UNITS: u64 = 64;
/// Bytes of one entry: the unit count, then the CRC-32.
const ENTRY_BYTES: usize = 8;
/// Sub-directory of a queue's directory holding its segments' sums.
pub const SUMS_DIR: &str = "sums";

/// How a sums file divides its segment: units of `unit_bytes` bytes, `block_units` of them
/// under one checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SumsLayout {
    pub unit_bytes: usize,
    pub block_units: u64,
}

/// ConsumeQueue units and key index entries (20 bytes each), 64 a block.
pub const UNIT_SUMS: SumsLayout = SumsLayout {
    unit_bytes: CQ_UNIT_SIZE,
    block_units: CQ_BLOCK_UNITS,
};

/// One block's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockSum {
    pub count: u32,
    pub crc: u32,
}

impl BlockSum {
    /// The sum of `units` (the encoded units from the block's start), of `unit_bytes` each.
    pub fn of(units: &[u8], unit_bytes: usize) -> BlockSum {
        BlockSum {
            count: (units.len() / unit_bytes) as u32,
            crc: crc32fast::hash(units),
        }
    }

    /// Whether this entry covers exactly `units` (the block's written 20-byte units) and
    /// matches them.
    pub fn covers(&self, units: &[u8]) -> bool {
        self.covers_units(units, CQ_UNIT_SIZE)
    }

    /// [`BlockSum::covers`] for units of `unit_bytes`.
    pub fn covers_units(&self, units: &[u8], unit_bytes: usize) -> bool {
        self.count as usize * unit_bytes == units.len() && self.crc == crc32fast::hash(units)
    }
}

/// Blocks in a segment of `units_per_segment` units (the last one may be short).
pub fn blocks_per_segment(units_per_segment: u64) -> u64 {
    units_per_segment.div_ceil(CQ_BLOCK_UNITS)
}

/// The sums file of one segment.
#[derive(Debug)]
pub struct SegmentSums {
    file: MappedFile,
    layout: SumsLayout,
}

impl SegmentSums {
    /// Creates the sums of a new (empty) segment starting at `start_offset` in `dir`, in
    /// place of any left by an earlier segment there (a crash between deleting the two),
    /// with the segment's own footprint.
    pub fn create(
        dir: &Path,
        start_offset: u64,
        units_per_segment: u64,
        layout: SumsLayout,
        footprint: Footprint,
    ) -> Result<Self, StoreError> {
        let path = dir.join(crate::store::mapped_file::file_name(start_offset));
        match std::fs::remove_file(&path) {
            Ok(()) => warn!(path = %path.display(), "removed the checksums of a deleted segment"),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(StoreError::io("remove consume queue sums", &path, error)),
        }
        let bytes = file_bytes(units_per_segment, layout);
        let mut file = MappedFile::create(dir, start_offset, bytes, footprint)?;
        file.set_full();
        Ok(SegmentSums { file, layout })
    }

    /// Opens the sums of the segment starting at `start_offset`; a missing file (a data dir
    /// from before sums, or a crash between creating a segment and its sums) is created
    /// empty: open then seals the blocks from the units as they are.
    pub fn open_or_create(
        dir: &Path,
        start_offset: u64,
        units_per_segment: u64,
        layout: SumsLayout,
        footprint: Footprint,
    ) -> Result<(Self, bool), StoreError> {
        let path = dir.join(crate::store::mapped_file::file_name(start_offset));
        if !path.exists() {
            return Ok((
                Self::create(dir, start_offset, units_per_segment, layout, footprint)?,
                false,
            ));
        }
        let bytes = file_bytes(units_per_segment, layout);
        let mut file = match MappedFile::open(path.clone(), start_offset, bytes, footprint) {
            Ok(file) => file,
            Err(StoreError::SegmentSize { .. }) => {
                // A sums file of another length is useless: start it over.
                std::fs::remove_file(&path)
                    .map_err(|e| StoreError::io("remove consume queue sums", &path, e))?;
                return Ok((
                    Self::create(dir, start_offset, units_per_segment, layout, footprint)?,
                    false,
                ));
            }
            Err(other) => return Err(other),
        };
        file.set_full();
        Ok((SegmentSums { file, layout }, true))
    }

    /// Whether block `block`'s entry covers exactly `units` (its written units) and matches.
    pub fn intact(&self, block: u64, units: &[u8]) -> bool {
        self.get(block).covers_units(units, self.layout.unit_bytes)
    }

    /// The entry of block `block`.
    pub fn get(&self, block: u64) -> BlockSum {
        let pos = block as usize * ENTRY_BYTES;
        let Some(bytes) = self.file.read(pos, ENTRY_BYTES) else {
            return BlockSum::default();
        };
        BlockSum {
            count: u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            crc: u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
        }
    }

    fn set(&mut self, block: u64, sum: BlockSum) -> Result<(), StoreError> {
        let mut bytes = [0u8; ENTRY_BYTES];
        bytes[..4].copy_from_slice(&sum.count.to_be_bytes());
        bytes[4..].copy_from_slice(&sum.crc.to_be_bytes());
        self.file.overwrite(block as usize * ENTRY_BYTES, &bytes)
    }

    /// Block `block` now holds `units` (all its written units, from its start): its entry
    /// grows over the bytes it did not cover yet. An entry covering more units than the
    /// block holds is left as it is (damaged, or units being written back after a cut).
    pub fn extend(&mut self, block: u64, units: &[u8]) -> Result<(), StoreError> {
        self.extend_split(block, units, &[])
    }

    /// [`SegmentSums::extend`] for a block that holds `before` followed by `new`: the bytes
    /// just written are hashed from the caller's buffer, and `before` is read only where the
    /// entry does not cover it yet, so a write through a file descriptor never faults its
    /// pages into a mapping to be checksummed.
    pub fn extend_split(
        &mut self,
        block: u64,
        before: &[u8],
        new: &[u8],
    ) -> Result<(), StoreError> {
        let sum = self.get(block);
        let covered = sum.count as usize * self.layout.unit_bytes;
        let len = before.len() + new.len();
        if covered >= len {
            return Ok(());
        }
        let mut hasher = crc32fast::Hasher::new_with_initial(sum.crc);
        hasher.update(before.get(covered..).unwrap_or_default());
        hasher.update(&new[covered.saturating_sub(before.len())..]);
        self.set(
            block,
            BlockSum {
                count: (len / self.layout.unit_bytes) as u32,
                crc: hasher.finalize(),
            },
        )
    }

    /// Block `block` holds `units`, which the caller checked: its entry covers exactly them.
    pub fn seal(&mut self, block: u64, units: &[u8]) -> Result<(), StoreError> {
        self.set(block, BlockSum::of(units, self.layout.unit_bytes))
    }

    /// Forgets the entries of blocks `from..` (their units were dropped).
    pub fn clear_from(&mut self, from: u64) -> Result<(), StoreError> {
        let blocks = (self.file.size_bytes() / ENTRY_BYTES) as u64;
        for block in from..blocks {
            if self.get(block) != BlockSum::default() {
                self.set(block, BlockSum::default())?;
            }
        }
        Ok(())
    }

    /// [`MappedFile::release_if_idle`] of the sums file.
    pub fn release_if_idle(&mut self, idle_sweeps: u32) -> bool {
        self.file.release_if_idle(idle_sweeps)
    }

    /// Marks the file clean and hands back what makes its writes durable.
    pub fn begin_flush(&mut self) -> Option<FlushTarget> {
        self.file.begin_flush()
    }

    pub fn into_file(self) -> MappedFile {
        self.file
    }
}

fn file_bytes(units_per_segment: u64, layout: SumsLayout) -> u64 {
    units_per_segment.div_ceil(layout.block_units) * ENTRY_BYTES as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(n: usize, seed: u8) -> Vec<u8> {
        (0..n * CQ_UNIT_SIZE)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn extending_unit_by_unit_equals_the_sum_of_the_whole_block() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sums =
            SegmentSums::create(dir.path(), 0, 100, UNIT_SUMS, Footprint::Grown).expect("create");
        let block = units(64, 7);
        for n in 1..=64 {
            sums.extend(1, &block[..n * CQ_UNIT_SIZE]).expect("extend");
        }
        assert_eq!(sums.get(1), BlockSum::of(&block, CQ_UNIT_SIZE));
        assert!(sums.get(1).covers(&block));
        assert_eq!(sums.get(0), BlockSum::default(), "other blocks untouched");
        assert!(sums.get(0).covers(&[]), "an empty block is intact");
    }

    #[test]
    fn extending_from_a_split_block_reads_only_what_the_entry_does_not_cover() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sums =
            SegmentSums::create(dir.path(), 0, 64, UNIT_SUMS, Footprint::Grown).expect("create");
        let block = units(12, 4);
        let (first, rest) = block.split_at(5 * CQ_UNIT_SIZE);
        sums.extend_split(0, &[], first).expect("extend");
        let mut rotted_before = first.to_vec();
        rotted_before[0] ^= 0x01; // covered already, so never read again
        let (middle, last) = rest.split_at(4 * CQ_UNIT_SIZE);
        sums.extend_split(0, &rotted_before, middle)
            .expect("extend");
        assert_eq!(
            sums.get(0),
            BlockSum::of(&block[..9 * CQ_UNIT_SIZE], CQ_UNIT_SIZE)
        );
        // An entry behind what was written before: the uncovered part is read from `before`.
        let mut behind =
            SegmentSums::create(dir.path(), 64, 64, UNIT_SUMS, Footprint::Grown).expect("create");
        behind
            .extend_split(0, &block[..9 * CQ_UNIT_SIZE], last)
            .expect("extend");
        assert_eq!(behind.get(0), BlockSum::of(&block, CQ_UNIT_SIZE));
    }

    #[test]
    fn a_changed_unit_stays_visible_after_the_block_grows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sums =
            SegmentSums::create(dir.path(), 0, 64, UNIT_SUMS, Footprint::Grown).expect("create");
        let mut block = units(10, 1);
        sums.extend(0, &block).expect("extend");
        block[3] ^= 0x10; // rot in a unit the entry covers
        block.extend(units(1, 9));
        sums.extend(0, &block).expect("extend");
        assert!(!sums.get(0).covers(&block));
        sums.seal(0, &block).expect("seal");
        assert!(sums.get(0).covers(&block));
    }

    #[test]
    fn an_entry_covering_more_than_the_block_holds_is_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sums =
            SegmentSums::create(dir.path(), 0, 64, UNIT_SUMS, Footprint::Grown).expect("create");
        let block = units(5, 3);
        sums.extend(0, &block).expect("extend");
        sums.extend(0, &block[..3 * CQ_UNIT_SIZE]).expect("extend");
        assert!(!sums.get(0).covers(&block[..3 * CQ_UNIT_SIZE]));
        assert!(
            sums.get(0).covers(&block),
            "written back alike, intact again"
        );
    }

    #[test]
    fn creating_over_a_stale_file_starts_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let block = units(3, 2);
        let mut stale =
            SegmentSums::create(dir.path(), 0, 64, UNIT_SUMS, Footprint::Grown).expect("create");
        stale.extend(0, &block).expect("extend");
        drop(stale);
        let sums = SegmentSums::create(dir.path(), 0, 64, UNIT_SUMS, Footprint::Grown)
            .expect("create over it");
        assert_eq!(sums.get(0), BlockSum::default());
    }

    #[test]
    fn sums_survive_reopen_and_a_wrong_length_file_starts_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let block = units(3, 5);
        {
            let mut sums = SegmentSums::create(dir.path(), 640, 128, UNIT_SUMS, Footprint::Grown)
                .expect("create");
            sums.extend(1, &block).expect("extend");
            sums.begin_flush().expect("dirty").sync().expect("sync");
        }
        let (sums, existed) =
            SegmentSums::open_or_create(dir.path(), 640, 128, UNIT_SUMS, Footprint::Grown)
                .expect("open");
        assert!(existed);
        assert!(sums.get(1).covers(&block));
        drop(sums);
        let (sums, existed) =
            SegmentSums::open_or_create(dir.path(), 640, 200, UNIT_SUMS, Footprint::Grown)
                .expect("open");
        assert!(!existed, "another segment size: started over");
        assert_eq!(sums.get(1), BlockSum::default());
        assert_eq!(blocks_per_segment(200), 4);
    }
}
