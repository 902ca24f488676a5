//! Makes a Raft log purge durable off the append path: writes the purge mark, then deletes
//! the segments the purge emptied.
//!
//! openraft calls `purge` on the task that also appends, and a purge costs several fsyncs
//! (the mark's file and directory, the segment directory) plus freeing the deleted files'
//! page cache: done inline it stalls every append behind it. The log store updates its
//! in-memory state at once and hands the files to the purger, which works through purges in
//! the order they were made, on a thread of its own.
//!
//! Invariants: a purge's segments are deleted only after its mark is durable, so a crash at
//! any point leaves either the older mark with every segment (the purge never happened) or
//! the newer mark with segments it covers, which recovery deletes. Marks land in purge
//! order: a later purge's mark is never overwritten by an earlier one.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;

use crate::disk::Disk;
use crate::durable_file;
use crate::raft::log::segment::LogSegment;

/// One purge to make durable.
pub struct PurgeJob {
    /// The encoded purge mark and where it goes.
    pub mark_path: PathBuf,
    pub mark: Vec<u8>,
    /// Segments holding only purged entries, already gone from the log's view.
    pub segments: Vec<LogSegment>,
}

impl PurgeJob {
    fn run(self, disk: &dyn Disk) -> io::Result<()> {
        durable_file::write_atomic_on(disk, &self.mark_path, &self.mark)?;
        for segment in self.segments {
            segment.delete()?;
        }
        Ok(())
    }
}

pub struct Purger {
    mode: Mode,
}

enum Mode {
    /// Jobs go to the purger thread; `None` once shutting down.
    Thread {
        jobs: Option<mpsc::Sender<PurgeJob>>,
        thread: Option<thread::JoinHandle<()>>,
    },
    /// Each job runs at once, on the caller's thread (the simulations: no thread may run
    /// disk operations in an order the seed does not choose).
    #[cfg(test)]
    Inline { disk: Arc<dyn Disk> },
}

impl Purger {
    /// A purger with a thread of its own.
    pub fn start(disk: Arc<dyn Disk>) -> io::Result<Purger> {
        let (jobs, receiver) = mpsc::channel::<PurgeJob>();
        let thread = thread::Builder::new()
            .name("raft-log-purge".into())
            .spawn(move || {
                for job in receiver {
                    if let Err(error) = job.run(&*disk) {
                        // The log's view already dropped these entries; on disk they stay
                        // until a later purge or the next start deletes them.
                        tracing::error!(%error, "raft log purge failed to reach the disk");
                    }
                }
            })?;
        Ok(Purger {
            mode: Mode::Thread {
                jobs: Some(jobs),
                thread: Some(thread),
            },
        })
    }

    /// A purger that runs each job when it is handed one.
    #[cfg(test)]
    pub fn inline(disk: Arc<dyn Disk>) -> Purger {
        Purger {
            mode: Mode::Inline { disk },
        }
    }

    /// Makes `job` durable: later on the purger thread, or now when inline.
    pub fn purge(&self, job: PurgeJob) -> io::Result<()> {
        match &self.mode {
            Mode::Thread { jobs, .. } => jobs
                .as_ref()
                .and_then(|jobs| jobs.send(job).ok())
                .ok_or_else(|| io::Error::other("raft log purger stopped")),
            #[cfg(test)]
            Mode::Inline { disk } => job.run(&**disk),
        }
    }
}

impl Drop for Purger {
    /// Waits for queued purges: a log reopened on the same directory must not find the old
    /// one's purger still deleting files.
    fn drop(&mut self) {
        match &mut self.mode {
            Mode::Thread { jobs, thread } => {
                drop(jobs.take());
                if let Some(thread) = thread.take()
                    && thread.join().is_err()
                {
                    tracing::error!("raft log purger panicked");
                }
            }
            #[cfg(test)]
            Mode::Inline { .. } => {}
        }
    }
}
