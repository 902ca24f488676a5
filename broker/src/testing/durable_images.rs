//! Tests only: what a power loss leaves of every file of a store, for the simulations. For
//! each segment file under a watched directory it keeps the file's durable image: zeros when
//! it is created (preallocated and synced), its bytes when it is opened, and its bytes again
//! after each fsync ([`FlushTarget::sync`](crate::store::mapped_file::FlushTarget::sync)).
//! [`lose_unsynced_pages`] then puts back the durable image of each page that changed since,
//! for the pages a seeded choice picks: writeback may have reached any of them, in any
//! order. CommitLog segments and their checksums, ConsumeQueue files and theirs, key index
//! files and theirs all go through it; the checkpoint (written by rename) does not.
//!
//! The Raft log's power losses come from `SimDisk` behind the `Disk` seam instead; the store
//! cannot sit behind it: it maps its segments and asks the kernel for blocks and writeback
//! (fallocate, `sync_file_range`), which an in-memory disk cannot serve. So the store writes
//! real files, and this model images them at the points where they become durable.
//!
//! Invariant: only paths under a watched directory are imaged, so other tests pay nothing.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Mutex;

/// What a power loss keeps or loses as a unit: one page of the page cache.
const PAGE_BYTES: usize = 4096;

static WATCHED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static IMAGES: Mutex<Option<HashMap<PathBuf, Vec<u8>>>> = Mutex::new(None);

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Images the segment files under `dir` from now on.
pub fn watch(dir: &Path) {
    let mut watched = lock(&WATCHED);
    if !watched.iter().any(|watched| watched == dir) {
        watched.push(dir.to_path_buf());
    }
}

/// Stops imaging `dir` and forgets its images.
pub fn forget(dir: &Path) {
    lock(&WATCHED).retain(|watched| watched != dir);
    if let Some(images) = lock(&IMAGES).as_mut() {
        images.retain(|path, _| !path.starts_with(dir));
    }
}

/// Forgets the images under a directory when dropped (a simulation's temporary directory).
pub struct ForgetOnDrop(PathBuf);

impl ForgetOnDrop {
    pub fn new(dir: &Path) -> ForgetOnDrop {
        ForgetOnDrop(dir.to_path_buf())
    }
}

impl Drop for ForgetOnDrop {
    fn drop(&mut self) {
        forget(&self.0);
    }
}

fn watched(path: &Path) -> bool {
    lock(&WATCHED).iter().any(|dir| path.starts_with(dir))
}

/// The file at `path` is durable as it is now (synced, or just opened).
pub(crate) fn durable_now(path: &Path) {
    if !watched(path) {
        return;
    }
    if let Ok(bytes) = std::fs::read(path) {
        lock(&IMAGES)
            .get_or_insert_with(HashMap::new)
            .insert(path.to_path_buf(), bytes);
    }
}

/// The file at `path` was created as `len` durable zeros.
pub(crate) fn created(path: &Path, len: usize) {
    if watched(path) {
        lock(&IMAGES)
            .get_or_insert_with(HashMap::new)
            .insert(path.to_path_buf(), vec![0; len]);
    }
}

/// For every imaged file under `dir` (the node must be stopped): of the pages that differ
/// from the durable image, puts the image back on those `lose_page` picks (in path and file
/// order). Returns the bytes of the pages put back.
pub fn lose_unsynced_pages(
    dir: &Path,
    mut lose_page: impl FnMut() -> bool,
) -> std::io::Result<u64> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = lock(&IMAGES)
        .as_ref()
        .map(|images| {
            images
                .iter()
                .filter(|(path, _)| path.starts_with(dir))
                .map(|(path, image)| (path.clone(), image.clone()))
                .collect()
        })
        .unwrap_or_default();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut lost = 0;
    for (path, image) in files {
        let Ok(now) = std::fs::read(&path) else {
            continue; // deleted since
        };
        if now.len() != image.len() {
            continue;
        }
        let file = std::fs::OpenOptions::new().write(true).open(&path)?;
        for (index, (page_now, page_image)) in now
            .chunks(PAGE_BYTES)
            .zip(image.chunks(PAGE_BYTES))
            .enumerate()
        {
            if page_now != page_image && lose_page() {
                file.write_all_at(page_image, (index * PAGE_BYTES) as u64)?;
                lost += page_image.len() as u64;
            }
        }
        file.sync_all()?;
        durable_now(&path);
    }
    Ok(lost)
}
