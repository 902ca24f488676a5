//! When the Raft log's appends count as durable: the flusher fires each append's callback
//! once its data is as durable as the [`FlushMode`] promises, coalescing the fsyncs of
//! concurrent appends into one round (group commit at the disk).
//!
//! Production logs run the rounds on a thread of their own. The crash simulation runs them
//! itself ([`Flusher::manual`]), so every disk operation happens in an order it chooses.
//!
//! Invariants: with `Sync` a callback fires only after every file its append wrote (and the
//! directory, if it created a segment) is synced; with `Async` it fires at once, and each
//! round syncs the current segment plus whatever rolls sealed since the last round.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;

use openraft::storage::IOFlushed;

use crate::disk::Disk;
use crate::disk::DiskFile;
use crate::raft::log::store::FlushMode;
use crate::raft::types::LogTypes;
use crate::raft::types::TypeConfig;

/// The segment appends currently go to, read by each `Async` round.
pub type CurrentSegment = Box<dyn Fn() -> Option<Arc<dyn DiskFile>> + Send + Sync>;

/// What one append wrote.
#[derive(Default)]
pub struct Written {
    /// Segments sealed by a roll during the append.
    pub sealed: Vec<Arc<dyn DiskFile>>,
    /// A new segment file was created: the directory must be synced.
    pub created_segment: bool,
    /// The segment the append ended in.
    pub current: Option<Arc<dyn DiskFile>>,
}

struct FlushJob<C: LogTypes> {
    /// Files to sync.
    files: Vec<Arc<dyn DiskFile>>,
    /// The segment directory must be synced too (a segment was created).
    sync_dir: bool,
    /// Completed after the sync; `None` for work done in the background.
    callback: Option<IOFlushed<C>>,
}

/// What a round needs besides its jobs.
struct Rounds {
    mode: FlushMode,
    disk: Arc<dyn Disk>,
    segments_dir: PathBuf,
    current_segment: CurrentSegment,
}

pub struct Flusher<C: LogTypes = TypeConfig> {
    mode: FlushMode,
    jobs: mpsc::Sender<FlushJob<C>>,
    /// Rounds run by the owner ([`Flusher::manual`]).
    #[cfg(test)]
    manual: Option<ManualRounds<C>>,
}

/// The rounds of a [`Flusher::manual`], run by whoever holds this handle.
#[cfg(test)]
pub struct ManualRounds<C: LogTypes>(Arc<std::sync::Mutex<(mpsc::Receiver<FlushJob<C>>, Rounds)>>);

#[cfg(test)]
impl<C: LogTypes> Clone for ManualRounds<C> {
    fn clone(&self) -> Self {
        ManualRounds(self.0.clone())
    }
}

#[cfg(test)]
impl<C: LogTypes> ManualRounds<C> {
    /// Runs one round over the jobs queued so far (and, with `Async`, the current segment).
    pub fn run(&self) {
        let manual = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (receiver, rounds) = &*manual;
        rounds.run(receiver.try_iter().collect());
    }
}

impl<C: LogTypes> Flusher<C> {
    /// A flusher with a thread of its own.
    pub fn start(
        mode: FlushMode,
        disk: Arc<dyn Disk>,
        segments_dir: PathBuf,
        current_segment: CurrentSegment,
    ) -> io::Result<Flusher<C>> {
        let (flusher, receiver, rounds) =
            Flusher::unstarted(mode, disk, segments_dir, current_segment);
        thread::Builder::new()
            .name("raft-log-flush".into())
            .spawn(move || run_rounds(&receiver, &rounds))?;
        Ok(flusher)
    }

    /// A flusher whose rounds run only when [`Flusher::run_round`] is called.
    #[cfg(test)]
    pub fn manual(
        mode: FlushMode,
        disk: Arc<dyn Disk>,
        segments_dir: PathBuf,
        current_segment: CurrentSegment,
    ) -> Flusher<C> {
        let (mut flusher, receiver, rounds) =
            Flusher::unstarted(mode, disk, segments_dir, current_segment);
        flusher.manual = Some(ManualRounds(Arc::new(std::sync::Mutex::new((
            receiver, rounds,
        )))));
        flusher
    }

