//! The ROCKETMQ header (serialize type 1): RocketMQ's own binary form of a command, sent by
//! Java clients started with `rocketmq.serialize.type=ROCKETMQ` and by Go clients that opt in.
//!
//! Layout, big-endian: code i16 | language u8 | version i16 | opaque i32 | flag i32 |
//! remark (i32 length + UTF-8) | extFields (i32 length of the map, then entries of i16 key
//! length + key, i32 value length + value).
//!
//! Invariant: decoding reads only through checked lengths, so no input panics, and none makes
//! it allocate beyond a small multiple of the header it was given: every length is checked
//! against the bytes that remain before anything is taken, and a negative one is an error.
//!
//! What Java's decoder tolerates is tolerated too: a zero-length remark is none, a zero-length
//! key or value is Java's `null` (the entry is dropped, and a null value hides an earlier one
//! of the same key), a later duplicate key wins, text that is not UTF-8 is read with
//! replacement characters, bytes after the map are ignored.

use bytes::{BufMut, BytesMut};

use crate::command::RemotingCommand;
use crate::ext::ExtFields;
use crate::frame::FRAME_BYTES_MAX;
use crate::language::LanguageCode;

/// Why a ROCKETMQ header cannot be read. The frame around it was sound, but nothing in the
/// header (not even its opaque) can be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BinaryHeaderError {
    /// The header ends inside a fixed-size field.
    #[error("ROCKETMQ header ends inside {field}: {needed} bytes needed, {remaining} left")]
    Truncated {
        field: &'static str,
        needed: usize,
        remaining: usize,
    },
    /// A length field is negative.
    #[error("ROCKETMQ header {field} length is negative: {length}")]
    NegativeLength { field: &'static str, length: i64 },
    /// A length field points past the end of the header (or of the map).
    #[error("ROCKETMQ header {field} length {length} is beyond the {remaining} bytes left")]
    LengthBeyondHeader {
        field: &'static str,
        length: usize,
        remaining: usize,
    },
}

