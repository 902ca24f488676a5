//! One file of the Raft log: consecutive entries starting at the index in its name.
//!
//! A record is `[len u32 LE][entry crc32 u32 LE][header crc32 u32 LE][entry bytes]`, the
//! header checksum covering the first eight bytes. The file only grows, except when a
//! conflicting tail is truncated. Recovery keeps the longest prefix of records whose header,
//! checksum and index check out and cuts the rest.
//!
//! Torn or damaged: a crash can leave only an incomplete last record (a header or entry that
//! runs past the end of the file, or zeros where nothing was written), since the filesystem
//! (ext4, XFS) exposes appended bytes only once they are written. With `flush = sync` such a
//! cut loses only entries whose append was never acknowledged, as acknowledgement waits for
//! fsync; with `flush = async` a power loss can also cut acknowledged entries the OS had not
//! written back (a killed process loses nothing: its writes are in the page cache). Anything
//! else that fails a check (a whole header or a whole entry with a bad checksum, an index out
//! of sequence) is damage to bytes written before, and so is a valid record after the cut:
//! recovery reports the highest index the damaged range held, so the node treats those entries
//! as acknowledged and lost (see `raft::repair`).

use std::io;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use openraft::entry::RaftEntry;

use crate::disk::Disk;
use crate::disk::DiskFile;
use crate::raft::codec;
use crate::raft::types::Entry;

/// Header of every record: length and checksum of the encoded entry, and the header's own
/// checksum.
pub const RECORD_HEADER_SIZE: u64 = 12;
/// The largest encoded entry accepted. A group-commit batch is bounded well below it; a larger
/// length while scanning is a corrupt header, not a reason to allocate gigabytes.
pub const ENTRY_SIZE_MAX: u32 = 256 * 1024 * 1024;
/// Segment files are named `<first index, 20 digits>.log`.
const SEGMENT_SUFFIX: &str = "log";

/// What [`LogSegment::recover`] found.
#[derive(Debug)]
pub struct SegmentRecovery {
    /// The segment, holding its valid prefix.
    pub segment: LogSegment,
    /// Bytes cut after the valid prefix.
    pub bytes_truncated: u64,
    /// The highest index of a valid record found beyond the cut: set only when the cut was
    /// damage to written data, not a torn last write.
    pub damaged_up_to: Option<u64>,
}

/// Where one entry's record lives in its segment.
#[derive(Debug, Clone, Copy)]
struct RecordLocation {
    position: u64,
    len: u32,
}

/// Records encoded for one append. Headers and small fields are encoded into one buffer
/// that keeps its capacity from append to append; each entry's record bytes (its command's
/// [`codec::shared_bytes`] fields) stay where they are and are written from there, so a
/// segment append copies them only into the file.
#[derive(Debug, Default)]
pub struct RecordBatch {
    copied: Vec<u8>,
    /// The batch's bytes in write order.
    parts: Vec<BatchPart>,
    /// Where the run of `copied` not yet in `parts` starts.
    copied_from: usize,
    /// Encoded length of each record's entry, in order.
    lens: Vec<u32>,
    size_bytes: u64,
}

#[derive(Debug)]
enum BatchPart {
    Copied(std::ops::Range<usize>),
    Shared(Bytes),
}

impl RecordBatch {
    /// Capacity kept across appends; a larger buffer (one huge batch) is released.
    const RETAINED_BYTES_MAX: usize = 16 * 1024 * 1024;

