//! Message properties on the wire and in the CommitLog: RocketMQ's encoding
//! (`MessageDecoder.messageProperties2String`), every pair written as `key \x01 value \x02`.
//!
//! Producers send properties already encoded, so the broker copies them into the record as
//! they are, and cloning a message for a retry clones no map. Neither a key nor a value may
//! contain a separator; the broker refuses a message whose properties break that.

/// Separates a key from its value.
pub const NAME_VALUE_SEPARATOR: u8 = 0x01;
/// Terminates a key/value pair.
pub const PROPERTY_SEPARATOR: u8 = 0x02;

/// Why encoded properties cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedProperty {
    /// The key, or the pair's text when it has no key.
    pub key: String,
    pub reason: &'static str,
}

impl std::fmt::Display for MalformedProperty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "property {:?}: {}", self.key, self.reason)
    }
}

impl std::error::Error for MalformedProperty {}

/// Appends one `key \x01 value \x02` pair. The caller keeps keys and values free of the
/// separators (the broker checks).
pub fn put_pair(out: &mut Vec<u8>, key: &str, value: &str) {
    out.extend_from_slice(key.as_bytes());
    out.push(NAME_VALUE_SEPARATOR);
    out.extend_from_slice(value.as_bytes());
    out.push(PROPERTY_SEPARATOR);
}

/// The pairs of encoded properties, in order, without copying. A missing final `\x02` is
/// accepted; an empty pair, a pair without `\x01`, a value holding `\x01` or invalid UTF-8 is
/// an error (and ends the iteration).
pub fn pairs(encoded: &[u8]) -> impl Iterator<Item = Result<(&str, &str), MalformedProperty>> + '_ {
    let body = encoded
        .strip_suffix(&[PROPERTY_SEPARATOR])
        .unwrap_or(encoded);
    body.split(|b| *b == PROPERTY_SEPARATOR)
        .filter(move |_| !body.is_empty())
        .map(|pair| {
            let text = std::str::from_utf8(pair)
                .map_err(|_utf8| malformed(&String::from_utf8_lossy(pair), "not UTF-8"))?;
            let (key, value) = text
                .split_once(char::from(NAME_VALUE_SEPARATOR))
                .ok_or_else(|| malformed(text, "pair without \\x01 separator"))?;
            if value.as_bytes().contains(&NAME_VALUE_SEPARATOR) {
                return Err(malformed(key, "value contains \\x01"));
            }
            Ok((key, value))
        })
}

/// The value of `key` in encoded properties. Only the pair that holds `key` is read as
/// text and checked (a value holding `\x01` or invalid UTF-8 is an error): records in the
/// CommitLog were checked whole by [`validate`] when they were sent, and looking up a
/// property is on the path of every record dispatched.
pub fn find<'a>(encoded: &'a [u8], key: &str) -> Result<Option<&'a str>, MalformedProperty> {
    for pair in encoded.split(|b| *b == PROPERTY_SEPARATOR) {
        let Some(value) = pair
            .strip_prefix(key.as_bytes())
            .and_then(|rest| rest.strip_prefix(&[NAME_VALUE_SEPARATOR]))
        else {
            continue;
        };
        if value.contains(&NAME_VALUE_SEPARATOR) {
            return Err(malformed(key, "value contains \\x01"));
        }
        return std::str::from_utf8(value)
            .map(Some)
            .map_err(|_utf8| malformed(key, "not UTF-8"));
    }
    Ok(None)
}

/// Checks that `encoded` reads as pairs with unique keys, and returns the value of `key`:
/// a broker checks what a producer sent and learns what it must act on in one pass.
pub fn validate<'a>(encoded: &'a [u8], key: &str) -> Result<Option<&'a str>, MalformedProperty> {
    let [found] = validate_find(encoded, [key])?;
    Ok(found)
}

