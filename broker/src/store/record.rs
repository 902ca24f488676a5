//! The RocketMQ v1 message record: its byte layout in the CommitLog, encoding, validation
//! and cheap in-place accessors.
//!
//! Layout (big-endian): TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 |
//! QUEUEOFFSET i64 | PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST |
//! STORETIMESTAMP i64 | STOREHOST | RECONSUMETIMES i32 | PREPARED_TRANSACTION_OFFSET i64 |
//! BODY (i32 len + bytes) | TOPIC (u8 len + bytes) | PROPERTIES (i16 len + bytes).
//! A host is 4 address bytes + port i32, or 16 + port i32 when its sysflag bit is set.
//!
//! Invariants: an encoded record is never larger than [`RECORD_SIZE_MAX`]; BODYCRC is computed
//! on encode and checked by [`RecordView::parse`] (every decode and every recovery scan), so
//! the pair of checks catches any corruption of the body; bytes read from disk or network are
//! only ever interpreted after `RecordView::parse` succeeded, never asserted on.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::Bytes;

use crate::store::error::StoreError;
use crate::store::properties::{self, Properties};

/// Magic code of a message record.
pub const MESSAGE_MAGIC_CODE: i32 = 0xDAA3_20A7_u32 as i32;
/// Magic code of the blank filler that pads the end of a CommitLog segment.
pub const BLANK_MAGIC_CODE: i32 = 0xCBD4_3194_u32 as i32;
/// Bytes a segment must keep free for the blank filler (TOTALSIZE + MAGICCODE).
pub const END_FILE_MIN_BLANK_LENGTH: usize = 4 + 4;
/// SYSFLAG bit: the born host is IPv6.
pub const BORNHOST_V6_FLAG: i32 = 1 << 4;
/// SYSFLAG bit: the store host is IPv6.
pub const STOREHOSTADDRESS_V6_FLAG: i32 = 1 << 5;

/// Largest message body, in bytes (RocketMQ `maxMessageSize` default).
pub const MESSAGE_BODY_SIZE_MAX: usize = 4 * 1024 * 1024;
/// Longest topic name, in bytes (the 1-byte length field holds up to 255; RocketMQ allows 127).
pub const TOPIC_NAME_LEN_MAX: usize = rocketraft_domain::names::NAME_LEN_MAX;
/// Largest encoded properties, in bytes: the 2-byte signed length field.
pub const PROPERTIES_SIZE_MAX: usize = i16::MAX as usize;

const HOST_V4_LEN: usize = 4 + 4;
const HOST_V6_LEN: usize = 16 + 4;
/// Size of a record with IPv4 hosts and empty body, topic and properties.
pub const RECORD_HEADER_SIZE_MIN: usize =
    4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + HOST_V4_LEN + 8 + HOST_V4_LEN + 4 + 8 + 4 + 1 + 2;
/// Size of a record with IPv6 hosts and empty body, topic and properties.
pub const RECORD_HEADER_SIZE_MAX: usize = RECORD_HEADER_SIZE_MIN + 2 * (HOST_V6_LEN - HOST_V4_LEN);
/// Largest encoded record, in bytes.
pub const RECORD_SIZE_MAX: usize =
    RECORD_HEADER_SIZE_MAX + MESSAGE_BODY_SIZE_MAX + TOPIC_NAME_LEN_MAX + PROPERTIES_SIZE_MAX;

const _: () = assert!(RECORD_HEADER_SIZE_MIN == 91);
const _: () = assert!(TOPIC_NAME_LEN_MAX <= u8::MAX as usize);
const _: () = assert!(PROPERTIES_SIZE_MAX <= i16::MAX as usize);
const _: () = assert!(RECORD_SIZE_MAX <= i32::MAX as usize);
const _: () = assert!(RECORD_HEADER_SIZE_MIN >= END_FILE_MIN_BLANK_LENGTH);

const POS_BODY_CRC: usize = 8;
const POS_QUEUE_ID: usize = 12;
const POS_FLAG: usize = 16;
const POS_QUEUE_OFFSET: usize = 20;
const POS_PHYSICAL_OFFSET: usize = 28;
const POS_SYS_FLAG: usize = 36;
const POS_BORN_TIMESTAMP: usize = 40;
const POS_BORN_HOST: usize = 48;

