//! The 5.x clients with a `Telemetry` stream open on this endpoint, and the topics each
//! publishes (from its settings), so a server command (a transaction's check-back) reaches a
//! producer of the right topic; and by client id, whether a client is still there (a push
//! consumer's deliveries are renewed only while it is).
//!
//! A client's held receives end when it leaves: its `NotifyClientTermination`, or the end of
//! its Telemetry stream, cancels the stream's token ([`Clients::termination`]), so an official
//! client's shutdown does not wait out a long poll.
//!
//! Invariants: a stream is registered from its first command until it ends; a command is
//! only offered (never waited on): a client whose stream is full is passed over; a stream's
//! token is cancelled once it ends, so no held receive outlives its client's streams.

use std::collections::BTreeMap;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::pb;

/// Where a client's server commands go: its Telemetry stream's outbound half.
pub type CommandSender = mpsc::Sender<Result<pb::TelemetryCommand, tonic::Status>>;

#[derive(Default)]
pub struct Clients {
    streams: Mutex<Streams>,
    /// Rotates which publisher of a topic gets the next command.
    next: AtomicUsize,
}

#[derive(Default)]
struct Streams {
    last_id: u64,
    open: BTreeMap<u64, Client>,
}

struct Client {
    /// The client's `x-mq-client-id`, if it sent one.
    client_id: Option<String>,
    publishes: HashSet<String>,
    commands: CommandSender,
    /// Cancelled when this stream ends or its client says it terminates.
    ended: CancellationToken,
}

/// One open Telemetry stream; closes its registration when dropped.
pub struct Registration {
    clients: Arc<Clients>,
    id: u64,
}

impl Clients {
    /// Registers a stream of client `client_id` whose commands go to `commands`.
    pub fn open(
        self: &Arc<Self>,
        client_id: Option<String>,
        commands: CommandSender,
    ) -> Registration {
        let mut streams = self.lock();
        streams.last_id += 1;
        let id = streams.last_id;
        streams.open.insert(
            id,
            Client {
                client_id,
                publishes: HashSet::new(),
                commands,
                ended: CancellationToken::new(),
            },
        );
        Registration {
            clients: self.clone(),
            id,
        }
    }

    /// Offers `command` to one client that publishes `topic`, in turn; `false` if none took it.
    pub fn offer_to_publisher(&self, topic: &str, command: pb::TelemetryCommand) -> bool {
        let streams = self.lock();
        let publishers: Vec<&Client> = streams
            .open
            .values()
            .filter(|client| client.publishes.contains(topic))
            .collect();
        if publishers.is_empty() {
            return false;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut command = Some(command);
        for step in 0..publishers.len() {
            let client = publishers[(start + step) % publishers.len()];
            match client
                .commands
                .try_send(Ok(command.take().expect("put back on failure")))
            {
                Ok(()) => return true,
                Err(mpsc::error::TrySendError::Full(Ok(back)))
                | Err(mpsc::error::TrySendError::Closed(Ok(back))) => command = Some(back),
                Err(_) => return false,
            }
        }
        false
    }

    /// Whether client `client_id` has a stream open here.
    pub fn is_open(&self, client_id: &str) -> bool {
        self.lock()
            .open
            .values()
            .any(|client| client.client_id.as_deref() == Some(client_id))
    }

    /// What ends client `client_id`'s held receives: its newest open stream's token; `None` if
    /// it has no stream open here (a receive of such a client waits out its long poll).
    pub fn termination(&self, client_id: &str) -> Option<CancellationToken> {
        self.lock()
            .open
            .values()
            .rev()
            .find(|client| client.client_id.as_deref() == Some(client_id))
            .map(|client| client.ended.clone())
    }

    /// Client `client_id` terminates: its held receives end now.
    pub fn terminate(&self, client_id: &str) {
        for client in self.lock().open.values() {
            if client.client_id.as_deref() == Some(client_id) {
                client.ended.cancel();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Streams> {
        self.streams
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Registration {
    /// The client's settings say it publishes `topics`.
    pub fn publishes(&self, topics: impl IntoIterator<Item = String>) {
        if let Some(client) = self.clients.lock().open.get_mut(&self.id) {
            client.publishes = topics.into_iter().collect();
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(client) = self.clients.lock().open.remove(&self.id) {
            client.ended.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(id: &str) -> pb::TelemetryCommand {
        pb::TelemetryCommand {
            status: None,
            command: Some(
                pb::telemetry_command::Command::RecoverOrphanedTransactionCommand(
                    pb::RecoverOrphanedTransactionCommand {
                        message: None,
                        transaction_id: id.into(),
                    },
                ),
            ),
        }
    }

    #[test]
    fn a_command_goes_to_publishers_of_its_topic_in_turn() {
        let clients = Arc::new(Clients::default());
        let (a_sender, mut a) = mpsc::channel(4);
        let (b_sender, mut b) = mpsc::channel(4);
        let (other_sender, mut other) = mpsc::channel(4);
        let first = clients.open(Some("a".into()), a_sender);
        first.publishes(["T".to_owned()]);
        let second = clients.open(None, b_sender);
        second.publishes(["T".to_owned()]);
        let third = clients.open(None, other_sender);
        third.publishes(["U".to_owned()]);
        assert!(clients.offer_to_publisher("T", command("1")));
        assert!(clients.offer_to_publisher("T", command("2")));
        assert!(a.try_recv().is_ok() && b.try_recv().is_ok(), "one each");
        assert!(other.try_recv().is_err());
        assert!(clients.is_open("a") && !clients.is_open("b"));
        drop((first, second));
        assert!(!clients.is_open("a"), "its stream ended");
        assert!(
            !clients.offer_to_publisher("T", command("3")),
            "closed streams are gone"
        );
        drop(third);
    }

    #[test]
    fn a_full_stream_is_passed_over() {
        let clients = Arc::new(Clients::default());
        let (full_sender, _full) = mpsc::channel(1);
        let (free_sender, mut free) = mpsc::channel(4);
        let full = clients.open(None, full_sender.clone());
        full.publishes(["T".to_owned()]);
        full_sender
            .try_send(Ok(command("filler")))
            .expect("room for one");
        let open = clients.open(None, free_sender);
        open.publishes(["T".to_owned()]);
        assert!(clients.offer_to_publisher("T", command("1")));
        assert!(clients.offer_to_publisher("T", command("2")));
        assert_eq!(
            free.try_recv().is_ok() as u8 + free.try_recv().is_ok() as u8,
            2
        );
        drop((full, open));
    }
}
