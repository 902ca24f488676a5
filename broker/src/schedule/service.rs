//! The ScheduleMessageService: on the leader only, one task per delay level delivers the due
//! messages of its `SCHEDULE_TOPIC_XXXX` queue to their real topics, and one task per queue
//! of the timer wheel (`rmq_sys_wheel_timer`, [`crate::schedule::timer`]) delivers each
//! timer whose hop ended to its real topic, or parks it for its next hop.
//!
//! Invariants:
//! - It runs only on a leader that has applied an entry of its own term (so the replicated
//!   progress includes every delivery an earlier leader committed) and stops the moment the
//!   node stops leading.
//! - A task reads its queue from the replicated progress and delivers a batch of due
//!   messages together with the new progress in one `DeliverDelayed` entry, which applies only
//!   if the progress is still where the task read it: a range is delivered exactly once, even
//!   when a proposal's outcome was unknown and it is proposed again, or two leaders overlap.
//! - A head that is not due makes its task sleep until it is; an empty queue makes it wait
//!   for new messages. A message whose real topic is gone is logged and skipped.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::group_state::GroupState;
use crate::metadata::PERM_WRITE;
use crate::raft::control::propose::ProposeError;
use crate::raft::control::propose::Undecided;
use crate::raft::control::propose::propose;
use crate::raft::control::role::Role;
use crate::raft::control::role::RoleWatch;
use crate::raft::control::role::leader_ready;
use crate::raft::types::Raft;
use crate::schedule::delay_levels::DelayLevels;
use crate::schedule::delayed::restore;
use crate::schedule::timer;
use crate::schedule::timer::TIMER_PROGRESS_KEY_BASE;
use crate::schedule::timer::TIMER_QUEUES;
use crate::state_machine::command::Command;
use crate::store::MessageStore;
use crate::store::properties::UNIQ_KEY;
use crate::store::record::MessageRecord;
use crate::topic::SCHEDULE_TOPIC;
use crate::topic::TIMER_TOPIC;
use crate::topic::TRANSACTION_HALF_TOPIC;
use crate::topic::TRANSACTION_OP_TOPIC;
use crate::transaction::CheckSettings;
use crate::transaction::checks::TransactionChecks;
use crate::transaction::half::Ending;
use crate::transaction::half::HALF_QUEUE_CHECKED;
use crate::transaction::half::HALF_QUEUE_SENT;
use crate::transaction::half::PGROUP;
use crate::transaction::half::check_of;
use crate::transaction::half::check_times;
use crate::transaction::half::checked_copy;
use crate::transaction::half::half_offset;
use crate::transaction::half::op_record;
use rocketraft_domain::clock::Clock;
use rocketraft_proto::broker as pb;

/// Messages one `DeliverDelayed` entry carries at most.
pub const DELIVER_BATCH_MESSAGES_MAX: usize = 1024;
/// Encoded bytes one `DeliverDelayed` entry carries at most (a single larger message still
/// goes alone).
pub const DELIVER_BATCH_BYTES_MAX: usize = 8 * 1024 * 1024;
/// The longest wait for a delivery to be applied before its outcome counts as unknown.
const DELIVER_WAIT_MAX: Duration = Duration::from_secs(10);
/// Pause after a delivery whose outcome is unknown, before looking again.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Whether this node's schedule service is running now (for status, drills, and the
/// registration that must not announce a lost leadership before the service stopped).
#[derive(Debug)]
pub struct ScheduleStatus {
    running: watch::Sender<bool>,
}

impl Default for ScheduleStatus {
    fn default() -> Self {
        ScheduleStatus {
            running: watch::Sender::new(false),
        }
    }
}

impl ScheduleStatus {
    pub fn is_running(&self) -> bool {
        *self.running.borrow()
    }

    /// Waits until the service is not running, at most `timeout`; false if it still runs.
    pub async fn stopped(&self, timeout: Duration) -> bool {
        let mut running = self.running.subscribe();
        tokio::time::timeout(timeout, running.wait_for(|running| !*running))
            .await
            .is_ok_and(|waited| waited.is_ok())
    }

    fn set(&self, running: bool) {
        self.running.send_replace(running);
    }
}