/// Why bytes are not a valid record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("truncated: need {needed} bytes, have {available}")]
    Truncated { needed: usize, available: usize },
    #[error("total size {total_size} out of range")]
    TotalSize { total_size: i32 },
    #[error("bad magic code {magic:#010x}")]
    Magic { magic: i32 },
    #[error("field lengths inconsistent with total size")]
    FieldLengths,
    #[error("body crc mismatch: stored {stored}, computed {computed}")]
    BodyCrc { stored: i32, computed: i32 },
    #[error("topic is not UTF-8")]
    TopicUtf8,
    #[error("host port {port} out of range")]
    HostPort { port: i32 },
}

/// A decoded message record (a value type: fields are public).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRecord {
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    /// On encode the host-family bits are derived from `born_host` / `store_host`.
    pub sys_flag: i32,
    pub born_timestamp_ms: i64,
    pub born_host: SocketAddr,
    pub store_timestamp_ms: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: Bytes,
    pub topic: String,
    pub properties: Properties,
}

/// What a buffer decodes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodedRecord {
    Message(MessageRecord),
    /// Blank filler at a segment's end, `size_bytes` long.
    Blank {
        size_bytes: usize,
    },
}

/// Checks a topic name: non-empty, at most [`TOPIC_NAME_LEN_MAX`] bytes of `[A-Za-z0-9_%|-]`
/// (topics name directories, so nothing else is allowed).
pub fn validate_topic(topic: &str) -> Result<(), StoreError> {
    if topic.is_empty() {
        return Err(StoreError::InvalidTopic {
            topic: String::new(),
            reason: "empty",
        });
    }
    if topic.len() > TOPIC_NAME_LEN_MAX {
        return Err(StoreError::LimitExceeded {
            limit: "TOPIC_NAME_LEN_MAX",
            max: TOPIC_NAME_LEN_MAX,
            actual: topic.len(),
        });
    }
    if !topic.chars().all(rocketraft_domain::names::is_name_char) {
        return Err(StoreError::InvalidTopic {
            topic: topic.to_owned(),
            reason: "allowed characters are [A-Za-z0-9_%|-]",
        });
    }
    Ok(())
}

/// RocketMQ `UtilAll.crc32`: CRC-32 (IEEE) of the body, masked to a non-negative `i32`.
pub fn body_crc(body: &[u8]) -> i32 {
    (crc32fast::hash(body) & 0x7FFF_FFFF) as i32
}

fn check_limit(limit: &'static str, max: usize, actual: usize) -> Result<(), StoreError> {
    if actual > max {
        return Err(StoreError::LimitExceeded { limit, max, actual });
    }
    Ok(())
}

fn host_len(addr: &SocketAddr) -> usize {
    if addr.is_ipv6() {
        HOST_V6_LEN
    } else {
        HOST_V4_LEN
    }
}

/// `addr` with an IPv4-mapped IPv6 address written as the IPv4 address it maps.
fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

fn put_host(out: &mut Vec<u8>, addr: &SocketAddr) {
    match addr.ip() {
        IpAddr::V4(ip) => out.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => out.extend_from_slice(&ip.octets()),
    }
    out.extend_from_slice(&i32::from(addr.port()).to_be_bytes());
}

/// The fields of a record, borrowed, with its properties already encoded: what
/// [`RecordParts::encode_into`] writes. A send encodes each message straight from its request
/// into the batch buffer through it; [`MessageRecord::encode`] goes through it too.
#[derive(Debug, Clone, Copy)]
pub struct RecordParts<'a> {
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    /// The host-family bits are derived from `born_host` / `store_host`.
    pub sys_flag: i32,
    pub born_timestamp_ms: i64,
    pub born_host: SocketAddr,
    pub store_timestamp_ms: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: &'a [u8],
    pub topic: &'a str,
    /// Encoded properties (`key\x01value\x02` pairs).
    pub properties: &'a [u8],
}

