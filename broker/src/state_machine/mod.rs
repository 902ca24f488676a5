//! The Raft state machine of a broker group: applies committed [`Command`]s to the message
//! store and the metadata tables, builds and installs snapshots.
//!
//! Invariants:
//! - apply is a pure function of the entry and the state before it: offsets come
//!   from the store's own counters, times and hosts are already in the encoded records;
//! - the durable checkpoint (`<dir>/checkpoint`) names an applied log id whose effects are all
//!   flushed; at open the store is cut back to the checkpoint's CommitLog end, and openraft
//!   replays the committed entries after it from the Raft log, so nothing is applied twice;
//! - the Raft log is purged only up to a snapshot, and a snapshot is itself a checkpoint,
//!   so the entries a restart must replay are always still in the log (where the log ends
//!   before the checkpoint after all, a snapshot is taken at the checkpoint first:
//!   `snapshot_over_log_gap`);
//! - a checkpoint or snapshot is written no sooner than the durability lag after its cut
//!   (under `flush = async`: until then the whole group may still lose entries in it).

pub mod command;
#[cfg(test)]
pub(crate) mod sim;
pub mod snapshot;

use crate::topic::TRANSACTION_OP_TOPIC;
use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio_util::task::task_tracker::TaskTrackerToken;

use futures::Stream;
use futures::TryStreamExt;
use openraft::EntryPayload;
use openraft::RaftSnapshotBuilder;
use openraft::entry::RaftEntry;
use openraft::storage::EntryResponder;
use openraft::storage::RaftStateMachine;
use serde::Deserialize;
use serde::Serialize;
use tokio::time::Instant;

use crate::durable_file;
use crate::group_state::GroupState;
use crate::metadata::Metadata;
use crate::metadata::TopicTypes;
use crate::metadata::Trailing;
use crate::pop::state::PopChange;
use crate::pop::state::PopChangeOutcome;
use crate::pop::state::PopState;
use crate::raft::codec;
use crate::raft::types::LogId;
use crate::raft::types::LogTypes;
use crate::raft::types::SnapshotMeta;
use crate::raft::types::StoredMembership;
use crate::state_machine::command::AppendedMessage;
use crate::state_machine::command::Command;
use crate::state_machine::command::CommandResult;
use crate::state_machine::snapshot::CommitLogInstaller;
use crate::state_machine::snapshot::CommitLogSource;
use crate::state_machine::snapshot::SNAPSHOT_CHUNK_BYTES;
use crate::state_machine::snapshot::SnapshotData;
use crate::state_machine::snapshot::SnapshotState;
use crate::store::Appended;
use crate::store::MessageStore;
use crate::store::RecordView;
use crate::store::StoreError;
use crate::store::index_repair::mending_index;
use crate::store::properties::UNIQ_KEY;

/// How often applied state is flushed and checkpointed while entries keep arriving.
pub const CHECKPOINT_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);

/// The state machine checkpoint's file, in its directory.
pub(crate) const CHECKPOINT_FILE: &str = "checkpoint";
const SNAPSHOT_FILE: &str = "snapshot";

/// The durable record of applied state (also the content of a snapshot).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Checkpoint {
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    metadata: Metadata,
    commit_log_end: i64,
    /// The metadata's trailing tables ([`Metadata::split`]), last, in their order.
    #[serde(deserialize_with = "crate::metadata::deserialize_or_empty")]
    pops: PopState,
    #[serde(deserialize_with = "crate::metadata::deserialize_or_empty")]
    topic_types: TopicTypes,
}

/// The store ends before what the checkpoint says was flushed: flushed data is gone (a
/// damaged CommitLog), so the node's state must be rebuilt from its group.
#[derive(Debug, thiserror::Error)]
#[error(
    "the CommitLog holds offsets {store_min} to {store_end} but the checkpoint at applied index \
     {applied_index:?} needs {needed}: the store lost flushed data (or a crash interrupted a \
     snapshot that restarted it past its end)"
)]
pub struct StoreLostFlushedData {
    pub store_min: i64,
    pub store_end: i64,
    pub needed: i64,
    pub applied_index: Option<u64>,
}

impl StoreLostFlushedData {
    /// The loss an error from [`StateMachine::open`] reports, if it is one.
    pub fn in_error(error: &io::Error) -> Option<&StoreLostFlushedData> {
        error.get_ref()?.downcast_ref()
    }
}

