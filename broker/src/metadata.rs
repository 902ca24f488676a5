//! The replicated metadata tables of a broker group: topic configs and message types,
//! subscription group configs, consumer offsets, the progress of each delay level and pop
//! consumption's state.
//!
//! They change only by applying committed Raft commands, in log order, so every node holds
//! the same tables; a snapshot carries them whole.
//!
//! Compatibility: checkpoints and snapshots are bincode, which is not self-describing. Tables
//! added after the first release are written after everything else ([`Trailing`]), in the
//! order they were added, and read as empty from a file an earlier build wrote.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::Serialize;

use rocketraft_proto::common as common_pb;

use crate::pop::state::PopState;

pub use rocketraft_domain::perm::PERM_READ;
pub use rocketraft_domain::perm::PERM_WRITE;

/// A topic's configuration, replicated so every node routes and validates alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    pub name: String,
    pub read_queue_count: u32,
    pub write_queue_count: u32,
    /// [`PERM_READ`] | [`PERM_WRITE`].
    pub perm: u32,
}

/// The messages a topic takes (RocketMQ's topic attribute `message.type`); the RocketMQ 5.x
/// endpoint refuses a send of another type. Variants keep their order (bincode numbers them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TopicMessageType {
    /// Every type: topics created without one, and every topic created before types existed.
    #[default]
    Mixed,
    Normal,
    Fifo,
    Delay,
    Transaction,
}

impl TopicMessageType {
    /// The type a request names; `None` for UNSPECIFIED (keep the topic's) or a number this
    /// build does not know.
    pub fn from_wire(value: i32) -> Option<TopicMessageType> {
        match common_pb::TopicMessageType::try_from(value).ok()? {
            common_pb::TopicMessageType::Unspecified => None,
            common_pb::TopicMessageType::Mixed => Some(TopicMessageType::Mixed),
            common_pb::TopicMessageType::Normal => Some(TopicMessageType::Normal),
            common_pb::TopicMessageType::Fifo => Some(TopicMessageType::Fifo),
            common_pb::TopicMessageType::Delay => Some(TopicMessageType::Delay),
            common_pb::TopicMessageType::Transaction => Some(TopicMessageType::Transaction),
        }
    }

    pub fn to_wire(self) -> common_pb::TopicMessageType {
        match self {
            TopicMessageType::Mixed => common_pb::TopicMessageType::Mixed,
            TopicMessageType::Normal => common_pb::TopicMessageType::Normal,
            TopicMessageType::Fifo => common_pb::TopicMessageType::Fifo,
            TopicMessageType::Delay => common_pb::TopicMessageType::Delay,
            TopicMessageType::Transaction => common_pb::TopicMessageType::Transaction,
        }
    }
}

/// Topic name -> its message type, for topics that are not [`TopicMessageType::Mixed`].
pub type TopicTypes = BTreeMap<String, TopicMessageType>;

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
    /// Written trailing ([`Metadata::split`]).
    #[serde(skip)]
    pub pops: PopState,
    /// Topics' message types. Written trailing, after `pops`.
    #[serde(skip)]
    pub topic_types: TopicTypes,
}

/// The tables checkpoints and snapshots write after the rest of their state, in this order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trailing {
    pub pops: PopState,
    pub topic_types: TopicTypes,
}

impl Metadata {
    /// The tables without the trailing ones, and the trailing ones: how checkpoints and
    /// snapshots write them.
    pub fn split(&self) -> (Metadata, Trailing) {
        let mut tables = self.clone();
        let trailing = Trailing {
            pops: std::mem::take(&mut tables.pops),
            topic_types: std::mem::take(&mut tables.topic_types),
        };
        (tables, trailing)
    }

    /// The tables with the trailing ones put back (see [`Metadata::split`]).
    pub fn with_trailing(mut self, trailing: Trailing) -> Metadata {
        self.pops = trailing.pops;
        self.topic_types = trailing.topic_types;
        self
    }

    pub fn upsert_topic(&mut self, topic: TopicConfig) {
        self.topics.insert(topic.name.clone(), topic);
    }

    /// Creates or updates a topic and, unless `message_type` is `None`, sets its type.
    pub fn upsert_typed_topic(
        &mut self,
        topic: TopicConfig,
        message_type: Option<TopicMessageType>,
    ) {
        match message_type {
            Some(TopicMessageType::Mixed) => {
                self.topic_types.remove(&topic.name);
            }
            Some(kind) => {
                self.topic_types.insert(topic.name.clone(), kind);
            }
            None => {}
        }
        self.upsert_topic(topic);
    }

    /// What `topic` takes.
    pub fn topic_type(&self, topic: &str) -> TopicMessageType {
        self.topic_types.get(topic).copied().unwrap_or_default()
    }

    pub fn delete_topic(&mut self, name: &str) {
        self.topics.remove(name);
        self.topic_types.remove(name);
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

/// Reads a table trailing a checkpoint or snapshot; one written before the table existed ends
/// before it: empty. (The file's checksum already proved its bytes intact, so a failure here
/// is that missing tail.)
pub fn deserialize_or_empty<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(T::deserialize(deserializer).unwrap_or_default())
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

    #[test]
    fn a_topic_keeps_its_type_until_told_otherwise_and_loses_it_with_the_topic() {
        let mut metadata = Metadata::default();
        let topic = |name: &str| TopicConfig {
            name: name.into(),
            read_queue_count: 1,
            write_queue_count: 1,
            perm: PERM_READ | PERM_WRITE,
        };
        metadata.upsert_typed_topic(topic("a"), None);
        assert_eq!(metadata.topic_type("a"), TopicMessageType::Mixed);
        metadata.upsert_typed_topic(topic("a"), Some(TopicMessageType::Fifo));
        metadata.upsert_typed_topic(topic("a"), None);
        metadata.upsert_topic(topic("a"));
        assert_eq!(metadata.topic_type("a"), TopicMessageType::Fifo);
        metadata.upsert_typed_topic(topic("a"), Some(TopicMessageType::Mixed));
        assert!(
            metadata.topic_types.is_empty(),
            "mixed is the default, not kept"
        );
        metadata.upsert_typed_topic(topic("a"), Some(TopicMessageType::Delay));
        metadata.delete_topic("a");
        metadata.upsert_topic(topic("a"));
        assert_eq!(metadata.topic_type("a"), TopicMessageType::Mixed);
    }

    #[test]
    fn every_wire_type_but_unspecified_names_a_type_and_back() {
        assert_eq!(TopicMessageType::from_wire(0), None);
        assert_eq!(TopicMessageType::from_wire(99), None);
        for value in 1..=5 {
            let kind = TopicMessageType::from_wire(value).expect("a type");
            assert_eq!(kind.to_wire() as i32, value);
        }
    }
}
