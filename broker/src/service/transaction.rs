//! `EndTransaction(s)` and `WatchTransactionChecks` ([`crate::transaction`]).
//!
//! An end reads the half message it names, checks that it is one (its id and producer
//! group match), and proposes the op record, with the restored message for a commit; the
//! ends of one request go in one `EndTransactions` entry, each refused or ended on its own
//! (`EndTransaction` is a request of one). A committed message that asked for a delay or a
//! timer is parked as of the commit, so it waits its delay after the commit. A transaction
//! that ended already reports how it ended, and nothing changes.

use futures::StreamExt;
use rocketraft_domain::limits::END_TRANSACTIONS_MAX;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common::ResponseCode;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::BrokerError;
use crate::group_commit::GROUP_COMMIT_BYTES_MAX;
use crate::raft::control::propose::leader_caught_up;
use crate::raft::control::propose::propose;
use crate::schedule::service::writable_queue;
use crate::schedule::timer::TIMER_MAX_DELAY_MAX;
use crate::service::BrokerService;
use crate::service::consumers::validate_client_id;
use crate::service::send::park_delayed;
use crate::state_machine::command::Command;
use crate::state_machine::command::CommandResult;
use crate::state_machine::command::TransactionEnd;
use crate::store::properties::UNIQ_KEY;
use crate::store::record::MessageRecord;
use crate::topic::TRANSACTION_HALF_TOPIC;
use crate::topic::TRANSACTION_OP_TOPIC;
use crate::topic::validate_group_name;
use crate::transaction::half::Ending;
use crate::transaction::half::PGROUP;
use crate::transaction::half::half_offset;
use crate::transaction::half::op_record;
use crate::transaction::half::restore_half;

/// Encoded bytes of the ends one `EndTransactions` entry carries at most (one larger end goes
/// alone), as for a group-commit batch of sends: a request's commits may restore up to
/// `END_TRANSACTIONS_MAX` large messages.
const END_ENTRY_BYTES_MAX: usize = GROUP_COMMIT_BYTES_MAX;
/// How long an end waits for a new leader to apply an entry of its own term.
const CAUGHT_UP_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(2);

pub type CheckStream = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<pb::TransactionCheck, tonic::Status>> + Send>,
>;

impl BrokerService {
    pub(super) async fn handle_end_transaction(
        &self,
        request: pb::EndTransactionRequest,
    ) -> Result<pb::EndTransactionResponse, BrokerError> {
        let mut ended = self.end_transactions(vec![request]).await?;
        ended.pop().expect("one result per end")
    }

    pub(super) async fn handle_end_transactions(
        &self,
        request: pb::EndTransactionsRequest,
    ) -> Result<pb::EndTransactionsResponse, BrokerError> {
        let count = request.ends.len();
        if count == 0 || count > END_TRANSACTIONS_MAX {
            return Err(BrokerError::BadRequest(format!(
                "an EndTransactions request carries 1 to {END_TRANSACTIONS_MAX} ends, not {count}"
            )));
        }
        let results = self
            .end_transactions(request.ends)
            .await?
            .into_iter()
            .map(|ended| match ended {
                Ok(ended) => pb::EndTransactionResult {
                    code: ResponseCode::Ok as i32,
                    error: String::new(),
                    ended: Some(ended),
                },
                Err(error) => pb::EndTransactionResult {
                    code: error.code() as i32,
                    error: rocketraft_proto::error_chain(&error),
                    ended: None,
                },
            })
            .collect();
        Ok(pb::EndTransactionsResponse { results })
    }

