//! `MappedFile`: one fixed-size file mapped read-write with memmap2, the unit of CommitLog,
//! ConsumeQueue and index segments. Reads go through the mapping; appends go through it too
//! (small ones) or through `pwrite` into the same page cache (bulk ones). Its [`Footprint`]
//! says whether its blocks are all allocated at creation and its descriptor kept (the few
//! large, hot files), or allocated just ahead of its writes with no descriptor kept (one
//! file per queue: a queue then costs the disk what it holds and no file descriptor).
//!
//! Invariants: the file length never changes while mapped (it is sized before mapping);
//! every byte written lies in blocks allocated before the write, so a full disk fails a
//! file's creation or growth with an error and never a store through the mapping (SIGBUS)
//! or a write in the middle of a record; bytes at or after the in-memory write position are
//! zero (appends only grow it, `truncate_to` zeroes what it drops, recovery zeroes a torn
//! tail), so a later scan never resurrects stale records; `flush` is durable (an fsync of
//! the file's data).
//! The file name is the segment's start offset, zero-padded to 20 digits (RocketMQ style).

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use memmap2::MmapMut;
use tracing::{debug, warn};

use crate::store::error::StoreError;

/// Digits of a segment file name (`u64::MAX` has 20 digits).
pub const FILE_NAME_DIGITS: usize = 20;
/// Granularity of the scan that zeroes a torn tail: zero pages are left untouched.
const ZERO_SCAN_CHUNK_BYTES: usize = 4096;
/// A [`Footprint::Grown`] file's first allocation, and the unit every allocation rounds to:
/// one page, all that a queue holding a few messages needs.
pub const GROWN_FIRST_STEP_BYTES: usize = 4096;
/// A [`Footprint::Grown`] file's allocations double from [`GROWN_FIRST_STEP_BYTES`] up to
/// this step: a busy queue allocates once per this many bytes of units (52,428 of them),
/// an idle one never holds more than twice what it wrote.
pub const GROWN_STEP_MAX_BYTES: usize = 1 << 20;

/// How a [`MappedFile`] holds disk blocks and its file descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Footprint {
    /// Every block allocated when the file is created and the descriptor kept open: writes
    /// into allocated blocks cost the kernel less than filling holes, and bulk appends
    /// `pwrite` through the descriptor (CommitLog segments and key index files: few, large
    /// and written all the time).
    Preallocated,
    /// A sparse file whose blocks are allocated just ahead of the writes, in steps that
    /// double from [`GROWN_FIRST_STEP_BYTES`] to [`GROWN_STEP_MAX_BYTES`]; the descriptor is
    /// closed once the file is mapped and opened again by path for the rare call that needs
    /// one (an allocation, a flush, a recovery scan). For the one file (and its checksums)
    /// of every queue: ten thousand queues holding a message each take megabytes of disk
    /// and no file descriptor.
    Grown,
}

/// File name of the segment starting at `start_offset`.
pub fn file_name(start_offset: u64) -> String {
    format!("{start_offset:0width$}", width = FILE_NAME_DIGITS)
}

/// Start offset of a segment file name, if it is one.
pub fn parse_file_name(name: &str) -> Option<u64> {
    if name.len() != FILE_NAME_DIGITS || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// Segment files in `dir` as `(start_offset, path)`, sorted; other names are skipped.
pub fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    let entries = fs::read_dir(dir).map_err(|e| StoreError::io("list segments", dir, e))?;
    let mut segments = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io("list segments", dir, e))?;
        let name = entry.file_name();
        match name.to_str().and_then(parse_file_name) {
            Some(start) => segments.push((start, entry.path())),
            None => debug!(path = %entry.path().display(), "skipping non-segment file"),
        }
    }
    segments.sort();
    Ok(segments)
}

/// Allocates the blocks of `[from, to)` of `file`, making `to` its length if it was shorter:
/// writes into allocated blocks cannot fail for want of space, and cost the kernel less than
/// filling holes (measured: about a fifth less system time per byte written). A file system
/// that cannot preallocate gets a sparse file of at least that length instead.
fn allocate(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let overflow = |_too_large| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "segment size overflows off_t",
        )
    };
    let offset = libc::off_t::try_from(from).map_err(overflow)?;
    let len = libc::off_t::try_from(to - from).map_err(overflow)?;
    // SAFETY: fallocate reads only its integer arguments; `file` keeps the descriptor open for
    // the whole call.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, len) } == 0 {
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EOPNOTSUPP) {
        if file.metadata()?.len() < to {
            file.set_len(to)?;
        }
        return Ok(());
    }
    Err(error)
}

