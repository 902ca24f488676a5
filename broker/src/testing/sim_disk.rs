//! A simulated [`Disk`] for crash tests: files live in memory, and [`SimDisk::crash`] keeps
//! what POSIX promises survives a power loss plus a seeded share of what it does not.
//!
//! - A file's data and length survive once `sync_data` returned; later writes may reach the
//!   disk in part: an appended tail survives as a prefix cut at any byte (a torn write), and
//!   an unsynced truncation or overwrite is undone.
//! - A create, rename or remove survives once its directory was synced; until then a crash
//!   undoes it. Directories themselves are durable when created (a simplification: the Raft
//!   log creates its directories once, before any entry).
//! - [`SimDisk::fail_from_op`] makes the machine stop at the N-th operation: it and every
//!   later one fail and change nothing, as if power went at that instant.
//!
//! Operations are numbered in the order they are called, so a single-threaded caller (or
//! one that waits for its helper threads) sees the same numbering for the same seed.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::io;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;

use crate::disk::Disk;
use crate::disk::DiskFile;
use crate::seeded_rng::SeededRng;

#[derive(Debug, Clone, Default)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// File contents by inode number.
    inodes: Vec<Inode>,
    /// The names the running system sees.
    names: BTreeMap<PathBuf, usize>,
    /// The names a crash leaves.
    durable_names: BTreeMap<PathBuf, usize>,
    dirs: BTreeSet<PathBuf>,
    /// Operations called so far.
    ops: u64,
    /// From this operation on, everything fails (the power went).
    fail_from_op: Option<u64>,
}

#[derive(Debug, Default)]
struct Inode {
    data: Vec<u8>,
    /// The content as of the last `sync_data`.
    durable: Vec<u8>,
}

/// What a crash took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Unsynced bytes that did not survive.
    pub bytes_lost: u64,
    /// Unsynced creates, renames and removes undone.
    pub names_undone: usize,
}

#[derive(Debug)]
struct SimFile {
    state: Arc<Mutex<State>>,
    inode: usize,
}

fn powered_off() -> io::Error {
    io::Error::other("simulated power loss: the disk is gone")
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} does not exist", path.display()),
    )
}

impl State {
    /// Counts an operation; fails it if the power is off.
    fn begin_op(&mut self) -> io::Result<()> {
        self.ops += 1;
        match self.fail_from_op {
            Some(from) if self.ops >= from => Err(powered_off()),
            _ => Ok(()),
        }
    }

    fn inode_of(&self, path: &Path) -> io::Result<usize> {
        self.names.get(path).copied().ok_or_else(|| not_found(path))
    }

    fn require_parent(&self, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(dir) if self.dirs.contains(dir) => Ok(()),
            _ => Err(not_found(path.parent().unwrap_or(path))),
        }
    }

    fn new_inode(&mut self, path: &Path) -> usize {
        self.inodes.push(Inode::default());
        let inode = self.inodes.len() - 1;
        self.names.insert(path.to_path_buf(), inode);
        inode
    }
}

impl SimDisk {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn handle(&self, inode: usize) -> Arc<dyn DiskFile> {
        Arc::new(SimFile {
            state: self.state.clone(),
            inode,
        })
    }

    /// Operations called so far.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Whether the power went: an operation failed for it.
    pub fn powered_off(&self) -> bool {
        let state = self.lock();
        state.fail_from_op.is_some_and(|from| state.ops >= from)
    }

    /// Makes operation `op` (numbered from 1) and every later one fail, changing nothing.
    pub fn fail_from_op(&self, op: u64) {
        self.lock().fail_from_op = Some(op);
    }

    /// A power loss: every name and byte not synced is lost, except an unsynced appended
    /// tail, of which a prefix cut at a byte the seed picks survives. Power comes back on.
    pub fn crash(&self, rng: &mut SeededRng) -> CrashReport {
        let mut state = self.lock();
        let mut report = CrashReport {
            names_undone: state
                .names
                .iter()
                .filter(|(path, inode)| state.durable_names.get(*path) != Some(inode))
                .count()
                + state
                    .durable_names
                    .keys()
                    .filter(|path| !state.names.contains_key(*path))
                    .count(),
            ..CrashReport::default()
        };
        state.names = state.durable_names.clone();
        for inode in &mut state.inodes {
            let before = inode.data.len() as u64;
            if inode.data.len() > inode.durable.len() && inode.data.starts_with(&inode.durable) {
                let unsynced = (inode.data.len() - inode.durable.len()) as u64;
                let kept = rng.below(unsynced + 1);
                inode.data.truncate(inode.durable.len() + kept as usize);
            } else if inode.data != inode.durable {
                inode.data = inode.durable.clone();
            }
            report.bytes_lost += before.saturating_sub(inode.data.len() as u64);
            inode.durable = inode.data.clone();
        }
        state.fail_from_op = None;
        report
    }

    /// A killed process (SIGKILL): the page cache survives, so everything written and every
    /// name stays, as if synced; operations work again.
    pub fn process_killed(&self) {
        let mut state = self.lock();
        state.durable_names = state.names.clone();
        for inode in &mut state.inodes {
            inode.durable = inode.data.clone();
        }
        state.fail_from_op = None;
    }

