//! Pop consumption's replicated state (RocketMQ 5.x's pop, what the 5.x endpoint's consumers
//! use): per consumer group and queue, the next offset never delivered and the messages in
//! flight (delivered, not acked), each invisible until a time, with its delivery attempt and
//! the receipt it was last delivered or changed with.
//!
//! Invariants:
//! - it changes only by applying committed commands in log order, with the time the leader
//!   stamped on them, so every node holds the same state and a failover loses no in-flight
//!   message and forgets no ack;
//! - a receipt is the log index of the command that last delivered the message or changed its
//!   invisibility: it names one delivery, and a stale one matches nothing;
//! - an ack or a change needs the current receipt and an invisibility not yet ended: once it
//!   ended, the message belongs to the next pop, with one more attempt;
//! - a queue holds at most [`POP_IN_FLIGHT_MAX`] messages in flight.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use serde::Deserialize;
use serde::Serialize;

/// Messages one group's queue has in flight at most; a pop finding it full delivers nothing
/// new until some are acked or revived.
pub const POP_IN_FLIGHT_MAX: usize = 4096;

/// One consumer group's view of one queue.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PopQueueKey {
    pub group: String,
    pub topic: String,
    pub queue_id: i32,
}

/// A message delivered and not acked yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    /// Delivered again by a pop at or after this time (ms since the epoch).
    pub invisible_until_ms: i64,
    /// Deliveries so far, this one included (1 for the first).
    pub attempt: u32,
    pub receipt: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PopQueue {
    /// The next queue offset no pop has passed yet.
    pub next_offset: i64,
    /// Queue offset -> the message in flight there.
    pub in_flight: BTreeMap<i64, InFlight>,
}

/// A pop as the leader proposes it (see [`crate::state_machine::command::Command::Pop`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pop {
    pub key: PopQueueKey,
    /// The queue's next offset the leader read from; the pop applies only if it still is.
    pub from_offset: i64,
    /// The queue's next offset after the pop: offsets in `from_offset..next_offset` not in
    /// `fresh` were passed over (filtered out).
    pub next_offset: i64,
    /// Offsets delivered for the first time.
    pub fresh: Vec<i64>,
    /// In-flight offsets whose invisibility ended by `now_ms`, delivered again.
    pub revived: Vec<i64>,
    /// In-flight offsets whose invisibility ended by `now_ms` after their last attempt:
    /// moved to the group's dead-letter topic (the entry carries their copies), no longer in
    /// flight. Also those retention deleted before they were acked (no copy).
    pub dead: Vec<i64>,
    pub now_ms: i64,
    pub invisible_until_ms: i64,
}

/// A change to one in-flight message (see [`crate::state_machine::command::Command::PopChange`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PopChange {
    pub queue_offset: i64,
    pub receipt: u64,
    /// `None`: acked (done with); `Some`: invisible until then instead.
    pub invisible_until_ms: Option<i64>,
}

/// What one [`PopChange`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PopChangeOutcome {
    /// Acked, or changed: the message's receipt is now this.
    Done { receipt: u64 },
    /// Nothing is in flight at that offset (acked already, or never delivered).
    NotInFlight,
    /// The message was delivered again since (another receipt is current).
    StaleReceipt,
    /// Its invisibility ended before the change: it waits for the next pop.
    Expired,
}

/// Pop consumption's state of a whole broker group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PopState {
    queues: BTreeMap<PopQueueKey, PopQueue>,
    /// Consumer groups that receive in order (FIFO): a queue delivers nothing new while
    /// messages of it are in flight to the group.
    orderly_groups: BTreeSet<String>,
}

impl PopState {
    pub fn is_orderly(&self, group: &str) -> bool {
        self.orderly_groups.contains(group)
    }

    pub fn set_orderly(&mut self, group: &str, orderly: bool) {
        if orderly {
            self.orderly_groups.insert(group.to_owned());
        } else {
            self.orderly_groups.remove(group);
        }
    }

    pub fn queue(&self, key: &PopQueueKey) -> Option<&PopQueue> {
        self.queues.get(key)
    }