pub struct StateMachine {
    group: Arc<GroupState>,
    dir: PathBuf,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    /// The last built or installed snapshot; shared with snapshot builders.
    current_snapshot: Arc<Mutex<Option<SnapshotState>>>,
    checkpoint_interval: Duration,
    last_checkpoint_at: Instant,
    /// The checkpoint between its cut and its file, if any.
    checkpoint_in_flight: Option<InFlight>,
    writes: DurableWrites,
    /// How long after its cut a checkpoint or snapshot may name the entries it holds
    /// ([`StateMachine::with_durability_lag`]).
    durability_lag: Duration,
    /// Background work on the group state for as long as this machine lives: openraft's
    /// state machine worker outlives `Raft::shutdown` (nothing joins it) and may be applying
    /// an entry, so a node's shutdown waits for it to drop the machine. Declared last: it is
    /// released after the machine's hold on the group state.
    _in_use: TaskTrackerToken,
}

/// A checkpoint whose state is cut and whose file is not written yet.
enum InFlight {
    /// Written by a thread of its own (not the runtime's blocking pool), so dropping the
    /// state machine can wait for it: a node reopened in the same process must not race a
    /// checkpoint of its previous life.
    Thread(std::thread::JoinHandle<io::Result<()>>),
    /// Flushed; its file is written in the apply task once `due` (the simulation). Dropped
    /// unwritten if the node stops first.
    #[cfg(test)]
    Due {
        due: Instant,
        write: Box<dyn FnOnce() -> io::Result<()> + Send + Sync>,
    },
}

/// Where the fsyncs and file writes of checkpoints and snapshots run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DurableWrites {
    /// Off the apply task, while applying goes on (the broker).
    Background,
    /// In the apply task, before it goes on: the group simulation, whose runtime must not wait
    /// on other threads to replay exactly.
    #[cfg(test)]
    Inline,
}

impl Drop for StateMachine {
    fn drop(&mut self) {
        if let Some(InFlight::Thread(task)) = self.checkpoint_in_flight.take()
            && let Err(error) = join_checkpoint(task)
        {
            tracing::error!(%error, "the last checkpoint failed");
        }
    }
}

fn join_checkpoint(task: std::thread::JoinHandle<io::Result<()>>) -> io::Result<()> {
    task.join()
        .unwrap_or_else(|_| Err(io::Error::other("the checkpoint thread panicked")))
}

impl StateMachine {
    /// The last entry of the newest snapshot, built or installed (right after
    /// [`StateMachine::open`], the durable one it read).
    pub fn snapshot_last_log_id(&self) -> io::Result<Option<LogId>> {
        Ok(lock_snapshot(&self.current_snapshot)?
            .as_ref()
            .and_then(|snapshot| snapshot.meta.last_log_id))
    }

