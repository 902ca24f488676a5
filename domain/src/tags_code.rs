//! Tags code: the 64-bit filter hash a ConsumeQueue unit carries for its message's tag.
//!
//! Invariant: identical to RocketMQ, i.e. Java `String.hashCode()` of the tag computed over
//! UTF-16 code units with wrapping 32-bit arithmetic, sign-extended to `i64`; no tag = 0.
//! Consumers filter by comparing these codes, so a different hash would break filtering for
//! every existing client.

/// Java `String.hashCode()` of `tag`, sign-extended; 0 for an empty tag. Inline: every stored
/// message's dispatch computes one, in another crate.
#[inline]
pub fn tags_code(tag: &str) -> i64 {
    let hash = tag.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    i64::from(hash)
}

/// Tags code of an optional tag: absent = 0.
#[inline]
pub fn tags_code_of(tag: Option<&str>) -> i64 {
    tag.map_or(0, tags_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_a_matches_java() {
        // 'T'=84, 'a'=97, 'g'=103, 'A'=65:
        // 84 -> 84*31+97 = 2701 -> 2701*31+103 = 83834 -> 83834*31+65 = 2598919.
        assert_eq!(tags_code("TagA"), 2_598_919);
    }

    #[test]
    fn known_collision_aa_bb() {
        // "Aa": 65*31+97 = 2112; "BB": 66*31+66 = 2112.
        assert_eq!(tags_code("Aa"), 2112);
        assert_eq!(tags_code("BB"), 2112);
    }

    #[test]
    fn empty_and_absent_are_zero() {
        assert_eq!(tags_code(""), 0);
        assert_eq!(tags_code_of(None), 0);
        assert_eq!(tags_code_of(Some("Aa")), 2112);
    }

    #[test]
    fn non_bmp_char_hashes_its_surrogate_pair() {
        // U+1F600 is the UTF-16 pair 0xD83D 0xDE00: 0xD83D*31 + 0xDE00
        // = 55357*31 + 56832 = 1716067 + 56832 = 1772899 (Java "\uD83D\uDE00".hashCode()).
        assert_eq!(tags_code("\u{1F600}"), 1_772_899);
    }

    #[test]
    fn negative_hash_is_sign_extended() {
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE in Java.
        assert_eq!(tags_code("polygenelubricants"), i64::from(i32::MIN));
        // Arithmetic wraps: "TagTagTagTag" overflows i32 several times (Java gives 449108864).
        assert_eq!(tags_code("TagTagTagTag"), 449_108_864);
    }
}
