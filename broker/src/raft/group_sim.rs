//! A seeded, deterministic simulation of one Raft group in one process: three nodes of real
//! openraft over the real Raft log store, each on its own [`SimDisk`], applying to the
//! broker's own [`StateMachine`] over a real message store (in a temporary directory: the
//! store is read through mmap, which a simulated disk cannot serve), joined by an in-process
//! network ([`SimNetwork`]) that drops, delays and partitions as the seed says, with tokio's
//! time paused and advanced only when every task waits. openraft draws its random numbers
//! (election timeouts, tick phases) from its runtime, here `DeterministicRng`, so a seed
//! replays exactly: the test runs a seed twice and compares the traces. The state machine
//! writes its checkpoints in its apply task here (`StateMachine::writing_inline`), not on a
//! thread of its own.
//!
//! The workload is a broker's: sends (some batched, some a producer's retry of a recent one,
//! `AppendOnce`), consumer offset commits, and delay levels' due ranges read from the
//! leader's state (half of them proposed again later, as a stale second leader would). Nodes
//! compact their logs as the broker does (`raft::compaction::compact_log`, keeping only a few
//! entries), so a node that lags behind a purge is sent a snapshot and installs it.
//!
//! Faults: a power loss of one node, or rarely of all three, at a disk operation the seed
//! picks (a node loses what it had not fsynced and keeps a torn prefix of the rest; its store
//! keeps its checkpoints as they were when the power failed and loses any page of its files
//! changed since it was last synced, `testing::durable_images`), their restart, a
//! partition of one
//! node, lossy links. Even seeds run `flush = sync`; odd ones `flush = async`, which promises
//! to survive killed processes (the page cache survives) and one power loss at a time: there
//! the whole group's stop is a kill or a power loss that may lose what was acknowledged in the
//! last [`ASYNC_LOSS_WINDOW`] (and nothing older), and a node that lost power forgets what it
//! acknowledged in the last interval. Such a node does what a broker node does after a reboot
//! (`raft::boot_check`, `raft::repair`): it takes replication only once a leader accepted its
//! shorter log, and neither votes nor stands for election until it applied the leader's last
//! index at that moment, except for a candidate whose log reaches the consenting leader's last
//! log id (when that leader's term was at least its own). No other node loses power meanwhile
//! (a second power loss in that window can lose writes, as docs/operators/repair.md says), but once every
//! such node has that consent another node may be killed (its page cache survives), most often
//! the leader that consented: the two left must elect through that rule. Partitions and lossy
//! links go on. Bits also rot in the Raft log of a node while it is down (one node at a time):
//! its recovery marks the range for repair, and it repairs as a broker node does
//! (`raft::repair`): consent, no votes until it applied up to the mark but for the same rule.
//! A node whose log ends before its checkpoint starts as a broker node does
//! (`StateMachine::snapshot_over_log_gap`). The checker asserts:
//! - one leader per term, and a node's applied index never goes back while it runs;
//! - once the group heals, every node applied the same entries: byte-identical CommitLogs and
//!   equal metadata (consumer offsets, schedule progress, topics);
//! - on every node, every acknowledged message (a send, a retry's first copy, a delivered
//!   delayed message) is in its queue at the offsets it was acknowledged with; every message is
//!   stored once, retries and delayed ranges proposed twice included; every consumer offset is
//!   at least the last one acknowledged (a committed offset never goes back).
//!
//! `SIM_SEED=N` replays one seed (`SIM_TRACE=1` prints its events as they happen);
//! `SIM_SEEDS=N` runs seeds `0..N` (`crate::testing::seeds`).

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use openraft::ServerState;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::rt::deterministic_rng::DeterministicRng;
use openraft::type_config::TypeConfigExt;
use openraft::type_config::alias::LogIdOf;
use openraft_rt_tokio::TokioRuntime;
use tokio_util::sync::CancellationToken;

use crate::disk::Disk;
use crate::group_state::GroupState;
use crate::raft::control::compaction::compact_log;
use crate::raft::control::setup::openraft_config;
use crate::raft::log::flusher::ManualRounds;
use crate::raft::log::repair;
use crate::raft::log::segment::LogSegment;
use crate::raft::log::store::FlushMode;
use crate::raft::log::store::LogStore;
use crate::raft::log::store::LogStoreConfig;
use crate::raft::transport::faults::FaultPlan;
use crate::raft::transport::node_addr::NodeAddr;
use crate::raft::types::NodeId;
use crate::seeded_rng::SeededRng;
use crate::state_machine;
use crate::state_machine::StateMachine;
use crate::state_machine::command::AppendedMessage;
use crate::state_machine::command::Command;
use crate::state_machine::command::CommandResult;
use crate::state_machine::sim::DELAY_LEVELS;
use crate::state_machine::sim::DELAYED_TOPIC;
use crate::state_machine::sim::RETRY_OF_LAST_SENDS;
use crate::state_machine::sim::SIM_COMMIT_LOG_SEGMENT_BYTES;
use crate::state_machine::sim::TOPICS;
use crate::state_machine::sim::delivery;
use crate::state_machine::sim::offset_commit;
use crate::state_machine::sim::open_small_node;
use crate::state_machine::sim::random_body;
use crate::state_machine::sim::rot_index_entry;
use crate::state_machine::sim::unique_keys;
use crate::store::RecordView;
use crate::store::properties::UNIQ_KEY;
use crate::store::record::tests::keyed;
use crate::testing::counters::Counters;
use crate::testing::durable_images;
use crate::testing::sim_dir::sim_tempdir;
use crate::testing::sim_disk::SimDisk;
use crate::testing::sim_network::SimNetwork;
use crate::testing::sim_network::SimNetworkFactory;
use crate::testing::sim_network::SimRaft;
use crate::testing::sim_network::SimTypeConfig;