    /// Encodes `entry` as the next record and returns the length of its encoding.
    pub fn push(&mut self, entry: &Entry) -> io::Result<u32> {
        let (header_at, parts_before, run_before) =
            (self.copied.len(), self.parts.len(), self.copied_from);
        self.copied
            .extend_from_slice(&[0; RECORD_HEADER_SIZE as usize]);
        let mut body = RecordBody {
            batch: self,
            crc: crc32fast::Hasher::new(),
            len: 0,
        };
        let encoded = codec::encode_shared("raft log entry", entry, &mut body)
            .map_err(io::Error::from)
            .map(|()| (body.len, body.crc.finalize()));
        let len = encoded.and_then(|(len, crc)| {
            let len = u32::try_from(len)
                .ok()
                .filter(|len| *len <= ENTRY_SIZE_MAX)
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("raft entry of {len} bytes exceeds {ENTRY_SIZE_MAX}"),
                    )
                })?;
            Ok((len, crc))
        });
        let (len, crc) = match len {
            Ok(encoded) => encoded,
            Err(error) => {
                self.copied.truncate(header_at);
                self.parts.truncate(parts_before);
                self.copied_from = run_before;
                return Err(error);
            }
        };
        let header = &mut self.copied[header_at..header_at + RECORD_HEADER_SIZE as usize];
        header[..4].copy_from_slice(&len.to_le_bytes());
        header[4..8].copy_from_slice(&crc.to_le_bytes());
        let header_crc = crc32fast::hash(&header[..8]);
        header[8..].copy_from_slice(&header_crc.to_le_bytes());
        self.lens.push(len);
        self.size_bytes += RECORD_HEADER_SIZE + u64::from(len);
        Ok(len)
    }

    /// Ends the run of copied bytes that [`BatchPart::Copied`] will cover.
    fn end_copied_run(&mut self) {
        if self.copied_from < self.copied.len() {
            self.parts
                .push(BatchPart::Copied(self.copied_from..self.copied.len()));
            self.copied_from = self.copied.len();
        }
    }

    /// The batch's bytes in write order.
    fn io_slices(&mut self) -> Vec<io::IoSlice<'_>> {
        self.end_copied_run();
        self.parts
            .iter()
            .map(|part| match part {
                BatchPart::Copied(range) => io::IoSlice::new(&self.copied[range.clone()]),
                BatchPart::Shared(bytes) => io::IoSlice::new(bytes),
            })
            .collect()
    }

    /// Number of records in the batch.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// Bytes the batch adds to a segment.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Empties the batch (releasing the entries' bytes it refers to), keeping a bounded
    /// capacity for the next one.
    pub fn clear(&mut self) {
        self.copied.clear();
        self.parts.clear();
        self.copied_from = 0;
        self.lens.clear();
        self.size_bytes = 0;
        if self.copied.capacity() > Self::RETAINED_BYTES_MAX {
            self.copied.shrink_to(Self::RETAINED_BYTES_MAX);
        }
    }
}

/// One record's entry being encoded into a [`RecordBatch`], with its length and checksum.
struct RecordBody<'a> {
    batch: &'a mut RecordBatch,
    crc: crc32fast::Hasher,
    len: usize,
}

impl codec::SharedWrite for RecordBody<'_> {
    fn copy(&mut self, bytes: &[u8]) {
        self.crc.update(bytes);
        self.len += bytes.len();
        self.batch.copied.extend_from_slice(bytes);
    }

    fn share(&mut self, bytes: Bytes) {
        self.crc.update(&bytes);
        self.len += bytes.len();
        self.batch.end_copied_run();
        self.batch.parts.push(BatchPart::Shared(bytes));
    }
}

#[derive(Debug)]
pub struct LogSegment {
    first_index: u64,
    path: PathBuf,
    disk: Arc<dyn Disk>,
    file: Arc<dyn DiskFile>,
    records: Vec<RecordLocation>,
    size_bytes: u64,
}

impl LogSegment {
    /// Creates an empty segment file. Its directory entry is durable only once the caller
    /// syncs `dir` (the log store's flusher does, before an entry in it is acknowledged).
    pub fn create(disk: &Arc<dyn Disk>, dir: &Path, first_index: u64) -> io::Result<LogSegment> {
        let path = dir.join(format!("{first_index:020}.{SEGMENT_SUFFIX}"));
        let file = disk.create_new(&path)?;
        Ok(LogSegment {
            first_index,
            path,
            disk: disk.clone(),
            file,
            records: Vec::new(),
            size_bytes: 0,
        })
    }

