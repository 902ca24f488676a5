//! `ExtFields`: a command's `extFields`, the text map that carries its header class (RocketMQ
//! copies every field of a request or response header into it as `value.toString()`), and
//! the typed reading of it that the header classes need.
//!
//! Invariant: every value is text, whatever the sender wrote (the header decoders turn JSON
//! numbers and booleans into text), and no value is empty of meaning: a JSON `null` and a
//! zero-length ROCKETMQ value are absent keys, as Java reads them. Keys are kept sorted, so a
//! command encodes to the same bytes every time.
//!
//! A field that is missing or does not parse is an [`ExtFieldError`] naming the field and the
//! value: the request was framed well, so the endpoint answers it with `SYSTEM_ERROR` and the
//! error's text as remark (as a Java broker does) instead of closing the connection.

use std::collections::BTreeMap;
use std::str::FromStr;

/// The most characters of a bad value an [`ExtFieldError`] repeats: the error becomes a
/// reply's remark, which must not echo a megabyte a client sent.
pub const BAD_VALUE_SHOWN_CHARS_MAX: usize = 64;

/// A command's `extFields`, sorted by key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExtFields(BTreeMap<String, String>);

/// Why an `extFields` value cannot be read as its header class declares it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtFieldError {
    /// A required field (`@CFNotNull` in RocketMQ) is absent.
    #[error("extFields.{field} is missing")]
    Missing { field: &'static str },
    /// The value is not a decimal integer of the field's width (Java `parseInt`/`parseLong`).
    #[error("extFields.{field}: {value:?} is not a {bits}-bit integer")]
    NotAnInteger {
        field: &'static str,
        /// The value, cut at [`BAD_VALUE_SHOWN_CHARS_MAX`] characters.
        value: String,
        bits: u32,
    },
    /// The value is neither `true` nor `false` (in any case).
    #[error("extFields.{field}: {value:?} is not a boolean")]
    NotABoolean {
        field: &'static str,
        /// The value, cut at [`BAD_VALUE_SHOWN_CHARS_MAX`] characters.
        value: String,
    },
}

impl ExtFields {
    /// No fields.
    pub fn new() -> ExtFields {
        ExtFields::default()
    }

    /// The value of `field`, if present.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.0.get(field).map(String::as_str)
    }

    /// Sets `field` to `value`, replacing any earlier value. A header field goes in as its
    /// Java `toString()` text: `5`, `true`, `TagA`.
    pub fn insert(&mut self, field: impl Into<String>, value: impl Into<String>) {
        self.0.insert(field.into(), value.into());
    }

    /// The value of a required text field.
    pub fn required_str(&self, field: &'static str) -> Result<&str, ExtFieldError> {
        self.get(field).ok_or(ExtFieldError::Missing { field })
    }

    /// The value of a required `Integer` field.
    pub fn required_i32(&self, field: &'static str) -> Result<i32, ExtFieldError> {
        self.optional_i32(field)?
            .ok_or(ExtFieldError::Missing { field })
    }

    /// The value of an optional `Integer` field.
    pub fn optional_i32(&self, field: &'static str) -> Result<Option<i32>, ExtFieldError> {
        self.integer(field, 32)
    }

    /// The value of a required `Long` field.
    pub fn required_i64(&self, field: &'static str) -> Result<i64, ExtFieldError> {
        self.optional_i64(field)?
            .ok_or(ExtFieldError::Missing { field })
    }

    /// The value of an optional `Long` field.
    pub fn optional_i64(&self, field: &'static str) -> Result<Option<i64>, ExtFieldError> {
        self.integer(field, 64)
    }

    /// The value of an optional `boolean`/`Boolean` field: `true` or `false` in any case, or
    /// `1` or `0`, which the C++ client (1.2.x, bundled by PyPI `rocketmq`) sends as JSON
    /// numbers. (Java reads anything but `true` as false; a client that sends something else
    /// has a bug worth telling it about.)
    pub fn optional_bool(&self, field: &'static str) -> Result<Option<bool>, ExtFieldError> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        if value.eq_ignore_ascii_case("true") || value == "1" {
            Ok(Some(true))
        } else if value.eq_ignore_ascii_case("false") || value == "0" {
            Ok(Some(false))
        } else {
            Err(ExtFieldError::NotABoolean {
                field,
                value: shown(value),
            })
        }
    }

    /// The fields in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
    }

    /// Drops `field`: what a `null` or empty value does to an earlier one of the same key.
    pub(crate) fn remove(&mut self, field: &str) {
        self.0.remove(field);
    }

    fn integer<T: FromStr>(
        &self,
        field: &'static str,
        bits: u32,
    ) -> Result<Option<T>, ExtFieldError> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        value
            .parse()
            .map(Some)
            .map_err(|_| ExtFieldError::NotAnInteger {
                field,
                value: shown(value),
                bits,
            })
    }
}

