//! `QueueLocks`: the leader's locks on queues for orderly consumption (RocketMQ's
//! `RebalanceLockManager`). A member of a consumer group that consumes a queue in order holds
//! its lock, renews it every third of [`QUEUE_LOCK_EXPIRY_DEFAULT`], and another member gets
//! it only once it is released or has expired.
//!
//! The table is not replicated: it lives in the leader's memory and a new leader starts
//! empty, rebuilt from the members' renewals. Invariant, which keeps two members from
//! consuming one queue at once across a leader change: for half the expiry after this node
//! starts leading (its grace period), a lock is granted only to a member that says it holds
//! it already (a renewal). A member consumes a queue only within half the expiry after its
//! last granted lock, so once the grace period ends, every member that held a lock under the
//! old leader has either renewed it here or stopped consuming.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use rocketraft_domain::clock::Clock;

use crate::raft::control::role::on_every_role_change;
use crate::raft::types::Raft;

/// How long a lock lasts without renewal (RocketMQ: 60 s).
pub const QUEUE_LOCK_EXPIRY_DEFAULT: Duration = Duration::from_secs(60);
pub use rocketraft_domain::limits::LOCK_QUEUES_MAX;

/// A queue of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueId {
    pub topic: String,
    pub queue_id: i32,
}

#[derive(Debug)]
struct Holder {
    client_id: String,
    renewed_at: Instant,
}

#[derive(Debug)]
pub struct QueueLocks {
    expiry: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// (consumer group, queue) -> who holds it.
    locks: HashMap<(String, QueueId), Holder>,
    /// When this node's role last changed: the grace period runs from there.
    role_changed_at: Option<Instant>,
}

impl QueueLocks {
    pub fn new(expiry: Duration) -> QueueLocks {
        QueueLocks {
            expiry,
            state: Mutex::default(),
        }
    }

    /// How long a member may consume a queue after its last granted lock (half the expiry).
    pub fn grace(&self) -> Duration {
        self.expiry / 2
    }

    /// Locks `wanted` for `client_id` of `group` where it may, renewing those it holds;
    /// `held` are the queues the client says it holds already. Returns the queues the client
    /// holds now, sorted.
    pub fn lock(
        &self,
        group: &str,
        client_id: &str,
        wanted: &[QueueId],
        held: &[QueueId],
        now: Instant,
    ) -> Vec<QueueId> {
        let mut state = self.lock_state();
        let in_grace = state
            .role_changed_at
            .is_some_and(|changed| now < changed + self.grace());
        let mut granted = Vec::new();
        for queue in wanted {
            let key = (group.to_owned(), queue.clone());
            let grant = match state.locks.get(&key) {
                Some(holder) if holder.client_id == client_id => true,
                Some(holder) if now < holder.renewed_at + self.expiry => false,
                _ => !in_grace || held.contains(queue),
            };
            if grant {
                state.locks.insert(
                    key,
                    Holder {
                        client_id: client_id.to_owned(),
                        renewed_at: now,
                    },
                );
                granted.push(queue.clone());
            }
        }
        granted.sort();
        granted.dedup();
        granted
    }

    /// Releases the locks `client_id` of `group` holds on `queues`.
    pub fn unlock(&self, group: &str, client_id: &str, queues: &[QueueId]) {
        let mut state = self.lock_state();
        for queue in queues {
            let key = (group.to_owned(), queue.clone());
            if state
                .locks
                .get(&key)
                .is_some_and(|holder| holder.client_id == client_id)
            {
                state.locks.remove(&key);
            }
        }
    }

    /// Forgets every lock and starts the grace period: this node's role changed.
    pub fn role_changed(&self, now: Instant) {
        let mut state = self.lock_state();
        state.locks.clear();
        state.role_changed_at = Some(now);
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Starts the grace period, on `clock`, at every change of this node's role; returns once
/// Raft has stopped.
pub async fn run_queue_locks(raft: Raft, locks: std::sync::Arc<QueueLocks>, clock: Clock) {
    on_every_role_change(raft, || locks.role_changed(clock.instant())).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPIRY: Duration = Duration::from_secs(60);

    fn queues(ids: &[i32]) -> Vec<QueueId> {
        ids.iter()
            .map(|id| QueueId {
                topic: "T".into(),
                queue_id: *id,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_has_one_holder_until_it_is_released_or_expires() {
        let locks = QueueLocks::new(EXPIRY);
        let t0 = Instant::now();
        assert_eq!(
            locks.lock("g", "c1", &queues(&[0, 1]), &[], t0),
            queues(&[0, 1])
        );
        assert_eq!(
            locks.lock("g", "c2", &queues(&[1, 2]), &[], t0),
            queues(&[2])
        );
        assert_eq!(
            locks.lock("other", "c2", &queues(&[1]), &[], t0),
            queues(&[1]),
            "groups lock apart"
        );
        locks.unlock("g", "c2", &queues(&[0]));
        locks.unlock("g", "c1", &queues(&[1]));
        assert_eq!(
            locks.lock("g", "c2", &queues(&[0, 1]), &[], t0),
            queues(&[1])
        );
        let renewed = t0 + EXPIRY / 2;
        assert_eq!(
            locks.lock("g", "c1", &queues(&[0]), &queues(&[0]), renewed),
            queues(&[0])
        );
        let just_before = renewed + EXPIRY - Duration::from_millis(1);
        assert!(
            locks
                .lock("g", "c2", &queues(&[0]), &[], just_before)
                .is_empty()
        );
        assert_eq!(
            locks.lock("g", "c2", &queues(&[0]), &[], renewed + EXPIRY),
            queues(&[0]),
            "expired"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_role_change_only_renewals_are_granted_until_the_grace_period_ends() {
        let locks = QueueLocks::new(EXPIRY);
        let t0 = Instant::now();
        locks.lock("g", "c1", &queues(&[0]), &[], t0);
        locks.role_changed(t0);
        assert!(
            locks.lock("g", "c2", &queues(&[0, 1]), &[], t0).is_empty(),
            "the old table is gone, but a holder may still consume: wait"
        );
        assert_eq!(
            locks.lock("g", "c1", &queues(&[0]), &queues(&[0]), t0),
            queues(&[0]),
            "a renewal is granted at once"
        );
        let graced = t0 + locks.grace();
        assert!(locks.lock("g", "c2", &queues(&[0]), &[], graced).is_empty());
        assert_eq!(
            locks.lock("g", "c2", &queues(&[1]), &[], graced),
            queues(&[1])
        );
    }
}
