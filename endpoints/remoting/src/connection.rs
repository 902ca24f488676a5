//! One remoting connection, served: requests are read in order and answered concurrently (a
//! held pull does not hold back a send on the same connection), each reply written as soon
//! as it is ready with its request's `opaque`, which is how the client matches them.
//!
//! Invariants:
//! - at most [`REQUESTS_IN_FLIGHT_MAX`] requests of a connection are handled at once; one
//!   past them is answered `SYSTEM_BUSY` at once, never queued without bound;
//! - a oneway request gets no reply, except the `REQUEST_CODE_NOT_SUPPORTED` of an unknown
//!   code (as a Java server does), so a client learns that its call went nowhere;
//! - bytes that are not a frame close the connection, logged with the peer and why: after a
//!   bad length there is no frame boundary left to answer at;
//! - when the connection ends, every request still handled ends with it (they are polled by
//!   its task, never spawned).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use futures::SinkExt;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rocketraft_server_kit::connection_limit::Admitted;
use rocketraft_server_kit::side_protocol::SideProtocol;
use tokio::io::AsyncRead;
use tokio::io::AsyncWrite;
use tokio_util::codec::FramedRead;
use tokio_util::codec::FramedWrite;

use crate::codes::response;
use crate::command::RemotingCommand;
use crate::frame::FRAME_FIRST_BYTE;
use crate::frame::RemotingCodec;

/// Requests of one connection handled at once, at most: a consumer holds one pull per queue
/// it reads through this connection's broker, so this is about that many queues.
pub const REQUESTS_IN_FLIGHT_MAX: usize = 4096;

/// What serves the requests of a remoting connection.
pub trait Handler: Send + Sync + 'static {
    /// The reply to `request` from `peer`. A code it does not serve is answered
    /// [`RemotingCommand::not_supported`].
    fn handle(
        &self,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> impl Future<Output = RemotingCommand> + Send;
}

/// Serves the connection `io` from `peer` with `handler` until the client closes it, sends
/// bytes that are not a frame, or a read or write fails (a cut connection's do).
pub async fn serve_connection<IO, H>(io: IO, peer: SocketAddr, handler: &H)
where
    IO: AsyncRead + AsyncWrite + Send,
    H: Handler,
{
    let (read, write) = tokio::io::split(io);
    let mut requests = FramedRead::new(read, RemotingCodec);
    let mut replies = FramedWrite::new(write, RemotingCodec);
    let mut handling = FuturesUnordered::new();
    loop {
        let reply = tokio::select! {
            frame = requests.next() => match frame {
                Some(Ok(command)) if command.is_response() => {
                    // Replies to this server's own requests are matched by the caller that
                    // sent them; none is sent on a connection served here yet.
                    tracing::debug!(%peer, opaque = command.opaque, "an unexpected reply");
                    continue;
                }
                Some(Ok(request)) if handling.len() >= REQUESTS_IN_FLIGHT_MAX => {
                    busy(&request)
                }
                Some(Ok(request)) => {
                    tracing::debug!(%peer, code = request.code, opaque = request.opaque, "remoting request");
                    handling.push(answer(handler, request, peer));
                    continue;
                }
                Some(Err(error)) => {
                    tracing::warn!(%peer, %error, "closing a remoting connection: not a frame");
                    return;
                }
                None => return,
            },
            Some(reply) = handling.next() => match reply {
                Some(reply) => reply,
                None => continue,
            },
        };
        tracing::debug!(%peer, code = reply.code, opaque = reply.opaque, remark = ?reply.remark, "remoting reply");
        if let Err(error) = replies.send(reply).await {
            tracing::debug!(%peer, %error, "closing a remoting connection: a reply failed");
            return;
        }
    }
}

/// Remoting served beside gRPC on a server's port by `handler`: every connection that opens
/// with a frame's first byte (0x00) is served on a task of its own, until it closes or its
/// server cuts its connections.
pub fn side_protocol<H: Handler>(handler: Arc<H>) -> SideProtocol {
    SideProtocol {
        name: "RocketMQ remoting",
        first_byte: FRAME_FIRST_BYTE,
        serve: Arc::new(move |connection: Admitted| {
            let handler = handler.clone();
            tokio::spawn(async move {
                let Ok(peer) = connection.peer_addr() else {
                    return;
                };
                serve_connection(connection, peer, handler.as_ref()).await;
            });
        }),
    }
}

/// `handler`'s reply to `request`, unless `request` is oneway (and its code known).
async fn answer<H: Handler>(
    handler: &H,
    request: RemotingCommand,
    peer: SocketAddr,
) -> Option<RemotingCommand> {
    let oneway = request.is_oneway();
    let reply = handler.handle(request, peer).await;
    (!oneway || reply.code == response::REQUEST_CODE_NOT_SUPPORTED).then_some(reply)
}