    /// Opens the state machine over an opened store: reads the checkpoint (or the snapshot if
    /// it is newer) and cuts the store back to it.
    pub fn open(
        dir: &Path,
        mut store: MessageStore,
        checkpoint_interval: Duration,
    ) -> io::Result<(StateMachine, Arc<GroupState>)> {
        std::fs::create_dir_all(dir)?;
        let snapshot = read_snapshot(&dir.join(SNAPSHOT_FILE))?;
        let checkpoint = read_checkpoint(&dir.join(CHECKPOINT_FILE))?;
        let from_snapshot = snapshot.as_ref().map(|s| Checkpoint {
            last_applied: s.meta.last_log_id,
            last_membership: s.meta.last_membership.clone(),
            metadata: s.metadata.clone(),
            commit_log_end: s.commit_log_end,
            pops: s.pops.clone(),
            topic_types: s.topic_types.clone(),
        });
        let start = [checkpoint, from_snapshot]
            .into_iter()
            .flatten()
            .max_by(|a, b| a.last_applied.cmp(&b.last_applied))
            .unwrap_or_else(|| Checkpoint {
                last_applied: None,
                last_membership: StoredMembership::default(),
                metadata: Metadata::default(),
                commit_log_end: 0,
                pops: PopState::default(),
                topic_types: TopicTypes::new(),
            });
        let store_end = store.commit_log_max_offset();
        let store_min = store.commit_log_min_offset();
        if store_end < start.commit_log_end || store_min > start.commit_log_end {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                StoreLostFlushedData {
                    store_min,
                    store_end,
                    needed: start.commit_log_end,
                    applied_index: start.last_applied.map(|log_id| log_id.index),
                },
            ));
        }
        store.truncate(start.commit_log_end)?;
        tracing::info!(
            last_applied = ?start.last_applied, commit_log_end = start.commit_log_end,
            replay_dropped_bytes = store_end - start.commit_log_end, "state machine opened"
        );
        let group = Arc::new(GroupState::new(
            store,
            start.metadata.with_trailing(Trailing {
                pops: start.pops,
                topic_types: start.topic_types,
            }),
        ));
        if let Some(snapshot) = &snapshot {
            group.note_durable_snapshot(snapshot.commit_log_end);
        }
        let machine = StateMachine {
            group: group.clone(),
            dir: dir.to_path_buf(),
            last_applied: start.last_applied,
            last_membership: start.last_membership,
            current_snapshot: Arc::new(Mutex::new(snapshot)),
            checkpoint_interval,
            last_checkpoint_at: Instant::now(),
            checkpoint_in_flight: None,
            writes: DurableWrites::Background,
            durability_lag: Duration::ZERO,
            _in_use: group.background_work(),
        };
        Ok((machine, group))
    }

    /// Under `flush = async` an applied entry may still be lost by the whole group for a
    /// while: it is on a majority's page cache, not yet on their disks, until their next
    /// flusher rounds. A checkpoint or snapshot that named it, on a node whose group then all
    /// lost power, would restart that node from an entry the others no longer have (and may
    /// fill with another): its state would differ from theirs for good. So each one names the
    /// state it cut only `lag` after the cut (twice the flush interval), when the entries in it
    /// are on a majority's disks. Zero (the default) under `sync`, where an entry is on a
    /// majority's disks before it is applied.
    pub fn with_durability_lag(mut self, lag: Duration) -> StateMachine {
        self.durability_lag = lag;
        self
    }

    /// Writes checkpoints and snapshots in the apply task (for the deterministic simulation).
    #[cfg(test)]
    pub fn writing_inline(mut self) -> StateMachine {
        self.writes = DurableWrites::Inline;
        self
    }

    /// Applies `command`, the entry at log `index`.
    fn apply_command(&mut self, command: Command, index: u64) -> io::Result<CommandResult> {
        match command {
            Command::Append { records } => Ok(CommandResult::Appended(append_records(
                &self.group,
                &records,
                &[],
            )?)),
            Command::AppendOnce { records } => {
                let earlier = find_earlier_copies(&self.group, &records)?;
                Ok(CommandResult::Appended(append_records(
                    &self.group,
                    &records,
                    &earlier,
                )?))
            }
            Command::DeliverDelayed {
                level,
                from_offset,
                next_offset,
                records,
            } => {
                let progress = self.group.metadata().schedule_progress(level);
                if progress != from_offset {
                    tracing::info!(
                        level,
                        progress,
                        from_offset,
                        "stale delayed delivery skipped: the range was delivered already"
                    );
                    return Ok(CommandResult::Done);
                }
                let appended = append_records(&self.group, &records, &[])?;
                self.group
                    .metadata_mut()
                    .set_schedule_progress(level, next_offset);
                Ok(CommandResult::Appended(appended))
            }
            Command::EndTransaction {
                msg_id,
                half_offset,
                records,
            } => {
                if transaction_ended(&self.group, &msg_id, half_offset)? {
                    return Ok(CommandResult::Appended(Vec::new()));
                }
                Ok(CommandResult::Appended(append_records(
                    &self.group,
                    &records,
                    &[],
                )?))
            }
            Command::EndTransactions { ends } => {
                // The ends that apply, appended together; a transaction ended twice in this
                // entry ends by its first end.
                let mut ended = Vec::with_capacity(ends.len());
                let mut ending = std::collections::HashSet::new();
                let mut records = Vec::new();
                for end in &ends {
                    let applies = !transaction_ended(&self.group, &end.msg_id, end.half_offset)?
                        && ending.insert(end.msg_id.as_str());
                    if applies {
                        records.extend_from_slice(&end.records);
                    }
                    ended.push(applies);
                }
                if !records.is_empty() {
                    append_records(&self.group, &records, &[])?;
                }
                Ok(CommandResult::Ended(ended))
            }
            Command::CommitOffsets { group, offsets } => {
                self.group.metadata_mut().commit_offsets(&group, &offsets);
                Ok(CommandResult::Done)
            }
            Command::UpsertTopic(topic) => {
                self.group.metadata_mut().upsert_topic(topic);
                self.group.topics_changed();
                Ok(CommandResult::Done)
            }
            Command::UpsertTypedTopic {
                topic,
                message_type,
            } => {
                self.group
                    .metadata_mut()
                    .upsert_typed_topic(topic, message_type);
                self.group.topics_changed();
                Ok(CommandResult::Done)
            }
            Command::DeleteTopic { name } => {
                self.group.metadata_mut().delete_topic(&name);
                self.group.topics_changed();
                Ok(CommandResult::Done)
            }
            Command::UpsertGroup(group) => {
                self.group.metadata_mut().upsert_group(group);
                Ok(CommandResult::Done)
            }
            Command::Pop { pop, dead_letters } => {
                let delivered = self.group.metadata_mut().pops.apply_pop(&pop, index);
                if delivered.is_some() && !dead_letters.is_empty() {
                    append_records(&self.group, &dead_letters, &[])?;
                }
                Ok(CommandResult::Popped {
                    delivered,
                    receipt: index,
                })
            }
            Command::SetPopOrderly { group, orderly } => {
                self.group.metadata_mut().pops.set_orderly(&group, orderly);
                Ok(CommandResult::Done)
            }
            Command::PopDeadLetter {
                key,
                change,
                now_ms,
                record,
            } => {
                let outcomes = self.group.metadata_mut().pops.apply_changes(
                    &key,
                    &[PopChange {
                        invisible_until_ms: None,
                        ..change
                    }],
                    now_ms,
                    index,
                );
                if matches!(outcomes.first(), Some(PopChangeOutcome::Done { .. })) {
                    append_records(&self.group, &record, &[])?;
                }
                Ok(CommandResult::PopChanged(outcomes))
            }
            Command::PopChange {
                key,
                changes,
                now_ms,
            } => Ok(CommandResult::PopChanged(
                self.group
                    .metadata_mut()
                    .pops
                    .apply_changes(&key, &changes, now_ms, index),
            )),
        }
    }

    /// Flushes the store and records the applied state durably before returning.
    async fn write_checkpoint(&mut self) -> io::Result<()> {
        self.start_checkpoint().await?;
        self.reap_checkpoint(true).await
    }

    /// Starts a checkpoint of the state applied so far: what is dirty and what the checkpoint
    /// says are taken now (a consistent cut between two applies); the fsyncs and the file
    /// write run on a blocking thread while applying goes on, so a slow disk never stalls
    /// appends (or the sends waiting on them). Waits for the previous checkpoint first.
    async fn start_checkpoint(&mut self) -> io::Result<()> {
        self.reap_checkpoint(true).await?;
        let path = self.dir.join(CHECKPOINT_FILE);
        // Only apply (this task) changes the store and the metadata, so both are as of
        // `last_applied` here.
        let flush = self.group.begin_flush().await?;
        let (metadata, trailing) = self.group.metadata().split();
        let checkpoint = Checkpoint {
            last_applied: self.last_applied,
            last_membership: self.last_membership.clone(),
            metadata,
            commit_log_end: flush.commit_log_end(),
            pops: trailing.pops,
            topic_types: trailing.topic_types,
        };
        self.last_checkpoint_at = Instant::now();
        let name = move || {
            let encoded = codec::encode("state machine checkpoint", &checkpoint)?;
            durable_file::write_atomic(&path, &encoded).map_err(io::Error::from)
        };
        let lag = self.durability_lag;
        match self.writes {
            DurableWrites::Background => {
                let cut_at = std::time::Instant::now();
                let task = std::thread::Builder::new()
                    .name("checkpoint".into())
                    .spawn(move || {
                        flush.finish()?;
                        std::thread::sleep(lag.saturating_sub(cut_at.elapsed()));
                        name()
                    })?;
                self.checkpoint_in_flight = Some(InFlight::Thread(task));
                Ok(())
            }
            #[cfg(test)]
            DurableWrites::Inline => {
                flush.finish()?;
                self.checkpoint_in_flight = Some(InFlight::Due {
                    due: self.last_checkpoint_at + lag,
                    write: Box::new(name),
                });
                self.reap_checkpoint(false).await
            }
        }
    }

    /// The outcome of the checkpoint in flight, if it finished (or, with `wait`, once it
    /// does). A failed checkpoint is a failed apply: the node stops.
    async fn reap_checkpoint(&mut self, wait: bool) -> io::Result<()> {
        match &self.checkpoint_in_flight {
            Some(InFlight::Thread(task)) if wait || task.is_finished() => {}
            #[cfg(test)]
            Some(InFlight::Due { due, .. }) if wait || Instant::now() >= *due => {}
            _ => return Ok(()),
        }
        match self.checkpoint_in_flight.take() {
            Some(InFlight::Thread(task)) => {
                tokio::task::spawn_blocking(move || join_checkpoint(task))
                    .await
                    .map_err(io::Error::other)?
            }
            #[cfg(test)]
            Some(InFlight::Due { due, write }) => {
                tokio::time::sleep_until(due).await;
                write()
            }
            None => Ok(()),
        }
    }

    /// Before Raft starts over a Raft log that ends before the applied state (a power loss
    /// took the log's unsynced tail under `async`, or damage cut it short): openraft closes
    /// that gap by purging the log up to the applied state, which must not pass the newest
    /// snapshot. If that is older, builds one at the applied state (the checkpoint's, whose
    /// store is durable up to there). Returns whether it did.
    pub async fn snapshot_over_log_gap(&mut self, log_last_index: Option<u64>) -> io::Result<bool> {
        let applied_index = self.last_applied.map(|log_id| log_id.index);
        if applied_index <= log_last_index || self.snapshot_last_log_id()? >= self.last_applied {
            return Ok(false);
        }
        self.snapshot_builder().write().await?;
        tracing::warn!(
            ?log_last_index, last_applied = ?self.last_applied,
            "the raft log ends before the applied state: snapshot taken at the applied state"
        );
        Ok(true)
    }

    fn snapshot_builder(&self) -> SnapshotBuilder {
        SnapshotBuilder {
            _in_flight: self.group.background_work(),
            state: self.capture_snapshot_state(),
            group: self.group.clone(),
            dir: self.dir.clone(),
            current_snapshot: self.current_snapshot.clone(),
            writes: self.writes,
            durable_from: Instant::now() + self.durability_lag,
        }
    }

    fn capture_snapshot_state(&self) -> SnapshotState {
        let (metadata, trailing) = self.group.metadata().split();
        SnapshotState {
            meta: SnapshotMeta {
                last_log_id: self.last_applied,
                last_membership: self.last_membership.clone(),
            },
            metadata,
            commit_log_end: self.group.store().commit_log_max_offset(),
            pops: trailing.pops,
            topic_types: trailing.topic_types,
            queue_tails: self.group.store().queue_tails(),
        }
    }

    /// Brings the local CommitLog to exactly `state.commit_log_end` from `source`.
    fn install_commit_log(&self, state: &SnapshotState, source: CommitLogSource) -> io::Result<()> {
        match source {
            CommitLogSource::Store(from) => {
                // From where the local CommitLog ends, or where the source's starts if its
                // retention deleted what lies between.
                let mut offset = self
                    .group
                    .store()
                    .commit_log_max_offset()
                    .min(state.commit_log_end)
                    .max(from.store().commit_log_min_offset());
                self.group.store_mut().continue_at(offset)?;
                let mut installer = CommitLogInstaller::new(offset);
                while offset < state.commit_log_end {
                    let want = (state.commit_log_end - offset).min(SNAPSHOT_CHUNK_BYTES as i64);
                    let chunk = from.store().read_commit_log(offset, want as usize)?;
                    if chunk.is_empty() {
                        return Err(io::Error::other(format!(
                            "snapshot source has no CommitLog at {offset}"
                        )));
                    }
                    installer.push(&self.group, &chunk)?;
                    offset += chunk.len() as i64;
                }
                installer.finish().map(drop)
            }
            CommitLogSource::Staged { path, start_offset } => {
                let result = self.install_staged(state, &path, start_offset);
                if let Err(error) = std::fs::remove_file(&path) {
                    tracing::warn!(%error, path = %path.display(), "could not remove staged snapshot");
                }
                result
            }
        }
    }

    fn install_staged(
        &self,
        state: &SnapshotState,
        path: &Path,
        start_offset: i64,
    ) -> io::Result<()> {
        use std::io::Read;
        // Past the local end if the sender's retention deleted what lies between.
        self.group.store_mut().continue_at(start_offset)?;
        let mut file = std::fs::File::open(path)?;
        let mut chunk = vec![0u8; SNAPSHOT_CHUNK_BYTES];
        let mut installer = CommitLogInstaller::new(start_offset);
        loop {
            let read = file.read(&mut chunk)?;
            if read == 0 {
                break;
            }
            installer.push(&self.group, &chunk[..read])?;
        }
        let offset = installer.finish()?;
        if offset != state.commit_log_end {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "snapshot CommitLog ends at {offset}, its metadata says {}",
                    state.commit_log_end
                ),
            ));
        }
        Ok(())
    }
}