/// Seeds run by default.
const SEEDS_DEFAULT: u64 = 200;
/// Seeds the test runs twice, to show they replay exactly.
const REPLAYED_SEEDS: u64 = 3;
const NODES: [NodeId; 3] = [1, 2, 3];
/// Simulated time the workload and the faults run for; then the group heals.
const RUN_FOR: Duration = Duration::from_secs(6);
/// How long a healed group has to converge.
const CONVERGE_WITHIN: Duration = Duration::from_secs(20);
/// Time one fsync round takes (`flush = sync`).
const FSYNC_TIME: Duration = Duration::from_millis(1);
/// The flusher's interval with `flush = async`.
const ASYNC_FLUSH_INTERVAL: Duration = Duration::from_millis(20);
/// Under `async`, a write acknowledged this shortly before the whole group lost power may be
/// lost: a majority held it, but not yet synced. Every node's next flusher round comes within
/// an interval, and the power fails no earlier than the simulation decides it does.
const ASYNC_LOSS_WINDOW: Duration = ASYNC_FLUSH_INTERVAL;
/// Where each node keeps its Raft log on its disk.
const LOG_DIR: &str = "/sim/raft/log";
/// A write not acknowledged within this is given up (it may still commit).
const WRITE_TIMEOUT: Duration = Duration::from_millis(500);
/// Entries a compaction keeps behind its snapshot (few, so lagging nodes need snapshots).
const COMPACTION_RETAINED: u64 = 8;
/// How long a compaction may take before it is given up.
const COMPACTION_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a node's state machine checkpoints while entries arrive.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(10);
const QUEUES: u64 = 2;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A node that may lack entries it acknowledged (it lost power under `async`, or its log was
/// damaged), until it caught up.
#[derive(Debug, Clone, Copy, Default)]
struct Forgetful {
    /// The highest index its damaged log held (its repair mark), if it was damaged.
    mark_up_to: Option<u64>,
    /// It lost power under `async`: it must also hold the leader's last index at consent.
    after_power_loss: bool,
    /// The index it must apply before it votes again, once a leader accepted its log.
    catch_up_to: Option<u64>,
}

/// One node as the simulation sees it.
struct SimNode {
    /// Its Raft log's disk.
    disk: SimDisk,
    /// Its store and state machine checkpoint, on the real file system (the store is read
    /// through mmap, which a simulated disk cannot serve).
    dir: PathBuf,
    /// Its Raft, and the group state its state machine applies to, while it runs.
    raft: Option<SimRaft>,
    group: Option<Arc<GroupState>>,
    /// Its checkpoints as they were when its power failed (what is written after that never
    /// reaches its disk).
    checkpoints_at_power_loss: Vec<(PathBuf, Option<Vec<u8>>)>,
    /// Cancelled when this life ends: its flusher and watcher stop with it.
    life: CancellationToken,
}

impl SimNode {
    fn applied_index(&self) -> Option<u64> {
        let raft = self.raft.as_ref()?;
        raft.metrics()
            .borrow_watched()
            .last_applied
            .map(|log_id| log_id.index)
    }

    /// The files that say what its store holds durably.
    fn checkpoint_files(&self) -> [PathBuf; 2] {
        [
            self.dir.join("state").join(state_machine::CHECKPOINT_FILE),
            self.dir
                .join("store")
                .join(crate::store::checkpoint::CHECKPOINT_FILE),
        ]
    }
}

/// A message whose send (or delayed delivery) was acknowledged: where the leader said it
/// landed, and when.
#[derive(Debug, Clone)]
struct AckedMessage {
    key: String,
    topic: &'static str,
    at: AppendedMessage,
    acked_at: tokio::time::Instant,
}

struct Sim {
    seed: u64,
    flush: FlushMode,
    rng: SeededRng,
    network: Arc<SimNetwork>,
    nodes: BTreeMap<NodeId, SimNode>,
    /// The nodes' directories.
    /// Forgets the durable images of the nodes' stores, before `_dirs` deletes them.
    _images: durable_images::ForgetOnDrop,
    _dirs: tempfile::TempDir,
    /// The messages acknowledged, sent or delivered from a delay level.
    acked: Vec<AckedMessage>,
    /// The highest log index a write was acknowledged at.
    last_acked_index: Option<u64>,
    /// Sends so far (each message's `UNIQ_KEY` counts them), and the latest, for retries.
    sends: u64,
    recent_sends: Vec<Bytes>,
    /// Per (consumer group, topic, queue): the offset last proposed, and the offsets
    /// acknowledged with when.
    offsets_proposed: BTreeMap<(String, String, i32), i64>,
    offsets_acked: BTreeMap<(String, String, i32), Vec<(i64, tokio::time::Instant)>>,
    /// Deliveries proposed once, proposed again later (a stale second leader).
    stale_deliveries: Vec<Command>,
    /// When the whole group lost power under `async`: writes acknowledged shortly before
    /// may be lost ([`ASYNC_LOSS_WINDOW`]).
    group_power_losses: Vec<tokio::time::Instant>,
    /// Leader seen per term.
    leaders: Arc<Mutex<BTreeMap<u64, NodeId>>>,
    /// Violations seen by the watchers while the simulation ran.
    violations: Arc<Mutex<Vec<String>>>,
    /// Nodes that may lack entries they acknowledged and catch up: no other node loses power,
    /// and no bit rots, meanwhile.
    forgetful: BTreeMap<NodeId, Forgetful>,
    trace: String,
    writes: u64,
    /// When the simulation began, in its own time.
    began: tokio::time::Instant,
}

impl Sim {
    fn new(seed: u64) -> Result<Sim, String> {
        let faults = FaultPlan::new(seed ^ 0x5eed);
        let dirs = sim_tempdir().map_err(|e| format!("tempdir: {e}"))?;
        Ok(Sim {
            seed,
            flush: match seed % 2 {
                0 => FlushMode::Sync,
                _ => FlushMode::Async {
                    interval: ASYNC_FLUSH_INTERVAL,
                },
            },
            rng: SeededRng::new(seed),
            network: Arc::new(SimNetwork::new(faults)),
            nodes: NODES
                .iter()
                .map(|id| {
                    let node = SimNode {
                        disk: SimDisk::default(),
                        dir: dirs.path().join(format!("node-{id}")),
                        raft: None,
                        group: None,
                        checkpoints_at_power_loss: Vec::new(),
                        life: CancellationToken::new(),
                    };
                    (*id, node)
                })
                .collect(),
            _images: durable_images::ForgetOnDrop::new(dirs.path()),
            _dirs: dirs,
            acked: Vec::new(),
            last_acked_index: None,
            sends: 0,
            recent_sends: Vec::new(),
            offsets_proposed: BTreeMap::new(),
            offsets_acked: BTreeMap::new(),
            stale_deliveries: Vec::new(),
            group_power_losses: Vec::new(),
            leaders: Arc::default(),
            violations: Arc::default(),
            forgetful: BTreeMap::new(),
            trace: String::new(),
            writes: 0,
            began: tokio::time::Instant::now(),
        })
    }

    fn fail(&self, reason: String) -> String {
        format!(
            "seed {}: {reason} ({})",
            self.seed,
            crate::testing::seeds::replay(self.seed, "group_sim")
        )
    }

    fn note(&mut self, event: impl std::fmt::Display) {
        let at = self.began.elapsed().as_micros();
        if std::env::var_os("SIM_TRACE").is_some() {
            eprintln!("{at} us {event}");
        }
        let _ = writeln!(self.trace, "{at} us {event}");
    }

    /// Starts (or restarts) `id` over its disk and its store, as a broker node does: the
    /// state machine from its checkpoint, then the Raft log.
    async fn start(&mut self, id: NodeId) -> Result<(), String> {
        let (state_machine, group) = self.open_or_rebuild(id)?;
        let node = self.nodes.get_mut(&id).ok_or("no such node")?;
        let mut state_machine = state_machine
            .writing_inline()
            .with_durability_lag(self.flush.durability_lag());
        let snapshot = state_machine
            .snapshot_last_log_id()
            .map_err(|e| format!("node {id}: snapshot: {e}"))?;
        let store = open_log(node, self.flush, snapshot)
            .map_err(|e| format!("node {id}: open log: {e}"))?;
        let log_last_index = store
            .last_index()
            .map_err(|e| format!("node {id}: log end: {e}"))?;
        let snapshot_over_gap = state_machine
            .snapshot_over_log_gap(log_last_index)
            .await
            .map_err(|e| format!("node {id}: snapshot over the log's gap: {e}"))?;
        let rounds = store.flush_rounds().ok_or("no manual flusher")?;
        let mark = repair::load(&node.disk, Path::new(LOG_DIR))
            .map_err(|e| format!("node {id}: repair mark: {e}"))?;
        lock(&self.network.vote_floors).remove(&id);
        if let Some(mark) = &mark {
            lock(&self.network.awaiting_consent).insert(id);
            lock(&self.network.refusing_votes).insert(id);
            let forgetful = self.forgetful.entry(id).or_default();
            forgetful.mark_up_to = Some(mark.up_to_index);
            forgetful.catch_up_to = None;
        }
        let network = SimNetworkFactory {
            from: id,
            network: self.network.clone(),
        };
        // The broker's own openraft settings, with short test timings. A node that forgot
        // entries does not stand for election until it caught up.
        let may_elect = !lock(&self.network.refusing_votes).contains(&id);
        let config = openraft_config("sim".into(), (50, 150, 300), may_elect)
            .map_err(|e| format!("raft config: {e}"))?;
        let raft = SimRaft::new(id, Arc::new(config), network, store, state_machine)
            .await
            .map_err(|e| format!("node {id}: start raft: {e}"))?;
        node.life = CancellationToken::new();
        let round_every = match self.flush {
            FlushMode::Sync => FSYNC_TIME,
            FlushMode::Async { interval } => interval,
        };
        spawn_flusher(rounds, round_every, node.life.clone());
        spawn_watcher(
            id,
            raft.clone(),
            node.life.clone(),
            self.leaders.clone(),
            self.violations.clone(),
        );
        lock(&self.network.rafts).insert(id, raft.clone());
        node.raft = Some(raft);
        node.group = Some(group);
        self.note(format_args!("start {id}"));
        if snapshot_over_gap {
            self.note(format_args!("{id}: snapshot over the log's gap"));
        }
        if let Some(mark) = mark {
            self.note(format_args!("{id} marked for repair: {mark:?}"));
        }
        Ok(())
    }

    /// Opens the node's state machine over its store; a store that lost flushed data (a
    /// rotted CommitLog block) is set aside with the Raft log and the node rebuilt from the
    /// group, as `node.rs` does.
    fn open_or_rebuild(&mut self, id: NodeId) -> Result<(StateMachine, Arc<GroupState>), String> {
        let node = self.nodes.get(&id).ok_or("no such node")?;
        let error = match open_small_node(&node.dir, CHECKPOINT_INTERVAL) {
            Ok(opened) => return Ok(opened),
            Err(error) => error,
        };
        let Some(lost) = state_machine::StoreLostFlushedData::in_error(&error) else {
            return Err(format!("node {id}: open state machine: {error}"));
        };
        let last_log_index = open_log(node, self.flush, None)
            .and_then(|log| log.last_index())
            .map_err(|e| format!("node {id}: open log: {e}"))?;
        let up_to_index = last_log_index.max(lost.applied_index).unwrap_or(0);
        let node_state = repair::NodeState {
            data_dir: &node.dir,
            store_dir: &node.dir.join("store"),
            state_dir: &node.dir.join("state"),
            log_disk: &node.disk,
            log_dir: Path::new(LOG_DIR),
        };
        repair::set_aside_for_rebuild(&node_state, up_to_index)
            .map_err(|e| format!("node {id}: set aside: {e}"))?;
        let opened = open_small_node(&node.dir, CHECKPOINT_INTERVAL)
            .map_err(|e| format!("node {id}: open state machine after setting aside: {e}"))?;
        self.note(format_args!(
            "{id}: {lost}: set aside, rebuilt from the group up to {up_to_index}"
        ));
        Ok(opened)
    }

    /// The node stops where it is: a power loss (its disk keeps only what a crash keeps) or,
    /// with `flush = async` when the whole group stops, a killed process (the page cache
    /// survives). A node that lost power under `async` waits for consent after its restart.
    async fn power_loss(&mut self, id: NodeId, kill: bool) -> Result<(), String> {
        lock(&self.network.rafts).remove(&id);
        lock(&self.network.vote_floors).remove(&id);
        let Some(node) = self.nodes.get_mut(&id) else {
            return Ok(());
        };
        node.life.cancel();
        if let Some(raft) = node.raft.take() {
            // Nothing the node does from here reaches its disk.
            node.disk.fail_from_op(node.disk.ops() + 1);
            let _ = raft.shutdown().await;
        }
        let checkpoints = std::mem::take(&mut node.checkpoints_at_power_loss);
        if let Some(group) = node.group.take() {
            stopped(id, group).await?;
        }
        if kill {
            node.disk.process_killed();
            self.note(format_args!("killed {id}"));
            return Ok(());
        }
        let report = node.disk.crash(&mut self.rng);
        for (path, bytes) in checkpoints {
            restore(&path, bytes.as_deref())
                .map_err(|e| self.fail(format!("node {id}: restore {path:?}: {e}")))?;
        }
        let store_dir = self.nodes[&id].dir.join("store");
        // Writeback may have reached some of the pages written since, in any order.
        let rng = &mut self.rng;
        let store_lost = durable_images::lose_unsynced_pages(&store_dir, || rng.below(2) == 0)
            .map_err(|e| self.fail(format!("node {id}: lose unsynced: {e}")))?;
        self.note(format_args!(
            "power loss {id}: {report:?}, store lost {store_lost} bytes of unsynced pages"
        ));
        if self.flush != FlushMode::Sync {
            lock(&self.network.awaiting_consent).insert(id);
            lock(&self.network.refusing_votes).insert(id);
            let forgetful = self.forgetful.entry(id).or_default();
            forgetful.after_power_loss = true;
            forgetful.catch_up_to = None;
        }
        Ok(())
    }

    /// Cuts the power of `ids` a few disk operations from now each (mid-append or mid-fsync),
    /// then stops them; returns when. Under `async` the whole group is killed instead, or, in
    /// half the cases, loses power: then the writes of the last moments may be lost.
    /// The store loses power now (its checkpoints as they are now are what its disk keeps);
    /// the Raft log a few operations later.
    async fn power_loss_of(&mut self, ids: &[NodeId]) -> Result<tokio::time::Instant, String> {
        let whole_group = ids.len() > 1 && self.flush != FlushMode::Sync;
        let kill = whole_group && self.rng.below(2) == 0;
        if whole_group && !kill {
            self.group_power_losses.push(tokio::time::Instant::now());
        }
        for id in ids {
            let node = self.nodes.get_mut(id).ok_or("no such node")?;
            node.disk
                .fail_from_op(node.disk.ops() + 1 + self.rng.below(12));
            if !kill {
                node.checkpoints_at_power_loss = node
                    .checkpoint_files()
                    .into_iter()
                    .map(|path| {
                        let bytes = std::fs::read(&path).ok();
                        (path, bytes)
                    })
                    .collect();
            }
        }
        tokio::time::sleep(Duration::from_millis(self.rng.below(20))).await;
        for id in ids {
            self.power_loss(*id, kill).await?;
        }
        Ok(tokio::time::Instant::now())
    }

    /// Asks the leader to accept the shorter logs of the nodes waiting for it (the broker's
    /// `PrepareNodeReplacement`, answered once the leader applied an entry of its term), and
    /// lets a node vote again once it applied the leader's last index at that moment, or
    /// before that for a candidate whose log reaches the leader's last log id if the leader's
    /// term is at least the node's (`raft::repair::Consented`).
    async fn grant_consents(&mut self) {
        let waiting: Vec<NodeId> = lock(&self.network.awaiting_consent)
            .iter()
            .copied()
            .collect();
        for id in waiting {
            // A node asks once it runs again.
            let Some(own_term) = self.nodes[&id]
                .raft
                .as_ref()
                .map(|raft| raft.metrics().borrow_watched().vote.leader_id().term)
            else {
                continue;
            };
            let rafts = lock(&self.network.rafts).clone();
            let Some((leader, raft)) = rafts
                .into_iter()
                .find(|(_, raft)| raft.metrics().borrow_watched().state == ServerState::Leader)
            else {
                continue;
            };
            if leader == id {
                // A node elected leader needs nobody's consent (`raft::repair`).
                let last = raft.metrics().borrow_watched().last_log_index;
                self.consented(id, last, None);
                self.note(format_args!("{id} leads: its log stands"));
                continue;
            }
            if !matches!(
                raft.trigger().allow_next_revert(&id, true).await,
                Ok(Ok(()))
            ) {
                continue;
            }
            // A leader that has applied an entry of its term answers its last log id (as
            // `raft::role::leader_ready` reads it; the broker waits up to a second for that).
            let metrics = raft.metrics().borrow_watched().clone();
            let applied_term = metrics
                .last_applied
                .map(|log_id| log_id.committed_leader_id().term);
            let ready =
                metrics.state == ServerState::Leader && applied_term == Some(metrics.current_term);
            let last = metrics.last_log_index;
            let floor = (ready && metrics.current_term >= own_term).then(|| {
                LogIdOf::<SimTypeConfig>::new_term_index(metrics.current_term, last.unwrap_or(0))
            });
            self.consented(id, last, floor);
            self.note(format_args!(
                "{leader} accepted the log of {id} at {last:?}, vote floor {floor:?}"
            ));
        }
    }

    /// Records that the group accepted the log of `id`, whose leader's last index was `last`,
    /// and the vote floor that gives it.
    fn consented(&mut self, id: NodeId, last: Option<u64>, floor: Option<LogIdOf<SimTypeConfig>>) {
        lock(&self.network.awaiting_consent).remove(&id);
        if let Some(floor) = floor {
            lock(&self.network.vote_floors).insert(id, floor);
        }
        if let Some(forgetful) = self.forgetful.get_mut(&id) {
            // As `raft::repair::run_repair` computes it.
            forgetful.catch_up_to = Some(match forgetful.mark_up_to {
                Some(mark_up_to) if !forgetful.after_power_loss => mark_up_to,
                mark_up_to => last.unwrap_or(0).max(mark_up_to.unwrap_or(0)),
            });
        }
    }

    /// Lets the nodes that lost power under `async` vote while most voters did (each asks
    /// the others' `NodeStatus` in `raft::repair`; here the running ones answer).
    fn allow_votes_if_most_lost_power(&mut self) {
        let running_after_loss: Vec<NodeId> = self
            .forgetful
            .iter()
            .filter(|(id, forgetful)| forgetful.after_power_loss && self.nodes[*id].raft.is_some())
            .map(|(id, _)| *id)
            .collect();
        if running_after_loss.len() * 2 <= NODES.len() {
            return;
        }
        for id in running_after_loss {
            if lock(&self.network.refusing_votes).remove(&id)
                && let Some(raft) = &self.nodes[&id].raft
            {
                raft.runtime_config().elect(true);
                self.note(format_args!("{id} votes: most voters lost power"));
            }
        }
    }

    /// Whether a node that may lack entries it acknowledged still catches up (and so no other
    /// node may lose power); lets each vote again once it caught up, and removes its repair
    /// mark as `raft::repair` does.
    fn forgetful_catching_up(&mut self) -> Result<bool, String> {
        self.allow_votes_if_most_lost_power();
        let candidates: Vec<(NodeId, Forgetful)> =
            self.forgetful.iter().map(|(id, f)| (*id, *f)).collect();
        for (id, forgetful) in candidates {
            let node = &self.nodes[&id];
            let applied = node.applied_index();
            let caught_up = forgetful.catch_up_to.is_some_and(|to| applied >= Some(to));
            let Some(raft) = node.raft.clone().filter(|_| caught_up) else {
                continue;
            };
            repair::sync_log(&node.disk, Path::new(LOG_DIR))
                .map_err(|e| self.fail(format!("node {id}: sync log: {e}")))?;
            if forgetful.mark_up_to.is_some() {
                repair::clear(&node.disk, Path::new(LOG_DIR))
                    .map_err(|e| self.fail(format!("node {id}: clear repair mark: {e}")))?;
            }
            lock(&self.network.refusing_votes).remove(&id);
            lock(&self.network.vote_floors).remove(&id);
            raft.runtime_config().elect(true);
            self.forgetful.remove(&id);
            self.note(format_args!("{id} caught up"));
        }
        Ok(!self.forgetful.is_empty())
    }

    /// Whether every node that catches up has a vote floor.
    fn all_forgetful_have_vote_floors(&self) -> bool {
        let floors = lock(&self.network.vote_floors);
        self.forgetful.keys().all(|id| floors.contains_key(id))
    }

    /// A running node that does not catch up: the leader, three times in four.
    fn second_fault_victim(&mut self) -> Option<NodeId> {
        let running: Vec<NodeId> = NODES
            .iter()
            .copied()
            .filter(|id| !self.forgetful.contains_key(id) && self.nodes[id].raft.is_some())
            .collect();
        let leader = running.iter().copied().find(|id| {
            self.nodes[id]
                .raft
                .as_ref()
                .is_some_and(|raft| raft.metrics().borrow_watched().state == ServerState::Leader)
        });
        match leader {
            Some(leader) if self.rng.below(4) > 0 => Some(leader),
            _ if running.is_empty() => None,
            _ => Some(running[self.rng.below(running.len() as u64) as usize]),
        }
    }

    /// Compacts the log of a running node as the broker's compaction task does: a snapshot
    /// of what it applied, then a purge a few entries behind it. A node that lags past the
    /// purge then gets a snapshot (the CommitLog bytes it lacks, read from the sender's
    /// store).
    async fn compact(&mut self) {
        let Some((id, raft)) = self.random_running(|node| node.raft.clone()) else {
            return;
        };
        match compact_log(
            &raft,
            |snapshot| snapshot.saturating_sub(COMPACTION_RETAINED),
            COMPACTION_TIMEOUT,
        )
        .await
        {
            Ok(purged) => self.note(format_args!("{id} compacted, purged up to {purged:?}")),
            Err(error) => self.note(format_args!("{id} compaction failed: {error}")),
        }
    }

    /// Flips a bit in one of the Raft log segments of `id`, which is down.
    fn rot_a_bit(&mut self, id: NodeId) -> Result<(), String> {
        let disk = self.nodes[&id].disk.clone();
        let segments = LogSegment::list(&disk, &Path::new(LOG_DIR).join("segments"))
            .map_err(|e| self.fail(format!("node {id}: list segments: {e}")))?;
        if segments.is_empty() {
            return Ok(());
        }
        let (_, path) = &segments[self.rng.below(segments.len() as u64) as usize];
        let len = disk
            .read(path)
            .map_err(|e| self.fail(format!("node {id}: read {path:?}: {e}")))?
            .len() as u64;
        if len == 0 {
            return Ok(());
        }
        let (offset, bit) = (self.rng.below(len), self.rng.below(8) as u8);
        disk.flip_bit(path, offset, bit)
            .map_err(|e| self.fail(format!("node {id}: flip: {e}")))?;
        self.note(format_args!(
            "bit {bit} of byte {offset} of {path:?} of {id} flipped"
        ));
        Ok(())
    }

    /// Flips a bit in the CommitLog of `id`, which is down: in a whole block below its
    /// checkpoint's flushed offset of the segment recovery checks, so its next start finds the
    /// store lost flushed data.
    fn rot_commit_log(&mut self, id: NodeId) -> Result<(), String> {
        let store_dir = self.nodes[&id].dir.join("store");
        let Ok((checkpoint, _)) = crate::store::checkpoint::Checkpoint::load(&store_dir) else {
            return Ok(());
        };
        let flushed = checkpoint.commit_log_flushed_offset;
        let segment = flushed / SIM_COMMIT_LOG_SEGMENT_BYTES * SIM_COMMIT_LOG_SEGMENT_BYTES;
        let block_bytes = crate::store::commit_log_segment::COMMIT_LOG_BLOCK_BYTES as u64;
        let checked_end = flushed / block_bytes * block_bytes;
        if checked_end <= segment {
            return Ok(());
        }
        let (offset, bit) = (
            self.rng.below(checked_end - segment),
            self.rng.below(8) as u8,
        );
        let path = store_dir
            .join("commitlog")
            .join(crate::store::mapped_file::file_name(segment));
        crate::store::tests::flip_bits(&path, offset as usize, 1 << bit);
        self.note(format_args!(
            "bit {bit} of CommitLog offset {} of {id} flipped",
            segment + offset
        ));
        Ok(())
    }

    /// A node the seed picks among those `part` gives something of (its Raft, its group
    /// state: the running ones), with that part.
    fn random_running<T>(&mut self, part: impl Fn(&SimNode) -> Option<T>) -> Option<(NodeId, T)> {
        let mut running: Vec<(NodeId, T)> = self
            .nodes
            .iter()
            .filter_map(|(id, node)| Some((*id, part(node)?)))
            .collect();
        if running.is_empty() {
            return None;
        }
        let picked = self.rng.below(running.len() as u64) as usize;
        Some(running.swap_remove(picked))
    }

    /// Flips a bit in the key index of a random running node, as it runs: apply reads the
    /// index to find earlier copies of retried sends and adds read it too, so the node must
    /// mend the damage where it reads it, never decide from it.
    fn rot_a_running_index(&mut self) {
        let Some((id, group)) = self.random_running(|node| node.group.clone()) else {
            return;
        };
        if rot_index_entry(&group, &self.nodes[&id].dir, &mut self.rng) {
            self.note(format_args!("index entry of {id} rotted"));
        }
    }

    /// Proposes one command through whichever node believes it leads, as a broker's
    /// clients and services would: a send (sometimes a producer's retry of a recent one), a
    /// consumer's offset commit, or a delay level's next due range (sometimes one proposed
    /// before, as a stale second leader would).
    async fn write(&mut self) {
        let leader = lock(&self.network.rafts)
            .iter()
            .find(|(_, raft)| raft.metrics().borrow_watched().state == ServerState::Leader)
            .map(|(id, raft)| (*id, raft.clone()));
        let Some((leader_id, leader)) = leader else {
            return;
        };
        self.writes += 1;
        let write = self.writes;
        let command = match self.rng.below(100) {
            0..55 => self.send(),
            55..75 => offset_commit(&mut self.rng, &mut self.offsets_proposed, QUEUES),
            75..92 => self.delivery(leader_id),
            _ => match self.stale_deliveries.pop() {
                Some(stale) => stale,
                None => self.delivery(leader_id),
            },
        };
        let described = command.to_string();
        match tokio::time::timeout(WRITE_TIMEOUT, leader.client_write(command.clone())).await {
            Ok(Ok(response)) => {
                self.note(format_args!(
                    "acked {write} at {}: {described} -> {:?}",
                    response.log_id, response.data
                ));
                self.last_acked_index = self.last_acked_index.max(Some(response.log_id.index));
                self.acknowledged(&command, &response.data)
                    .unwrap_or_else(|error| self.note(format_args!("{error}")));
            }
            Ok(Err(error)) => self.note(format_args!("write {write} failed: {error}")),
            Err(_) => self.note(format_args!("write {write} timed out")),
        }
    }

    /// New messages to one queue, or a producer's retry of a recent send.
    fn send(&mut self) -> Command {
        let recent = self.recent_sends.len();
        if recent > 0 && self.rng.below(5) == 0 {
            let records =
                self.recent_sends[recent - 1 - self.rng.below(recent as u64) as usize].clone();
            return Command::AppendOnce { records };
        }
        let topic = TOPICS[self.rng.below(TOPICS.len() as u64) as usize];
        let queue_id = self.rng.below(QUEUES) as i32;
        let mut records = Vec::new();
        for _ in 0..1 + self.rng.below(3) {
            self.sends += 1;
            let body = random_body(&mut self.rng);
            records.extend(keyed(
                topic,
                queue_id,
                &body,
                format!("send-{}", self.sends),
            ));
        }
        let records = Bytes::from(records);
        self.recent_sends.push(records.clone());
        if self.recent_sends.len() > RETRY_OF_LAST_SENDS {
            self.recent_sends.remove(0);
        }
        match self.rng.below(2) {
            0 => Command::Append { records },
            _ => Command::AppendOnce { records },
        }
    }

    /// The next due range of a delay level, from where the leader's state says the level
    /// is (as its schedule service reads it).
    fn delivery(&mut self, leader: NodeId) -> Command {
        let level = 1 + self.rng.below(DELAY_LEVELS) as u32;
        let from_offset = self.nodes[&leader]
            .group
            .as_ref()
            .map_or(0, |group| group.metadata().schedule_progress(level));
        delivery(
            &mut self.rng,
            level,
            from_offset,
            &mut self.stale_deliveries,
        )
    }

    /// Records what the acknowledgement of `command` promises.
    fn acknowledged(&mut self, command: &Command, result: &CommandResult) -> Result<(), String> {
        let now = tokio::time::Instant::now();
        match (command, result) {
            (
                Command::Append { records }
                | Command::AppendOnce { records }
                | Command::DeliverDelayed { records, .. },
                CommandResult::Appended(appended),
            ) => {
                let mut position = 0;
                for at in appended {
                    let view = RecordView::parse(&records[position..])
                        .map_err(|e| format!("acknowledged records: {e}"))?;
                    position += view.total_size();
                    let topic = TOPICS
                        .into_iter()
                        .chain([DELAYED_TOPIC])
                        .find(|topic| *topic == view.topic())
                        .ok_or("acknowledged a record of an unknown topic")?;
                    let key = view
                        .property(UNIQ_KEY)
                        .map_err(|e| e.to_string())?
                        .unwrap_or_default()
                        .to_owned();
                    self.acked.push(AckedMessage {
                        key,
                        topic,
                        at: *at,
                        acked_at: now,
                    });
                }
            }
            (Command::CommitOffsets { group, offsets }, _) => {
                for offset in offsets {
                    self.offsets_acked
                        .entry((group.clone(), offset.topic.clone(), offset.queue_id))
                        .or_default()
                        .push((offset.offset, now));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether a promise made at `acked_at` may be broken: `async` loses what the group had
    /// not synced when it all lost power.
    fn in_async_loss_window(&self, acked_at: tokio::time::Instant) -> bool {
        self.group_power_losses
            .iter()
            .any(|at| acked_at <= *at && at.duration_since(acked_at) <= ASYNC_LOSS_WINDOW)
    }

    async fn run(mut self) -> Result<String, String> {
        for id in NODES {
            self.start(id).await?;
        }
        let members: BTreeMap<NodeId, NodeAddr> = NODES
            .iter()
            .map(|id| (*id, NodeAddr::shared(format!("sim-{id}"))))
            .collect();
        let first = lock(&self.network.rafts).get(&1).cloned().ok_or("node 1")?;
        first
            .initialize(members)
            .await
            .map_err(|e| self.fail(format!("initialize: {e}")))?;

        // Faults begin once the group formed: a first write is acknowledged (a power loss of
        // all nodes before their first fsync would only undo the initialization).
        let formed_by = tokio::time::Instant::now() + CONVERGE_WITHIN;
        while self.acked.is_empty() {
            if tokio::time::Instant::now() >= formed_by {
                return Err(self.fail("the group did not form".into()));
            }
            self.write().await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let started = tokio::time::Instant::now();
        // The nodes without power, and since when.
        let mut down: Vec<NodeId> = Vec::new();
        let mut down_since = started;
        while started.elapsed() < RUN_FOR {
            self.grant_consents().await;
            let catching_up = self.forgetful_catching_up()?;
            match self.rng.below(100) {
                0..80 => self.write().await,
                80..84 if down.is_empty() && !catching_up => {
                    down = vec![NODES[self.rng.below(3) as usize]];
                    down_since = self.power_loss_of(&down).await?;
                }
                // While nodes catch up that a leader consented to with a vote floor, another
                // node's process dies, most often the leader's.
                80..84 if down.is_empty() && self.all_forgetful_have_vote_floors() => {
                    if let Some(id) = self.second_fault_victim() {
                        self.note(format_args!("killing {id} while a node catches up"));
                        self.power_loss(id, true).await?;
                        down = vec![id];
                        down_since = tokio::time::Instant::now();
                    }
                }
                // Rarely, the whole group: it must keep every acknowledged write.
                94 if down.is_empty() && !catching_up => {
                    down = NODES.to_vec();
                    down_since = self.power_loss_of(&down).await?;
                }
                84..88 => {
                    let id = NODES[self.rng.below(3) as usize];
                    self.network.faults.isolate(id);
                    self.note(format_args!("isolate {id}"));
                }
                88..92 => {
                    self.network.faults.heal();
                    self.note("heal");
                }
                92..94 => {
                    self.network
                        .faults
                        .set_lossy(100_000, Duration::from_millis(5));
                    self.note("lossy");
                }
                95 => self.compact().await,
                96 => self.rot_a_running_index(),
                _ => tokio::time::sleep(Duration::from_millis(self.rng.below(50))).await,
            }
            if !down.is_empty() && down_since.elapsed() >= Duration::from_millis(300) {
                // Sometimes a bit rots in the log of a node that was down alone.
                if let [id] = down[..]
                    && self.forgetful.keys().all(|forgetful| *forgetful == id)
                {
                    match self.rng.below(3) {
                        0 => self.rot_a_bit(id)?,
                        1 => self.rot_commit_log(id)?,
                        _ => {}
                    }
                }
                for id in std::mem::take(&mut down) {
                    self.start(id).await?;
                }
            }
        }
        self.network.faults.heal();
        for id in down {
            self.start(id).await?;
        }
        self.note("healed");
        self.converge_and_check().await?;
        let running: Vec<SimRaft> = lock(&self.network.rafts).values().cloned().collect();
        for raft in running {
            let _ = raft.shutdown().await;
        }
        Ok(self.trace)
    }

    /// Waits for every node to apply every acknowledged write and the same entries, then
    /// checks what was promised on each.
    async fn converge_and_check(&mut self) -> Result<(), String> {
        // One more write through a leader commits everything of its term and before.
        let deadline = tokio::time::Instant::now() + CONVERGE_WITHIN;
        let applied = loop {
            self.grant_consents().await;
            self.forgetful_catching_up()?;
            let applied: BTreeSet<Option<u64>> =
                self.nodes.values().map(SimNode::applied_index).collect();
            if let [applied] = applied.into_iter().collect::<Vec<_>>()[..]
                && applied.is_some()
                && applied >= self.last_acked_index
            {
                break applied;
            }
            if tokio::time::Instant::now() >= deadline {
                let per_node: BTreeMap<NodeId, Option<u64>> = self
                    .nodes
                    .iter()
                    .map(|(id, node)| (*id, node.applied_index()))
                    .collect();
                return Err(self.fail(format!(
                    "the healed group did not apply up to {:?} everywhere within \
                     {CONVERGE_WITHIN:?} (applied per node: {per_node:?})",
                    self.last_acked_index
                )));
            }
            self.write().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if let Some(violation) = lock(&self.violations).first() {
            return Err(self.fail(violation.clone()));
        }
        let mut lost_in_window = 0;
        for (id, node) in &self.nodes {
            let group = node.group.as_ref().ok_or("a healed node runs")?;
            let damaged = {
                let store = group.store();
                store.damaged_commit_log_block(
                    store.commit_log_min_offset(),
                    store.commit_log_max_offset(),
                )
            };
            if let Some(block) = damaged {
                return Err(self.fail(format!(
                    "node {id}: CommitLog block at {block} does not match its checksum"
                )));
            }
            lost_in_window += self
                .check_promises(group)
                .map_err(|e| self.fail(format!("node {id}, applied up to {applied:?}: {e}")))?;
        }
        let groups: Vec<(NodeId, &Arc<GroupState>)> = self
            .nodes
            .iter()
            .filter_map(|(id, node)| Some((*id, node.group.as_ref()?)))
            .collect();
        let (first, reference) = groups[0];
        for (id, group) in &groups[1..] {
            if *group.metadata() != *reference.metadata() {
                return Err(self.fail(format!(
                    "nodes {first} and {id} applied up to {applied:?} hold different metadata"
                )));
            }
            let (ours, theirs) = (commit_log(reference), commit_log(group));
            if ours != theirs {
                let at = ours.iter().zip(&theirs).position(|(a, b)| a != b);
                return Err(self.fail(format!(
                    "nodes {first} and {id} applied up to {applied:?} hold different CommitLogs \
                     ({} and {} bytes, first difference at {at:?})",
                    ours.len(),
                    theirs.len()
                )));
            }
        }
        let _ = writeln!(self.trace, "leaders {:?}", lock(&self.leaders));
        let _ = writeln!(
            self.trace,
            "floor votes {}",
            lock(&self.network.floor_votes)
        );
        let _ = writeln!(
            self.trace,
            "snapshots installed {}",
            lock(&self.network.snapshots_installed)
        );
        let _ = writeln!(self.trace, "messages {}", self.acked.len());
        let _ = writeln!(
            self.trace,
            "offset commits {}",
            self.offsets_acked.values().map(Vec::len).sum::<usize>()
        );
        if lost_in_window > 0 {
            let _ = writeln!(
                self.trace,
                "lost in the async window: {lost_in_window} (over all nodes)"
            );
        }
        Ok(())
    }

    /// Checks one healed node: every acknowledged message is where it was acknowledged,
    /// every message (send, retry or delayed delivery) is stored once, and every consumer
    /// offset is at least the last one acknowledged. Returns the promises made within the
    /// `async` loss window that it does not keep.
    fn check_promises(&self, group: &GroupState) -> Result<usize, String> {
        let mut lost_in_window = 0;
        let store = group.store();
        for acked in &self.acked {
            let unit = store
                .read_consume_queue(acked.topic, acked.at.queue_id, acked.at.queue_offset, 1)
                .into_iter()
                .next();
            let key = match unit {
                Some(unit) if unit.commit_log_offset == acked.at.commit_log_offset => store
                    .read_view(unit.commit_log_offset)
                    .ok()
                    .and_then(|view| Some(view.property(UNIQ_KEY).ok()??.to_owned())),
                _ => None,
            };
            if key.as_deref() == Some(&acked.key) {
                continue;
            }
            if !self.in_async_loss_window(acked.acked_at) {
                return Err(format!(
                    "{} acknowledged at {:?} of {}, found {key:?} there",
                    acked.key, acked.at, acked.topic
                ));
            }
            lost_in_window += 1;
        }
        drop(store);
        for topic in TOPICS.into_iter().chain([DELAYED_TOPIC]) {
            for queue_id in 0..QUEUES as i32 {
                let mut keys = unique_keys(group, topic, queue_id)?;
                let stored = keys.len();
                keys.sort();
                keys.dedup();
                if keys.len() != stored {
                    return Err(format!(
                        "{topic}#{queue_id} stores {stored} messages but {} keys: a retry or a \
                         delayed range was stored twice",
                        keys.len()
                    ));
                }
            }
        }
        let metadata = group.metadata();
        for ((consumer, topic, queue_id), acked) in &self.offsets_acked {
            let kept = acked
                .iter()
                .filter(|(_, at)| !self.in_async_loss_window(*at))
                .map(|(offset, _)| *offset)
                .max();
            let found = metadata.consumer_offset(consumer, topic, *queue_id);
            if found < kept {
                return Err(format!(
                    "{consumer} {topic}#{queue_id} at {found:?}, acknowledged {kept:?}"
                ));
            }
        }
        Ok(lost_in_window)
    }
}

/// Waits until the stopped node's state machine is gone (it holds the other reference to its
/// group state): nothing it does may reach its store after this.
async fn stopped(id: NodeId, group: Arc<GroupState>) -> Result<(), String> {
    for _ in 0..1000 {
        if Arc::strong_count(&group) == 1 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Err(format!("node {id}'s state machine outlived its Raft"))
}

/// Puts back a file as it was (`None`: it did not exist).
/// The node's Raft log, on its simulated disk.
fn open_log(
    node: &SimNode,
    flush: FlushMode,
    purged_if_mark_damaged: Option<LogIdOf<SimTypeConfig>>,
) -> io::Result<LogStore<SimTypeConfig>> {
    LogStore::open_flushed_by_caller(LogStoreConfig {
        disk: Arc::new(node.disk.clone()),
        dir: PathBuf::from(LOG_DIR),
        segment_size_bytes: 16 * 1024,
        flush,
        purged_if_mark_damaged,
    })
}

fn restore(path: &Path, bytes: Option<&[u8]>) -> io::Result<()> {
    match bytes {
        Some(bytes) => std::fs::write(path, bytes),
        None => match std::fs::remove_file(path) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        },
    }
}

/// A node's whole CommitLog.
fn commit_log(group: &GroupState) -> Vec<u8> {
    let store = group.store();
    store
        .read_commit_log(store.commit_log_min_offset(), usize::MAX)
        .unwrap_or_default()
}

/// Runs the node's fsync rounds while it runs.
fn spawn_flusher(rounds: ManualRounds<SimTypeConfig>, every: Duration, life: CancellationToken) {
    SimTypeConfig::spawn(async move {
        loop {
            tokio::select! {
                biased;
                () = life.cancelled() => return,
                () = tokio::time::sleep(every) => rounds.run(),
            }
        }
    });
}

/// Records the leader of each term, and checks that the node's applied index never goes back.
fn spawn_watcher(
    id: NodeId,
    raft: SimRaft,
    life: CancellationToken,
    leaders: Arc<Mutex<BTreeMap<u64, NodeId>>>,
    violations: Arc<Mutex<Vec<String>>>,
) {
    SimTypeConfig::spawn(async move {
        let mut metrics = raft.metrics();
        let mut applied_before: Option<u64> = None;
        loop {
            {
                let now = metrics.borrow_watched();
                if now.state == ServerState::Leader {
                    let term = now.vote.leader_id().term;
                    let leader = *lock(&leaders).entry(term).or_insert(id);
                    if leader != id {
                        lock(&violations)
                            .push(format!("nodes {leader} and {id} both led term {term}"));
                    }
                }
                let applied = now.last_applied.map(|log_id| log_id.index);
                if applied < applied_before {
                    lock(&violations).push(format!(
                        "node {id}'s applied index went back from {applied_before:?} to {applied:?}"
                    ));
                }
                applied_before = applied;
            }
            tokio::select! {
                biased;
                () = life.cancelled() => return,
                changed = metrics.changed() => if changed.is_err() { return },
            }
        }
    });
}

// Seeds replay exactly only when tokio's own random choices follow the seed.
#[cfg(not(tokio_unstable))]
compile_error!(
    "the group simulation needs --cfg tokio_unstable, which .cargo/config.toml sets (a RUSTFLAGS \
     environment variable replaces it: add --cfg tokio_unstable there)"
);

fn seeds() -> std::ops::Range<u64> {
    crate::testing::seeds::seeds(SEEDS_DEFAULT)
}

/// Runs one seed on a fresh single-threaded runtime with paused time. tokio's own random
/// choices (which of a watch channel's notifiers a waiter joins, so the order tasks wake in)
/// follow the seed too; tokio offers that only under `--cfg tokio_unstable`, which
/// `.cargo/config.toml` sets for the workspace.
fn run_seed(seed: u64) -> Result<String, String> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    let runtime = builder.build().map_err(|e| e.to_string())?;
    runtime
        .block_on(DeterministicRng::<TokioRuntime>::scope(
            seed,
            // Built inside the runtime: its clock starts on the simulation's paused time.
            async move { Sim::new(seed)?.run().await },
        ))
        .map_err(|failure| match failure.starts_with("seed ") {
            true => failure,
            false => format!(
                "seed {seed}: {failure} ({})",
                crate::testing::seeds::replay(seed, "group_sim")
            ),
        })
}

/// How a sweep reads a class from a seed's trace.
enum Tally {
    /// The times a phrase occurs.
    Occurrences(&'static str),
    /// The sum over the lines that start with a prefix of the number right after it.
    After(&'static str),
}

/// The classes a sweep counts (the faults injected, and the checks they were put to), each
/// with how it is read from a trace; a full sweep fires every one.
const TALLIES: &[(&str, Tally)] = &[
    ("acknowledged writes checked", Tally::Occurrences("acked ")),
    ("messages", Tally::After("messages ")),
    ("offset commits", Tally::After("offset commits ")),
    (
        "bits flipped in a stopped node's raft log",
        Tally::Occurrences(" flipped"),
    ),
    (
        "raft logs marked for repair",
        Tally::Occurrences(" marked for repair"),
    ),
    (
        "votes by the majority rule after a power loss of the group",
        Tally::Occurrences("votes: most voters lost power"),
    ),
    (
        "nodes killed while a node catches up",
        Tally::Occurrences(" while a node catches up"),
    ),
    (
        "(pre-)votes granted by a vote floor",
        Tally::After("floor votes "),
    ),
    (
        "starts over a raft log that ends before the checkpoint",
        Tally::Occurrences(": snapshot over the log's gap"),
    ),
    (
        "compactions that purged the log",
        Tally::Occurrences(" compacted, purged up to Some"),
    ),
    (
        "snapshots installed behind a purge",
        Tally::After("snapshots installed "),
    ),
    (
        "bits flipped in a running node's key index",
        Tally::Occurrences(" rotted"),
    ),
    (
        "bits flipped in a stopped node's CommitLog",
        Tally::Occurrences(" of CommitLog offset "),
    ),
    (
        "nodes set aside and rebuilt from the group",
        Tally::Occurrences(": set aside, rebuilt from the group"),
    ),
];

/// Zero of every class.
fn no_tallies() -> Counters {
    Counters::of(&TALLIES.iter().map(|(class, _)| *class).collect::<Vec<_>>())
}

/// What one seed's trace shows of each class.
fn tally(trace: &str) -> Counters {
    let mut counters = no_tallies();
    for (class, tally) in TALLIES {
        let count = match tally {
            Tally::Occurrences(phrase) => trace.matches(phrase).count(),
            Tally::After(prefix) => counted(trace, prefix),
        };
        counters.add(class, count as u64);
    }
    counters
}

#[test]
fn seeded_group_runs_lose_no_acknowledged_write_and_replay_exactly() {
    let mut total = no_tallies();
    let mut lost = 0;
    for seed in seeds() {
        let trace = run_seed(seed).unwrap_or_else(|failure| panic!("{failure}"));
        total.merge(&tally(&trace));
        lost += counted(&trace, "lost in the async window: ");
        if seed < REPLAYED_SEEDS {
            let again = run_seed(seed).unwrap_or_else(|failure| panic!("{failure}"));
            assert_eq!(trace, again, "seed {seed} did not replay exactly");
        }
    }
    eprintln!(
        "raft group simulation, seeds {:?}: {total}; {lost} promises made within \
         {ASYNC_LOSS_WINDOW:?} before a power loss of the group broken (counted per node)",
        seeds()
    );
    total.assert_every_class_fired(&seeds(), SEEDS_DEFAULT);
}

/// The sum over the trace's lines that start with `prefix` of the number right after it.
fn counted(trace: &str, prefix: &str) -> usize {
    trace
        .lines()
        .filter_map(|line| line.strip_prefix(prefix))
        .filter_map(|rest| rest.split(' ').next()?.parse::<usize>().ok())
        .sum()
}
