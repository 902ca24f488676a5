//! Rebalance: which queues this client consumes, and starting and stopping their pull
//! loops. Runs at start, every `rebalance_interval`, and at once when a membership watch
//! reports a change.
//!
//! Clustering: the queues of each subscribed topic are shared among the group's live
//! members by [`allocate_averagely`]; broadcasting: every client takes every queue. A queue
//! that moves away is dropped and its offset committed before it is released; a queue
//! that arrives starts at its committed offset, or where `consume_from` says for a group
//! that never committed one. A round that cannot see a topic's route or members keeps
//! that topic's current queues and tries again next round.
//!
//! Orderly clustering consumers lock each queue on its broker group's leader before they
//! start it (a queue another member still holds is tried again next round) and unlock it
//! after its last batch when it moves away; a queue whose lock was lost is started afresh
//! from the committed offset ([`queue_lock`](crate::consumer::queue_lock)).

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use rocketraft_domain::limits::LOCK_QUEUES_MAX;
use rocketraft_proto::broker as pb;
use tokio::time::Instant;

use crate::consumer::ConsumeFrom;
use crate::consumer::ConsumerError;
use crate::consumer::MessageModel;
use crate::consumer::Shared;
use crate::consumer::allocate::allocate_averagely;
use crate::consumer::consume_from;
use crate::consumer::consume_orderly::run_orderly_queue;
use crate::consumer::listener::Listener;
use crate::consumer::member_view::MemberView;
use crate::consumer::member_view::Source;
use crate::consumer::membership::run_membership_watch;
use crate::consumer::process_queue::ProcessQueue;
use crate::consumer::pull_loop::run_pull_loop;
use crate::consumer::queue_lock;
use crate::route::MessageQueue;
use crate::route::RouteError;
use crate::route::TopicRoute;

/// How long a released orderly queue waits for its batch in progress before it is
/// released without unlocking (RocketMQ: 1 s).
const ORDERLY_RELEASE_WAIT: Duration = Duration::from_secs(1);
/// How long one admin call of a rebalance (members, offsets) may take, retries included.
const REBALANCE_CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// The next round after one that could not place every topic (no route yet, not yet a
/// registered member, a queue that could not start) comes this soon, not a whole interval
/// later.
const INCOMPLETE_ROUND_RETRY: Duration = Duration::from_secs(1);

/// The queues this client holds, and the broker groups whose membership it watches.
#[derive(Default)]
pub struct Assignment {
    pub queues: HashMap<MessageQueue, Arc<ProcessQueue>>,
    watched_groups: HashSet<String>,
    /// Per subscribed topic, the member list its rounds allocate among.
    member_views: HashMap<String, MemberView>,
    /// Orderly: per queue, the lock its batches are consumed under, shared by every
    /// generation of its buffer.
    consume_locks: HashMap<MessageQueue, Arc<tokio::sync::Mutex<()>>>,
    /// Orderly: queues that moved away while a batch still ran: their locks are renewed
    /// until the batch ends, then they are unlocked.
    pub releasing: HashMap<MessageQueue, Arc<ProcessQueue>>,
}