/// Where an earlier copy of a record of an `AppendOnce` batch is.
#[derive(Debug, Clone, Copy)]
enum EarlierCopy {
    /// In the store already.
    Stored(AppendedMessage),
    /// The n-th record of the same batch (an attempt and its retry that were batched
    /// together): stored once, for both.
    InBatch(usize),
}

/// For each record of an encoded batch, its earlier copy, if one is stored or comes before
/// it in the batch: the same topic, `UNIQ_KEY` and reconsume count (records without a
/// `UNIQ_KEY` have none).
fn find_earlier_copies(group: &GroupState, records: &[u8]) -> io::Result<Vec<Option<EarlierCopy>>> {
    let mut found = Vec::new();
    let mut in_batch: HashMap<(&str, &str, i32), usize> = HashMap::new();
    let mut position = 0usize;
    while position < records.len() {
        let size = record_size_at(records, position)?;
        let view = RecordView::parse(&records[position..position + size]).map_err(|source| {
            StoreError::Corrupt {
                offset: position as u64,
                source,
            }
        })?;
        let earlier = match view.property(UNIQ_KEY)? {
            Some(key) => {
                let copy = (view.topic(), key, view.reconsume_times());
                match in_batch.get(&copy) {
                    Some(index) => Some(EarlierCopy::InBatch(*index)),
                    None => {
                        in_batch.insert(copy, found.len());
                        with_index_repair(group, |store| store.find_unique(copy.0, copy.1, copy.2))?
                            .map(|stored| {
                                EarlierCopy::Stored(AppendedMessage {
                                    queue_id: stored.queue_id,
                                    queue_offset: stored.queue_offset,
                                    commit_log_offset: stored.commit_log_offset,
                                    size: stored.size,
                                })
                            })
                    }
                }
            }
            None => None,
        };
        found.push(earlier);
        position += size;
    }
    Ok(found)
}

