//! `PopTurns`: pops of one queue for one group take turns on the leader (a pop plans from
//! the replicated state, so two planned at once would conflict and one would be wasted).
//!
//! Invariants: the map holds a queue's lock only while a pop holds or waits for it (the last
//! one out removes it), so its size is bounded by the pops in progress, not by every queue
//! ever popped; two pops of one queue never hold the turn at once.

use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::Mutex;
use tokio::sync::OwnedMutexGuard;

use crate::pop::state::PopQueueKey;

#[derive(Default)]
pub struct PopTurns {
    locks: DashMap<PopQueueKey, Arc<Mutex<()>>>,
}

/// A queue's turn; the next pop of the queue gets it once this is dropped.
pub struct PopTurn<'a> {
    turns: &'a PopTurns,
    key: PopQueueKey,
    held: Option<OwnedMutexGuard<()>>,
}

impl PopTurns {
    /// Waits for `key`'s turn.
    pub async fn take(&self, key: &PopQueueKey) -> PopTurn<'_> {
        let lock = self.locks.entry(key.clone()).or_default().clone();
        PopTurn {
            turns: self,
            key: key.clone(),
            held: Some(lock.lock_owned().await),
        }
    }
}

impl Drop for PopTurn<'_> {
    fn drop(&mut self) {
        // Release the lock (and this turn's reference to it) first: only the map's own
        // reference left means nobody holds or waits, and a pop arriving now gets a new lock.
        drop(self.held.take());
        self.turns
            .locks
            .remove_if(&self.key, |_, lock| Arc::strong_count(lock) == 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(queue_id: i32) -> PopQueueKey {
        PopQueueKey {
            group: "g".into(),
            topic: "t".into(),
            queue_id,
        }
    }

    #[tokio::test]
    async fn a_queue_is_forgotten_once_no_pop_holds_or_waits_for_it() {
        let turns = PopTurns::default();
        let first = turns.take(&key(0)).await;
        let other_queue = turns.take(&key(1)).await;
        assert_eq!(turns.locks.len(), 2);
        drop(other_queue);
        assert_eq!(turns.locks.len(), 1);

        let queue = key(0);
        let mut waiting = Box::pin(turns.take(&queue));
        assert!(
            futures::poll!(waiting.as_mut()).is_pending(),
            "one turn at a time"
        );
        drop(first);
        assert_eq!(turns.locks.len(), 1, "a pop still waits for the queue");
        let second = waiting.await;
        drop(second);
        assert_eq!(turns.locks.len(), 0);
    }
}
