//! Repair of a damaged Raft log, after protocol-aware recovery (Alagappan et al., FAST '18).
//!
//! A node whose log lost entries it may have acknowledged could, with its shorter log, help
//! elect a leader that lacks them: that is how a committed write gets lost. So when recovery
//! finds valid entries beyond a cut (damage, not a torn last write), the log store records a
//! durable repair mark with the highest index the damaged log held. While a mark exists the
//! node neither votes nor stands for election. It asks the leader to accept its shorter log,
//! refusing replication until the leader has, then takes the entries back from the leader.
//! Once it has applied the group's log up to the mark, the mark is removed and it votes again.
//!
//! A node whose store lost flushed data (a damaged CommitLog) is repaired the same way, from
//! nothing: its damaged state is set aside and it is rebuilt from the group's log or snapshot.
//!
//! A node that restarts after its machine did, with a log written under `flush = "async"`
//! (`raft::boot_check`), may have forgotten entries it acknowledged in the last flush
//! interval, and so must not help elect a leader that lacks them either. It asks for the
//! leader's consent before it takes replication, catches up to the leader's last index at
//! consent, and votes and stands for election only then, or while most of its group's voters
//! are in the same state (their `NodeStatus` says so): after a power loss of the whole group
//! nobody holds more, and a group that waited for a node that cannot come back would never
//! elect again.
//!
//! Before it caught up, such a node still votes for a candidate whose last log id reaches the
//! consenting leader's last log id, if that leader's term is at least the node's own: every
//! entry the node acknowledged before it forgot was appended by a leader of a term up to its
//! own, so an entry that such an acknowledgement helped commit is in that leader's log (in
//! its term, or, from earlier terms, by Raft's leader completeness), and so in any log that
//! reaches the leader's last log id. Without this, a group that lost the consenting leader
//! before the node caught up could elect nobody while that leader is down.
//!
//! Invariant: the mark is removed only after the node applied an index at or past it, and a
//! restart in between finds the mark again (the cut entries are gone from disk by then).

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use openraft::async_runtime::watch::WatchReceiver;
use rocketraft_domain::secrets::ADMIN_TOKEN_HEADER;
use rocketraft_proto::broker as pb;
use rocketraft_proto::broker::broker_client::BrokerClient;
use serde::Deserialize;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::disk::Disk;
use crate::disk::OsDisk;
use crate::durable_file;
use crate::raft::codec;
use crate::raft::control::membership::PeerAddrs;
use crate::raft::control::membership::members;
use crate::raft::log::boot_check;
use crate::raft::log::segment::LogSegment;
use crate::raft::log::store::FlushMode;
use crate::raft::types::LogId;
use crate::raft::types::NodeId;
use crate::raft::types::Raft;
use crate::tls::PeerConnector;

/// The mark's file, in the Raft log directory.
const MARK_FILE: &str = "repair";
/// Pause between rounds of asking the group's nodes for the leader's consent.
const CONSENT_RETRY_PAUSE: Duration = Duration::from_millis(200);
/// How long one request for consent may take.
const CONSENT_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// What a damaged log lost: everything after `cut_at_index` up to `up_to_index` may have been
/// acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairMark {
    pub cut_at_index: u64,
    pub up_to_index: u64,
}

impl RepairMark {
    /// One mark covering both: the earlier cut and the higher index.
    pub fn merge(self, other: RepairMark) -> RepairMark {
        RepairMark {
            cut_at_index: self.cut_at_index.min(other.cut_at_index),
            up_to_index: self.up_to_index.max(other.up_to_index),
        }
    }

    fn describe(&self) -> String {
        format!(
            "local state damaged from entry {}; entries up to {} are re-fetched from the leader",
            self.cut_at_index, self.up_to_index
        )
    }
}

