//! The local buffer of one assigned queue: messages pulled but not yet consumed.
//!
//! Invariants: the pull position only moves forward (except when the broker corrects an
//! illegal offset); the offset that may be committed is
//! the smallest offset still in flight, or the pull position when nothing is in flight, so a
//! commit never moves past a message that was not consumed. A queue that moves to another
//! client is dropped: its pull loop stops and late results no longer move its offset.
//!
//! For an orderly consumer it also holds the messages waiting for the listener, in queue
//! order, and this client's lock on the queue: the queue is consumed only while the lock
//! is valid (`lock_valid_until`, from the broker's last grant), and one batch at a time
//! (`consuming`, shared by every generation of the queue's buffer in this client, so a
//! queue restarted after a lost lock waits for the old generation's batch; a release takes
//! it too before it unlocks the queue).

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::message::MessageExt;

#[derive(Debug)]
pub struct ProcessQueue {
    state: Mutex<State>,
    dropped: CancellationToken,
    /// Orderly: signalled when messages arrive in `ready`.
    arrived: Notify,
    /// Orderly: held while the listener consumes a batch of this queue.
    pub consuming: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Debug)]
struct State {
    /// queue offset -> body bytes, of messages handed to the listener and not yet done.
    in_flight: BTreeMap<i64, usize>,
    bytes: usize,
    /// The next queue offset to pull.
    next_offset: i64,
    /// Orderly: messages waiting for the listener, in queue order.
    ready: VecDeque<MessageExt>,
    /// Orderly: until when this client may consume the queue; `None`: never locked.
    lock_valid_until: Option<Instant>,
    /// Orderly: this client unlocked the queue; its lock is never renewed again.
    unlocked: bool,
}

impl ProcessQueue {
    /// A buffer pulling from `start_offset`, whose orderly batches are consumed under
    /// `consuming` (shared with earlier generations of the same queue).
    pub fn new(start_offset: i64, consuming: Arc<tokio::sync::Mutex<()>>) -> ProcessQueue {
        ProcessQueue {
            state: Mutex::new(State {
                in_flight: BTreeMap::new(),
                bytes: 0,
                next_offset: start_offset,
                ready: VecDeque::new(),
                lock_valid_until: None,
                unlocked: false,
            }),
            dropped: CancellationToken::new(),
            arrived: Notify::new(),
            consuming,
        }
    }

    pub fn next_offset(&self) -> i64 {
        self.lock().next_offset
    }

    /// Records pulled messages as in flight and moves the pull position to `next_offset`.
    pub fn put(&self, messages: &[MessageExt], next_offset: i64) {
        let mut state = self.lock();
        for message in messages {
            if state
                .in_flight
                .insert(message.queue_offset, message.body.len())
                .is_none()
            {
                state.bytes += message.body.len();
            }
        }
        state.next_offset = state.next_offset.max(next_offset);
    }

    /// Moves the pull position to `offset`, backwards too: the broker said the position is
    /// outside the queue and `offset` is the nearest valid one.
    pub fn reset_next_offset(&self, offset: i64) {
        self.lock().next_offset = offset;
    }

    /// Marks messages done; returns the offset that may now be committed.
    pub fn remove(&self, queue_offsets: &[i64]) -> i64 {
        let mut state = self.lock();
        for offset in queue_offsets {
            if let Some(bytes) = state.in_flight.remove(offset) {
                state.bytes -= bytes;
            }
        }
        state.commit_offset()
    }

    /// The offset that may be committed now.
    pub fn commit_offset(&self) -> i64 {
        self.lock().commit_offset()
    }

    /// Whether the buffer holds `max_count` messages or `max_bytes` bytes (pulling pauses).
    pub fn is_full(&self, max_count: usize, max_bytes: usize) -> bool {
        let state = self.lock();
        state.in_flight.len() >= max_count || state.bytes >= max_bytes
    }

    /// Orderly: queues pulled messages (already `put`) for the listener.
    pub fn push_ready(&self, messages: Vec<MessageExt>) {
        self.lock().ready.extend(messages);
        self.arrived.notify_one();
    }

    /// Orderly: the first `max` waiting messages, left in place.
    pub fn peek_ready(&self, max: usize) -> Vec<MessageExt> {
        self.lock().ready.iter().take(max).cloned().collect()
    }

    /// Orderly: resolves once messages are waiting (at once if some already are).
    pub async fn ready_arrived(&self) {
        let arrived = self.arrived.notified();
        if !self.lock().ready.is_empty() {
            return;
        }
        arrived.await;
    }

    /// Orderly: the first `count` waiting messages are done (consumed, or moved to the
    /// dead-letter topic); returns the offset that may now be committed.
    pub fn pop_ready(&self, count: usize) -> i64 {
        let mut state = self.lock();
        let count = count.min(state.ready.len());
        let done: Vec<MessageExt> = state.ready.drain(..count).collect();
        for message in done {
            if let Some(bytes) = state.in_flight.remove(&message.queue_offset) {
                state.bytes -= bytes;
            }
        }
        state.commit_offset()
    }

    /// Orderly: removes the waiting messages at `queue_offsets` (moved to the dead-letter
    /// topic) and counts one more consumption of the first `retried` others; returns the
    /// offset that may now be committed.
    pub fn dead_letter_and_retry(&self, queue_offsets: &[i64], retried: usize) -> i64 {
        let mut state = self.lock();
        state
            .ready
            .retain(|message| !queue_offsets.contains(&message.queue_offset));
        for offset in queue_offsets {
            if let Some(bytes) = state.in_flight.remove(offset) {
                state.bytes -= bytes;
            }
        }
        for message in state.ready.iter_mut().take(retried) {
            message.reconsume_times += 1;
        }
        state.commit_offset()
    }

