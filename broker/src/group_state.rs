//! The state one broker node holds for its group: the message store and the metadata tables.
//!
//! Written only by the Raft state machine (applying committed commands, or installing a
//! snapshot); read by the broker API. Locks are `std::sync` and never held across `.await`.

use std::collections::BTreeSet;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::RwLock;
use std::sync::RwLockReadGuard;
use std::sync::RwLockWriteGuard;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

use rocketraft_proto::POP_ANY_QUEUE;
use tokio::sync::watch;

use crate::metadata::Metadata;
use crate::store::MessageStore;
use crate::store::PendingFlush;
use crate::store::StoreError;

pub struct GroupState {
    store: RwLock<MessageStore>,
    metadata: RwLock<Metadata>,
    /// Bumped whenever the topic table changes, so the leader re-registers its routes.
    topics_version: watch::Sender<u64>,
    /// One arrival counter per queue someone waits on (held pulls, the schedule service),
    /// bumped when messages are applied to that queue, so a waiter wakes only for its own.
    queue_arrivals: Mutex<HashMap<(String, i32), watch::Sender<u64>>>,
    /// Held from the start of a store flush to its end, so two flushes never overlap: the
    /// second would find files the first marked clean and call its data durable before the
    /// first's fsyncs finished.
    flushing: Arc<tokio::sync::Mutex<()>>,
    /// The CommitLog end of the last durable snapshot (-1: none yet); see
    /// [`GroupState::snapshot_end`].
    snapshot_end: AtomicI64,
    /// Retention's last reading: the disk's used fraction (f64 bits), and whether it is past
    /// `disk_full_ratio`, when sends are refused.
    disk_used_ratio: AtomicU64,
    disk_full: AtomicBool,
    /// Work on this state that outlives the call that started it (a snapshot build, which
    /// openraft runs detached and which flushes the store and writes the snapshot file): a
    /// node's shutdown waits for it ([`GroupState::background_finished`]) before it unlocks
    /// the data dir.
    background: TaskTracker,
}

/// A flush of the store under way ([`GroupState::begin_flush`]); it may move to another
/// thread to finish.
#[must_use = "the data is durable only once `finish` returns"]
pub struct StoreFlush {
    pending: PendingFlush,
    _exclusive: tokio::sync::OwnedMutexGuard<()>,
}

impl StoreFlush {
    /// The CommitLog end this flush makes durable.
    pub fn commit_log_end(&self) -> i64 {
        self.pending.commit_log_end()
    }

    /// fsyncs what was dirty and writes the store's checkpoint; then other flushes may run.
    pub fn finish(self) -> Result<(), StoreError> {
        self.pending.finish()
    }
}

/// Arrival counters kept before the ones nobody waits on any more are dropped.
const QUEUE_ARRIVALS_KEPT: usize = 4096;

impl GroupState {
    pub fn new(store: MessageStore, metadata: Metadata) -> GroupState {
        GroupState {
            store: RwLock::new(store),
            metadata: RwLock::new(metadata),
            topics_version: watch::Sender::new(0),
            queue_arrivals: Mutex::default(),
            flushing: Arc::default(),
            snapshot_end: AtomicI64::new(-1),
            disk_used_ratio: AtomicU64::new(0),
            disk_full: AtomicBool::new(false),
            background: TaskTracker::new(),
        }
    }

    /// Counts as background work on this state until dropped.
    pub fn background_work(&self) -> TaskTrackerToken {
        self.background.token()
    }

    /// Returns once no background work is left; none may start after (a node shutting down).
    pub async fn background_finished(&self) {
        self.background.close();
        self.background.wait().await;
    }

    /// A snapshot naming CommitLog end `end` is durable.
    pub fn note_durable_snapshot(&self, end: i64) {
        self.snapshot_end.store(end, Ordering::Relaxed);
    }

    /// The CommitLog end of the last durable snapshot, `None` before the first. Everything
    /// after it is needed: a restart cuts the store back to it or to a later checkpoint, a
    /// follower given the snapshot is sent the CommitLog up to it, and replicas applying the
    /// entries after it look back for retries from there.
    pub fn snapshot_end(&self) -> Option<u64> {
        u64::try_from(self.snapshot_end.load(Ordering::Relaxed)).ok()
    }

