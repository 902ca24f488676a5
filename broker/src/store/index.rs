//! `Index`: message keys and unique ids to CommitLog offsets, for `query-msg`.
//!
//! Stored as one append-only file `<dir>/index/entries` of fixed 16-byte entries
//! (u64 FNV-1a hash of the key, i64 CommitLog offset, big-endian), loaded into memory on open.
//! Invariants: entries are in non-decreasing CommitLog offset order (so truncation is a cut of
//! the file's tail); a (hash, offset) pair is stored once; a hash only names candidates, so
//! callers verify the key against the record read back (hash collisions).
//!
//! In memory, as in RocketMQ's hash-slot index files, each hash maps to its newest entry and
//! every entry links to the previous entry of its hash: an add is O(1) and allocates nothing
//! beyond amortized vector growth, and a lookup walks one key's chain newest first.

use std::collections::HashMap;
use std::collections::hash_map::Entry as MapEntry;
use std::fs::{File, OpenOptions};
use std::hash::BuildHasherDefault;
use std::hash::Hasher;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::warn;

use crate::store::error::StoreError;
use crate::store::mapped_file;
use crate::store::mapped_file::FlushTarget;

/// Bytes per index entry: key hash u64 + CommitLog offset i64.
pub const INDEX_ENTRY_SIZE: usize = 16;
const _: () = assert!(INDEX_ENTRY_SIZE == 8 + 8);
/// Sub-directory of the store holding the index.
pub const INDEX_DIR: &str = "index";
/// Name of the index entries file.
pub const INDEX_FILE: &str = "entries";

/// Stable 64-bit FNV-1a hash of a key (must never change: it is persisted).
pub fn key_hash(key: &str) -> u64 {
    const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    key.bytes().fold(FNV_OFFSET_BASIS, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    hash: u64,
    offset: i64,
}

/// No entry: the end of a hash chain.
const NO_ENTRY: u32 = u32::MAX;

/// Keys of `newest` are FNV-1a hashes already; hashing them again would only cost time.
#[derive(Debug, Default)]
struct KeyHashIdentity(u64);

impl Hasher for KeyHashIdentity {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 << 8) | u64::from(*byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// The key index.
#[derive(Debug)]
pub struct Index {
    path: PathBuf,
    file: Arc<File>,
    entries: Vec<Entry>,
    /// For each entry, the previous entry with the same hash ([`NO_ENTRY`] if none).
    previous: Vec<u32>,
    /// The newest entry of each hash.
    newest: HashMap<u64, u32, BuildHasherDefault<KeyHashIdentity>>,
    /// Entries `[0, persisted)` are in the file.
    persisted: usize,
}

impl Index {
    /// Opens (creating if needed) the index and loads it, dropping a torn or invalid tail.
    pub fn open(store_dir: &Path) -> Result<Index, StoreError> {
        let dir = store_dir.join(INDEX_DIR);
        mapped_file::create_dir_durable(&dir)?;
        let path = dir.join(INDEX_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| StoreError::io("open index", &path, e))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| StoreError::io("read index", &path, e))?;
        let entries = parse_entries(&bytes);
        let valid_len = entries.len() * INDEX_ENTRY_SIZE;
        if valid_len < bytes.len() {
            warn!(
                path = %path.display(),
                bytes_truncated = bytes.len() - valid_len,
                "index: truncated torn tail"
            );
            file.set_len(valid_len as u64)
                .and_then(|()| file.sync_data())
                .map_err(|e| StoreError::io("truncate index", &path, e))?;
        }
        let mut index = Index {
            path,
            file: Arc::new(file),
            persisted: entries.len(),
            entries,
            previous: Vec::new(),
            newest: HashMap::default(),
        };
        index.rebuild_map();
        Ok(index)
    }

    fn rebuild_map(&mut self) {
        self.newest.clear();
        self.previous.clear();
        for slot in 0..self.entries.len() {
            self.link(slot);
        }
    }

    /// Makes entry `slot` the newest of its hash.
    fn link(&mut self, slot: usize) {
        let slot = slot as u32;
        let previous = self
            .newest
            .insert(self.entries[slot as usize].hash, slot)
            .unwrap_or(NO_ENTRY);
        self.previous.push(previous);
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Maps `key` to the record at `offset`. Re-adding an existing pair is a no-op; a new
    /// pair older than the last entry is an error (entries must stay in offset order). One
    /// probe of the hash map finds the key's chain and links the new entry.
    pub fn add(&mut self, key: &str, offset: i64) -> Result<(), StoreError> {
        let hash = key_hash(key);
        let slot = self.entries.len();
        let Index {
            entries,
            previous,
            newest,
            ..
        } = self;
        let head = newest.entry(hash);
        let newest_of_hash = match &head {
            MapEntry::Occupied(occupied) => *occupied.get(),
            MapEntry::Vacant(_) => NO_ENTRY,
        };
        // Entries are in offset order: a pair at or after the last offset can only be stored
        // as its hash's newest entry; an older one (re-dispatch after a restart) is looked
        // for down its hash's chain, which ends before any smaller offset.
        let stored = chain(entries, previous, newest_of_hash)
            .take_while(|stored| *stored >= offset)
            .any(|stored| stored == offset);
        if stored {
            return Ok(());
        }
        if let Some(last) = entries.last()
            && offset < last.offset
        {
            return Err(StoreError::IndexOutOfOrder {
                offset,
                last: last.offset,
            });
        }
        if slot >= NO_ENTRY as usize {
            return Err(StoreError::IndexFull { entries: slot });
        }
        entries.push(Entry { hash, offset });
        previous.push(newest_of_hash);
        match head {
            MapEntry::Occupied(mut occupied) => *occupied.get_mut() = slot as u32,
            MapEntry::Vacant(vacant) => {
                vacant.insert(slot as u32);
            }
        }
        Ok(())
    }

    /// Candidate CommitLog offsets for `key`, newest first (verify against the record).
    pub fn lookup(&self, key: &str) -> impl Iterator<Item = i64> + '_ {
        let newest = self.newest.get(&key_hash(key)).copied().unwrap_or(NO_ENTRY);
        chain(&self.entries, &self.previous, newest)
    }

    /// Drops entries pointing at or beyond CommitLog offset `end`; returns how many.
    pub fn truncate(&mut self, end: u64) -> Result<usize, StoreError> {
        let keep = self.entries.partition_point(|e| (e.offset as u64) < end);
        let dropped = self.entries.len() - keep;
        if dropped == 0 {
            return Ok(0);
        }
        self.entries.truncate(keep);
        if keep < self.persisted {
            self.file
                .set_len((keep * INDEX_ENTRY_SIZE) as u64)
                .map_err(|e| StoreError::io("truncate index", &self.path, e))?;
            self.persisted = keep;
        }
        self.rebuild_map();
        Ok(dropped)
    }

    /// Writes new entries and fsyncs the file.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.begin_flush()?.sync()
    }

    /// Writes new entries to the file (not yet durably) and returns what makes them durable.
    pub fn begin_flush(&mut self) -> Result<FlushTarget, StoreError> {
        let pending = &self.entries[self.persisted..];
        let mut bytes = Vec::with_capacity(pending.len() * INDEX_ENTRY_SIZE);
        for entry in pending {
            bytes.extend_from_slice(&entry.hash.to_be_bytes());
            bytes.extend_from_slice(&entry.offset.to_be_bytes());
        }
        self.file
            .write_all_at(&bytes, (self.persisted * INDEX_ENTRY_SIZE) as u64)
            .map_err(|e| StoreError::io("flush index", &self.path, e))?;
        self.persisted = self.entries.len();
        Ok(FlushTarget::new(self.file.clone(), self.path.clone()))
    }
}

