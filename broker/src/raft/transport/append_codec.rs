//! The wire format of the leader's replication stream: each `AppendEntriesRequest` goes out
//! as the gRPC message `RaftPayload { data: bincode(request) }` that the peer's generated
//! server decodes, and the results come back as `RaftPayload`s.
//!
//! [`AppendBody`] is the request body. It frames each request itself instead of through a
//! tonic encoder, whose buffer would take a copy of every entry's records per follower: the
//! framing, the gRPC message header and the entries' small fields are copied into a small
//! buffer, and each entry's records ([`codec::shared_bytes`]) go to HTTP/2 as slices of the
//! buffers they already live in.
//!
//! The follower serves the stream in `append_route`.
//!
//! Invariant: the bytes a request becomes are exactly what tonic and prost write for
//! `RaftPayload { data: bincode(request) }`, so either side can change codec alone.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::Context;
use std::task::Poll;

use bytes::BufMut;
use bytes::Bytes;
use bytes::BytesMut;
use futures::Stream;
use futures::StreamExt;
use http_body::Frame;
use openraft::base::BoxStream;
use openraft::raft::AppendEntriesRequest;
use rocketraft_proto::raft as pb;
use tonic::Status;
use tonic::codec::Codec;
use tonic::codec::DecodeBuf;
use tonic::codec::Decoder;
use tonic_prost::ProstCodec;

use crate::raft::codec;
use crate::raft::transport::service::internal;
use crate::raft::types::TypeConfig;

/// The path of `Raft.StreamAppend`, the replication stream.
pub const STREAM_APPEND_PATH: &str = "/rocketraft.raft.Raft/StreamAppend";
/// `RaftPayload.data`: field 1, wire type 2 (length-delimited).
const PAYLOAD_DATA_KEY: u8 = (1 << 3) | 2;
/// A gRPC message header: the compression flag and the message length (big endian).
pub const GRPC_HEADER_SIZE: usize = 5;
/// Room for the rest of the framing and the entries' small fields before the buffer grows.
const COPIED_BYTES_INITIAL: usize = 256;

const WHAT: &str = "append entries";

/// Writes the header of an uncompressed gRPC message of `len` bytes.
pub fn put_message_header(dst: &mut impl BufMut, len: u32) {
    dst.put_u8(0);
    dst.put_u32(len);
}

/// The length of the message `header` starts; `None` if the message is compressed.
pub fn message_len(header: [u8; GRPC_HEADER_SIZE]) -> Option<u32> {
    let [compressed, len @ ..] = header;
    (compressed == 0).then_some(u32::from_be_bytes(len))
}

/// The request body of a replication stream: one gRPC message per request, until the
/// requests end.
pub struct AppendBody {
    requests: BoxStream<'static, AppendEntriesRequest<TypeConfig>>,
    /// The rest of the request being sent, in order.
    chunks: VecDeque<Bytes>,
    message_bytes_max: usize,
}

impl AppendBody {
    /// A body that refuses (ending the stream) any request whose message would exceed
    /// `message_bytes_max`, as the peer would.
    pub fn new(
        requests: impl Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + 'static,
        message_bytes_max: usize,
    ) -> AppendBody {
        AppendBody {
            requests: Box::pin(requests),
            chunks: VecDeque::new(),
            message_bytes_max,
        }
    }
}

impl http_body::Body for AppendBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.chunks.is_empty() {
            match this.requests.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Ready(Some(request)) => {
                    match message_chunks(&request, this.message_bytes_max) {
                        Ok(chunks) => this.chunks = chunks,
                        Err(status) => return Poll::Ready(Some(Err(status))),
                    }
                }
            }
        }
        Poll::Ready(this.chunks.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }
}

