//! Mending the key index from the CommitLog while the store runs: a block of index entries
//! that does not match its checksum (found by a lookup or by the scrubber) is rebuilt from the
//! records it indexes; a sealed file's slot that names no entry of its slot (found by a
//! lookup) is rewritten from the file's entries.
//!
//! Invariant: a block is only ever written back as it was. The records after the entry
//! before the block give the block's `(key hash, offset)` pairs, in the order dispatch added
//! them; their links are recomputed; and [`Index::repair_block`] writes the result only if
//! it matches the block's checksum. Anything else leaves the index as it is, so a lookup
//! through the block keeps failing instead of answering wrong.

use std::ops::ControlFlow;

use tracing::warn;

use crate::store::MessageStore;
use crate::store::dispatch::RecordInfo;
use crate::store::error::StoreError;
use crate::store::index::BlockRepair;
use crate::store::index::Index;
use crate::store::index::key_hash;

/// Runs `attempt`, which reads the key index, on `target`; where it meets damage
/// ([`StoreError::is_index_damage`]), mends it with `repair` and runs it again. Damage that
/// `repair` leaves as it was (the same error twice) is the error: an answer is never taken
/// from a damaged block.
pub fn mending_index<S, T>(
    target: &mut S,
    mut attempt: impl FnMut(&mut S) -> Result<T, StoreError>,
    mut repair: impl FnMut(&mut S, &StoreError) -> Result<BlockRepair, StoreError>,
) -> Result<T, StoreError> {
    let mut mended = Vec::new();
    loop {
        let damage = match attempt(target) {
            Err(error) if error.is_index_damage() => error,
            other => return other,
        };
        let what = damage.to_string();
        if mended.contains(&what) {
            return Err(damage);
        }
        let outcome = repair(target, &damage)?;
        warn!(damage = %what, ?outcome, "the key index was damaged where it was read: repaired");
        mended.push(what);
    }
}

impl MessageStore {
    /// Adds the index pairs of a run of dispatches, mending damage the adds meet: an add
    /// reads the index to decide whether its pair is stored already, and an add that
    /// stopped there is run again after the repair (a stored pair is not stored twice).
    /// Staged CommitLog records are written first, for the repair to read them.
    pub(super) fn finish_dispatch(&mut self) -> Result<(), StoreError> {
        let pairs = self.dispatcher.take_pending_keys();
        let added = mending_index(
            self,
            |store| store.dispatcher.index_mut().add_all(&pairs),
            |store, damage| {
                store.commit_log.write_staged()?;
                store.repair_index(damage)
            },
        );
        self.dispatcher.recycle_pending_keys(pairs);
        added
    }

    /// The key index, for checks of its blocks and slot tables (the scrubber's).
    pub fn index(&self) -> &Index {
        self.dispatcher.index()
    }

    /// Rewrites slot `slot` of index file `sequence` from the file's entries if it does not
    /// name the slot's newest entry.
    pub fn repair_index_slot(
        &mut self,
        sequence: u64,
        slot: u64,
    ) -> Result<BlockRepair, StoreError> {
        self.dispatcher.index_mut().repair_slot(sequence, slot)
    }

    /// Mends the damage a lookup reported ([`StoreError::is_index_damage`]): a block is
    /// rebuilt from the CommitLog, a sealed file's slot rewritten from the file's entries.
    /// Any other error is left alone (`Mismatch`).
    pub fn repair_index(&mut self, damage: &StoreError) -> Result<BlockRepair, StoreError> {
        match *damage {
            StoreError::IndexDamaged { sequence, block } => {
                self.repair_index_block(sequence, block)
            }
            StoreError::IndexSlotDamaged { sequence, slot } => {
                self.repair_index_slot(sequence, slot)
            }
            _ => Ok(BlockRepair::Mismatch),
        }
    }

    /// Rebuilds block `block` of index file `sequence` from the CommitLog (see the module
    /// comment), after the damaged blocks right before it, each of which anchors the next.
    /// `Mismatch` if a block cannot be anchored (the records it indexed are gone) or what the
    /// CommitLog gives is not what its checksum covers.
    pub fn repair_index_block(
        &mut self,
        sequence: u64,
        block: u64,
    ) -> Result<BlockRepair, StoreError> {
        let mut damaged_run = vec![(sequence, block)];
        while let Some((sequence, block)) = damaged_run
            .last()
            .and_then(|(sequence, block)| self.index().block_before(*sequence, *block))
            .filter(|(sequence, block)| self.index().is_damaged(*sequence, *block))
        {
            damaged_run.push((sequence, block));
        }
        let mut outcome = BlockRepair::Intact;
        while let Some((sequence, block)) = damaged_run.pop() {
            outcome = self.rebuild_index_block(sequence, block)?;
            if outcome == BlockRepair::Mismatch {
                break;
            }
        }
        Ok(outcome)
    }

    /// Checks the index block holding the newest entry, which the next adds read, and
    /// rebuilds it if it rotted; an error if it cannot be.
    pub(super) fn mend_newest_index_block(&mut self) -> Result<(), StoreError> {
        let Some((sequence, block)) = self.index().newest_block() else {
            return Ok(());
        };
        if !self.index().is_damaged(sequence, block) {
            return Ok(());
        }
        let outcome = self.repair_index_block(sequence, block)?;
        warn!(
            sequence,
            block,
            ?outcome,
            "the newest key index block was damaged"
        );
        match outcome {
            BlockRepair::Mismatch => Err(StoreError::IndexDamaged { sequence, block }),
            _ => Ok(()),
        }
    }

    /// Rebuilds one block whose predecessor is intact.
    fn rebuild_index_block(
        &mut self,
        sequence: u64,
        block: u64,
    ) -> Result<BlockRepair, StoreError> {
        let Some(origin) = self.index().block_origin(sequence, block) else {
            return Ok(BlockRepair::Mismatch);
        };
        let from = origin
            .after
            .map_or(self.commit_log.min_offset(), |(_, offset)| offset as u64);
        if from < self.commit_log.min_offset() {
            return Ok(BlockRepair::Mismatch);
        }
        let tags_code_fn = self.config.tags_code_fn;
        let mut pairs = Vec::with_capacity(origin.entries);
        // The entry before the block: its record's pairs up to it are the file's already.
        let mut skip_through = origin.after;
        let mut record_hashes = Vec::new();
        self.commit_log.for_each_record_from(from, |offset, view| {
            let info = RecordInfo::from_view(&view, tags_code_fn(&view))?;
            // A pair is stored once: a key repeated in a record (or two keys of one hash)
            // added one entry.
            record_hashes.clear();
            for hash in info.keys().map(key_hash) {
                if !record_hashes.contains(&hash) {
                    record_hashes.push(hash);
                }
            }
            let mut hashes = record_hashes.as_slice();
            if let Some((hash, at)) = skip_through.take()
                && at == offset as i64
                && let Some(position) = hashes.iter().position(|h| *h == hash)
            {
                hashes = &hashes[position + 1..];
            }
            for hash in hashes {
                pairs.push((*hash, offset as i64));
                if pairs.len() == origin.entries {
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        })?;
        self.dispatcher
            .index_mut()
            .repair_block(sequence, block, &pairs)
    }
}