    /// The segment files of `dir`, ordered by first index.
    pub fn list(disk: &dyn Disk, dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
        let mut found = Vec::new();
        for path in disk.list(dir)? {
            if path.extension().and_then(|e| e.to_str()) != Some(SEGMENT_SUFFIX) {
                continue;
            }
            let first_index = path
                .file_stem()
                .and_then(|s| s.to_str()?.parse::<u64>().ok());
            match first_index {
                Some(first_index) => found.push((first_index, path)),
                None => {
                    tracing::warn!(path = %path.display(), "ignoring file with a non-numeric name")
                }
            }
        }
        found.sort_unstable_by_key(|(first_index, _)| *first_index);
        Ok(found)
    }

    /// Opens a segment and keeps its longest valid prefix, cutting the rest.
    pub fn recover(
        disk: &Arc<dyn Disk>,
        first_index: u64,
        path: PathBuf,
    ) -> io::Result<SegmentRecovery> {
        let file = disk.open(&path)?;
        let bytes = disk.read(&path)?;
        let mut records = Vec::new();
        let mut position = 0u64;
        let damaged_at_cut = loop {
            match record_at(&bytes, position, Some(first_index + records.len() as u64)) {
                RecordAt::Valid { len, .. } => {
                    records.push(RecordLocation { position, len });
                    position += RECORD_HEADER_SIZE + u64::from(len);
                }
                RecordAt::Incomplete => break false,
                RecordAt::Damaged => break true,
            }
        };
        let bytes_truncated = bytes.len() as u64 - position;
        let cut_index = first_index + records.len() as u64;
        let damaged_up_to = if bytes_truncated > 0 {
            let found = last_index_after(&bytes, position + 1, cut_index);
            file.set_len(position)?;
            file.sync_data()?;
            // The record at the cut was written whole: it held the entry at `cut_index`.
            found.or(damaged_at_cut.then_some(cut_index))
        } else {
            None
        };
        let segment = LogSegment {
            first_index,
            path,
            disk: disk.clone(),
            file,
            records,
            size_bytes: position,
        };
        Ok(SegmentRecovery {
            segment,
            bytes_truncated,
            damaged_up_to,
        })
    }

    pub fn first_index(&self) -> u64 {
        self.first_index
    }

    /// Index one past the last entry of this segment.
    pub fn end_index(&self) -> u64 {
        self.first_index + self.records.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn file(&self) -> &Arc<dyn DiskFile> {
        &self.file
    }

    /// Appends the batch's records, the first of which has index [`Self::end_index`], with
    /// one vectored write. The data is readable at once and durable after the file is synced.
    pub fn append(&mut self, batch: &mut RecordBatch) -> io::Result<()> {
        self.file
            .write_all_vectored_at(&mut batch.io_slices(), self.size_bytes)?;
        let mut position = self.size_bytes;
        self.records.extend(batch.lens.iter().map(|&len| {
            let location = RecordLocation { position, len };
            position += RECORD_HEADER_SIZE + u64::from(len);
            location
        }));
        self.size_bytes = position;
        Ok(())
    }

    /// Reads the entry at `index`, which must lie in this segment.
    pub fn read(&self, index: u64) -> io::Result<(Entry, u32)> {
        let location = usize::try_from(index - self.first_index)
            .ok()
            .and_then(|slot| self.records.get(slot))
            .copied()
            .ok_or_else(|| io::Error::other(format!("log index {index} not in {:?}", self.path)))?;
        let mut record = vec![0u8; RECORD_HEADER_SIZE as usize + location.len as usize];
        self.file.read_exact_at(&mut record, location.position)?;
        let record = bytes::Bytes::from(record);
        let (header, body) = (
            &record[..RECORD_HEADER_SIZE as usize],
            record.slice(RECORD_HEADER_SIZE as usize..),
        );
        if !header_checks_out(header) || crc32fast::hash(&body) != entry_crc(header) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "raft log entry {index} in {:?} fails its checksum",
                    self.path
                ),
            ));
        }
        // The entry's records stay in the buffer read: no second copy.
        let entry: Entry = codec::decode_shared("raft log entry", &body)?;
        Ok((entry, location.len))
    }

    /// Drops every entry from `index` on and makes the cut durable.
    pub fn truncate_from(&mut self, index: u64) -> io::Result<()> {
        let keep = usize::try_from(index.saturating_sub(self.first_index)).unwrap_or(usize::MAX);
        if keep >= self.records.len() {
            return Ok(());
        }
        let cut_at = self.records[keep].position;
        self.records.truncate(keep);
        self.file.set_len(cut_at)?;
        self.file.sync_data()?;
        self.size_bytes = cut_at;
        Ok(())
    }

    pub fn delete(self) -> io::Result<()> {
        self.disk.remove_file(&self.path)?;
        self.disk.sync_parent_dir(&self.path)
    }
}

