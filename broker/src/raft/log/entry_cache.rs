//! The most recently appended Raft log entries, kept in memory up to a byte budget, so that
//! replicating them to followers (which read what the leader just appended) costs neither a
//! disk read nor a decode.
//!
//! Invariant: the cached entries have consecutive indexes and equal what the log holds at
//! those indexes; every truncation or purge of the log is mirrored here. A cache that saw no
//! append for a while is let go ([`EntryCache::release_if_idle`]): an idle group holds no
//! copy of its last burst in memory.

use std::collections::VecDeque;
use std::time::Duration;
use std::time::Instant;

use openraft::entry::RaftEntry;

use crate::raft::types::Entry;

/// Bytes of encoded entries kept in memory at most: a quarter second of W1's traffic, more
/// than replication lags behind appends while followers keep up. A follower further behind
/// is sent entries read back from the log. (64 MiB kept every node's anonymous memory under
/// W1 at 150-190 MB; 16 MiB at 90-110 MB.)
pub const ENTRY_CACHE_BYTES_MAX: u64 = 16 * 1024 * 1024;

#[derive(Debug, Default)]
pub struct EntryCache {
    /// Entries with their encoded size.
    entries: VecDeque<(Entry, u64)>,
    bytes: u64,
    /// When the last entry was added.
    last_push: Option<Instant>,
}

impl EntryCache {
    /// Adds the entry that follows the last cached one (or starts over if it does not),
    /// then evicts the oldest entries beyond the budget.
    pub fn push(&mut self, entry: Entry, encoded_bytes: u64) {
        if self
            .entries
            .back()
            .is_some_and(|(last, _)| last.index() + 1 != entry.index())
        {
            self.clear();
        }
        self.bytes += encoded_bytes;
        self.entries.push_back((entry, encoded_bytes));
        self.last_push = Some(Instant::now());
        while self.bytes > ENTRY_CACHE_BYTES_MAX && self.entries.len() > 1 {
            self.pop_front();
        }
    }

    /// The entry at `index` and its encoded size, if cached.
    pub fn get(&self, index: u64) -> Option<&(Entry, u64)> {
        let first = self.entries.front()?.0.index();
        self.entries
            .get(usize::try_from(index.checked_sub(first)?).ok()?)
    }

    /// Forgets every entry at or after `index`.
    pub fn truncate_from(&mut self, index: u64) {
        while self
            .entries
            .back()
            .is_some_and(|(last, _)| last.index() >= index)
        {
            if let Some((_, bytes)) = self.entries.pop_back() {
                self.bytes -= bytes;
            }
        }
    }

    /// Forgets every entry at or before `index`.
    pub fn purge_upto(&mut self, index: u64) {
        while self
            .entries
            .front()
            .is_some_and(|(first, _)| first.index() <= index)
        {
            self.pop_front();
        }
    }

    /// Forgets every entry if none was added for `idle` (as of `now`), giving the memory
    /// back; returns the bytes released. Followers that lag are then sent entries read from
    /// the log, as they are when the budget evicted them.
    pub fn release_if_idle(&mut self, now: Instant, idle: Duration) -> u64 {
        let quiet = self
            .last_push
            .is_some_and(|last| now.saturating_duration_since(last) >= idle);
        if !quiet || self.entries.is_empty() {
            return 0;
        }
        let released = self.bytes;
        self.clear();
        // A `VecDeque` keeps its capacity when cleared.
        self.entries.shrink_to_fit();
        released
    }

    fn pop_front(&mut self) {
        if let Some((_, bytes)) = self.entries.pop_front() {
            self.bytes -= bytes;
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use openraft::EntryPayload;

    use super::*;
    use crate::raft::types::LogId;

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new_term_index(1, index),
            payload: EntryPayload::Blank,
        }
    }

    #[test]
    fn an_idle_cache_is_released_and_a_busy_one_kept() {
        let mut cache = EntryCache::default();
        let idle = Duration::from_secs(5);
        assert_eq!(cache.release_if_idle(Instant::now(), idle), 0, "empty");
        cache.push(entry(1), 10);
        cache.push(entry(2), 10);
        let pushed = Instant::now();
        assert_eq!(cache.release_if_idle(pushed, idle), 0, "just appended");
        assert_eq!(
            cache.release_if_idle(pushed + idle - Duration::from_millis(1), idle),
            0,
            "quiet for less than idle"
        );
        assert_eq!(cache.release_if_idle(pushed + idle, idle), 20);
        assert!(cache.get(2).is_none());
        cache.push(entry(3), 10);
        assert_eq!(
            cache.get(3).map(|(e, _)| e.index()),
            Some(3),
            "filled again"
        );
    }

    #[test]
    fn truncation_and_purge_are_mirrored() {
        let mut cache = EntryCache::default();
        for index in 5..10 {
            cache.push(entry(index), 10);
        }
        assert!(cache.get(4).is_none());
        assert_eq!(cache.get(7).map(|(e, _)| e.index()), Some(7));
        cache.truncate_from(8);
        assert!(cache.get(8).is_none());
        cache.purge_upto(6);
        assert!(cache.get(6).is_none());
        assert_eq!(cache.get(7).map(|(e, _)| e.index()), Some(7));
        assert_eq!(cache.bytes, 10);
    }

    #[test]
    fn a_gap_restarts_the_cache_and_the_budget_evicts_the_oldest() {
        let mut cache = EntryCache::default();
        cache.push(entry(1), 10);
        cache.push(entry(3), 10);
        assert!(cache.get(1).is_none(), "a gap starts over");
        cache.push(entry(4), ENTRY_CACHE_BYTES_MAX);
        assert!(cache.get(3).is_none(), "evicted beyond the budget");
        assert!(cache.get(4).is_some(), "the newest entry always stays");
    }
}