/// Runs the service whenever this node is a ready leader, until `shutdown`.
pub async fn run_schedule_service(
    raft: Raft,
    group: Arc<GroupState>,
    levels: DelayLevels,
    transactions: (CheckSettings, Arc<TransactionChecks>),
    status: Arc<ScheduleStatus>,
    clock: Clock,
    shutdown: CancellationToken,
) {
    let (settings, checks) = transactions;
    let mut roles = RoleWatch::new(&raft);
    loop {
        let term = tokio::select! {
            () = shutdown.cancelled() => return,
            last_log = leader_ready(&raft) => match last_log {
                Some(last_log) => last_log.committed_leader_id().term,
                None => return,
            },
        };
        let leading = shutdown.child_token();
        let tasks: Vec<_> = ScheduleQueue::all(&levels, settings)
            .map(|queue| {
                tokio::spawn(run_queue(
                    raft.clone(),
                    group.clone(),
                    queue,
                    checks.clone(),
                    clock.clone(),
                    leading.clone(),
                ))
            })
            .collect();
        status.set(true);
        tracing::info!(
            term,
            levels = levels.max_level(),
            "schedule service started"
        );
        let led = Role {
            is_leader: true,
            term,
        };
        tokio::select! {
            () = shutdown.cancelled() => {}
            _ = roles.changed_from(led) => {}
        }
        leading.cancel();
        for task in tasks {
            let _ = task.await;
        }
        status.set(false);
        tracing::info!(term, "schedule service stopped");
    }
}

/// One queue the service delivers from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleQueue {
    pub topic: &'static str,
    pub queue_id: i32,
    /// Its key in the replicated schedule progress (`DeliverDelayed::level`).
    pub progress_key: u32,
    pub kind: QueueKind,
}

/// What a schedule queue holds, and what becomes of its due entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// Messages of a delay level: restored to their topic.
    DelayLevel,
    /// Timers whose hop ended: restored, or parked for their next hop.
    Timer,
    /// Half messages, due `wait_ms` after they were stored: checked back with their
    /// producer group (a copy with one more check goes to the checked queue), or after
    /// `max_checks` discarded; a transaction that ended is passed over.
    HalfCheck { wait_ms: i64, max_checks: i32 },
}

/// Half-queue progress keys (delay levels use 1.., timers `TIMER_PROGRESS_KEY_BASE`..).
pub const HALF_PROGRESS_KEY_BASE: u32 = 1 << 17;

/// The replicated progress key of queue `queue_id` of schedule topic `topic`
/// (`DeliverDelayed::level`): delay level `queue_id + 1`, or one of a range per topic;
/// `None` for any other topic.
pub fn progress_key(topic: &str, queue_id: i32) -> Option<u32> {
    let base = match topic {
        SCHEDULE_TOPIC => 1,
        TIMER_TOPIC => TIMER_PROGRESS_KEY_BASE,
        TRANSACTION_HALF_TOPIC => HALF_PROGRESS_KEY_BASE,
        _ => return None,
    };
    Some(base + u32::try_from(queue_id).ok()?)
}

impl ScheduleQueue {
    fn new(topic: &'static str, queue_id: i32, kind: QueueKind) -> ScheduleQueue {
        ScheduleQueue {
            topic,
            queue_id,
            progress_key: progress_key(topic, queue_id).expect("a schedule topic and queue"),
            kind,
        }
    }

    /// The queue of delay level `level` (1-based).
    pub fn level(level: u32) -> ScheduleQueue {
        ScheduleQueue::new(SCHEDULE_TOPIC, level as i32 - 1, QueueKind::DelayLevel)
    }

    /// Queue `queue_id` of the timer wheel.
    pub fn timer(queue_id: i32) -> ScheduleQueue {
        ScheduleQueue::new(TIMER_TOPIC, queue_id, QueueKind::Timer)
    }

    /// Queue `queue_id` of the half topic, whose entries are due `wait` after their store.
    pub fn half(queue_id: i32, wait: Duration, max_checks: u32) -> ScheduleQueue {
        let kind = QueueKind::HalfCheck {
            wait_ms: wait.as_millis() as i64,
            max_checks: max_checks as i32,
        };
        ScheduleQueue::new(TRANSACTION_HALF_TOPIC, queue_id, kind)
    }