/// The highest index of the valid records at or after byte `from` whose indexes are at least
/// `min_index`, trying every byte as a record start; `None` if there is none.
fn last_index_after(bytes: &[u8], from: u64, min_index: u64) -> Option<u64> {
    let mut highest = None;
    let mut position = from;
    while position + RECORD_HEADER_SIZE <= bytes.len() as u64 {
        match record_at(bytes, position, None) {
            RecordAt::Valid { len, index } => {
                if index >= min_index {
                    highest = highest.max(Some(index));
                }
                position += RECORD_HEADER_SIZE + u64::from(len);
            }
            RecordAt::Incomplete | RecordAt::Damaged => position += 1,
        }
    }
    highest
}

/// What [`record_at`] found.
enum RecordAt {
    Valid {
        len: u32,
        index: u64,
    },
    /// The end of what was written: a header or entry running past the end of the file, or
    /// an all-zero header.
    Incomplete,
    /// A whole record that fails a check: damage, not a torn write.
    Damaged,
}

fn header_checks_out(header: &[u8]) -> bool {
    crc32fast::hash(&header[..8])
        == u32::from_le_bytes([header[8], header[9], header[10], header[11]])
}

fn entry_crc(header: &[u8]) -> u32 {
    u32::from_le_bytes([header[4], header[5], header[6], header[7]])
}

/// The record at `position`, whose index must be `expected_index` if one is given.
fn record_at(bytes: &[u8], position: u64, expected_index: Option<u64>) -> RecordAt {
    let Some(start) = usize::try_from(position).ok() else {
        return RecordAt::Incomplete;
    };
    let Some(header) = bytes.get(start..start.saturating_add(RECORD_HEADER_SIZE as usize)) else {
        return RecordAt::Incomplete;
    };
    if header.iter().all(|byte| *byte == 0) {
        return RecordAt::Incomplete;
    }
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    if !header_checks_out(header) || len == 0 || len > ENTRY_SIZE_MAX {
        return RecordAt::Damaged;
    }
    let body_start = start + RECORD_HEADER_SIZE as usize;
    let Some(body) = bytes.get(body_start..body_start + len as usize) else {
        return RecordAt::Incomplete;
    };
    if crc32fast::hash(body) != entry_crc(header) {
        return RecordAt::Damaged;
    }
    let Ok(entry) = codec::decode::<Entry>("raft log entry", body) else {
        return RecordAt::Damaged;
    };
    let index = entry.index();
    if expected_index.is_some_and(|expected| index != expected) {
        return RecordAt::Damaged;
    }
    RecordAt::Valid { len, index }
}

#[cfg(test)]
mod tests {
    use openraft::EntryPayload;

