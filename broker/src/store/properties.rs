//! Message properties: an ordered `String -> String` map and its RocketMQ wire encoding.
//!
//! Encoding (RocketMQ `MessageDecoder.messageProperties2String`): every pair is written as
//! `key \x01 value \x02`. Invariant: no key or value held by [`Properties`] contains either
//! separator, so `decode(encode(p)) == p`. Keys are kept sorted (a `BTreeMap`), so the same
//! map always encodes to the same bytes. (A send's properties are stored as the producer
//! encoded them; replicas copy those bytes and never re-encode.)

use std::collections::BTreeMap;

use rocketraft_domain::properties as wire;

use crate::store::error::StoreError;

pub use rocketraft_domain::properties::NAME_VALUE_SEPARATOR;
pub use rocketraft_domain::properties::PROPERTY_SEPARATOR;
/// Separates the message keys inside the `KEYS` property.
pub const KEY_SEPARATOR: &str = " ";

pub use rocketraft_domain::property_keys::DELAY;
pub use rocketraft_domain::property_keys::KEYS;
pub use rocketraft_domain::property_keys::MAX_RECONSUME_TIMES;
pub use rocketraft_domain::property_keys::ORIGIN_MESSAGE_ID;
pub use rocketraft_domain::property_keys::REAL_QID;
pub use rocketraft_domain::property_keys::REAL_TOPIC;
pub use rocketraft_domain::property_keys::RECONSUME_TIME;
pub use rocketraft_domain::property_keys::RETRY_TOPIC;
pub use rocketraft_domain::property_keys::TAGS;
pub use rocketraft_domain::property_keys::UNIQ_KEY;

/// Ordered message properties.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    map: BTreeMap<String, String>,
}

impl Properties {
    /// Empty properties.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`, returning the previous value.
    /// Errors if either contains a separator byte (`\x01` or `\x02`).
    pub fn insert(
        &mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Option<String>, StoreError> {
        let (key, value) = (key.into(), value.into());
        check_text(&key, &key, "key contains \\x01 or \\x02")?;
        check_text(&key, &value, "value contains \\x01 or \\x02")?;
        Ok(self.map.insert(key, value))
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.map.get(key).map(String::as_str)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.map.remove(key)
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Pairs in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Size in bytes of [`Properties::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        self.map.iter().map(|(k, v)| k.len() + v.len() + 2).sum()
    }

    /// `key\x01value\x02` for every pair, in key order.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        for (key, value) in &self.map {
            wire::put_pair(&mut out, key, value);
        }
        out
    }

    /// Parses encoded properties. A missing final `\x02` is accepted; an empty pair,
    /// a pair without `\x01`, a duplicate key or invalid UTF-8 is an error.
    pub fn decode(encoded: &[u8]) -> Result<Self, StoreError> {
        let mut map = BTreeMap::new();
        for pair in wire::pairs(encoded) {
            let (key, value) = pair.map_err(from_wire)?;
            if map.insert(key.to_owned(), value.to_owned()).is_some() {
                return Err(invalid(key, "duplicate key"));
            }
        }
        Ok(Properties { map })
    }
}

/// The value of `key` in encoded properties, without building a map.
pub fn find<'a>(encoded: &'a [u8], key: &str) -> Result<Option<&'a str>, StoreError> {
    wire::find(encoded, key).map_err(from_wire)
}

/// [`validate`] for several keys at once: their values, in the order of `keys`.
pub fn validate_find<'a, const N: usize>(
    encoded: &'a [u8],
    keys: [&str; N],
) -> Result<[Option<&'a str>; N], StoreError> {
    wire::validate_find(encoded, keys).map_err(from_wire)
}

/// Checks encoded properties as a producer sent them (pairs with unique keys; their size is
/// checked when the record is encoded) and returns the value of `key`.
pub fn validate<'a>(encoded: &'a [u8], key: &str) -> Result<Option<&'a str>, StoreError> {
    wire::validate(encoded, key).map_err(from_wire)
}

/// The individual keys of a `KEYS` property value (empty entries skipped).
pub fn split_keys(keys: &str) -> impl Iterator<Item = &str> {
    keys.split(KEY_SEPARATOR).filter(|k| !k.is_empty())
}

fn check_text(key: &str, text: &str, reason: &'static str) -> Result<(), StoreError> {
    if text
        .bytes()
        .any(|b| b == NAME_VALUE_SEPARATOR || b == PROPERTY_SEPARATOR)
    {
        return Err(invalid(key, reason));
    }
    Ok(())
}

fn from_wire(error: wire::MalformedProperty) -> StoreError {
    StoreError::InvalidProperty {
        key: error.key,
        reason: error.reason,
    }
}

fn invalid(key: &str, reason: &'static str) -> StoreError {
    StoreError::InvalidProperty {
        key: key.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Properties {
        let mut p = Properties::new();
        p.insert(TAGS, "TagA").expect("insert");
        p.insert(KEYS, "k1 k2").expect("insert");
        p.insert(UNIQ_KEY, "C0A8").expect("insert");
        p
    }

    #[test]
    fn encodes_like_rocketmq_and_round_trips() {
        let p = sample();
        let bytes = p.encode();
        assert_eq!(
            bytes,
            b"KEYS\x01k1 k2\x02TAGS\x01TagA\x02UNIQ_KEY\x01C0A8\x02".to_vec()
        );
        assert_eq!(bytes.len(), p.encoded_len());
        assert_eq!(Properties::decode(&bytes).expect("decode"), p);
        assert_eq!(find(&bytes, TAGS).expect("find"), Some("TagA"));
        assert_eq!(find(&bytes, DELAY).expect("find"), None);
    }

    #[test]
    fn decode_accepts_missing_final_separator_and_empty() {
        let p = Properties::decode(b"A\x011\x02B\x012").expect("decode");
        assert_eq!(p.get("A"), Some("1"));
        assert_eq!(p.get("B"), Some("2"));
        assert!(Properties::decode(b"").expect("empty").is_empty());
    }

    #[test]
    fn separators_in_keys_or_values_are_rejected() {
        let mut p = Properties::new();
        assert!(matches!(
            p.insert("a\x01b", "v"),
            Err(StoreError::InvalidProperty { .. })
        ));
        assert!(matches!(
            p.insert("k", "v\x02"),
            Err(StoreError::InvalidProperty { .. })
        ));
        assert!(p.is_empty());
    }

    #[test]
    fn decode_refuses_what_the_wire_parser_refuses_and_duplicate_keys() {
        // The parser's cases are tested with it (`rocketraft_domain::properties`); this checks
        // that its errors, and decode's own duplicate check, become store errors.
        for bad in [&b"A\x02"[..], b"A\x011\x02A\x012\x02"] {
            assert!(
                matches!(
                    Properties::decode(bad),
                    Err(StoreError::InvalidProperty { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn split_keys_skips_empty_entries() {
        assert_eq!(split_keys("a  b ").collect::<Vec<_>>(), vec!["a", "b"]);
    }
}
