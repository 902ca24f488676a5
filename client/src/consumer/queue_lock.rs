//! An orderly consumer's locks on its queues (RocketMQ's `RebalanceImpl.lock/lockAll`): a
//! queue is consumed in order only by the member of the group that holds its lock on the
//! leader of the queue's broker group.
//!
//! - A rebalance locks a queue before it starts consuming it and unlocks it after its last
//!   batch when the queue moves away ([`lock`], [`unlock`]).
//! - [`run_lock_renewal`] renews every held lock every `lock_renew_interval` (at most two
//!   thirds of how long the broker says a grant stays valid). A grant is valid for the
//!   `valid_ms` the broker answered, counted from when the request was sent.
//! - A queue the broker no longer grants (another member holds it), or whose validity
//!   lapsed before the renewal came through (another member may have consumed it
//!   meanwhile), is dropped and the rebalance starts it again from the group's committed
//!   offset once it is locked again. A renewal that fails (no leader, no answer) changes
//!   nothing: the queue pauses when its validity ends.
//! - A renewal and an unlock never overlap (`Shared::lock_calls`): a renewal that read its
//!   queues before an unlock would otherwise lock the unlocked queue again, and keep it from
//!   its next owner until the lock expires.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rocketraft_domain::limits::LOCK_QUEUES_MAX;
use rocketraft_proto::broker as pb;
use tokio::time::Instant;

use crate::consumer::ConsumerError;
use crate::consumer::Shared;
use crate::consumer::process_queue::ProcessQueue;
use crate::route::MessageQueue;

/// How long one lock or unlock call may take, retries included.
const LOCK_CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// The next renewal after one that failed (or before the broker said how long a grant is
/// valid) comes this soon, not a whole interval later.
const RENEW_RETRY: Duration = Duration::from_secs(1);

/// What a lock call got.
pub struct Granted {
    /// The queues of the call this client holds now.
    pub queues: Vec<MessageQueue>,
    /// Until when it may consume them.
    pub valid_until: Instant,
}

/// Asks `group`'s leader for `wanted` (all queues of that broker group), of which this client
/// holds `held` already.
pub async fn lock(
    shared: &Shared,
    group: &str,
    wanted: &[MessageQueue],
    held: &[MessageQueue],
) -> Result<Granted, ConsumerError> {
    let refs = |queues: &[MessageQueue]| -> Vec<pb::QueueRef> {
        queues
            .iter()
            .map(|queue| pb::QueueRef {
                topic: queue.topic.clone(),
                queue_id: queue.queue_id,
            })
            .collect()
    };
    let request = pb::LockQueuesRequest {
        group: shared.config.group.clone(),
        client_id: shared.client_id.clone(),
        queues: refs(wanted),
        held: refs(held),
    };
    let sent_at = Instant::now();
    let response = shared
        .brokers
        .on_leader(group, LOCK_CALL_TIMEOUT, |mut client, _repeat| {
            let request = request.clone();
            async move { Ok(client.lock_queues(request).await?.into_inner()) }
        })
        .await?;
    shared.set_group_max_reconsume_times(group, response.max_reconsume_times);
    shared
        .lock_valid_ms
        .store(response.valid_ms, Ordering::Relaxed);
    let queues = wanted
        .iter()
        .filter(|queue| {
            response
                .locked
                .iter()
                .any(|locked| locked.topic == queue.topic && locked.queue_id == queue.queue_id)
        })
        .cloned()
        .collect();
    Ok(Granted {
        queues,
        valid_until: sent_at + Duration::from_millis(response.valid_ms),
    })
}

/// Releases this client's lock on `queue`, whose buffer `process` (if it has one) then
/// neither consumes nor renews it.
pub async fn unlock(
    shared: &Shared,
    queue: &MessageQueue,
    process: Option<&ProcessQueue>,
) -> Result<(), ConsumerError> {
    let _no_renewal_meanwhile = shared.lock_calls.lock().await;
    if let Some(process) = process {
        process.lock_released();
    }
    let request = pb::UnlockQueuesRequest {
        group: shared.config.group.clone(),
        client_id: shared.client_id.clone(),
        queues: vec![pb::QueueRef {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
        }],
    };
    shared
        .brokers
        .on_leader(&queue.group, LOCK_CALL_TIMEOUT, |mut client, _repeat| {
            let request = request.clone();
            async move { client.unlock_queues(request).await.map(|_| ()) }
        })
        .await?;
    Ok(())
}

