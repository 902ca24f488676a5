//! The follower's end of the replication stream (`Raft.StreamAppend`), served here instead of
//! by tonic's generated server; every other Raft RPC goes on to the generated server. Every
//! request, of any RPC, first passes the CommitLog layout check (`layout_check`).
//!
//! tonic copies each request into its receive buffer before decoding it, and the follower
//! then had to copy it again: entries decoded as slices of that buffer (they live until
//! applied and evicted from the log cache) would keep it from being reused warm, and every
//! request would land in a freshly allocated, page-faulting buffer (measured: W1, 300k
//! messages, 12k more page faults per follower, servers 11.3-11.9 against 10.8-11.3 us of
//! CPU a message). Here each request is copied once, from the HTTP/2 frames into a buffer of
//! exactly its size, and its entries' records become slices of that buffer (see
//! `codec::decode_shared`).
//!
//! The wire format is what tonic writes and reads (see `append_codec`): gRPC messages
//! carrying `RaftPayload`s each way, and the call's status in the response trailers, or in
//! its headers when it is refused before any result.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Context;
use std::task::Poll;

use bytes::Buf;
use bytes::BufMut;
use bytes::Bytes;
use bytes::BytesMut;
use futures::Stream;
use futures::StreamExt;
use http_body::Body as _;
use http_body::Frame;
use prost::Message;
use rocketraft_proto::raft as pb;
use rocketraft_proto::raft::raft_server::RaftServer;
use tonic::Status;
use tonic::body::Body;
use tonic::codegen::BoxFuture;
use tonic::codegen::Service;
use tonic::codegen::http;
use tonic::server::NamedService;

use crate::raft::log::layout_check::LayoutCheck;
use crate::raft::transport::append_codec::GRPC_HEADER_SIZE;
use crate::raft::transport::append_codec::STREAM_APPEND_PATH;
use crate::raft::transport::append_codec::message_len;
use crate::raft::transport::append_codec::put_message_header;
use crate::raft::transport::service::RaftService;
use crate::raft::transport::service::ResultStream;

/// The Raft service as the server routes it: `StreamAppend` here, the rest generated.
#[derive(Clone)]
pub struct RaftRoutes {
    service: Arc<RaftService>,
    generated: RaftServer<RaftService>,
    message_bytes_max: usize,
    layout: Arc<LayoutCheck>,
}

impl RaftRoutes {
    /// Serves `service`, accepting messages up to `message_bytes_max` bytes each way, from
    /// peers whose CommitLog segments are `commit_log_segment_bytes` long as this node's are.
    pub fn new(
        service: RaftService,
        message_bytes_max: usize,
        commit_log_segment_bytes: u64,
    ) -> RaftRoutes {
        let service = Arc::new(service);
        let generated = RaftServer::from_arc(service.clone())
            .max_decoding_message_size(message_bytes_max)
            .max_encoding_message_size(message_bytes_max);
        RaftRoutes {
            service,
            generated,
            message_bytes_max,
            layout: Arc::new(LayoutCheck::new(commit_log_segment_bytes)),
        }
    }

    async fn stream_append(
        service: Arc<RaftService>,
        message_bytes_max: usize,
        request: http::Request<Body>,
    ) -> http::Response<Body> {
        let payloads = GrpcMessages::new(request.into_body(), message_bytes_max).map(|message| {
            let payload = pb::RaftPayload::decode(message?).map_err(|error| {
                tracing::warn!(%error, "undecodable replication message");
                Status::invalid_argument(error.to_string())
            })?;
            Ok(payload.data)
        });
        match service.append_stream(payloads).await {
            Ok(results) => {
                let mut response = http::Response::new(Body::new(ResultsBody {
                    results,
                    ended: false,
                }));
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/grpc"),
                );
                response
            }
            Err(status) => status.into_http(),
        }
    }
}

impl NamedService for RaftRoutes {
    const NAME: &'static str = <RaftServer<RaftService> as NamedService>::NAME;
}