/// Why a command cannot be written as a ROCKETMQ header: a value that does not fit its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BinaryEncodeError {
    /// `code` or `version` does not fit the header's `i16`.
    #[error("{field} {value} does not fit a ROCKETMQ header's i16")]
    OutOfRange { field: &'static str, value: i32 },
    /// A key is longer than an `i16` length, or a text longer than a frame.
    #[error("{field} of {bytes} bytes is too long for a ROCKETMQ header")]
    TooLong { field: &'static str, bytes: usize },
}

/// The command a ROCKETMQ header describes, with no body; the serialize type is left for the
/// frame to set.
pub(crate) fn decode(header: &[u8]) -> Result<RemotingCommand, BinaryHeaderError> {
    let mut reader = Reader { bytes: header };
    let code = i16::from_be_bytes(reader.array("code")?);
    let [language] = reader.array("language")?;
    let version = i16::from_be_bytes(reader.array("version")?);
    let opaque = i32::from_be_bytes(reader.array("opaque")?);
    let flag = i32::from_be_bytes(reader.array("flag")?);
    let remark_length = i32::from_be_bytes(reader.array("remark length")?);
    let remark = reader.text("remark", i64::from(remark_length))?;
    let fields_length = i32::from_be_bytes(reader.array("extFields length")?);
    let fields = reader.slice("extFields", i64::from(fields_length))?;
    Ok(RemotingCommand {
        code: i32::from(code),
        language: LanguageCode::from_code(language),
        version: i32::from(version),
        opaque,
        flag,
        remark,
        ext_fields: decode_fields(fields)?,
        ..RemotingCommand::default()
    })
}

/// Appends `command`'s ROCKETMQ header (not its body) to `out`.
pub(crate) fn encode(
    command: &RemotingCommand,
    out: &mut BytesMut,
) -> Result<(), BinaryEncodeError> {
    let code = narrow("code", command.code)?;
    let version = narrow("version", command.version)?;
    out.extend_from_slice(&code.to_be_bytes());
    out.put_u8(command.language.code());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&command.opaque.to_be_bytes());
    out.extend_from_slice(&command.flag.to_be_bytes());
    let remark = command.remark.as_deref().unwrap_or_default();
    out.extend_from_slice(&length_i32("remark", remark.len())?.to_be_bytes());
    out.extend_from_slice(remark.as_bytes());

    let fields_at = out.len();
    out.extend_from_slice(&[0; 4]);
    for (key, value) in command.ext_fields.iter() {
        let key_length = i16::try_from(key.len()).map_err(|_| BinaryEncodeError::TooLong {
            field: "extFields key",
            bytes: key.len(),
        })?;
        out.extend_from_slice(&key_length.to_be_bytes());
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(&length_i32("extFields value", value.len())?.to_be_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    let fields_length = length_i32("extFields", out.len() - fields_at - 4)?;
    out[fields_at..fields_at + 4].copy_from_slice(&fields_length.to_be_bytes());
    Ok(())
}

/// The entries of the map part.
fn decode_fields(bytes: &[u8]) -> Result<ExtFields, BinaryHeaderError> {
    let mut reader = Reader { bytes };
    let mut fields = ExtFields::new();
    while !reader.bytes.is_empty() {
        let key_length = i16::from_be_bytes(reader.array("extFields key length")?);
        let key = reader.text("extFields key", i64::from(key_length))?;
        let value_length = i32::from_be_bytes(reader.array("extFields value length")?);
        let value = reader.text("extFields value", i64::from(value_length))?;
        match (key, value) {
            (Some(key), Some(value)) => fields.insert(key, value),
            (Some(key), None) => fields.remove(&key),
            (None, _) => {}
        }
    }
    Ok(fields)
}

/// A cursor over header bytes that only moves by checked amounts.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], BinaryHeaderError> {
        let Some((head, rest)) = self.bytes.split_first_chunk::<N>() else {
            return Err(BinaryHeaderError::Truncated {
                field,
                needed: N,
                remaining: self.bytes.len(),
            });
        };
        self.bytes = rest;
        Ok(*head)
    }

    fn slice(&mut self, field: &'static str, length: i64) -> Result<&'a [u8], BinaryHeaderError> {
        let length = usize::try_from(length)
            .map_err(|_| BinaryHeaderError::NegativeLength { field, length })?;
        if length > self.bytes.len() {
            return Err(BinaryHeaderError::LengthBeyondHeader {
                field,
                length,
                remaining: self.bytes.len(),
            });
        }
        let (head, rest) = self.bytes.split_at(length);
        self.bytes = rest;
        Ok(head)
    }

    /// A length-prefixed text; `None` for length 0 (Java's `null`).
    fn text(
        &mut self,
        field: &'static str,
        length: i64,
    ) -> Result<Option<String>, BinaryHeaderError> {
        let bytes = self.slice(field, length)?;
        Ok((!bytes.is_empty()).then(|| String::from_utf8_lossy(bytes).into_owned()))
    }
}

fn narrow(field: &'static str, value: i32) -> Result<i16, BinaryEncodeError> {
    i16::try_from(value).map_err(|_| BinaryEncodeError::OutOfRange { field, value })
}

/// `bytes` as an `i32` length; longer than a frame cannot be sent anyway.
fn length_i32(field: &'static str, bytes: usize) -> Result<i32, BinaryEncodeError> {
    i32::try_from(bytes)
        .ok()
        .filter(|_| bytes <= FRAME_BYTES_MAX)
        .ok_or(BinaryEncodeError::TooLong { field, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::request;
    use rocketraft_domain::xorshift::Xorshift;

    /// Bytes of the fixed part: code, language, version, opaque, flag and the two lengths.
    const FIXED_BYTES: usize = 2 + 1 + 2 + 4 + 4 + 4 + 4;

    /// §1 of the brief: GET_ROUTEINFO_BY_TOPIC for topic "T", opaque 1, version 409.
    const ROUTE_REQUEST_HEADER: [u8; 33] = [
        0x00, 0x69, 0x00, 0x01, 0x99, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0c, 0x00,
        0x05, b't', b'o', b'p', b'i', b'c', 0, 0, 0, 1, b'T',
    ];

    fn encoded(command: &RemotingCommand) -> BytesMut {
        let mut out = BytesMut::new();
        encode(command, &mut out).expect("a command encodes");
        out
    }

    /// Decodes `bytes` and, when they are a header, checks that it encodes and decodes again
    /// to the same command (the language aside: an unknown byte goes out as OTHER).
    fn decode_never_panics(bytes: &[u8]) -> Result<(), BinaryHeaderError> {
        let mut command = decode(bytes)?;
        command.language = LanguageCode::from_code(command.language.code());
        assert_eq!(decode(&encoded(&command)), Ok(command), "{bytes:02x?}");
        Ok(())
    }

    #[test]
    fn the_briefs_route_request_decodes_and_encodes_to_the_same_bytes() {
        let command = decode(&ROUTE_REQUEST_HEADER).expect("the brief's header");
        assert_eq!(command.code, request::GET_ROUTEINFO_BY_TOPIC);
        assert_eq!(command.language, LanguageCode::Java);
        assert_eq!((command.version, command.opaque, command.flag), (409, 1, 0));
        assert_eq!(command.remark, None);
        assert_eq!(command.ext_fields.get("topic"), Some("T"));
        assert_eq!(encoded(&command), ROUTE_REQUEST_HEADER[..]);
    }

    #[test]
    fn a_header_round_trips_with_remark_unicode_and_fields() {
        let mut command = RemotingCommand {
            code: -2,
            language: LanguageCode::Rust,
            version: i32::from(i16::MAX),
            opaque: i32::MIN,
            flag: 3,
            remark: Some("ünïcödé ✓ \u{1}".into()),
            ..RemotingCommand::default()
        };
        command.ext_fields.insert("b", "2");
        command.ext_fields.insert("ключ", "значение");
        command.ext_fields.insert("a", "x".repeat(70_000));
        assert_eq!(decode(&encoded(&command)), Ok(command.clone()));

        command.remark = None;
        command.ext_fields = ExtFields::new();
        let bytes = encoded(&command);
        assert_eq!(bytes.len(), FIXED_BYTES);
        assert_eq!(decode(&bytes), Ok(command));
    }

    #[test]
    fn empty_texts_are_javas_null() {
        let mut command = RemotingCommand {
            remark: Some(String::new()),
            ..RemotingCommand::default()
        };
        command.ext_fields.insert("empty", "");
        command.ext_fields.insert("kept", "1");
        let decoded = decode(&encoded(&command)).expect("a header");
        assert_eq!(decoded.remark, None);
        assert_eq!(decoded.ext_fields.get("empty"), None);
        assert_eq!(decoded.ext_fields.get("kept"), Some("1"));
    }

    #[test]
    fn a_later_duplicate_key_wins_and_a_null_key_is_dropped() {
        let mut header = ROUTE_REQUEST_HEADER[..FIXED_BYTES - 4].to_vec();
        let entries: [(&[u8], &[u8]); 5] = [
            (b"topic", b"A"),
            (b"topic", b"B"),
            (b"", b"no key"),
            (b"gone", b"1"),
            (b"gone", b""),
        ];
        let mut map = Vec::new();
        for (key, value) in entries {
            map.extend_from_slice(&(key.len() as i16).to_be_bytes());
            map.extend_from_slice(key);
            map.extend_from_slice(&(value.len() as i32).to_be_bytes());
            map.extend_from_slice(value);
        }
        header.extend_from_slice(&(map.len() as i32).to_be_bytes());
        header.extend_from_slice(&map);
        header.extend_from_slice(b"ignored trailing bytes");

        let command = decode(&header).expect("a header");
        assert_eq!(command.ext_fields.get("topic"), Some("B"));
        assert_eq!(command.ext_fields.get("gone"), None);
        assert_eq!(command.ext_fields.get(""), None);
    }

    #[test]
    fn lengths_past_the_header_or_negative_are_typed_errors() {
        let with = |at: usize, bytes: &[u8]| {
            let mut header = ROUTE_REQUEST_HEADER.to_vec();
            header[at..at + bytes.len()].copy_from_slice(bytes);
            decode(&header)
        };
        let remark_at = 13;
        let fields_at = 17;
        assert_eq!(
            with(remark_at, &(-1i32).to_be_bytes()),
            Err(BinaryHeaderError::NegativeLength {
                field: "remark",
                length: -1
            })
        );
        assert_eq!(
            with(remark_at, &i32::MAX.to_be_bytes()),
            Err(BinaryHeaderError::LengthBeyondHeader {
                field: "remark",
                length: i32::MAX as usize,
                remaining: 16
            })
        );
        assert_eq!(
            with(fields_at, &13i32.to_be_bytes()),
            Err(BinaryHeaderError::LengthBeyondHeader {
                field: "extFields",
                length: 13,
                remaining: 12
            })
        );
        assert_eq!(
            with(fields_at + 4, &(-5i16).to_be_bytes()),
            Err(BinaryHeaderError::NegativeLength {
                field: "extFields key",
                length: -5
            })
        );
        assert_eq!(
            with(fields_at + 4, &6i16.to_be_bytes()),
            Err(BinaryHeaderError::LengthBeyondHeader {
                field: "extFields value",
                length: 0x154,
                remaining: 0
            }),
            "the key swallows a byte of the value's length"
        );
        assert!(matches!(
            with(fields_at + 11, &2i32.to_be_bytes()),
            Err(BinaryHeaderError::LengthBeyondHeader {
                field: "extFields value",
                ..
            })
        ));
    }

    #[test]
    fn every_truncation_of_a_header_is_an_error() {
        for end in 0..ROUTE_REQUEST_HEADER.len() {
            assert!(decode(&ROUTE_REQUEST_HEADER[..end]).is_err(), "{end} bytes");
        }
        assert!(decode(&ROUTE_REQUEST_HEADER).is_ok());
    }

    #[test]
    fn random_and_mutated_bytes_decode_to_a_header_or_an_error_without_panicking() {
        let seed = 0x5EED_0045;
        // Seeded, so a failure replays from its seed.
        let mut random = Xorshift::new(seed);
        let mut decoded = 0;
        for _ in 0..4000 {
            let length = random.below(64);
            let bytes: Vec<u8> = (0..length).map(|_| random.next_u64() as u8).collect();
            decoded += usize::from(decode_never_panics(&bytes).is_ok());
        }
        for _ in 0..4000 {
            let mut bytes = ROUTE_REQUEST_HEADER.to_vec();
            for _ in 0..=random.below(3) {
                let at = random.below(bytes.len());
                bytes[at] = random.next_u64() as u8;
            }
            bytes.truncate(bytes.len() - random.below(4));
            decoded += usize::from(decode_never_panics(&bytes).is_ok());
        }
        assert!(decoded > 0, "seed {seed:#x}: some mutations still decode");
    }

    #[test]
    fn values_that_do_not_fit_the_header_are_refused() {
        let command = RemotingCommand {
            code: i32::from(i16::MAX) + 1,
            ..RemotingCommand::default()
        };
        assert_eq!(
            encode(&command, &mut BytesMut::new()),
            Err(BinaryEncodeError::OutOfRange {
                field: "code",
                value: 32768
            })
        );
        let command = RemotingCommand {
            version: -40_000,
            ..RemotingCommand::default()
        };
        assert!(matches!(
            encode(&command, &mut BytesMut::new()),
            Err(BinaryEncodeError::OutOfRange {
                field: "version",
                ..
            })
        ));
        let mut command = RemotingCommand::default();
        command.ext_fields.insert("k".repeat(40_000), "v");
        assert_eq!(
            encode(&command, &mut BytesMut::new()),
            Err(BinaryEncodeError::TooLong {
                field: "extFields key",
                bytes: 40_000
            })
        );
    }
}