    /// The flusher, the receiving end of its jobs and what its rounds need.
    fn unstarted(
        mode: FlushMode,
        disk: Arc<dyn Disk>,
        segments_dir: PathBuf,
        current_segment: CurrentSegment,
    ) -> (Flusher<C>, mpsc::Receiver<FlushJob<C>>, Rounds) {
        let (jobs, receiver) = mpsc::channel();
        let rounds = Rounds {
            mode,
            disk,
            segments_dir,
            current_segment,
        };
        let flusher = Flusher {
            mode,
            jobs,
            #[cfg(test)]
            manual: None,
        };
        (flusher, receiver, rounds)
    }

    /// The handle that runs the rounds of a [`Flusher::manual`].
    #[cfg(test)]
    pub fn manual_rounds(&self) -> Option<ManualRounds<C>> {
        self.manual.clone()
    }

    /// Completes `callback` once what an append wrote is durable as the mode promises:
    /// synced first with `Sync`; at once with `Async`, where only a roll's sealed segment and
    /// directory are queued for a sync (the current segment is synced every round).
    pub fn after_write(&self, written: Written, callback: IOFlushed<C>) {
        let mut files = written.sealed;
        let job = match self.mode {
            FlushMode::Async { .. } => {
                callback.io_completed(Ok(()));
                if files.is_empty() && !written.created_segment {
                    return;
                }
                FlushJob {
                    files,
                    sync_dir: written.created_segment,
                    callback: None,
                }
            }
            FlushMode::Sync => {
                files.extend(written.current);
                FlushJob {
                    files,
                    sync_dir: written.created_segment,
                    callback: Some(callback),
                }
            }
        };
        if let Err(mpsc::SendError(job)) = self.jobs.send(job) {
            tracing::error!("raft log flusher stopped");
            if let Some(callback) = job.callback {
                callback.io_completed(Err(io::Error::other("raft log flusher stopped")));
            }
        }
    }
}

/// The flusher thread: a round whenever jobs arrive, and with `Async` at least every interval.
fn run_rounds<C: LogTypes>(receiver: &mpsc::Receiver<FlushJob<C>>, rounds: &Rounds) {
    loop {
        let first = match rounds.mode {
            FlushMode::Sync => match receiver.recv() {
                Ok(job) => Some(job),
                Err(mpsc::RecvError) => return,
            },
            FlushMode::Async { interval } => match receiver.recv_timeout(interval) {
                Ok(job) => Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            },
        };
        let mut jobs: Vec<FlushJob<C>> = first.into_iter().collect();
        jobs.extend(receiver.try_iter());
        rounds.run(jobs);
    }
}

impl Rounds {
    /// Syncs what `jobs` wrote (each file once) and completes their callbacks.
    fn run<C: LogTypes>(&self, jobs: Vec<FlushJob<C>>) {
        let mut to_sync: Vec<Arc<dyn DiskFile>> = Vec::new();
        for file in jobs.iter().flat_map(|job| &job.files) {
            if !to_sync.iter().any(|known| Arc::ptr_eq(known, file)) {
                to_sync.push(file.clone());
            }
        }
        if let FlushMode::Async { .. } = self.mode {
            to_sync.extend((self.current_segment)());
        }
        let sync_dir = jobs.iter().any(|job| job.sync_dir);
        let result = to_sync
            .iter()
            .try_for_each(|file| file.sync_data())
            .and_then(|()| {
                if sync_dir {
                    self.disk.sync_dir(&self.segments_dir)
                } else {
                    Ok(())
                }
            });
        if let Err(error) = &result {
            tracing::error!(%error, "raft log fsync failed");
        }
        for callback in jobs.into_iter().filter_map(|job| job.callback) {
            let outcome = match &result {
                Ok(()) => Ok(()),
                Err(error) => Err(io::Error::new(error.kind(), error.to_string())),
            };
            callback.io_completed(outcome);
        }
    }
}