/// Renews the locks of the assigned queues until the consumer shuts down.
pub async fn run_lock_renewal(shared: Arc<Shared>) {
    let mut renewed = false;
    loop {
        let valid = Duration::from_millis(shared.lock_valid_ms.load(Ordering::Relaxed));
        let every = if valid.is_zero() || !renewed {
            shared.config.lock_renew_interval.min(RENEW_RETRY)
        } else {
            shared.config.lock_renew_interval.min(valid * 2 / 3)
        };
        tokio::select! {
            () = shared.shutdown.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        renewed = renew_all(&shared).await;
    }
}

/// Renews every broker group's locks, the groups concurrently: a group without a leader
/// must not hold up the others' renewals. False if some group's renewal failed.
async fn renew_all(shared: &Shared) -> bool {
    let _no_unlock_meanwhile = shared.lock_calls.lock().await;
    let locked = shared.locked_processes();
    let mut by_group: BTreeMap<&str, Vec<(&MessageQueue, &Arc<ProcessQueue>)>> = BTreeMap::new();
    for (queue, process) in &locked {
        by_group
            .entry(queue.group.as_str())
            .or_default()
            .push((queue, process));
    }
    let renewals = by_group
        .into_iter()
        .map(|(group, queues)| renew_group(shared, group, queues));
    let outcomes: Vec<Renewal> = futures::future::join_all(renewals)
        .await
        .into_iter()
        .flatten()
        .collect();
    if outcomes.contains(&Renewal::Lost) {
        shared.rebalance_now.notify_one();
    }
    !outcomes.contains(&Renewal::Failed)
}

#[derive(Debug, PartialEq, Eq)]
enum Renewal {
    Kept,
    /// Some queue was not granted or had lapsed.
    Lost,
    /// The call failed: nothing is known.
    Failed,
}

/// Renews this client's locks on `queues` of `group`, in requests of at most
/// [`LOCK_QUEUES_MAX`] queues; one outcome per request.
async fn renew_group(
    shared: &Shared,
    group: &str,
    queues: Vec<(&MessageQueue, &Arc<ProcessQueue>)>,
) -> Vec<Renewal> {
    let mut outcomes = Vec::new();
    for chunk in queues.chunks(LOCK_QUEUES_MAX) {
        outcomes.push(renew_chunk(shared, group, chunk).await);
    }
    outcomes
}

async fn renew_chunk(
    shared: &Shared,
    group: &str,
    queues: &[(&MessageQueue, &Arc<ProcessQueue>)],
) -> Renewal {
    let wanted: Vec<MessageQueue> = queues.iter().map(|(queue, _)| (*queue).clone()).collect();
    let now = Instant::now();
    // Only a lock still valid is claimed as held: a new leader grants held queues alone for
    // a while, and one whose validity lapsed may be another member's by now.
    let held: Vec<MessageQueue> = queues
        .iter()
        .filter(|(_, process)| process.lock_valid(now))
        .map(|(queue, _)| (*queue).clone())
        .collect();
    let granted = match lock(shared, group, &wanted, &held).await {
        Ok(granted) => granted,
        Err(error) => {
            tracing::warn!(group, %error, "renewing queue locks failed; trying again in a second");
            return Renewal::Failed;
        }
    };
    let mut outcome = Renewal::Kept;
    for (queue, process) in queues.iter().copied() {
        let kept = granted.queues.contains(queue);
        if kept && !process.lock_lapsed(Instant::now()) {
            process.lock_granted(granted.valid_until);
        } else {
            tracing::warn!(
                %queue,
                kept,
                "queue lock lost or lapsed; the queue restarts from its committed offset once locked again"
            );
            process.drop_queue();
            // Its progress may be behind the next owner's: never committed again.
            shared.offsets.forget(queue);
            outcome = Renewal::Lost;
        }
    }
    outcome
}
