//! ConsumeQueue units checked against their block checksums, and checksums kept true: a
//! block whose checksum matches is read as it is; in a block that does not match, each unit
//! is compared with the record it points to before it is used, so a tag filter never skips a
//! message by a damaged tags code. A damaged block is reported to the scrubber
//! ([`MessageStore::suspects`]), which repairs its units and then reseals it
//! ([`MessageStore::reseal_block`]).
//!
//! Invariants: a checksum is only recomputed over units that were each just found to be their
//! record's; a unit whose record does not match is served as it is (the record read that
//! follows reports it as `UnitMismatch`) except that its tags code is taken from its record.

use std::ops::Range;

use tracing::{info, warn};

use crate::scrub::suspects::SuspectUnit;
use crate::store::MessageStore;
use crate::store::consume_queue::{ConsumeQueue, CqUnit};
use crate::store::error::StoreError;

/// What comparing a unit with the record it points to found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnitCheck {
    /// The record is the unit's message and gives the same tags code.
    Matches,
    /// The record is the unit's message, whose tags code is this one.
    TagsCode(i64),
    /// The record is not the unit's message (or no record is there).
    Wrong,
    /// The record is no longer in the CommitLog (retention): nothing to compare with.
    Gone,
}

/// Blocks looked at when the store opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockCheck {
    /// Blocks whose checksum did not match but whose units all checked out, resealed.
    pub resealed: u64,
    /// Blocks with a unit that is not its record's, left to the scrubber.
    pub damaged: u64,
}

impl MessageStore {
    /// Units reads found wrong, for the scrubber (shared with it by the node).
    pub fn suspects(&self) -> &std::sync::Arc<crate::scrub::suspects::SuspectUnits> {
        &self.suspects
    }

    fn check_unit(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
        unit: &CqUnit,
    ) -> UnitCheck {
        if unit.commit_log_offset >= 0
            && (unit.commit_log_offset as u64) < self.commit_log.min_offset()
        {
            return UnitCheck::Gone;
        }
        match self.read_unit_view(topic, queue_id, queue_offset as i64, unit) {
            Ok(view) => match (self.config.tags_code_fn)(&view) {
                code if code == unit.tags_code => UnitCheck::Matches,
                code => UnitCheck::TagsCode(code),
            },
            Err(_) => UnitCheck::Wrong,
        }
    }

    /// The units of a queue from `from` on, read lazily (none if the queue is unknown); in a
    /// block whose checksum does not match, each unit is checked against its record first
    /// (see the module doc).
    pub fn consume_queue_units(
        &self,
        topic: &str,
        queue_id: i32,
        from: i64,
    ) -> impl Iterator<Item = CqUnit> {
        let queue = self.dispatcher.queue(topic, queue_id);
        let (start, end) = queue.map_or((0, 0), |queue| {
            (
                (from.max(0) as u64).max(queue.min_offset()),
                queue.max_offset(),
            )
        });
        // The block read last, and whether its units are checked one by one.
        let mut block: Option<(Range<u64>, bool)> = None;
        (start..end).map_while(move |queue_offset| {
            let queue = queue?;
            let unit = queue.get(queue_offset)?;
            let checking = match &block {
                Some((bounds, checking)) if bounds.contains(&queue_offset) => *checking,
                _ => {
                    let bounds = queue.block_bounds(queue_offset);
                    let checking = !queue.block_intact(queue_offset);
                    if checking {
                        warn!(
                            %topic, queue_id, block = ?bounds,
                            "a ConsumeQueue block does not match its checksum: its units are \
                             checked against their records"
                        );
                        self.report(topic, queue_id, bounds.start);
                    }
                    block = Some((bounds, checking));
                    checking
                }
            };
            if !checking {
                return Some(unit);
            }
            match self.check_unit(topic, queue_id, queue_offset, &unit) {
                UnitCheck::Matches | UnitCheck::Gone => Some(unit),
                UnitCheck::TagsCode(tags_code) => {
                    self.report(topic, queue_id, queue_offset);
                    Some(CqUnit { tags_code, ..unit })
                }
                UnitCheck::Wrong => {
                    self.report(topic, queue_id, queue_offset);
                    Some(unit)
                }
            }
        })
    }

    /// The queue offsets of the ConsumeQueue block holding `queue_offset` (up to its last
    /// written unit), if the queue holds that unit.
    pub fn block_bounds(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
    ) -> Option<Range<u64>> {
        let queue = self.dispatcher.queue(topic, queue_id)?;
        (queue.min_offset()..queue.max_offset())
            .contains(&queue_offset)
            .then(|| queue.block_bounds(queue_offset))
    }

    fn report(&self, topic: &str, queue_id: i32, queue_offset: u64) {
        let suspect = SuspectUnit {
            topic: topic.to_owned(),
            queue_id,
            queue_offset: queue_offset as i64,
        };
        if !self.suspects.report(suspect) {
            warn!("too many suspect units wait: left to the scrubber's pass");
        }
    }

    /// The units of `queue`'s block `bounds` that are not their record's (units below the
    /// queue's first offset are not served and not checked).
    fn wrong_units_of_block(&self, queue: &ConsumeQueue, bounds: Range<u64>) -> Vec<u64> {
        bounds
            .filter(|queue_offset| *queue_offset >= queue.min_offset())
            .filter(|queue_offset| {
                queue.get(*queue_offset).is_none_or(|unit| {
                    !matches!(
                        self.check_unit(queue.topic(), queue.queue_id(), *queue_offset, &unit),
                        UnitCheck::Matches | UnitCheck::Gone
                    )
                })
            })
            .collect()
    }

    /// Reseals the block holding `queue_offset` of `topic`/`queue_id` if each of its units is
    /// its record's; false if one is not (the checksum is left as it is).
    pub fn reseal_block(
        &mut self,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
    ) -> Result<bool, StoreError> {
        let Some(queue) = self.dispatcher.queue(topic, queue_id) else {
            return Ok(false);
        };
        if queue.block_intact(queue_offset) {
            return Ok(true);
        }
        let bounds = queue.block_bounds(queue_offset);
        if !self.wrong_units_of_block(queue, bounds.clone()).is_empty() {
            return Ok(false);
        }
        self.dispatcher
            .queue_mut(topic, queue_id)?
            .seal_block(queue_offset)?;
        info!(topic, queue_id, block = ?bounds, "ConsumeQueue block checked against its records and resealed");
        Ok(true)
    }

    /// At open: every block whose checksum does not match (a crash between writing units and
    /// their checksums, or damage) is resealed if its units check out, else its wrong units
    /// are reported to the scrubber.
    pub(super) fn check_blocks(&mut self) -> Result<BlockCheck, StoreError> {
        let mut check = BlockCheck::default();
        for (topic, queue_id) in self.dispatcher.queue_names() {
            let Some(queue) = self.dispatcher.queue(&topic, queue_id) else {
                continue;
            };
            for block_start in queue.damaged_blocks() {
                if self.reseal_block(&topic, queue_id, block_start)? {
                    check.resealed += 1;
                    continue;
                }
                check.damaged += 1;
                let Some(queue) = self.dispatcher.queue(&topic, queue_id) else {
                    continue;
                };
                let bounds = queue.block_bounds(block_start);
                let wrong = self.wrong_units_of_block(queue, bounds);
                warn!(%topic, queue_id, ?wrong, "ConsumeQueue units damaged: reported to the scrubber");
                for queue_offset in wrong {
                    self.report(&topic, queue_id, queue_offset);
                }
            }
        }
        Ok(check)
    }
}
