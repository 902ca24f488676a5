//! Small state files that must survive a crash whole or not at all: the Raft vote, the
//! purge mark of the Raft log, the state machine checkpoint.
//!
//! A write goes to `<name>.tmp`, is fsynced, renamed over `<name>`, and the directory is
//! fsynced, so after a crash the file holds either the old or the new content. The content
//! is framed as `[crc32 u32 LE][len u32 LE][bytes]`; a frame that does not check out is
//! reported as [`DurableFileError::Corrupt`], never returned as data.

use std::io;
use std::path::Path;
use std::path::PathBuf;

use crate::disk::Disk;
use crate::disk::OsDisk;

const FRAME_HEADER_SIZE: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum DurableFileError {
    #[error("write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: &'static str },
}

impl From<DurableFileError> for io::Error {
    fn from(error: DurableFileError) -> Self {
        let kind = match &error {
            DurableFileError::Corrupt { .. } => io::ErrorKind::InvalidData,
            DurableFileError::Write { source, .. } | DurableFileError::Read { source, .. } => {
                source.kind()
            }
        };
        io::Error::new(kind, error)
    }
}

/// Replaces the content of `path` atomically and durably.
pub fn write_atomic(path: &Path, content: &[u8]) -> Result<(), DurableFileError> {
    write_atomic_on(&OsDisk, path, content)
}

/// [`write_atomic`] on `disk`.
pub fn write_atomic_on(
    disk: &dyn Disk,
    path: &Path,
    content: &[u8],
) -> Result<(), DurableFileError> {
    let write_error = |source| DurableFileError::Write {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let len = u32::try_from(content.len()).map_err(|_| {
        write_error(io::Error::new(
            io::ErrorKind::InvalidInput,
            "durable file larger than 4 GiB",
        ))
    })?;
    let mut frame = Vec::with_capacity(FRAME_HEADER_SIZE + content.len());
    frame.extend_from_slice(&crc32fast::hash(content).to_le_bytes());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(content);
    let file = disk.create(&tmp).map_err(write_error)?;
    file.write_all_at(&frame, 0).map_err(write_error)?;
    file.sync_data().map_err(write_error)?;
    disk.rename(&tmp, path).map_err(write_error)?;
    disk.sync_parent_dir(path).map_err(write_error)
}

/// Reads a file written by [`write_atomic`]; `Ok(None)` if it does not exist.
pub fn read(path: &Path) -> Result<Option<Vec<u8>>, DurableFileError> {
    read_on(&OsDisk, path)
}

/// [`read`] on `disk`.
pub fn read_on(disk: &dyn Disk, path: &Path) -> Result<Option<Vec<u8>>, DurableFileError> {
    let frame = match disk.read(path) {
        Ok(frame) => frame,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(DurableFileError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let corrupt = |reason| DurableFileError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let (header, content) = frame
        .split_at_checked(FRAME_HEADER_SIZE)
        .ok_or_else(|| corrupt("shorter than its header"))?;
    let crc = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if usize::try_from(len).ok() != Some(content.len()) {
        return Err(corrupt("length does not match the header"));
    }
    if crc32fast::hash(content) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    Ok(Some(content.to_vec()))
}

/// Makes a create, rename or delete in the directory of `path` durable.
pub fn sync_parent_dir(path: &Path) -> io::Result<()> {
    OsDisk.sync_parent_dir(path)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn round_trip_and_replace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("vote");
        assert!(read(&path).expect("read missing").is_none());
        write_atomic(&path, b"first").expect("write");
        write_atomic(&path, b"second, longer").expect("replace");
        assert_eq!(
            read(&path).expect("read").as_deref(),
            Some(&b"second, longer"[..])
        );
    }

    #[test]
    fn flipped_bit_is_reported_as_corrupt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("vote");
        write_atomic(&path, b"term 7").expect("write");
        let mut bytes = fs::read(&path).expect("raw read");
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        fs::write(&path, &bytes).expect("raw write");
        assert!(matches!(read(&path), Err(DurableFileError::Corrupt { .. })));
        fs::write(&path, &bytes[..3]).expect("raw write");
        assert!(matches!(read(&path), Err(DurableFileError::Corrupt { .. })));
    }
}
