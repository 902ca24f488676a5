//! A message as an application builds it ([`Message`]) and as a consumer receives it
//! ([`MessageExt`]), with the core properties of DESIGN §4 (`TAGS`, `KEYS`, `UNIQ_KEY`,
//! `DELAY`).

use std::collections::BTreeMap;

use bytes::Bytes;
use rocketraft_proto::broker::PulledMessage;
use rocketraft_proto::common as pb;

/// Property names the broker understands (RocketMQ's spellings).
pub mod property {
    pub const TAGS: &str = "TAGS";
    pub const KEYS: &str = "KEYS";
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    pub const DELAY: &str = "DELAY";
    /// The original topic of a retried message.
    pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
    /// The id of the message a retry copy was made from.
    pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
    /// The reconsume count a client-sent retry copy carries.
    pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
    /// The most reconsumes before the dead-letter topic.
    pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
    /// Where a delayed message belongs (set by the broker).
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    pub const REAL_QID: &str = "REAL_QID";
}

pub use rocketraft_proto::names::DLQ_TOPIC_PREFIX;
pub use rocketraft_proto::names::RETRY_TOPIC_PREFIX;

/// Separates keys inside the `KEYS` property.
pub const KEY_SEPARATOR: char = ' ';

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub topic: String,
    pub body: Bytes,
    pub tags: Option<String>,
    pub keys: Vec<String>,
    /// 0 = deliver now; 1..=18 picks a delay level (clamped by the broker).
    pub delay_level: u32,
    /// Application properties.
    pub properties: BTreeMap<String, String>,
}

impl Message {
    pub fn new(topic: impl Into<String>, body: impl Into<Bytes>) -> Message {
        Message {
            topic: topic.into(),
            body: body.into(),
            tags: None,
            keys: Vec::new(),
            delay_level: 0,
            properties: BTreeMap::new(),
        }
    }

    pub fn with_tags(mut self, tags: impl Into<String>) -> Message {
        self.tags = Some(tags.into());
        self
    }

    pub fn with_keys(mut self, keys: impl IntoIterator<Item = impl Into<String>>) -> Message {
        self.keys = keys.into_iter().map(Into::into).collect();
        self
    }

    pub fn with_delay_level(mut self, delay_level: u32) -> Message {
        self.delay_level = delay_level;
        self
    }

    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Message {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// The wire form, carrying `unique_id` as its `UNIQ_KEY`.
    pub fn to_wire(&self, unique_id: &str) -> pb::Message {
        let mut properties: std::collections::HashMap<String, String> = self
            .properties
            .iter()
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        if let Some(tags) = &self.tags {
            properties.insert(property::TAGS.to_owned(), tags.clone());
        }
        if !self.keys.is_empty() {
            properties.insert(
                property::KEYS.to_owned(),
                self.keys.join(&KEY_SEPARATOR.to_string()),
            );
        }
        if self.delay_level > 0 {
            properties.insert(property::DELAY.to_owned(), self.delay_level.to_string());
        }
        properties.insert(property::UNIQ_KEY.to_owned(), unique_id.to_owned());
        pb::Message {
            topic: self.topic.clone(),
            body: self.body.clone(),
            properties,
            flag: 0,
        }
    }
}

/// A stored message as a consumer receives it: the message and where it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageExt {
    pub topic: String,
    /// The broker group that stores it.
    pub group: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
    /// The `UNIQ_KEY` the producer gave it (empty if it had none).
    pub msg_id: String,
    pub tags: Option<String>,
    pub keys: Vec<String>,
    pub body: Bytes,
    /// Every property, the core ones included.
    pub properties: BTreeMap<String, String>,
    pub reconsume_times: i32,
    pub born_timestamp_ms: i64,
    pub store_timestamp_ms: i64,
    pub born_host: String,
    pub store_host: String,
}

impl MessageExt {
    /// A pulled message. One from a retry topic shows its original topic (`RETRY_TOPIC`).
    pub fn from_pulled(message: PulledMessage, group: &str) -> MessageExt {
        let properties: BTreeMap<String, String> = message.properties.into_iter().collect();
        let topic = match properties.get(property::RETRY_TOPIC) {
            Some(original) if message.topic.starts_with(RETRY_TOPIC_PREFIX) => original.clone(),
            _ => message.topic,
        };
        MessageExt {
            msg_id: properties
                .get(property::UNIQ_KEY)
                .cloned()
                .unwrap_or_default(),
            tags: properties.get(property::TAGS).cloned(),
            keys: properties
                .get(property::KEYS)
                .map(|keys| {
                    keys.split(KEY_SEPARATOR)
                        .filter(|key| !key.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            topic,
            group: group.to_owned(),
            queue_id: message.queue_id,
            queue_offset: message.queue_offset,
            commit_log_offset: message.commit_log_offset,
            body: message.body,
            properties,
            reconsume_times: message.reconsume_times,
            born_timestamp_ms: message.born_timestamp_ms,
            store_timestamp_ms: message.store_timestamp_ms,
            born_host: message.born_host,
            store_host: message.store_host,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_form_carries_the_core_properties() {
        let message = Message::new("Orders", "hi")
            .with_tags("TagA")
            .with_keys(["k1", "k2"])
            .with_delay_level(3)
            .with_property("color", "blue");
        let wire = message.to_wire("ID1");
        assert_eq!(wire.properties["TAGS"], "TagA");
        assert_eq!(wire.properties["KEYS"], "k1 k2");
        assert_eq!(wire.properties["DELAY"], "3");
        assert_eq!(wire.properties["UNIQ_KEY"], "ID1");
        assert_eq!(wire.properties["color"], "blue");
        assert!(
            !Message::new("t", "b")
                .to_wire("x")
                .properties
                .contains_key("DELAY")
        );
    }
}
