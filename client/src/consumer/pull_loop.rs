//! The pull loop of one assigned queue: long-polling pulls from the group's leader, the
//! tag re-filter, flow control, and hand-over to the listener.
//!
//! Flow control: while the queue's buffer holds its maximum count or bytes, pulling pauses.
//! Errors pause with a growing backoff, so a leaderless group costs no busy loop. The loop
//! ends when the queue is dropped (rebalanced away) or the consumer shuts down.

use std::sync::Arc;
use std::time::Duration;

use rocketraft_proto::broker as pb;

use crate::consumer::Shared;
use crate::consumer::consume::submit;
use crate::consumer::process_queue::ProcessQueue;
use crate::message::MessageExt;
use crate::route::MessageQueue;
use crate::subscription::Subscription;

/// Pause while the queue's buffer is full.
const FLOW_CONTROL_PAUSE: Duration = Duration::from_millis(50);
/// Pause after a failed pull; doubles up to [`PULL_ERROR_PAUSE_MAX`].
const PULL_ERROR_PAUSE_MIN: Duration = Duration::from_millis(100);
const PULL_ERROR_PAUSE_MAX: Duration = Duration::from_secs(3);
/// A pull's own deadline is its hold time plus this.
const PULL_TIMEOUT_MARGIN: Duration = Duration::from_secs(5);

pub async fn run_pull_loop(
    shared: Arc<Shared>,
    queue: MessageQueue,
    process: Arc<ProcessQueue>,
    subscription: Subscription,
) {
    let config = &shared.config;
    let tags = subscription.tags();
    let sql = subscription.sql_text();
    let mut error_pause = PULL_ERROR_PAUSE_MIN;
    let mut flow_controlled = 0u64;
    loop {
        if process.is_dropped() || shared.shutdown.is_cancelled() {
            return;
        }
        if process.is_full(config.queue_buffer_count, config.queue_buffer_bytes) {
            flow_controlled += 1;
            if flow_controlled.is_power_of_two() {
                tracing::debug!(%queue, times = flow_controlled, "buffer full; pulling paused");
            }
            shared.pause(&process, FLOW_CONTROL_PAUSE).await;
            continue;
        }
        let request = pb::PullRequest {
            group: config.group.clone(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            queue_offset: process.next_offset(),
            max_messages: config.pull_batch_size,
            tags: tags.clone(),
            max_wait_ms: config.pull_hold.as_millis() as u32,
            sql: sql.clone(),
            stored_records: false,
        };
        let call_timeout = config.pull_hold + PULL_TIMEOUT_MARGIN;
        let pulled = tokio::select! {
            () = process.dropped() => return,
            () = shared.shutdown.cancelled() => return,
            pulled = shared.brokers.on_leader(&queue.group, call_timeout, |mut client, _repeat| {
                let mut request = tonic::Request::new(request.clone());
                request.set_timeout(call_timeout);
                async move { Ok(client.pull(request).await?.into_inner()) }
            }) => pulled,
        };
        match pulled {
            Ok(response) => {
                error_pause = PULL_ERROR_PAUSE_MIN;
                handle_response(&shared, &queue, &process, &subscription, response);
            }
            Err(error) => {
                tracing::warn!(%queue, %error, "pull failed; retrying");
                shared.pause(&process, error_pause).await;
                error_pause = (error_pause * 2).min(PULL_ERROR_PAUSE_MAX);
            }
        }
    }
}

fn handle_response(
    shared: &Arc<Shared>,
    queue: &MessageQueue,
    process: &Arc<ProcessQueue>,
    subscription: &Subscription,
    response: pb::PullResponse,
) {
    match pb::PullStatus::try_from(response.status) {
        Ok(pb::PullStatus::Found) => {
            // The broker filtered by tag hash (tags that share a hash are dropped here) or by
            // SQL92 (checked again).
            let messages: Vec<MessageExt> = response
                .messages
                .into_iter()
                .map(|message| MessageExt::from_pulled(message, &queue.group))
                .filter(|message| subscription.matches(message))
                .collect();
            process.put(&messages, response.next_offset);
            if messages.is_empty() {
                // Everything was filtered out: the offset may move past it.
                shared.offsets.update(queue, process.commit_offset());
            } else {
                submit(shared, queue, process, messages);
            }
        }
        Ok(pb::PullStatus::NoNewMessage | pb::PullStatus::NoMatchedMessage) => {
            process.put(&[], response.next_offset);
            shared.offsets.update(queue, process.commit_offset());
        }
        Ok(pb::PullStatus::OffsetIllegal) => {
            tracing::warn!(
                %queue,
                asked = process.next_offset(),
                corrected = response.next_offset,
                min = response.min_offset,
                max = response.max_offset,
                "pull offset out of range; moving to the nearest valid offset"
            );
            process.reset_next_offset(response.next_offset);
            shared.offsets.update(queue, process.commit_offset());
        }
        Err(_) => tracing::warn!(%queue, status = response.status, "unknown pull status"),
    }
}
