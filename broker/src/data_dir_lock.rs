//! `DataDirLock`: one broker node at a time per data directory.
//!
//! A node takes an exclusive `flock` on `<data_dir>/LOCK` before it opens anything under the
//! directory, and holds it for as long as it runs. A second node given the same directory,
//! in another process or in the same one, fails to start and names the holder, instead of
//! writing the same files. The kernel releases the lock when the holder's descriptor closes,
//! so a node killed with -9 leaves no stale lock behind.

use std::fs;
use std::fs::File;
use std::fs::OpenOptions;
use std::io;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::path::PathBuf;

/// The lock file's name inside a data directory.
pub const LOCK_FILE: &str = "LOCK";

/// Held while a node owns its data directory.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "data dir {dir} is in use by another broker node ({holder}); each node needs a data dir of its own"
    )]
    InUse { dir: PathBuf, holder: String },
    #[error("lock data dir {dir}")]
    Io {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl DataDirLock {
    /// Creates `dir` if needed and locks it, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<DataDirLock, LockError> {
        let failed = |source| LockError::Io {
            dir: dir.to_owned(),
            source,
        };
        fs::create_dir_all(dir).map_err(failed)?;
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(failed)?;
        // SAFETY: flock reads only its integer arguments; `file` keeps the descriptor open for
        // the whole call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(failed(error));
            }
            let holder = fs::read_to_string(&path)
                .ok()
                .map(|text| text.trim().to_owned())
                .filter(|text| !text.is_empty())
                .unwrap_or_else(|| "holder unknown".to_owned());
            return Err(LockError::InUse {
                dir: dir.to_owned(),
                holder,
            });
        }
        file.set_len(0)
            .and_then(|()| write!(file, "pid {}", std::process::id()))
            .map_err(failed)?;
        Ok(DataDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_locked_dir_refuses_a_second_holder_until_the_first_lets_go() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("node-1");
        let first = DataDirLock::acquire(&data).expect("first lock");
        let error = DataDirLock::acquire(&data).expect_err("second lock");
        let pid = format!("pid {}", std::process::id());
        assert!(
            matches!(&error, LockError::InUse { holder, .. } if *holder == pid),
            "{error:?}"
        );
        assert!(
            error.to_string().contains("in use by another broker node"),
            "{error}"
        );
        drop(first);
        DataDirLock::acquire(&data).expect("the lock is free once its holder is gone");
    }
}