impl RecordParts<'_> {
    /// Appends the encoded record to `out`, checking the limits: topic valid and at most
    /// [`TOPIC_NAME_LEN_MAX`] bytes, body at most [`MESSAGE_BODY_SIZE_MAX`], encoded
    /// properties at most [`PROPERTIES_SIZE_MAX`]. On error `out` is unchanged.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), StoreError> {
        validate_topic(self.topic)?;
        // An IPv4 peer of a dual-stack listener (`::ffff:a.b.c.d`) is stored as IPv4: 4.x
        // clients that read only 4-byte hosts (ali-ons, the C++ client) decode it.
        let born_host = canonical(self.born_host);
        let store_host = canonical(self.store_host);
        check_limit(
            "MESSAGE_BODY_SIZE_MAX",
            MESSAGE_BODY_SIZE_MAX,
            self.body.len(),
        )?;
        let props = self.properties;
        check_limit("PROPERTIES_SIZE_MAX", PROPERTIES_SIZE_MAX, props.len())?;
        let total = RECORD_HEADER_SIZE_MIN - 2 * HOST_V4_LEN
            + host_len(&born_host)
            + host_len(&store_host)
            + self.body.len()
            + self.topic.len()
            + props.len();
        let mut sys_flag = self.sys_flag & !(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG);
        if born_host.is_ipv6() {
            sys_flag |= BORNHOST_V6_FLAG;
        }
        if store_host.is_ipv6() {
            sys_flag |= STOREHOSTADDRESS_V6_FLAG;
        }
        // Lengths were checked against limits whose sum fits i32 (compile-time asserts).
        out.reserve(total);
        let start = out.len();
        out.extend_from_slice(&(total as i32).to_be_bytes());
        out.extend_from_slice(&MESSAGE_MAGIC_CODE.to_be_bytes());
        out.extend_from_slice(&body_crc(self.body).to_be_bytes());
        out.extend_from_slice(&self.queue_id.to_be_bytes());
        out.extend_from_slice(&self.flag.to_be_bytes());
        out.extend_from_slice(&self.queue_offset.to_be_bytes());
        out.extend_from_slice(&self.physical_offset.to_be_bytes());
        out.extend_from_slice(&sys_flag.to_be_bytes());
        out.extend_from_slice(&self.born_timestamp_ms.to_be_bytes());
        put_host(out, &born_host);
        out.extend_from_slice(&self.store_timestamp_ms.to_be_bytes());
        put_host(out, &store_host);
        out.extend_from_slice(&self.reconsume_times.to_be_bytes());
        out.extend_from_slice(&self.prepared_transaction_offset.to_be_bytes());
        out.extend_from_slice(&(self.body.len() as i32).to_be_bytes());
        out.extend_from_slice(self.body);
        out.push(self.topic.len() as u8);
        out.extend_from_slice(self.topic.as_bytes());
        out.extend_from_slice(&(props.len() as i16).to_be_bytes());
        out.extend_from_slice(props);
        debug_assert_eq!(out.len() - start, total);
        Ok(())
    }
}

impl MessageRecord {
    /// Encodes the record (see [`RecordParts::encode_into`] for the limits checked).
    pub fn encode(&self) -> Result<Vec<u8>, StoreError> {
        let mut out = Vec::new();
        self.encode_into(&mut out)?;
        Ok(out)
    }

    /// Appends the encoded record to `out`; on error `out` is unchanged.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), StoreError> {
        let properties = self.properties.encode();
        RecordParts {
            queue_id: self.queue_id,
            flag: self.flag,
            queue_offset: self.queue_offset,
            physical_offset: self.physical_offset,
            sys_flag: self.sys_flag,
            born_timestamp_ms: self.born_timestamp_ms,
            born_host: self.born_host,
            store_timestamp_ms: self.store_timestamp_ms,
            store_host: self.store_host,
            reconsume_times: self.reconsume_times,
            prepared_transaction_offset: self.prepared_transaction_offset,
            body: &self.body,
            topic: &self.topic,
            properties: &properties,
        }
        .encode_into(out)
    }

    /// An owned record of `parts`, its properties decoded, for the rare sends that change a
    /// record's properties before it is stored.
    pub fn from_parts(parts: &RecordParts<'_>) -> Result<MessageRecord, StoreError> {
        Ok(MessageRecord {
            queue_id: parts.queue_id,
            flag: parts.flag,
            queue_offset: parts.queue_offset,
            physical_offset: parts.physical_offset,
            sys_flag: parts.sys_flag,
            born_timestamp_ms: parts.born_timestamp_ms,
            born_host: parts.born_host,
            store_timestamp_ms: parts.store_timestamp_ms,
            store_host: parts.store_host,
            reconsume_times: parts.reconsume_times,
            prepared_transaction_offset: parts.prepared_transaction_offset,
            body: Bytes::copy_from_slice(parts.body),
            topic: parts.topic.to_owned(),
            properties: Properties::decode(parts.properties)?,
        })
    }
}