/// [`validate`] for several keys at once: their values, in the order of `keys`.
pub fn validate_find<'a, const N: usize>(
    encoded: &'a [u8],
    keys: [&str; N],
) -> Result<[Option<&'a str>; N], MalformedProperty> {
    // The keys seen so far: on the stack for as many as a message usually has, so checking
    // a send or a pulled message allocates nothing.
    let mut seen_inline = [""; SEEN_INLINE];
    let mut seen_beyond: Vec<&str> = Vec::new();
    let mut found = [None; N];
    for (seen, pair) in pairs(encoded).enumerate() {
        let (k, v) = pair?;
        if seen_inline[..seen.min(SEEN_INLINE)].contains(&k) || seen_beyond.contains(&k) {
            return Err(malformed(k, "duplicate key"));
        }
        match seen_inline.get_mut(seen) {
            Some(slot) => *slot = k,
            None => seen_beyond.push(k),
        }
        if let Some(at) = keys.iter().position(|key| *key == k) {
            found[at] = Some(v);
        }
    }
    Ok(found)
}

/// Keys [`validate_find`] remembers without allocating.
const SEEN_INLINE: usize = 16;

fn malformed(key: &str, reason: &'static str) -> MalformedProperty {
    MalformedProperty {
        key: key.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_read_what_put_pair_wrote() {
        let mut out = Vec::new();
        put_pair(&mut out, "TAGS", "TagA");
        put_pair(&mut out, "KEYS", "k1 k2");
        assert_eq!(out, b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02");
        let read: Vec<_> = pairs(&out).collect::<Result<_, _>>().expect("pairs");
        assert_eq!(read, [("TAGS", "TagA"), ("KEYS", "k1 k2")]);
        assert_eq!(find(&out, "KEYS"), Ok(Some("k1 k2")));
        assert_eq!(find(&out, "DELAY"), Ok(None));
        assert_eq!(pairs(b"").count(), 0);
        assert_eq!(
            validate_find(b"A\x011\x02B\x012", ["C", "B", "A"]),
            Ok([None, Some("2"), Some("1")])
        );
        assert_eq!(
            validate(b"A\x011\x02B\x012", "B"),
            Ok(Some("2")),
            "final \\x02 optional"
        );
    }

    #[test]
    fn find_reads_only_the_pair_it_returns() {
        assert_eq!(find(b"A\x011\x02B\x012\x02", "B"), Ok(Some("2")));
        assert_eq!(
            find(b"AB\x011\x02B\x012", "B"),
            Ok(Some("2")),
            "a longer key"
        );
        assert_eq!(
            find(b"BA\x011\x02", "B"),
            Ok(None),
            "a key that starts alike"
        );
        assert_eq!(find(b"A\x01\xff\x02B\x012\x02", "B"), Ok(Some("2")));
        assert_eq!(find(b"B\x01\x02", "B"), Ok(Some("")));
        assert!(find(b"B\x01\xff\x02", "B").is_err());
        assert!(find(b"B\x011\x01x\x02", "B").is_err());
    }

    #[test]
    fn malformed_encodings_are_refused() {
        for bad in [
            &b"A\x02"[..],
            b"A\x011\x02\x02",
            b"A\x011\x01x\x02",
            b"A\x011\x02A\x012\x02",
            b"A\x01\xff\x02",
        ] {
            assert!(validate(bad, "A").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn duplicates_are_found_among_more_keys_than_are_remembered_inline() {
        let encoded = |keys: &[usize]| {
            let mut out = Vec::new();
            for key in keys {
                put_pair(&mut out, &format!("K{key}"), "v");
            }
            out
        };
        let distinct: Vec<usize> = (0..SEEN_INLINE * 2).collect();
        assert_eq!(
            validate(&encoded(&distinct), "K20"),
            Ok(Some("v")),
            "distinct keys past the inline ones"
        );
        for repeated in [3, SEEN_INLINE + 1] {
            let mut keys = distinct.clone();
            keys.push(repeated);
            let error = validate(&encoded(&keys), "A").expect_err("a repeated key");
            assert_eq!(error.key, format!("K{repeated}"));
        }
    }
}
