//! Binary encoding of openraft values for the Raft log files and the Raft transport.
//!
//! bincode is positional and compact; openraft's types keep their serde layout stable for
//! such formats (see `LeaderId::voted_for`). A value that fails to decode is corrupt input,
//! never a panic.
//!
//! Records travel without a copy: [`decode_shared`] decodes from a `Bytes` buffer, and the
//! record fields of a [`Command`](crate::raft::types::Command) ([`shared_bytes`]) become
//! slices of that buffer instead of copies of it. A follower thus keeps what it received,
//! as received, and the leader reads its log the same way.

use std::cell::RefCell;

use bytes::Bytes;
use serde::Deserializer;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde::de::Visitor;

/// A value could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct CodecError {
    what: &'static str,
    #[source]
    source: bincode::Error,
}

impl From<CodecError> for std::io::Error {
    fn from(error: CodecError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, error)
    }
}

/// Encodes `value` into a buffer of exactly its size (no regrowth while encoding).
pub fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, CodecError> {
    let mut encoded = Vec::with_capacity(encoded_size(what, value)?);
    encode_to_writer(what, &mut encoded, value)?;
    Ok(encoded)
}

/// The number of bytes `value` encodes to.
pub fn encoded_size<T: Serialize>(what: &'static str, value: &T) -> Result<usize, CodecError> {
    let size = bincode::serialized_size(value).map_err(|source| CodecError { what, source })?;
    usize::try_from(size).map_err(|_| CodecError {
        what,
        source: Box::new(bincode::ErrorKind::SizeLimit),
    })
}

/// Writes the encoding of `value` to `writer` (appends, for a `Vec` or a `BufMut` writer).
pub fn encode_to_writer<T: Serialize>(
    what: &'static str,
    writer: impl std::io::Write,
    value: &T,
) -> Result<(), CodecError> {
    bincode::serialize_into(writer, value).map_err(|source| CodecError { what, source })
}

pub fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, CodecError> {
    bincode::deserialize(bytes).map_err(|source| CodecError { what, source })
}

/// [`decode`] from `bytes`, whose byte fields read with [`shared_bytes`] are slices of it.
pub fn decode_shared<T: DeserializeOwned>(
    what: &'static str,
    bytes: &Bytes,
) -> Result<T, CodecError> {
    let previous = SOURCE.with(|source| source.replace(Some(bytes.clone())));
    let decoded = decode(what, bytes);
    SOURCE.with(|source| source.replace(previous));
    decoded
}

thread_local! {
    /// The buffer [`decode_shared`] is decoding on this thread (decoding never awaits).
    static SOURCE: RefCell<Option<Bytes>> = const { RefCell::new(None) };
}

/// Deserializes a byte field as a slice of the buffer [`decode_shared`] decodes, or as a copy
/// when it is decoded from anything else (`#[serde(deserialize_with = ...)]`).
pub fn shared_bytes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
    deserializer.deserialize_bytes(SharedBytes)
}

struct SharedBytes;

impl<'de> Visitor<'de> for SharedBytes {
    type Value = Bytes;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("bytes")
    }

    fn visit_borrowed_bytes<E>(self, borrowed: &'de [u8]) -> Result<Bytes, E> {
        Ok(SOURCE.with(|source| match source.borrow().as_ref() {
            Some(buffer) if contains(buffer, borrowed) => buffer.slice_ref(borrowed),
            _ => Bytes::copy_from_slice(borrowed),
        }))
    }

    fn visit_bytes<E>(self, bytes: &[u8]) -> Result<Bytes, E> {
        Ok(Bytes::copy_from_slice(bytes))
    }

    fn visit_byte_buf<E>(self, bytes: Vec<u8>) -> Result<Bytes, E> {
        Ok(Bytes::from(bytes))
    }
}

/// Whether `part` lies within `buffer`'s memory.
fn contains(buffer: &Bytes, part: &[u8]) -> bool {
    let range = buffer.as_ptr_range();
    let part = part.as_ptr_range();
    range.start <= part.start && part.end <= range.end
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Carrier {
        id: u32,
        #[serde(deserialize_with = "shared_bytes")]
        records: Bytes,
    }

    #[test]
    fn decode_shared_slices_the_source_and_plain_decode_copies() {
        let value = Carrier {
            id: 7,
            records: Bytes::from_static(b"some records"),
        };
        let encoded = Bytes::from(encode("carrier", &value).expect("encode"));
        let shared: Carrier = decode_shared("carrier", &encoded).expect("decode");
        assert_eq!(shared, value);
        assert!(contains(&encoded, &shared.records), "a slice of the source");
        let copied: Carrier = decode("carrier", &encoded).expect("decode");
        assert_eq!(copied, value);
        assert!(!contains(&encoded, &copied.records), "a copy");
        SOURCE.with(|source| assert!(source.borrow().is_none(), "the source is cleared"));
    }
}