/// Decodes a record or blank filler at the start of `buf` (offsets in errors are relative to
/// `buf`). A blank filler is recognised by its magic; its size is its TOTALSIZE.
pub fn decode(buf: &[u8]) -> Result<DecodedRecord, StoreError> {
    decode_at(buf, 0)
}

/// [`decode`] for a record read at CommitLog `offset` (named in errors).
pub fn decode_at(buf: &[u8], offset: u64) -> Result<DecodedRecord, StoreError> {
    let corrupt = |source| StoreError::Corrupt { offset, source };
    if read_i32(buf, 4) == Some(BLANK_MAGIC_CODE) {
        let size = read_i32(buf, 0).unwrap_or(0);
        return match usize::try_from(size) {
            Ok(size_bytes) if size_bytes >= END_FILE_MIN_BLANK_LENGTH => {
                Ok(DecodedRecord::Blank { size_bytes })
            }
            _ => Err(corrupt(RecordError::TotalSize { total_size: size })),
        };
    }
    let view = RecordView::parse(buf).map_err(corrupt)?;
    view.to_record(offset)
        .map(DecodedRecord::Message)
        .map_err(|source| match source {
            StoreError::Corrupt { source, .. } => corrupt(source),
            other => other,
        })
}

fn read_i32(buf: &[u8], pos: usize) -> Option<i32> {
    let bytes = buf.get(pos..pos + 4)?;
    Some(i32::from_be_bytes(bytes.try_into().ok()?))
}

fn read_i64(buf: &[u8], pos: usize) -> Option<i64> {
    let bytes = buf.get(pos..pos + 8)?;
    Some(i64::from_be_bytes(bytes.try_into().ok()?))
}

/// A validated message record borrowed from a buffer: length, magic, field lengths, topic
/// UTF-8 and body CRC have been checked, so accessors cannot fail on layout.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    bytes: &'a [u8],
    born_host_len: usize,
    store_host_len: usize,
    body: (usize, usize),
    topic: &'a str,
    properties: &'a [u8],
}

impl<'a> RecordView<'a> {
    /// Validates the message record at the start of `buf` (which may continue past it).
    pub fn parse(buf: &'a [u8]) -> Result<Self, RecordError> {
        let available = buf.len();
        let (Some(total_size), Some(magic)) = (read_i32(buf, 0), read_i32(buf, 4)) else {
            return Err(RecordError::Truncated {
                needed: END_FILE_MIN_BLANK_LENGTH,
                available,
            });
        };
        if magic != MESSAGE_MAGIC_CODE {
            return Err(RecordError::Magic { magic });
        }
        let total = usize::try_from(total_size)
            .ok()
            .filter(|t| (RECORD_HEADER_SIZE_MIN..=RECORD_SIZE_MAX).contains(t))
            .ok_or(RecordError::TotalSize { total_size })?;
        let bytes = buf.get(..total).ok_or(RecordError::Truncated {
            needed: total,
            available,
        })?;
        let view = Self::parse_fields(bytes)?;
        let stored = read_i32(bytes, POS_BODY_CRC).unwrap_or(0);
        let computed = body_crc(view.body());
        if stored != computed {
            return Err(RecordError::BodyCrc { stored, computed });
        }
        Ok(view)
    }