/// `request` as one gRPC message carrying a `RaftPayload`, in chunks that share the
/// entries' records.
fn message_chunks(
    request: &AppendEntriesRequest<TypeConfig>,
    message_bytes_max: usize,
) -> Result<VecDeque<Bytes>, Status> {
    let size = codec::encoded_size(WHAT, request).map_err(internal)?;
    let message_len = 1 + prost::length_delimiter_len(size) + size;
    let message_len_field = u32::try_from(message_len)
        .ok()
        .filter(|_| message_len <= message_bytes_max)
        .ok_or_else(|| {
            Status::out_of_range(format!(
                "append entries of {message_len} bytes exceed the {message_bytes_max} a \
                 message may have"
            ))
        })?;
    let mut chunks = Chunks {
        copied: BytesMut::with_capacity(GRPC_HEADER_SIZE + COPIED_BYTES_INITIAL),
        done: VecDeque::new(),
    };
    put_message_header(&mut chunks.copied, message_len_field);
    chunks.copied.put_u8(PAYLOAD_DATA_KEY);
    prost::encode_length_delimiter(size, &mut chunks.copied).map_err(internal)?;
    codec::encode_shared(WHAT, request, &mut chunks).map_err(internal)?;
    chunks.end_copied();
    Ok(chunks.done)
}

/// A message being framed: the chunks done, and the copied bytes after them.
struct Chunks {
    copied: BytesMut,
    done: VecDeque<Bytes>,
}

impl Chunks {
    fn end_copied(&mut self) {
        if !self.copied.is_empty() {
            self.done.push_back(self.copied.split().freeze());
        }
    }
}

impl codec::SharedWrite for Chunks {
    fn copy(&mut self, bytes: &[u8]) {
        self.copied.extend_from_slice(bytes);
    }

    fn share(&mut self, bytes: Bytes) {
        self.end_copied();
        self.done.push_back(bytes);
    }
}

/// Decodes the `RaftPayload`s of the results.
pub struct PayloadDecoder(<ProstCodec<pb::RaftPayload, pb::RaftPayload> as Codec>::Decoder);

impl Default for PayloadDecoder {
    fn default() -> Self {
        PayloadDecoder(ProstCodec::<pb::RaftPayload, pb::RaftPayload>::default().decoder())
    }
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
    use openraft::EntryPayload;
    use prost::Message;

    use super::*;
    use crate::raft::types::Entry;
    use crate::raft::types::LogId;
    use crate::raft::types::Vote;
    use crate::state_machine::command::Command;

    fn request(records: &Bytes) -> AppendEntriesRequest<TypeConfig> {
        let entry = |index: u64, records: Bytes| Entry {
            log_id: LogId::new_term_index(3, index),
            payload: EntryPayload::Normal(Command::Append { records }),
        };
        AppendEntriesRequest {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(LogId::new_term_index(3, 0)),
            entries: vec![
                entry(1, records.clone()),
                entry(2, Bytes::from_static(b"x")),
            ],
            leader_commit: None,
        }
    }

    #[test]
    fn frames_exactly_as_tonic_frames_a_raft_payload_and_shares_the_records() {
        // Sizes around the one- and two-byte length prefixes, and a large batch.
        for size in [0usize, 50, 200, 200_000] {
            let records = Bytes::from(vec![7; size]);
            let request = request(&records);
            let payload = pb::RaftPayload {
                data: codec::encode(WHAT, &request).expect("encode").into(),
            }
            .encode_to_vec();
            let mut expected = vec![0];
            expected.extend((payload.len() as u32).to_be_bytes());
            expected.extend(payload);

            let chunks = message_chunks(&request, usize::MAX).expect("frame");
            let sent: Vec<u8> = chunks.iter().flat_map(|chunk| chunk.to_vec()).collect();
            assert_eq!(sent, expected, "records of {size} bytes");
            assert_eq!(
                chunks
                    .iter()
                    .filter(|chunk| chunk.as_ptr() == records.as_ptr())
                    .count(),
                usize::from(size > 0),
                "records of {size} bytes are sent from where they are"
            );
        }
    }

    #[test]
    fn a_message_over_the_limit_is_refused_at_the_limit_it_is_not() {
        let request = request(&Bytes::from(vec![1; 1000]));
        let len = message_chunks(&request, usize::MAX)
            .expect("frame")
            .iter()
            .map(Bytes::len)
            .sum::<usize>()
            - GRPC_HEADER_SIZE;
        assert!(message_chunks(&request, len).is_ok());
        let refused = message_chunks(&request, len - 1).expect_err("over the limit");
        assert_eq!(refused.code(), tonic::Code::OutOfRange);
    }
}
