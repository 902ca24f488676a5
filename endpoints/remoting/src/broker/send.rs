//! A 4.x send (`SEND_MESSAGE`, `SEND_MESSAGE_V2`, `SEND_BATCH_MESSAGE`) as a broker `Send`:
//! the header in either form (V1's names, V2's letters), the body inflated when the client
//! compressed it, a batch split into its messages, and the reply a Java broker gives
//! (`SendMessageResponseHeader`, plus the `MSG_REGION` and `TRACE_ON` the Java client reads
//! without a null check).
//!
//! Invariant: a body is inflated to at most [`SEND_BATCH_BODY_BYTES_MAX`], and a batch splits
//! into at most [`SEND_BATCH_COUNT_MAX`] messages, checked as the bytes are read: a request
//! that would exceed them is refused, never buffered whole.

use std::io::Read;
use std::net::SocketAddr;

use bytes::Buf;
use bytes::Bytes;
use rocketraft_domain::limits::SEND_BATCH_BODY_BYTES_MAX;
use rocketraft_domain::limits::SEND_BATCH_COUNT_MAX;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common::Message;

use crate::codes::request;
use crate::command::RemotingCommand;
use crate::ext::ExtFieldError;
use crate::ext::ExtFields;

/// `sysFlag` bit 0: the body is zlib-compressed (`MessageSysFlag.COMPRESSED_FLAG`).
const SYS_FLAG_COMPRESSED: i32 = 0x1;
/// `MSG_REGION` in every send reply: the region a Java broker names by default.
const MSG_REGION: &str = "DefaultRegion";

