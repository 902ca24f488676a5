//! A seeded crash simulation of the broker's own state machine: the real [`StateMachine`]
//! over a real [`MessageStore`] in a temporary directory applies a seeded command log (sends,
//! producers' retries, consumer offset commits, delayed deliveries, each range proposed twice
//! as two leaders would) and loses power between applies at points the seed picks. A power
//! loss drops the node's memory and, from its store, any page of its files (CommitLog,
//! ConsumeQueues, key index and their checksums) changed since it was last synced
//! (`testing::durable_images`: what a machine that lost power may have lost, writeback having
//! reached some pages and not others). The node
//! reopens as a broker does, from its checkpoint, and applies the log again from there (the
//! Raft log is durable: `flush = sync`). A twin that never crashes applies the same log.
//!
//! The checker asserts, after each recovery once the node re-applied up to where it was:
//! - its consumer offsets, schedule progress and other metadata are the twin's, and its
//!   CommitLog is byte for byte the twin's: nothing applied is lost or applied twice, and a
//!   committed consumer offset never goes back;
//! - the consumer offsets are the last ones the log committed;
//! - every delayed range was delivered once: each delivered message is in its real topic
//!   once, and each level's progress is where the log took it;
//! - every send is stored once, whether its producer retried it or not.
//!
//! Bits also rot in the running node's key index entries, which apply's retry detection
//! reads: a lookup that meets the damage has the block rebuilt from the CommitLog first.
//!
//! Group-wide faults (elections, lost votes, partitions) are the group simulation's
//! (`group_sim`, over this same state machine); this one checks, against a twin, what the
//! state machine makes of many crashes in one long log. `SIM_SEED=N` replays one seed;
//! `SIM_SEEDS=N` runs `0..N` (`crate::testing::seeds`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::EntryPayload;
use openraft::storage::RaftStateMachine;

use crate::group_state::GroupState;
use crate::metadata::QueueOffset;
use crate::raft::types::Entry;
use crate::raft::types::LogId;
use crate::raft::types::TypeConfig;
use crate::seeded_rng::SeededRng;
use crate::state_machine::StateMachine;
use crate::state_machine::command::Command;
use crate::store::MessageStore;
use crate::store::StoreConfig;
use crate::store::cq_sums::CQ_BLOCK_UNITS;
use crate::store::index::INDEX_DIR;
use crate::store::index::INDEX_ENTRY_SIZE;
use crate::store::mapped_file;
use crate::store::properties::UNIQ_KEY;
use crate::store::record::tests::keyed;
use crate::testing::counters::Counters;
use crate::testing::durable_images;
use crate::testing::sim_dir::sim_tempdir;

const SEEDS_DEFAULT: u64 = 24;
/// Entries in one seed's log.
const LOG_ENTRIES: u64 = 240;
/// Entries applied at once, at most (a power loss falls between two such applies).
const APPLY_BATCH_MAX: u64 = 8;
/// A power loss after an apply, in parts per million.
const POWER_LOSS_PPM: u32 = 120_000;
/// Bit rot in a key index entry after an apply, in parts per million.
const INDEX_ROT_PPM: u32 = 60_000;
pub(crate) const TOPICS: [&str; 2] = ["SimA", "SimB"];
const QUEUES: u64 = 3;
pub(crate) const DELAYED_TOPIC: &str = "SimDelayed";
pub(crate) const DELAY_LEVELS: u64 = 3;
const CONSUMER_GROUPS: [&str; 2] = ["g1", "g2"];
/// A retry repeats one of this many latest sends.
pub(crate) const RETRY_OF_LAST_SENDS: usize = 8;

/// One node: its state machine, and the group state it shares with it.
struct Node {
    machine: StateMachine,
    group: Arc<GroupState>,
}