/// Runs `lookup`, a search through the key index. Apply decides with such searches, so every
/// replica must answer alike: a damaged index block the search meets is rebuilt from the
/// CommitLog (`MessageStore::repair_index_block`), a damaged slot from the file's entries
/// (`MessageStore::repair_index_slot`), and the search run again; damage that cannot be
/// mended fails the apply (the node stops rather than decide differently).
fn with_index_repair<T>(
    group: &GroupState,
    lookup: impl Fn(&MessageStore) -> Result<T, StoreError>,
) -> io::Result<T> {
    let found = mending_index(
        &mut (),
        |()| lookup(&group.store()),
        |(), damage| group.store_mut().repair_index(damage),
    )?;
    Ok(found)
}

/// Whether the transaction of half message `msg_id` (first stored at `half_offset`) has an
/// op record: then it ended, and another end of it is skipped.
fn transaction_ended(group: &GroupState, msg_id: &str, half_offset: i64) -> io::Result<bool> {
    let since = half_offset.max(0) as u64;
    let ended = with_index_repair(group, |store| {
        store.find_unique_since(TRANSACTION_OP_TOPIC, msg_id, 0, since)
    })?
    .is_some();
    if ended {
        tracing::info!(msg_id, "transaction ended already; this end is skipped");
    }
    Ok(ended)
}

