//! The store's side of scrubbing: checking CommitLog bytes long after they were written, and
//! repairing them in place. [`walk_records`] checks the records of a chunk read from the
//! CommitLog (layout, body CRC) without touching the store; [`MessageStore::wrong_units`]
//! compares their ConsumeQueue units with what the records say; [`MessageStore::repair_commit_log`]
//! writes a peer's copy over a damaged range and [`MessageStore::repair_unit`] rewrites a unit.
//!
//! Invariants: replicas' CommitLogs are byte-identical below their applied end, so a peer's
//! bytes at an offset are what this node's must be; a repair never moves the CommitLog end or
//! a queue's max offset, it only rewrites bytes below them; a record or filler never crosses
//! a segment boundary, and a filler ends exactly at one.

use crate::store::MessageStore;
use crate::store::commit_log::Entry;
use crate::store::commit_log::probe;
use crate::store::config::TagsCodeFn;
use crate::store::consume_queue::CqUnit;
use crate::store::error::StoreError;
use crate::store::record::END_FILE_MIN_BLANK_LENGTH;
use crate::store::record::RECORD_SIZE_MAX;
use crate::store::record::RecordError;

/// The most bytes one record or filler takes (a filler fills what a record did not fit in).
pub const RECORD_OR_FILLER_BYTES_MAX: usize = RECORD_SIZE_MAX + END_FILE_MIN_BLANK_LENGTH;

/// A record that passed its checks, and the unit its queue must hold for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedRecord {
    pub offset: i64,
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub unit: CqUnit,
}

/// How a walk over a chunk ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkEnd {
    /// The chunk held whole records and fillers only; the next entry starts at `next` (past
    /// the chunk when it ended in a filler).
    Whole { next: i64 },
    /// The record at `offset` continues past the chunk: read `needed` bytes there.
    Continues { offset: i64, needed: usize },
    /// The bytes at `offset` are no valid record or filler (its length is then unknown).
    Damaged { offset: i64, error: RecordError },
}

/// The records of a chunk and how the walk ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk {
    pub records: Vec<CheckedRecord>,
    pub end: WalkEnd,
}

/// Checks the records and fillers in `bytes`, read from CommitLog `offset`, laid out for
/// segments of `segment_bytes`, with the checks recovery applies (`commit_log::probe`).
pub fn walk_records(
    offset: i64,
    bytes: &[u8],
    segment_bytes: u64,
    tags_code_fn: TagsCodeFn,
) -> Walk {
    let mut records = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let at = offset + pos as i64;
        match entry_at(&bytes[pos..], at, segment_bytes) {
            Ok(Entry::Message(view)) => {
                records.push(CheckedRecord {
                    offset: at,
                    topic: view.topic().to_owned(),
                    queue_id: view.queue_id(),
                    queue_offset: view.queue_offset(),
                    unit: CqUnit {
                        commit_log_offset: at,
                        size: view.total_size() as i32,
                        tags_code: tags_code_fn(&view),
                    },
                });
                pos += view.total_size();
            }
            Ok(entry) => pos += entry.size(),
            Err(RecordError::Truncated { needed, .. }) => {
                return Walk {
                    records,
                    end: WalkEnd::Continues { offset: at, needed },
                };
            }
            Err(error) => {
                return Walk {
                    records,
                    end: WalkEnd::Damaged { offset: at, error },
                };
            }
        }
    }
    Walk {
        records,
        end: WalkEnd::Whole {
            next: offset + pos as i64,
        },
    }
}

/// The record or filler at the start of `bytes` (CommitLog offset `at`). Zeros where a record
/// should be, or a record that would pass its segment's end, are damage; `Truncated` means
/// only that the bytes end before the record does.
fn entry_at(bytes: &[u8], at: i64, segment_bytes: u64) -> Result<Entry<'_>, RecordError> {
    let to_segment_end = (segment_bytes - at as u64 % segment_bytes) as usize;
    match probe(bytes, to_segment_end) {
        Ok(Entry::End) => Err(RecordError::TotalSize { total_size: 0 }),
        Err(RecordError::Truncated { needed, .. }) if needed > to_segment_end => {
            Err(RecordError::TotalSize {
                total_size: i32::try_from(needed).unwrap_or(i32::MAX),
            })
        }
        other => other,
    }
}