/// Opens the state machine of a node whose store (`<dir>/store`) has small files, so a short
/// run rolls CommitLog segments, ConsumeQueue files and index files; its checkpoint and
/// snapshot are in `<dir>/state`.
/// The size of a simulated node's CommitLog segments.
pub(crate) const SIM_COMMIT_LOG_SEGMENT_BYTES: u64 = 64 * 1024;

pub(crate) fn open_small_node(
    dir: &Path,
    checkpoint_interval: Duration,
) -> std::io::Result<(StateMachine, Arc<GroupState>)> {
    // A simulated power loss takes back what the store's files did not sync.
    durable_images::watch(&dir.join("store"));
    let (store, _report) = MessageStore::open(StoreConfig {
        commit_log_segment_bytes: SIM_COMMIT_LOG_SEGMENT_BYTES,
        consume_queue_units_per_segment: 64,
        index_entries_per_file: 64,
        ..StoreConfig::new(dir.join("store"))
    })?;
    StateMachine::open(&dir.join("state"), store, checkpoint_interval)
}

impl Node {
    fn open(dir: &Path, checkpoint_interval: Duration) -> Node {
        let (machine, group) = open_small_node(dir, checkpoint_interval).expect("open");
        Node { machine, group }
    }

    async fn applied_index(&mut self) -> u64 {
        let (applied, _) = RaftStateMachine::<TypeConfig>::applied_state(&mut self.machine)
            .await
            .expect("applied state");
        applied.map_or(0, |log_id| log_id.index)
    }

    async fn apply(&mut self, entries: &[Entry]) {
        let stream = futures::stream::iter(entries.iter().cloned().map(|entry| Ok((entry, None))));
        RaftStateMachine::<TypeConfig>::apply(&mut self.machine, stream)
            .await
            .expect("apply");
    }

    fn commit_log(&self) -> Vec<u8> {
        let store = self.group.store();
        store
            .read_commit_log(store.commit_log_min_offset(), usize::MAX)
            .unwrap_or_default()
    }
}

/// The seeded command log and what it promises.
struct Workload {
    rng: SeededRng,
    entries: Vec<Entry>,
    sends: u64,
    /// Sends already in the log, for retries.
    sent: Vec<Bytes>,
    /// The last offset committed per (group, topic, queue).
    committed: BTreeMap<(String, String, i32), i64>,
    /// Per delay level: where the log's deliveries took it.
    progress: BTreeMap<u32, i64>,
    /// Deliveries proposed once already, proposed again later (a stale second leader).
    stale: Vec<Command>,
    /// UNIQ_KEYs of the delayed messages delivered.
    delivered: Vec<String>,
}

impl Workload {
    fn new(seed: u64) -> Workload {
        let mut workload = Workload {
            rng: SeededRng::new(seed),
            entries: Vec::new(),
            sends: 0,
            sent: Vec::new(),
            committed: BTreeMap::new(),
            progress: BTreeMap::new(),
            stale: Vec::new(),
            delivered: Vec::new(),
        };
        for index in 1..=LOG_ENTRIES {
            let command = workload.next_command();
            workload.entries.push(Entry {
                log_id: LogId::new_term_index(1, index),
                payload: EntryPayload::Normal(command),
            });
        }
        workload
    }

    fn record(&mut self, topic: &str, queue_id: i32, key: String) -> Vec<u8> {
        keyed(topic, queue_id, &random_body(&mut self.rng), key)
    }

    fn next_command(&mut self) -> Command {
        match self.rng.below(100) {
            0..45 => {
                let records = self.new_sends();
                self.sent.push(records.clone());
                Command::Append { records }
            }
            45..60 => {
                // A producer's retry: of a recent send in the log (well within the dedup
                // window, one CommitLog segment), or of one that never got there.
                let recent = self.sent.len().min(RETRY_OF_LAST_SENDS);
                let records = match self.rng.below(3) {
                    0 if recent > 0 => {
                        let back = 1 + self.rng.below(recent as u64) as usize;
                        self.sent[self.sent.len() - back].clone()
                    }
                    _ => self.new_sends(),
                };
                Command::AppendOnce { records }
            }
            60..80 => offset_commit(&mut self.rng, &mut self.committed, QUEUES),
            80..95 => self.delivery(),
            _ => match self.stale.pop() {
                Some(stale) => stale,
                None => self.delivery(),
            },
        }
    }

