//! Binary encoding of openraft values for the Raft log files and the Raft transport.
//!
//! bincode is positional and compact; openraft's types keep their serde layout stable for
//! such formats (see `LeaderId::voted_for`). A value that fails to decode is corrupt input,
//! never a panic.

use serde::Serialize;
use serde::de::DeserializeOwned;

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