    /// Applies `pop`, proposed at log index `receipt`: the delivered offsets with their
    /// attempts, in offset order, or `None` (nothing changed) if the queue moved since the
    /// leader read it. A queue never popped starts where the pop says (the leader reads from
    /// the oldest message it keeps).
    pub fn apply_pop(&mut self, pop: &Pop, receipt: u64) -> Option<Vec<(i64, u32)>> {
        let queue = self
            .queues
            .entry(pop.key.clone())
            .or_insert_with(|| PopQueue {
                next_offset: pop.from_offset,
                in_flight: BTreeMap::new(),
            });
        let valid = queue.next_offset == pop.from_offset
            && pop.from_offset <= pop.next_offset
            && pop
                .fresh
                .iter()
                .all(|offset| (pop.from_offset..pop.next_offset).contains(offset))
            && pop.revived.iter().chain(&pop.dead).all(|offset| {
                queue
                    .in_flight
                    .get(offset)
                    .is_some_and(|message| message.invisible_until_ms <= pop.now_ms)
            })
            && queue.in_flight.len() + pop.fresh.len() <= POP_IN_FLIGHT_MAX;
        if !valid {
            return None;
        }
        queue.next_offset = pop.next_offset;
        for offset in &pop.dead {
            queue.in_flight.remove(offset);
        }
        for &offset in &pop.revived {
            if let Some(message) = queue.in_flight.get_mut(&offset) {
                message.attempt += 1;
                message.invisible_until_ms = pop.invisible_until_ms;
                message.receipt = receipt;
            }
        }
        for &offset in &pop.fresh {
            queue.in_flight.insert(
                offset,
                InFlight {
                    invisible_until_ms: pop.invisible_until_ms,
                    attempt: 1,
                    receipt,
                },
            );
        }
        let mut delivered: Vec<(i64, u32)> = pop
            .fresh
            .iter()
            .chain(&pop.revived)
            .filter_map(|offset| Some((*offset, queue.in_flight.get(offset)?.attempt)))
            .collect();
        delivered.sort_unstable();
        Some(delivered)
    }

    /// When the next in-flight message of `key` whose invisibility has not ended by `now_ms`
    /// becomes visible again, if any.
    pub fn next_revival_ms(&self, key: &PopQueueKey, now_ms: i64) -> Option<i64> {
        self.queues
            .get(key)?
            .in_flight
            .values()
            .map(|message| message.invisible_until_ms)
            .filter(|until| *until > now_ms)
            .min()
    }

    /// Applies `changes` to `key`'s in-flight messages at `now_ms`, proposed at log index
    /// `receipt` (the new receipt of each changed message).
    pub fn apply_changes(
        &mut self,
        key: &PopQueueKey,
        changes: &[PopChange],
        now_ms: i64,
        receipt: u64,
    ) -> Vec<PopChangeOutcome> {
        let Some(queue) = self.queues.get_mut(key) else {
            return vec![PopChangeOutcome::NotInFlight; changes.len()];
        };
        changes
            .iter()
            .map(|change| {
                let Some(message) = queue.in_flight.get_mut(&change.queue_offset) else {
                    return PopChangeOutcome::NotInFlight;
                };
                if message.receipt != change.receipt {
                    return PopChangeOutcome::StaleReceipt;
                }
                if message.invisible_until_ms <= now_ms {
                    return PopChangeOutcome::Expired;
                }
                match change.invisible_until_ms {
                    None => {
                        queue.in_flight.remove(&change.queue_offset);
                    }
                    Some(until) => {
                        message.invisible_until_ms = until;
                        message.receipt = receipt;
                    }
                }
                PopChangeOutcome::Done {
                    receipt: if change.invisible_until_ms.is_some() {
                        receipt
                    } else {
                        change.receipt
                    },
                }
            })
            .collect()
    }