    fn new_sends(&mut self) -> Bytes {
        let topic = TOPICS[self.rng.below(2) as usize];
        let queue_id = self.rng.below(QUEUES) as i32;
        let mut records = Vec::new();
        for _ in 0..1 + self.rng.below(4) {
            self.sends += 1;
            records.extend(self.record(topic, queue_id, format!("send-{}", self.sends)));
        }
        records.into()
    }

    /// The next range of a delay level, delivered to the real topic with its progress.
    fn delivery(&mut self) -> Command {
        let level = 1 + self.rng.below(DELAY_LEVELS) as u32;
        let from_offset = self.progress.get(&level).copied().unwrap_or(0);
        let command = delivery(&mut self.rng, level, from_offset, &mut self.stale);
        if let Command::DeliverDelayed { next_offset, .. } = &command {
            self.progress.insert(level, *next_offset);
            self.delivered
                .extend((from_offset..*next_offset).map(|offset| delayed_key(level, offset)));
        }
        command
    }

    fn entries(&self, from: u64, to: u64) -> &[Entry] {
        &self.entries[from as usize..to as usize]
    }
}

/// The due range of delay `level` from `from_offset` (one to three messages) restored to
/// [`DELAYED_TOPIC`]; half the time also kept in `stale`, to be proposed again later as a
/// stale second leader would.
pub(crate) fn delivery(
    rng: &mut SeededRng,
    level: u32,
    from_offset: i64,
    stale: &mut Vec<Command>,
) -> Command {
    let next_offset = from_offset + 1 + rng.below(3) as i64;
    let mut records = Vec::new();
    for offset in from_offset..next_offset {
        let body = random_body(rng);
        records.extend(keyed(DELAYED_TOPIC, 0, &body, delayed_key(level, offset)));
    }
    let command = Command::DeliverDelayed {
        level,
        from_offset,
        next_offset,
        records: records.into(),
    };
    if rng.below(2) == 0 {
        stale.push(command.clone());
    }
    command
}

/// The `UNIQ_KEY` of the delayed message at `offset` of `level`.
fn delayed_key(level: u32, offset: i64) -> String {
    format!("delayed-{level}-{offset}")
}

/// A consumer group's commit of offsets (for one to three queues of [`TOPICS`] with
/// `queues` each) at or past the ones `committed` says it proposed before, as a push consumer
/// sends them; `committed` is brought up to date.
pub(crate) fn offset_commit(
    rng: &mut SeededRng,
    committed: &mut BTreeMap<(String, String, i32), i64>,
    queues: u64,
) -> Command {
    let group = CONSUMER_GROUPS[rng.below(CONSUMER_GROUPS.len() as u64) as usize];
    let offsets = (0..1 + rng.below(3))
        .map(|_| {
            let topic = TOPICS[rng.below(TOPICS.len() as u64) as usize];
            let queue_id = rng.below(queues) as i32;
            let key = (group.to_owned(), topic.to_owned(), queue_id);
            let offset = committed.get(&key).copied().unwrap_or(0) + rng.below(5) as i64;
            committed.insert(key, offset);
            QueueOffset {
                topic: topic.to_owned(),
                queue_id,
                offset,
            }
        })
        .collect();
    Command::CommitOffsets {
        group: group.to_owned(),
        offsets,
    }
}

/// A message body of 40 to 439 bytes of one letter.
pub(crate) fn random_body(rng: &mut SeededRng) -> Vec<u8> {
    vec![b'a' + (rng.below(26) as u8); 40 + rng.below(400) as usize]
}

