//! A cap on the connections a gRPC server (broker or nameserver) serves at once, shared by
//! both. A connection past the cap is told why in HTTP/2's own terms (the server's SETTINGS,
//! then GOAWAY with `ENHANCE_YOUR_CALM`, which clients report as "detected excessive load
//! generating behavior") and closed; nothing it sends is read as a request.
//!
//! Invariants: at most `max` connections are served at once, each holding one permit until it
//! closes, and one that sends nothing within [`FIRST_BYTES_TIMEOUT`] is closed; a refused
//! connection is gone within [`REFUSAL_LINGER`], and at most
//! [`REFUSALS_LINGERING_MAX`] linger at once (past them a connection is closed unanswered);
//! refusals are logged at most once per [`REFUSAL_LOG_EVERY`], with their count.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::task::Context;
use std::task::Poll;
use std::time::Duration;
use std::time::Instant;

use futures::Stream;
use futures::StreamExt;
use tokio::io::AsyncRead;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWrite;
use tokio::io::AsyncWriteExt;
use tokio::io::ReadBuf;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::sync::WaitForCancellationFutureOwned;
use tonic::transport::server::Connected;
use tonic::transport::server::TcpConnectInfo;

/// Default cap on the connections one server serves at once.
pub const CONNECTIONS_MAX_DEFAULT: usize = 10_000;
/// How long a refused connection may take to read its answer before it is closed.
pub const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// Refused connections being answered at once, at most.
pub const REFUSALS_LINGERING_MAX: usize = 64;
/// An admitted connection that sends nothing for this long after it was accepted is closed, so
/// idle sockets cannot hold the places of real clients (or stall a graceful shutdown).
pub const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(10);
/// Refusals are logged at most this often.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);
/// HTTP/2's `ENHANCE_YOUR_CALM` error code (RFC 9113, section 7).
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// A connection within the cap; its permit is returned when it is dropped.
pub struct Admitted {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
    /// Until the client's first bytes arrive: when the connection is given up.
    first_bytes_deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Set when the server's stop gave up waiting for its calls: every read and write fails
    /// from then on, so the connection's task ends and drops the services it holds (a server
    /// task's abort does not reach the tasks that serve its connections).
    cut: ConnectionCut,
    /// Wakes a read or write waiting on the socket when the cut comes; polled only when the
    /// socket is not ready, so a busy connection pays one atomic load per call.
    cut_wait: Pin<Box<WaitForCancellationFutureOwned>>,
}

/// Cuts every connection of one server at once ([`Admitted`]).
#[derive(Clone, Default)]
pub struct ConnectionCut {
    cut: Arc<AtomicBool>,
    wake: CancellationToken,
}

impl ConnectionCut {
    pub fn new() -> ConnectionCut {
        ConnectionCut::default()
    }

    /// Cuts the connections: their reads and writes fail from now on.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        self.wake.cancel();
    }

    fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }
}

impl Admitted {
    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.stream.peer_addr()
    }

    /// The first byte the client sent, left unread (to tell protocols apart). Fails if the
    /// client closes first, sends nothing within [`FIRST_BYTES_TIMEOUT`], or the connection
    /// is cut.
    pub async fn first_byte(&mut self) -> io::Result<u8> {
        let Admitted {
            stream,
            first_bytes_deadline,
            cut_wait,
            ..
        } = self;
        let silent_too_long = async {
            match first_bytes_deadline.as_mut() {
                Some(deadline) => deadline.as_mut().await,
                None => std::future::pending().await,
            }
        };
        let mut byte = [0u8; 1];
        tokio::select! {
            peeked = stream.peek(&mut byte) => match peeked? {
                0 => Err(io::ErrorKind::UnexpectedEof.into()),
                _ => Ok(byte[0]),
            },
            () = silent_too_long => Err(Admitted::silent_error()),
            () = cut_wait.as_mut() => Err(Admitted::cut_error()),
        }
    }

    /// The error of a connection whose client sent nothing in time.
    fn silent_error() -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "the client sent nothing within FIRST_BYTES_TIMEOUT",
        )
    }

    /// The error of every read and write once the connection is cut.
    fn cut_error() -> io::Error {
        io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "the server stopped: its calls outlived the shutdown grace",
        )
    }

    /// `polled` (a read or write of the socket), unless the connection is cut; a pending
    /// call is woken by the cut.
    fn unless_cut<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Pending if self.cut_wait.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Err(Admitted::cut_error()))
            }
            polled => polled,
        }
    }
}