/// `value` cut at [`BAD_VALUE_SHOWN_CHARS_MAX`] characters, marked with `…` when cut.
fn shown(value: &str) -> String {
    match value.char_indices().nth(BAD_VALUE_SHOWN_CHARS_MAX) {
        Some((cut, _)) => format!("{}…", &value[..cut]),
        None => value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> ExtFields {
        let mut fields = ExtFields::new();
        for (key, value) in pairs {
            fields.insert(*key, *value);
        }
        fields
    }

    #[test]
    fn typed_fields_parse_as_java_parses_them() {
        let header = fields(&[
            ("queueId", "3"),
            ("queueOffset", "-9000000000"),
            ("plus", "+7"),
            ("unitMode", "false"),
            ("batch", "TRUE"),
            ("topic", "T"),
            ("cppFalse", "0"),
            ("cppTrue", "1"),
        ]);
        assert_eq!(header.required_i32("queueId"), Ok(3));
        assert_eq!(header.required_i64("queueOffset"), Ok(-9_000_000_000));
        assert_eq!(header.optional_i32("plus"), Ok(Some(7)));
        assert_eq!(header.optional_bool("unitMode"), Ok(Some(false)));
        assert_eq!(header.optional_bool("batch"), Ok(Some(true)));
        assert_eq!(header.required_str("topic"), Ok("T"));
        assert_eq!(header.optional_i64("absent"), Ok(None));
        assert_eq!(header.optional_bool("absent"), Ok(None));
        assert_eq!(header.optional_bool("cppFalse"), Ok(Some(false)));
        assert_eq!(header.optional_bool("cppTrue"), Ok(Some(true)));
    }

    #[test]
    fn a_bad_field_names_the_field_and_the_value() {
        let header = fields(&[
            ("queueId", "abc"),
            ("sysFlag", "99999999999"),
            ("batch", "yes"),
        ]);

        let error = header.required_i32("queueId").expect_err("not a number");
        assert_eq!(
            error.to_string(),
            r#"extFields.queueId: "abc" is not a 32-bit integer"#
        );
        let error = header.optional_i32("sysFlag").expect_err("too wide");
        assert_eq!(
            error.to_string(),
            r#"extFields.sysFlag: "99999999999" is not a 32-bit integer"#
        );
        assert_eq!(header.optional_i64("sysFlag"), Ok(Some(99_999_999_999)));
        let error = header.optional_bool("batch").expect_err("not a boolean");
        assert_eq!(
            error.to_string(),
            r#"extFields.batch: "yes" is not a boolean"#
        );
        let error = header.required_str("topic").expect_err("absent");
        assert_eq!(error.to_string(), "extFields.topic is missing");
        let error = header.required_i64("commitOffset").expect_err("absent");
        assert_eq!(
            error,
            ExtFieldError::Missing {
                field: "commitOffset"
            }
        );
    }

    #[test]
    fn an_empty_or_spaced_number_is_not_an_integer() {
        let header = fields(&[("empty", ""), ("spaced", " 5")]);
        assert!(header.optional_i32("empty").is_err());
        assert!(header.optional_i64("spaced").is_err());
    }

    #[test]
    fn a_long_bad_value_is_cut_in_the_error() {
        let long = "é".repeat(1000);
        let header = fields(&[("queueId", &long)]);
        let Err(ExtFieldError::NotAnInteger { value, .. }) = header.optional_i32("queueId") else {
            panic!("a long text is not an integer");
        };
        assert_eq!(value.chars().count(), BAD_VALUE_SHOWN_CHARS_MAX + 1);
        assert!(value.ends_with('…'));
    }
}
