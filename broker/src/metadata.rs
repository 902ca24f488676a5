//! The replicated metadata tables of a broker group: topic configs, subscription group
//! configs, consumer offsets, the progress of each delay level and pop consumption's state.
//!
//! They change only by applying committed Raft commands, in log order, so every node holds
//! the same tables; a snapshot carries them whole.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::Serialize;

use crate::pop_state::PopState;

pub use rocketraft_proto::perm::PERM_READ;
pub use rocketraft_proto::perm::PERM_WRITE;

/// A topic's configuration, replicated so every node routes and validates alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    pub name: String,
    pub read_queue_count: u32,
    pub write_queue_count: u32,
    /// [`PERM_READ`] | [`PERM_WRITE`].
    pub perm: u32,
}

/// A subscription group's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupConfig {
    pub name: String,
    pub retry_max_times: u32,
    pub retry_queue_count: u32,
}

/// One consumer offset: the next queue offset the group will consume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueOffset {
    pub topic: String,
    pub queue_id: i32,
    pub offset: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    pub topics: BTreeMap<String, TopicConfig>,
    pub groups: BTreeMap<String, GroupConfig>,
    /// group -> (topic, queue id) -> next offset to consume.
    pub offsets: BTreeMap<String, BTreeMap<(String, i32), i64>>,
    /// delay level -> next offset of its schedule queue to deliver.
    pub schedule_progress: BTreeMap<u32, i64>,
    /// Pop consumption: where each group's pops reached and what they have in flight.
    /// Checkpoints and snapshots write it after the rest of their state ([`Metadata::split`]),
    /// as a trailing field the ones written before pop consumption existed lack.
    #[serde(skip)]
    pub pops: PopState,
}

impl Metadata {
    /// The tables without the pop state, and the pop state: how checkpoints and snapshots
    /// write them.
    pub fn split(&self) -> (Metadata, PopState) {
        let mut tables = self.clone();
        let pops = std::mem::take(&mut tables.pops);
        (tables, pops)
    }

    /// The tables with `pops` put back (see [`Metadata::split`]).
    pub fn with_pops(mut self, pops: PopState) -> Metadata {
        self.pops = pops;
        self
    }

    pub fn upsert_topic(&mut self, topic: TopicConfig) {
        self.topics.insert(topic.name.clone(), topic);
    }

    pub fn delete_topic(&mut self, name: &str) {
        self.topics.remove(name);
        for group_offsets in self.offsets.values_mut() {
            group_offsets.retain(|(topic, _), _| topic != name);
        }
        self.pops.delete_topic(name);
    }

    pub fn upsert_group(&mut self, group: GroupConfig) {
        self.groups.insert(group.name.clone(), group);
    }

    pub fn commit_offsets(&mut self, group: &str, offsets: &[QueueOffset]) {
        let group_offsets = self.offsets.entry(group.to_owned()).or_default();
        for offset in offsets {
            group_offsets.insert((offset.topic.clone(), offset.queue_id), offset.offset);
        }
    }

    /// The next offset of `level`'s schedule queue to deliver (0 before any delivery).
    pub fn schedule_progress(&self, level: u32) -> i64 {
        self.schedule_progress.get(&level).copied().unwrap_or(0)
    }

    pub fn set_schedule_progress(&mut self, level: u32, next_offset: i64) {
        self.schedule_progress.insert(level, next_offset);
    }

    pub fn consumer_offset(&self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        self.offsets
            .get(group)?
            .get(&(topic.to_owned(), queue_id))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deleting_a_topic_drops_its_offsets_only() {
        let mut metadata = Metadata::default();
        let offset = |topic: &str| QueueOffset {
            topic: topic.into(),
            queue_id: 0,
            offset: 7,
        };
        metadata.commit_offsets("g", &[offset("a"), offset("b")]);
        metadata.delete_topic("a");
        assert_eq!(metadata.consumer_offset("g", "a", 0), None);
        assert_eq!(metadata.consumer_offset("g", "b", 0), Some(7));
    }
}