    /// Ends the transactions `requests` name, those that may end in one `EndTransactions`
    /// entry; one result per request, in order (an end refused alone fails alone). Fails as
    /// a whole only if the entry's outcome is unknown, which a repeat of the same ends
    /// settles: an end applies only to a transaction not ended yet.
    async fn end_transactions(
        &self,
        requests: Vec<pb::EndTransactionRequest>,
    ) -> Result<Vec<Result<pb::EndTransactionResponse, BrokerError>>, BrokerError> {
        // A new leader answers only once it applied everything committed before it led: the
        // half messages, and any end of their transactions. (A stale read on a deposed leader
        // is harmless: an end applies only if its transaction has not ended, and commits
        // only on the real leader.)
        leader_caught_up(&self.raft, CAUGHT_UP_WAIT_MAX).await?;
        let now = self.clock.now_ms();
        let mut results = Vec::with_capacity(requests.len());
        let mut proposed = Vec::new();
        let mut ends = Vec::new();
        for (index, request) in requests.iter().enumerate() {
            match self.prepare_end(request, now) {
                Ok(Prepared::Ended(ending)) => results.push(Ok(response(ending, false))),
                Ok(Prepared::Ends(ending, end)) => {
                    proposed.push((index, ending, end.half_offset));
                    ends.push(end);
                    results.push(Ok(response(ending, true)));
                }
                Err(error) => results.push(Err(error)),
            }
        }
        if ends.is_empty() {
            return Ok(results);
        }
        // Proposed in entries of bounded size, all before awaiting any, in order.
        let runs = entry_runs(
            ends.iter().map(|end| end.records.len()),
            END_ENTRY_BYTES_MAX,
        );
        let mut ends = ends.into_iter();
        let mut entries = Vec::with_capacity(runs.len());
        for count in runs {
            let ends = ends.by_ref().take(count).collect();
            entries.push(propose(&self.raft, Command::EndTransactions { ends }).await?);
        }
        let mut applied = Vec::with_capacity(proposed.len());
        for entry in entries {
            match entry.await? {
                CommandResult::Ended(flags) => applied.extend(flags),
                other => {
                    return Err(BrokerError::Internal(format!(
                        "EndTransactions applied as {other:?}"
                    )));
                }
            }
        }
        for ((index, ending, since), applied) in proposed.into_iter().zip(applied) {
            let request = &requests[index];
            if applied {
                tracing::info!(
                    msg_id = request.msg_id,
                    ending = ending.as_str(),
                    from_check = request.from_check,
                    "transaction ended"
                );
            } else {
                // Another end was applied first.
                let ended = self.ending_of(&request.msg_id, since)?.unwrap_or(ending);
                results[index] = Ok(response(ended, false));
            }
        }
        Ok(results)
    }

    /// What ending `request`'s transaction takes: nothing if it ended already, else the
    /// entry's end (the op record, after the restored message for a commit).
    fn prepare_end(
        &self,
        request: &pb::EndTransactionRequest,
        now_ms: i64,
    ) -> Result<Prepared, BrokerError> {
        validate_group_name(&request.producer_group).map_err(BrokerError::BadRequest)?;
        let ending = match pb::TransactionOutcome::try_from(request.outcome) {
            Ok(pb::TransactionOutcome::Commit) => Ending::Commit,
            Ok(pb::TransactionOutcome::Rollback) => Ending::Rollback,
            _ => {
                return Err(BrokerError::BadRequest(format!(
                    "a transaction ends with COMMIT or ROLLBACK, not {}",
                    request.outcome
                )));
            }
        };
        let half = self.half_message(request)?;
        let since = half_offset(&half, request.commit_log_offset);
        if let Some(ended) = self.ending_of(&request.msg_id, since)? {
            return Ok(Prepared::Ended(ended));
        }
        let mut records = Vec::new();
        if ending == Ending::Commit {
            let restored = self.committed_message(&half, now_ms)?;
            restored
                .encode_into(&mut records)
                .map_err(BrokerError::illegal)?;
        }
        op_record(&half, ending, now_ms)
            .map_err(BrokerError::illegal)?
            .encode_into(&mut records)
            .map_err(BrokerError::illegal)?;
        let end = TransactionEnd {
            msg_id: request.msg_id.clone(),
            half_offset: since,
            records: records.into(),
        };
        Ok(Prepared::Ends(ending, end))
    }

    pub(super) fn handle_watch_transaction_checks(
        &self,
        request: pb::WatchTransactionChecksRequest,
    ) -> Result<CheckStream, BrokerError> {
        validate_group_name(&request.producer_group).map_err(BrokerError::BadRequest)?;
        validate_client_id(&request.client_id)?;
        self.ensure_leader()?;
        let checks = self
            .transaction_checks
            .watch(&request.producer_group, &request.client_id)
            .ok_or_else(|| {
                BrokerError::LimitExceeded(format!(
                    "producer group {} has too many producers watching for check-backs",
                    request.producer_group
                ))
            })?;
        Ok(Box::pin(ReceiverStream::new(checks).map(Ok)))
    }