    use super::*;
    use crate::disk::OsDisk;
    use crate::raft::types::LogId;
    use crate::state_machine::command::Command;

    fn append(index: u64, records: Bytes) -> Entry {
        Entry {
            log_id: LogId::new_term_index(2, index),
            payload: EntryPayload::Normal(Command::Append { records }),
        }
    }

    #[test]
    fn a_batch_writes_each_record_as_header_and_encoded_entry_with_the_records_not_copied() {
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = OsDisk::shared();
        let entries = [
            append(1, Bytes::from(vec![1u8; 5000])),
            Entry {
                log_id: LogId::new_term_index(2, 2),
                payload: EntryPayload::Blank,
            },
            append(3, Bytes::new()),
            append(4, Bytes::from(vec![4u8; 70])),
        ];
        let mut batch = RecordBatch::default();
        for entry in &entries {
            batch.push(entry).expect("push");
        }
        let shared: Vec<*const u8> = batch
            .parts
            .iter()
            .filter_map(|part| match part {
                BatchPart::Shared(bytes) => Some(bytes.as_ptr()),
                BatchPart::Copied(_) => None,
            })
            .collect();
        let records_of = |entry: &Entry| match &entry.payload {
            EntryPayload::Normal(Command::Append { records }) => records.as_ptr(),
            _ => unreachable!("an append"),
        };
        assert_eq!(
            shared,
            vec![records_of(&entries[0]), records_of(&entries[3])],
            "non-empty records are written from where they are"
        );

        let mut expected = Vec::new();
        for entry in &entries {
            let encoded = codec::encode("entry", entry).expect("encode");
            let len = (encoded.len() as u32).to_le_bytes();
            let crc = crc32fast::hash(&encoded).to_le_bytes();
            let header_crc = crc32fast::hash(&[len, crc].concat()).to_le_bytes();
            expected.extend([len, crc, header_crc].concat());
            expected.extend(encoded);
        }
        assert_eq!(batch.size_bytes(), expected.len() as u64);
        let mut segment = LogSegment::create(&disk, dir.path(), 1).expect("create");
        segment.append(&mut batch).expect("append");
        batch.clear();
        assert_eq!(disk.read(&segment.path).expect("read"), expected);

        let recovered = LogSegment::recover(&disk, 1, segment.path.clone()).expect("recover");
        assert_eq!(recovered.bytes_truncated, 0);
        for entry in &entries {
            let (read, _) = recovered.segment.read(entry.log_id.index).expect("read");
            assert_eq!(&read, entry);
        }
    }

    #[test]
    fn an_entry_over_the_size_limit_is_refused_and_leaves_the_batch_as_it_was() {
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = OsDisk::shared();
        let (before, after) = (
            append(1, Bytes::from(vec![1u8; 300])),
            append(2, Bytes::from(vec![2u8; 300])),
        );
        // Zeroed memory the encoder only reads: the kernel maps it lazily.
        let oversized = append(2, Bytes::from(vec![0u8; ENTRY_SIZE_MAX as usize + 1]));
        let mut batch = RecordBatch::default();
        batch.push(&before).expect("push");
        let refused = batch.push(&oversized).expect_err("over ENTRY_SIZE_MAX");
        assert_eq!(refused.kind(), io::ErrorKind::InvalidInput);
        assert!(refused.to_string().contains("exceeds"), "{refused}");
        batch.push(&after).expect("push");
        assert_eq!(batch.len(), 2);

        let mut segment = LogSegment::create(&disk, dir.path(), 1).expect("create");
        segment.append(&mut batch).expect("append");
        assert_eq!(segment.size_bytes(), batch.size_bytes());
        let recovered = LogSegment::recover(&disk, 1, segment.path.clone()).expect("recover");
        assert_eq!(recovered.bytes_truncated, 0);
        assert_eq!(recovered.segment.read(1).expect("read").0, before);
        assert_eq!(recovered.segment.read(2).expect("read").0, after);
    }
}
