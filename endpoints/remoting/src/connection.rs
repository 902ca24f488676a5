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
//!   its task, never spawned), and its [`Peer`] reports it closed;
//! - the server's own requests to the client ([`Peer::send_oneway`]) wait in a queue of at
//!   most [`OUTBOUND_QUEUED_MAX`]; past that they are dropped, never buffered without bound
//!   for a client that does not read.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::task::Poll;

use futures::SinkExt;
use futures::Stream;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rocketraft_server_kit::connection_limit::Admitted;
use rocketraft_server_kit::side_protocol::SideProtocol;
use tokio::io::AsyncRead;
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;
use tokio_util::codec::FramedWrite;
use tokio_util::sync::CancellationToken;

use crate::codes::response;
use crate::command::FLAG_ONEWAY;
use crate::command::RemotingCommand;
use crate::command::SerializeType;
use crate::frame::FRAME_FIRST_BYTE;
use crate::frame::RemotingCodec;

/// Requests of one connection handled at once, at most: a consumer holds one pull per queue
/// it reads through this connection's broker, so this is about that many queues.
pub const REQUESTS_IN_FLIGHT_MAX: usize = 4096;

/// The server's own requests to one client waiting to be written, at most: a broker's
/// notices (`NOTIFY_CONSUMER_IDS_CHANGED`) and transaction check-backs. A client that lets
/// more pile up is not reading, and misses them, as a Java broker's oneway calls to a channel
/// that is not writable fail.
pub const OUTBOUND_QUEUED_MAX: usize = 1024;

/// Numbers connections, so a registry of peers can tell two apart.
static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// The client end of a served connection, as its handler sees it: where it is, and a way to
/// send it requests of the server's own. Cheap to clone; a clone kept after the connection
/// ended only reports it closed.
#[derive(Debug, Clone)]
pub struct Peer {
    id: u64,
    addr: SocketAddr,
    outbound: mpsc::Sender<RemotingCommand>,
    closed: CancellationToken,
}

impl Peer {
    /// A peer at `addr`, and the receiving end of what is sent to it.
    fn open(addr: SocketAddr) -> (Peer, mpsc::Receiver<RemotingCommand>) {
        let (outbound, queued) = mpsc::channel(OUTBOUND_QUEUED_MAX);
        let peer = Peer {
            id: NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed),
            addr,
            outbound,
            closed: CancellationToken::new(),
        };
        (peer, queued)
    }

    /// A peer whose connection is served nowhere (a handler's unit tests): what is sent to it
    /// is refused.
    #[cfg(test)]
    pub(crate) fn detached(addr: SocketAddr) -> Peer {
        Peer::open(addr).0
    }

    /// The connection's number, unique in this process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The client's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues `request` to be sent to the client as a oneway request (its `opaque` is the
    /// connection's own). False if the connection ended or [`OUTBOUND_QUEUED_MAX`] requests
    /// wait already.
    pub fn send_oneway(&self, mut request: RemotingCommand) -> bool {
        request.flag |= FLAG_ONEWAY;
        request.serialize_type = SerializeType::Json;
        !self.is_closed() && self.outbound.try_send(request).is_ok()
    }

    /// Whether the connection ended.
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Resolves when the connection has ended.
    pub async fn closed(&self) {
        self.closed.cancelled().await;
    }
}

/// What serves the requests of a remoting connection.
pub trait Handler: Send + Sync + 'static {
    /// The reply to `request` from `peer`. A code it does not serve is answered
    /// [`RemotingCommand::not_supported`].
    fn handle(
        &self,
        request: RemotingCommand,
        peer: &Peer,
    ) -> impl Future<Output = RemotingCommand> + Send;
}