/// Where a [`Footprint::Grown`] file's allocation ends once it must cover `needed` bytes,
/// having covered `allocated` of `size`: the next doubling step (at least one page, at most
/// [`GROWN_STEP_MAX_BYTES`]), rounded to pages, and never past the file's end.
fn grown_allocation_end(allocated: usize, needed: usize, size: usize) -> usize {
    let step = allocated.clamp(GROWN_FIRST_STEP_BYTES, GROWN_STEP_MAX_BYTES);
    let end = needed.max(allocated + step);
    end.next_multiple_of(GROWN_FIRST_STEP_BYTES).min(size)
}

/// Opens an existing segment file for reading and writing.
fn open_read_write(path: &Path, what: &'static str) -> Result<File, StoreError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| StoreError::io(what, path, e))
}

/// Makes a directory entry change (create, rename, delete) durable.
pub fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io("fsync directory", dir, e))
}

/// Creates `dir` (and parents) if missing, fsyncing the parent of each directory created.
pub fn create_dir_durable(dir: &Path) -> Result<(), StoreError> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_durable(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(StoreError::io("create directory", dir, e)),
    }
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
        _ => Ok(()),
    }
}

/// Index of the byte after the last non-zero byte of `bytes` (0 if all zero).
pub fn nonzero_len(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1)
}

/// A file with writes that are not durable yet; syncing it needs no lock on the store.
#[derive(Debug)]
pub struct FlushTarget {
    /// The file's descriptor, or `None` for a file that keeps none: the sync opens it by path.
    file: Option<Arc<File>>,
    path: PathBuf,
}

impl FlushTarget {
    pub fn new(file: Arc<File>, path: PathBuf) -> FlushTarget {
        FlushTarget {
            file: Some(file),
            path,
        }
    }

    /// fsyncs the file's data. A file that keeps no descriptor and was deleted since its
    /// writes (retention, a truncation) has nothing left to make durable.
    pub fn sync(&self) -> Result<(), StoreError> {
        let io = |e| StoreError::io("flush", &self.path, e);
        match &self.file {
            Some(file) => file.sync_data().map_err(io)?,
            None => match File::open(&self.path) {
                Ok(file) => file.sync_data().map_err(io)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(io(e)),
            },
        }
        #[cfg(test)]
        crate::testing::durable_images::durable_now(&self.path);
        Ok(())
    }
}

/// Appends hand each chunk of this many bytes to the kernel's writeback as soon as it is
/// complete, instead of leaving it dirty until the next checkpoint's fsync: the disk then
/// writes the CommitLog steadily, not in a burst each second that Raft log fsyncs queue
/// behind (W1 with `flush = sync`: ack p99 70-83 ms against 101-114 ms, one window).
const WRITEBACK_CHUNK_BYTES: usize = 1 << 20;

/// Starts writing `[from, to)` of `file` back to disk without waiting for it. Only a hint:
/// durability still comes from the flushes, and a failure here is logged and changes nothing.
fn start_writeback(file: &File, path: &Path, from: usize, to: usize) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(from), i64::try_from(to - from)) else {
        return;
    };
    // SAFETY: `sync_file_range` reads no memory of ours; the descriptor is open for as long
    // as `file` is borrowed.
    let result = unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
    };
    if result != 0 {
        let error = std::io::Error::last_os_error();
        tracing::debug!(path = %path.display(), %error, "could not start the writeback");
    }
}

/// One memory-mapped segment file.
#[derive(Debug)]
pub struct MappedFile {
    path: PathBuf,
    start_offset: u64,
    mmap: MmapMut,
    /// A [`Footprint::Preallocated`] file's descriptor, kept open to ask the file system
    /// where data lies (holes need no scan), to `pwrite` bulk appends, and shared with
    /// flushes that fsync it without holding the store. `None` for a [`Footprint::Grown`]
    /// file, which opens itself by path when it needs a descriptor.
    file: Option<Arc<File>>,
    /// Bytes from the start known to be allocated: every write ends at or below it.
    allocated: usize,
    /// Whether the mapping was read or written since the last [`MappedFile::release_if_idle`].
    touched: AtomicBool,
    /// Sweeps in a row that found the mapping untouched.
    idle_sweeps: u32,
    /// Whether its pages may be in memory: not given back since it was last touched.
    resident: bool,
    write_pos: usize,
    /// Byte range changed since the last flush.
    dirty: Option<(usize, usize)>,
}

