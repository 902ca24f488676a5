//! The disk seam of the Raft log: every file operation of its segments and durable files
//! (vote, purge mark, repair mark) goes through a [`Disk`], so a simulation can stand in for
//! the operating system and decide what a crash keeps (see `sim_disk`, tests only).
//!
//! [`OsDisk`] is the real one: each call is the matching `std::fs` call (a vectored write is
//! `pwritev`). Durability follows
//! POSIX: a file's data (and length) is durable after [`DiskFile::sync_data`], a create,
//! rename or remove in a directory after [`Disk::sync_dir`] of that directory.

use std::fmt::Debug;
use std::fs;
use std::fs::File;
use std::fs::OpenOptions;
use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;

/// An open file.
pub trait DiskFile: Send + Sync + Debug {
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()>;
    /// Writes `parts` one after another from `offset`, as one `write_all_at` of their
    /// concatenation would (the OS file does it with `pwritev`, without concatenating).
    fn write_all_vectored_at(&self, parts: &mut [IoSlice<'_>], offset: u64) -> io::Result<()> {
        let mut offset = offset;
        for part in parts.iter() {
            self.write_all_at(part, offset)?;
            offset += part.len() as u64;
        }
        Ok(())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data and length durable.
    fn sync_data(&self) -> io::Result<()>;
}

/// Files and directories.
pub trait Disk: Send + Sync + Debug {
    /// Creates `path`, which must not exist, for reading and writing.
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>>;
    /// Creates `path` or empties it, for reading and writing.
    fn create(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>>;
    /// The whole content of `path`.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The paths of the entries of `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the creates, renames and removes in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Syncs the directory holding `path`.
    fn sync_parent_dir(&self, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => self.sync_dir(dir),
            _ => Ok(()),
        }
    }
}

/// The operating system's disk.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsDisk;

impl OsDisk {
    /// A shared handle, for the places that take any [`Disk`].
    pub fn shared() -> Arc<dyn Disk> {
        Arc::new(OsDisk)
    }
}

/// The most buffers one `pwritev` takes (Linux's `UIO_MAXIOV`).
const PARTS_PER_WRITE_MAX: usize = 1024;

impl DiskFile for File {
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        FileExt::write_all_at(self, bytes, offset)
    }

    fn write_all_vectored_at(&self, parts: &mut [IoSlice<'_>], offset: u64) -> io::Result<()> {
        let mut parts = parts;
        let mut offset = offset;
        IoSlice::advance_slices(&mut parts, 0);
        while !parts.is_empty() {
            let count = parts.len().min(PARTS_PER_WRITE_MAX);
            let at = libc::off_t::try_from(offset)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset"))?;
            // SAFETY: `IoSlice` has the layout of `iovec` on Unix, and the first `count` of
            // `parts` are valid buffers that outlive the call.
            let written = unsafe {
                libc::pwritev(
                    self.as_raw_fd(),
                    parts.as_ptr().cast::<libc::iovec>(),
                    count as libc::c_int,
                    at,
                )
            };
            match written {
                ..0 => {
                    let error = io::Error::last_os_error();
                    if error.kind() != io::ErrorKind::Interrupted {
                        return Err(error);
                    }
                }
                0 => return Err(io::ErrorKind::WriteZero.into()),
                written => {
                    IoSlice::advance_slices(&mut parts, written as usize);
                    offset += written as u64;
                }
            }
        }
        Ok(())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }

    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }
}

impl Disk for OsDisk {
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Arc::new(file))
    }

    fn create(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Arc::new(file))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Arc::new(file))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        fs::read_dir(dir)?
            .map(|entry| entry.map(|entry| entry.path()))
            .collect()
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vectored_write_of_more_parts_than_one_call_takes_writes_them_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("file");
        let file = OsDisk.create_new(&path).expect("create");
        file.write_all_at(b"head", 0).expect("write");
        // Empty parts too, and more parts than one `pwritev` takes.
        let owned: Vec<Vec<u8>> = (0..PARTS_PER_WRITE_MAX * 2 + 5)
            .map(|i| vec![(i % 251) as u8; i % 7])
            .collect();
        let mut parts: Vec<IoSlice<'_>> = owned.iter().map(|part| IoSlice::new(part)).collect();
        file.write_all_vectored_at(&mut parts, 4)
            .expect("vectored write");
        let expected: Vec<u8> = b"head".iter().copied().chain(owned.concat()).collect();
        assert_eq!(OsDisk.read(&path).expect("read"), expected);
    }
}