/// Flips a bit of a random entry of the key index of `group` (whose store is in
/// `<node_dir>/store`) as it runs (in place: its mapping sees it), as bit rot in the page
/// cache would; false if the index has no entry to flip.
pub(crate) fn rot_index_entry(group: &GroupState, node_dir: &Path, rng: &mut SeededRng) -> bool {
    use std::os::unix::fs::FileExt;
    let files = group.store().index().files();
    if files.is_empty() {
        return false;
    }
    let (sequence, blocks) = files[rng.below(files.len() as u64) as usize];
    let entries = blocks * CQ_BLOCK_UNITS;
    if entries == 0 {
        return false;
    }
    let path = node_dir
        .join("store")
        .join(INDEX_DIR)
        .join(mapped_file::file_name(sequence));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open index file");
    let header = &mut [0u8; 8];
    file.read_exact_at(header, 0).expect("read header");
    let slots = u64::from(u32::from_be_bytes([
        header[4], header[5], header[6], header[7],
    ]));
    let at = 16 + slots * 4 + rng.below(entries) * INDEX_ENTRY_SIZE as u64 + rng.below(20);
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).expect("read");
    byte[0] ^= 1 << rng.below(8);
    file.write_all_at(&byte, at).expect("write");
    true
}

/// What a sweep counts: the faults injected, and what recovery did about them.
const INDEX_ROTS: &str = "bits rotted in index entries";
const POWER_LOSSES: &str = "power losses";
const BYTES_LOST: &str = "bytes lost";
const ENTRIES_REAPPLIED: &str = "entries applied again";
const CLASSES: &[&str] = &[INDEX_ROTS, POWER_LOSSES, BYTES_LOST, ENTRIES_REAPPLIED];

async fn run(seed: u64) -> Result<Counters, String> {
    let dir = sim_tempdir().expect("tempdir");
    let _images = durable_images::ForgetOnDrop::new(dir.path());
    let workload = Workload::new(seed);
    let mut rng = SeededRng::new(seed ^ 0x5EED_C4A5);
    // Checkpoints after every apply, or at most every few ms of real time (then a power
    // loss takes more).
    let interval = Duration::from_millis(rng.below(3) * 2);
    let node_dir = dir.path().join("node");
    let mut node = Node::open(&node_dir, interval);
    let mut twin = Node::open(&dir.path().join("twin"), Duration::from_secs(3600));
    let mut counters = Counters::of(CLASSES);
    let mut applied = 0;
    while applied < LOG_ENTRIES {
        let to = (applied + 1 + rng.below(APPLY_BATCH_MAX)).min(LOG_ENTRIES);
        node.apply(workload.entries(applied, to)).await;
        twin.apply(workload.entries(applied, to)).await;
        applied = to;
        if rng.chance_ppm(INDEX_ROT_PPM) {
            counters.add(
                INDEX_ROTS,
                u64::from(rot_index_entry(&node.group, &node_dir, &mut rng)),
            );
        }
        if !rng.chance_ppm(POWER_LOSS_PPM) {
            continue;
        }
        drop(node);
        let lost =
            durable_images::lose_unsynced_pages(&node_dir.join("store"), || rng.below(2) == 0)
                .map_err(|e| e.to_string())?;
        counters.bump(POWER_LOSSES);
        counters.add(BYTES_LOST, lost);
        node = Node::open(&node_dir, interval);
        let recovered = node.applied_index().await;
        if recovered > applied {
            return Err(format!(
                "seed {seed}: recovered at {recovered}, past what it applied ({applied})"
            ));
        }
        node.apply(workload.entries(recovered, applied)).await;
        counters.add(ENTRIES_REAPPLIED, applied - recovered);
        check_same(seed, applied, &node, &twin)?;
    }
    check_same(seed, applied, &node, &twin)?;
    check_promises(seed, &workload, &node)?;
    Ok(counters)
}