    /// Splits a record of exactly `bytes.len()` bytes into its variable-length fields.
    fn parse_fields(bytes: &'a [u8]) -> Result<Self, RecordError> {
        let sys_flag = read_i32(bytes, POS_SYS_FLAG).ok_or(RecordError::FieldLengths)?;
        let born_host_len = flag_host_len(sys_flag, BORNHOST_V6_FLAG);
        let store_host_len = flag_host_len(sys_flag, STOREHOSTADDRESS_V6_FLAG);
        let body_len_pos = POS_BORN_HOST + born_host_len + 8 + store_host_len + 4 + 8;
        let body_len = read_i32(bytes, body_len_pos)
            .and_then(|len| usize::try_from(len).ok())
            .ok_or(RecordError::FieldLengths)?;
        let body_start = body_len_pos + 4;
        let topic_len_pos = body_start
            .checked_add(body_len)
            .ok_or(RecordError::FieldLengths)?;
        let topic_len = usize::from(*bytes.get(topic_len_pos).ok_or(RecordError::FieldLengths)?);
        let topic_start = topic_len_pos + 1;
        let props_len_pos = topic_start + topic_len;
        let props_len = bytes
            .get(props_len_pos..props_len_pos + 2)
            .and_then(|b| usize::try_from(i16::from_be_bytes([b[0], b[1]])).ok())
            .ok_or(RecordError::FieldLengths)?;
        let props_start = props_len_pos + 2;
        if props_start + props_len != bytes.len() {
            return Err(RecordError::FieldLengths);
        }
        let topic = std::str::from_utf8(&bytes[topic_start..props_len_pos])
            .map_err(|_utf8| RecordError::TopicUtf8)?;
        Ok(RecordView {
            bytes,
            born_host_len,
            store_host_len,
            body: (body_start, body_len),
            topic,
            properties: &bytes[props_start..],
        })
    }

    /// The whole record.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// TOTALSIZE.
    pub fn total_size(&self) -> usize {
        self.bytes.len()
    }

    fn i32_at(&self, pos: usize) -> i32 {
        read_i32(self.bytes, pos).unwrap_or_default()
    }

    fn i64_at(&self, pos: usize) -> i64 {
        read_i64(self.bytes, pos).unwrap_or_default()
    }

    pub fn queue_id(&self) -> i32 {
        self.i32_at(POS_QUEUE_ID)
    }

    pub fn flag(&self) -> i32 {
        self.i32_at(POS_FLAG)
    }

    pub fn born_timestamp_ms(&self) -> i64 {
        self.i64_at(POS_BORN_TIMESTAMP)
    }

    pub fn born_host(&self) -> Result<SocketAddr, RecordError> {
        self.host(POS_BORN_HOST, self.born_host_len)
    }

    pub fn store_host(&self) -> Result<SocketAddr, RecordError> {
        self.host(self.store_timestamp_pos() + 8, self.store_host_len)
    }

    /// The properties as stored: every pair `key \x01 value \x02`.
    pub fn properties_bytes(&self) -> &'a [u8] {
        self.properties
    }

    pub fn queue_offset(&self) -> i64 {
        self.i64_at(POS_QUEUE_OFFSET)
    }

    pub fn physical_offset(&self) -> i64 {
        self.i64_at(POS_PHYSICAL_OFFSET)
    }

    fn store_timestamp_pos(&self) -> usize {
        POS_BORN_HOST + self.born_host_len
    }

    pub fn store_timestamp_ms(&self) -> i64 {
        self.i64_at(self.store_timestamp_pos())
    }

    pub fn body(&self) -> &'a [u8] {
        let (start, len) = self.body;
        &self.bytes[start..start + len]
    }

    pub fn topic(&self) -> &'a str {
        self.topic
    }

    /// Where RECONSUMETIMES is: after the store timestamp and the store host.
    fn reconsume_times_pos(&self) -> usize {
        self.store_timestamp_pos() + 8 + self.store_host_len
    }

    /// RECONSUMETIMES: how many times the message was handed back before this copy.
    pub fn reconsume_times(&self) -> i32 {
        self.i32_at(self.reconsume_times_pos())
    }

    /// One property, read from the encoded properties without building a map.
    pub fn property(&self, key: &str) -> Result<Option<&'a str>, StoreError> {
        properties::find(self.properties, key)
    }

    /// Builds the owned [`MessageRecord`] (decodes hosts and properties); errors name
    /// `offset`, where the record was read.
    fn to_record(self, offset: u64) -> Result<MessageRecord, StoreError> {
        let corrupt = |source| StoreError::Corrupt { offset, source };
        Ok(MessageRecord {
            queue_id: self.queue_id(),
            flag: self.flag(),
            queue_offset: self.queue_offset(),
            physical_offset: self.physical_offset(),
            sys_flag: self.i32_at(POS_SYS_FLAG),
            born_timestamp_ms: self.born_timestamp_ms(),
            born_host: self.born_host().map_err(corrupt)?,
            store_timestamp_ms: self.store_timestamp_ms(),
            store_host: self.store_host().map_err(corrupt)?,
            reconsume_times: self.reconsume_times(),
            prepared_transaction_offset: self.i64_at(self.reconsume_times_pos() + 4),
            body: Bytes::copy_from_slice(self.body()),
            topic: self.topic.to_owned(),
            properties: Properties::decode(self.properties)?,
        })
    }

    fn host(&self, pos: usize, len: usize) -> Result<SocketAddr, RecordError> {
        let addr = &self.bytes[pos..pos + len - 4];
        let port = self.i32_at(pos + len - 4);
        let port = u16::try_from(port).map_err(|_range| RecordError::HostPort { port })?;
        let ip = match <[u8; 16]>::try_from(addr) {
            Ok(v6) => IpAddr::V6(Ipv6Addr::from(v6)),
            Err(_not_v6) => {
                let v4: [u8; 4] = addr.try_into().map_err(|_len| RecordError::FieldLengths)?;
                IpAddr::V4(Ipv4Addr::from(v4))
            }
        };
        Ok(SocketAddr::new(ip, port))
    }
}