    /// Every delay level's queue, every timer queue, and the two half queues.
    fn all(
        levels: &DelayLevels,
        checks: CheckSettings,
    ) -> impl Iterator<Item = ScheduleQueue> + use<> {
        let timers = (0..TIMER_QUEUES as i32).map(ScheduleQueue::timer);
        let halves = [
            ScheduleQueue::half(HALF_QUEUE_SENT, checks.timeout, checks.max_checks),
            ScheduleQueue::half(HALF_QUEUE_CHECKED, checks.interval, checks.max_checks),
        ];
        (1..=levels.max_level())
            .map(ScheduleQueue::level)
            .chain(timers)
            .chain(halves)
    }

    /// When an entry whose tags code is `tags_code` is due.
    fn due_ms(&self, tags_code: i64) -> i64 {
        match self.kind {
            QueueKind::HalfCheck { wait_ms, .. } => tags_code.saturating_add(wait_ms),
            QueueKind::DelayLevel | QueueKind::Timer => tags_code,
        }
    }
}

/// Due units of a schedule queue to deliver (`records` may be empty when all were skipped).
#[derive(Debug)]
struct DueBatch {
    from_offset: i64,
    next_offset: i64,
    records: Vec<u8>,
    messages: usize,
    /// Check-backs to send once the batch is applied: (producer group, check).
    checks: Vec<(String, pb::TransactionCheck)>,
    /// Transactions to end (discard) before the batch is proposed.
    ends: Vec<Command>,
}

/// What a look at a schedule queue found.
enum Due {
    Batch(DueBatch),
    /// The head is due at this time (ms since the epoch).
    NotBefore(i64),
    /// Nothing is waiting.
    Empty,
}