impl Connected for Admitted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Admitted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.cut.is_cut() {
            return Poll::Ready(Err(Admitted::cut_error()));
        }
        let filled = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        let polled = self.unless_cut(cx, polled);
        let Some(deadline) = self.first_bytes_deadline.as_mut() else {
            return polled;
        };
        match polled {
            Poll::Ready(Ok(())) if buf.filled().len() > filled => {
                self.first_bytes_deadline = None;
                Poll::Ready(Ok(()))
            }
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Err(Admitted::silent_error()))
            }
            other => other,
        }
    }
}

impl AsyncWrite for Admitted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.cut.is_cut() {
            return Poll::Ready(Err(Admitted::cut_error()));
        }
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.unless_cut(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.cut.is_cut() {
            return Poll::Ready(Err(Admitted::cut_error()));
        }
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.unless_cut(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The connections a gRPC server (broker, nameserver, 5.x endpoint) accepts on `listener`:
/// at most `max` at once (the `connections_max` setting), with Nagle's algorithm off. It
/// would hold back small frames (replication, acks) until the peer's delayed ACK (40 ms), and
/// the server builder's `tcp_nodelay` does not reach connections from an incoming stream.
/// Every connection is cut by `cut` (the server's stop, see
/// [`crate::graceful_stop::Serving::stop`]).
pub fn serve_connections(
    listener: tokio::net::TcpListener,
    max: usize,
    cut: ConnectionCut,
) -> impl Stream<Item = io::Result<Admitted>> {
    limit_connections(
        tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
        max,
        "connections_max",
        cut,
    )
}

/// The connections of `incoming` a server may serve: at most `max` at once (`key` names the
/// setting in the refusal's log line), each cut by `cut`.
pub fn limit_connections<S>(
    incoming: S,
    max: usize,
    key: &'static str,
    cut: ConnectionCut,
) -> impl Stream<Item = io::Result<Admitted>>
where
    S: Stream<Item = io::Result<TcpStream>>,
{
    let permits = Arc::new(Semaphore::new(max));
    let refusals = Arc::new(Refusals::new(max, key));
    incoming.filter_map(move |accepted| {
        let admitted = accepted.map(|stream| match permits.clone().try_acquire_owned() {
            Ok(permit) => Some(Admitted {
                stream,
                _permit: permit,
                first_bytes_deadline: Some(Box::pin(tokio::time::sleep(FIRST_BYTES_TIMEOUT))),
                cut_wait: Box::pin(cut.wake.clone().cancelled_owned()),
                cut: cut.clone(),
            }),
            Err(_) => {
                refusals.refuse(stream);
                None
            }
        });
        futures::future::ready(admitted.transpose())
    })
}

struct Refusals {
    max: usize,
    key: &'static str,
    lingering: Arc<Semaphore>,
    count: AtomicU64,
    logged_at: Mutex<Option<Instant>>,
}

impl Refusals {
    fn new(max: usize, key: &'static str) -> Refusals {
        Refusals {
            max,
            key,
            lingering: Arc::new(Semaphore::new(REFUSALS_LINGERING_MAX)),
            count: AtomicU64::new(0),
            logged_at: Mutex::new(None),
        }
    }

    fn refuse(&self, stream: TcpStream) {
        let count = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let mut logged_at = self
            .logged_at
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if logged_at.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_EVERY) {
            *logged_at = Some(Instant::now());
            tracing::warn!(
                peer = ?stream.peer_addr().ok(),
                refused_so_far = count,
                "refusing a connection: {} = {} connections are open",
                self.key,
                self.max
            );
        }
        drop(logged_at);
        if let Ok(permit) = self.lingering.clone().try_acquire_owned() {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(REFUSAL_LINGER, answer_refused(stream)).await;
                drop(permit);
            });
        }
    }
}