/// The mark in `log_dir`, if any.
pub fn load(disk: &dyn Disk, log_dir: &Path) -> std::io::Result<Option<RepairMark>> {
    durable_file::read_on(disk, &log_dir.join(MARK_FILE))?
        .map(|bytes| Ok(codec::decode("raft repair mark", &bytes)?))
        .transpose()
}

/// Records damage found by recovery, merged with a mark left by an unfinished repair.
pub fn record_damage(
    disk: &dyn Disk,
    log_dir: &Path,
    found: RepairMark,
) -> std::io::Result<RepairMark> {
    let mark = match load(disk, log_dir)? {
        Some(pending) => pending.merge(found),
        None => found,
    };
    let encoded = codec::encode("raft repair mark", &mark)?;
    durable_file::write_atomic_on(disk, &log_dir.join(MARK_FILE), &encoded)?;
    Ok(mark)
}

/// Where a node's state lives, for [`set_aside_for_rebuild`]: the store and the state
/// machine's directory in the file system, the Raft log on the disk it is written through.
pub struct NodeState<'d> {
    pub data_dir: &'d Path,
    pub store_dir: &'d Path,
    pub state_dir: &'d Path,
    pub log_disk: &'d dyn Disk,
    pub log_dir: &'d Path,
}

/// `<data_dir>/damaged-<now_ms>`, or `damaged-<now_ms>-<n>` with the first `n` free: a
/// directory of its own even for a second set-aside within the same millisecond.
fn free_aside_dir(data_dir: &Path, now_ms: i64) -> PathBuf {
    let named = |n: u32| match n {
        0 => data_dir.join(format!("damaged-{now_ms}")),
        n => data_dir.join(format!("damaged-{now_ms}-{n}")),
    };
    let mut n = 0;
    while named(n).exists() {
        n += 1;
    }
    named(n)
}

