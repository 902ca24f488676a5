//! `RemotingCodec`: the frames of a remoting connection, decoded into and encoded from
//! [`RemotingCommand`]s, for `tokio_util::codec::Framed`.
//!
//! A frame, big-endian: `length: i32` (the bytes after this field), then an `i32` whose high
//! byte is the [`SerializeType`] and whose low 24 bits are the header length, the header, and
//! the body (the rest of the frame).
//!
//! Invariants: no frame longer than [`FRAME_BYTES_MAX`] is buffered or written; a length is
//! judged as soon as its bytes arrive, before the rest of the frame is waited for.
//!
//! **A decode error closes the connection.** Once a length is wrong the stream has no frame
//! boundary left to resume at, and once a header is unreadable nothing in it (not even the
//! opaque a reply would need) can be trusted. A Java broker closes the channel in both cases
//! and sends nothing. A request that is well framed but has a bad field value is not a decode
//! error: it decodes, and its handler answers `SYSTEM_ERROR` (see [`crate::ExtFieldError`]).

use bytes::{BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::binary_header::{self, BinaryEncodeError, BinaryHeaderError};
use crate::command::{RemotingCommand, SerializeType};
use crate::json_header;

/// The longest frame, its length field included: RocketMQ's default
/// (`com.rocketmq.remoting.frameMaxLength`), so the length field says at most 16_777_212.
pub const FRAME_BYTES_MAX: usize = 16 * 1024 * 1024;

/// The first byte of every frame: its length field's high byte, 0 as a frame is shorter than
/// 2^24 bytes. HTTP/2's preface opens with `P` and TLS with 0x16, so a server tells a
/// remoting connection from theirs by it.
pub const FRAME_FIRST_BYTE: u8 = 0x00;
const _: () = assert!(FRAME_BYTES_MAX - LENGTH_BYTES < 1 << 24);

/// Bytes of the frame's length field.
const LENGTH_BYTES: usize = 4;
/// Bytes of the length field and the serialize-type-and-header-length field.
const PREFIX_BYTES: usize = LENGTH_BYTES + 4;
/// The header length's bits in the second field.
const HEADER_BYTES_MASK: u32 = 0x00FF_FFFF;
/// Where the serialize type sits in the second field.
const SERIALIZE_TYPE_SHIFT: u32 = 24;
/// The most room a partial frame reserves ahead of its bytes: a peer that announces a long
/// frame makes the buffer hold what it sends, not what it announces.
const RESERVE_AHEAD_BYTES_MAX: usize = 64 * 1024;

// Any header that fits in a frame fits in the 24-bit header length, and any frame length fits
// the i32 length field: the casts in `encode` cannot truncate.
const _: () = assert!(FRAME_BYTES_MAX - PREFIX_BYTES <= HEADER_BYTES_MASK as usize);
const _: () = assert!(FRAME_BYTES_MAX <= i32::MAX as usize);

/// Decodes and encodes remoting frames. It keeps no state between frames.
#[derive(Debug, Clone, Copy, Default)]
pub struct RemotingCodec;

/// Why the bytes of a connection are not a remoting frame. The caller closes the connection.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The length field is negative.
    #[error("frame length {length} is negative")]
    NegativeLength { length: i32 },
    /// The frame is longer than [`FRAME_BYTES_MAX`].
    #[error("a frame of {frame_bytes} bytes is longer than the maximum of {FRAME_BYTES_MAX}")]
    FrameTooLong { frame_bytes: usize },
    /// The length field leaves no room for the header length field.
    #[error("frame length {length} leaves no room for the header length")]
    FrameTooShort { length: i32 },
    /// The header length is more than the frame holds after it.
    #[error("header length {header_bytes} is beyond the frame's {available} bytes")]
    HeaderLengthBeyondFrame {
        header_bytes: usize,
        available: usize,
    },
    /// The serialize type byte is neither JSON (0) nor ROCKETMQ (1).
    #[error("unknown serialize type {byte}")]
    UnknownSerializeType { byte: u8 },
    /// The JSON header is not a command.
    #[error("undecodable JSON header")]
    JsonHeader(#[source] serde_json::Error),
    /// The ROCKETMQ header is not a command.
    #[error(transparent)]
    BinaryHeader(#[from] BinaryHeaderError),
    /// Reading the connection failed.
    #[error("reading the connection")]
    Io(#[from] std::io::Error),
}

/// Why a command cannot be written as a frame. Nothing of it is written.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// The frame would be longer than [`FRAME_BYTES_MAX`].
    #[error("a frame of {frame_bytes} bytes is longer than the maximum of {FRAME_BYTES_MAX}")]
    FrameTooLong { frame_bytes: usize },
    /// A value does not fit the ROCKETMQ header.
    #[error(transparent)]
    BinaryHeader(#[from] BinaryEncodeError),
    /// The JSON header could not be written.
    #[error("writing the JSON header")]
    JsonHeader(#[source] serde_json::Error),
    /// Writing the connection failed.
    #[error("writing the connection")]
    Io(#[from] std::io::Error),
}

impl Decoder for RemotingCodec {
    type Item = RemotingCommand;
    type Error = DecodeError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<RemotingCommand>, DecodeError> {
        let Some(length) = src.first_chunk::<LENGTH_BYTES>() else {
            return Ok(None);
        };
        let frame_bytes = frame_bytes(i32::from_be_bytes(*length))?;
        let Some(type_and_header) = src.get(LENGTH_BYTES..).and_then(<[u8]>::first_chunk::<4>)
        else {
            reserve_ahead(src, frame_bytes);
            return Ok(None);
        };
        let (serialize_type, header_bytes) =
            header_of(u32::from_be_bytes(*type_and_header), frame_bytes)?;
        if src.len() < frame_bytes {
            reserve_ahead(src, frame_bytes);
            return Ok(None);
        }

        // `frame_bytes >= PREFIX_BYTES` and `header_bytes <= frame_bytes - PREFIX_BYTES`.
        let mut header = src.split_to(frame_bytes).freeze().split_off(PREFIX_BYTES);
        let body = header.split_off(header_bytes);
        let mut command = match serialize_type {
            SerializeType::Json => json_header::decode(&header).map_err(DecodeError::JsonHeader)?,
            SerializeType::RocketMq => binary_header::decode(&header)?,
        };
        command.body = body;
        command.serialize_type = serialize_type;
        Ok(Some(command))
    }
}

/// Makes room for more of a frame of `frame_bytes`, at most [`RESERVE_AHEAD_BYTES_MAX`].
fn reserve_ahead(src: &mut BytesMut, frame_bytes: usize) {
    src.reserve(
        frame_bytes
            .saturating_sub(src.len())
            .min(RESERVE_AHEAD_BYTES_MAX),
    );
}

impl Encoder<RemotingCommand> for RemotingCodec {
    type Error = EncodeError;

    fn encode(&mut self, command: RemotingCommand, dst: &mut BytesMut) -> Result<(), EncodeError> {
        let start = dst.len();
        let written = write_frame(&command, dst, start);
        if written.is_err() {
            dst.truncate(start);
        }
        written
    }
}

/// Appends `command`'s frame to `dst`, which held `start` bytes before it.
fn write_frame(
    command: &RemotingCommand,
    dst: &mut BytesMut,
    start: usize,
) -> Result<(), EncodeError> {
    dst.put_bytes(0, PREFIX_BYTES);
    match command.serialize_type {
        SerializeType::Json => {
            json_header::encode(command, dst).map_err(EncodeError::JsonHeader)?;
        }
        SerializeType::RocketMq => binary_header::encode(command, dst)?,
    }
    let header_bytes = dst.len() - start - PREFIX_BYTES;
    let frame_bytes = PREFIX_BYTES + header_bytes + command.body.len();
    if frame_bytes > FRAME_BYTES_MAX {
        return Err(EncodeError::FrameTooLong { frame_bytes });
    }
    let length = (frame_bytes - LENGTH_BYTES) as u32;
    let type_and_header =
        (u32::from(command.serialize_type.byte()) << SERIALIZE_TYPE_SHIFT) | header_bytes as u32;
    dst[start..start + LENGTH_BYTES].copy_from_slice(&length.to_be_bytes());
    dst[start + LENGTH_BYTES..start + PREFIX_BYTES].copy_from_slice(&type_and_header.to_be_bytes());
    dst.extend_from_slice(&command.body);
    Ok(())
}

/// The bytes of the frame whose length field says `length`, if it may be read.
fn frame_bytes(length: i32) -> Result<usize, DecodeError> {
    let after_length =
        usize::try_from(length).map_err(|_| DecodeError::NegativeLength { length })?;
    let frame_bytes = LENGTH_BYTES + after_length;
    if frame_bytes > FRAME_BYTES_MAX {
        return Err(DecodeError::FrameTooLong { frame_bytes });
    }
    if frame_bytes < PREFIX_BYTES {
        return Err(DecodeError::FrameTooShort { length });
    }
    Ok(frame_bytes)
}

/// The serialize type and header length that the second field of a `frame_bytes` frame gives.
fn header_of(
    type_and_header: u32,
    frame_bytes: usize,
) -> Result<(SerializeType, usize), DecodeError> {
    let byte = (type_and_header >> SERIALIZE_TYPE_SHIFT) as u8;
    let serialize_type =
        SerializeType::from_byte(byte).ok_or(DecodeError::UnknownSerializeType { byte })?;
    let header_bytes = (type_and_header & HEADER_BYTES_MASK) as usize;
    let available = frame_bytes - PREFIX_BYTES;
    if header_bytes > available {
        return Err(DecodeError::HeaderLengthBeyondFrame {
            header_bytes,
            available,
        });
    }
    Ok((serialize_type, header_bytes))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::codes::request;
    use crate::ext::ExtFields;
    use crate::language::LanguageCode;
    use rocketraft_domain::xorshift::Xorshift;

    /// §1 of the brief: a Java 4.9.x GET_ROUTEINFO_BY_TOPIC for topic "T", JSON header.
    const ROUTE_REQUEST_JSON: &str = r#"{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":409}"#;
    /// §1 of the brief: the same request with a ROCKETMQ header, the whole frame.
    const ROUTE_REQUEST_ROCKETMQ: [u8; 41] = [
        0x00, 0x00, 0x00, 0x25, 0x01, 0x00, 0x00, 0x21, 0x00, 0x69, 0x00, 0x01, 0x99, 0x00, 0x00,
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x00,
        0x05, b't', b'o', b'p', b'i', b'c', 0x00, 0x00, 0x00, 0x01, b'T',
    ];

    fn route_request_json_frame() -> Vec<u8> {
        let mut frame = vec![0x00, 0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x7b];
        frame.extend_from_slice(ROUTE_REQUEST_JSON.as_bytes());
        frame
    }

    fn route_request(serialize_type: SerializeType) -> RemotingCommand {
        let mut ext_fields = ExtFields::new();
        ext_fields.insert("topic", "T");
        RemotingCommand {
            code: request::GET_ROUTEINFO_BY_TOPIC,
            version: 409,
            opaque: 1,
            ext_fields,
            serialize_type,
            ..RemotingCommand::default()
        }
    }

    fn decode_all(bytes: &[u8]) -> Result<Vec<RemotingCommand>, DecodeError> {
        let mut src = BytesMut::from(bytes);
        let mut commands = Vec::new();
        while let Some(command) = RemotingCodec.decode(&mut src)? {
            commands.push(command);
        }
        assert!(src.is_empty(), "{} bytes left over", src.len());
        Ok(commands)
    }

    fn encoded(command: RemotingCommand) -> BytesMut {
        let mut dst = BytesMut::new();
        RemotingCodec
            .encode(command, &mut dst)
            .expect("a command encodes");
        dst
    }

    fn decode_prefix(length: i32, second: u32) -> Result<Option<RemotingCommand>, DecodeError> {
        let mut src = BytesMut::new();
        src.put_i32(length);
        src.put_u32(second);
        RemotingCodec.decode(&mut src)
    }

    #[test]
    fn the_briefs_json_route_request_decodes_and_encodes_to_the_same_bytes() {
        assert_eq!(ROUTE_REQUEST_JSON.len(), 0x7b);
        let frame = route_request_json_frame();

        let commands = decode_all(&frame).expect("the brief's frame");

        assert_eq!(commands, [route_request(SerializeType::Json)]);
        assert_eq!(commands[0].language, LanguageCode::Java);
        assert!(!commands[0].is_response() && !commands[0].is_oneway());
        assert_eq!(encoded(commands[0].clone()), frame);
    }

    #[test]
    fn the_briefs_rocketmq_route_request_decodes_and_encodes_to_the_same_bytes() {
        let commands = decode_all(&ROUTE_REQUEST_ROCKETMQ).expect("the brief's frame");

        assert_eq!(commands, [route_request(SerializeType::RocketMq)]);
        assert_eq!(encoded(commands[0].clone()), ROUTE_REQUEST_ROCKETMQ[..]);
    }

    #[test]
    fn commands_round_trip_in_both_header_types() {
        for serialize_type in [SerializeType::Json, SerializeType::RocketMq] {
            let mut full = RemotingCommand {
                code: request::SEND_MESSAGE_V2,
                language: LanguageCode::Cpp,
                version: 333,
                opaque: -7,
                flag: 2,
                remark: Some("ünïcödé ✓ \"quoted\" \u{1}\u{2}".into()),
                body: Bytes::from_static(b"\x00\xffbinary body"),
                serialize_type,
                ..RemotingCommand::default()
            };
            full.ext_fields.insert("a", "GID_ünï");
            full.ext_fields.insert("i", "TAGS\u{1}A\u{2}KEYS\u{1}k");
            let bare = RemotingCommand {
                code: 0,
                flag: 1,
                serialize_type,
                ..RemotingCommand::default()
            };
            let mut no_fields_with_body = bare.clone();
            no_fields_with_body.body = Bytes::from(vec![7; 100_000]);

            for command in [full, bare, no_fields_with_body] {
                assert_eq!(
                    decode_all(&encoded(command.clone())).expect("ours"),
                    [command]
                );
            }
        }
    }

    #[test]
    fn a_frame_of_exactly_the_maximum_is_accepted_and_one_byte_more_is_not() {
        let longest_length = FRAME_BYTES_MAX - LENGTH_BYTES;
        assert_eq!(longest_length, 16_777_212);
        let mut src = BytesMut::new();
        src.put_i32(longest_length as i32);
        assert!(matches!(RemotingCodec.decode(&mut src), Ok(None)));
        assert!(
            src.capacity() <= LENGTH_BYTES + RESERVE_AHEAD_BYTES_MAX,
            "an announced frame is not reserved whole: {} bytes",
            src.capacity()
        );
        assert!(matches!(
            decode_prefix(longest_length as i32 + 1, 0),
            Err(DecodeError::FrameTooLong { frame_bytes }) if frame_bytes == FRAME_BYTES_MAX + 1
        ));
        assert!(matches!(
            decode_prefix(i32::MAX, 0),
            Err(DecodeError::FrameTooLong { .. })
        ));

        let mut command = route_request(SerializeType::RocketMq);
        let overhead = encoded(command.clone()).len();
        command.body = Bytes::from(vec![0xA5; FRAME_BYTES_MAX - overhead]);
        let frame = encoded(command.clone());
        assert_eq!(frame.len(), FRAME_BYTES_MAX);
        assert_eq!(
            decode_all(&frame).expect("the longest frame"),
            [command.clone()]
        );

        command.body = Bytes::from(vec![0xA5; FRAME_BYTES_MAX - overhead + 1]);
        let mut dst = BytesMut::from(&b"earlier frame"[..]);
        assert!(matches!(
            RemotingCodec.encode(command, &mut dst),
            Err(EncodeError::FrameTooLong { frame_bytes }) if frame_bytes == FRAME_BYTES_MAX + 1
        ));
        assert_eq!(
            dst,
            b"earlier frame"[..],
            "nothing of the refused frame is written"
        );
    }

    #[test]
    fn a_header_length_beyond_the_frame_is_refused() {
        let json = 0u32;
        assert!(matches!(
            decode_prefix(4 + 10, json | 11),
            Err(DecodeError::HeaderLengthBeyondFrame {
                header_bytes: 11,
                available: 10
            })
        ));
        assert!(matches!(
            decode_prefix(4, json | 0xFF_FFFF),
            Err(DecodeError::HeaderLengthBeyondFrame { .. })
        ));
        // A header that fills the frame exactly is fine: a command with no body.
        let frame = encoded(route_request(SerializeType::RocketMq));
        let commands = decode_all(&frame).expect("header up to the frame's end");
        assert!(commands[0].body.is_empty());
    }

    #[test]
    fn negative_and_too_short_lengths_are_refused() {
        assert!(matches!(
            decode_prefix(-1, 0),
            Err(DecodeError::NegativeLength { length: -1 })
        ));
        assert!(matches!(
            decode_prefix(i32::MIN, 0),
            Err(DecodeError::NegativeLength { .. })
        ));
        for length in 0..4i32 {
            let mut src = BytesMut::from(&length.to_be_bytes()[..]);
            assert!(matches!(
                RemotingCodec.decode(&mut src),
                Err(DecodeError::FrameTooShort { .. })
            ));
        }
    }

    #[test]
    fn an_unknown_serialize_type_is_refused_before_the_frame_arrives() {
        for byte in [2u8, 0x50, 0xFF] {
            assert!(matches!(
                decode_prefix(100, u32::from(byte) << 24),
                Err(DecodeError::UnknownSerializeType { byte: b }) if b == byte
            ));
        }
    }

    #[test]
    fn an_unreadable_header_in_a_sound_frame_is_a_header_error() {
        let mut frame = route_request_json_frame();
        frame[8] = b'[';
        assert!(matches!(
            decode_all(&frame),
            Err(DecodeError::JsonHeader(_))
        ));
        let mut frame = ROUTE_REQUEST_ROCKETMQ.to_vec();
        frame[8 + 20] = 0x7F;
        assert!(matches!(
            decode_all(&frame),
            Err(DecodeError::BinaryHeader(_))
        ));
    }

    #[test]
    fn a_frame_arriving_byte_by_byte_decodes_once_whole() {
        for frame in [route_request_json_frame(), ROUTE_REQUEST_ROCKETMQ.to_vec()] {
            let mut src = BytesMut::new();
            for (at, byte) in frame.iter().enumerate() {
                src.put_u8(*byte);
                let decoded = RemotingCodec.decode(&mut src).expect("a sound prefix");
                assert_eq!(
                    decoded.is_some(),
                    at == frame.len() - 1,
                    "after {} bytes",
                    at + 1
                );
            }
            assert!(src.is_empty());
        }
    }

    #[test]
    fn frames_back_to_back_in_one_buffer_all_decode() {
        let mut bytes = route_request_json_frame();
        bytes.extend_from_slice(&ROUTE_REQUEST_ROCKETMQ);
        let mut second = route_request(SerializeType::Json);
        second.opaque = 2;
        second.body = Bytes::from_static(b"body");
        bytes.extend_from_slice(&encoded(second.clone()));

        let commands = decode_all(&bytes).expect("three frames");

        assert_eq!(
            commands,
            [
                route_request(SerializeType::Json),
                route_request(SerializeType::RocketMq),
                second
            ]
        );
    }

    #[test]
    fn random_bytes_are_frames_errors_or_wait_for_more_without_panicking() {
        let mut random = Xorshift::new(0x5EED_F4A3);
        let mut next = move || random.next_u64();
        for _ in 0..4000 {
            // Small lengths and types 0 or 1, so that many inputs reach the header decoders.
            let length = (next() % 48) as i32;
            let second = (((next() % 2) << 24) | (next() % 48)) as u32;
            let mut src = BytesMut::new();
            src.put_i32(length);
            src.put_u32(second);
            for _ in 0..next() % 56 {
                src.put_u8(next() as u8);
            }
            while let Ok(Some(_)) = RemotingCodec.decode(&mut src) {}
        }
    }
}
