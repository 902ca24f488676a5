//! Consumption: pulled messages go to the listener in batches of at most
//! `consume_batch_max_size`, at most `consume_concurrency` batches at once.
//!
//! A batch the listener consumed leaves the queue's buffer and may move the queue's offset.
//! A batch it refused (`ReconsumeLater`), panicked on, or did not finish within the consume
//! timeout stays in the buffer, holding the offset back, and is offered again after a pause.
//! Results for a queue that was rebalanced away are ignored: its new owner consumes from
//! the last committed offset (at least once).

use std::sync::Arc;
use std::time::Duration;

use crate::consumer::Shared;
use crate::consumer::listener::ConsumeContext;
use crate::consumer::listener::ConsumeResult;
use crate::consumer::process_queue::ProcessQueue;
use crate::message::MessageExt;
use crate::route::MessageQueue;

/// Pause before a refused batch is offered to the listener again.
pub const RECONSUME_PAUSE: Duration = Duration::from_secs(1);

/// Hands `messages` (already in the queue's buffer) to the listener.
pub fn submit(
    shared: &Arc<Shared>,
    queue: &MessageQueue,
    process: &Arc<ProcessQueue>,
    messages: Vec<MessageExt>,
) {
    let batch_size = shared.config.consume_batch_max_size.max(1);
    let mut messages = messages.into_iter().peekable();
    while messages.peek().is_some() {
        let batch: Vec<MessageExt> = messages.by_ref().take(batch_size).collect();
        shared.consume_tasks.spawn(consume_batch(
            shared.clone(),
            queue.clone(),
            process.clone(),
            batch,
        ));
    }
}

async fn consume_batch(
    shared: Arc<Shared>,
    queue: MessageQueue,
    process: Arc<ProcessQueue>,
    batch: Vec<MessageExt>,
) {
    let offsets: Vec<i64> = batch.iter().map(|message| message.queue_offset).collect();
    loop {
        if process.is_dropped() || shared.shutdown.is_cancelled() {
            return;
        }
        let Ok(permit) = shared.consume_permits.clone().acquire_owned().await else {
            return;
        };
        let context = ConsumeContext {
            message_queue: queue.clone(),
        };
        let result = call_listener(&shared, batch.clone(), context).await;
        drop(permit);
        match result {
            ConsumeResult::Success => {
                let offset = process.remove(&offsets);
                if !process.is_dropped() {
                    shared.offsets.update(&queue, offset);
                }
                return;
            }
            ConsumeResult::ReconsumeLater => {
                tracing::debug!(%queue, first = offsets[0], "batch refused; offering it again later");
                tokio::select! {
                    () = tokio::time::sleep(RECONSUME_PAUSE) => {}
                    () = process.dropped() => return,
                    () = shared.shutdown.cancelled() => return,
                }
            }
        }
    }
}

/// Runs the listener in its own task, so a panic is caught, bounded by the consume timeout.
async fn call_listener(
    shared: &Shared,
    batch: Vec<MessageExt>,
    context: ConsumeContext,
) -> ConsumeResult {
    let queue = context.message_queue.clone();
    let mut task = tokio::spawn(shared.listener.consume(batch, context));
    match tokio::time::timeout(shared.config.consume_timeout, &mut task).await {
        Ok(Ok(result)) => result,
        Ok(Err(error)) => {
            tracing::warn!(%queue, %error, "listener panicked; the batch will be consumed again");
            ConsumeResult::ReconsumeLater
        }
        Err(_) => {
            task.abort();
            tracing::warn!(
                %queue,
                timeout = ?shared.config.consume_timeout,
                "listener timed out; the batch will be consumed again"
            );
            ConsumeResult::ReconsumeLater
        }
    }
}