    /// The half message `request` names, checked against its id and producer group.
    fn half_message(
        &self,
        request: &pb::EndTransactionRequest,
    ) -> Result<MessageRecord, BrokerError> {
        let not_half = || {
            BrokerError::BadRequest(format!(
                "no half message {} of producer group {} at commit log offset {}",
                request.msg_id, request.producer_group, request.commit_log_offset
            ))
        };
        let half = self
            .group
            .store()
            .read_message(request.commit_log_offset)
            .map_err(|_| not_half())?;
        let matches = half.topic == TRANSACTION_HALF_TOPIC
            && half.properties.get(UNIQ_KEY) == Some(request.msg_id.as_str())
            && half.properties.get(PGROUP) == Some(request.producer_group.as_str());
        if !matches {
            return Err(not_half());
        }
        Ok(half)
    }

    /// How the transaction of half message `msg_id` (first stored at `since`) ended, if it
    /// did.
    fn ending_of(&self, msg_id: &str, since: i64) -> Result<Option<Ending>, BrokerError> {
        let store = self.group.store();
        let since = since.max(0) as u64;
        let Some(op) = store.find_unique_since(TRANSACTION_OP_TOPIC, msg_id, 0, since)? else {
            return Ok(None);
        };
        let op = store.read_message(op.commit_log_offset)?;
        Ok(Ending::parse(&op.body))
    }

    /// The message a commit makes visible: restored to its topic (on a queue the topic
    /// still has) and, if it asked for a delay, parked as of `now_ms`.
    fn committed_message(
        &self,
        half: &MessageRecord,
        now_ms: i64,
    ) -> Result<MessageRecord, BrokerError> {
        let mut restored = restore_half(half, now_ms).ok_or_else(|| {
            BrokerError::MessageIllegal("a half message without REAL_TOPIC".into())
        })?;
        restored.queue_id = writable_queue(&self.group, &restored.topic, restored.queue_id)
            .ok_or_else(|| BrokerError::TopicNotExist(restored.topic.clone()))?;
        // Its timer was checked against the maximum of the leader that took the half message;
        // a leader with a lower maximum must not refuse the commit (refused, the transaction
        // would be checked back and finally discarded although the producer committed it).
        let delayed = self.delayed_placement_within(&restored, now_ms, TIMER_MAX_DELAY_MAX)?;
        park_delayed(&mut restored, delayed, now_ms, &self.delay_levels)?;
        Ok(restored)
    }
}

/// Splits ends of `sizes` encoded bytes, in order, into runs of at most `max` bytes (an end
/// larger than `max` alone); returns how many ends each run takes.
fn entry_runs(sizes: impl IntoIterator<Item = usize>, max: usize) -> Vec<usize> {
    let mut runs = Vec::new();
    let (mut count, mut bytes) = (0, 0);
    for size in sizes {
        if count > 0 && bytes + size > max {
            runs.push(count);
            (count, bytes) = (0, 0);
        }
        count += 1;
        bytes += size;
    }
    if count > 0 {
        runs.push(count);
    }
    runs
}

/// What ending one transaction takes.
enum Prepared {
    /// It ended already, so.
    Ended(Ending),
    /// It ends so by this end of an `EndTransactions` entry.
    Ends(Ending, TransactionEnd),
}

fn response(ending: Ending, applied: bool) -> pb::EndTransactionResponse {
    let outcome = match ending {
        Ending::Commit => pb::TransactionOutcome::Commit,
        Ending::Rollback | Ending::Discard => pb::TransactionOutcome::Rollback,
    };
    pb::EndTransactionResponse {
        outcome: outcome as i32,
        applied,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_are_proposed_in_runs_of_at_most_the_entry_size() {
        assert_eq!(entry_runs([], 10), Vec::<usize>::new());
        assert_eq!(entry_runs([4, 6, 1], 10), [2, 1], "exactly at the limit");
        assert_eq!(entry_runs([4, 7, 1], 10), [1, 2], "one byte past it");
        assert_eq!(
            entry_runs([11, 3, 12], 10),
            [1, 1, 1],
            "a larger end goes alone"
        );
        assert_eq!(entry_runs([1; 5], 10), [5]);
    }
}