/// Serves the connection `io` from `addr` with `handler` until the client closes it, sends
/// bytes that are not a frame, or a read or write fails (a cut connection's do).
pub async fn serve_connection<IO, H>(io: IO, addr: SocketAddr, handler: &H)
where
    IO: AsyncRead + AsyncWrite + Send,
    H: Handler,
{
    let (peer, mut outbound) = Peer::open(addr);
    let _closes = peer.closed.clone().drop_guard();
    let (read, write) = tokio::io::split(io);
    let mut requests = FramedRead::new(read, RemotingCodec);
    let mut replies = FramedWrite::new(write, RemotingCodec);
    let mut handling = FuturesUnordered::new();
    let mut next_opaque: i32 = 0;
    loop {
        let reply = tokio::select! {
            frame = requests.next() => match frame {
                Some(Ok(command)) if command.is_response() => {
                    // The server's own requests are oneway: no reply is waited for.
                    tracing::debug!(peer = %addr, opaque = command.opaque, "an unexpected reply");
                    continue;
                }
                Some(Ok(request)) if handling.len() >= REQUESTS_IN_FLIGHT_MAX => {
                    busy(&request)
                }
                Some(Ok(request)) => {
                    tracing::debug!(peer = %addr, code = request.code, opaque = request.opaque, "remoting request");
                    handling.push(answer(handler, request, &peer));
                    continue;
                }
                Some(Err(error)) => {
                    tracing::warn!(peer = %addr, %error, "closing a remoting connection: not a frame");
                    return;
                }
                None => return,
            },
            Some(reply) = handling.next() => match reply {
                Some(reply) => reply,
                None => continue,
            },
            Some(mut own) = outbound.recv() => {
                next_opaque = next_opaque.wrapping_add(1);
                own.opaque = next_opaque;
                tracing::debug!(peer = %addr, code = own.code, opaque = own.opaque, "remoting request to the client");
                own
            }
        };
        // The replies ready by now leave in the same write: a burst of sends answered by one
        // group commit costs one system call, not one each.
        let mut written = feed(&mut replies, reply, addr).await;
        while written.is_ok()
            && let Some(Some(more)) = ready_now(&mut handling).await
        {
            if let Some(more) = more {
                written = feed(&mut replies, more, addr).await;
            }
        }
        let flushed = match written {
            Ok(()) => replies.flush().await,
            failed => failed,
        };
        if let Err(error) = flushed {
            tracing::debug!(peer = %addr, %error, "closing a remoting connection: a write failed");
            return;
        }
    }
}

/// The next item of `stream` if it is ready now (`Some(None)`: the stream is empty), else
/// `None`; polled with this task's own waker, so an item not ready yet still wakes the task.
async fn ready_now<S: Stream + Unpin>(stream: &mut S) -> Option<Option<S::Item>> {
    std::future::poll_fn(|cx| match stream.poll_next_unpin(cx) {
        Poll::Ready(item) => Poll::Ready(Some(item)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// Queues `reply` to be written to the client at `addr` with the next flush.
async fn feed<W: AsyncWrite + Unpin>(
    replies: &mut FramedWrite<W, RemotingCodec>,
    reply: RemotingCommand,
    addr: SocketAddr,
) -> Result<(), crate::frame::EncodeError> {
    tracing::debug!(peer = %addr, code = reply.code, opaque = reply.opaque, remark = ?reply.remark, "remoting write");
    replies.feed(reply).await
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
    peer: &Peer,
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
        async fn handle(&self, request: RemotingCommand, peer: &Peer) -> RemotingCommand {
            match request.code {
                HELD => self.release.notified().await,
                request::SEND_MESSAGE => {}
                // Tells the client something of its own, as a broker's notice does.
                request::HEART_BEAT => {
                    let notice = RemotingCommand {
                        code: request::NOTIFY_CONSUMER_IDS_CHANGED,
                        opaque: 77,
                        ..RemotingCommand::default()
                    };
                    assert!(peer.send_oneway(notice));
                }
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

    #[test]
    fn a_peer_queues_at_most_its_maximum_and_nothing_once_closed() {
        let (peer, mut queued) = Peer::open("127.0.0.1:1".parse().expect("addr"));
        let notice = || request(request::NOTIFY_CONSUMER_IDS_CHANGED, 0, b"");
        for _ in 0..OUTBOUND_QUEUED_MAX {
            assert!(peer.send_oneway(notice()));
        }
        assert!(!peer.send_oneway(notice()), "one past OUTBOUND_QUEUED_MAX");
        let sent = queued.try_recv().expect("a queued request");
        assert!(sent.is_oneway() && !sent.is_response(), "{sent:?}");
        assert!(peer.send_oneway(notice()), "room again");
        peer.closed.cancel();
        assert!(peer.is_closed());
        assert!(!peer.send_oneway(notice()), "closed");
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
    async fn the_server_s_own_requests_go_down_the_connection_oneway_under_its_own_opaque() {
        let client = serving(Echo {
            release: Arc::new(Notify::new()),
        })
        .await;
        let mut client = tokio_util::codec::Framed::new(client, RemotingCodec);
        for opaque in [40, 41] {
            client
                .send(request(request::HEART_BEAT, opaque, b""))
                .await
                .expect("send");
        }
        let mut replies = Vec::new();
        let mut notices = Vec::new();
        for _ in 0..4 {
            let frame = client.next().await.expect("a frame").expect("decoded");
            match frame.is_response() {
                true => replies.push(frame.opaque),
                false => notices.push((frame.code, frame.opaque, frame.is_oneway())),
            }
        }
        replies.sort_unstable();
        assert_eq!(replies, [40, 41]);
        let notice = request::NOTIFY_CONSUMER_IDS_CHANGED;
        assert_eq!(notices, [(notice, 1, true), (notice, 2, true)]);
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