    /// Orderly: the broker granted (or renewed) this client's lock, valid until `until`.
    pub fn lock_granted(&self, until: Instant) {
        let mut state = self.lock();
        if !state.unlocked {
            state.lock_valid_until = Some(state.lock_valid_until.map_or(until, |at| at.max(until)));
        }
    }

    /// Orderly: this client is unlocking the queue; from now on it is neither consumed nor
    /// renewed.
    pub fn lock_released(&self) {
        let mut state = self.lock();
        state.unlocked = true;
        state.lock_valid_until = None;
    }

    pub fn is_unlocked(&self) -> bool {
        self.lock().unlocked
    }

    /// Orderly: whether this client may consume the queue at `now`.
    pub fn lock_valid(&self, now: Instant) -> bool {
        self.lock()
            .lock_valid_until
            .is_some_and(|until| now < until)
    }

    /// Orderly: whether the queue was locked once and its lock is no longer valid.
    pub fn lock_lapsed(&self, now: Instant) -> bool {
        self.lock()
            .lock_valid_until
            .is_some_and(|until| now >= until)
    }

    pub fn drop_queue(&self) {
        self.dropped.cancel();
    }

    pub fn is_dropped(&self) -> bool {
        self.dropped.is_cancelled()
    }

    /// Resolves once the queue is dropped.
    pub async fn dropped(&self) {
        self.dropped.cancelled().await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    fn commit_offset(&self) -> i64 {
        self.in_flight
            .keys()
            .next()
            .copied()
            .unwrap_or(self.next_offset)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn message(queue_offset: i64, bytes: usize) -> MessageExt {
        MessageExt {
            topic: "t".into(),
            group: "g".into(),
            queue_id: 0,
            queue_offset,
            commit_log_offset: 0,
            msg_id: String::new(),
            tags: None,
            keys: Vec::new(),
            body: vec![0; bytes].into(),
            properties: Default::default(),
            reconsume_times: 0,
            born_timestamp_ms: 0,
            store_timestamp_ms: 0,
            born_host: String::new(),
            store_host: String::new(),
        }
    }

    #[test]
    fn commit_offset_is_the_smallest_in_flight() {
        let queue = ProcessQueue::new(10, Arc::default());
        assert_eq!(queue.commit_offset(), 10);
        // 10..13 pulled; 13 and 14 were filtered out, so the pull position is 15.
        queue.put(&[message(10, 5), message(11, 5), message(12, 5)], 15);
        assert_eq!(queue.next_offset(), 15);
        assert_eq!(queue.remove(&[11]), 10, "10 is still in flight");
        assert_eq!(queue.remove(&[10]), 12);
        assert_eq!(
            queue.remove(&[12]),
            15,
            "nothing in flight: the pull position"
        );
        queue.put(&[], 12);
        assert_eq!(queue.next_offset(), 15, "never backwards");
    }

    #[test]
    fn full_by_count_or_bytes() {
        let queue = ProcessQueue::new(0, Arc::default());
        queue.put(&[message(0, 60), message(1, 60)], 2);
        assert!(queue.is_full(2, 1000));
        assert!(queue.is_full(10, 120));
        assert!(!queue.is_full(3, 121));
        queue.remove(&[0]);
        assert!(!queue.is_full(2, 1000));
    }

    #[tokio::test(start_paused = true)]
    async fn orderly_messages_leave_in_order_and_hold_the_offset_until_done() {
        let queue = ProcessQueue::new(0, Arc::default());
        let pulled: Vec<MessageExt> = (0..4).map(|offset| message(offset, 10)).collect();
        queue.put(&pulled, 4);
        queue.push_ready(pulled);
        queue.ready_arrived().await;
        let offsets = |batch: Vec<MessageExt>| -> Vec<i64> {
            batch.iter().map(|message| message.queue_offset).collect()
        };
        assert_eq!(offsets(queue.peek_ready(3)), [0, 1, 2]);
        assert_eq!(
            offsets(queue.peek_ready(3)),
            [0, 1, 2],
            "peeking leaves them"
        );
        assert_eq!(queue.pop_ready(2), 2);
        // 2 and 3 suspended: 2 moved to the dead-letter topic, 3 counted once more.
        assert_eq!(queue.dead_letter_and_retry(&[2], 1), 3);
        let left = queue.peek_ready(10);
        assert_eq!(offsets(left.clone()), [3]);
        assert_eq!(left[0].reconsume_times, 1);
        assert_eq!(queue.pop_ready(10), 4, "all done: the pull position");
        assert!(!queue.is_full(1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn an_orderly_lock_is_valid_until_its_grant_says_and_then_lapsed() {
        let queue = ProcessQueue::new(0, Arc::default());
        let now = Instant::now();
        assert!(
            !queue.lock_valid(now) && !queue.lock_lapsed(now),
            "never locked"
        );
        queue.lock_granted(now + Duration::from_secs(2));
        queue.lock_granted(now + Duration::from_secs(1));
        assert!(
            queue.lock_valid(now + Duration::from_millis(1999)),
            "never shortened"
        );
        assert!(queue.lock_lapsed(now + Duration::from_secs(2)));
        assert!(!queue.lock_valid(now + Duration::from_secs(2)));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unlocked_queue_takes_no_later_grant() {
        let queue = ProcessQueue::new(0, Arc::default());
        let now = Instant::now();
        queue.lock_granted(now + Duration::from_secs(2));
        queue.lock_released();
        assert!(queue.is_unlocked() && !queue.lock_valid(now));
        queue.lock_granted(now + Duration::from_secs(5));
        assert!(
            !queue.lock_valid(now),
            "a renewal answered after the unlock grants nothing"
        );
    }
}
