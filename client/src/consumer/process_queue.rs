//! The local buffer of one assigned queue: messages pulled but not yet consumed.
//!
//! Invariants: the pull position only moves forward (except when the broker corrects an
//! illegal offset); the offset that may be committed is
//! the smallest offset still in flight, or the pull position when nothing is in flight, so a
//! commit never moves past a message that was not consumed. A queue that moves to another
//! client is dropped: its pull loop stops and late results no longer move its offset.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use crate::message::MessageExt;

#[derive(Debug)]
pub struct ProcessQueue {
    state: Mutex<State>,
    dropped: CancellationToken,
}

#[derive(Debug)]
struct State {
    /// queue offset -> body bytes, of messages handed to the listener and not yet done.
    in_flight: BTreeMap<i64, usize>,
    bytes: usize,
    /// The next queue offset to pull.
    next_offset: i64,
}

impl ProcessQueue {
    pub fn new(start_offset: i64) -> ProcessQueue {
        ProcessQueue {
            state: Mutex::new(State {
                in_flight: BTreeMap::new(),
                bytes: 0,
                next_offset: start_offset,
            }),
            dropped: CancellationToken::new(),
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
        let queue = ProcessQueue::new(10);
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
        let queue = ProcessQueue::new(0);
        queue.put(&[message(0, 60), message(1, 60)], 2);
        assert!(queue.is_full(2, 1000));
        assert!(queue.is_full(10, 120));
        assert!(!queue.is_full(3, 121));
        queue.remove(&[0]);
        assert!(!queue.is_full(2, 1000));
    }
}