/// Moves a node's damaged state (its store, its state machine and its Raft log entries, but
/// not its vote) into `<data_dir>/damaged-<unix ms>/` for an operator to inspect, and marks
/// the Raft log for repair up to `up_to_index`. The node then starts empty and is rebuilt
/// from its group, neither voting nor standing for election until it is whole again.
///
/// The mark is made durable first: a crash part way through the moves leaves a node that
/// must not vote until it is rebuilt (its next start sets aside what is left), never one
/// whose log entries were moved away unmarked, which could vote for a leader lacking them.
pub fn set_aside_for_rebuild(node: &NodeState<'_>, up_to_index: u64) -> std::io::Result<PathBuf> {
    let mark = RepairMark {
        cut_at_index: 0,
        up_to_index,
    };
    record_damage(node.log_disk, node.log_dir, mark)?;
    let aside = free_aside_dir(node.data_dir, rocketraft_domain::time::now_ms());
    std::fs::create_dir_all(&aside)?;
    for (from, name) in [(node.store_dir, "store"), (node.state_dir, "raft-state")] {
        if from.exists() {
            std::fs::rename(from, aside.join(name))?;
            durable_file::sync_parent_dir(from)?;
        }
    }
    durable_file::sync_parent_dir(&aside.join("store"))?;
    // The log's files one by one, through the disk the log is written on.
    let (disk, segments) = (node.log_disk, node.log_dir.join("segments"));
    let aside_segments = aside.join("raft-log-segments");
    disk.create_dir_all(&aside_segments)?;
    let mut moves = match disk.list(&segments) {
        Ok(files) => files
            .into_iter()
            .filter_map(|path| Some((aside_segments.join(path.file_name()?), path)))
            .collect(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => return Err(error),
    };
    let purged = node.log_dir.join("purged");
    if disk.read(&purged).is_ok() {
        moves.push((aside.join("raft-log-purged"), purged));
    }
    for (to, from) in &moves {
        disk.rename(from, to)?;
    }
    disk.sync_dir(&aside_segments)?;
    disk.sync_dir(&aside)?;
    if !moves.is_empty() {
        disk.sync_dir(&segments)?;
        disk.sync_dir(node.log_dir)?;
    }
    Ok(aside)
}

/// Makes everything written to the Raft log in `log_dir` so far durable: every segment file
/// and their directory synced. A repair ends only once the entries it took back are on disk:
/// under `flush = "async"` they may be in the page cache only, and a power loss right after
/// the mark is gone (of the whole group, which `async` survives but for its last interval)
/// would lose them again, this time unmarked, while the node counts towards a majority.
pub fn sync_log(disk: &dyn Disk, log_dir: &Path) -> std::io::Result<()> {
    let segments = log_dir.join("segments");
    for (_, path) in LogSegment::list(disk, &segments)? {
        match disk.open(&path) {
            Ok(file) => file.sync_data()?,
            // Purged meanwhile.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
    }
    disk.sync_dir(&segments)
}

/// Removes the mark in `log_dir` (the repair is done), durably.
pub fn clear(disk: &dyn Disk, log_dir: &Path) -> std::io::Result<()> {
    let path = log_dir.join(MARK_FILE);
    match disk.remove_file(&path) {
        Ok(()) => disk.sync_parent_dir(&path),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

/// Where a repair stands, shared by the Raft service (which refuses RPCs accordingly), the
/// node status and the repair task.
#[derive(Debug, Default)]
pub struct RepairState {
    inner: Mutex<Progress>,
}

#[derive(Debug, Default)]
struct Progress {
    pending: Option<RepairMark>,
    /// The machine restarted since the log was written with `async`, so its unsynced tail may
    /// be gone; until the node caught up with the group.
    after_reboot: Option<AfterReboot>,
    /// The leader accepted that this node's log went back.
    consented: bool,
    /// The consenting leader's last log id, if its term was at least this node's: a candidate
    /// whose log reaches it gets this node's vote before it caught up.
    vote_floor: Option<LogId>,
    /// What the last repair found and did, for the node status.
    note: String,
}

impl Progress {
    fn refuses_votes(&self) -> Option<String> {
        match (&self.pending, self.after_reboot) {
            (Some(mark), _) => Some(mark.describe()),
            (None, Some(after_reboot)) if !after_reboot.votes_allowed => {
                Some(AFTER_REBOOT.to_owned())
            }
            _ => None,
        }
    }
}

/// A node whose log may have lost its unsynced tail to a reboot.
#[derive(Debug, Clone, Copy)]
struct AfterReboot {
    /// The mode the log is written with now.
    flush: FlushMode,
    /// Most of the group's voters are in the same state: this node votes.
    votes_allowed: bool,
}

/// What the status says of a log that may have lost its unsynced tail.
const AFTER_REBOOT: &str = "restarted after the machine did, with flush = async: entries of the \
                            last flush interval may be forgotten; catching up with the group \
                            before voting";

impl RepairState {
    /// The repair a node starts with: a mark left by damage, and, if the machine restarted
    /// since the log was written with `async`, the flush mode it is written with now.
    pub fn new(pending: Option<RepairMark>, after_reboot: Option<FlushMode>) -> Arc<RepairState> {
        let note = match (&pending, after_reboot) {
            (Some(mark), _) => format!("{} (in progress)", mark.describe()),
            (None, Some(_)) => format!("{AFTER_REBOOT} (in progress)"),
            (None, None) => String::new(),
        };
        Arc::new(RepairState {
            inner: Mutex::new(Progress {
                pending,
                after_reboot: after_reboot.map(|flush| AfterReboot {
                    flush,
                    votes_allowed: false,
                }),
                consented: false,
                vote_floor: None,
                note,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records the leader's consent: this node takes replication now, and votes for a
    /// candidate that reaches `vote_floor`, if there is one.
    fn consent(&self, vote_floor: Option<LogId>) {
        let mut progress = self.lock();
        progress.consented = true;
        if let Some(floor) = vote_floor {
            progress.note = progress.note.replace(
                "(in progress)",
                &format!(
                    "(in progress; votes for a candidate whose log reaches {})",
                    describe_log_id(&floor)
                ),
            );
        }
        progress.vote_floor = vote_floor;
    }

    /// Why this node must not vote now, if it must not.
    pub fn refuses_votes(&self) -> Option<String> {
        self.lock().refuses_votes()
    }

    /// Why this node must not vote for a candidate whose last log id is `candidate_last`, if
    /// it must not: while it repairs, only for one that reaches the consenting leader's log.
    pub fn refuses_vote_for(&self, candidate_last: Option<&LogId>) -> Option<String> {
        let progress = self.lock();
        let reason = progress.refuses_votes()?;
        match &progress.vote_floor {
            Some(floor) if candidate_last >= Some(floor) => None,
            Some(floor) => Some(format!(
                "{reason}; votes only for a candidate whose log reaches {}",
                describe_log_id(floor)
            )),
            None => Some(reason),
        }
    }

    /// Whether this node may have forgotten entries it acknowledged before a reboot and has
    /// not caught up with the group since.
    pub fn after_power_loss(&self) -> bool {
        self.lock().after_reboot.is_some()
    }

    /// Why this node must not take replication now: the leader has not yet accepted that its
    /// log went back (openraft treats an unannounced reversion as a bug).
    pub fn refuses_replication(&self) -> Option<String> {
        let progress = self.lock();
        if progress.consented {
            return None;
        }
        match &progress.pending {
            Some(mark) => Some(format!(
                "{}; waiting for the leader to accept the shorter log",
                mark.describe()
            )),
            None if progress.after_reboot.is_some() => {
                Some(format!("{AFTER_REBOOT}; waiting for the leader's consent"))
            }
            None => None,
        }
    }

    /// The index the repair waits for (0 when none), and what the last repair did.
    pub fn status(&self) -> (u64, String) {
        let progress = self.lock();
        let up_to = progress.pending.as_ref().map_or(0, |mark| mark.up_to_index);
        (up_to, progress.note.clone())
    }
}

/// Drives a pending repair to its end: the leader's consent, then catching up to the mark
/// (or, after a reboot, to the leader's last index at consent).
pub async fn run_repair(
    raft: Raft,
    state: Arc<RepairState>,
    log_dir: PathBuf,
    node_id: NodeId,
    peers: PeerAddrs,
    admin_token: Option<String>,
    shutdown: CancellationToken,
) {
    let (mark, after_reboot) = {
        let progress = state.lock();
        (progress.pending.clone(), progress.after_reboot)
    };
    if mark.is_none() && after_reboot.is_none() {
        return;
    }
    match &mark {
        Some(mark) => tracing::error!(
            cut_at_index = mark.cut_at_index,
            up_to_index = mark.up_to_index,
            "raft log damaged: this node neither votes nor stands for election until it has \
             re-fetched the lost entries from the leader"
        ),
        None => tracing::warn!("{AFTER_REBOOT}"),
    }
    let asking = Consent {
        raft: &raft,
        state: &state,
        node_id,
        peers: &peers,
        admin_token: admin_token.as_deref(),
    };
    let consented = tokio::select! {
        consented = asking.obtain() => consented,
        () = shutdown.cancelled() => return,
    };
    state.consent(consented.vote_floor);
    let up_to_index = match (&mark, after_reboot) {
        (Some(mark), None) => mark.up_to_index,
        (mark, _) => {
            let leader_last_index = consented.leader_last_index;
            leader_last_index.max(mark.as_ref().map_or(0, |mark| mark.up_to_index))
        }
    };
    tracing::warn!(
        up_to_index,
        vote_floor = ?consented.vote_floor,
        "the group accepted this node's raft log as it is; catching up"
    );
    let mut metrics = raft.metrics();
    loop {
        let applied = metrics
            .borrow_watched()
            .last_applied
            .as_ref()
            .map_or(0, |log_id| log_id.index);
        if applied >= up_to_index {
            break;
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            () = shutdown.cancelled() => return,
        }
    }
    if let Err(error) = sync_log(&OsDisk, &log_dir) {
        tracing::error!(%error, "could not sync the raft log after catching up; not voting");
        return;
    }
    if let Some(after_reboot) = after_reboot {
        let boot_id = boot_check::current_boot_id();
        let settled = boot_check::settle(&OsDisk, &log_dir, after_reboot.flush, boot_id.as_deref());
        if let Err(error) = settled {
            tracing::error!(%error, "could not record that the raft log caught up; not voting");
            return;
        }
        let mut progress = state.lock();
        progress.after_reboot = None;
        progress.note = format!("{AFTER_REBOOT} (done)");
    }
    if let Some(mark) = &mark {
        if let Err(error) = clear(&OsDisk, &log_dir) {
            tracing::error!(%error, "could not remove the raft repair mark; still not voting");
            return;
        }
        let mut progress = state.lock();
        progress.pending = None;
        progress.note = format!("{} (done)", mark.describe());
    }
    // Raft was started with elections off (`setup::start_raft`).
    raft.runtime_config().elect(true);
    tracing::warn!(up_to_index, "raft log caught up: this node votes again");
}

/// A log id as the status and the errors say it.
fn describe_log_id(log_id: &LogId) -> String {
    format!(
        "term {} index {}",
        log_id.committed_leader_id().term,
        log_id.index
    )
}

/// What a leader's consent tells the repairing node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Consented {
    /// The leader's last log index when it consented.
    leader_last_index: u64,
    /// The leader's last log id, if its term was at least this node's.
    vote_floor: Option<LogId>,
}

impl Consented {
    /// Reads a leader's answer for a node whose term is `own_term`. A leader of an older term
    /// (this node had moved on to a later term before it stopped) still lets it take
    /// replication, which shows that leader the later term, but sets no vote floor: its log
    /// may lack entries this node acknowledged in that later term. So does a leader of an
    /// earlier build, which sends no term.
    fn from_answer(answer: &pb::PrepareNodeReplacementResponse, own_term: u64) -> Consented {
        let term = answer.leader_last_log_term;
        Consented {
            leader_last_index: answer.leader_last_log_index,
            vote_floor: (term > 0 && term >= own_term)
                .then(|| LogId::new_term_index(term, answer.leader_last_log_index)),
        }
    }
}

/// A repairing node asking its group for the leader's consent.
struct Consent<'a> {
    raft: &'a Raft,
    state: &'a RepairState,
    node_id: NodeId,
    peers: &'a PeerAddrs,
    admin_token: Option<&'a str>,
}

impl Consent<'_> {
    /// Asks the group's other nodes until the leader among them lets this node rejoin with a
    /// shorter log (an admin call: it carries the group's admin token, if one is set). A node
    /// elected leader meanwhile needs nobody's consent: no one replicates to it. While it
    /// asks, a node restarted after a reboot learns whether most voters are in its state, and
    /// then votes.
    async fn obtain(&self) -> Consented {
        loop {
            let metrics = self.raft.metrics().borrow_watched().clone();
            if metrics.current_leader == Some(self.node_id) {
                return Consented {
                    leader_last_index: metrics.last_log_index.unwrap_or(0),
                    vote_floor: None,
                };
            }
            // Nothing moves this node's term while it refuses votes and replication.
            let own_term = metrics.vote.leader_id().term;
            // An admin call: to the broker API, not to Raft.
            for addr in self.peers.current().iter().map(|peer| &peer.api) {
                match ask_consent(self.peers.connector(), addr, self.node_id, self.admin_token)
                    .await
                {
                    Ok(answer) => return Consented::from_answer(&answer, own_term),
                    Err(error) => {
                        tracing::debug!(%addr, %error, "no consent to a shorter raft log")
                    }
                }
            }
            self.allow_votes_if_most_rebooted().await;
            tokio::time::sleep(CONSENT_RETRY_PAUSE).await;
        }
    }

    /// Lets this node vote once most of the group's voters (itself included) say they
    /// restarted after a reboot and have not caught up: none of them holds more than it.
    async fn allow_votes_if_most_rebooted(&self) {
        let waiting = {
            let progress = self.state.lock();
            progress.pending.is_none()
                && progress
                    .after_reboot
                    .is_some_and(|after_reboot| !after_reboot.votes_allowed)
        };
        if !waiting {
            return;
        }
        let (voters, _) = members(self.raft);
        let mut rebooted = usize::from(voters.contains_key(&self.node_id));
        for (id, addr) in voters.iter().filter(|(id, _)| **id != self.node_id) {
            match peer_after_power_loss(self.peers.connector(), &addr.api).await {
                Ok(true) => rebooted += 1,
                Ok(false) => {}
                Err(error) => tracing::debug!(node = id, %error, "no status from a voter"),
            }
        }
        if rebooted * 2 > voters.len() {
            if let Some(after_reboot) = &mut self.state.lock().after_reboot {
                after_reboot.votes_allowed = true;
            }
            self.raft.runtime_config().elect(true);
            tracing::warn!(
                rebooted,
                voters = voters.len(),
                "most voters restarted after a reboot under flush = async: voting again"
            );
        }
    }
}

/// Whether the node at `addr` says it restarted after a reboot and has not caught up.
async fn peer_after_power_loss(connector: &PeerConnector, addr: &str) -> Result<bool, String> {
    call_peer(connector, addr, |mut client| async move {
        let status = client.node_status(pb::NodeStatusRequest {}).await?;
        Ok(status.into_inner().raft_log_after_power_loss)
    })
    .await
}

async fn ask_consent(
    connector: &PeerConnector,
    addr: &str,
    node_id: NodeId,
    admin_token: Option<&str>,
) -> Result<pb::PrepareNodeReplacementResponse, String> {
    let mut request = tonic::Request::new(pb::PrepareNodeReplacementRequest { node_id });
    if let Some(token) = admin_token {
        rocketraft_domain::secrets::attach(&mut request, ADMIN_TOKEN_HEADER, token);
    }
    call_peer(connector, addr, |mut client| async move {
        let response = client.prepare_node_replacement(request).await?;
        Ok(response.into_inner())
    })
    .await
}

/// Makes `call` on the broker API of the node at `addr`, within [`CONSENT_CALL_TIMEOUT`].
async fn call_peer<T, Call, Fut>(
    connector: &PeerConnector,
    addr: &str,
    call: Call,
) -> Result<T, String>
where
    Call: FnOnce(BrokerClient<tonic::transport::Channel>) -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    let attempt = async {
        let channel = connector
            .endpoint(addr)?
            .connect()
            .await
            .map_err(|error| error.to_string())?;
        call(BrokerClient::new(channel))
            .await
            .map_err(|status| status.to_string())
    };
    tokio::time::timeout(CONSENT_CALL_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| Err("timed out".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(cut_at_index: u64, up_to_index: u64) -> RepairMark {
        RepairMark {
            cut_at_index,
            up_to_index,
        }
    }

    #[test]
    fn a_power_loss_at_any_point_of_setting_aside_leaves_no_log_entries_moved_unmarked() {
        use crate::testing::sim_disk::SimDisk;
        let log_dir = Path::new("/sim/raft/log");
        let segments = log_dir.join("segments");
        let names = ["00000000000000000001.log", "00000000000000000009.log"];
        let mut op = 1;
        loop {
            let dir = tempfile::tempdir().expect("tempdir");
            let (store_dir, state_dir) = (dir.path().join("store"), dir.path().join("state"));
            std::fs::create_dir_all(&store_dir).expect("store");
            std::fs::create_dir_all(&state_dir).expect("state");
            let disk = SimDisk::default();
            disk.create_dir_all(&segments).expect("segments dir");
            for name in names {
                let file = disk.create_new(&segments.join(name)).expect("segment");
                file.write_all_at(b"entries", 0).expect("write");
                file.sync_data().expect("sync");
            }
            disk.sync_dir(&segments).expect("sync dir");
            disk.fail_from_op(disk.ops() + op);
            let node = NodeState {
                data_dir: dir.path(),
                store_dir: &store_dir,
                state_dir: &state_dir,
                log_disk: &disk,
                log_dir,
            };
            let finished = set_aside_for_rebuild(&node, 42).is_ok();
            disk.crash(&mut crate::seeded_rng::SeededRng::new(op));
            let left = disk.list(&segments).expect("list").len();
            let found = load(&disk, log_dir).expect("load");
            if left < names.len() {
                assert_eq!(found, Some(mark(0, 42)), "power lost at op {op}");
            }
            if finished {
                assert_eq!(left, 0);
                assert_eq!(found, Some(mark(0, 42)));
                break;
            }
            op += 1;
        }
    }

    #[test]
    fn setting_aside_in_a_millisecond_that_already_has_a_copy_keeps_both() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = free_aside_dir(dir.path(), 1_700_000_000_000);
        assert_eq!(first, dir.path().join("damaged-1700000000000"));
        std::fs::create_dir_all(&first).expect("first copy");
        let second = free_aside_dir(dir.path(), 1_700_000_000_000);
        assert_eq!(second, dir.path().join("damaged-1700000000000-1"));
        std::fs::create_dir_all(&second).expect("second copy");
        assert_eq!(
            free_aside_dir(dir.path(), 1_700_000_000_000),
            dir.path().join("damaged-1700000000000-2")
        );

        // And the set-aside itself goes to a fresh directory when its millisecond has one.
        let (store_dir, state_dir) = (dir.path().join("store"), dir.path().join("state"));
        let log_dir = dir.path().join("raft").join("log");
        std::fs::create_dir_all(log_dir.join("segments")).expect("log");
        std::fs::create_dir_all(&store_dir).expect("store");
        std::fs::write(store_dir.join("data"), b"damaged again").expect("data");
        // Earlier copies for the next 50 ms: the set-aside must not land in one of them.
        let now = rocketraft_domain::time::now_ms();
        let earlier: Vec<_> = (now..now + 50)
            .map(|ms| dir.path().join(format!("damaged-{ms}")))
            .collect();
        for copy in &earlier {
            std::fs::create_dir_all(copy).expect("earlier copy");
        }
        let node = NodeState {
            data_dir: dir.path(),
            store_dir: &store_dir,
            state_dir: &state_dir,
            log_disk: &OsDisk,
            log_dir: &log_dir,
        };
        let aside = set_aside_for_rebuild(&node, 9).expect("set aside");
        assert!(!earlier.contains(&aside), "{aside:?} held an earlier copy");
        let data = std::fs::read(aside.join("store").join("data")).expect("the copy");
        assert_eq!(data, b"damaged again");
        assert_eq!(load(&OsDisk, &log_dir).expect("load"), Some(mark(0, 9)));
    }

    #[test]
    fn damage_found_twice_widens_the_mark_and_clearing_removes_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(load(&OsDisk, dir.path()).expect("load"), None);
        record_damage(&OsDisk, dir.path(), mark(10, 20)).expect("record");
        let merged = record_damage(&OsDisk, dir.path(), mark(15, 30)).expect("record");
        assert_eq!(merged, mark(10, 30));
        assert_eq!(load(&OsDisk, dir.path()).expect("load"), Some(mark(10, 30)));
        clear(&OsDisk, dir.path()).expect("clear");
        clear(&OsDisk, dir.path()).expect("clearing twice is fine");
        assert_eq!(load(&OsDisk, dir.path()).expect("load"), None);
    }

    #[test]
    fn a_repairing_node_refuses_votes_throughout_and_replication_until_consent() {
        let healthy = RepairState::new(None, None);
        assert_eq!(healthy.refuses_votes(), None);
        assert_eq!(healthy.refuses_replication(), None);
        assert_eq!(healthy.status(), (0, String::new()));

        let repairing = RepairState::new(Some(mark(7, 42)), None);
        assert!(repairing.refuses_votes().is_some());
        assert!(repairing.refuses_replication().is_some());
        let (up_to, note) = repairing.status();
        assert_eq!(up_to, 42);
        assert!(note.contains("damaged from entry 7"), "{note}");
        repairing.consent(None);
        assert!(repairing.refuses_votes().is_some());
        assert!(
            repairing
                .refuses_vote_for(Some(&LogId::new_term_index(9, 1000)))
                .is_some(),
            "a consent without a floor lets it vote for nobody"
        );
        assert_eq!(repairing.refuses_replication(), None);
    }

    #[test]
    fn a_consent_from_a_leader_of_its_term_or_later_sets_a_floor_and_others_do_not() {
        let answer = |index, term| pb::PrepareNodeReplacementResponse {
            leader_last_log_index: index,
            leader_last_log_term: term,
        };
        let floor = |term, index| Some(LogId::new_term_index(term, index));
        assert_eq!(
            Consented::from_answer(&answer(90, 5), 5).vote_floor,
            floor(5, 90)
        );
        assert_eq!(
            Consented::from_answer(&answer(90, 6), 5).vote_floor,
            floor(6, 90)
        );
        let older = Consented::from_answer(&answer(90, 4), 5);
        assert_eq!(
            older,
            Consented {
                leader_last_index: 90,
                vote_floor: None
            },
            "a leader of an older term still lets it take replication"
        );
        assert_eq!(
            Consented::from_answer(&answer(90, 0), 0).vote_floor,
            None,
            "a leader of an earlier build sends no term"
        );
    }

    #[test]
    fn after_consent_a_repairing_node_votes_for_candidates_that_reach_the_leaders_log() {
        let repairing = RepairState::new(Some(mark(7, 42)), None);
        let floor = LogId::new_term_index(5, 90);
        assert!(
            repairing.refuses_vote_for(Some(&floor)).is_some(),
            "before consent, for nobody"
        );
        repairing.consent(Some(floor));
        assert_eq!(repairing.refuses_vote_for(Some(&floor)), None);
        assert_eq!(
            repairing.refuses_vote_for(Some(&LogId::new_term_index(6, 3))),
            None,
            "a later term reaches it"
        );
        for short in [
            None,
            Some(LogId::new_term_index(5, 89)),
            Some(LogId::new_term_index(4, 500)),
        ] {
            let refused = repairing.refuses_vote_for(short.as_ref());
            assert!(
                refused
                    .as_deref()
                    .is_some_and(|reason| reason.ends_with("reaches term 5 index 90")),
                "{short:?}: {refused:?}"
            );
        }
        assert!(
            repairing.refuses_votes().is_some(),
            "it still does not lead"
        );
        let (_, note) = repairing.status();
        assert!(
            note.contains("votes for a candidate whose log reaches"),
            "{note}"
        );
    }

    #[test]
    fn a_node_restarted_after_a_reboot_votes_only_when_most_did_and_takes_replication_after_consent()
     {
        let rebooted = RepairState::new(None, Some(FlushMode::Sync));
        assert!(rebooted.after_power_loss());
        assert!(rebooted.refuses_votes().is_some());
        assert!(rebooted.refuses_replication().is_some());
        let (up_to, note) = rebooted.status();
        assert_eq!(up_to, 0);
        assert!(note.contains("flush = async"), "{note}");
        if let Some(after_reboot) = &mut rebooted.lock().after_reboot {
            after_reboot.votes_allowed = true;
        }
        assert_eq!(rebooted.refuses_votes(), None);
        rebooted.consent(None);
        assert_eq!(rebooted.refuses_replication(), None);
        assert!(rebooted.after_power_loss(), "until it caught up");
    }
}