/// The length of the record or filler at the start of `bytes` (CommitLog offset `at`), if it
/// is whole and valid: how much of a peer's answer is one repair.
pub fn valid_entry_len(bytes: &[u8], at: i64, segment_bytes: u64) -> Result<usize, RecordError> {
    let size = entry_at(bytes, at, segment_bytes)?.size();
    if size > bytes.len() {
        return Err(RecordError::Truncated {
            needed: size,
            available: bytes.len(),
        });
    }
    Ok(size)
}

impl MessageStore {
    /// The records whose ConsumeQueue unit differs from the one they call for, with the unit
    /// found (`None`: the queue ends before it). Units below a queue's min offset are not
    /// held and not checked.
    pub fn wrong_units<'r>(
        &self,
        records: &'r [CheckedRecord],
    ) -> Vec<(&'r CheckedRecord, Option<CqUnit>)> {
        records
            .iter()
            .filter_map(|record| {
                let queue_offset = u64::try_from(record.queue_offset).ok();
                let found = self
                    .dispatcher
                    .queue(&record.topic, record.queue_id)
                    .and_then(|queue| {
                        let queue_offset = queue_offset?;
                        if queue_offset < queue.min_offset() {
                            return Some(Some(record.unit));
                        }
                        Some(queue.get(queue_offset))
                    })
                    .flatten();
                (found != Some(record.unit)).then_some((record, found))
            })
            .collect()
    }

    /// The store's ConsumeQueue tags code function and CommitLog segment size, which a walk
    /// over its CommitLog needs.
    pub fn layout(&self) -> (TagsCodeFn, u64) {
        (
            self.config.tags_code_fn,
            self.commit_log.segment_size_bytes(),
        )
    }

    /// Writes `bytes` (a peer's copy) over the CommitLog at `offset`. The range must lie
    /// within one segment, below the CommitLog end.
    pub fn repair_commit_log(&mut self, offset: i64, bytes: &[u8]) -> Result<(), StoreError> {
        let offset = crate::store::to_offset(offset, &self.commit_log)?;
        self.commit_log.overwrite(offset, bytes)
    }

    /// The first CommitLog block (of
    /// [`COMMIT_LOG_BLOCK_BYTES`](crate::store::commit_log_segment::COMMIT_LOG_BLOCK_BYTES))
    /// wholly in `[from, to)` whose bytes do not match its checksum, as its offset.
    pub fn damaged_commit_log_block(&self, from: i64, to: i64) -> Option<i64> {
        let (from, to) = (u64::try_from(from).ok()?, u64::try_from(to).ok()?);
        self.commit_log
            .damaged_block(from, to)
            .map(|offset| offset as i64)
    }

    /// The written bytes of the CommitLog block holding `offset`, and the block's offset.
    pub fn commit_log_block(&self, offset: i64) -> Result<(i64, Vec<u8>), StoreError> {
        let offset = crate::store::to_offset(offset, &self.commit_log)?;
        let (start, bytes) = self.commit_log.block_at(offset)?;
        Ok((start as i64, bytes.to_vec()))
    }

    /// The offset of the CommitLog block holding `offset`, if the CommitLog holds `offset`.
    pub fn commit_log_block_start(&self, offset: i64) -> Option<i64> {
        let offset = u64::try_from(offset).ok()?;
        let (start, _) = self.commit_log.block_at(offset).ok()?;
        Some(start as i64)
    }

    /// Whether `bytes` are what the checksum of the CommitLog block at `offset` covers: a
    /// peer's copy that does is the block as it was written.
    pub fn commit_log_block_matches(&self, offset: i64, bytes: &[u8]) -> bool {
        u64::try_from(offset).is_ok_and(|offset| self.commit_log.block_matches(offset, bytes))
    }

    /// Takes the checksum of the CommitLog block at `offset` anew: its bytes equal a peer's
    /// copy, so the checksum was what rotted.
    pub fn reseal_commit_log_block(&mut self, offset: i64) -> Result<(), StoreError> {
        let offset = crate::store::to_offset(offset, &self.commit_log)?;
        self.commit_log.reseal_block(offset)
    }

    /// Rewrites the unit at `queue_offset` of a queue that holds it already.
    pub fn repair_unit(
        &mut self,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
        unit: CqUnit,
    ) -> Result<(), StoreError> {
        self.dispatcher
            .queue_mut(topic, queue_id)?
            .overwrite(queue_offset, unit)?;
        self.reseal_block(topic, queue_id, queue_offset)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::config::default_tags_code;
    use crate::store::record::BLANK_MAGIC_CODE;
    use crate::store::record::tests::sample;

    const SEGMENT: u64 = 4096;

    fn record(queue_offset: i64, body: &[u8]) -> Vec<u8> {
        let mut record = sample("TopicA", 1, body);
        record.queue_offset = queue_offset;
        record.encode().expect("encode")
    }

    #[test]
    fn whole_records_and_a_filler_to_the_segment_end_walk_whole() {
        let mut bytes = record(0, b"one");
        bytes.extend(record(1, b"two"));
        let filler = SEGMENT as usize - bytes.len();
        bytes.extend((filler as i32).to_be_bytes());
        bytes.extend(BLANK_MAGIC_CODE.to_be_bytes());
        bytes.resize(SEGMENT as usize, 0);
        bytes.extend(record(2, b"three"));

        let walk = walk_records(0, &bytes, SEGMENT, default_tags_code);

        assert_eq!(
            walk.end,
            WalkEnd::Whole {
                next: bytes.len() as i64
            }
        );
        let offsets: Vec<(i64, i64)> = walk
            .records
            .iter()
            .map(|r| (r.offset, r.queue_offset))
            .collect();
        let second = record(0, b"one").len() as i64;
        assert_eq!(offsets, [(0, 0), (second, 1), (SEGMENT as i64, 2)]);
        assert_eq!(walk.records[0].unit.size, second as i32);
    }

    #[test]
    fn a_flipped_body_byte_is_damage_at_its_record() {
        let mut bytes = record(0, b"one");
        let second = bytes.len();
        bytes.extend(record(1, &[b'b'; 400]));
        // Inside the second record's body (the header is about 100 bytes).
        bytes[second + 300] ^= 0x01;

        let walk = walk_records(100, &bytes, SEGMENT, default_tags_code);

        assert_eq!(walk.records.len(), 1);
        assert!(
            matches!(walk.end, WalkEnd::Damaged { offset, .. } if offset == 100 + second as i64),
            "{:?}",
            walk.end
        );
    }

    #[test]
    fn a_record_cut_by_the_chunk_continues_and_one_past_its_segment_is_damage() {
        let bytes = record(0, b"cut");
        let walk = walk_records(0, &bytes[..50], SEGMENT, default_tags_code);
        assert_eq!(
            walk.end,
            WalkEnd::Continues {
                offset: 0,
                needed: bytes.len()
            }
        );

        let near_end = SEGMENT as i64 - 10;
        let walk = walk_records(near_end, &bytes, SEGMENT, default_tags_code);
        assert!(matches!(walk.end, WalkEnd::Damaged { offset, .. } if offset == near_end));
    }

    #[test]
    fn zeros_where_a_record_should_be_are_damage_not_the_end() {
        let mut bytes = record(0, b"one");
        let hole = bytes.len();
        bytes.resize(hole + 200, 0);
        let walk = walk_records(0, &bytes, SEGMENT, default_tags_code);
        assert_eq!(walk.records.len(), 1);
        assert!(
            matches!(walk.end, WalkEnd::Damaged { offset, .. } if offset == hole as i64),
            "{:?}",
            walk.end
        );
    }

    #[test]
    fn a_filler_that_stops_short_of_its_segment_end_is_damage() {
        let mut bytes = 64i32.to_be_bytes().to_vec();
        bytes.extend(BLANK_MAGIC_CODE.to_be_bytes());
        bytes.resize(64, 0);
        let walk = walk_records(0, &bytes, SEGMENT, default_tags_code);
        assert!(matches!(walk.end, WalkEnd::Damaged { offset: 0, .. }));
        assert_eq!(
            valid_entry_len(&bytes, SEGMENT as i64 - 64, SEGMENT),
            Ok(64)
        );
    }
}