/// The offsets of the chain that starts at entry `slot`, newest first.
fn chain<'a>(
    entries: &'a [Entry],
    previous: &'a [u32],
    mut slot: u32,
) -> impl Iterator<Item = i64> + 'a {
    std::iter::from_fn(move || {
        let entry = entries.get(slot as usize)?;
        slot = previous[slot as usize];
        Some(entry.offset)
    })
}

/// Whole entries from the start of `bytes`, stopping at a torn entry, a negative offset or
/// an offset going backwards.
fn parse_entries(bytes: &[u8]) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::with_capacity(bytes.len() / INDEX_ENTRY_SIZE);
    for chunk in bytes.chunks_exact(INDEX_ENTRY_SIZE) {
        let mut hash = [0u8; 8];
        let mut offset = [0u8; 8];
        hash.copy_from_slice(&chunk[..8]);
        offset.copy_from_slice(&chunk[8..]);
        let entry = Entry {
            hash: u64::from_be_bytes(hash),
            offset: i64::from_be_bytes(offset),
        };
        let in_order = entries
            .last()
            .is_none_or(|last| entry.offset >= last.offset);
        if entry.offset < 0 || !in_order {
            break;
        }
        entries.push(entry);
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_stable() {
        assert_eq!(key_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(key_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn add_lookup_dedup_and_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = Index::open(dir.path()).expect("open");
        index.add("k1", 0).expect("add");
        index.add("k2", 0).expect("add");
        index.add("k1", 100).expect("add");
        index.add("k1", 100).expect("duplicate is a no-op");
        assert_eq!(index.lookup("k1").collect::<Vec<_>>(), [100, 0]);
        assert_eq!(index.lookup("nope").count(), 0);
        assert_eq!(index.len(), 3);
        assert!(matches!(
            index.add("k3", 50),
            Err(StoreError::IndexOutOfOrder { .. })
        ));
    }

    #[test]
    fn re_adding_an_older_stored_pair_is_a_no_op() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = Index::open(dir.path()).expect("open");
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
        assert_eq!(index.lookup("reused").collect::<Vec<_>>(), [30, 20, 10, 0]);
    }

    #[test]
    fn persists_truncates_and_drops_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut index = Index::open(dir.path()).expect("open");
        for i in 0..10 {
            index.add(&format!("k{i}"), i * 10).expect("add");
        }
        index.flush().expect("flush");
        assert_eq!(index.truncate(55).expect("truncate"), 4);
        index.add("k9", 90).expect("add");
        index.flush().expect("flush");
        drop(index);
        let path = dir.path().join(INDEX_DIR).join(INDEX_FILE);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes.extend_from_slice(&[1, 2, 3]);
        std::fs::write(&path, &bytes).expect("write");
        let index = Index::open(dir.path()).expect("reopen");
        assert_eq!(index.len(), 7);
        assert_eq!(index.lookup("k9").collect::<Vec<_>>(), [90]);
        assert_eq!(index.lookup("k6").count(), 0);
        assert_eq!(
            std::fs::read(&path).expect("read").len(),
            7 * INDEX_ENTRY_SIZE
        );
    }
}
