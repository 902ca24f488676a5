//! `SlotTable`: the slot table of the index file that is taking entries, kept in anonymous
//! memory instead of the file's mapping.
//!
//! Every index add reads and writes one slot at a hash-random position of a table of
//! megabytes. Through the file's 4 KiB-page mapping, each such access missed the TLB and
//! dirtied a random page that writeback then had to write every flush (measured: a tenth of
//! the leader's CPU under W1, nearly all of it on the slot load). Here the table lives in
//! memory advised for huge pages, and its bytes reach the file once, when the file fills.
//!
//! Invariant: the bytes are exactly the file's slot-table layout (big-endian u32 per slot,
//! entry number + 1, 0 for none), so sealing is one copy. The file's own table is not
//! trusted while a `SlotTable` stands in for it: at open, the index rebuilds the table of
//! any file that was still taking entries.

use memmap2::{Advice, MmapMut};

use crate::store::error::StoreError;

/// Bytes per slot: an entry number + 1 (u32, big-endian).
pub const SLOT_SIZE: usize = 4;

#[derive(Debug)]
pub struct SlotTable {
    bytes: MmapMut,
}

impl SlotTable {
    /// A table of `slots` empty slots.
    pub fn new(slots: u32) -> Result<SlotTable, StoreError> {
        let len = (slots as usize * SLOT_SIZE).max(1);
        let bytes = MmapMut::map_anon(len).map_err(|source| StoreError::SlotTable { source })?;
        // Best effort: without huge pages the table still works, only with more TLB misses.
        let _ = bytes.advise(Advice::HugePage);
        Ok(SlotTable { bytes })
    }

    /// The value of slot `slot`.
    pub fn get(&self, slot: usize) -> u32 {
        let mut word = [0u8; SLOT_SIZE];
        word.copy_from_slice(&self.bytes[slot * SLOT_SIZE..][..SLOT_SIZE]);
        u32::from_be_bytes(word)
    }

    pub fn set(&mut self, slot: usize, value: u32) {
        self.bytes[slot * SLOT_SIZE..][..SLOT_SIZE].copy_from_slice(&value.to_be_bytes());
    }

    /// The table in the file's layout.
    pub fn as_file_bytes(&self, slots: u32) -> &[u8] {
        &self.bytes[..slots as usize * SLOT_SIZE]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_start_empty_and_keep_big_endian_values() {
        let mut table = SlotTable::new(3).expect("table");
        assert_eq!((0..3).map(|slot| table.get(slot)).sum::<u32>(), 0);
        table.set(1, 0x0102_0304);
        assert_eq!(table.get(1), 0x0102_0304);
        assert_eq!(
            table.as_file_bytes(3),
            &[0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0]
        );
    }
}
