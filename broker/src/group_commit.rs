//! Group commit on the leader: concurrent sends are coalesced into one `Append` entry, so the
//! Raft cost (one log write, one fsync, one replication round) is paid per batch, not per
//! message.
//!
//! Sends enter a bounded queue; one task drains whatever is queued, up to
//! [`GROUP_COMMIT_MESSAGES_MAX`] messages and [`GROUP_COMMIT_BYTES_MAX`] bytes (a send that
//! does not fit opens the next batch; one larger than a cap goes alone), proposes it,
//! and hands each send the offsets its messages got at apply time. Batches are proposed in
//! queue order; up to [`GROUP_COMMIT_IN_FLIGHT_MAX`] wait for their commit at once, and the
//! queue fills while they do, which is what makes the next batch large under load.
//!
//! A producer's retry (`deduplicate`) goes through the same queue, so it never overtakes an
//! earlier attempt queued here; a batch holding one is proposed as `AppendOnce`, whose apply
//! skips every message of the batch whose `UNIQ_KEY` its topic already holds.

use std::sync::Arc;
use tokio_util::task::TaskTracker;

use tokio::sync::Semaphore;
use tokio::sync::mpsc;
use tokio::sync::oneshot;

use crate::error::BrokerError;
use crate::raft::control::propose::propose;
use crate::raft::types::Raft;
use crate::state_machine::command::AppendedMessage;
use crate::state_machine::command::Command;
use crate::state_machine::command::CommandResult;

/// Messages in one `Append` entry at most.
pub const GROUP_COMMIT_MESSAGES_MAX: usize = 4096;
/// Encoded bytes in one `Append` entry at most (one send may exceed it alone; it then goes
/// in a batch of its own).
pub const GROUP_COMMIT_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Batches proposed and not yet applied at once.
pub const GROUP_COMMIT_IN_FLIGHT_MAX: usize = 16;
/// Sends waiting to be batched before new sends wait for room.
pub const GROUP_COMMIT_QUEUE_CAPACITY: usize = 8192;

type Reply = oneshot::Sender<Result<Vec<AppendedMessage>, BrokerError>>;

/// The encoded records of one send, waiting for their batch.
struct PendingSend {
    records: Vec<u8>,
    message_count: usize,
    /// A retry: store only messages not stored yet.
    deduplicate: bool,
    reply: Reply,
}

#[derive(Clone)]
pub struct GroupCommit {
    queue: mpsc::Sender<PendingSend>,
}

impl GroupCommit {
    /// Starts the batching task, tracked by `tasks` with the tasks that wait for each
    /// batch; it ends when every `GroupCommit` handle is dropped.
    pub fn start(raft: Raft, tasks: &TaskTracker) -> GroupCommit {
        let (queue, receiver) = mpsc::channel(GROUP_COMMIT_QUEUE_CAPACITY);
        tasks.spawn(run(raft, receiver, tasks.clone()));
        GroupCommit { queue }
    }

    /// Appends `message_count` encoded records; returns where each landed once the batch
    /// holding them is committed and applied. With `deduplicate`, a message whose `UNIQ_KEY`
    /// its topic holds already is not stored again, and its result is the first copy's.
    pub async fn append(
        &self,
        records: Vec<u8>,
        message_count: usize,
        deduplicate: bool,
    ) -> Result<Vec<AppendedMessage>, BrokerError> {
        let (reply, result) = oneshot::channel();
        self.queue
            .send(PendingSend {
                records,
                message_count,
                deduplicate,
                reply,
            })
            .await
            .map_err(|_| BrokerError::Unavailable("the node is shutting down".into()))?;
        result
            .await
            .map_err(|_| BrokerError::Unavailable("the node is shutting down".into()))?
    }
}

async fn run(raft: Raft, mut queue: mpsc::Receiver<PendingSend>, tasks: TaskTracker) {
    let in_flight = Arc::new(Semaphore::new(GROUP_COMMIT_IN_FLIGHT_MAX));
    // A send that did not fit the last batch; it opens the next one.
    let mut carried: Option<PendingSend> = None;
    loop {
        let first = match carried.take() {
            Some(send) => send,
            None => match queue.recv().await {
                Some(send) => send,
                None => return,
            },
        };
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let mut batch = Batch::new(first);
        while let Ok(next) = queue.try_recv() {
            if !batch.has_room_for(&next) {
                carried = Some(next);
                break;
            }
            batch.push(next);
        }
        let Batch {
            records,
            deduplicate,
            sends,
            ..
        } = batch;
        let records = records.into();
        let command = if deduplicate {
            Command::AppendOnce { records }
        } else {
            Command::Append { records }
        };
        let applied = match propose(&raft, command).await {
            Ok(applied) => applied,
            Err(error) => {
                reply_all(sends, || error.clone().into());
                continue;
            }
        };
        tasks.spawn(async move {
            let result = applied.await;
            drop(permit);
            match result {
                Ok(CommandResult::Appended(appended)) => distribute(sends, appended),
                Ok(other) => reply_all(sends, || {
                    BrokerError::Internal(format!("an append applied as {other:?}"))
                }),
                Err(error) => reply_all(sends, || error.clone().into()),
            }
        });
    }
}

