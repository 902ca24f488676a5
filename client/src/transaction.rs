//! Transactional messages, the producer's side (RocketMQ's `TransactionMQProducer`).
//!
//! [`Producer::send_in_transaction`](crate::producer::Producer::send_in_transaction) sends a
//! half message (invisible to consumers), runs the application's local transaction and ends
//! the transaction on the broker with its outcome: commit makes the message visible, rollback
//! drops it. A transaction the producer did not end (unknown outcome, a crash, a lost
//! `EndTransaction`) is checked back: a producer built with a [`TransactionChecker`] watches
//! every broker group it knows for check-backs of its producer group and answers each with
//! its checker's verdict. Any producer of the group may answer, so a restarted one resolves
//! what a crashed one left open.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rocketraft_proto::broker as pb;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::brokers::Brokers;
use crate::brokers::CallError;
use crate::end_lanes::EndLanes;
use crate::message::MessageExt;

/// Check-backs a producer answers at once at most (RocketMQ runs them on a small pool too):
/// while that many wait for the checker, the producer reads no more, and the broker drops
/// what does not fit its queue until its next check round.
pub const CHECKS_ANSWERING_MAX: usize = 64;
/// How long one `EndTransactions` request may take, repeats included.
pub const END_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the broker groups a checker watches are looked at again.
const WATCH_REFRESH: Duration = Duration::from_secs(2);
/// Pause before watching a group again after its stream ended or failed.
const WATCH_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// The outcome of a local transaction, as the application reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalTransactionState {
    Commit,
    Rollback,
    /// Not known yet: the broker checks back later.
    Unknown,
}

/// How a transaction ended on the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionEnd {
    Committed,
    RolledBack,
}

/// Answers a check-back: the local transaction's outcome for a half message.
pub trait TransactionChecker: Send + Sync + 'static {
    fn check(
        &self,
        message: MessageExt,
    ) -> Pin<Box<dyn Future<Output = LocalTransactionState> + Send>>;
}

/// Any `Fn(MessageExt) -> impl Future<Output = LocalTransactionState>` is a checker.
impl<F, Fut> TransactionChecker for F
where
    F: Fn(MessageExt) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = LocalTransactionState> + Send + 'static,
{
    fn check(
        &self,
        message: MessageExt,
    ) -> Pin<Box<dyn Future<Output = LocalTransactionState> + Send>> {
        Box::pin(self(message))
    }
}

/// Ends the transaction of half message `msg_id` (stored at `commit_log_offset` in broker
/// group `group`) with `state`; `None` for [`LocalTransactionState::Unknown`] (nothing is
/// sent), else how the transaction ended (this end's outcome, or an earlier one's).
pub async fn end_transaction(
    ends: &EndLanes,
    producer_group: &str,
    group: &str,
    msg_id: &str,
    commit_log_offset: i64,
    state: LocalTransactionState,
    from_check: bool,
) -> Result<Option<TransactionEnd>, CallError> {
    let outcome = match state {
        LocalTransactionState::Commit => pb::TransactionOutcome::Commit,
        LocalTransactionState::Rollback => pb::TransactionOutcome::Rollback,
        LocalTransactionState::Unknown => return Ok(None),
    };
    let request = pb::EndTransactionRequest {
        producer_group: producer_group.to_owned(),
        msg_id: msg_id.to_owned(),
        commit_log_offset,
        outcome: outcome as i32,
        from_check,
    };
    let response = ends.end(group, request).await?;
    Ok(Some(
        if response.outcome == pb::TransactionOutcome::Commit as i32 {
            TransactionEnd::Committed
        } else {
            TransactionEnd::RolledBack
        },
    ))
}

/// What a producer's check-back watchers share.
pub struct CheckWatch {
    pub brokers: Arc<Brokers>,
    /// Where the answers' ends go.
    pub ends: Arc<EndLanes>,
    pub producer_group: String,
    pub client_id: String,
    pub checker: Arc<dyn TransactionChecker>,
    /// Topics whose broker groups are watched from the start (more are added as the
    /// producer learns routes).
    pub topics: Vec<String>,
    pub stop: CancellationToken,
    /// Permits for check-backs being answered, [`CHECKS_ANSWERING_MAX`] in all.
    pub answering: Arc<Semaphore>,
}

/// Watches every broker group the producer knows for check-backs until `stop`.
pub async fn run_check_watch(watch: Arc<CheckWatch>) {
    let mut watched: HashSet<String> = HashSet::new();
    loop {
        for topic in &watch.topics {
            if let Err(error) = watch.brokers.route(topic).await {
                tracing::debug!(topic, %error, "no route yet for a transaction topic");
            }
        }
        for group in watch.brokers.known_groups() {
            if watched.insert(group.clone()) {
                tokio::spawn(watch_group(watch.clone(), group));
            }
        }
        tokio::select! {
            () = watch.stop.cancelled() => return,
            () = tokio::time::sleep(WATCH_REFRESH) => {}
        }
    }
}

/// Follows `group`'s leader's check-back stream, answering each check, until `stop`.
async fn watch_group(watch: Arc<CheckWatch>, group: String) {
    let request = pb::WatchTransactionChecksRequest {
        producer_group: watch.producer_group.clone(),
        client_id: watch.client_id.clone(),
    };
    while !watch.stop.is_cancelled() {
        let opened = watch
            .brokers
            .on_leader(&group, END_TIMEOUT, |mut client, _repeat| {
                let request = request.clone();
                async move { Ok(client.watch_transaction_checks(request).await?.into_inner()) }
            })
            .await;
        match opened {
            Ok(mut checks) => loop {
                let next = tokio::select! {
                    () = watch.stop.cancelled() => return,
                    next = checks.next() => next,
                };
                match next {
                    Some(Ok(check)) => {
                        let permit = tokio::select! {
                            () = watch.stop.cancelled() => return,
                            permit = watch.answering.clone().acquire_owned() => permit,
                        };
                        let Ok(permit) = permit else { return };
                        let answering = answer(watch.clone(), group.clone(), check);
                        tokio::spawn(async move {
                            answering.await;
                            drop(permit);
                        });
                    }
                    Some(Err(status)) => {
                        watch.brokers.leader_failed(&group, &status);
                        break;
                    }
                    None => break,
                }
            },
            Err(error) => tracing::debug!(group, %error, "cannot watch for check-backs; retrying"),
        }
        tokio::select! {
            () = watch.stop.cancelled() => return,
            () = tokio::time::sleep(WATCH_RETRY_PAUSE) => {}
        }
    }
}

/// Asks the checker about `check`'s transaction and ends it with the answer.
async fn answer(watch: Arc<CheckWatch>, group: String, check: pb::TransactionCheck) {
    let Some(pulled) = check.message else {
        return;
    };
    let commit_log_offset = pulled.commit_log_offset;
    let message = MessageExt::from_pulled(pulled, &group);
    let state = watch.checker.check(message).await;
    tracing::debug!(
        msg_id = check.msg_id,
        ?state,
        check_times = check.check_times,
        "check-back answered"
    );
    let ended = end_transaction(
        &watch.ends,
        &watch.producer_group,
        &group,
        &check.msg_id,
        commit_log_offset,
        state,
        true,
    )
    .await;
    if let Err(error) = ended {
        tracing::warn!(msg_id = check.msg_id, %error, "answering a check-back failed; the broker asks again");
    }
}