impl MappedFile {
    /// Creates and maps a new zero-filled segment in `dir` with the given footprint, then
    /// fsyncs `dir`. A [`Footprint::Preallocated`] segment gets all its blocks here: a disk
    /// without room for it fails here (and leaves no file behind), and later writes never
    /// need a block the disk may not have. A [`Footprint::Grown`] segment gets its blocks as
    /// writes reach them, and a disk without room fails the write that needed them, before
    /// any of its bytes are written.
    pub fn create(
        dir: &Path,
        start_offset: u64,
        size_bytes: u64,
        footprint: Footprint,
    ) -> Result<Self, StoreError> {
        let path = dir.join(file_name(start_offset));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| StoreError::io("create segment", &path, e))?;
        let sized = match footprint {
            Footprint::Preallocated => allocate(&file, 0, size_bytes),
            Footprint::Grown => file.set_len(size_bytes),
        };
        if let Err(error) = sized.and_then(|()| file.sync_all()) {
            if let Err(remove) = fs::remove_file(&path) {
                warn!(path = %path.display(), %remove, "removing an unallocated segment failed");
            }
            return Err(StoreError::io("preallocate segment", &path, error));
        }
        sync_dir(dir)?;
        debug!(path = %path.display(), size_bytes, ?footprint, "created segment");
        #[cfg(test)]
        crate::testing::durable_images::created(&path, size_bytes as usize);
        let allocated = match footprint {
            Footprint::Preallocated => size_bytes as usize,
            Footprint::Grown => 0,
        };
        Self::map(path, file, start_offset, footprint, allocated)
    }

    /// Maps an existing segment, checking its length. The write position starts at 0; the
    /// owner sets it after scanning ([`MappedFile::recover_to`] or [`MappedFile::set_full`]).
    /// A [`Footprint::Grown`] segment allocates again from its start before its first write
    /// (blocks already held cost nothing to allocate again).
    pub fn open(
        path: PathBuf,
        start_offset: u64,
        size_bytes: u64,
        footprint: Footprint,
    ) -> Result<Self, StoreError> {
        let file = open_read_write(&path, "open segment")?;
        let actual = file
            .metadata()
            .map_err(|e| StoreError::io("stat segment", &path, e))?
            .len();
        if actual != size_bytes {
            return Err(StoreError::SegmentSize {
                path,
                expected: size_bytes,
                actual,
            });
        }
        #[cfg(test)]
        crate::testing::durable_images::durable_now(&path);
        let allocated = match footprint {
            Footprint::Preallocated => size_bytes as usize,
            Footprint::Grown => 0,
        };
        Self::map(path, file, start_offset, footprint, allocated)
    }

    fn map(
        path: PathBuf,
        file: File,
        start_offset: u64,
        footprint: Footprint,
        allocated: usize,
    ) -> Result<Self, StoreError> {
        // SAFETY: the segment file is owned exclusively by this process's store (one store per
        // directory, opened by one node), it is never truncated or resized while mapped (its
        // length is fixed by `set_len` before mapping and checked on open), and it is only
        // deleted after the map is dropped. All access goes through this struct's bounds-checked
        // slices, so no reference outlives the map.
        let mmap =
            unsafe { MmapMut::map_mut(&file) }.map_err(|source| match source.raw_os_error() {
                Some(libc::ENOMEM) => StoreError::MappingsExhausted {
                    path: path.clone(),
                    source,
                },
                _ => StoreError::io("mmap segment", &path, source),
            })?;
        // Appends fault pages in one at a time; kernel readahead would instead zero-fill
        // a large window of the sparse file on every fault (measured: a fifth of the CPU
        // of a 3-node group under load).
        mmap.advise(memmap2::Advice::Random)
            .map_err(|e| StoreError::io("madvise segment", &path, e))?;
        let file = match footprint {
            Footprint::Preallocated => Some(Arc::new(file)),
            // The mapping stays valid once its descriptor is closed.
            Footprint::Grown => None,
        };
        Ok(MappedFile {
            path,
            start_offset,
            mmap,
            file,
            allocated,
            touched: AtomicBool::new(false),
            idle_sweeps: 0,
            resident: true,
            write_pos: 0,
            dirty: None,
        })
    }

    /// Notes a read through the mapping (cheap when already noted: no shared write).
    fn touch(&self) {
        if !self.touched.load(Ordering::Relaxed) {
            self.touched.store(true, Ordering::Relaxed);
        }
    }

    /// One sweep of an idle-page release: a file untouched for `idle_sweeps` sweeps in a row
    /// gives its pages back, to the page cache's reclaim and out of this process's resident
    /// memory (`MADV_PAGEOUT`: dirty pages are written back first, nothing is lost; the next
    /// read faults them in again). Returns whether it gave them back now.
    pub fn release_if_idle(&mut self, idle_sweeps: u32) -> bool {
        if std::mem::take(self.touched.get_mut()) {
            self.idle_sweeps = 0;
            self.resident = true;
            return false;
        }
        self.idle_sweeps = self.idle_sweeps.saturating_add(1);
        if !self.resident || self.idle_sweeps < idle_sweeps {
            return false;
        }
        self.resident = false;
        // SAFETY: the range is exactly this struct's live mapping; MADV_PAGEOUT only asks
        // the kernel to reclaim its pages (a shared file mapping keeps its contents: dirty
        // pages are written back, and later accesses fault them in again).
        let result = unsafe {
            libc::madvise(
                self.mmap.as_ptr() as *mut libc::c_void,
                self.mmap.len(),
                libc::MADV_PAGEOUT,
            )
        };
        if result != 0 {
            let error = std::io::Error::last_os_error();
            debug!(path = %self.path.display(), %error, "could not give idle pages back");
        }
        true
    }

    /// This file's descriptor: the one kept, or the file opened again by path.
    fn descriptor(&self) -> Result<Arc<File>, StoreError> {
        match &self.file {
            Some(file) => Ok(file.clone()),
            None => open_read_write(&self.path, "reopen segment").map(Arc::new),
        }
    }

    /// Allocates blocks so that `[from, end)` can be written: a full disk fails here, before
    /// a byte is written, with an error naming the file. Nothing below `from`'s page is
    /// allocated anew: those bytes are written already or never will be (a queue that starts
    /// mid-segment leaves its head a hole, and writes only move forward), so a file reopened
    /// with its allocation unknown does not fill that head on its first write.
    fn ensure_allocated(&mut self, from: usize, end: usize) -> Result<(), StoreError> {
        if end <= self.allocated {
            return Ok(());
        }
        let start = self.allocated.max(from - from % GROWN_FIRST_STEP_BYTES);
        let target = grown_allocation_end(self.allocated, end, self.mmap.len());
        let file = self.descriptor()?;
        allocate(&file, start as u64, target as u64)
            .map_err(|e| StoreError::io("grow segment", &self.path, e))?;
        self.allocated = target;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Offset (in the owner's address space) of byte 0 of this file.
    pub fn start_offset(&self) -> u64 {
        self.start_offset
    }

    pub fn size_bytes(&self) -> usize {
        self.mmap.len()
    }

    pub fn write_pos(&self) -> usize {
        self.write_pos
    }

    pub fn remaining(&self) -> usize {
        self.mmap.len() - self.write_pos
    }

    /// The whole mapped file, including the zero area past the write position (for scans).
    pub fn whole(&self) -> &[u8] {
        self.touch();
        &self.mmap
    }

    /// The written bytes `[0, write_pos)`.
    pub fn written(&self) -> &[u8] {
        self.touch();
        &self.mmap[..self.write_pos]
    }

    fn mark_dirty(&mut self, from: usize, to: usize) {
        *self.touched.get_mut() = true;
        self.dirty = Some(match self.dirty {
            Some((a, b)) => (a.min(from), b.max(to)),
            None => (from, to),
        });
    }

    /// Appends `data` at the write position through the mapping, returning the position it
    /// was written at. Each fresh page costs a page fault: for small, scattered appends
    /// (ConsumeQueue units). Bulk appends use [`MappedFile::write_append`].
    pub fn append(&mut self, data: &[u8]) -> Result<usize, StoreError> {
        let pos = self.check_room(data.len())?;
        self.ensure_allocated(pos, pos + data.len())?;
        self.mmap[pos..pos + data.len()].copy_from_slice(data);
        self.advance_write_pos(pos, data.len());
        Ok(pos)
    }

    /// Moves the write position over `len` bytes just written at `pos`, and hands every
    /// chunk of [`WRITEBACK_CHUNK_BYTES`] they completed to the kernel's writeback.
    fn advance_write_pos(&mut self, pos: usize, len: usize) {
        self.write_pos += len;
        self.mark_dirty(pos, self.write_pos);
        let (done_from, done_to) = (
            pos / WRITEBACK_CHUNK_BYTES * WRITEBACK_CHUNK_BYTES,
            self.write_pos / WRITEBACK_CHUNK_BYTES * WRITEBACK_CHUNK_BYTES,
        );
        if done_to > done_from {
            match self.descriptor() {
                Ok(file) => start_writeback(&file, &self.path, done_from, done_to),
                Err(error) => debug!(%error, "could not start the writeback"),
            }
        }
    }

    /// Appends `data` at the write position with one `pwrite` through the page cache, which
    /// the mapping then reads. Storing through the mapping instead faults every fresh page
    /// in (zero-fill, then the file system's `page_mkwrite`): about four times the CPU for
    /// bulk data (measured: 1.5 µs against 0.37 µs per 1.1 KB record, in 70 KB writes). A
    /// failed write (a full disk) is an error, not the SIGBUS a store through the mapping
    /// gets; the write position then stays where it was, and bytes a partial write left
    /// past it are a torn tail that recovery zeroes.
    pub fn write_append(&mut self, data: &[u8]) -> Result<usize, StoreError> {
        use std::os::unix::fs::FileExt;
        let pos = self.check_room(data.len())?;
        self.ensure_allocated(pos, pos + data.len())?;
        self.descriptor()?
            .write_all_at(data, pos as u64)
            .map_err(|e| StoreError::io("write segment", &self.path, e))?;
        self.advance_write_pos(pos, data.len());
        Ok(pos)
    }

    /// The write position, if `len` more bytes fit.
    fn check_room(&self, len: usize) -> Result<usize, StoreError> {
        if len > self.remaining() {
            return Err(StoreError::SegmentFull {
                path: self.path.clone(),
                position: self.write_pos,
                len,
                size: self.mmap.len(),
            });
        }
        Ok(self.write_pos)
    }

    /// `len` written bytes at `pos`, if they are all below the write position.
    pub fn read(&self, pos: usize, len: usize) -> Option<&[u8]> {
        let end = pos.checked_add(len)?;
        self.written().get(pos..end)
    }

    /// Moves the write position over a zero area (e.g. the unused head of a ConsumeQueue
    /// segment whose queue starts mid-segment). Only forward over zeros.
    pub fn skip_zeros_to(&mut self, pos: usize) {
        assert!(pos >= self.write_pos && pos <= self.mmap.len());
        debug_assert!(self.mmap[self.write_pos..pos].iter().all(|b| *b == 0));
        self.write_pos = pos;
    }

    /// Writes `data` over written bytes at `pos` (the write position does not move): for files
    /// that are declared whole ([`MappedFile::set_full`]) and then laid out by their owner.
    pub fn overwrite(&mut self, pos: usize, data: &[u8]) -> Result<(), StoreError> {
        let end = pos
            .checked_add(data.len())
            .filter(|end| *end <= self.write_pos)
            .ok_or_else(|| StoreError::SegmentFull {
                path: self.path.clone(),
                position: pos,
                len: data.len(),
                size: self.write_pos,
            })?;
        self.ensure_allocated(pos, end)?;
        self.mmap[pos..end].copy_from_slice(data);
        self.mark_dirty(pos, end);
        Ok(())
    }

    /// Declares the whole file written (a sealed segment before the recovery start point).
    pub fn set_full(&mut self) {
        self.write_pos = self.mmap.len();
    }

    /// Drops everything at or after `pos`: zeroes `[pos, write_pos)` and moves the write
    /// position back.
    pub fn truncate_to(&mut self, pos: usize) {
        assert!(pos <= self.write_pos, "truncate past the write position");
        let end = self.write_pos;
        self.mmap[pos..end].fill(0);
        self.write_pos = pos;
        if end > pos {
            self.mark_dirty(pos, end);
        }
    }

    /// Recovery: the valid data ends at `pos`; zeroes every non-zero chunk in `[pos, size)`
    /// (a torn or garbage tail) and sets the write position to `pos`. Returns the garbage
    /// span in bytes (from `pos` to the last non-zero byte).
    pub fn recover_to(&mut self, pos: usize) -> usize {
        let mut garbage_end = pos;
        for extent in self.data_extents(pos) {
            let nonzero = nonzero_len(&self.mmap[extent.clone()]);
            if nonzero > 0 {
                let end = extent.start + nonzero;
                for chunk in self.mmap[extent.start..end].chunks_mut(ZERO_SCAN_CHUNK_BYTES) {
                    chunk.fill(0);
                }
                self.mark_dirty(extent.start, end);
                garbage_end = end;
            }
        }
        self.write_pos = pos;
        garbage_end - pos
    }

    /// Bytes from `pos` to the last non-zero byte of the file (0 if none).
    pub fn nonzero_span_after(&self, pos: usize) -> usize {
        let last_end = self.data_extents(pos).into_iter().rev().find_map(|extent| {
            let nonzero = nonzero_len(&self.mmap[extent.clone()]);
            (nonzero > 0).then_some(extent.start + nonzero)
        });
        last_end.map_or(0, |end| end - pos)
    }

    /// The ranges at or after `from` that may hold data. Segments are sparse files and a
    /// hole reads as zeros, so only these need scanning: a 1 GiB segment holding a few
    /// megabytes is recovered without reading a gigabyte of zeros. If the file system
    /// cannot tell, the whole rest of the file is one range.
    fn data_extents(&self, from: usize) -> Vec<std::ops::Range<usize>> {
        use std::os::fd::AsRawFd;
        let size = self.mmap.len();
        let Ok(file) = self.descriptor() else {
            return std::iter::once(from..size).collect();
        };
        let fd = file.as_raw_fd();
        let mut extents = Vec::new();
        let mut cursor = from;
        while cursor < size {
            // SAFETY: lseek on a file descriptor this struct owns; it moves only the offset
            // of this descriptor, which nothing else reads or writes through.
            let data = unsafe { libc::lseek(fd, cursor as libc::off_t, libc::SEEK_DATA) };
            if data < 0 {
                if std::io::Error::last_os_error().raw_os_error() != Some(libc::ENXIO) {
                    return std::iter::once(from..size).collect();
                }
                break;
            }
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
            if hole < 0 {
                return std::iter::once(from..size).collect();
            }
            let (start, end) = ((data as usize).max(cursor), (hole as usize).min(size));
            if start < end {
                extents.push(start..end);
            }
            cursor = end.max(start + 1);
        }
        extents
    }

    /// Durably writes the dirty range.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.begin_flush().map_or(Ok(()), |target| target.sync())
    }

    /// Marks the file clean and hands back what makes it durable: an fsync of the file,
    /// which on Linux writes back the page-cache pages dirtied through the shared mapping as
    /// `msync(MS_SYNC)` does. `None` if nothing changed since the last flush. The caller
    /// must [`FlushTarget::sync`] it before it relies on the data being durable.
    pub fn begin_flush(&mut self) -> Option<FlushTarget> {
        self.dirty.take()?;
        Some(FlushTarget {
            file: self.file.clone(),
            path: self.path.clone(),
        })
    }

    /// When the file's data last changed (a sealed segment's age, for retention).
    pub fn modified(&self) -> Result<std::time::SystemTime, StoreError> {
        fs::metadata(&self.path)
            .and_then(|metadata| metadata.modified())
            .map_err(|e| StoreError::io("read segment mtime", &self.path, e))
    }

    /// Unmaps and deletes the file, then fsyncs its directory.
    pub fn delete(self) -> Result<(), StoreError> {
        let path = self.unlink()?;
        match path.parent() {
            Some(dir) => sync_dir(dir),
            None => Ok(()),
        }
    }

    /// Unmaps and deletes the file; returns its path (its directory is not synced).
    fn unlink(self) -> Result<PathBuf, StoreError> {
        let MappedFile { path, mmap, .. } = self;
        drop(mmap);
        fs::remove_file(&path).map_err(|e| StoreError::io("delete segment", &path, e))?;
        Ok(path)
    }
}

