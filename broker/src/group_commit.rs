//! Group commit on the leader: concurrent sends are coalesced into one `Append` entry, so the
//! Raft cost (one log write, one fsync, one replication round) is paid per batch, not per
//! message.
//!
//! Sends enter a bounded queue; one task drains whatever is queued, up to
//! [`GROUP_COMMIT_MESSAGES_MAX`] messages and [`GROUP_COMMIT_BYTES_MAX`] bytes, proposes it,
//! and hands each send the offsets its messages got at apply time. Batches are proposed in
//! queue order; up to [`GROUP_COMMIT_IN_FLIGHT_MAX`] wait for their commit at once, and the
//! queue fills while they do, which is what makes the next batch large under load.
//!
//! A producer's retry (`deduplicate`) goes through the same queue, so it never overtakes an
//! earlier attempt queued here; a batch holding one is proposed as `AppendOnce`, whose apply
//! skips every message of the batch whose `UNIQ_KEY` its topic already holds.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::sync::mpsc;
use tokio::sync::oneshot;

use crate::error::BrokerError;
use crate::raft::propose::propose;
use crate::raft::types::AppendedMessage;
use crate::raft::types::Command;
use crate::raft::types::CommandResult;
use crate::raft::types::Raft;

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
    /// Starts the batching task; it ends when every `GroupCommit` handle is dropped.
    pub fn start(raft: Raft) -> GroupCommit {
        let (queue, receiver) = mpsc::channel(GROUP_COMMIT_QUEUE_CAPACITY);
        tokio::spawn(run(raft, receiver));
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

async fn run(raft: Raft, mut queue: mpsc::Receiver<PendingSend>) {
    let in_flight = Arc::new(Semaphore::new(GROUP_COMMIT_IN_FLIGHT_MAX));
    while let Some(first) = queue.recv().await {
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let mut records = first.records;
        let mut message_count = first.message_count;
        let mut deduplicate = first.deduplicate;
        let mut sends = vec![(first.message_count, first.reply)];
        while message_count < GROUP_COMMIT_MESSAGES_MAX && records.len() < GROUP_COMMIT_BYTES_MAX {
            let Ok(next) = queue.try_recv() else { break };
            records.extend_from_slice(&next.records);
            message_count += next.message_count;
            deduplicate |= next.deduplicate;
            sends.push((next.message_count, next.reply));
        }
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
        tokio::spawn(async move {
            let result = applied.await;
            drop(permit);
            match result {
                Ok(CommandResult::Appended(appended)) => distribute(sends, appended),
                Ok(CommandResult::Done) => reply_all(sends, || {
                    BrokerError::Internal("an append applied without results".into())
                }),
                Err(error) => reply_all(sends, || error.clone().into()),
            }
        });
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
    use super::*;

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