/// Why a send request cannot become a broker `Send`; answered `MESSAGE_ILLEGAL` or, for a
/// bad header field, `SYSTEM_ERROR`.
#[derive(Debug, thiserror::Error)]
pub enum SendRequestError {
    #[error(transparent)]
    Field(#[from] ExtFieldError),
    #[error("the body does not inflate: {0}")]
    Inflate(std::io::Error),
    #[error("the body inflates past {SEND_BATCH_BODY_BYTES_MAX} bytes (SEND_BATCH_BODY_BYTES_MAX)")]
    Inflated,
    #[error("batch message {index}: {why}")]
    Batch { index: usize, why: &'static str },
    #[error("a batch of more than {SEND_BATCH_COUNT_MAX} messages (SEND_BATCH_COUNT_MAX)")]
    BatchCount,
}

/// The fields of a send's header, by V1's names.
struct SendHeader<'a> {
    topic: &'a str,
    queue_id: i32,
    sys_flag: i32,
    born_timestamp: i64,
    flag: i32,
    properties: &'a str,
    batch: bool,
}

impl<'a> SendHeader<'a> {
    /// Reads `fields` in V1's names, or V2's letters (`SEND_MESSAGE_V2` and
    /// `SEND_BATCH_MESSAGE`).
    fn read(fields: &'a ExtFields, letters: bool) -> Result<SendHeader<'a>, ExtFieldError> {
        let name = |v1: &'static str, v2: &'static str| if letters { v2 } else { v1 };
        Ok(SendHeader {
            topic: fields.required_str(name("topic", "b"))?,
            queue_id: fields.required_i32(name("queueId", "e"))?,
            sys_flag: fields.required_i32(name("sysFlag", "f"))?,
            born_timestamp: fields.required_i64(name("bornTimestamp", "g"))?,
            flag: fields.required_i32(name("flag", "h"))?,
            properties: fields.get(name("properties", "i")).unwrap_or_default(),
            batch: fields.optional_bool(name("batch", "m"))?.unwrap_or(false),
        })
    }
}

/// The broker `Send` a 4.x send request asks for, from a producer at `peer`.
pub fn send_request(
    request: &RemotingCommand,
    peer: SocketAddr,
) -> Result<pb::SendRequest, SendRequestError> {
    let header = SendHeader::read(&request.ext_fields, request.code != request::SEND_MESSAGE)?;
    let compressed = header.sys_flag & SYS_FLAG_COMPRESSED != 0;
    tracing::debug!(
        topic = header.topic,
        compressed,
        bytes = request.body.len(),
        "a 4.x send"
    );
    let body = if compressed {
        inflate(&request.body)?
    } else {
        request.body.clone()
    };
    let messages = if header.batch || request.code == request::SEND_BATCH_MESSAGE {
        split_batch(body)?
    } else {
        vec![Message {
            body,
            flag: header.flag,
            properties: Bytes::copy_from_slice(header.properties.as_bytes()),
            ..Message::default()
        }]
    };
    Ok(pb::SendRequest {
        topic: header.topic.to_owned(),
        queue_id: header.queue_id,
        messages,
        born_timestamp_ms: header.born_timestamp,
        born_host: born_host(peer),
        deduplicate: false,
        queue_ids: Vec::new(),
    })
}

/// The reply to a send the broker stored as `results`: the first message's queue and
/// offset, and every message's offset message id, joined by "," for a batch.
pub fn send_reply(request: &RemotingCommand, results: &[pb::SendResult]) -> RemotingCommand {
    let mut reply = RemotingCommand::success(request, Bytes::new());
    let ids: Vec<&str> = results.iter().map(|r| r.offset_msg_id.as_str()).collect();
    let fields = &mut reply.ext_fields;
    fields.insert("msgId", ids.join(","));
    if let Some(first) = results.first() {
        fields.insert("queueId", first.queue_id.to_string());
        fields.insert("queueOffset", first.queue_offset.to_string());
    }
    fields.insert("MSG_REGION", MSG_REGION);
    fields.insert("TRACE_ON", "true");
    reply
}

/// The producer's address as a 4.x client decodes it: IPv4 where the socket is IPv4-mapped
/// (ali-ons and the C++ client read only IPv4 born hosts).
fn born_host(peer: SocketAddr) -> String {
    let ip = peer.ip().to_canonical();
    SocketAddr::new(ip, peer.port()).to_string()
}

/// `body` inflated (zlib), at most [`SEND_BATCH_BODY_BYTES_MAX`] bytes of it.
fn inflate(body: &[u8]) -> Result<Bytes, SendRequestError> {
    let mut inflated = Vec::new();
    flate2::read::ZlibDecoder::new(body)
        .take(SEND_BATCH_BODY_BYTES_MAX as u64 + 1)
        .read_to_end(&mut inflated)
        .map_err(SendRequestError::Inflate)?;
    if inflated.len() > SEND_BATCH_BODY_BYTES_MAX {
        return Err(SendRequestError::Inflated);
    }
    Ok(inflated.into())
}

/// A batch body's messages (`MessageDecoder.encodeMessages`): each is `TOTALSIZE i32 |
/// MAGIC i32 | BODYCRC i32 | FLAG i32 | BODY (i32 length + bytes) | PROPERTIES (i16 length +
/// bytes)`, TOTALSIZE counting the whole record.
fn split_batch(mut body: Bytes) -> Result<Vec<Message>, SendRequestError> {
    let mut messages = Vec::new();
    while body.has_remaining() {
        if messages.len() == SEND_BATCH_COUNT_MAX {
            return Err(SendRequestError::BatchCount);
        }
        let index = messages.len();
        let bad = |why| SendRequestError::Batch { index, why };
        let total = read_len(&mut body, 4).ok_or(bad("no TOTALSIZE"))?;
        let mut record = take(&mut body, total.checked_sub(4).ok_or(bad("TOTALSIZE < 4"))?)
            .ok_or(bad("TOTALSIZE past the body"))?;
        if record.remaining() < 12 {
            return Err(bad("shorter than its fixed fields"));
        }
        record.advance(8); // MAGIC and BODYCRC: the broker computes its own CRC.
        let flag = record.get_i32();
        let body_len = read_len(&mut record, 4).ok_or(bad("no body length"))?;
        let message_body = take(&mut record, body_len).ok_or(bad("body past the record"))?;
        let properties_len = read_len(&mut record, 2).ok_or(bad("no properties length"))?;
        let properties =
            take(&mut record, properties_len).ok_or(bad("properties past the record"))?;
        if record.has_remaining() {
            return Err(bad("bytes after its properties"));
        }
        messages.push(Message {
            body: message_body,
            flag,
            properties,
            ..Message::default()
        });
    }
    Ok(messages)
}

/// A big-endian length of `width` (2 or 4) bytes, if it is there and not negative.
fn read_len(buf: &mut Bytes, width: usize) -> Option<usize> {
    if buf.remaining() < width {
        return None;
    }
    let len = match width {
        2 => i64::from(buf.get_i16()),
        _ => i64::from(buf.get_i32()),
    };
    usize::try_from(len).ok()
}

/// The next `len` bytes of `buf`, if it holds them.
fn take(buf: &mut Bytes, len: usize) -> Option<Bytes> {
    (buf.remaining() >= len).then(|| buf.split_to(len))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use bytes::BufMut;
    use bytes::BytesMut;

    use super::*;

    fn peer() -> SocketAddr {
        "[::ffff:10.0.0.9]:50123".parse().expect("addr")
    }

    fn v2(fields: &[(&'static str, &str)], body: &'static [u8]) -> RemotingCommand {
        let mut ext_fields = ExtFields::new();
        for (name, value) in [
            ("a", "P"),
            ("b", "Orders"),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", "2"),
            ("f", "0"),
            ("g", "1700000000000"),
            ("h", "0"),
            ("i", "TAGS\u{1}A\u{2}UNIQ_KEY\u{1}K1\u{2}"),
        ] {
            ext_fields.insert(name, value);
        }
        for (name, value) in fields {
            ext_fields.insert(*name, *value);
        }
        RemotingCommand {
            code: request::SEND_MESSAGE_V2,
            ext_fields,
            body: Bytes::from_static(body),
            ..RemotingCommand::default()
        }
    }

    fn batch_record(flag: i32, body: &[u8], properties: &[u8]) -> Vec<u8> {
        let total = 4 * 4 + 4 + body.len() + 2 + properties.len();
        let mut record = BytesMut::new();
        record.put_i32(total as i32);
        record.put_i32(0);
        record.put_i32(0);
        record.put_i32(flag);
        record.put_i32(body.len() as i32);
        record.put_slice(body);
        record.put_i16(properties.len() as i16);
        record.put_slice(properties);
        record.to_vec()
    }

    #[test]
    fn a_v2_send_becomes_one_message_born_at_the_ipv4_peer() {
        let send = send_request(&v2(&[], b"hello"), peer()).expect("send");
        assert_eq!((send.topic.as_str(), send.queue_id), ("Orders", 2));
        assert_eq!(send.born_timestamp_ms, 1_700_000_000_000);
        assert_eq!(send.born_host, "10.0.0.9:50123");
        assert_eq!(send.messages.len(), 1);
        assert_eq!(&send.messages[0].body[..], b"hello");
        assert_eq!(
            &send.messages[0].properties[..],
            b"TAGS\x01A\x02UNIQ_KEY\x01K1\x02"
        );
    }

    #[test]
    fn a_compressed_body_is_inflated_and_a_bomb_is_refused() {
        let mut deflate =
            flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        deflate.write_all(&[7u8; 10_000]).expect("deflate");
        let compressed: &'static [u8] = deflate.finish().expect("deflate").leak();
        let send = send_request(&v2(&[("f", "1")], compressed), peer()).expect("send");
        assert_eq!(send.messages[0].body.len(), 10_000);

        let mut bomb = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        bomb.write_all(&vec![0u8; SEND_BATCH_BODY_BYTES_MAX + 1])
            .expect("deflate");
        let bomb: &'static [u8] = bomb.finish().expect("deflate").leak();
        assert!(matches!(
            send_request(&v2(&[("f", "1")], bomb), peer()),
            Err(SendRequestError::Inflated)
        ));
        assert!(matches!(
            send_request(&v2(&[("f", "1")], b"not zlib"), peer()),
            Err(SendRequestError::Inflate(_))
        ));
    }

    #[test]
    fn a_batch_splits_into_its_messages_and_a_torn_one_is_named() {
        let mut body = batch_record(1, b"first", b"UNIQ_KEY\x01A\x02");
        body.extend(batch_record(0, b"second", b""));
        let body: &'static [u8] = body.leak();
        let mut batch = v2(&[("m", "true")], body);
        batch.code = request::SEND_BATCH_MESSAGE;
        let send = send_request(&batch, peer()).expect("send");
        let bodies: Vec<&[u8]> = send.messages.iter().map(|m| &m.body[..]).collect();
        assert_eq!(bodies, [&b"first"[..], &b"second"[..]]);
        assert_eq!(send.messages[0].flag, 1);

        let mut torn = batch_record(0, b"ok", b"");
        torn.extend(&batch_record(0, b"cut short", b"")[..10]);
        let torn: &'static [u8] = torn.leak();
        let error = send_request(&v2(&[("m", "true")], torn), peer()).expect_err("torn");
        assert!(
            matches!(error, SendRequestError::Batch { index: 1, .. }),
            "{error}"
        );
    }

    #[test]
    fn a_batch_of_one_more_than_the_limit_is_refused() {
        let record = batch_record(0, b"", b"");
        let at_limit: &'static [u8] = record.repeat(SEND_BATCH_COUNT_MAX).leak();
        let send = send_request(&v2(&[("m", "true")], at_limit), peer()).expect("at the limit");
        assert_eq!(send.messages.len(), SEND_BATCH_COUNT_MAX);
        let over: &'static [u8] = record.repeat(SEND_BATCH_COUNT_MAX + 1).leak();
        assert!(matches!(
            send_request(&v2(&[("m", "true")], over), peer()),
            Err(SendRequestError::BatchCount)
        ));
    }

    #[test]
    fn a_v1_send_reads_v1_names_and_a_bad_field_is_named() {
        let mut fields = ExtFields::new();
        for (name, value) in [
            ("producerGroup", "P"),
            ("topic", "Orders"),
            ("defaultTopic", "TBW102"),
            ("defaultTopicQueueNums", "4"),
            ("queueId", "x"),
            ("sysFlag", "0"),
            ("bornTimestamp", "1"),
            ("flag", "0"),
        ] {
            fields.insert(name, value);
        }
        let request = RemotingCommand {
            code: request::SEND_MESSAGE,
            ext_fields: fields,
            ..RemotingCommand::default()
        };
        let error = send_request(&request, peer()).expect_err("bad queueId");
        assert!(error.to_string().contains("queueId"), "{error}");
    }

    #[test]
    fn the_reply_names_every_id_and_the_first_queue_offset() {
        let results = [
            pb::SendResult {
                queue_id: 2,
                queue_offset: 40,
                commit_log_offset: 0,
                offset_msg_id: "ID1".into(),
            },
            pb::SendResult {
                queue_id: 2,
                queue_offset: 41,
                commit_log_offset: 0,
                offset_msg_id: "ID2".into(),
            },
        ];
        let reply = send_reply(&v2(&[], b""), &results);
        let field = |name| reply.ext_fields.get(name).map(str::to_owned);
        assert_eq!(field("msgId").as_deref(), Some("ID1,ID2"));
        assert_eq!(field("queueId").as_deref(), Some("2"));
        assert_eq!(field("queueOffset").as_deref(), Some("40"));
        assert_eq!(field("MSG_REGION").as_deref(), Some("DefaultRegion"));
        assert_eq!(field("TRACE_ON").as_deref(), Some("true"));
    }
}