/// Files taken out of a store under its lock and deleted once the lock is released: unmapping
/// and unlinking a large preallocated file and syncing its directory can take milliseconds
/// that appends (and the sends waiting on them) would otherwise wait for. A crash before
/// [`Detached::delete`] leaves the files in place, and the store finds them again at open.
#[derive(Debug, Default)]
#[must_use = "detached files are deleted only by `Detached::delete`"]
pub struct Detached(Vec<MappedFile>);

impl Detached {
    pub fn push(&mut self, file: MappedFile) {
        self.0.push(file);
    }

    /// Unmaps and deletes every file, then fsyncs each directory once.
    pub fn delete(self) -> Result<(), StoreError> {
        let mut dirs = std::collections::BTreeSet::new();
        for file in self.0 {
            let path = file.unlink()?;
            debug!(path = %path.display(), "deleted a detached file");
            if let Some(dir) = path.parent() {
                dirs.insert(dir.to_path_buf());
            }
        }
        dirs.iter().try_for_each(|dir| sync_dir(dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_20_digits() {
        assert_eq!(file_name(4096), "00000000000000004096");
        assert_eq!(parse_file_name("00000000000000004096"), Some(4096));
        assert_eq!(parse_file_name(&file_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_file_name("4096"), None);
        assert_eq!(parse_file_name("0000000000000000409x"), None);
    }

    #[test]
    fn a_new_segment_owns_its_blocks_or_is_not_created() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let size = 1 << 20;
        let segment =
            MappedFile::create(dir.path(), 0, size, Footprint::Preallocated).expect("create");
        let metadata = fs::metadata(segment.path()).expect("stat");
        assert_eq!(metadata.len(), size);
        assert!(
            metadata.blocks() * 512 >= size,
            "{} bytes allocated of {size}",
            metadata.blocks() * 512
        );
        let error = MappedFile::create(dir.path(), size, 1 << 60, Footprint::Preallocated)
            .expect_err("no disk is that big");
        assert!(error.to_string().contains("preallocate segment"), "{error}");
        assert!(
            !dir.path().join(file_name(size)).exists(),
            "no file left behind"
        );
    }

    #[test]
    fn append_read_flush_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f =
            MappedFile::create(dir.path(), 8192, 64, Footprint::Preallocated).expect("create");
        assert_eq!(f.append(b"abc").expect("append"), 0);
        assert_eq!(f.write_append(b"de").expect("write append"), 3);
        assert_eq!(
            f.read(1, 3),
            Some(&b"bcd"[..]),
            "written bytes are read through the map"
        );
        assert_eq!(f.read(4, 2), None);
        f.flush().expect("flush");
        let path = f.path().to_owned();
        drop(f);
        let mut f = MappedFile::open(path, 8192, 64, Footprint::Preallocated).expect("open");
        assert_eq!(f.recover_to(5), 0);
        assert_eq!(f.written(), b"abcde");
        assert!(matches!(
            MappedFile::open(f.path().to_owned(), 8192, 65, Footprint::Preallocated),
            Err(StoreError::SegmentSize { .. })
        ));
        let segments = list_segments(dir.path()).expect("list");
        assert_eq!(segments.len(), 1);
        assert_eq!(segments[0].0, 8192);
        f.delete().expect("delete");
        assert!(list_segments(dir.path()).expect("list").is_empty());
    }

    #[test]
    fn append_past_end_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = MappedFile::create(dir.path(), 0, 4, Footprint::Preallocated).expect("create");
        f.append(b"ab").expect("append");
        f.write_append(b"cd").expect("exactly full");
        assert!(matches!(
            f.append(b"e"),
            Err(StoreError::SegmentFull { .. })
        ));
        assert!(matches!(
            f.write_append(b"e"),
            Err(StoreError::SegmentFull { .. })
        ));
        assert_eq!(f.written(), b"abcd");
    }

    #[test]
    fn truncate_zeroes_the_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = MappedFile::create(dir.path(), 0, 16, Footprint::Preallocated).expect("create");
        f.append(b"abcdef").expect("append");
        f.truncate_to(2);
        assert_eq!(f.write_pos(), 2);
        assert_eq!(&f.whole()[..8], b"ab\0\0\0\0\0\0");
        f.flush().expect("flush");
    }

