//! The gRPC codec of every generated service and client: protobuf through prost, except that
//! a message's encoded length is reserved before it is written. tonic starts each message in
//! an 8 KiB buffer that otherwise grows by doubling while the message is written, copying what
//! it holds at every step: a batch of sends or a pull response of hundreds of messages was
//! copied about once more than written, and reallocated several times.
//!
//! Invariant: the bytes are exactly prost's; only the buffer's growth differs.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::Codec;
use tonic::codec::EncodeBuf;
use tonic::codec::Encoder;
use tonic_prost::ProstCodec;
use tonic_prost::ProstDecoder;

/// Encodes `T` and decodes `U` as [`ProstCodec`] does, reserving each message's length first.
#[derive(Debug, Clone)]
pub struct ExactCodec<T, U> {
    types: PhantomData<(T, U)>,
}

impl<T, U> Default for ExactCodec<T, U> {
    fn default() -> Self {
        ExactCodec { types: PhantomData }
    }
}

/// The encoder of [`ExactCodec`].
#[derive(Debug, Clone)]
pub struct ExactEncoder<T> {
    types: PhantomData<T>,
}

impl<T, U> Codec for ExactCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ExactEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> ExactEncoder<T> {
        ExactEncoder { types: PhantomData }
    }

    fn decoder(&mut self) -> ProstDecoder<U> {
        ProstCodec::<T, U>::default().decoder()
    }
}

impl<T: Message> Encoder for ExactEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(item.encoded_len());
        item.encode(dst)
            .map_err(|error| Status::internal(format!("encode: {error}")))
    }
}

#[cfg(test)]
mod tests {
    use std::task::Context;
    use std::task::Poll;
    use std::task::Waker;

    use tonic::codec::EncodeBody;
    use tonic::codegen::Body;
    use tonic::codegen::tokio_stream;

    use super::*;
    use crate::broker::SendRequest;
    use crate::common::Message as WireMessage;

    /// What the codec frames for `request`: the gRPC message header, then the message.
    fn framed(request: SendRequest) -> Vec<u8> {
        let source = tokio_stream::iter([Ok(request)]);
        let encoder = ExactCodec::<SendRequest, SendRequest>::default().encoder();
        let mut body = std::pin::pin!(EncodeBody::new_client(encoder, source, None, None));
        let mut context = Context::from_waker(Waker::noop());
        let mut framed = Vec::new();
        while let Poll::Ready(Some(frame)) = body.as_mut().poll_frame(&mut context) {
            let data = frame.expect("frame").into_data().expect("data");
            framed.extend_from_slice(&data);
        }
        framed
    }

    #[test]
    fn frames_exactly_what_prost_encodes() {
        for count in [0, 1, 300] {
            let request = SendRequest {
                topic: "t".into(),
                messages: (0..count)
                    .map(|i| WireMessage {
                        body: vec![i as u8; 1024].into(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            };
            let encoded = request.encode_to_vec();
            let mut expected = vec![0];
            expected.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
            expected.extend_from_slice(&encoded);
            assert_eq!(framed(request), expected, "{count} messages");
        }
    }
}
