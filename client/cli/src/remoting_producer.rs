//! A 4.x producer connection as the Java client keeps one: one TCP connection to a broker
//! node, any number of `SEND_MESSAGE_V2` requests in flight on it, each reply matched to its
//! request by `opaque`, and writes flushed once per burst. What `rocketraft-bench --remoting`
//! sends through, to measure the 4.x face against the SDK.
//!
//! Invariant: every request gets exactly one outcome: its reply, or the error that closed the
//! connection (every request still waiting then fails with it).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicI32;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures::SinkExt;
use futures::StreamExt;
use rocketraft_remoting::ExtFields;
use rocketraft_remoting::RemotingCodec;
use rocketraft_remoting::RemotingCommand;
use rocketraft_remoting::codes::request;
use rocketraft_remoting::codes::response;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::sync::oneshot;
use tokio_util::codec::FramedRead;
use tokio_util::codec::FramedWrite;

/// Requests queued for the writer at most; a sender waits beyond it.
const QUEUED_MAX: usize = 4096;
/// The version a Java 4.9.4 client sends (`MQVersion.Version.V4_9_4`).
const CLIENT_VERSION: i32 = 401;

#[derive(Debug, thiserror::Error)]
pub enum RemotingSendError {
    #[error("the connection to {addr} failed: {reason}")]
    Connection { addr: SocketAddr, reason: String },
    #[error("the broker refused the send with code {code}: {remark}")]
    Refused { code: i32, remark: String },
}

/// The requests waiting for a reply, by opaque; `None` once the connection closed.
type Waiting = Arc<Mutex<Option<HashMap<i32, oneshot::Sender<RemotingCommand>>>>>;

fn lock(
    waiting: &Waiting,
) -> std::sync::MutexGuard<'_, Option<HashMap<i32, oneshot::Sender<RemotingCommand>>>> {
    waiting
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One connection's sending side; cheap to clone, all clones share the connection.
#[derive(Clone)]
pub struct RemotingProducer {
    addr: SocketAddr,
    group: String,
    queued: mpsc::Sender<RemotingCommand>,
    waiting: Waiting,
    next_opaque: Arc<AtomicI32>,
}

impl RemotingProducer {
    /// Connects to the broker node at `addr` as a producer of `group`.
    pub async fn connect(
        addr: SocketAddr,
        group: &str,
    ) -> Result<RemotingProducer, RemotingSendError> {
        let failed = |error: std::io::Error| RemotingSendError::Connection {
            addr,
            reason: error.to_string(),
        };
        let stream = TcpStream::connect(addr).await.map_err(failed)?;
        stream.set_nodelay(true).map_err(failed)?;
        let (reader, writer) = stream.into_split();
        let (queued, mut to_write) = mpsc::channel::<RemotingCommand>(QUEUED_MAX);
        let waiting: Waiting = Arc::new(Mutex::new(Some(HashMap::new())));
        tokio::spawn(async move {
            let mut frames = FramedWrite::new(writer, RemotingCodec);
            while let Some(command) = to_write.recv().await {
                // Everything queued goes out in one write, as a burst.
                let mut fed = frames.feed(command).await;
                while fed.is_ok() {
                    let Ok(more) = to_write.try_recv() else { break };
                    fed = frames.feed(more).await;
                }
                if fed.is_err() || frames.flush().await.is_err() {
                    return;
                }
            }
        });
        let replies = waiting.clone();
        tokio::spawn(async move {
            let mut frames = FramedRead::new(reader, RemotingCodec);
            while let Some(Ok(reply)) = frames.next().await {
                let waiter = lock(&replies)
                    .as_mut()
                    .and_then(|waiting| waiting.remove(&reply.opaque));
                if let Some(waiter) = waiter {
                    let _ = waiter.send(reply);
                }
            }
            // Closed: whoever still waits learns it from its dropped sender, and no one waits
            // from now on.
            lock(&replies).take();
        });
        Ok(RemotingProducer {
            addr,
            group: group.to_owned(),
            queued,
            waiting,
            next_opaque: Arc::default(),
        })
    }

    /// Sends one message of `topic` to `queue_id` with `properties` (RocketMQ's encoding) and
    /// waits for the broker's answer.
    pub async fn send(
        &self,
        topic: &str,
        queue_id: i32,
        properties: &str,
        body: Bytes,
    ) -> Result<(), RemotingSendError> {
        let opaque = self.next_opaque.fetch_add(1, Ordering::Relaxed);
        let mut ext_fields = ExtFields::new();
        let queue_id = queue_id.to_string();
        let born = rocketraft_domain::time::now_ms().to_string();
        for (name, value) in [
            ("a", self.group.as_str()),
            ("b", topic),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", &queue_id),
            ("f", "0"),
            ("g", &born),
            ("h", "0"),
            ("i", properties),
            ("j", "0"),
            ("k", "false"),
        ] {
            ext_fields.insert(name, value);
        }
        let command = RemotingCommand {
            code: request::SEND_MESSAGE_V2,
            version: CLIENT_VERSION,
            opaque,
            ext_fields,
            body,
            ..RemotingCommand::default()
        };
        let closed = || RemotingSendError::Connection {
            addr: self.addr,
            reason: "closed".to_owned(),
        };
        let (answered, answer) = oneshot::channel();
        lock(&self.waiting)
            .as_mut()
            .ok_or_else(closed)?
            .insert(opaque, answered);
        self.queued.send(command).await.map_err(|_| closed())?;
        let reply = answer.await.map_err(|_| closed())?;
        if reply.code != response::SUCCESS {
            return Err(RemotingSendError::Refused {
                code: reply.code,
                remark: reply.remark.unwrap_or_default(),
            });
        }
        Ok(())
    }
}