pub async fn run_rebalance_loop(shared: Arc<Shared>, mut assignment: Assignment) -> Assignment {
    loop {
        let complete = rebalance(&shared, &mut assignment).await;
        let next = next_round(
            complete,
            shared.config.rebalance_interval,
            &shared.rebalance_now,
            &shared.shutdown,
        );
        if next.await == NextRound::Shutdown {
            return assignment;
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum NextRound {
    Due,
    Shutdown,
}

/// Waits for the next round: `interval` after a `complete` round, at most
/// [`INCOMPLETE_ROUND_RETRY`] after one that was not, at once when a membership watch asks
/// for one (`rebalance_now`).
async fn next_round(
    complete: bool,
    interval: Duration,
    rebalance_now: &tokio::sync::Notify,
    shutdown: &tokio_util::sync::CancellationToken,
) -> NextRound {
    let wait = if complete {
        interval
    } else {
        interval.min(INCOMPLETE_ROUND_RETRY)
    };
    tokio::select! {
        () = shutdown.cancelled() => NextRound::Shutdown,
        () = tokio::time::sleep(wait) => NextRound::Due,
        () = rebalance_now.notified() => NextRound::Due,
    }
}

/// One round; false if some topic could not be placed and the round should come again soon.
async fn rebalance(shared: &Arc<Shared>, assignment: &mut Assignment) -> bool {
    let mut complete = true;
    for topic in shared.config.subscriptions.keys() {
        let route = match shared.brokers.route(topic).await {
            Ok(route) => route,
            // A group's retry topic exists only once a message was handed back.
            Err(RouteError::NoRoute { .. }) if *topic == shared.retry_topic() => continue,
            Err(error) => {
                tracing::warn!(topic, %error, "rebalance: no route; keeping current queues");
                complete = false;
                continue;
            }
        };
        watch_new_groups(shared, assignment, &route);
        let all = route.read_queues();
        let mine = match shared.config.message_model {
            MessageModel::Broadcasting => all,
            MessageModel::Clustering => match members(shared, &route).await {
                Ok((listed, source)) => {
                    let view = assignment.member_views.entry(topic.clone()).or_default();
                    let (members, settling) = view.update(source, listed, Instant::now());
                    complete &= !settling;
                    if !members.contains(&shared.client_id) {
                        tracing::debug!(topic, "rebalance: not yet a registered member");
                        complete = false;
                        continue;
                    }
                    allocate_averagely(&all, &members, &shared.client_id)
                }
                Err(error) => {
                    tracing::warn!(topic, %error, "rebalance: no member list; keeping current queues");
                    complete = false;
                    continue;
                }
            },
        };
        complete &= update_topic(shared, assignment, topic, mine.into_iter().collect()).await;
    }
    let mut assigned: Vec<(MessageQueue, Arc<ProcessQueue>)> = assignment
        .queues
        .iter()
        .map(|(queue, process)| (queue.clone(), process.clone()))
        .collect();
    assigned.sort_by(|(a, _), (b, _)| a.cmp(b));
    let releasing = assignment
        .releasing
        .iter()
        .map(|(queue, process)| (queue.clone(), process.clone()))
        .collect();
    *shared
        .releasing
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = releasing;
    complete &= assignment.releasing.is_empty();
    *shared
        .assigned
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = assigned;
    complete
}

fn watch_new_groups(shared: &Arc<Shared>, assignment: &mut Assignment, route: &TopicRoute) {
    for group in &route.groups {
        if assignment.watched_groups.insert(group.group.clone()) {
            tokio::spawn(run_membership_watch(shared.clone(), group.group.clone()));
        }
    }
}

/// The client ids of this consumer group, from the first broker group that answers, and
/// which leader answered.
async fn members(
    shared: &Shared,
    route: &TopicRoute,
) -> Result<(Vec<String>, Source), ConsumerError> {
    let request = pb::ListConsumersRequest {
        group: shared.config.group.clone(),
    };
    let mut last_error = None;
    for group in &route.groups {
        let listed = shared
            .brokers
            .on_leader(
                &group.group,
                REBALANCE_CALL_TIMEOUT,
                |mut client, _repeat| {
                    let request = request.clone();
                    async move { Ok(client.list_consumers(request).await?.into_inner()) }
                },
            )
            .await;
        match listed {
            Ok(listed) => {
                let source = (
                    group.group.clone(),
                    shared.brokers.known_leader(&group.group),
                );
                let members = listed
                    .members
                    .into_iter()
                    .map(|member| member.client_id)
                    .collect();
                return Ok((members, source));
            }
            Err(error) => last_error = Some(ConsumerError::from(error)),
        }
    }
    Err(last_error.unwrap_or(ConsumerError::NoBrokerGroup {
        topic: route.topic.clone(),
    }))
}

/// Releases the queues of `topic` not `wanted` and starts the new ones; false if one could
/// not start.
async fn update_topic(
    shared: &Arc<Shared>,
    assignment: &mut Assignment,
    topic: &str,
    wanted: BTreeSet<MessageQueue>,
) -> bool {
    // Dropped outside a rebalance: the queue's lock was lost. Its progress may be behind
    // another member's, so it is neither committed nor unlocked.
    assignment.queues.retain(|queue, process| {
        let lost = queue.topic == topic && process.is_dropped();
        if lost {
            shared.offsets.forget(queue);
        }
        !lost
    });
    let released: Vec<MessageQueue> = assignment
        .queues
        .keys()
        .filter(|queue| queue.topic == topic && !wanted.contains(*queue))
        .cloned()
        .collect();
    for queue in released {
        if let Some(process) = assignment.queues.remove(&queue)
            && !release(shared, &queue, &process).await
        {
            assignment.releasing.insert(queue, process);
        }
    }
    finish_releases(shared, assignment, topic, &wanted).await;
    let new: Vec<MessageQueue> = wanted
        .into_iter()
        .filter(|queue| !assignment.queues.contains_key(queue))
        .collect();
    let (startable, mut complete) = lock_new(shared, new).await;
    for (queue, lock_valid_until) in startable {
        let offset = match start_offset(shared, &queue).await {
            Ok(offset) => offset,
            Err(error) => {
                tracing::warn!(%queue, %error, "cannot start the queue; trying next rebalance");
                if lock_valid_until.is_some() {
                    // Not consumed: free for whichever member the next rebalance gives it.
                    unlock(shared, &queue, None).await;
                }
                complete = false;
                continue;
            }
        };
        tracing::info!(%queue, offset, "queue assigned");
        shared.offsets.track(&queue, offset);
        let consuming = assignment.consume_locks.entry(queue.clone()).or_default();
        let process = Arc::new(ProcessQueue::new(offset, consuming.clone()));
        if let Some(until) = lock_valid_until {
            process.lock_granted(until);
        }
        if let Listener::Orderly(listener) = &shared.listener {
            shared.consume_tasks.spawn(run_orderly_queue(
                shared.clone(),
                listener.clone(),
                queue.clone(),
                process.clone(),
            ));
        }
        let subscription = shared.config.subscriptions[topic].clone();
        tokio::spawn(run_pull_loop(
            shared.clone(),
            queue.clone(),
            process.clone(),
            subscription,
        ));
        assignment.queues.insert(queue, process);
    }
    complete
}

/// Of the `new` queues, those this client may start now, with how long its lock on each is
/// valid (`None`: it takes no locks); false if some must wait for their lock.
async fn lock_new(
    shared: &Shared,
    new: Vec<MessageQueue>,
) -> (Vec<(MessageQueue, Option<Instant>)>, bool) {
    if !shared.holds_locks() {
        return (new.into_iter().map(|queue| (queue, None)).collect(), true);
    }
    let mut by_group: BTreeMap<String, Vec<MessageQueue>> = BTreeMap::new();
    for queue in new {
        by_group.entry(queue.group.clone()).or_default().push(queue);
    }
    let mut startable = Vec::new();
    let mut complete = true;
    let mut requests: Vec<(&str, &[MessageQueue])> = Vec::new();
    for (group, queues) in &by_group {
        for chunk in queues.chunks(LOCK_QUEUES_MAX) {
            requests.push((group, chunk));
        }
    }
    for (group, queues) in requests {
        match queue_lock::lock(shared, group, queues, &[]).await {
            Ok(granted) => {
                complete &= granted.queues.len() == queues.len();
                for queue in queues {
                    if !granted.queues.contains(queue) {
                        tracing::debug!(%queue, "queue still locked by another member; trying next round");
                    }
                }
                startable.extend(
                    granted
                        .queues
                        .into_iter()
                        .map(|queue| (queue, Some(granted.valid_until))),
                );
            }
            Err(error) => {
                tracing::warn!(group, %error, "cannot lock queues; trying next round");
                complete = false;
            }
        }
    }
    (startable, complete)
}

/// Stops a queue that moved away and commits its offset; an orderly consumer unlocks it
/// once its last batch is done and its offset committed. False if a batch still runs after
/// [`ORDERLY_RELEASE_WAIT`]: the queue then stays locked (and renewed) until it ends, so
/// the new owner never consumes alongside it ([`finish_releases`]).
async fn release(shared: &Shared, queue: &MessageQueue, process: &ProcessQueue) -> bool {
    process.drop_queue();
    if !shared.holds_locks() {
        commit_released(shared, queue, process).await;
        return true;
    }
    let Ok(_idle) = tokio::time::timeout(ORDERLY_RELEASE_WAIT, process.consuming.lock()).await
    else {
        tracing::info!(%queue, "released queue still consuming a batch; unlocking it after");
        return false;
    };
    if commit_released(shared, queue, process).await {
        unlock(shared, queue, Some(process)).await;
    }
    true
}

/// Unlocks the releasing queues of `topic` whose last batch ended; one wanted again is
/// simply restarted by this round (this client still holds its lock).
async fn finish_releases(
    shared: &Shared,
    assignment: &mut Assignment,
    topic: &str,
    wanted: &BTreeSet<MessageQueue>,
) {
    let queues: Vec<MessageQueue> = assignment
        .releasing
        .keys()
        .filter(|queue| queue.topic == topic)
        .cloned()
        .collect();
    for queue in queues {
        if wanted.contains(&queue) {
            assignment.releasing.remove(&queue);
            continue;
        }
        let Some(process) = assignment.releasing.get(&queue).cloned() else {
            continue;
        };
        let Ok(_idle) = process.consuming.try_lock() else {
            continue;
        };
        if commit_released(shared, &queue, &process).await {
            unlock(shared, &queue, Some(&process)).await;
        }
        assignment.releasing.remove(&queue);
    }
}

/// Commits a released queue's offset and stops tracking it; false if the commit failed
/// (its lock is then left to expire: the next owner must not start from an older offset).
async fn commit_released(shared: &Shared, queue: &MessageQueue, process: &ProcessQueue) -> bool {
    let offset = process.commit_offset();
    match shared.offsets.release(&shared.brokers, queue, offset).await {
        Ok(()) => {
            tracing::info!(%queue, offset, "queue released");
            true
        }
        Err(error) => {
            tracing::warn!(%queue, offset, %error, "queue released without committing its offset");
            false
        }
    }
}

async fn unlock(shared: &Shared, queue: &MessageQueue, process: Option<&ProcessQueue>) {
    if let Err(error) = queue_lock::unlock(shared, queue, process).await {
        tracing::warn!(%queue, %error, "queue lock not released; it expires");
    }
}

/// The committed offset of `queue`, or for a group that has none, where `consume_from` says.
async fn start_offset(shared: &Shared, queue: &MessageQueue) -> Result<i64, ConsumerError> {
    if let Some(offset) = shared
        .offsets
        .read_committed(&shared.brokers, queue)
        .await?
    {
        return Ok(offset);
    }
    // A retry topic holds only messages the group must still consume: from its start.
    let from = if queue.topic == shared.retry_topic() {
        ConsumeFrom::First
    } else {
        shared.config.consume_from
    };
    shared
        .brokers
        .on_leader(
            &queue.group,
            REBALANCE_CALL_TIMEOUT,
            |mut client, _repeat| async move {
                consume_from::start_offset(&mut client, &queue.topic, queue.queue_id, from).await
            },
        )
        .await
        .map_err(ConsumerError::from)
}

#[cfg(test)]
mod tests {
    use tokio::sync::Notify;
    use tokio::time::Instant;
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// How long `next_round` waits, on tokio's paused clock.
    async fn waited(
        complete: bool,
        interval: Duration,
        rebalance_now: &Notify,
        shutdown: &CancellationToken,
    ) -> (NextRound, Duration) {
        let started = Instant::now();
        let next = next_round(complete, interval, rebalance_now, shutdown).await;
        (next, started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn rounds_come_every_interval_and_sooner_after_an_incomplete_one() {
        let (now, shutdown) = (Notify::new(), CancellationToken::new());
        let interval = Duration::from_secs(20);

        assert_eq!(
            waited(true, interval, &now, &shutdown).await,
            (NextRound::Due, interval)
        );
        assert_eq!(
            waited(false, interval, &now, &shutdown).await,
            (NextRound::Due, INCOMPLETE_ROUND_RETRY)
        );
        let short = Duration::from_millis(300);
        assert_eq!(
            waited(false, short, &now, &shutdown).await,
            (NextRound::Due, short),
            "never later than the interval"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_membership_change_brings_the_round_forward_and_shutdown_ends_the_wait() {
        let (now, shutdown) = (Notify::new(), CancellationToken::new());
        let interval = Duration::from_secs(20);

        // A change reported while the last round ran is not lost.
        now.notify_one();
        assert_eq!(
            waited(true, interval, &now, &shutdown).await,
            (NextRound::Due, Duration::ZERO)
        );
        shutdown.cancel();
        assert_eq!(
            waited(true, interval, &now, &shutdown).await,
            (NextRound::Shutdown, Duration::ZERO)
        );
    }
}