    #[test]
    fn recover_to_zeroes_garbage_and_reports_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = MappedFile::create(dir.path(), 0, 32, Footprint::Preallocated).expect("create");
        f.append(b"good").expect("append");
        f.append(b"torn\0\0x").expect("append");
        assert_eq!(f.recover_to(4), 7);
        assert!(f.whole()[4..].iter().all(|b| *b == 0));
        assert_eq!(f.written(), b"good");
    }

    #[test]
    fn garbage_beyond_a_hole_is_found_and_zeroed() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let size = 4 << 20;
        let path = {
            let mut f =
                MappedFile::create(dir.path(), 0, size, Footprint::Preallocated).expect("create");
            f.append(b"good").expect("append");
            f.flush().expect("flush");
            f.path().to_path_buf()
        };
        // Stale bytes 3 MiB in, behind a hole, as a crashed run could leave them.
        let far = 3 << 20;
        let file = OpenOptions::new().write(true).open(&path).expect("open");
        file.write_all_at(b"stale", far as u64).expect("write");
        file.sync_all().expect("sync");

        let mut f = MappedFile::open(path, 0, size, Footprint::Preallocated).expect("open");
        assert_eq!(f.nonzero_span_after(0), far + 5);
        assert_eq!(f.recover_to(4), far + 5 - 4);
        assert!(f.whole()[4..].iter().all(|b| *b == 0));
        assert_eq!(f.nonzero_span_after(4), 0);
    }

    fn allocated_bytes(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(path).expect("stat").blocks() * 512
    }

    #[test]
    fn a_grown_file_allocates_ahead_of_its_writes_in_doubling_steps() {
        let dir = tempfile::tempdir().expect("tempdir");
        let size = 6 << 20;
        let mut f = MappedFile::create(dir.path(), 0, size, Footprint::Grown).expect("create");
        assert_eq!(fs::metadata(f.path()).expect("stat").len(), size);
        assert_eq!(
            allocated_bytes(f.path()),
            0,
            "nothing allocated before a write"
        );
        f.append(&[7; 20]).expect("append");
        assert_eq!(allocated_bytes(f.path()), GROWN_FIRST_STEP_BYTES as u64);
        f.append(&[7; GROWN_FIRST_STEP_BYTES])
            .expect("append past the first page");
        assert_eq!(allocated_bytes(f.path()), 2 * GROWN_FIRST_STEP_BYTES as u64);
        f.append(&vec![7; 3 * GROWN_STEP_MAX_BYTES])
            .expect("a large append");
        let written = f.write_pos() as u64;
        let allocated = allocated_bytes(f.path());
        assert!(
            allocated >= written && allocated <= written + GROWN_STEP_MAX_BYTES as u64,
            "{allocated} bytes allocated for {written} written"
        );
    }

    #[test]
    fn a_reopened_grown_file_does_not_fill_the_hole_before_its_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let size = 6 << 20;
        let head = 5 << 20;
        let path = {
            let mut f = MappedFile::create(dir.path(), 0, size, Footprint::Grown).expect("create");
            // A queue that starts mid-segment: its head stays a hole.
            f.skip_zeros_to(head);
            f.append(&[7; 20]).expect("append");
            f.flush().expect("flush");
            f.path().to_owned()
        };
        let mut f = MappedFile::open(path.clone(), 0, size, Footprint::Grown).expect("open");
        assert_eq!(f.recover_to(head + 20), 0);
        f.append(&[8; 20]).expect("append after reopening");
        assert!(
            allocated_bytes(&path) <= 2 * GROWN_FIRST_STEP_BYTES as u64,
            "{} bytes allocated",
            allocated_bytes(&path)
        );
    }

    #[test]
    fn grown_allocation_steps_double_up_to_the_largest_step() {
        let size = 1 << 30;
        assert_eq!(grown_allocation_end(0, 20, size), GROWN_FIRST_STEP_BYTES);
        assert_eq!(grown_allocation_end(4096, 4097, size), 8192);
        assert_eq!(grown_allocation_end(8192, 8193, size), 16384);
        assert_eq!(
            grown_allocation_end(GROWN_STEP_MAX_BYTES, GROWN_STEP_MAX_BYTES + 1, size),
            2 * GROWN_STEP_MAX_BYTES
        );
        assert_eq!(
            grown_allocation_end(4 * GROWN_STEP_MAX_BYTES, 4 * GROWN_STEP_MAX_BYTES + 1, size),
            5 * GROWN_STEP_MAX_BYTES,
            "steps stop doubling at the largest step"
        );
        assert_eq!(grown_allocation_end(0, 20, 100), 100, "never past the end");
        assert_eq!(grown_allocation_end(0, 5000, size), 8192, "whole pages");
    }

    #[test]
    fn a_grown_file_keeps_no_descriptor_and_still_flushes_and_reopens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = MappedFile::create(dir.path(), 0, 1 << 20, Footprint::Grown).expect("create");
        assert!(f.file.is_none(), "no descriptor held");
        f.append(b"units").expect("append");
        f.overwrite(0, b"U").expect("overwrite");
        f.flush().expect("flush by path");
        let path = f.path().to_owned();
        drop(f);
        let mut f = MappedFile::open(path, 0, 1 << 20, Footprint::Grown).expect("open");
        assert_eq!(f.nonzero_span_after(0), 5, "data extents read by path");
        assert_eq!(f.recover_to(5), 0);
        assert_eq!(f.written(), b"Units");
        f.append(b"!").expect("append after reopening");
        let target = f.begin_flush().expect("dirty");
        f.delete().expect("delete");
        target
            .sync()
            .expect("a deleted file has nothing left to sync");
    }

    #[test]
    fn a_grown_file_that_cannot_grow_fails_the_write_before_writing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = MappedFile::create(dir.path(), 0, 1 << 20, Footprint::Grown).expect("create");
        f.append(b"kept").expect("append");
        // The file is gone (as a full disk refuses blocks, its growth fails): the append
        // must fail naming the growth, and the write position must not move.
        fs::remove_file(f.path()).expect("remove");
        let error = f
            .append(&[1; 2 * GROWN_FIRST_STEP_BYTES])
            .expect_err("cannot grow");
        assert!(error.to_string().contains("reopen segment"), "{error}");
        assert_eq!(f.written(), b"kept");
    }

    /// Pages of `file`'s mapping in memory now (`mincore`).
    fn resident_pages(file: &MappedFile) -> usize {
        let pages = file.size_bytes().div_ceil(4096);
        let mut resident = vec![0u8; pages];
        // SAFETY: the range is the file's live mapping and `resident` has a byte per page.
        let result = unsafe {
            libc::mincore(
                file.mmap.as_ptr() as *mut libc::c_void,
                file.size_bytes(),
                resident.as_mut_ptr(),
            )
        };
        assert_eq!(result, 0, "{}", std::io::Error::last_os_error());
        resident.iter().filter(|page| **page & 1 == 1).count()
    }

    #[test]
    fn an_idle_file_gives_its_pages_back_and_keeps_its_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = MappedFile::create(dir.path(), 0, 1 << 20, Footprint::Grown).expect("create");
        f.append(b"unit").expect("append");
        f.flush().expect("flush");
        assert_eq!(resident_pages(&f), 1);
        assert!(!f.release_if_idle(2), "written since the last sweep");
        assert!(!f.release_if_idle(2), "idle for one sweep of two");
        assert!(f.release_if_idle(2), "idle for two sweeps");
        assert_eq!(resident_pages(&f), 0, "given back");
        assert!(!f.release_if_idle(2), "given back once");
        assert_eq!(f.read(0, 4), Some(&b"unit"[..]), "the bytes stay");
        assert!(!f.release_if_idle(1), "a read touched it again");
        assert!(f.release_if_idle(1));
        // Unflushed writes are written back, not lost.
        f.append(b"more").expect("append");
        assert!(!f.release_if_idle(1));
        assert!(f.release_if_idle(1));
        assert_eq!(f.read(0, 8), Some(&b"unitmore"[..]));
        f.flush().expect("flush");
        let path = f.path().to_owned();
        drop(f);
        assert_eq!(&fs::read(path).expect("read")[..8], b"unitmore");
    }

    #[test]
    fn create_dir_durable_makes_nested_dirs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let nested = dir.path().join("a").join("b");
        create_dir_durable(&nested).expect("create");
        create_dir_durable(&nested).expect("idempotent");
        assert!(nested.is_dir());
    }
}
