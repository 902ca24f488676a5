//! A message as an application builds it, and its wire form with the core properties of
//! DESIGN §4 (`TAGS`, `KEYS`, `UNIQ_KEY`, `DELAY`).

use std::collections::BTreeMap;

use bytes::Bytes;
use rocketraft_proto::common as pb;

/// Property names the broker understands (RocketMQ's spellings).
pub mod property {
    pub const TAGS: &str = "TAGS";
    pub const KEYS: &str = "KEYS";
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    pub const DELAY: &str = "DELAY";
}

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
