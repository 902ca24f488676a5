//! Where a simulation keeps its real files (the message store, which is read through mmap and
//! so cannot live on a simulated disk): in memory when the machine has a tmpfs at `/dev/shm`.
//!
//! Invariant: nothing a simulation checks depends on a real disk. What survives a power loss
//! is modelled by the simulation itself (`durable_images`, `sim_disk`), so a real disk's
//! fsyncs only cost time: the group simulation ran 3 times slower on this project's CI disk.

use std::path::Path;

/// The tmpfs most Linux machines mount.
const IN_MEMORY_DIR: &str = "/dev/shm";

/// A new temporary directory, in memory when the machine has a tmpfs, else in the system's
/// temporary directory.
pub(crate) fn sim_tempdir() -> std::io::Result<tempfile::TempDir> {
    let in_memory = Path::new(IN_MEMORY_DIR);
    if in_memory.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(in_memory)
    {
        return Ok(dir);
    }
    tempfile::tempdir()
}
