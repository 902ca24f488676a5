//! A received message's properties, read in place from the bytes they arrived in
//! (RocketMQ's `key \x01 value \x02` encoding, `rocketraft_domain::properties`).
//!
//! Pulling a message copies and allocates none of its properties, and cloning one clones a
//! reference count instead of a map. Invariant: the bytes are well-formed pairs with unique
//! keys; whatever breaks that is repaired once, when the properties are built.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use rocketraft_domain::properties as wire;
use rocketraft_domain::properties::MalformedProperty;

use crate::message::encode_properties;

/// Key/value properties of a received message.
#[derive(Clone, Default)]
pub struct Properties {
    encoded: Bytes,
}

impl Properties {
    /// Properties as they arrived, and the values of `keys` among them, read in the same
    /// pass. Malformed pairs are left out and reported to `skipped`; of pairs that share a
    /// key the last wins. Well-formed bytes (what a broker stores) are kept as they are.
    pub(crate) fn from_wire<const N: usize>(
        encoded: Bytes,
        keys: [&str; N],
        mut skipped: impl FnMut(&MalformedProperty),
    ) -> (Properties, [Option<String>; N]) {
        if let Ok(found) = wire::validate_find(&encoded, keys) {
            let found = found.map(|value| value.map(str::to_owned));
            return (Properties { encoded }, found);
        }
        let kept =
            wire::pairs(&encoded).filter_map(|pair| pair.map_err(|error| skipped(&error)).ok());
        let properties: Properties = kept.collect();
        let found = keys.map(|key| properties.get(key).map(str::to_owned));
        (properties, found)
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        // Checked when built: a lookup cannot fail.
        wire::find(&self.encoded, key).ok().flatten()
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Every pair, in the order they arrived.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        wire::pairs(&self.encoded).filter_map(Result::ok)
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The encoded bytes, as a broker takes them in a `SendRequest`.
    pub fn encoded(&self) -> &Bytes {
        &self.encoded
    }
}

/// Pairs in any order; of pairs that share a key the last wins.
impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Properties {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Properties {
        let pairs: Vec<(K, V)> = pairs.into_iter().collect();
        let unique: BTreeMap<&str, &str> = pairs
            .iter()
            .map(|(key, value)| (key.as_ref(), value.as_ref()))
            .collect();
        Properties {
            encoded: encode_properties(unique.iter().map(|(key, value)| (*key, *value))),
        }
    }
}

/// Equal when they hold the same pairs, in any order.
impl PartialEq for Properties {
    fn eq(&self, other: &Properties) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .all(|(key, value)| other.get(key) == Some(value))
    }
}

impl Eq for Properties {}

impl fmt::Debug for Properties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl std::ops::Index<&str> for Properties {
    type Output = str;

    /// The value of `key`; panics if it is not set (as a map's index does).
    fn index(&self, key: &str) -> &str {
        self.get(key)
            .unwrap_or_else(|| panic!("no property {key:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skipped_of(encoded: &'static [u8]) -> (Properties, Vec<String>) {
        let mut skipped = Vec::new();
        let (properties, []) = Properties::from_wire(Bytes::from_static(encoded), [], |error| {
            skipped.push(error.key.clone())
        });
        (properties, skipped)
    }

    #[test]
    fn well_formed_properties_are_read_in_place() {
        let (properties, skipped) = skipped_of(b"TAGS\x01TagA\x02UNIQ_KEY\x01ID1\x02");
        assert!(skipped.is_empty());
        assert_eq!(properties.get("TAGS"), Some("TagA"));
        assert_eq!(&properties["UNIQ_KEY"], "ID1");
        assert_eq!(properties.get("TAG"), None, "a key is matched whole");
        assert!(!properties.contains_key("KEYS"));
        assert_eq!(properties.len(), 2);
        let pairs: Vec<_> = properties.iter().collect();
        assert_eq!(pairs, [("TAGS", "TagA"), ("UNIQ_KEY", "ID1")]);
        assert_eq!(
            properties.encoded().as_ptr(),
            properties.clone().encoded().as_ptr(),
            "a clone shares the bytes"
        );
        assert_eq!(
            format!("{properties:?}"),
            r#"{"TAGS": "TagA", "UNIQ_KEY": "ID1"}"#
        );
    }

    #[test]
    fn the_values_asked_for_are_read_in_the_same_pass() {
        for encoded in [
            &b"TAGS\x01TagA\x02UNIQ_KEY\x01ID1\x02"[..],
            b"TAGS\x01TagA\x02UNIQ_KEY\x01ID1\x02X",
        ] {
            let (_, found) = Properties::from_wire(
                Bytes::copy_from_slice(encoded),
                ["UNIQ_KEY", "KEYS", "TAGS"],
                |_| {},
            );
            assert_eq!(
                found,
                [Some("ID1".to_owned()), None, Some("TagA".to_owned())]
            );
        }
    }

    #[test]
    fn malformed_pairs_are_skipped_and_a_repeated_key_keeps_its_last_value() {
        let (properties, skipped) = skipped_of(b"A\x011\x02B\x02C\x01\xff\x02A\x012\x02D\x014");
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert_eq!(skipped[0], "B");
        assert_eq!(properties, [("A", "2"), ("D", "4")].into_iter().collect());
        assert_eq!(properties.len(), 2);
    }

    #[test]
    fn equality_ignores_order() {
        let ab: Properties = [("A", "1"), ("B", "2")].into_iter().collect();
        let (ba, _) = skipped_of(b"B\x012\x02A\x011\x02");
        assert_eq!(ab, ba);
        let (other, _) = skipped_of(b"B\x012\x02A\x019\x02");
        assert_ne!(ab, other);
        assert_ne!(ab, Properties::default());
        assert!(Properties::default().is_empty());
        let (separator_only, skipped) = skipped_of(b"\x02");
        assert!(skipped.is_empty());
        assert!(separator_only.is_empty(), "no pair");
        assert_eq!(separator_only, Properties::default());
    }
}