/// The answer to a request past [`REQUESTS_IN_FLIGHT_MAX`].
fn busy(request: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(
        request,
        response::SYSTEM_BUSY,
        Some(format!(
            "{REQUESTS_IN_FLIGHT_MAX} requests of this connection are in flight already \
             (REQUESTS_IN_FLIGHT_MAX); send again when one was answered"
        )),
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use tokio::net::TcpListener;
    use tokio::net::TcpStream;
    use tokio::sync::Notify;

    use super::*;
    use crate::codes::request;
    use crate::command::FLAG_ONEWAY;

    /// Echoes a request's body, after `release` for the code `HELD`.
    struct Echo {
        release: Arc<Notify>,
    }

    const HELD: i32 = request::PULL_MESSAGE;

    impl Handler for Echo {
        async fn handle(&self, request: RemotingCommand, _peer: SocketAddr) -> RemotingCommand {
            match request.code {
                HELD => self.release.notified().await,
                request::SEND_MESSAGE => {}
                _ => return RemotingCommand::not_supported(&request),
            }
            let mut reply = RemotingCommand::response_to(&request, response::SUCCESS, None);
            reply.body = request.body;
            reply
        }
    }

    async fn serving(handler: Echo) -> TcpStream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let (stream, peer) = listener.accept().await.expect("accept");
            serve_connection(stream, peer, &handler).await;
        });
        TcpStream::connect(addr).await.expect("connect")
    }

    fn request(code: i32, opaque: i32, body: &'static [u8]) -> RemotingCommand {
        RemotingCommand {
            code,
            opaque,
            body: Bytes::from_static(body),
            ..RemotingCommand::default()
        }
    }

    #[tokio::test]
    async fn a_held_request_does_not_hold_back_the_ones_after_it() {
        let release = Arc::new(Notify::new());
        let client = serving(Echo {
            release: release.clone(),
        })
        .await;
        let mut client = tokio_util::codec::Framed::new(client, RemotingCodec);
        client.send(request(HELD, 1, b"held")).await.expect("send");
        client
            .send(request(request::SEND_MESSAGE, 2, b"sent"))
            .await
            .expect("send");
        let first = client.next().await.expect("a reply").expect("decoded");
        assert_eq!((first.opaque, &first.body[..]), (2, &b"sent"[..]));
        release.notify_one();
        let second = client.next().await.expect("a reply").expect("decoded");
        assert_eq!((second.opaque, &second.body[..]), (1, &b"held"[..]));
    }

    #[tokio::test]
    async fn oneway_gets_no_reply_unless_its_code_is_unknown() {
        let client = serving(Echo {
            release: Arc::new(Notify::new()),
        })
        .await;
        let mut client = tokio_util::codec::Framed::new(client, RemotingCodec);
        let oneway = |code, opaque| RemotingCommand {
            flag: FLAG_ONEWAY,
            ..request(code, opaque, b"")
        };
        client
            .send(oneway(request::SEND_MESSAGE, 1))
            .await
            .expect("send");
        client.send(oneway(9999, 2)).await.expect("send");
        client
            .send(request(request::SEND_MESSAGE, 3, b"two-way"))
            .await
            .expect("send");
        let mut replies = Vec::new();
        for _ in 0..2 {
            let reply = tokio::time::timeout(Duration::from_secs(10), client.next())
                .await
                .expect("in time")
                .expect("a reply")
                .expect("decoded");
            replies.push((reply.opaque, reply.code, reply.remark));
        }
        replies.sort();
        assert_eq!(
            replies,
            [
                (
                    2,
                    response::REQUEST_CODE_NOT_SUPPORTED,
                    Some(" request type 9999 not supported".to_owned())
                ),
                (3, response::SUCCESS, None),
            ],
            "the oneway send is not answered"
        );
    }

    #[tokio::test]
    async fn bytes_that_are_not_a_frame_close_the_connection() {
        use tokio::io::AsyncReadExt;
        use tokio::io::AsyncWriteExt;
        let mut client = serving(Echo {
            release: Arc::new(Notify::new()),
        })
        .await;
        // A negative frame length.
        client
            .write_all(&[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0])
            .await
            .expect("write");
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut rest))
            .await
            .expect("closed in time");
        assert!(
            matches!(read, Ok(0)) || read.is_err(),
            "closed without an answer: {read:?} {rest:?}"
        );
    }

    #[tokio::test]
    async fn requests_past_the_limit_are_answered_busy() {
        let release = Arc::new(Notify::new());
        let client = serving(Echo {
            release: release.clone(),
        })
        .await;
        let mut client = tokio_util::codec::Framed::new(client, RemotingCodec);
        for opaque in 0..REQUESTS_IN_FLIGHT_MAX as i32 {
            client.feed(request(HELD, opaque, b"")).await.expect("feed");
        }
        client
            .send(request(request::SEND_MESSAGE, -1, b"one more"))
            .await
            .expect("send");
        let reply = client.next().await.expect("a reply").expect("decoded");
        assert_eq!((reply.opaque, reply.code), (-1, response::SYSTEM_BUSY));
        assert!(
            reply
                .remark
                .is_some_and(|remark| remark.contains("REQUESTS_IN_FLIGHT_MAX")),
            "the limit is named"
        );
    }
}