/// Appends the records of an encoded batch (offsets are assigned by the store), except the
/// n-th when `earlier[n]` names an earlier copy: that copy's place is its result.
fn append_records(
    group: &GroupState,
    records: &[u8],
    earlier: &[Option<EarlierCopy>],
) -> io::Result<Vec<AppendedMessage>> {
    let mut appended = Vec::new();
    let mut queues = std::collections::BTreeSet::new();
    group.store_mut().append_batch(|batch| {
        let mut position = 0usize;
        while position < records.len() {
            let size = record_size_at(records, position)?;
            if let Some(Some(copy)) = earlier.get(appended.len()) {
                let first = match *copy {
                    EarlierCopy::Stored(first) => first,
                    EarlierCopy::InBatch(index) => appended[index],
                };
                appended.push(first);
                position += size;
                continue;
            }
            let record = &records[position..position + size];
            let Appended {
                result,
                topic,
                queue_id,
            } = batch.append(record)?;
            // Few distinct queues per batch: a scan avoids an allocation per record.
            if !queues
                .iter()
                .any(|(seen, id)| seen == topic && *id == queue_id)
            {
                queues.insert((topic.to_owned(), queue_id));
            }
            appended.push(AppendedMessage {
                queue_id,
                queue_offset: result.queue_offset,
                commit_log_offset: result.commit_log_offset,
                size: result.size,
            });
            position += size;
        }
        Ok::<_, io::Error>(())
    })?;
    group.messages_arrived_in(&queues);
    Ok(appended)
}

/// The TOTALSIZE of the record at `position`, checked against the batch it lies in.
fn record_size_at(records: &[u8], position: usize) -> io::Result<usize> {
    let header = records
        .get(position..position + 4)
        .ok_or_else(|| corrupt_batch(position))?;
    let size = i32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    usize::try_from(size)
        .ok()
        .filter(|size| *size >= 4 && position + size <= records.len())
        .ok_or_else(|| corrupt_batch(position))
}

