//! Orderly consumption (RocketMQ's `ConsumeMessageOrderlyService`): each queue's messages go
//! to the listener one batch at a time, in queue order, and only while this client holds
//! the queue's lock ([`queue_lock`](crate::consumer::queue_lock)); different queues are
//! consumed concurrently, at most `consume_concurrency` at once.
//!
//! A consumed batch leaves the buffer and moves the offset. A suspended batch
//! (`SuspendCurrentQueueAMoment`, a panic or the consume timeout) stays first in line and
//! comes again after the suspend time, its messages' reconsume counts one higher. A message
//! already consumed `max_reconsume_times` more times than once is moved to `%DLQ%<group>`
//! instead, so one poisonous message cannot stop its queue forever (RocketMQ's orderly
//! consumer retries it forever unless its maximum is set); if that move fails it stays and
//! is tried again. Broadcasting consumers retry locally without limit. A queue that is
//! dropped ends its loop; a batch the listener is still consuming then finishes and its
//! outcome moves the offset if the queue was released (it is committed before the unlock),
//! not if its lock was lost (its offset is no longer tracked).

use std::sync::Arc;

use std::time::Duration;

use tokio::time::Instant;

use crate::consumer::MessageModel;
use crate::consumer::Shared;
use crate::consumer::consume::call_bounded;
use crate::consumer::listener::ConsumeOrderlyContext;
use crate::consumer::listener::ConsumeOrderlyResult;
use crate::consumer::listener::MessageListenerOrderly;
use crate::consumer::process_queue::ProcessQueue;
use crate::consumer::send_back::hand_back;
use crate::message::MessageExt;
use crate::route::MessageQueue;

/// How often a queue whose lock is not valid checks again.
const LOCK_WAIT_PAUSE: Duration = Duration::from_millis(100);
/// The delay level that sends a handed-back message straight to the dead-letter topic.
const DEAD_LETTER_LEVEL: i32 = -1;

/// Consumes `queue` in order until it is dropped or the consumer shuts down.
pub async fn run_orderly_queue(
    shared: Arc<Shared>,
    listener: Arc<dyn MessageListenerOrderly>,
    queue: MessageQueue,
    process: Arc<ProcessQueue>,
) {
    let locked = shared.holds_locks();
    loop {
        tokio::select! {
            () = process.ready_arrived() => {}
            () = process.dropped() => return,
            () = shared.shutdown.cancelled() => return,
        }
        if locked && !process.lock_valid(Instant::now()) {
            shared.pause(&process, LOCK_WAIT_PAUSE).await;
            continue;
        }
        let suspend = consume_next_batch(&shared, &listener, &queue, &process).await;
        if let Some(suspend) = suspend {
            shared.pause(&process, suspend).await;
        }
    }
}

/// Consumes the first waiting batch; returns how long the queue pauses if it was suspended.
async fn consume_next_batch(
    shared: &Shared,
    listener: &Arc<dyn MessageListenerOrderly>,
    queue: &MessageQueue,
    process: &ProcessQueue,
) -> Option<Duration> {
    let _permit = shared.consume_permits.acquire().await.ok()?;
    let _consuming = process.consuming.lock().await;
    // Checked again after the waits: the lock may have lapsed meanwhile.
    let locked = shared.holds_locks();
    if process.is_dropped()
        || shared.shutdown.is_cancelled()
        || (locked && !process.lock_valid(Instant::now()))
    {
        return None;
    }
    let batch = process.peek_ready(shared.config.consume_batch_max_size.max(1));
    if batch.is_empty() {
        return None;
    }
    let context =
        ConsumeOrderlyContext::new(queue.clone(), shared.config.suspend_current_queue_time);
    let call = listener.consume(batch.clone(), context.clone());
    let failed = ConsumeOrderlyResult::SuspendCurrentQueueAMoment;
    let result = call_bounded(shared, queue, call, failed).await;
    // The outcome counts even if the queue was dropped meanwhile: a queue released during
    // the batch is still locked by this client until its offset is committed, and the
    // offset of one whose lock was lost is no longer tracked, so moving it changes nothing.
    match result {
        ConsumeOrderlyResult::Success => {
            shared.offsets.update(queue, process.pop_ready(batch.len()));
            None
        }
        ConsumeOrderlyResult::SuspendCurrentQueueAMoment => {
            let dead = dead_letter(shared, queue, process, &batch).await;
            let offset = process.dead_letter_and_retry(&dead, batch.len() - dead.len());
            shared.offsets.update(queue, offset);
            (dead.len() < batch.len() && !process.is_dropped())
                .then(|| context.suspend_current_queue_time())
        }
    }
}

/// Moves the messages of a suspended batch that reached the maximum reconsume count to the
/// dead-letter topic; returns the queue offsets of those moved.
async fn dead_letter(
    shared: &Shared,
    queue: &MessageQueue,
    process: &ProcessQueue,
    batch: &[MessageExt],
) -> Vec<i64> {
    if shared.config.message_model == MessageModel::Broadcasting || process.is_dropped() {
        return Vec::new();
    }
    let max = shared
        .config
        .max_reconsume_times
        .unwrap_or_else(|| shared.group_max_reconsume_times(&queue.group)) as i32;
    let mut moved = Vec::new();
    for message in batch
        .iter()
        .filter(|message| message.reconsume_times >= max)
    {
        if hand_back(shared, message, DEAD_LETTER_LEVEL).await {
            tracing::warn!(
                msg_id = message.msg_id,
                queue_offset = message.queue_offset,
                reconsume_times = message.reconsume_times,
                "orderly message failed too often; moved to the dead-letter topic"
            );
            moved.push(message.queue_offset);
        }
    }
    moved
}
