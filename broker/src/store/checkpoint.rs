//! The store checkpoint (`<dir>/checkpoint`): how far the CommitLog is durably flushed and
//! dispatched, plus totals that let recovery notice lost consume queues or index entries.
//!
//! Invariants: every record below `dispatched_offset` has its ConsumeQueue unit and index
//! entries durably written; the file is replaced atomically (write tmp, fsync, rename, fsync
//! dir) and carries a CRC, so it is either the old or the new checkpoint, never a mix; a
//! corrupt checkpoint is reported and treated as "recover from offset 0".

use std::fs;
use std::io::Write;
use std::path::Path;

use tracing::warn;

use crate::store::error::StoreError;
use crate::store::mapped_file::sync_dir;

/// Checkpoint file name inside the store directory.
pub const CHECKPOINT_FILE: &str = "checkpoint";
const CHECKPOINT_TMP_FILE: &str = "checkpoint.tmp";
const CHECKPOINT_MAGIC: u32 = 0x5252_4350; // "RRCP"
const CHECKPOINT_VERSION: u32 = 1;
/// Encoded size: magic, version, five u64 fields, CRC32.
const CHECKPOINT_SIZE: usize = 4 + 4 + 5 * 8 + 4;

/// The persisted checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checkpoint {
    /// CommitLog bytes below this offset are durable.
    pub commit_log_flushed_offset: u64,
    /// Records below this offset are in their ConsumeQueues and the index.
    pub dispatched_offset: u64,
    /// Number of consume queues at the time of the checkpoint.
    pub consume_queue_count: u64,
    /// Sum of the consume queues' max offsets at the time of the checkpoint.
    pub consume_queue_offset_sum: u64,
    /// Number of index entries at the time of the checkpoint.
    pub index_entry_count: u64,
}

/// How the checkpoint was found on open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointState {
    Missing,
    Valid,
    /// Unreadable content (bad size, magic, version or CRC): recovery starts from 0.
    Corrupt,
}

impl Checkpoint {
    fn encode(&self) -> [u8; CHECKPOINT_SIZE] {
        let mut out = [0u8; CHECKPOINT_SIZE];
        out[..4].copy_from_slice(&CHECKPOINT_MAGIC.to_be_bytes());
        out[4..8].copy_from_slice(&CHECKPOINT_VERSION.to_be_bytes());
        let fields = [
            self.commit_log_flushed_offset,
            self.dispatched_offset,
            self.consume_queue_count,
            self.consume_queue_offset_sum,
            self.index_entry_count,
        ];
        for (i, field) in fields.iter().enumerate() {
            out[8 + i * 8..16 + i * 8].copy_from_slice(&field.to_be_bytes());
        }
        let crc = crc32fast::hash(&out[..CHECKPOINT_SIZE - 4]);
        out[CHECKPOINT_SIZE - 4..].copy_from_slice(&crc.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Checkpoint> {
        let bytes: &[u8; CHECKPOINT_SIZE] = bytes.try_into().ok()?;
        let u32_at = |pos: usize| {
            u32::from_be_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]])
        };
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[8 + i * 8..16 + i * 8]);
            u64::from_be_bytes(b)
        };
        let crc_ok = crc32fast::hash(&bytes[..CHECKPOINT_SIZE - 4]) == u32_at(CHECKPOINT_SIZE - 4);
        if !crc_ok || u32_at(0) != CHECKPOINT_MAGIC || u32_at(4) != CHECKPOINT_VERSION {
            return None;
        }
        Some(Checkpoint {
            commit_log_flushed_offset: u64_at(0),
            dispatched_offset: u64_at(1),
            consume_queue_count: u64_at(2),
            consume_queue_offset_sum: u64_at(3),
            index_entry_count: u64_at(4),
        })
    }

    /// Reads the checkpoint in `store_dir`; missing or corrupt yields the zero checkpoint.
    pub fn load(store_dir: &Path) -> Result<(Checkpoint, CheckpointState), StoreError> {
        let path = store_dir.join(CHECKPOINT_FILE);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((Checkpoint::default(), CheckpointState::Missing));
            }
            Err(e) => return Err(StoreError::io("read checkpoint", &path, e)),
        };
        match Checkpoint::decode(&bytes) {
            Some(checkpoint) => Ok((checkpoint, CheckpointState::Valid)),
            None => {
                warn!(path = %path.display(), "corrupt checkpoint, recovering from offset 0");
                Ok((Checkpoint::default(), CheckpointState::Corrupt))
            }
        }
    }

    /// Atomically replaces the checkpoint in `store_dir`.
    pub fn store(&self, store_dir: &Path) -> Result<(), StoreError> {
        let tmp = store_dir.join(CHECKPOINT_TMP_FILE);
        let path = store_dir.join(CHECKPOINT_FILE);
        let mut file =
            fs::File::create(&tmp).map_err(|e| StoreError::io("create checkpoint", &tmp, e))?;
        file.write_all(&self.encode())
            .and_then(|()| file.sync_all())
            .map_err(|e| StoreError::io("write checkpoint", &tmp, e))?;
        drop(file);
        fs::rename(&tmp, &path).map_err(|e| StoreError::io("rename checkpoint", &path, e))?;
        sync_dir(store_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Checkpoint {
        Checkpoint {
            commit_log_flushed_offset: 4096,
            dispatched_offset: 4000,
            consume_queue_count: 3,
            consume_queue_offset_sum: 77,
            index_entry_count: 12,
        }
    }

    #[test]
    fn store_and_load_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            Checkpoint::load(dir.path()).expect("load"),
            (Checkpoint::default(), CheckpointState::Missing)
        );
        sample().store(dir.path()).expect("store");
        assert_eq!(
            Checkpoint::load(dir.path()).expect("load"),
            (sample(), CheckpointState::Valid)
        );
        assert!(!dir.path().join(CHECKPOINT_TMP_FILE).exists());
    }

    #[test]
    fn corrupt_checkpoint_recovers_from_zero() {
        let dir = tempfile::tempdir().expect("tempdir");
        sample().store(dir.path()).expect("store");
        let path = dir.path().join(CHECKPOINT_FILE);
        let mut bytes = fs::read(&path).expect("read");
        bytes[12] ^= 1;
        fs::write(&path, &bytes).expect("write");
        assert_eq!(
            Checkpoint::load(dir.path()).expect("load"),
            (Checkpoint::default(), CheckpointState::Corrupt)
        );
        fs::write(&path, b"short").expect("write");
        assert_eq!(
            Checkpoint::load(dir.path()).expect("load").1,
            CheckpointState::Corrupt
        );
    }
}
