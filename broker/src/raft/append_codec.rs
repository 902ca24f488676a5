//! The gRPC codec of the leader's replication stream: each `AppendEntriesRequest` is encoded
//! with bincode straight into tonic's frame buffer, framed as the `RaftPayload` message the
//! peer's generated server decodes (field 1, length-delimited). Going through a `RaftPayload`
//! would encode every entry into a buffer of its own and copy it into the frame again, once
//! per follower.
//!
//! Invariant: the bytes written are exactly what prost writes for
//! `RaftPayload { data: bincode(request) }`, so either side can change codec alone.

use bytes::BufMut;
use openraft::raft::AppendEntriesRequest;
use rocketraft_proto::raft as pb;
use tonic::Status;
use tonic::codec::Codec;
use tonic::codec::DecodeBuf;
use tonic::codec::Decoder;
use tonic::codec::EncodeBuf;
use tonic::codec::Encoder;
use tonic_prost::ProstCodec;

use crate::raft::codec;
use crate::raft::service::internal;
use crate::raft::types::TypeConfig;

/// `RaftPayload.data`: field 1, wire type 2 (length-delimited).
const PAYLOAD_DATA_KEY: u8 = (1 << 3) | 2;

/// Sends `AppendEntriesRequest`s, receives `RaftPayload`s.
#[derive(Default)]
pub struct AppendCodec {
    payloads: ProstCodec<pb::RaftPayload, pb::RaftPayload>,
}

pub struct AppendEncoder;

pub struct PayloadDecoder(<ProstCodec<pb::RaftPayload, pb::RaftPayload> as Codec>::Decoder);

impl Codec for AppendCodec {
    type Encode = AppendEntriesRequest<TypeConfig>;
    type Decode = pb::RaftPayload;
    type Encoder = AppendEncoder;
    type Decoder = PayloadDecoder;

    fn encoder(&mut self) -> AppendEncoder {
        AppendEncoder
    }

    fn decoder(&mut self) -> PayloadDecoder {
        PayloadDecoder(self.payloads.decoder())
    }
}

impl Encoder for AppendEncoder {
    type Item = AppendEntriesRequest<TypeConfig>;
    type Error = Status;

    /// Reserves the whole message first: tonic's buffer would otherwise grow by doubling
    /// while the entries are written, copying what it holds at every step, per follower.
    fn encode(&mut self, request: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        let size = encoded_size(&request)?;
        dst.reserve(frame_len(size));
        put_payload(&request, size, dst)
    }
}

const WHAT: &str = "append entries";

/// The bytes [`put_payload`] writes for an encoding of `size` bytes.
fn frame_len(size: usize) -> usize {
    1 + prost::length_delimiter_len(size) + size
}

/// The size of `request`'s bincode encoding.
fn encoded_size(request: &AppendEntriesRequest<TypeConfig>) -> Result<usize, Status> {
    codec::encoded_size(WHAT, request).map_err(internal)
}

/// Writes `request`, whose encoding is `size` bytes, as the `RaftPayload` message that
/// carries its bincode encoding.
fn put_payload<B: BufMut>(
    request: &AppendEntriesRequest<TypeConfig>,
    size: usize,
    dst: &mut B,
) -> Result<(), Status> {
    dst.put_u8(PAYLOAD_DATA_KEY);
    prost::encode_length_delimiter(size, dst).map_err(internal)?;
    codec::encode_to_writer(WHAT, dst.writer(), request).map_err(internal)
}

impl Decoder for PayloadDecoder {
    type Item = pb::RaftPayload;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<pb::RaftPayload>, Status> {
        self.0.decode(src)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use openraft::EntryPayload;
    use prost::Message;

    use super::*;
    use crate::raft::types::Command;
    use crate::raft::types::Entry;
    use crate::raft::types::LogId;
    use crate::raft::types::Vote;

    #[test]
    fn frames_exactly_as_prost_frames_a_raft_payload() {
        let entry = |index: u64, records: Vec<u8>| Entry {
            log_id: LogId::new_term_index(3, index),
            payload: EntryPayload::Normal(Command::Append {
                records: Bytes::from(records),
            }),
        };
        // Sizes around the one- and two-byte length prefixes, and a large batch.
        for records in [0usize, 50, 200, 200_000] {
            let request = AppendEntriesRequest::<TypeConfig> {
                vote: Vote::new_committed(3, 1),
                prev_log_id: Some(LogId::new_term_index(3, 0)),
                entries: vec![entry(1, vec![7; records]), entry(2, b"x".to_vec())],
                leader_commit: None,
            };
            let expected = pb::RaftPayload {
                data: codec::encode("append entries", &request)
                    .expect("encode")
                    .into(),
            }
            .encode_to_vec();
            let size = encoded_size(&request).expect("size");
            let mut frame = bytes::BytesMut::new();
            put_payload(&request, size, &mut frame).expect("frame");
            assert_eq!(
                frame.len(),
                frame_len(size),
                "what the encoder reserves is the whole frame"
            );
            assert_eq!(
                frame.as_ref(),
                expected.as_slice(),
                "records of {records} bytes"
            );
        }
    }
}
