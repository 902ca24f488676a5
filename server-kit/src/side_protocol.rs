//! A second protocol on a gRPC server's port, told apart by a connection's first byte: a
//! connection that opens with the side protocol's byte is handed to it, every other one goes
//! to the gRPC server (HTTP/2's preface opens with `P`, a TLS handshake with 0x16). RocketMQ
//! 4.x remoting frames open with 0x00 (a frame is shorter than 2^24 bytes), so 4.x clients
//! reach a node at the very address its routes and message ids name.
//!
//! Invariants: a connection is classified on a byte it sent, never on a guess; classifying
//! one never holds back the others (a silent connection waits alone, and is closed after
//! [`FIRST_BYTES_TIMEOUT`](crate::connection_limit::FIRST_BYTES_TIMEOUT)); a connection handed
//! to the side protocol keeps its place under the server's connection cap and is cut with
//! the server's other connections.

use std::io;
use std::sync::Arc;

use futures::Stream;
use futures::StreamExt;

use crate::connection_limit::Admitted;

/// A protocol served beside gRPC on the same port.
#[derive(Clone)]
pub struct SideProtocol {
    /// Its name, for logs.
    pub name: &'static str,
    /// The byte every connection of this protocol opens with.
    pub first_byte: u8,
    /// Serves one connection of its own, on tasks of its own, until the connection closes
    /// or is cut.
    pub serve: Arc<dyn Fn(Admitted) + Send + Sync>,
}

impl std::fmt::Debug for SideProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SideProtocol")
            .field("name", &self.name)
            .field("first_byte", &self.first_byte)
            .finish_non_exhaustive()
    }
}

/// The connections of `connections` that are gRPC's; the others go to `side` as their first
/// byte arrives. Every admitted connection may wait for its first byte at once (there are at
/// most `connections_max` of them), and `connections` is polled on meanwhile, so a connection
/// past the cap is refused at once even while every admitted one is silent.
pub fn split_side_protocol<S>(
    connections: S,
    side: SideProtocol,
    connections_max: usize,
) -> impl Stream<Item = io::Result<Admitted>>
where
    S: Stream<Item = io::Result<Admitted>>,
{
    connections
        .map(move |admitted| {
            let side = side.clone();
            async move {
                let mut connection = match admitted {
                    Ok(connection) => connection,
                    Err(error) => return Some(Err(error)),
                };
                match connection.first_byte().await {
                    Ok(byte) if byte == side.first_byte => {
                        (side.serve)(connection);
                        None
                    }
                    Ok(_) => Some(Ok(connection)),
                    Err(error) => {
                        tracing::debug!(
                            peer = ?connection.peer_addr(),
                            %error,
                            "a connection closed before its protocol was known"
                        );
                        None
                    }
                }
            }
        })
        .buffer_unordered(connections_max.saturating_add(1))
        .filter_map(futures::future::ready)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use tokio::io::AsyncReadExt;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;
    use tokio::net::TcpStream;
    use tonic::transport::server::TcpIncoming;

    use super::*;
    use crate::connection_limit::ConnectionCut;
    use crate::connection_limit::limit_connections;

    /// A side protocol that echoes what its connections send.
    fn echo(served: Arc<Mutex<u32>>) -> SideProtocol {
        SideProtocol {
            name: "echo",
            first_byte: 0x00,
            serve: Arc::new(move |mut connection: Admitted| {
                *served.lock().expect("lock") += 1;
                tokio::spawn(async move {
                    let mut buffer = [0u8; 64];
                    while let Ok(read @ 1..) = connection.read(&mut buffer).await {
                        if connection.write_all(&buffer[..read]).await.is_err() {
                            break;
                        }
                    }
                });
            }),
        }
    }

    #[tokio::test]
    async fn a_silent_connection_holds_back_neither_side() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let served = Arc::new(Mutex::new(0));
        let mut grpc = Box::pin(split_side_protocol(
            limit_connections(
                TcpIncoming::from(listener),
                8,
                "connections_max",
                ConnectionCut::new(),
            ),
            echo(served.clone()),
            8,
        ));

        // Accepted first, it says nothing: the two behind it are classified regardless.
        let _silent = TcpStream::connect(addr).await.expect("connect");
        let mut side = TcpStream::connect(addr).await.expect("connect");
        side.write_all(&[0x00, 0x01, 0x02]).await.expect("write");
        let mut http2 = TcpStream::connect(addr).await.expect("connect");
        http2.write_all(b"PRI * HTTP/2.0").await.expect("write");

        let mut first = grpc.next().await.expect("a connection").expect("admitted");
        let mut preface = [0u8; 3];
        first.read_exact(&mut preface).await.expect("read");
        assert_eq!(
            &preface, b"PRI",
            "the gRPC side reads the connection from its start"
        );

        let mut echoed = [0u8; 3];
        side.read_exact(&mut echoed).await.expect("echo");
        assert_eq!(
            echoed,
            [0x00, 0x01, 0x02],
            "the side protocol reads from the start too"
        );
        assert_eq!(*served.lock().expect("lock"), 1);
    }

    #[tokio::test]
    async fn past_the_cap_a_connection_is_refused_while_the_admitted_are_silent() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut grpc = Box::pin(split_side_protocol(
            limit_connections(
                TcpIncoming::from(listener),
                1,
                "connections_max",
                ConnectionCut::new(),
            ),
            echo(Arc::new(Mutex::new(0))),
            1,
        ));
        let _silent = TcpStream::connect(addr).await.expect("connect");
        let mut refused = TcpStream::connect(addr).await.expect("connect");
        let serving = tokio::spawn(async move { grpc.next().await.map(|c| c.is_ok()) });
        let mut answer = Vec::new();
        // Without polling on, the refusal would wait for the silent one's first-byte timeout
        // and then find its place free.
        tokio::time::timeout(Duration::from_secs(5), refused.read_to_end(&mut answer))
            .await
            .expect("refused at once")
            .expect("read");
        assert_eq!(answer, crate::connection_limit::refusal_frames());
        serving.abort();
    }
}