    /// Forgets every queue of `topic` (the topic was deleted).
    pub fn delete_topic(&mut self, topic: &str) {
        self.queues.retain(|key, _| key.topic != topic);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> PopQueueKey {
        PopQueueKey {
            group: "g".into(),
            topic: "T".into(),
            queue_id: 0,
        }
    }

    fn pop(from: i64, next: i64, fresh: &[i64], revived: &[i64], now_ms: i64) -> Pop {
        Pop {
            key: key(),
            from_offset: from,
            next_offset: next,
            fresh: fresh.to_vec(),
            revived: revived.to_vec(),
            dead: Vec::new(),
            now_ms,
            invisible_until_ms: now_ms + 1_000,
        }
    }

    fn change(queue_offset: i64, receipt: u64, until: Option<i64>) -> PopChange {
        PopChange {
            queue_offset,
            receipt,
            invisible_until_ms: until,
        }
    }

    #[test]
    fn a_pop_delivers_fresh_offsets_and_passes_over_the_filtered_ones() {
        let mut state = PopState::default();
        assert_eq!(
            state.apply_pop(&pop(0, 4, &[0, 2, 3], &[], 0), 7),
            Some(vec![(0, 1), (2, 1), (3, 1)])
        );
        let queue = state.queue(&key()).expect("popped");
        assert_eq!(queue.next_offset, 4);
        assert_eq!(
            queue.in_flight.keys().copied().collect::<Vec<_>>(),
            [0, 2, 3]
        );
        assert!(queue.in_flight.values().all(|message| message.receipt == 7));
    }

    #[test]
    fn a_pop_from_a_moved_queue_delivers_nothing() {
        let mut state = PopState::default();
        state.apply_pop(&pop(0, 2, &[0, 1], &[], 0), 1);
        assert_eq!(
            state.apply_pop(&pop(0, 3, &[2], &[], 0), 2),
            None,
            "from 0 again"
        );
        assert_eq!(
            state.apply_pop(&pop(2, 3, &[5], &[], 0), 3),
            None,
            "outside its range"
        );
        assert_eq!(
            state.apply_pop(&pop(2, 2, &[], &[0], 500), 4),
            None,
            "revives a message still invisible"
        );
        assert_eq!(
            state.apply_pop(&pop(2, 9, &[], &[], 0), 5),
            Some(Vec::new()),
            "passes over filtered offsets only"
        );
        assert_eq!(state.queue(&key()).expect("popped").next_offset, 9);
    }

    #[test]
    fn a_new_queue_starts_where_its_first_pop_says() {
        let mut state = PopState::default();
        assert_eq!(
            state.apply_pop(&pop(40, 42, &[41], &[], 0), 1),
            Some(vec![(41, 1)])
        );
        assert_eq!(state.next_revival_ms(&key(), 0), Some(1_000));
        assert_eq!(state.next_revival_ms(&key(), 1_000), None);
    }

    #[test]
    fn an_ended_invisibility_makes_the_next_pop_deliver_it_again_with_one_more_attempt() {
        let mut state = PopState::default();
        state.apply_pop(&pop(0, 1, &[0], &[], 0), 1);
        assert_eq!(
            state.apply_pop(&pop(1, 1, &[], &[0], 1_000), 2),
            Some(vec![(0, 2)])
        );
        assert_eq!(
            state.apply_changes(&key(), &[change(0, 1, None)], 1_500, 3),
            [PopChangeOutcome::StaleReceipt],
            "the first delivery's receipt no longer acks"
        );
        assert_eq!(
            state.apply_changes(&key(), &[change(0, 2, None)], 1_500, 4),
            [PopChangeOutcome::Done { receipt: 2 }]
        );
        assert!(state.queue(&key()).expect("popped").in_flight.is_empty());
        assert_eq!(
            state.apply_changes(&key(), &[change(0, 2, None)], 1_500, 5),
            [PopChangeOutcome::NotInFlight],
            "acked once"
        );
    }

    #[test]
    fn a_message_past_its_last_attempt_leaves_the_queue_when_it_is_due() {
        let mut state = PopState::default();
        state.apply_pop(&pop(0, 2, &[0, 1], &[], 0), 1);
        let dead = |now_ms| Pop {
            dead: vec![0],
            ..pop(2, 2, &[], &[], now_ms)
        };
        assert_eq!(state.apply_pop(&dead(999), 2), None, "not due yet");
        assert_eq!(state.apply_pop(&dead(1_000), 3), Some(Vec::new()));
        let in_flight = &state.queue(&key()).expect("popped").in_flight;
        assert_eq!(in_flight.keys().copied().collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn a_change_needs_an_unexpired_invisibility_and_gives_a_new_receipt() {
        let mut state = PopState::default();
        state.apply_pop(&pop(0, 2, &[0, 1], &[], 0), 1);
        assert_eq!(
            state.apply_changes(&key(), &[change(0, 1, Some(5_000))], 999, 2),
            [PopChangeOutcome::Done { receipt: 2 }]
        );
        assert_eq!(
            state.apply_changes(&key(), &[change(1, 1, None)], 1_000, 3),
            [PopChangeOutcome::Expired],
            "invisible until 1000: over at 1000"
        );
        let in_flight = &state.queue(&key()).expect("popped").in_flight;
        assert_eq!(in_flight[&0].invisible_until_ms, 5_000);
        assert_eq!(in_flight[&0].receipt, 2);
        assert!(in_flight.contains_key(&1), "an expired ack changes nothing");
    }

    #[test]
    fn a_queue_holds_at_most_the_in_flight_limit() {
        let mut state = PopState::default();
        let all: Vec<i64> = (0..POP_IN_FLIGHT_MAX as i64).collect();
        let max = POP_IN_FLIGHT_MAX as i64;
        assert_eq!(
            state
                .apply_pop(&pop(0, max, &all, &[], 0), 1)
                .map(|d| d.len()),
            Some(POP_IN_FLIGHT_MAX)
        );
        assert_eq!(
            state.apply_pop(&pop(max, max + 1, &[max], &[], 0), 2),
            None,
            "one more than the limit"
        );
    }
}
