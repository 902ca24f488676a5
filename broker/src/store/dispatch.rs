//! `Dispatcher`: fans an appended CommitLog record out to its ConsumeQueue unit and its index
//! entries, and owns the set of ConsumeQueues and the index.
//!
//! Invariants: dispatching is idempotent (a record already dispatched changes nothing), so
//! recovery may re-dispatch any suffix of the CommitLog; the facts dispatched (topic, queue,
//! queue offset, size, tags code, keys) are derived only from the record's bytes and the
//! configured `TagsCodeFn`, so a rebuild reproduces exactly what the live append wrote.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use tracing::warn;

use crate::store::config::StoreConfig;
use crate::store::consume_queue::{CONSUME_QUEUE_DIR, ConsumeQueue, CqUnit, QueueTail};
use crate::store::error::StoreError;
use crate::store::index::{Index, key_hash};
use crate::store::mapped_file;
use crate::store::mapped_file::Detached;
use crate::store::mapped_file::FlushTarget;
use crate::store::properties::{KEYS, UNIQ_KEY, split_keys};
use crate::store::record::{self, RecordView};

/// What the dispatcher needs from one record, extracted (and validated) once; it borrows
/// the record's bytes, so dispatching allocates nothing per record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordInfo<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    /// QUEUEOFFSET as stored in the record.
    pub queue_offset: i64,
    pub size: i32,
    pub tags_code: i64,
    pub store_timestamp_ms: i64,
    /// The record's UNIQ_KEY, if it has a non-empty one.
    uniq_key: Option<&'a str>,
    /// The record's KEYS property (space separated), if any.
    user_keys: Option<&'a str>,
}

impl<'a> RecordInfo<'a> {
    /// Extracts the dispatch facts, checking the topic name and queue id.
    pub fn from_view(view: &RecordView<'a>, tags_code: i64) -> Result<RecordInfo<'a>, StoreError> {
        record::validate_topic(view.topic())?;
        if view.queue_id() < 0 {
            return Err(StoreError::InvalidQueueId {
                queue_id: view.queue_id(),
            });
        }
        Ok(RecordInfo {
            topic: view.topic(),
            queue_id: view.queue_id(),
            queue_offset: view.queue_offset(),
            size: view.total_size() as i32,
            tags_code,
            store_timestamp_ms: view.store_timestamp_ms(),
            uniq_key: view.property(UNIQ_KEY)?.filter(|k| !k.is_empty()),
            user_keys: view.property(KEYS)?,
        })
    }

    /// The index keys of the record: UNIQ_KEY and every KEYS entry.
    pub fn keys(&self) -> impl Iterator<Item = &'a str> + use<'a> {
        self.uniq_key
            .into_iter()
            .chain(self.user_keys.into_iter().flat_map(split_keys))
    }
}

/// Index keys waiting in a [`Dispatcher`] at which a dispatch adds them without waiting for
/// [`Dispatcher::finish_dispatch`]: bounds the memory of a long re-dispatch.
pub const PENDING_INDEX_KEYS_MAX: usize = 1024;

/// The ConsumeQueues and the index of a store.
#[derive(Debug)]
pub struct Dispatcher {
    store_dir: PathBuf,
    units_per_segment: u64,
    /// Every queue; a queue keeps its slot for the dispatcher's life (queues are never
    /// dropped, only truncated).
    queues: Vec<ConsumeQueue>,
    /// topic -> queue id -> slot in `queues`; nested so a lookup borrows the topic name.
    slots: HashMap<String, HashMap<i32, usize>>,
    /// The slot dispatched to last: the records of a batch share a queue, so all but the
    /// first find it without hashing.
    last_slot: Option<usize>,
    index: Index,
    /// (key hash, CommitLog offset) of dispatched records not yet in the index, in order.
    /// Invariant: empty outside a run of dispatches (see [`Dispatcher::finish_dispatch`]).
    pending_keys: Vec<(u64, i64)>,
}

impl Dispatcher {
    /// Opens every queue found under `<dir>/consumequeue/` and the index, keeping the first
    /// `trusted_index_entries` of it (see [`Index::open`]).
    pub fn open(
        config: &StoreConfig,
        trusted_index_entries: u64,
    ) -> Result<Dispatcher, StoreError> {
        let root = config.dir.join(CONSUME_QUEUE_DIR);
        mapped_file::create_dir_durable(&root)?;
        let mut dispatcher = Dispatcher {
            store_dir: config.dir.clone(),
            units_per_segment: config.consume_queue_units_per_segment,
            queues: Vec::new(),
            slots: HashMap::new(),
            last_slot: None,
            pending_keys: Vec::new(),
            index: Index::open(
                &config.dir,
                config.index_entries_per_file,
                trusted_index_entries,
            )?,
        };
        for (topic, queue_id) in list_queue_dirs(&root)? {
            dispatcher.open_queue(&topic, queue_id)?;
        }
        Ok(dispatcher)
    }