/// The node is the twin, at log index `applied`.
fn check_same(seed: u64, applied: u64, node: &Node, twin: &Node) -> Result<(), String> {
    if *node.group.metadata() != *twin.group.metadata() {
        return Err(format!(
            "seed {seed}: at {applied} the metadata differs from the twin's:\n{:?}\nagainst\n{:?}",
            *node.group.metadata(),
            *twin.group.metadata()
        ));
    }
    let (ours, theirs) = (node.commit_log(), twin.commit_log());
    if ours != theirs {
        let at = ours.iter().zip(&theirs).position(|(a, b)| a != b);
        return Err(format!(
            "seed {seed}: at {applied} the CommitLog differs from the twin's ({} against {} \
             bytes, first difference at {at:?})",
            ours.len(),
            theirs.len()
        ));
    }
    Ok(())
}

/// What the whole log promised: offsets as last committed, each delayed message once.
fn check_promises(seed: u64, workload: &Workload, node: &Node) -> Result<(), String> {
    let metadata = node.group.metadata();
    for ((group, topic, queue_id), offset) in &workload.committed {
        let found = metadata.consumer_offset(group, topic, *queue_id);
        if found != Some(*offset) {
            return Err(format!(
                "seed {seed}: {group} {topic}#{queue_id} at {found:?}, committed {offset}"
            ));
        }
    }
    for (level, progress) in &workload.progress {
        if metadata.schedule_progress(*level) != *progress {
            return Err(format!(
                "seed {seed}: level {level} at {}, delivered up to {progress}",
                metadata.schedule_progress(*level)
            ));
        }
    }
    drop(metadata);
    let delayed = unique_keys(&node.group, DELAYED_TOPIC, 0)?;
    if delayed != workload.delivered {
        return Err(format!(
            "seed {seed}: delayed messages delivered {delayed:?}, expected each of {:?} once",
            workload.delivered
        ));
    }
    let mut sends = Vec::new();
    for topic in TOPICS {
        for queue_id in 0..QUEUES as i32 {
            sends.extend(unique_keys(&node.group, topic, queue_id)?);
        }
    }
    sends.sort_by_key(|key| key.trim_start_matches("send-").parse::<u64>().unwrap_or(0));
    let expected: Vec<String> = (1..=workload.sends).map(|n| format!("send-{n}")).collect();
    if sends != expected {
        return Err(format!(
            "seed {seed}: {} sends stored, {} sent: each must be stored once, retries too",
            sends.len(),
            expected.len()
        ));
    }
    Ok(())
}

/// The `UNIQ_KEY`s of the messages of `topic`'s queue `queue_id`, in queue order.
pub(crate) fn unique_keys(
    group: &GroupState,
    topic: &str,
    queue_id: i32,
) -> Result<Vec<String>, String> {
    let store = group.store();
    let mut keys = Vec::new();
    for unit in store.read_consume_queue(topic, queue_id, 0, usize::MAX) {
        let view = store
            .read_view(unit.commit_log_offset)
            .map_err(|e| e.to_string())?;
        let key = view.property(UNIQ_KEY).map_err(|e| e.to_string())?;
        keys.push(key.unwrap_or_default().to_owned());
    }
    Ok(keys)
}

fn seeds() -> std::ops::Range<u64> {
    crate::testing::seeds::seeds(SEEDS_DEFAULT)
}

#[test]
fn power_losses_between_applies_lose_no_applied_command_and_deliver_each_delay_once() {
    let mut total = Counters::of(CLASSES);
    for seed in seeds() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let counters = runtime.block_on(run(seed)).unwrap_or_else(|failure| {
            panic!(
                "{failure} ({})",
                crate::testing::seeds::replay(seed, "state_machine::sim")
            )
        });
        total.merge(&counters);
    }
    eprintln!(
        "state machine crash simulation, seeds {:?}: {total}",
        seeds()
    );
    total.assert_every_class_fired(&seeds(), SEEDS_DEFAULT);
}
