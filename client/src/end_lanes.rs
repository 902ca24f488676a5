//! End lanes: a producer's concurrent transaction ends to the same broker group travel
//! together in one `EndTransactions` request (one Raft entry on the broker), so ending
//! transactions under load costs one RPC per batch, not per transaction, while each end keeps
//! its own result.
//!
//! Invariants:
//! - a lane has at most one request in flight; ends that arrive meanwhile wait in the lane
//!   and leave together as its next request, in arrival order, up to
//!   [`END_TRANSACTIONS_MAX`];
//! - an idle lane sends at once: a lone end never waits for company (no linger);
//! - a request whose outcome is unknown (no leader, no answer) is sent again until its time
//!   is up: an end applies only to a transaction not ended yet, so a repeat changes nothing;
//! - an end the broker refuses (no such half message, a bad outcome) fails alone.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use rocketraft_domain::limits::END_TRANSACTIONS_MAX;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common::ResponseCode;
use tokio::sync::oneshot;

use crate::brokers::Brokers;
use crate::brokers::CallError;

/// The outcome of one end through a lane.
pub type EndResult = Result<pb::EndTransactionResponse, CallError>;

/// The lanes of one producer, one per broker group.
pub struct EndLanes {
    brokers: Arc<Brokers>,
    /// How long a request may take, repeats included.
    timeout: Duration,
    lanes: Mutex<HashMap<String, Arc<Lane>>>,
}

struct Lane {
    group: String,
    state: Mutex<LaneState>,
}

#[derive(Default)]
struct LaneState {
    /// A request of this lane is in flight (its driver task runs).
    busy: bool,
    waiting: VecDeque<(pb::EndTransactionRequest, oneshot::Sender<EndResult>)>,
}

impl EndLanes {
    /// Lanes whose requests reach the groups' leaders through `brokers`, each given
    /// `timeout`.
    pub fn new(brokers: Arc<Brokers>, timeout: Duration) -> EndLanes {
        EndLanes {
            brokers,
            timeout,
            lanes: Mutex::default(),
        }
    }

    /// Ends a transaction of broker group `group`, together with whatever else is ended
    /// there meanwhile.
    pub async fn end(&self, group: &str, request: pb::EndTransactionRequest) -> EndResult {
        let lane = self.lane(group);
        let (reply, result) = oneshot::channel();
        let start_driver = {
            let mut state = lock(&lane.state);
            state.waiting.push_back((request, reply));
            !std::mem::replace(&mut state.busy, true)
        };
        if start_driver {
            tokio::spawn(drive(lane, self.brokers.clone(), self.timeout));
        }
        result.await.unwrap_or_else(|_| {
            Err(CallError::Unavailable {
                group: group.to_owned(),
                timeout: self.timeout,
                last_error: "the end lane stopped".into(),
            })
        })
    }

    fn lane(&self, group: &str) -> Arc<Lane> {
        let mut lanes = lock(&self.lanes);
        if let Some(lane) = lanes.get(group) {
            return lane.clone();
        }
        let lane = Arc::new(Lane {
            group: group.to_owned(),
            state: Mutex::default(),
        });
        lanes.insert(group.to_owned(), lane.clone());
        lane
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Sends the lane's waiting ends, one request at a time, until none wait.
async fn drive(lane: Arc<Lane>, brokers: Arc<Brokers>, timeout: Duration) {
    loop {
        let batch: Vec<_> = {
            let mut state = lock(&lane.state);
            let count = state.waiting.len().min(END_TRANSACTIONS_MAX);
            if count == 0 {
                state.busy = false;
                return;
            }
            state.waiting.drain(..count).collect()
        };
        let (ends, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let request = pb::EndTransactionsRequest { ends };
        let answered = brokers
            .on_leader(&lane.group, timeout, |mut client, _repeat| {
                let request = request.clone();
                async move { Ok(client.end_transactions(request).await?.into_inner()) }
            })
            .await;
        match answered {
            Ok(response) if response.results.len() == replies.len() => {
                for (result, reply) in response.results.into_iter().zip(replies) {
                    let _ = reply.send(end_result(&lane.group, result));
                }
            }
            Ok(response) => {
                let status = tonic::Status::internal(format!(
                    "the broker answered {} results for {} ends",
                    response.results.len(),
                    replies.len()
                ));
                for reply in replies {
                    let _ = reply.send(Err(CallError::Rejected {
                        group: lane.group.clone(),
                        status: status.clone(),
                    }));
                }
            }
            Err(error) => {
                for reply in replies {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }
}

/// One end's result as the broker answered it.
fn end_result(group: &str, result: pb::EndTransactionResult) -> EndResult {
    match (ResponseCode::try_from(result.code), result.ended) {
        (Ok(ResponseCode::Ok), Some(ended)) => Ok(ended),
        (code, _) => Err(CallError::Rejected {
            group: group.to_owned(),
            status: rocketraft_proto::error_status(
                tonic::Code::FailedPrecondition,
                code.unwrap_or(ResponseCode::InternalError),
                result.error,
                None,
            ),
        }),
    }
}