/// Sends the server preface and GOAWAY, then reads until the client closes, so the close is
/// not a reset that could overtake the answer.
async fn answer_refused(mut stream: TcpStream) -> io::Result<()> {
    stream.write_all(&refusal_frames()).await?;
    stream.shutdown().await?;
    let mut sink = [0u8; 1024];
    while stream.read(&mut sink).await? > 0 {}
    Ok(())
}

/// An empty SETTINGS frame (the server's connection preface) and a GOAWAY frame: no stream
/// processed, error `ENHANCE_YOUR_CALM`, the reason as debug data.
pub fn refusal_frames() -> Vec<u8> {
    let reason = b"too many connections";
    let mut frames = Vec::with_capacity(9 + 9 + 8 + reason.len());
    let mut frame_header = |length: usize, kind: u8| {
        frames.extend_from_slice(&(length as u32).to_be_bytes()[1..]);
        frames.extend_from_slice(&[kind, 0]);
        frames.extend_from_slice(&0u32.to_be_bytes());
    };
    frame_header(0, 0x4);
    frame_header(8 + reason.len(), 0x7);
    frames.extend_from_slice(&0u32.to_be_bytes());
    frames.extend_from_slice(&ENHANCE_YOUR_CALM.to_be_bytes());
    frames.extend_from_slice(reason);
    frames
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;
    use tonic::transport::server::TcpIncoming;

    use super::*;

    /// Paused time: the idle connection's deadline passes as soon as nothing else can run.
    #[tokio::test(start_paused = true)]
    async fn a_connection_holds_its_place_until_it_closes_or_stays_silent_too_long() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut admitted = Box::pin(limit_connections(
            TcpIncoming::from(listener),
            1,
            "max",
            ConnectionCut::new(),
        ));

        let _quiet_client = TcpStream::connect(addr).await.expect("connect");
        let mut quiet = admitted.next().await.expect("open").expect("admitted");

        let mut refused_client = TcpStream::connect(addr).await.expect("connect");
        let mut answer = Vec::new();
        // The refusal is answered while the stream looks for the next admitted connection.
        let next = admitted.next();
        tokio::pin!(next);
        tokio::select! {
            _ = &mut next => panic!("nothing else connected"),
            read = refused_client.read_to_end(&mut answer) => read.expect("read"),
        };
        assert_eq!(answer, refusal_frames());

        let started = tokio::time::Instant::now();
        let mut byte = [0u8; 1];
        let error = quiet.read(&mut byte).await.expect_err("silent too long");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), FIRST_BYTES_TIMEOUT);
        drop(quiet);

        let mut talking_client = TcpStream::connect(addr).await.expect("connect");
        let mut talking = next
            .await
            .expect("open")
            .expect("admitted after the place freed");
        talking_client.write_all(b"PRI").await.expect("write");
        let mut preface = [0u8; 3];
        talking.read_exact(&mut preface).await.expect("read");
        assert_eq!(&preface, b"PRI");
    }

    #[tokio::test]
    async fn a_cut_connection_fails_every_read_and_write_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let cut = ConnectionCut::new();
        let mut admitted = Box::pin(limit_connections(
            TcpIncoming::from(listener),
            1,
            "max",
            cut.clone(),
        ));
        let mut client = TcpStream::connect(addr).await.expect("connect");
        let mut served = admitted.next().await.expect("open").expect("admitted");
        client.write_all(b"ping").await.expect("write");
        let mut buf = [0u8; 4];
        served
            .read_exact(&mut buf)
            .await
            .expect("read before the cut");

        // A read waiting for bytes that never come ends when the connection is cut.
        let waiting = tokio::spawn(async move {
            let read = served.read(&mut buf).await;
            (read.map_err(|error| error.kind()), served)
        });
        cut.cut();
        let (read, mut served) = waiting.await.expect("the read ends");
        assert_eq!(read, Err(io::ErrorKind::ConnectionAborted));
        let write = served
            .write_all(b"pong")
            .await
            .map_err(|error| error.kind());
        assert_eq!(write, Err(io::ErrorKind::ConnectionAborted));
    }
}
