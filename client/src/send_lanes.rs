//! Send lanes: concurrent sends of one topic to the same broker group travel together in one
//! `Send` request, whatever queues they go to (the request names each message's queue), so
//! a producer under load pays one RPC per batch, not per message or per queue, while each
//! send keeps its own result.
//!
//! Invariants:
//! - a lane (one topic, one group) has at most one request in flight, so the sends to each
//!   queue are stored in the order they were made; sends that arrive meanwhile wait in the
//!   lane and leave together as its next request, in arrival order, up to
//!   [`SEND_BATCH_COUNT_MAX`] messages and [`SEND_BATCH_BODY_BYTES_MAX`] body bytes;
//! - an idle lane sends at once: a lone send never waits for company (no linger);
//! - a send whose deadline passed while it waited fails without being sent;
//! - a request refused as `MESSAGE_ILLEGAL` or `QUEUE_ILLEGAL` stored nothing and may be
//!   refused for one message (or one message's queue) alone, so it is split and sent again in
//!   halves until the bad messages stand alone: a bad message never fails the sends it
//!   happened to travel with;
//! - a request sent again (to a new leader, or after no answer) asks the leader to
//!   deduplicate, as does every request that holds a retried send: each is stored once.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;

use rocketraft_domain::limits::SEND_BATCH_BODY_BYTES_MAX;
use rocketraft_domain::limits::SEND_BATCH_COUNT_MAX;
use rocketraft_domain::limits::SEND_BATCH_PROPERTIES_BYTES_MAX;
use rocketraft_domain::send_queues;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common as common_pb;
use rocketraft_proto::common::ResponseCode;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::brokers::Brokers;
use crate::brokers::CallError;
use crate::producer::Attempt;
use rocketraft_domain::time::now_ms;

/// The outcome of one send through a lane.
pub type LaneResult = Result<pb::SendResult, CallError>;

/// The lanes of one producer, by topic and broker group. Nested maps let a lookup borrow the
/// names instead of building a key per send.
pub struct SendLanes {
    brokers: Arc<Brokers>,
    lanes: Mutex<HashMap<String, GroupLanes>>,
}

/// The lanes of one topic, by broker group.
type GroupLanes = HashMap<String, Arc<Lane>>;

/// Where a lane's requests go.
struct LaneKey {
    group: String,
    topic: String,
}

struct Lane {
    key: LaneKey,
    state: Mutex<LaneState>,
}

#[derive(Default)]
struct LaneState {
    /// A request of this lane is in flight (its driver task runs).
    busy: bool,
    waiting: VecDeque<Pending>,
}

/// One send waiting in a lane.
struct Pending {
    message: common_pb::Message,
    queue_id: i32,
    deadline: Instant,
    /// A retry: its request asks the leader to deduplicate.
    retry: bool,
    reply: oneshot::Sender<LaneResult>,
}

impl SendLanes {
    /// Lanes whose requests reach the groups' leaders through `brokers`.
    pub fn new(brokers: Arc<Brokers>) -> SendLanes {
        SendLanes {
            brokers,
            lanes: Mutex::default(),
        }
    }

    /// Sends `message` to `queue_id` of `topic` on `group`'s leader, together with whatever
    /// else is sent to that queue meanwhile; fails once the attempt's deadline passes. A
    /// request holding a retry asks the leader to deduplicate all of its messages.
    pub(crate) async fn send(
        &self,
        group: &str,
        topic: &str,
        queue_id: i32,
        message: common_pb::Message,
        attempt: Attempt,
    ) -> LaneResult {
        let deadline = attempt.deadline;
        let lane = self.lane(group, topic);
        let (reply, result) = oneshot::channel();
        let start_driver = {
            let mut state = lock(&lane.state);
            state.waiting.push_back(Pending {
                message,
                queue_id,
                deadline,
                retry: attempt.retry,
                reply,
            });
            !std::mem::replace(&mut state.busy, true)
        };
        if start_driver {
            tokio::spawn(drive(lane, self.brokers.clone()));
        }
        result.await.unwrap_or_else(|_| {
            Err(CallError::Unavailable {
                group: group.to_owned(),
                timeout: deadline.saturating_duration_since(Instant::now()),
                last_error: "the send lane stopped".into(),
            })
        })
    }

    /// Sends `message` to `queue_id` of `topic` on `group`'s leader, together with whatever
    /// else goes to that lane meanwhile; fails once `deadline` passes. For a server that
    /// forwards its clients' single sends to a queue they chose (the 4.x endpoint).
    pub async fn send_to_queue(
        &self,
        group: &str,
        topic: &str,
        queue_id: i32,
        message: common_pb::Message,
        deadline: Instant,
    ) -> LaneResult {
        let attempt = Attempt {
            deadline,
            retry: false,
        };
        self.send(group, topic, queue_id, message, attempt).await
    }