    fn open_queue(&mut self, topic: &str, queue_id: i32) -> Result<usize, StoreError> {
        let queue = ConsumeQueue::open(&self.store_dir, topic, queue_id, self.units_per_segment)?;
        let slot = self.queues.len();
        self.queues.push(queue);
        self.slots
            .entry(topic.to_owned())
            .or_default()
            .insert(queue_id, slot);
        Ok(slot)
    }

    /// The queue `topic`/`queue_id`, created if new.
    pub fn queue_mut(
        &mut self,
        topic: &str,
        queue_id: i32,
    ) -> Result<&mut ConsumeQueue, StoreError> {
        let last = self.last_slot.filter(|slot| {
            let queue = &self.queues[*slot];
            queue.queue_id() == queue_id && queue.topic() == topic
        });
        let slot = match last {
            Some(slot) => slot,
            None => match self.slot(topic, queue_id) {
                Some(slot) => slot,
                None => self.open_queue(topic, queue_id)?,
            },
        };
        self.last_slot = Some(slot);
        Ok(&mut self.queues[slot])
    }

    fn slot(&self, topic: &str, queue_id: i32) -> Option<usize> {
        self.slots.get(topic)?.get(&queue_id).copied()
    }

    /// The queue `topic`/`queue_id`, if it exists.
    pub fn queue(&self, topic: &str, queue_id: i32) -> Option<&ConsumeQueue> {
        Some(&self.queues[self.slot(topic, queue_id)?])
    }

    /// Every queue as `(topic, queue_id)`, in no order.
    pub fn queue_names(&self) -> Vec<(String, i32)> {
        self.queues
            .iter()
            .map(|queue| (queue.topic().to_owned(), queue.queue_id()))
            .collect()
    }

    /// The [`QueueTail`] of every queue that ever held a unit, in no order.
    pub fn queue_tails(&self) -> Vec<QueueTail> {
        self.queues.iter().filter_map(ConsumeQueue::tail).collect()
    }

    /// The ids of `topic`'s queues, in no order.
    pub fn queue_ids(&self, topic: &str) -> impl Iterator<Item = i32> + '_ {
        self.slots
            .get(topic)
            .into_iter()
            .flat_map(|ids| ids.keys().copied())
    }

    pub fn index(&self) -> &Index {
        debug_assert!(
            self.pending_keys.is_empty(),
            "index read inside a run of dispatches"
        );
        &self.index
    }

    pub fn index_mut(&mut self) -> &mut Index {
        debug_assert!(
            self.pending_keys.is_empty(),
            "index changed inside a run of dispatches"
        );
        &mut self.index
    }