/// The sends of one `Append` entry, their records concatenated in queue order.
struct Batch {
    records: Vec<u8>,
    message_count: usize,
    deduplicate: bool,
    sends: Vec<(usize, Reply)>,
}

impl Batch {
    fn new(first: PendingSend) -> Batch {
        Batch {
            records: first.records,
            message_count: first.message_count,
            deduplicate: first.deduplicate,
            sends: vec![(first.message_count, first.reply)],
        }
    }

    /// Whether `send` fits within the caps (a first send always does).
    fn has_room_for(&self, send: &PendingSend) -> bool {
        self.message_count + send.message_count <= GROUP_COMMIT_MESSAGES_MAX
            && self.records.len() + send.records.len() <= GROUP_COMMIT_BYTES_MAX
    }

    fn push(&mut self, send: PendingSend) {
        self.records.extend_from_slice(&send.records);
        self.message_count += send.message_count;
        self.deduplicate |= send.deduplicate;
        self.sends.push((send.message_count, send.reply));
    }
}

/// Splits a batch's results back to the sends, in the order their records were batched.
fn distribute(sends: Vec<(usize, Reply)>, appended: Vec<AppendedMessage>) {
    let expected: usize = sends.iter().map(|(count, _)| count).sum();
    if expected != appended.len() {
        let reason = format!("batch of {expected} messages applied as {}", appended.len());
        tracing::error!(%reason, "group commit result mismatch");
        reply_all(sends, || BrokerError::Internal(reason.clone()));
        return;
    }
    let mut results = appended.into_iter();
    for (count, reply) in sends {
        let _ = reply.send(Ok(results.by_ref().take(count).collect()));
    }
}

fn reply_all(sends: Vec<(usize, Reply)>, error: impl Fn() -> BrokerError) {
    for (_, reply) in sends {
        let _ = reply.send(Err(error()));
    }
}

#[cfg(test)]
mod tests {
    use futures::future::join_all;
    use openraft::async_runtime::watch::WatchReceiver;

    use super::*;
    use crate::store::record::tests::sample;
    use crate::test_node::OneNode;

    /// `count` encoded records on `TopicA` queue 0 with bodies of `body_bytes`, all with the
    /// same `UNIQ_KEY` family `key`.
    fn records(key: &str, count: usize, body_bytes: usize) -> Vec<u8> {
        (0..count)
            .flat_map(|i| {
                let mut record = sample("TopicA", 0, &vec![b'x'; body_bytes]);
                record
                    .properties
                    .insert(crate::store::properties::UNIQ_KEY, format!("{key}-{i}"))
                    .expect("uniq");
                record.encode().expect("encode")
            })
            .collect()
    }

    fn last_log_index(group: &OneNode) -> u64 {
        group
            .node
            .raft()
            .metrics()
            .borrow_watched()
            .last_log_index
            .unwrap_or(0)
    }

    /// Sends queued together are proposed as one entry; each gets its own offsets.
    #[tokio::test]
    async fn concurrent_sends_share_one_entry_and_each_gets_its_own_offsets() {
        let group = OneNode::start().await;
        let commit = GroupCommit::start(group.node.raft().clone(), &TaskTracker::new());
        let before = last_log_index(&group);

        let results =
            join_all((0..100).map(|i| commit.append(records(&format!("m{i}"), 1, 100), 1, false)))
                .await;

        let mut offsets: Vec<i64> = results
            .into_iter()
            .map(|result| {
                let appended = result.expect("stored");
                assert_eq!(appended.len(), 1);
                appended[0].queue_offset
            })
            .collect();
        offsets.sort_unstable();
        assert_eq!(offsets, (0..100).collect::<Vec<i64>>());
        assert_eq!(last_log_index(&group) - before, 1, "one entry for all");
        group.node.shutdown().await;
    }

