//! `EndTransaction` and `WatchTransactionChecks` ([`crate::transaction`]).
//!
//! An end reads the half message it names, checks that it is one (its id and producer
//! group match), and proposes the op record, with the restored message for a commit, as one
//! `EndTransaction` entry; a committed message that asked for a delay or a timer is parked
//! as of the commit, so it waits its delay after the commit. A transaction that ended
//! already reports how it ended, and nothing changes.

use futures::StreamExt;
use rocketraft_proto::broker as pb;
use rocketraft_proto::time::now_ms;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::BrokerError;
use crate::raft::propose::leader_caught_up;
use crate::raft::propose::propose;
use crate::raft::types::Command;
use crate::raft::types::CommandResult;
use crate::schedule::service::writable_queue;
use crate::service::BrokerService;
use crate::service::consumers::validate_client_id;
use crate::service::send::park_delayed;
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
        validate_group_name(&request.producer_group).map_err(BrokerError::BadRequest)?;
        // A new leader answers only once it applied everything committed before it led: the
        // half message, and any end of its transaction. (A stale read on a deposed leader is
        // harmless: the end applies only if the transaction has not ended, and commits only
        // on the real leader.)
        leader_caught_up(&self.raft, CAUGHT_UP_WAIT_MAX).await?;
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
        let half = self.half_message(&request)?;
        let since = half_offset(&half, request.commit_log_offset);
        if let Some(ended) = self.ending_of(&request.msg_id, since)? {
            return Ok(response(ended, false));
        }
        let now = now_ms();
        let mut records = Vec::new();
        if ending == Ending::Commit {
            let restored = self.committed_message(&half, now)?;
            restored
                .encode_into(&mut records)
                .map_err(BrokerError::illegal)?;
        }
        op_record(&half, ending, now)
            .map_err(BrokerError::illegal)?
            .encode_into(&mut records)
            .map_err(BrokerError::illegal)?;
        let command = Command::EndTransaction {
            msg_id: request.msg_id.clone(),
            half_offset: since,
            records: records.into(),
        };
        let applied = propose(&self.raft, command).await?.await?;
        if matches!(&applied, CommandResult::Appended(appended) if appended.is_empty()) {
            // Another end was applied first.
            let ended = self.ending_of(&request.msg_id, since)?.unwrap_or(ending);
            return Ok(response(ended, false));
        }
        tracing::info!(
            msg_id = request.msg_id,
            ending = ending.as_str(),
            from_check = request.from_check,
            "transaction ended"
        );
        Ok(response(ending, true))
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
        let delayed = self.delayed_placement(&restored, now_ms)?;
        park_delayed(&mut restored, delayed, now_ms, &self.delay_levels)?;
        Ok(restored)
    }
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