    /// Writes the unit for the record at CommitLog `offset` at `queue_offset`, and queues its
    /// index entries for [`Dispatcher::finish_dispatch`]. With `allow_start`, an empty queue
    /// may begin at a later queue offset. Returns whether a unit was added (false: the same
    /// unit was there already).
    pub fn dispatch(
        &mut self,
        offset: u64,
        info: &RecordInfo<'_>,
        queue_offset: u64,
        allow_start: bool,
    ) -> Result<bool, StoreError> {
        let queue = self.queue_mut(info.topic, info.queue_id)?;
        let before = queue.max_offset();
        if allow_start && queue.min_offset() == before && queue_offset > before {
            queue.start_at(queue_offset)?;
        }
        let unit = CqUnit {
            commit_log_offset: offset as i64,
            size: info.size,
            tags_code: info.tags_code,
        };
        queue.put(queue_offset, unit)?;
        let unit_added = queue.max_offset() > before;
        self.pending_keys
            .extend(info.keys().map(|key| (key_hash(key), offset as i64)));
        if self.pending_keys.len() >= PENDING_INDEX_KEYS_MAX {
            self.finish_dispatch()?;
        }
        Ok(unit_added)
    }

    /// Ends a run of dispatches: adds their index entries, all together, so that their
    /// slot loads overlap instead of each missing the cache in turn.
    pub fn finish_dispatch(&mut self) -> Result<(), StoreError> {
        let result = self.index.add_all(&self.pending_keys);
        self.pending_keys.clear();
        result
    }

    /// Takes the index pairs of the current run of dispatches, for the store to add
    /// (`MessageStore::finish_dispatch`, which mends damage an add meets).
    pub fn take_pending_keys(&mut self) -> Vec<(u64, i64)> {
        std::mem::take(&mut self.pending_keys)
    }

    /// Gives back the buffer [`Dispatcher::take_pending_keys`] took, emptied, for reuse.
    pub fn recycle_pending_keys(&mut self, mut pairs: Vec<(u64, i64)>) {
        pairs.clear();
        self.pending_keys = pairs;
    }

    /// Drops units and index entries at or beyond CommitLog offset `end`;
    /// returns `(units, index entries)` dropped.
    pub fn truncate(&mut self, end: u64) -> Result<(u64, u64), StoreError> {
        self.finish_dispatch()?;
        let mut units = 0;
        for queue in &mut self.queues {
            units += queue.truncate_by_commit_log(end)?;
        }
        let entries = self.index.truncate(end)? as u64;
        Ok((units, entries))
    }

    /// Forgets the units and index files that point only below CommitLog offset
    /// `commit_log_min` (retention deleted what they name); returns (units, index entries).
    /// Their files go to `detached`.
    pub fn forget_below(&mut self, commit_log_min: u64, detached: &mut Detached) -> (u64, u64) {
        let units = self
            .queues
            .iter_mut()
            .map(|queue| queue.forget_below(commit_log_min, detached))
            .sum();
        (units, self.index.forget_below(commit_log_min, detached))
    }

    /// Empties every queue (each restarts at the queue offset of its next unit) and the index.
    pub fn clear(&mut self) -> Result<(), StoreError> {
        self.pending_keys.clear();
        for queue in &mut self.queues {
            queue.clear()?;
        }
        self.clear_index().map(drop)
    }

    /// Drops every index entry (before a full index rebuild).
    pub fn clear_index(&mut self) -> Result<u64, StoreError> {
        Ok(self.index.truncate(0)? as u64)
    }

    /// Number of queues.
    pub fn queue_count(&self) -> u64 {
        self.queues.len() as u64
    }

    /// Sum of the queues' max offsets.
    pub fn queue_offset_sum(&self) -> u64 {
        self.queues.iter().map(ConsumeQueue::max_offset).sum()
    }

    /// One sweep of the idle-page release over every queue; returns how many files gave
    /// their pages back now.
    pub fn release_idle_pages(&mut self, idle_sweeps: u32) -> usize {
        self.queues
            .iter_mut()
            .map(|queue| queue.release_idle_pages(idle_sweeps))
            .sum()
    }

    /// Marks every queue and the index clean and adds what makes their writes durable to
    /// `targets`.
    pub fn begin_flush(&mut self, targets: &mut Vec<FlushTarget>) -> Result<(), StoreError> {
        self.finish_dispatch()?;
        for queue in &mut self.queues {
            queue.begin_flush(targets);
        }
        self.index.begin_flush(targets)?;
        Ok(())
    }
}