    /// Records retention's reading of the disk.
    pub fn set_disk_usage(&self, used_ratio: f64, full: bool) {
        self.disk_used_ratio
            .store(used_ratio.to_bits(), Ordering::Relaxed);
        self.disk_full.store(full, Ordering::Relaxed);
    }

    /// The disk's used fraction at retention's last reading (0 before the first).
    pub fn disk_used_ratio(&self) -> f64 {
        f64::from_bits(self.disk_used_ratio.load(Ordering::Relaxed))
    }

    /// Whether retention found the disk filled past `disk_full_ratio` on its last round.
    pub fn disk_full(&self) -> bool {
        self.disk_full.load(Ordering::Relaxed)
    }

    /// Starts a flush of the store: waits for any other flush to finish, then notes what is
    /// dirty under a short write lock. The returned [`StoreFlush`] does the fsyncs without
    /// the store lock and keeps other flushes out until it is done.
    pub async fn begin_flush(&self) -> Result<StoreFlush, StoreError> {
        let exclusive = self.flushing.clone().lock_owned().await;
        let pending = self.store_mut().begin_flush()?;
        Ok(StoreFlush {
            pending,
            _exclusive: exclusive,
        })
    }

    /// Read access to the store. A poisoned lock means a writer panicked mid-apply: the node
    /// cannot trust its state, so it stops rather than serve it.
    pub fn store(&self) -> RwLockReadGuard<'_, MessageStore> {
        self.store
            .read()
            .unwrap_or_else(|_| panic!("message store lock poisoned"))
    }

    pub fn store_mut(&self) -> RwLockWriteGuard<'_, MessageStore> {
        self.store
            .write()
            .unwrap_or_else(|_| panic!("message store lock poisoned"))
    }

    pub fn metadata(&self) -> RwLockReadGuard<'_, Metadata> {
        self.metadata
            .read()
            .unwrap_or_else(|_| panic!("metadata lock poisoned"))
    }

    pub fn metadata_mut(&self) -> RwLockWriteGuard<'_, Metadata> {
        self.metadata
            .write()
            .unwrap_or_else(|_| panic!("metadata lock poisoned"))
    }

    /// Tells watchers the topic table changed.
    pub fn topics_changed(&self) {
        self.topics_version.send_modify(|version| *version += 1);
    }

    pub fn watch_topics(&self) -> watch::Receiver<u64> {
        self.topics_version.subscribe()
    }

    /// Tells those waiting on `queues` (or on any queue of their topics) that messages were
    /// applied to them.
    pub fn messages_arrived_in(&self, queues: &BTreeSet<(String, i32)>) {
        let arrivals = self.lock_arrivals();
        if arrivals.is_empty() {
            return;
        }
        let mut previous_topic = None;
        for queue in queues {
            if let Some(arrival) = arrivals.get(queue) {
                arrival.send_modify(|version| *version += 1);
            }
            // The set is ordered: a topic's queues come one after another.
            if previous_topic != Some(&queue.0) {
                previous_topic = Some(&queue.0);
                if let Some(arrival) = arrivals.get(&(queue.0.clone(), POP_ANY_QUEUE)) {
                    arrival.send_modify(|version| *version += 1);
                }
            }
        }
    }

    /// Wakes every waiter (a snapshot replaced the store).
    pub fn messages_arrived_everywhere(&self) {
        for arrival in self.lock_arrivals().values() {
            arrival.send_modify(|version| *version += 1);
        }
    }

    /// A receiver that changes whenever messages are applied to `topic`/`queue_id` (to any
    /// queue of `topic` for `POP_ANY_QUEUE`). Mark it seen before reading the queue, so an
    /// arrival in between still wakes the reader.
    pub fn watch_queue(&self, topic: &str, queue_id: i32) -> watch::Receiver<u64> {
        let mut arrivals = self.lock_arrivals();
        if arrivals.len() >= QUEUE_ARRIVALS_KEPT {
            arrivals.retain(|_, arrival| arrival.receiver_count() > 0);
        }
        arrivals
            .entry((topic.to_owned(), queue_id))
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe()
    }

    fn lock_arrivals(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(String, i32), watch::Sender<u64>>> {
        self.queue_arrivals
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