fn corrupt_batch(position: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("append batch corrupt at byte {position}"),
    )
}

fn read_checkpoint(path: &Path) -> io::Result<Option<Checkpoint>> {
    durable_file::read(path)?
        .map(|bytes| Ok(codec::decode("state machine checkpoint", &bytes)?))
        .transpose()
}

fn read_snapshot(path: &Path) -> io::Result<Option<SnapshotState>> {
    durable_file::read(path)?
        .map(|bytes| Ok(codec::decode("snapshot", &bytes)?))
        .transpose()
}

/// openraft's snapshot of a broker group under type configuration `C`.
type Snapshot<C> = openraft::type_config::alias::SnapshotOf<C, SnapshotData>;

impl<C: LogTypes> RaftStateMachine<C> for StateMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        Ok((self.last_applied, self.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<C>, io::Error>> + Unpin + Send,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let log_id = entry.log_id();
            let result = match entry.payload {
                EntryPayload::Blank => CommandResult::Done,
                EntryPayload::Normal(command) => self.apply_command(command, log_id.index)?,
                EntryPayload::Membership(membership) => {
                    self.last_membership = StoredMembership::new(Some(log_id), membership);
                    CommandResult::Done
                }
            };
            self.last_applied = Some(log_id);
            if let Some(responder) = responder {
                responder.send(result);
            }
        }
        self.reap_checkpoint(false).await?;
        if self.checkpoint_in_flight.is_none()
            && self.last_checkpoint_at.elapsed() >= self.checkpoint_interval
        {
            self.start_checkpoint().await?;
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshot_builder()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        tracing::info!(last_log_id = ?meta.last_log_id, commit_log_end = snapshot.state.commit_log_end, "installing snapshot");
        // The store is about to be cut and rewritten: no older checkpoint may land after.
        self.reap_checkpoint(true).await?;
        let state = SnapshotState {
            meta: meta.clone(),
            ..snapshot.state
        };
        self.install_commit_log(&state, snapshot.commit_log)?;
        self.group
            .store_mut()
            .restore_queue_tails(&state.queue_tails)?;
        *self.group.metadata_mut() = state.whole_metadata();
        self.group.messages_arrived_everywhere();
        self.group.topics_changed();
        self.last_applied = state.meta.last_log_id;
        self.last_membership = state.meta.last_membership.clone();
        self.write_checkpoint().await?;
        let encoded = codec::encode("snapshot", &state)?;
        durable_file::write_atomic(&self.dir.join(SNAPSHOT_FILE), &encoded)?;
        self.group.note_durable_snapshot(state.commit_log_end);
        *lock_snapshot(&self.current_snapshot)? = Some(state);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<C>>, io::Error> {
        let current = lock_snapshot(&self.current_snapshot)?.clone();
        Ok(current.map(|state| Snapshot::<C> {
            meta: state.meta.clone(),
            snapshot: SnapshotData {
                state,
                commit_log: CommitLogSource::Store(self.group.clone()),
            },
        }))
    }
}

fn lock_snapshot(
    current: &Mutex<Option<SnapshotState>>,
) -> io::Result<std::sync::MutexGuard<'_, Option<SnapshotState>>> {
    current
        .lock()
        .map_err(|_| io::Error::other("snapshot lock poisoned"))
}

/// Builds a snapshot from state captured between two applies, so it is a consistent cut even
/// though applying goes on while the builder flushes.
pub struct SnapshotBuilder {
    state: SnapshotState,
    group: Arc<GroupState>,
    dir: PathBuf,
    current_snapshot: Arc<Mutex<Option<SnapshotState>>>,
    writes: DurableWrites,
    /// When the entries of the captured state are on a majority's disks
    /// ([`StateMachine::with_durability_lag`]).
    durable_from: Instant,
    /// openraft runs a build detached: the node's shutdown waits for it through this. The
    /// last field, so it is dropped last: once the shutdown sees the build end, the build's
    /// hold on `group` is gone too.
    _in_flight: TaskTrackerToken,
}

impl<C: LogTypes> RaftSnapshotBuilder<C> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot<C>, io::Error> {
        tokio::time::sleep_until(self.durable_from).await;
        self.write().await?;
        Ok(Snapshot::<C> {
            meta: self.state.meta.clone(),
            snapshot: SnapshotData {
                state: self.state.clone(),
                commit_log: CommitLogSource::Store(self.group.clone()),
            },
        })
    }
}