/// `(topic, queue_id)` of every queue directory; unexpected names are skipped with a warning.
fn list_queue_dirs(root: &Path) -> Result<Vec<(String, i32)>, StoreError> {
    let mut found = Vec::new();
    for topic_dir in read_dir_paths(root)? {
        let topic = topic_dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if record::validate_topic(topic).is_err() || !topic_dir.is_dir() {
            warn!(path = %topic_dir.display(), "skipping unexpected entry in consumequeue");
            continue;
        }
        for queue_dir in read_dir_paths(&topic_dir)? {
            let queue_id = queue_dir
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse::<i32>().ok())
                .filter(|id| *id >= 0);
            match queue_id {
                Some(id) if queue_dir.is_dir() => found.push((topic.to_owned(), id)),
                _ => warn!(path = %queue_dir.display(), "skipping unexpected queue directory"),
            }
        }
    }
    found.sort();
    Ok(found)
}

fn read_dir_paths(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    fs::read_dir(dir)
        .map_err(|e| StoreError::io("list directory", dir, e))?
        .map(|entry| {
            entry
                .map(|e| e.path())
                .map_err(|e| StoreError::io("list directory", dir, e))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::config::default_tags_code;
    use crate::store::record::tests::sample;
    use rocketraft_domain::tags_code::tags_code;

    #[test]
    fn record_info_collects_keys_and_tags() {
        let bytes = sample("TopicA", 3, b"x").encode().expect("encode");
        let view = RecordView::parse(&bytes).expect("parse");
        let info = RecordInfo::from_view(&view, default_tags_code(&view)).expect("info");
        assert_eq!(info.tags_code, tags_code("TagA"));
        assert_eq!(
            info.keys().collect::<Vec<_>>(),
            vec!["UNIQ-TopicA-3-1", "order-1", "user-7"]
        );
        assert_eq!((info.topic, info.queue_id), ("TopicA", 3));
    }

    #[test]
    fn negative_queue_id_is_rejected() {
        let bytes = sample("TopicA", -1, b"x").encode().expect("encode");
        let view = RecordView::parse(&bytes).expect("parse");
        assert!(matches!(
            RecordInfo::from_view(&view, 0),
            Err(StoreError::InvalidQueueId { queue_id: -1 })
        ));
    }

    #[test]
    fn dispatch_is_idempotent_and_lists_queues_on_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = StoreConfig {
            consume_queue_units_per_segment: 4,
            ..StoreConfig::new(dir.path())
        };
        let mut dispatcher = Dispatcher::open(&config, 0).expect("open");
        let bytes = sample("TopicA", 3, b"x").encode().expect("encode");
        let view = RecordView::parse(&bytes).expect("parse");
        let info = RecordInfo::from_view(&view, 7).expect("info");
        assert!(dispatcher.dispatch(0, &info, 0, false).expect("dispatch"));
        dispatcher.finish_dispatch().expect("index");
        assert_eq!(dispatcher.index().len(), 3);
        assert!(!dispatcher.dispatch(0, &info, 0, false).expect("again"));
        dispatcher.finish_dispatch().expect("index");
        assert_eq!(
            dispatcher.index().len(),
            3,
            "the same pairs are stored once"
        );
        let mut targets = Vec::new();
        dispatcher.begin_flush(&mut targets).expect("flush");
        targets
            .iter()
            .try_for_each(FlushTarget::sync)
            .expect("sync");
        std::fs::create_dir_all(dir.path().join(CONSUME_QUEUE_DIR).join("bad topic"))
            .expect("mkdir");
        drop(dispatcher);
        let dispatcher = Dispatcher::open(&config, 3).expect("reopen");
        assert_eq!(dispatcher.queue_count(), 1);
        assert_eq!(dispatcher.queue_offset_sum(), 1);
        assert_eq!(
            dispatcher
                .index()
                .lookup("order-1", 0)
                .collect::<Result<Vec<_>, _>>()
                .expect("lookup"),
            [0]
        );
    }
}