async fn run_queue(
    raft: Raft,
    group: Arc<GroupState>,
    queue: ScheduleQueue,
    producers: Arc<TransactionChecks>,
    clock: Clock,
    leading: CancellationToken,
) {
    let mut arrivals = group.watch_queue(queue.topic, queue.queue_id);
    let (topic, queue_id) = (queue.topic, queue.queue_id);
    while !leading.is_cancelled() {
        arrivals.borrow_and_update();
        let due = match collect_due(&group, queue, clock.now_ms()) {
            Ok(due) => due,
            Err(error) => {
                tracing::error!(topic, queue_id, %error, "reading the schedule queue failed");
                pause(&leading, RETRY_PAUSE).await;
                continue;
            }
        };
        match due {
            Due::Batch(DueBatch {
                from_offset,
                next_offset,
                records,
                messages,
                checks,
                ends,
            }) => {
                if let Err(error) = end_all(&raft, ends, &leading).await {
                    if settle(error, queue, &leading).await == Settled::RaftStopped {
                        return;
                    }
                    continue;
                }
                let command = Command::DeliverDelayed {
                    level: queue.progress_key,
                    from_offset,
                    next_offset,
                    records: records.into(),
                };
                match deliver(&raft, command, &leading).await {
                    Ok(()) => {
                        tracing::debug!(
                            topic,
                            queue_id,
                            from_offset,
                            next_offset,
                            messages,
                            "delivered"
                        );
                        for (producer_group, check) in checks {
                            if !producers.send(&producer_group, check) {
                                tracing::info!(
                                    producer_group,
                                    "no producer of the group watches for check-backs; checking again later"
                                );
                            }
                        }
                    }
                    Err(error) => {
                        if settle(error, queue, &leading).await == Settled::RaftStopped {
                            return;
                        }
                    }
                }
            }
            Due::NotBefore(due_ms) => {
                tracing::trace!(topic, queue_id, due_ms, "head not due");
                tokio::select! {
                    () = leading.cancelled() => {}
                    () = clock.sleep_until_ms(due_ms) => {}
                }
            }
            Due::Empty => {
                tracing::trace!(topic, queue_id, "empty");
                tokio::select! {
                    () = leading.cancelled() => return,
                    _ = arrivals.changed() => {}
                }
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Settled {
    LookAgain,
    RaftStopped,
}

/// After a proposal that failed: pause, then look at the queue again from its replicated
/// progress (whatever became of the proposal, compare and set keeps it once), unless Raft
/// stopped. A refusal as not the leader does not end the task either: openraft refuses a
/// proposal as `ForwardToLeader` in moments when this node still leads (seen under load,
/// with no role change), and a real loss of leadership cancels `leading` anyway.
async fn settle(error: ProposeError, queue: ScheduleQueue, leading: &CancellationToken) -> Settled {
    let (topic, queue_id) = (queue.topic, queue.queue_id);
    if let ProposeError::Stopped(fatal) = &error {
        tracing::error!(topic, queue_id, %fatal, "raft stopped; the schedule queue stops");
        return Settled::RaftStopped;
    }
    tracing::warn!(topic, queue_id, %error, "delivery not confirmed; looking again");
    pause(leading, RETRY_PAUSE).await;
    Settled::LookAgain
}

/// Proposes each `EndTransaction` of `ends` and waits until it is applied.
async fn end_all(
    raft: &Raft,
    ends: Vec<Command>,
    leading: &CancellationToken,
) -> Result<(), ProposeError> {
    for end in ends {
        deliver(raft, end, leading).await?;
    }
    Ok(())
}

/// Proposes `command` and waits until it is applied, at most [`DELIVER_WAIT_MAX`] and only
/// while this node leads: a proposal whose answer does not come (seen when the node was
/// re-elected in a new term with proposals of the old one pending) must not hold the task,
/// and the service's restart with it. Its outcome is then unknown, which the replicated
/// progress settles: the next look delivers from wherever it stands (compare and set).
async fn deliver(
    raft: &Raft,
    command: Command,
    leading: &CancellationToken,
) -> Result<(), ProposeError> {
    let applied = async { propose(raft, command).await?.await.map(|_| ()) };
    tokio::select! {
        result = tokio::time::timeout(DELIVER_WAIT_MAX, applied) => {
            result.unwrap_or(Err(ProposeError::Unknown(Undecided::NoAnswer(DELIVER_WAIT_MAX))))
        }
        () = leading.cancelled() => Err(ProposeError::Unknown(Undecided::LeadershipLost)),
    }
}

/// The due head of `queue` from its replicated progress, restored (or, for a timer with time
/// left, parked for its next hop) and encoded.
fn collect_due(group: &GroupState, queue: ScheduleQueue, now_ms: i64) -> Result<Due, String> {
    let from_offset = group.metadata().schedule_progress(queue.progress_key);
    let (topic, queue_id) = (queue.topic, queue.queue_id);
    let store = group.store();
    let (min_offset, _) = store.consume_queue_offsets(topic, queue_id);
    let start = from_offset.max(min_offset);
    let units = store.read_consume_queue(topic, queue_id, start, DELIVER_BATCH_MESSAGES_MAX);
    let mut next_offset = start;
    let mut records = Vec::new();
    let mut messages = 0;
    let mut checks = Vec::new();
    let mut ends = Vec::new();
    for unit in units {
        let due_ms = queue.due_ms(unit.tags_code);
        if due_ms > now_ms {
            if next_offset == start {
                return Ok(Due::NotBefore(due_ms));
            }
            break;
        }
        if records.len() >= DELIVER_BATCH_BYTES_MAX {
            break;
        }
        let parked = store
            .read_message(unit.commit_log_offset)
            .map_err(|error| error.to_string())?;
        next_offset += 1;
        let next = match queue.kind {
            QueueKind::HalfCheck { max_checks, .. } => {
                let place = (unit.commit_log_offset, next_offset - 1);
                match check_step(&store, parked, place, now_ms, max_checks)? {
                    HalfStep::Ended => None,
                    HalfStep::Discard(end) => {
                        ends.push(end);
                        None
                    }
                    HalfStep::Check {
                        copy,
                        producer_group,
                        check,
                    } => {
                        checks.push((producer_group, *check));
                        Some(*copy)
                    }
                }
            }
            QueueKind::DelayLevel | QueueKind::Timer => next_step(group, queue, parked, now_ms),
        };
        let Some(next) = next else {
            continue;
        };
        match next.encode() {
            Ok(encoded) => {
                records.extend_from_slice(&encoded);
                messages += 1;
            }
            Err(error) => {
                tracing::warn!(topic, queue_id, %error, "a due message cannot be encoded; skipped")
            }
        }
    }
    Ok(if next_offset > start || start > from_offset {
        Due::Batch(DueBatch {
            from_offset,
            next_offset,
            records,
            messages,
            checks,
            ends,
        })
    } else {
        Due::Empty
    })
}

/// Where a due parked message goes now: back to its real topic (on a queue the topic still
/// has) or, for a timer with time left, to the timer queue of its next hop; `None` (logged)
/// when it can go nowhere.
fn next_step(
    group: &GroupState,
    queue: ScheduleQueue,
    mut parked: MessageRecord,
    now_ms: i64,
) -> Option<MessageRecord> {
    let (topic, queue_id) = (queue.topic, queue.queue_id);
    if topic == TIMER_TOPIC
        && let Some(deliver_ms) = timer::deliver_ms(&parked)
        && deliver_ms > now_ms
    {
        return match timer::park_timer(&mut parked, deliver_ms, now_ms) {
            Ok(()) => Some(parked),
            Err(error) => {
                tracing::warn!(queue_id, %error, "a timer cannot be parked again; skipped");
                None
            }
        };
    }
    let Some(mut restored) = restore(parked, now_ms) else {
        tracing::warn!(
            topic,
            queue_id,
            "a parked message without REAL_TOPIC/REAL_QID skipped"
        );
        return None;
    };
    let Some(writable) = writable_queue(group, &restored.topic, restored.queue_id) else {
        tracing::warn!(
            topic,
            queue_id,
            real_topic = restored.topic,
            "the real topic is gone; the due message is dropped"
        );
        return None;
    };
    restored.queue_id = writable;
    Some(restored)
}

/// What a due half message becomes.
enum HalfStep {
    /// Its transaction ended: nothing.
    Ended,
    /// Its last check-back went unanswered: this `EndTransaction` discards it (applied only
    /// if no other end came first).
    Discard(Command),
    /// Checked back: a copy with one more check, and the check for its producer group.
    Check {
        copy: Box<MessageRecord>,
        producer_group: String,
        check: Box<pb::TransactionCheck>,
    },
}

/// What the half message `half`, stored at `place` (commit log offset, queue offset),
/// becomes; `store` is the store the caller reads under (never locked twice: a writer
/// waiting in between would deadlock the two reads).
fn check_step(
    store: &MessageStore,
    half: MessageRecord,
    place: (i64, i64),
    now_ms: i64,
    max_checks: i32,
) -> Result<HalfStep, String> {
    let Some(msg_id) = half.properties.get(UNIQ_KEY) else {
        tracing::warn!(offset = place.0, "a half message without UNIQ_KEY skipped");
        return Ok(HalfStep::Ended);
    };
    let since = half_offset(&half, place.0);
    let ended = store
        .find_unique_since(TRANSACTION_OP_TOPIC, msg_id, 0, since.max(0) as u64)
        .map_err(|error| error.to_string())?;
    if ended.is_some() {
        return Ok(HalfStep::Ended);
    }
    let times = check_times(&half);
    if times >= max_checks {
        tracing::warn!(
            msg_id,
            times,
            "transaction still unresolved after its last check-back; discarding it"
        );
        let op = op_record(&half, Ending::Discard, now_ms).map_err(|error| error.to_string())?;
        let records = op.encode().map_err(|error| error.to_string())?;
        return Ok(HalfStep::Discard(Command::EndTransaction {
            msg_id: msg_id.to_owned(),
            half_offset: since,
            records: records.into(),
        }));
    }
    let Some(producer_group) = half.properties.get(PGROUP).map(str::to_owned) else {
        tracing::warn!(msg_id, "a half message without PGROUP skipped");
        return Ok(HalfStep::Ended);
    };
    let check = check_of(&half, place.0, place.1).map_err(|error| error.to_string())?;
    let copy = checked_copy(&half, place.0, now_ms).map_err(|error| error.to_string())?;
    Ok(HalfStep::Check {
        copy: Box::new(copy),
        producer_group,
        check: Box::new(check),
    })
}

/// The queue to deliver to: `queue_id` if the topic still has it, else one it has.
pub fn writable_queue(group: &GroupState, topic: &str, queue_id: i32) -> Option<i32> {
    let metadata = group.metadata();
    let config = metadata.topics.get(topic)?;
    if config.perm & PERM_WRITE == 0 || config.write_queue_count == 0 {
        return None;
    }
    let count = config.write_queue_count as i32;
    Some(if (0..count).contains(&queue_id) {
        queue_id
    } else {
        queue_id.rem_euclid(count)
    })
}

async fn pause(leading: &CancellationToken, duration: Duration) {
    tokio::select! {
        () = leading.cancelled() => {}
        () = tokio::time::sleep(duration) => {}
    }
}

#[cfg(test)]
mod tests {
    use crate::metadata::Metadata;
    use crate::metadata::PERM_READ;
    use crate::metadata::PERM_WRITE;
    use crate::metadata::TopicConfig;
    use crate::schedule::delayed::broker_tags_code;
    use crate::schedule::delayed::park;
    use crate::store::MessageStore;
    use crate::store::StoreConfig;
    use crate::store::record::DecodedRecord;
    use crate::store::record::MessageRecord;
    use crate::store::record::decode;
    use crate::store::record::tests::sample;

    use super::*;

    const LEVEL: u32 = 2;
    const REAL_TOPIC: &str = "Orders";

    /// A group whose level-2 schedule queue holds one parked `Orders` message per due time
    /// (ms since the epoch), in that order. Time is an input of `collect_due`, so no clock
    /// is read or waited for.
    fn group_with_parked(dues: &[i64]) -> (tempfile::TempDir, GroupState) {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = StoreConfig {
            tags_code_fn: broker_tags_code,
            ..StoreConfig::new(dir.path())
        };
        let (mut store, _) = MessageStore::open(config).expect("store");
        let levels = DelayLevels::parse("1s 5s").expect("levels");
        for (i, due) in dues.iter().enumerate() {
            let mut record = sample(REAL_TOPIC, 3, format!("m{i}").as_bytes());
            record.store_timestamp_ms = due - levels.delay(LEVEL).as_millis() as i64;
            park(&mut record, LEVEL, &levels).expect("park");
            store
                .append(&record.encode().expect("encode"))
                .expect("append");
        }
        let mut metadata = Metadata::default();
        metadata.upsert_topic(TopicConfig {
            name: REAL_TOPIC.into(),
            read_queue_count: 4,
            write_queue_count: 4,
            perm: PERM_READ | PERM_WRITE,
        });
        (dir, GroupState::new(store, metadata))
    }

    fn restored(records: &[u8]) -> Vec<MessageRecord> {
        let mut out = Vec::new();
        let mut rest = records;
        while !rest.is_empty() {
            let DecodedRecord::Message(record) = decode(rest).expect("decode") else {
                panic!("blank in a delivery")
            };
            let size = i32::from_be_bytes(rest[..4].try_into().expect("size")) as usize;
            out.push(record);
            rest = &rest[size..];
        }
        out
    }

    #[test]
    fn an_empty_queue_has_nothing_due() {
        let (_dir, group) = group_with_parked(&[]);
        assert!(matches!(
            collect_due(&group, ScheduleQueue::level(LEVEL), 5_000).expect("due"),
            Due::Empty
        ));
    }

    #[test]
    fn a_head_not_yet_due_names_its_due_time() {
        let (_dir, group) = group_with_parked(&[10_000, 20_000]);
        match collect_due(&group, ScheduleQueue::level(LEVEL), 9_999).expect("due") {
            Due::NotBefore(due) => assert_eq!(due, 10_000),
            _ => panic!("nothing is due before 10 000"),
        }
    }

    /// The batch `collect_due` finds due in `queue` at `now_ms`.
    fn due_batch(group: &GroupState, queue: ScheduleQueue, now_ms: i64) -> DueBatch {
        match collect_due(group, queue, now_ms).expect("due") {
            Due::Batch(batch) => batch,
            Due::NotBefore(due) => panic!("nothing due at {now_ms}: the head is due at {due}"),
            Due::Empty => panic!("nothing due at {now_ms}: the queue is empty"),
        }
    }

    #[test]
    fn the_due_prefix_is_delivered_restored_and_the_rest_waits() {
        let (_dir, group) = group_with_parked(&[10_000, 10_000, 20_000]);

        let batch = due_batch(&group, ScheduleQueue::level(LEVEL), 10_000);
        assert_eq!(
            (batch.from_offset, batch.next_offset, batch.messages),
            (0, 2, 2)
        );
        let delivered = restored(&batch.records);
        assert_eq!(delivered.len(), 2);
        for record in &delivered {
            assert_eq!((record.topic.as_str(), record.queue_id), (REAL_TOPIC, 3));
            assert_eq!(record.store_timestamp_ms, 10_000);
        }

        group.metadata_mut().set_schedule_progress(LEVEL, 2);
        match collect_due(&group, ScheduleQueue::level(LEVEL), 10_000).expect("due") {
            Due::NotBefore(due) => assert_eq!(due, 20_000),
            _ => panic!("the third waits for 20 000"),
        }
    }

    #[test]
    fn a_message_whose_topic_is_gone_is_skipped_but_passed() {
        let (_dir, group) = group_with_parked(&[10_000]);
        group.metadata_mut().delete_topic(REAL_TOPIC);

        let batch = due_batch(&group, ScheduleQueue::level(LEVEL), 10_000);
        assert_eq!((batch.next_offset, batch.messages), (1, 0), "passed");
        assert!(batch.records.is_empty());
    }

    /// A group holding one half message (producer group "pg") stored at `stored_ms`, with
    /// `checks` check-backs behind it.
    fn group_with_half(stored_ms: i64, checks: i32) -> (tempfile::TempDir, GroupState) {
        let (dir, group) = group_with_parked(&[]);
        let mut record = sample(REAL_TOPIC, 3, b"pay");
        record.properties.insert(UNIQ_KEY, "TX1").expect("id");
        record.properties.insert(PGROUP, "pg").expect("group");
        crate::transaction::half::park_half(&mut record).expect("park");
        for _ in 0..checks {
            record = checked_copy(&record, 0, 0).expect("copy");
        }
        record.queue_id = HALF_QUEUE_SENT;
        record.store_timestamp_ms = stored_ms;
        group
            .store_mut()
            .append(&record.encode().expect("encode"))
            .expect("append");
        (dir, group)
    }

    const HALF_WAIT: Duration = Duration::from_secs(6);

    #[test]
    fn an_unended_half_message_is_checked_back_once_its_timeout_passed() {
        let (_dir, group) = group_with_half(10_000, 0);
        let queue = ScheduleQueue::half(HALF_QUEUE_SENT, HALF_WAIT, 3);
        match collect_due(&group, queue, 15_999).expect("due") {
            Due::NotBefore(due) => assert_eq!(due, 16_000),
            _ => panic!("checked 6 s after it was stored"),
        }
        let batch = due_batch(&group, queue, 16_000);
        assert_eq!(batch.next_offset, 1);
        let copies = restored(&batch.records);
        assert_eq!(copies.len(), 1);
        assert_eq!(
            (
                copies[0].topic.as_str(),
                copies[0].queue_id,
                check_times(&copies[0])
            ),
            (TRANSACTION_HALF_TOPIC, HALF_QUEUE_CHECKED, 1)
        );
        assert_eq!(batch.checks.len(), 1);
        let (producer_group, check) = &batch.checks[0];
        assert_eq!(
            (producer_group.as_str(), check.msg_id.as_str()),
            ("pg", "TX1")
        );
        assert_eq!(
            check.message.as_ref().map(|m| m.topic.as_str()),
            Some(REAL_TOPIC)
        );
    }

    #[test]
    fn an_ended_transaction_is_passed_over_and_the_last_check_discards() {
        let (_dir, group) = group_with_half(10_000, 3);
        let queue = ScheduleQueue::half(HALF_QUEUE_SENT, HALF_WAIT, 3);
        let batch = due_batch(&group, queue, 16_000);
        assert!(
            batch.checks.is_empty() && batch.records.is_empty(),
            "no more check-backs after the last"
        );
        let [
            Command::EndTransaction {
                msg_id,
                half_offset,
                records,
            },
        ] = batch.ends.as_slice()
        else {
            panic!("one discard: {:?}", batch.ends);
        };
        assert_eq!((msg_id.as_str(), *half_offset), ("TX1", 0));
        let discarded = restored(records);
        assert_eq!(discarded[0].topic, TRANSACTION_OP_TOPIC);
        assert_eq!(Ending::parse(&discarded[0].body), Some(Ending::Discard));

        let (_dir, group) = group_with_half(10_000, 0);
        let half = group.store().read_message(0).expect("half");
        let op = op_record(&half, Ending::Commit, 11_000).expect("op");
        group
            .store_mut()
            .append(&op.encode().expect("encode"))
            .expect("append");
        let batch = due_batch(&group, queue, 16_000);
        assert_eq!(batch.next_offset, 1, "passed over");
        assert!(
            batch.records.is_empty() && batch.checks.is_empty(),
            "it ended: nothing to do"
        );
    }
}
