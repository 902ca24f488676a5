//! Binary encoding of openraft values for the Raft log files and the Raft transport.
//!
//! bincode is positional and compact; openraft's types keep their serde layout stable for
//! such formats (see `LeaderId::voted_for`). A value that fails to decode is corrupt input,
//! never a panic.
//!
//! Records travel without a copy: [`decode_shared`] decodes from a `Bytes` buffer, and the
//! record fields of a [`Command`](crate::state_machine::command::Command) ([`shared_bytes`]) become
//! slices of that buffer instead of copies of it. A follower thus keeps what it received,
//! as received, and the leader reads its log the same way. The other way, [`encode_shared`]
//! hands those fields to its [`SharedWrite`] by reference, so the Raft log writes them from
//! where they are instead of from a copy.

use std::cell::Cell;
use std::cell::RefCell;

use bytes::Bytes;
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

/// Where [`encode_shared`] writes a value's encoding, in order: bytes it copies, and byte
/// fields it passes by reference.
pub trait SharedWrite {
    fn copy(&mut self, bytes: &[u8]);
    fn share(&mut self, bytes: Bytes);
}

/// Encodes `value` into `out` as [`encode`] would, except that each byte field marked with
/// [`shared_bytes`] reaches `out` as a slice of its own buffer ([`SharedWrite::share`]).
pub fn encode_shared<T: Serialize>(
    what: &'static str,
    value: &T,
    out: &mut impl SharedWrite,
) -> Result<(), CodecError> {
    let was_sharing = SHARING.with(|sharing| sharing.replace(true));
    let encoded = encode_to_writer(what, SharingWriter(out), value);
    SHARING.with(|sharing| sharing.set(was_sharing));
    SHARED_FIELD.with(|field| field.take());
    encoded
}

thread_local! {
    /// Whether [`encode_shared`] is encoding on this thread (encoding never awaits).
    static SHARING: Cell<bool> = const { Cell::new(false) };
    /// The [`shared_bytes`] field whose bytes [`encode_shared`] is about to write.
    static SHARED_FIELD: RefCell<Option<Bytes>> = const { RefCell::new(None) };
}

/// bincode writes a byte field's length, then its bytes with one write: that write is
/// shared if it is the field's memory, everything else is copied.
struct SharingWriter<'a, W>(&'a mut W);

impl<W: SharedWrite> std::io::Write for SharingWriter<'_, W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let field = SHARED_FIELD.with(|field| {
            let mut field = field.borrow_mut();
            match field.as_ref() {
                Some(shared) if !bytes.is_empty() && contains(shared, bytes) => field.take(),
                _ => None,
            }
        });
        match field {
            Some(field) => self.0.share(field.slice_ref(bytes)),
            None => self.0.copy(bytes),
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A byte field that travels without a copy (`#[serde(with = "...::shared_bytes")]`): read
/// by [`decode_shared`] as a slice of what it decodes, written by [`encode_shared`] from
/// where it is. Any other encoder or decoder sees plain bytes.
pub mod shared_bytes {
    use bytes::Bytes;
    use serde::Deserializer;
    use serde::Serializer;

    use super::SHARED_FIELD;
    use super::SHARING;
    use super::SharedBytes;

    pub fn serialize<S: Serializer>(bytes: &Bytes, serializer: S) -> Result<S::Ok, S::Error> {
        if !SHARING.with(|sharing| sharing.get()) {
            return serializer.serialize_bytes(bytes);
        }
        SHARED_FIELD.with(|field| field.replace(Some(bytes.clone())));
        let written = serializer.serialize_bytes(bytes);
        SHARED_FIELD.with(|field| field.take());
        written
    }

    /// A slice of the buffer [`super::decode_shared`] decodes, or a copy when decoded from
    /// anything else.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
        deserializer.deserialize_bytes(SharedBytes)
    }
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
        #[serde(with = "shared_bytes")]
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

    /// What [`encode_shared`] wrote, in order.
    #[derive(Default)]
    struct Parts(Vec<(bool, Bytes)>);

    impl SharedWrite for Parts {
        fn copy(&mut self, bytes: &[u8]) {
            self.0.push((false, Bytes::copy_from_slice(bytes)));
        }

        fn share(&mut self, bytes: Bytes) {
            self.0.push((true, bytes));
        }
    }

    #[test]
    fn encode_shared_writes_the_encoding_with_the_marked_field_by_reference() {
        let records = Bytes::from(vec![9u8; 4096]);
        let value = Carrier {
            id: 7,
            records: records.clone(),
        };
        let mut parts = Parts::default();
        encode_shared("carrier", &value, &mut parts).expect("encode");
        let written: Vec<u8> = parts.0.iter().flat_map(|(_, b)| b.to_vec()).collect();
        assert_eq!(written, encode("carrier", &value).expect("encode"));
        let shared: Vec<&Bytes> = parts.0.iter().filter(|(s, _)| *s).map(|(_, b)| b).collect();
        assert_eq!(shared.len(), 1, "only the records are shared");
        assert_eq!(shared[0].as_ptr(), records.as_ptr(), "not a copy");
        assert_eq!(shared[0].len(), records.len());

        let empty = Carrier {
            id: 8,
            records: Bytes::new(),
        };
        let mut parts = Parts::default();
        encode_shared("carrier", &empty, &mut parts).expect("encode");
        assert!(parts.0.iter().all(|(shared, _)| !shared));
        SHARED_FIELD.with(|field| assert!(field.borrow().is_none(), "nothing left pending"));
        assert!(!SHARING.with(Cell::get), "sharing ends with the encoding");
    }
}