fn flag_host_len(sys_flag: i32, bit: i32) -> usize {
    if sys_flag & bit != 0 {
        HOST_V6_LEN
    } else {
        HOST_V4_LEN
    }
}

/// Writes QUEUEOFFSET and PHYSICALOFFSET into an encoded record. The body CRC does not
/// cover them.
pub fn patch_offsets(
    buf: &mut [u8],
    queue_offset: i64,
    physical_offset: i64,
) -> Result<(), RecordError> {
    patch_i64(buf, POS_QUEUE_OFFSET, queue_offset)?;
    patch_i64(buf, POS_PHYSICAL_OFFSET, physical_offset)
}

fn patch_i64(buf: &mut [u8], pos: usize, value: i64) -> Result<(), RecordError> {
    let available = buf.len();
    let slot = buf.get_mut(pos..pos + 8).ok_or(RecordError::Truncated {
        needed: pos + 8,
        available,
    })?;
    slot.copy_from_slice(&value.to_be_bytes());
    Ok(())
}

/// The 8-byte blank filler header for `size_bytes` of padding; the rest of the padding stays
/// zero. `size_bytes` is at most a segment size, which config validation bounds by `i32::MAX`.
pub fn blank_filler(size_bytes: usize) -> [u8; END_FILE_MIN_BLANK_LENGTH] {
    let mut out = [0u8; END_FILE_MIN_BLANK_LENGTH];
    out[..4].copy_from_slice(&(size_bytes as i32).to_be_bytes());
    out[4..].copy_from_slice(&BLANK_MAGIC_CODE.to_be_bytes());
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::properties::{KEYS, TAGS, UNIQ_KEY};

    /// The encoded record of `body` on `topic`/`queue_id` whose `UNIQ_KEY` is `key`.
    pub(crate) fn keyed(topic: &str, queue_id: i32, body: &[u8], key: String) -> Vec<u8> {
        let mut record = sample(topic, queue_id, body);
        record.properties.insert(UNIQ_KEY, key).expect("uniq");
        record.encode().expect("encode")
    }

    /// A small valid record on `topic`/`queue_id` with the given tag and keys.
    pub(crate) fn sample(topic: &str, queue_id: i32, body: &[u8]) -> MessageRecord {
        let mut properties = Properties::new();
        properties.insert(TAGS, "TagA").expect("tags");
        properties.insert(KEYS, "order-1 user-7").expect("keys");
        properties
            .insert(UNIQ_KEY, format!("UNIQ-{topic}-{queue_id}-{}", body.len()))
            .expect("uniq");
        MessageRecord {
            queue_id,
            flag: 3,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: 0,
            born_timestamp_ms: 1_700_000_000_000,
            born_host: "10.0.0.1:40000".parse().expect("addr"),
            store_timestamp_ms: 1_700_000_000_123,
            store_host: "10.0.0.2:10911".parse().expect("addr"),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Bytes::copy_from_slice(body),
            topic: topic.to_owned(),
            properties,
        }
    }

    fn message(decoded: DecodedRecord) -> MessageRecord {
        match decoded {
            DecodedRecord::Message(m) => m,
            DecodedRecord::Blank { .. } => panic!("expected a message"),
        }
    }

    #[test]
    fn round_trip_ipv4() {
        let rec = sample("TopicTest", 2, b"hello");
        let bytes = rec.encode().expect("encode");
        assert_eq!(
            bytes.len(),
            RECORD_HEADER_SIZE_MIN + 5 + 9 + rec.properties.encoded_len()
        );
        assert_eq!(read_i32(&bytes, 0), Some(bytes.len() as i32));
        assert_eq!(message(decode(&bytes).expect("decode")), rec);
    }

    #[test]
    fn round_trip_ipv6_sets_sysflag_bits() {
        let mut rec = sample("TopicTest", 0, b"v6 body");
        rec.born_host = "[2001:db8::1]:1234".parse().expect("addr");
        rec.store_host = "[::1]:10911".parse().expect("addr");
        rec.sys_flag = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG | 1;
        rec.queue_offset = 42;
        rec.physical_offset = 4096;
        let bytes = rec.encode().expect("encode");
        assert_eq!(
            bytes.len(),
            RECORD_HEADER_SIZE_MAX + 7 + 9 + rec.properties.encoded_len()
        );
        assert_eq!(message(decode(&bytes).expect("decode")), rec);
    }

    #[test]
    fn an_ipv4_mapped_host_is_stored_as_ipv4() {
        let mut rec = sample("TopicTest", 0, b"mapped");
        rec.born_host = "[::ffff:10.0.0.7]:4321".parse().expect("addr");
        rec.store_host = "[::ffff:127.0.0.1]:10911".parse().expect("addr");
        let bytes = rec.encode().expect("encode");
        assert_eq!(
            bytes.len(),
            RECORD_HEADER_SIZE_MIN + 6 + 9 + rec.properties.encoded_len()
        );
        let decoded = message(decode(&bytes).expect("decode"));
        assert_eq!(decoded.born_host, "10.0.0.7:4321".parse().expect("addr"));
        assert_eq!(decoded.store_host, "127.0.0.1:10911".parse().expect("addr"));
        assert_eq!(
            decoded.sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG),
            0
        );
    }

    #[test]
    fn body_crc_mismatch_is_corrupt() {
        let mut bytes = sample("T", 0, b"payload").encode().expect("encode");
        // The body starts right after the 4-byte body length at RECORD_HEADER_SIZE_MIN - 7.
        let body_pos = RECORD_HEADER_SIZE_MIN - 3;
        bytes[body_pos] ^= 0xFF;
        assert!(matches!(
            decode(&bytes),
            Err(StoreError::Corrupt {
                source: RecordError::BodyCrc { .. },
                ..
            })
        ));
    }

    #[test]
    fn bad_magic_length_and_truncation_are_corrupt() {
        let bytes = sample("T", 0, b"payload").encode().expect("encode");
        let mut bad_magic = bytes.clone();
        bad_magic[5] ^= 1;
        assert!(matches!(
            RecordView::parse(&bad_magic),
            Err(RecordError::Magic { .. })
        ));
        assert!(matches!(
            RecordView::parse(&bytes[..bytes.len() - 1]),
            Err(RecordError::Truncated { .. })
        ));
        let mut too_big = bytes.clone();
        too_big[..4].copy_from_slice(&(RECORD_SIZE_MAX as i32 + 1).to_be_bytes());
        assert!(matches!(
            RecordView::parse(&too_big),
            Err(RecordError::TotalSize { .. })
        ));
        let mut long_body = bytes.clone();
        let body_len_pos = RECORD_HEADER_SIZE_MIN - 7;
        long_body[body_len_pos + 3] += 1;
        assert_eq!(
            RecordView::parse(&long_body).err(),
            Some(RecordError::FieldLengths)
        );
    }

    #[test]
    fn blank_filler_decodes_as_blank() {
        let mut buf = vec![0u8; 64];
        buf[..8].copy_from_slice(&blank_filler(64));
        assert_eq!(
            decode(&buf).expect("decode"),
            DecodedRecord::Blank { size_bytes: 64 }
        );
    }

    #[test]
    fn in_place_helpers() {
        let mut bytes = sample("TopicA", 7, b"x").encode().expect("encode");
        patch_offsets(&mut bytes, 11, 1 << 40).expect("patch");
        let view = RecordView::parse(&bytes).expect("still valid");
        assert_eq!((view.queue_offset(), view.physical_offset()), (11, 1 << 40));
        assert_eq!(view.property(TAGS).expect("tags"), Some("TagA"));
        assert!(matches!(
            patch_offsets(&mut bytes[..10], 1, 1),
            Err(RecordError::Truncated { .. })
        ));
    }

    fn limit_of(result: Result<Vec<u8>, StoreError>) -> Option<&'static str> {
        match result {
            Err(StoreError::LimitExceeded { limit, .. }) => Some(limit),
            _ => None,
        }
    }

    #[test]
    fn body_limit_at_max_and_max_plus_one() {
        let mut rec = sample("T", 0, b"");
        rec.body = Bytes::from(vec![7u8; MESSAGE_BODY_SIZE_MAX]);
        let bytes = rec.encode().expect("max body");
        assert_eq!(
            message(decode(&bytes).expect("decode")).body.len(),
            MESSAGE_BODY_SIZE_MAX
        );
        rec.body = Bytes::from(vec![7u8; MESSAGE_BODY_SIZE_MAX + 1]);
        assert_eq!(limit_of(rec.encode()), Some("MESSAGE_BODY_SIZE_MAX"));
    }

    #[test]
    fn topic_limit_at_max_and_max_plus_one() {
        let mut rec = sample("T", 0, b"b");
        rec.topic = "t".repeat(TOPIC_NAME_LEN_MAX);
        let bytes = rec.encode().expect("max topic");
        assert_eq!(message(decode(&bytes).expect("decode")).topic, rec.topic);
        rec.topic = "t".repeat(TOPIC_NAME_LEN_MAX + 1);
        assert_eq!(limit_of(rec.encode()), Some("TOPIC_NAME_LEN_MAX"));
        rec.topic = String::new();
        assert!(matches!(rec.encode(), Err(StoreError::InvalidTopic { .. })));
        rec.topic = "../etc".to_owned();
        assert!(matches!(rec.encode(), Err(StoreError::InvalidTopic { .. })));
    }

    #[test]
    fn properties_limit_at_max_and_max_plus_one() {
        let mut rec = sample("T", 0, b"b");
        rec.properties = Properties::new();
        // "K" + \x01 + value + \x02 = value + 3 bytes.
        let value = "v".repeat(PROPERTIES_SIZE_MAX - 3);
        rec.properties.insert("K", value.clone()).expect("insert");
        let bytes = rec.encode().expect("max properties");
        assert_eq!(
            message(decode(&bytes).expect("decode")).properties,
            rec.properties
        );
        rec.properties.insert("K", value + "v").expect("insert");
        assert_eq!(limit_of(rec.encode()), Some("PROPERTIES_SIZE_MAX"));
    }

    #[test]
    fn largest_record_is_record_size_max() {
        let mut rec = sample(&"t".repeat(TOPIC_NAME_LEN_MAX), 0, b"");
        rec.born_host = "[::1]:1".parse().expect("addr");
        rec.store_host = "[::1]:2".parse().expect("addr");
        rec.body = Bytes::from(vec![1u8; MESSAGE_BODY_SIZE_MAX]);
        rec.properties = Properties::new();
        rec.properties
            .insert("K", "v".repeat(PROPERTIES_SIZE_MAX - 3))
            .expect("insert");
        let bytes = rec.encode().expect("encode");
        assert_eq!(bytes.len(), RECORD_SIZE_MAX);
        assert!(RecordView::parse(&bytes).is_ok());
    }
}