    /// Five sends of 3 MiB: a batch takes two (6 MiB); a third would pass the 8 MiB cap and
    /// opens the next batch instead.
    #[tokio::test]
    async fn a_send_that_would_pass_the_byte_cap_opens_the_next_batch() {
        let group = OneNode::start().await;
        let commit = GroupCommit::start(group.node.raft().clone(), &TaskTracker::new());
        let before = last_log_index(&group);
        let mib = 1024 * 1024;
        assert!(2 * 3 * mib <= GROUP_COMMIT_BYTES_MAX && 3 * 3 * mib > GROUP_COMMIT_BYTES_MAX);

        let results = join_all(
            (0..5).map(|i| commit.append(records(&format!("s{i}"), 3, mib - 512), 3, false)),
        )
        .await;

        for result in results {
            assert_eq!(result.expect("stored").len(), 3);
        }
        assert_eq!(
            last_log_index(&group) - before,
            3,
            "batches of 2, 2 and 1 sends"
        );
        group.node.shutdown().await;
    }

    /// A producer's retry batched with its own first attempt is stored once; both get the
    /// first copy's place.
    #[tokio::test]
    async fn a_retry_batched_with_its_attempt_is_stored_once() {
        let group = OneNode::start().await;
        let commit = GroupCommit::start(group.node.raft().clone(), &TaskTracker::new());
        let message = records("same", 1, 100);

        let (attempt, retry) = tokio::join!(
            commit.append(message.clone(), 1, false),
            commit.append(message, 1, true)
        );

        let (attempt, retry) = (attempt.expect("stored"), retry.expect("answered"));
        assert_eq!(attempt, retry);
        let (_, max) = group
            .node
            .group()
            .store()
            .consume_queue_offsets("TopicA", 0);
        assert_eq!(max, 1, "one copy in the queue");
        group.node.shutdown().await;
    }

    /// A retry whose first copy's index entry rotted while the node runs (in its page cache)
    /// is still recognised: the lookup meets the damaged block, which is rebuilt from the
    /// CommitLog before the retry is decided.
    #[tokio::test]
    async fn a_retry_whose_first_copys_index_entry_rotted_is_still_stored_once() {
        use crate::store::tests::{flip_bits, index_entry_byte};
        let group = OneNode::start().await;
        let commit = GroupCommit::start(group.node.raft().clone(), &TaskTracker::new());
        let message = records("rot", 1, 100);
        let first = commit
            .append(message.clone(), 1, false)
            .await
            .expect("stored");
        let store_dir = crate::config::store_dir(group.dir.path());
        // The low byte of the first entry's key hash: its chain would no longer find it.
        let (file, at) = index_entry_byte(&store_dir, 0, 0, 7);
        flip_bits(&file, at, 0x01);
        assert_eq!(
            group.node.group().store().index().damaged_blocks(0, 0..1),
            [0]
        );

        let retry = commit.append(message, 1, true).await.expect("answered");

        assert_eq!(first, retry, "the retry is answered with the first copy");
        {
            let store = group.node.group().store();
            assert_eq!(store.consume_queue_offsets("TopicA", 0).1, 1, "one copy");
            assert!(store.index().damaged_blocks(0, 0..1).is_empty(), "rebuilt");
        }
        group.node.shutdown().await;
    }

    fn message(queue_offset: i64) -> AppendedMessage {
        AppendedMessage {
            queue_id: 0,
            queue_offset,
            commit_log_offset: queue_offset * 100,
            size: 100,
        }
    }

    #[test]
    fn each_send_gets_its_own_messages_in_batch_order() {
        let (replies, mut results): (Vec<_>, Vec<_>) = (0..3).map(|_| oneshot::channel()).unzip();
        let sends = [2, 1, 3].into_iter().zip(replies).collect();
        distribute(sends, (0..6).map(message).collect());
        let offsets: Vec<Vec<i64>> = results
            .iter_mut()
            .map(|result| {
                let appended = result.try_recv().expect("answered").expect("stored");
                appended.iter().map(|m| m.queue_offset).collect()
            })
            .collect();
        assert_eq!(offsets, [vec![0, 1], vec![2], vec![3, 4, 5]]);
    }

    #[test]
    fn a_result_count_that_does_not_match_fails_every_send() {
        let (replies, mut results): (Vec<_>, Vec<_>) = (0..2).map(|_| oneshot::channel()).unzip();
        let sends = [2, 2].into_iter().zip(replies).collect();
        distribute(sends, (0..3).map(message).collect());
        for result in &mut results {
            let error = result.try_recv().expect("answered").expect_err("refused");
            assert!(
                matches!(error, BrokerError::Internal(_)),
                "a broken invariant, not a stored send: {error}"
            );
        }
    }
}