impl Service<http::Request<Body>> for RaftRoutes {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<http::Response<Body>, Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if let Err(refused) = self.layout.check(request.headers()) {
            return Box::pin(async move { Ok(refused.into_http()) });
        }
        if request.uri().path() != STREAM_APPEND_PATH {
            return self.generated.call(request);
        }
        let (service, message_bytes_max) = (self.service.clone(), self.message_bytes_max);
        Box::pin(
            async move { Ok(RaftRoutes::stream_append(service, message_bytes_max, request).await) },
        )
    }
}

/// The gRPC messages of a request body, each copied once from the frames it arrived in. A
/// frame is copied as soon as it arrives, so HTTP/2 reuses its receive buffer warm. An error
/// (a compressed or oversized message, a body that fails or ends inside a message) is the
/// last item.
struct GrpcMessages {
    body: Body,
    message_bytes_max: usize,
    /// The header of the next message, and how much of it arrived.
    header: [u8; GRPC_HEADER_SIZE],
    header_len: usize,
    /// The message being received, in a buffer of its size, and that size.
    message: Option<(BytesMut, usize)>,
    /// Messages received and not yet taken, in order.
    received: VecDeque<Result<Bytes, Status>>,
    ended: bool,
}

impl GrpcMessages {
    fn new(body: Body, message_bytes_max: usize) -> GrpcMessages {
        GrpcMessages {
            body,
            message_bytes_max,
            header: [0; GRPC_HEADER_SIZE],
            header_len: 0,
            message: None,
            received: VecDeque::new(),
            ended: false,
        }
    }

    /// Takes in the bytes of one frame.
    fn receive(&mut self, mut data: Bytes) -> Result<(), Status> {
        while !data.is_empty() || self.message_is_complete() {
            match &mut self.message {
                None => {
                    let take = data.len().min(GRPC_HEADER_SIZE - self.header_len);
                    self.header[self.header_len..self.header_len + take]
                        .copy_from_slice(&data[..take]);
                    self.header_len += take;
                    data.advance(take);
                    if self.header_len == GRPC_HEADER_SIZE {
                        self.message = Some(self.start_message()?);
                    }
                }
                Some((message, len)) => {
                    let take = data.len().min(*len - message.len());
                    message.put_slice(&data[..take]);
                    data.advance(take);
                    if message.len() == *len {
                        self.received.push_back(Ok(message.split().freeze()));
                        self.message = None;
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether a message of no bytes has just started: it is complete without more data.
    fn message_is_complete(&self) -> bool {
        self.message
            .as_ref()
            .is_some_and(|(message, len)| message.len() == *len)
    }

    /// Reads the header received and makes room for its message.
    fn start_message(&mut self) -> Result<(BytesMut, usize), Status> {
        self.header_len = 0;
        let len = message_len(self.header).ok_or_else(|| {
            Status::internal("a compressed replication message (no compression was negotiated)")
        })? as usize;
        if len > self.message_bytes_max {
            return Err(Status::out_of_range(format!(
                "a replication message of {len} bytes exceeds the {} a message may have",
                self.message_bytes_max
            )));
        }
        Ok((BytesMut::with_capacity(len), len))
    }

    fn is_inside_a_message(&self) -> bool {
        self.header_len > 0 || self.message.is_some()
    }
}

impl Stream for GrpcMessages {
    type Item = Result<Bytes, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(message) = this.received.pop_front() {
                return Poll::Ready(Some(message));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            let frame = match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(frame) => frame,
            };
            let failed = match frame {
                // Trailers of a request carry nothing for this call.
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => this.receive(data).err(),
                    Err(_trailers) => None,
                },
                Some(Err(status)) => Some(status),
                None if this.is_inside_a_message() => Some(Status::internal(
                    "the replication stream ended inside a message",
                )),
                None => {
                    this.ended = true;
                    None
                }
            };
            if let Some(status) = failed {
                this.ended = true;
                this.received.push_back(Err(status));
            }
        }
    }
}

/// The response body: one gRPC message per result, then the call's status as trailers.
struct ResultsBody {
    results: ResultStream,
    ended: bool,
}

impl http_body::Body for ResultsBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        let status = match this.results.poll_next_unpin(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(Ok(payload))) => match message_of(&payload) {
                Ok(message) => return Poll::Ready(Some(Ok(Frame::data(message)))),
                Err(status) => status,
            },
            Poll::Ready(Some(Err(status))) => status,
            Poll::Ready(None) => Status::ok(""),
        };
        this.ended = true;
        let mut trailers = http::HeaderMap::new();
        if let Err(unsendable) = status.add_header(&mut trailers) {
            trailers.clear();
            let _ = Status::internal(unsendable.message().to_owned()).add_header(&mut trailers);
        }
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }
}

