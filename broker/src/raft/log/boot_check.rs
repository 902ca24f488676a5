//! Whether the machine restarted since this node's Raft log was last written with
//! `flush = "async"`.
//!
//! With `async` a killed process loses nothing (its writes sit in the page cache), but a power
//! loss or a kernel crash loses what the last flush interval wrote: the node then holds less
//! than it acknowledged. A leader that counted those entries would find the follower's log
//! gone back, which openraft treats as a bug and stops on; so such a node first asks the
//! leader to accept its shorter log (as a repairing node does, `raft::repair`).
//!
//! The kernel's boot id tells the two apart. The log directory's `boot` file holds the boot
//! id of the kernel that last ran the node with `async`; a different one at start means the
//! unsynced tail may be gone. The file is brought up to date (or removed under `sync`) only
//! once the shorter log was accepted, so a restart before that asks again.

use std::io;
use std::path::Path;

use crate::disk::Disk;
use crate::durable_file;
use crate::raft::log::store::FlushMode;

/// The file, in the Raft log directory.
const BOOT_FILE: &str = "boot";
/// Where Linux publishes the id of the running kernel's boot.
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// The running kernel's boot id; `None` where the system does not publish one (there, a
/// reboot goes unnoticed).
pub fn current_boot_id() -> Option<String> {
    std::fs::read_to_string(BOOT_ID_PATH)
        .ok()
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
}

/// Whether the log in `log_dir` was written with `async` under another boot than
/// `boot_id`: its unsynced tail may be lost.
pub fn rebooted_since_async_write(
    disk: &dyn Disk,
    log_dir: &Path,
    boot_id: Option<&str>,
) -> io::Result<bool> {
    let Some(boot_id) = boot_id else {
        return Ok(false);
    };
    let written_under = durable_file::read_on(disk, &log_dir.join(BOOT_FILE))?;
    Ok(written_under.is_some_and(|written| written != boot_id.as_bytes()))
}

/// Records that the log in `log_dir` is written with `flush` under `boot_id` from now on:
/// the boot id under `async`, nothing under `sync` (every acknowledged append is on disk).
pub fn settle(
    disk: &dyn Disk,
    log_dir: &Path,
    flush: FlushMode,
    boot_id: Option<&str>,
) -> io::Result<()> {
    let path = log_dir.join(BOOT_FILE);
    match (flush, boot_id) {
        (FlushMode::Async { .. }, Some(boot_id)) => {
            durable_file::write_atomic_on(disk, &path, boot_id.as_bytes()).map_err(io::Error::from)
        }
        _ => match disk.remove_file(&path) {
            Ok(()) => disk.sync_parent_dir(&path),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(error),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::disk::OsDisk;

    const ASYNC: FlushMode = FlushMode::Async {
        interval: Duration::from_millis(100),
    };

    #[test]
    fn only_an_async_log_written_under_another_boot_may_have_lost_its_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dir = dir.path();
        let rebooted = |boot| rebooted_since_async_write(&OsDisk, dir, boot).expect("check");
        assert!(!rebooted(Some("boot-1")), "a new log lost nothing");

        settle(&OsDisk, dir, ASYNC, Some("boot-1")).expect("settle");
        assert!(!rebooted(Some("boot-1")), "the same boot: a killed process");
        assert!(rebooted(Some("boot-2")), "another boot: a power loss");
        assert!(!rebooted(None), "no boot id, no way to tell");

        settle(&OsDisk, dir, FlushMode::Sync, Some("boot-2")).expect("settle");
        assert!(!rebooted(Some("boot-3")), "written with sync since");
        settle(&OsDisk, dir, FlushMode::Sync, Some("boot-3")).expect("settling twice");
    }

    #[test]
    fn this_machine_publishes_a_boot_id() {
        assert!(current_boot_id().is_some_and(|id| id.len() >= 32));
    }
}
