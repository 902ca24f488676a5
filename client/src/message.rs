//! A message as an application builds it ([`Message`]) and as a consumer receives it
//! ([`MessageExt`]), with the core properties of ARCHITECTURE.md (`TAGS`, `KEYS`, `UNIQ_KEY`,
//! `DELAY`).

use std::collections::BTreeMap;

use bytes::Bytes;
use rocketraft_proto::broker::PulledMessage;
use rocketraft_proto::common as pb;

use crate::properties::Properties;

/// Property names the broker understands (RocketMQ's spellings).
pub mod property {
    pub use rocketraft_domain::property_keys::*;
}

pub use rocketraft_domain::names::DLQ_TOPIC_PREFIX;
pub use rocketraft_domain::names::RETRY_TOPIC_PREFIX;

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

    /// A timer message: delivered at `deliver_at_ms` (ms since the epoch), to within a
    /// second, at most the broker's `timer_max_delay_ms` (3 days by default) ahead; a time
    /// already past delivers at once. Replaces any other timer or delay set before.
    pub fn with_deliver_time_ms(self, deliver_at_ms: i64) -> Message {
        self.with_timer(property::TIMER_DELIVER_MS, deliver_at_ms.to_string())
    }

    /// A timer message delivered `delay` after the broker stores it (to within a second).
    /// Replaces any other timer or delay set before.
    pub fn with_delay(self, delay: std::time::Duration) -> Message {
        self.with_timer(property::TIMER_DELAY_MS, delay.as_millis().to_string())
    }

    fn with_timer(mut self, key: &str, value: String) -> Message {
        self.delay_level = 0;
        for timer in property::TIMER_KEYS {
            self.properties.remove(timer);
        }
        self.with_property(key, value)
    }

    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Message {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// The wire form for a `SendRequest`, carrying `unique_id` as its `UNIQ_KEY`. The tags,
    /// keys and delay level win over application properties of the same name. The topic is
    /// left out: a request names it once for all its messages.
    pub fn to_wire(&self, unique_id: &str) -> pb::Message {
        let keys = (!self.keys.is_empty()).then(|| self.keys.join(&KEY_SEPARATOR.to_string()));
        let delay = (self.delay_level > 0).then(|| self.delay_level.to_string());
        let core = [
            (property::TAGS, self.tags.as_deref()),
            (property::KEYS, keys.as_deref()),
            (property::DELAY, delay.as_deref()),
            (property::UNIQ_KEY, Some(unique_id)),
        ];
        let set = |key: &str| {
            core.iter()
                .any(|(name, value)| *name == key && value.is_some())
        };
        let application = self
            .properties
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .filter(|(key, _)| !set(key));
        let core = core
            .iter()
            .filter_map(|(name, value)| Some((*name, (*value)?)));
        pb::Message {
            topic: String::new(),
            body: self.body.clone(),
            properties: encode_properties(application.chain(core)),
            flag: 0,
            born_timestamp_ms: 0,
            born_host: String::new(),
        }
    }
}

/// Properties in the wire encoding (`rocketraft_domain::properties`). Keys and values must not
/// hold `\x01` or `\x02`; the broker refuses a message whose do.
pub fn encode_properties<'a, I>(pairs: I) -> Bytes
where
    I: IntoIterator<Item = (&'a str, &'a str)> + Clone,
{
    let size = pairs
        .clone()
        .into_iter()
        .map(|(key, value)| key.len() + value.len() + 2)
        .sum();
    let mut out = Vec::with_capacity(size);
    for (key, value) in pairs {
        rocketraft_domain::properties::put_pair(&mut out, key, value);
    }
    out.into()
}

/// A stored message as a consumer receives it: the message and where it is stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    pub properties: Properties,
    pub reconsume_times: i32,
    pub born_timestamp_ms: i64,
    pub store_timestamp_ms: i64,
    pub born_host: String,
    pub store_host: String,
}

impl MessageExt {
    /// A pulled message. One from a retry topic shows its original topic (`RETRY_TOPIC`).
    pub fn from_pulled(message: PulledMessage, group: &str) -> MessageExt {
        let (properties, [retry_topic, msg_id, tags, keys]) = Properties::from_wire(
            message.properties,
            [
                property::RETRY_TOPIC,
                property::UNIQ_KEY,
                property::TAGS,
                property::KEYS,
            ],
            |error| {
                tracing::warn!(%error, topic = %message.topic, queue_offset = message.queue_offset, "skipping a malformed property of a pulled message");
            },
        );
        let topic = match retry_topic {
            Some(original) if message.topic.starts_with(RETRY_TOPIC_PREFIX) => original,
            _ => message.topic,
        };
        MessageExt {
            msg_id: msg_id.unwrap_or_default(),
            tags,
            keys: keys
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

    fn wire_pairs(message: &Message, id: &str) -> Vec<(String, String)> {
        let wire = message.to_wire(id);
        rocketraft_domain::properties::pairs(&wire.properties)
            .map(|pair| pair.map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect::<Result<_, _>>()
            .expect("well-formed")
    }

    #[test]
    fn wire_form_carries_the_core_properties() {
        let message = Message::new("Orders", "hi")
            .with_tags("TagA")
            .with_keys(["k1", "k2"])
            .with_delay_level(3)
            .with_property("color", "blue");
        let pairs = wire_pairs(&message, "ID1");
        let expected = [
            ("color", "blue"),
            ("TAGS", "TagA"),
            ("KEYS", "k1 k2"),
            ("DELAY", "3"),
            ("UNIQ_KEY", "ID1"),
        ];
        assert_eq!(pairs, expected.map(|(k, v)| (k.to_owned(), v.to_owned())));
        let plain = wire_pairs(&Message::new("t", "b"), "x");
        assert_eq!(plain, [("UNIQ_KEY".to_owned(), "x".to_owned())]);
    }

    #[test]
    fn fields_win_over_application_properties_of_the_same_name() {
        let message = Message::new("t", "b")
            .with_tags("FromField")
            .with_property("TAGS", "FromProperty")
            .with_property("UNIQ_KEY", "spoofed")
            .with_property("DELAY", "2");
        let pairs = wire_pairs(&message, "ID");
        let value = |key: &str| {
            let found: Vec<&str> = pairs
                .iter()
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
                .collect();
            found
        };
        assert_eq!(value("TAGS"), ["FromField"]);
        assert_eq!(value("UNIQ_KEY"), ["ID"]);
        assert_eq!(value("DELAY"), ["2"], "no delay level: the property stays");
    }
}