/// `payload` as one gRPC message.
fn message_of(payload: &pb::RaftPayload) -> Result<Bytes, Status> {
    let len = payload.encoded_len();
    let len_field = u32::try_from(len)
        .map_err(|_| Status::internal(format!("a result of {len} bytes is too large to send")))?;
    let mut message = BytesMut::with_capacity(GRPC_HEADER_SIZE + len);
    put_message_header(&mut message, len_field);
    payload.encode_raw(&mut message);
    Ok(message.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request body of `chunks`, as HTTP/2 frames would bring them.
    fn body_of(chunks: Vec<Vec<u8>>) -> Body {
        let frames = futures::stream::iter(
            chunks
                .into_iter()
                .map(|chunk| Ok::<_, Status>(Frame::data(Bytes::from(chunk)))),
        );
        Body::new(http_body_util::StreamBody::new(frames))
    }

    fn framed(message: &[u8]) -> Vec<u8> {
        let mut framed = vec![0];
        framed.extend((message.len() as u32).to_be_bytes());
        framed.extend(message);
        framed
    }

    async fn messages(chunks: Vec<Vec<u8>>, max: usize) -> Vec<Result<Bytes, tonic::Code>> {
        GrpcMessages::new(body_of(chunks), max)
            .map(|item| item.map_err(|status| status.code()))
            .collect()
            .await
    }

    #[tokio::test]
    async fn messages_are_read_across_and_within_frames_whatever_the_split() {
        let (a, b, c) = (vec![1u8; 300], vec![2u8; 5], Vec::new());
        let stream: Vec<u8> = [framed(&a), framed(&b), framed(&c)].concat();
        for split in [1, 3, 5, 6, 64, 305, 306, stream.len()] {
            let chunks: Vec<Vec<u8>> = stream.chunks(split).map(<[u8]>::to_vec).collect();
            assert_eq!(
                messages(chunks, 1024).await,
                vec![
                    Ok(a.clone().into()),
                    Ok(b.clone().into()),
                    Ok(c.clone().into())
                ],
                "frames of {split} bytes"
            );
        }
    }

    #[tokio::test]
    async fn a_bad_message_ends_the_stream_with_why() {
        let message = vec![7u8; 100];
        assert_eq!(
            messages(vec![framed(&message)], 100).await,
            vec![Ok(message.clone().into())],
            "at the limit"
        );
        assert_eq!(
            messages(vec![framed(&message), framed(&message)], 99).await,
            vec![Err(tonic::Code::OutOfRange)],
            "over the limit"
        );
        let mut compressed = framed(&message);
        compressed[0] = 1;
        assert_eq!(
            messages(vec![compressed], 100).await,
            vec![Err(tonic::Code::Internal)]
        );
        let cut = framed(&message)[..50].to_vec();
        assert_eq!(
            messages(vec![framed(&message), cut], 100).await,
            vec![Ok(message.into()), Err(tonic::Code::Internal)],
            "the body ends inside a message"
        );
    }
}
