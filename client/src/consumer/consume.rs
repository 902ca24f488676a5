//! Consumption: pulled messages go to the listener in batches of at most
//! `consume_batch_max_size`, at most `consume_concurrency` batches at once.
//!
//! A batch the listener consumed leaves the queue's buffer and may move the queue's offset.
//! A batch it refused (`ReconsumeLater`), panicked on, or did not finish within the consume
//! timeout is handed back to the brokers message by message (clustering; see
//! [`send_back`](crate::consumer::send_back)): what was handed back leaves the buffer, what
//! was not stays, holding the offset back, and is offered to the listener again after a
//! pause. Broadcasting consumers retry locally only. Results for a queue that was
//! rebalanced away are ignored: its new owner consumes from the last committed offset (at
//! least once).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::consumer::MessageModel;
use crate::consumer::Shared;
use crate::consumer::listener::ConsumeContext;
use crate::consumer::listener::ConsumeResult;
use crate::consumer::listener::Listener;
use crate::consumer::listener::MessageListener;
use crate::consumer::process_queue::ProcessQueue;
use crate::consumer::send_back::hand_back;
use crate::message::MessageExt;
use crate::route::MessageQueue;

/// Pause before a refused batch is offered to the listener again.
pub const RECONSUME_PAUSE: Duration = Duration::from_secs(1);

/// Hands `messages` (already in the queue's buffer) to the listener: in batches to
/// concurrent tasks, or, for an orderly listener, to the queue's line
/// ([`run_orderly_queue`](crate::consumer::consume_orderly::run_orderly_queue)).
pub fn submit(
    shared: &Arc<Shared>,
    queue: &MessageQueue,
    process: &Arc<ProcessQueue>,
    messages: Vec<MessageExt>,
) {
    let listener = match &shared.listener {
        Listener::Concurrently(listener) => listener,
        Listener::Orderly(_) => return process.push_ready(messages),
    };
    let batch_size = shared.config.consume_batch_max_size.max(1);
    let mut messages = messages.into_iter().peekable();
    while messages.peek().is_some() {
        let batch: Vec<MessageExt> = messages.by_ref().take(batch_size).collect();
        shared.consume_tasks.spawn(consume_batch(
            shared.clone(),
            listener.clone(),
            queue.clone(),
            process.clone(),
            batch,
        ));
    }
}

async fn consume_batch(
    shared: Arc<Shared>,
    listener: Arc<dyn MessageListener>,
    queue: MessageQueue,
    process: Arc<ProcessQueue>,
    mut batch: Vec<MessageExt>,
) {
    loop {
        if process.is_dropped() || shared.shutdown.is_cancelled() {
            return;
        }
        let Ok(permit) = shared.consume_permits.clone().acquire_owned().await else {
            return;
        };
        let context = ConsumeContext::new(queue.clone());
        let call = listener.consume(batch.clone(), context.clone());
        let result = call_bounded(&shared, &queue, call, ConsumeResult::ReconsumeLater).await;
        drop(permit);
        let done: Vec<MessageExt> = match result {
            ConsumeResult::Success => std::mem::take(&mut batch),
            ConsumeResult::ReconsumeLater => {
                let (handed_back, kept) =
                    hand_back_all(&shared, batch, context.delay_level_when_next_consume()).await;
                batch = kept;
                handed_back
            }
        };
        let offsets: Vec<i64> = done.iter().map(|message| message.queue_offset).collect();
        let offset = process.remove(&offsets);
        if !process.is_dropped() {
            shared.offsets.update(&queue, offset);
        }
        if batch.is_empty() {
            return;
        }
        tracing::debug!(%queue, first = batch[0].queue_offset, "batch kept; consuming it again later");
        shared.pause(&process, RECONSUME_PAUSE).await;
    }
}

/// Hands each refused message back; returns (handed back, kept for a local retry).
async fn hand_back_all(
    shared: &Shared,
    batch: Vec<MessageExt>,
    delay_level: i32,
) -> (Vec<MessageExt>, Vec<MessageExt>) {
    if shared.config.message_model == MessageModel::Broadcasting {
        return (Vec::new(), batch);
    }
    let mut handed_back = Vec::new();
    let mut kept = Vec::new();
    for message in batch {
        if hand_back(shared, &message, delay_level).await {
            handed_back.push(message);
        } else {
            kept.push(message);
        }
    }
    (handed_back, kept)
}

/// Runs a listener call in its own task, so a panic is caught, bounded by the consume
/// timeout; a panic or a timeout counts as `failed`.
pub async fn call_bounded<R: Send + 'static>(
    shared: &Shared,
    queue: &MessageQueue,
    call: Pin<Box<dyn Future<Output = R> + Send>>,
    failed: R,
) -> R {
    let mut task = tokio::spawn(call);
    match tokio::time::timeout(shared.config.consume_timeout, &mut task).await {
        Ok(Ok(result)) => result,
        Ok(Err(error)) => {
            tracing::warn!(%queue, %error, "listener panicked; the batch will be consumed again");
            failed
        }
        Err(_) => {
            task.abort();
            tracing::warn!(
                %queue,
                timeout = ?shared.config.consume_timeout,
                "listener timed out; the batch will be consumed again"
            );
            failed
        }
    }
}