    /// Flips bit `bit` of byte `offset` of `path` on the disk (as bit rot would).
    pub fn flip_bit(&self, path: &Path, offset: u64, bit: u8) -> io::Result<()> {
        let mut state = self.lock();
        let inode = state.inode_of(path)?;
        let inode = &mut state.inodes[inode];
        let at = usize::try_from(offset).map_err(|_| io::Error::other("offset"))?;
        for bytes in [&mut inode.data, &mut inode.durable] {
            let byte = bytes
                .get_mut(at)
                .ok_or_else(|| io::Error::other(format!("no byte {offset} in {path:?}")))?;
            *byte ^= 1 << (bit % 8);
        }
        Ok(())
    }
}

impl DiskFile for SimFile {
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.begin_op()?;
        let data = &mut state.inodes[self.inode].data;
        let start = usize::try_from(offset).map_err(|_| io::Error::other("offset"))?;
        let end = start + bytes.len();
        if data.len() < end {
            data.resize(end, 0);
        }
        data[start..end].copy_from_slice(bytes);
        Ok(())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.begin_op()?;
        let data = &state.inodes[self.inode].data;
        let start = usize::try_from(offset).map_err(|_| io::Error::other("offset"))?;
        let bytes = data
            .get(start..start + buf.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.begin_op()?;
        let len = usize::try_from(len).map_err(|_| io::Error::other("length"))?;
        state.inodes[self.inode].data.resize(len, 0);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.begin_op()?;
        let inode = &mut state.inodes[self.inode];
        inode.durable = inode.data.clone();
        Ok(())
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Disk for SimDisk {
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let mut state = self.lock();
        state.begin_op()?;
        state.require_parent(path)?;
        if state.names.contains_key(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists", path.display()),
            ));
        }
        let inode = state.new_inode(path);
        Ok(self.handle(inode))
    }

    fn create(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let mut state = self.lock();
        state.begin_op()?;
        state.require_parent(path)?;
        let inode = match state.names.get(path).copied() {
            Some(inode) => {
                state.inodes[inode].data.clear();
                inode
            }
            None => state.new_inode(path),
        };
        Ok(self.handle(inode))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let mut state = self.lock();
        state.begin_op()?;
        let inode = state.inode_of(path)?;
        Ok(self.handle(inode))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut state = self.lock();
        state.begin_op()?;
        let inode = state.inode_of(path)?;
        Ok(state.inodes[inode].data.clone())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut state = self.lock();
        state.begin_op()?;
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(state
            .names
            .keys()
            .filter(|path| path.parent() == Some(dir))
            .cloned()
            .collect())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.begin_op()?;
        for ancestor in dir.ancestors() {
            state.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.begin_op()?;
        state
            .names
            .remove(path)
            .map(drop)
            .ok_or_else(|| not_found(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.begin_op()?;
        state.require_parent(to)?;
        let inode = state.names.remove(from).ok_or_else(|| not_found(from))?;
        state.names.insert(to.to_path_buf(), inode);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.begin_op()?;
        let in_dir = |path: &PathBuf| path.parent() == Some(dir);
        state.durable_names.retain(|path, _| !in_dir(path));
        let now: Vec<(PathBuf, usize)> = state
            .names
            .iter()
            .filter(|(path, _)| in_dir(path))
            .map(|(path, inode)| (path.clone(), *inode))
            .collect();
        state.durable_names.extend(now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk_with_dir() -> (SimDisk, PathBuf) {
        let disk = SimDisk::default();
        let dir = PathBuf::from("/sim/log");
        disk.create_dir_all(&dir).expect("dir");
        (disk, dir)
    }

    #[test]
    fn a_crash_keeps_synced_bytes_and_names_and_at_most_a_prefix_of_the_rest() {
        let (disk, dir) = disk_with_dir();
        let synced = dir.join("a");
        let file = disk.create_new(&synced).expect("create");
        file.write_all_at(b"durable", 0).expect("write");
        file.sync_data().expect("sync");
        disk.sync_dir(&dir).expect("sync dir");
        file.write_all_at(b" and then some", 7).expect("write");
        let unsynced_name = dir.join("b");
        disk.create_new(&unsynced_name).expect("create");

        let report = disk.crash(&mut SeededRng::new(3));
        let after = disk.read(&synced).expect("a survives");
        assert!(after.starts_with(b"durable"));
        assert!(b"durable and then some".starts_with(&after));
        assert_eq!(report.bytes_lost, 21 - after.len() as u64);
        assert_eq!(report.names_undone, 1);
        assert_eq!(
            disk.read(&unsynced_name).map_err(|e| e.kind()),
            Err(io::ErrorKind::NotFound)
        );
    }

    #[test]
    fn unsynced_truncation_and_remove_are_undone() {
        let (disk, dir) = disk_with_dir();
        let path = dir.join("a");
        let file = disk.create_new(&path).expect("create");
        file.write_all_at(b"0123456789", 0).expect("write");
        file.sync_data().expect("sync");
        disk.sync_dir(&dir).expect("sync dir");
        file.set_len(4).expect("truncate");
        disk.remove_file(&path).expect("remove");
        disk.crash(&mut SeededRng::new(1));
        assert_eq!(disk.read(&path).expect("back"), b"0123456789");
    }

    #[test]
    fn the_machine_stops_at_the_chosen_operation() {
        let (disk, dir) = disk_with_dir();
        let file = disk.create_new(&dir.join("a")).expect("create");
        disk.fail_from_op(disk.ops() + 2);
        file.write_all_at(b"x", 0).expect("the next operation runs");
        assert!(file.sync_data().is_err(), "the one after fails");
        assert!(file.write_all_at(b"y", 1).is_err(), "and all later ones");
        disk.crash(&mut SeededRng::new(0));
        file.write_all_at(b"z", 0).expect("power is back");
    }
}