    fn lane(&self, group: &str, topic: &str) -> Arc<Lane> {
        let mut lanes = lock(&self.lanes);
        if let Some(lane) = lanes.get(topic).and_then(|groups| groups.get(group)) {
            return lane.clone();
        }
        let lane = Arc::new(Lane {
            key: LaneKey {
                group: group.to_owned(),
                topic: topic.to_owned(),
            },
            state: Mutex::new(LaneState::default()),
        });
        lanes
            .entry(topic.to_owned())
            .or_default()
            .insert(group.to_owned(), lane.clone());
        lane
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Sends the lane's waiting messages, one request at a time, until none wait.
async fn drive(lane: Arc<Lane>, brokers: Arc<Brokers>) {
    loop {
        let batch = {
            let mut state = lock(&lane.state);
            let batch = take_batch(&mut state.waiting);
            if batch.is_empty() {
                state.busy = false;
                return;
            }
            batch
        };
        let now = Instant::now();
        let (live, expired): (Vec<Pending>, Vec<Pending>) = batch
            .into_iter()
            .partition(|pending| pending.deadline > now);
        for pending in expired {
            let _ = pending.reply.send(Err(timed_out(&lane.key)));
        }
        if !live.is_empty() {
            send_batch(&brokers, &lane.key, live).await;
        }
    }
}

/// The oldest waiting sends that fit one request (at least one).
fn take_batch(waiting: &mut VecDeque<Pending>) -> Vec<Pending> {
    let mut batch = Vec::new();
    let (mut body_bytes, mut property_bytes) = (0, 0);
    while let Some(next) = waiting.front() {
        let fits = batch.len() < SEND_BATCH_COUNT_MAX
            && body_bytes + next.message.body.len() <= SEND_BATCH_BODY_BYTES_MAX
            && property_bytes + next.message.properties.len() <= SEND_BATCH_PROPERTIES_BYTES_MAX;
        if !fits && !batch.is_empty() {
            break;
        }
        body_bytes += next.message.body.len();
        property_bytes += next.message.properties.len();
        batch.extend(waiting.pop_front());
    }
    batch
}

/// Sends a batch and answers each of its sends. A batch refused as `MESSAGE_ILLEGAL` or
/// `QUEUE_ILLEGAL` stored nothing; it is split in halves, sent left half first, until the
/// refused messages stand alone: a bad message costs its neighbours O(log n) extra round
/// trips, and the lane's order is kept.
async fn send_batch(brokers: &Brokers, key: &LaneKey, batch: Vec<Pending>) {
    let deadline = batch
        .iter()
        .map(|pending| pending.deadline)
        .min()
        .unwrap_or_else(Instant::now);
    let deduplicate = batch.iter().any(|pending| pending.retry);
    let mut request = pb::SendRequest {
        topic: key.topic.clone(),
        queue_id: 0,
        messages: Vec::new(),
        born_timestamp_ms: now_ms(),
        born_host: String::new(),
        deduplicate,
        queue_ids: Vec::new(),
    };
    // Parts still to send, in lane order.
    let mut parts = VecDeque::from([Part::of(batch)]);
    while let Some(mut part) = parts.pop_front() {
        let count = part.replies.len();
        part.load(&mut request);
        match send_request(brokers, &key.group, &request, deadline).await {
            Ok(response) if response.results.len() == count => {
                for (result, reply) in response.results.into_iter().zip(part.replies) {
                    let _ = reply.send(Ok(result));
                }
            }
            Ok(response) => {
                let status = tonic::Status::internal(format!(
                    "the broker answered {} results for {count} messages",
                    response.results.len()
                ));
                reply_all(
                    part.replies,
                    &CallError::Rejected {
                        group: key.group.clone(),
                        status,
                    },
                );
            }
            Err(CallError::Rejected { status, .. })
                if count > 1
                    && matches!(
                        rocketraft_proto::response_code(&status),
                        Some(ResponseCode::MessageIllegal | ResponseCode::QueueIllegal)
                    ) =>
            {
                tracing::debug!(
                    count, %status, lane = %format_args!("{}@{}", key.topic, key.group),
                    "batch refused; sending it in halves"
                );
                part.messages = std::mem::take(&mut request.messages);
                let (left, right) = part.halves();
                parts.push_front(right);
                parts.push_front(left);
            }
            Err(error) => reply_all(part.replies, &error),
        }
    }
}

/// Messages of a batch sent together, each with its queue and its send's reply. While the
/// part is in flight its messages are in the request.
struct Part {
    messages: Vec<common_pb::Message>,
    queue_ids: Vec<i32>,
    replies: Vec<oneshot::Sender<LaneResult>>,
}

impl Part {
    fn of(batch: Vec<Pending>) -> Part {
        let mut part = Part {
            messages: Vec::with_capacity(batch.len()),
            queue_ids: Vec::with_capacity(batch.len()),
            replies: Vec::with_capacity(batch.len()),
        };
        for pending in batch {
            part.messages.push(pending.message);
            part.queue_ids.push(pending.queue_id);
            part.replies.push(pending.reply);
        }
        part
    }

    /// Moves the messages into `request` and names their queues.
    fn load(&mut self, request: &mut pb::SendRequest) {
        request.messages = std::mem::take(&mut self.messages);
        send_queues::name_queues(request, &self.queue_ids);
    }

    fn halves(mut self) -> (Part, Part) {
        let at = self.replies.len() / 2;
        let right = Part {
            messages: self.messages.split_off(at),
            queue_ids: self.queue_ids.split_off(at),
            replies: self.replies.split_off(at),
        };
        (self, right)
    }
}

fn reply_all(replies: Vec<oneshot::Sender<LaneResult>>, error: &CallError) {
    for reply in replies {
        let _ = reply.send(Err(error.clone()));
    }
}

/// One `Send` to `group`'s leader, following leader changes until `deadline`.
pub(crate) async fn send_request(
    brokers: &Brokers,
    group: &str,
    request: &pb::SendRequest,
    deadline: Instant,
) -> Result<pb::SendResponse, CallError> {
    let budget = deadline.saturating_duration_since(Instant::now());
    if budget.is_zero() {
        return Err(CallError::Unavailable {
            group: group.to_owned(),
            timeout: budget,
            last_error: format!(
                "the send to {} timed out before it could leave",
                request.topic
            ),
        });
    }
    brokers
        .on_leader(group, budget, |mut client, repeat| {
            // A repeat may follow a call that was stored: it asks the leader to deduplicate.
            let mut call = request.clone();
            call.deduplicate |= repeat;
            let mut call = tonic::Request::new(call);
            call.set_timeout(deadline.saturating_duration_since(Instant::now()));
            async move { Ok(client.send(call).await?.into_inner()) }
        })
        .await
}

fn timed_out(key: &LaneKey) -> CallError {
    CallError::Unavailable {
        group: key.group.clone(),
        timeout: std::time::Duration::ZERO,
        last_error: format!(
            "the send to {} timed out while it waited for its turn",
            key.topic
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(body_bytes: usize) -> Pending {
        Pending {
            message: common_pb::Message {
                body: vec![0u8; body_bytes].into(),
                ..Default::default()
            },
            queue_id: 0,
            deadline: Instant::now(),
            retry: false,
            reply: oneshot::channel().0,
        }
    }

    fn to_queues(queue_ids: &[i32]) -> Part {
        Part::of(
            queue_ids
                .iter()
                .map(|&queue_id| Pending {
                    queue_id,
                    ..pending(1)
                })
                .collect(),
        )
    }

    #[test]
    fn a_refused_part_splits_into_halves_that_keep_each_message_queue() {
        let mut request = pb::SendRequest::default();
        let mut part = to_queues(&[0, 1, 2, 2, 2]);
        part.load(&mut request);
        assert_eq!(request.queue_ids, [0, 1, 2, 2, 2]);
        part.messages = std::mem::take(&mut request.messages);
        let (mut left, mut right) = part.halves();
        assert_eq!((left.messages.len(), left.replies.len()), (2, 2));
        right.load(&mut request);
        assert_eq!(
            (request.queue_id, request.queue_ids.len()),
            (2, 0),
            "one queue"
        );
        assert_eq!(request.messages.len(), 3);
        left.load(&mut request);
        assert_eq!(request.queue_ids, [0, 1]);
    }

    #[test]
    fn a_batch_stops_at_the_property_limit() {
        let with_properties = |bytes: usize| {
            let mut pending = pending(1);
            pending.message.properties = vec![b'p'; bytes].into();
            pending
        };
        let quarter = SEND_BATCH_PROPERTIES_BYTES_MAX / 4;
        let mut waiting: VecDeque<Pending> = (0..5).map(|_| with_properties(quarter)).collect();
        assert_eq!(take_batch(&mut waiting).len(), 4, "exactly the limit fits");
        assert_eq!(take_batch(&mut waiting).len(), 1);
    }

    #[test]
    fn a_batch_stops_at_the_count_limit() {
        let mut waiting: VecDeque<Pending> =
            (0..SEND_BATCH_COUNT_MAX + 1).map(|_| pending(1)).collect();
        assert_eq!(take_batch(&mut waiting).len(), SEND_BATCH_COUNT_MAX);
        assert_eq!(take_batch(&mut waiting).len(), 1);
        assert!(take_batch(&mut waiting).is_empty());
    }

    #[test]
    fn a_batch_stops_at_the_byte_limit_but_always_takes_one() {
        let half = SEND_BATCH_BODY_BYTES_MAX / 2;
        let mut waiting: VecDeque<Pending> = [half, half, 1, SEND_BATCH_BODY_BYTES_MAX + 1]
            .into_iter()
            .map(pending)
            .collect();
        assert_eq!(take_batch(&mut waiting).len(), 2, "exactly the limit fits");
        assert_eq!(take_batch(&mut waiting).len(), 1, "the next would pass it");
        assert_eq!(
            take_batch(&mut waiting).len(),
            1,
            "an oversized message goes alone, for the broker to refuse"
        );
    }
}