impl SnapshotBuilder {
    /// Makes the captured state the current snapshot, durably.
    async fn write(&mut self) -> io::Result<()> {
        // Everything below commit_log_end must be durable before the snapshot lets the Raft
        // log be purged past it.
        let group = self.group.clone();
        let path = self.dir.join(SNAPSHOT_FILE);
        let encoded = codec::encode("snapshot", &self.state)?;
        let flush = group.begin_flush().await?;
        let write = move || {
            flush.finish()?;
            durable_file::write_atomic(&path, &encoded).map_err(io::Error::from)
        };
        match self.writes {
            DurableWrites::Background => tokio::task::spawn_blocking(write)
                .await
                .map_err(io::Error::other)??,
            #[cfg(test)]
            DurableWrites::Inline => write()?,
        }
        self.group.note_durable_snapshot(self.state.commit_log_end);
        *lock_snapshot(&self.current_snapshot)? = Some(self.state.clone());
        tracing::debug!(last_log_id = ?self.state.meta.last_log_id, commit_log_end = self.state.commit_log_end, "snapshot built");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use openraft::EntryPayload;

    use super::*;
    use crate::raft::types::Entry;
    use crate::raft::types::TypeConfig;
    use crate::state_machine::sim::open_small_node;
    use crate::store::record::tests::keyed;

    /// Opens the node in `dir`, checkpointing after every apply, in the apply task.
    fn open(dir: &Path) -> StateMachine {
        open_small_node(dir, Duration::ZERO)
            .expect("open")
            .0
            .writing_inline()
    }

    async fn apply(machine: &mut StateMachine, indexes: std::ops::RangeInclusive<u64>) {
        let entries = indexes.map(|index| {
            let records = keyed("T", 0, b"body", format!("m{index}"));
            Ok((
                Entry {
                    log_id: LogId::new_term_index(1, index),
                    payload: EntryPayload::Normal(Command::Append {
                        records: records.into(),
                    }),
                },
                None,
            ))
        });
        RaftStateMachine::<TypeConfig>::apply(machine, futures::stream::iter(entries))
            .await
            .expect("apply");
    }

    #[tokio::test(start_paused = true)]
    async fn with_a_durability_lag_a_checkpoint_is_written_only_once_the_lag_passed() {
        let lag = Duration::from_millis(40);
        let dir = tempfile::tempdir().expect("tempdir");
        let applied_after_reopen = |dir: &Path| open(dir).last_applied.map(|id| id.index);
        let mut machine = open(dir.path()).with_durability_lag(lag);
        apply(&mut machine, 1..=3).await;
        drop(machine);
        assert_eq!(
            applied_after_reopen(dir.path()),
            None,
            "the checkpoint cut at 3 was not due when the node stopped"
        );

        let mut machine = open(dir.path()).with_durability_lag(lag);
        apply(&mut machine, 1..=3).await;
        tokio::time::advance(lag).await;
        apply(&mut machine, 4..=4).await;
        drop(machine);
        assert_eq!(
            applied_after_reopen(dir.path()),
            Some(3),
            "due by the next apply: the cut at 3 is written (the one at 4 is not due yet)"
        );
    }

    #[tokio::test]
    async fn a_raft_log_that_ends_before_the_checkpoint_gets_a_snapshot_at_the_applied_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut machine = open(dir.path());
        apply(&mut machine, 1..=3).await;
        machine.snapshot_builder().write().await.expect("snapshot");
        apply(&mut machine, 4..=10).await;
        drop(machine);

        let mut machine = open(dir.path());
        let at = |index| Some(LogId::new_term_index(1, index));
        assert_eq!(machine.last_applied, at(10), "checkpointed at 10");
        assert_eq!(machine.snapshot_last_log_id().expect("snapshot"), at(3));
        assert!(
            !machine.snapshot_over_log_gap(Some(10)).await.expect("gap"),
            "a log that reaches the applied state needs no snapshot"
        );
        assert!(
            machine.snapshot_over_log_gap(Some(6)).await.expect("gap"),
            "openraft purges a log that ends at 6 up to the applied 10, past the snapshot at 3"
        );
        assert_eq!(machine.snapshot_last_log_id().expect("snapshot"), at(10));
        drop(machine);

        let mut machine = open(dir.path());
        assert_eq!(
            machine.snapshot_last_log_id().expect("snapshot"),
            at(10),
            "the snapshot is durable"
        );
        assert!(!machine.snapshot_over_log_gap(Some(6)).await.expect("gap"));
    }
}
