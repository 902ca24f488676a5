//! The 4.x connections that heartbeat a group (a consumer group, or a producer group)
//! through this node, for the broker's own requests to them: each group is watched on the
//! broker group's leader (its membership changes, or its transaction check-backs) while it
//! has a connection here, and what the watch yields is sent down those connections.
//!
//! Invariants: a group has one watch per node, started by its first connection and stopped
//! when its last one closes; a closed connection leaves its groups at once, so nothing is
//! sent to it; a broken watch is reopened after a pause that doubles up to
//! [`WATCH_RETRY_PAUSE_MAX`], on the next leader if the leader went.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::connection::Peer;

/// Pause before a broken watch is reopened; doubles up to [`WATCH_RETRY_PAUSE_MAX`].
const WATCH_RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);
pub const WATCH_RETRY_PAUSE_MAX: Duration = Duration::from_secs(2);
/// How long opening a watch may take, leader changes included.
pub const WATCH_OPEN_TIMEOUT: Duration = Duration::from_secs(3);

/// Who is at the other end of a connection, as its heartbeats say: RocketMQ's `Connection`,
/// what admin tools list for a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Connection {
    pub client_addr: String,
    pub client_id: String,
    pub language: String,
    pub version: i32,
}

/// The connections of one group, and the token that stops its watch.
#[derive(Debug)]
struct Members {
    peers: HashMap<u64, (Peer, Connection)>,
    watch: CancellationToken,
}

/// Connections by group.
#[derive(Debug, Default)]
pub(super) struct PeerGroups {
    groups: Mutex<HashMap<String, Members>>,
}

impl PeerGroups {
    /// Records that `peer`, described by `connection`, heartbeats `group`. Returns the token of
    /// a watch to start if the group was not watched yet, and whether `peer` is new to the
    /// group (its closing must then be followed).
    fn join(
        &self,
        group: &str,
        peer: &Peer,
        connection: Connection,
    ) -> (Option<CancellationToken>, bool) {
        let mut groups = self.lock();
        let mut started = None;
        let members = groups.entry(group.to_owned()).or_insert_with(|| {
            let watch = CancellationToken::new();
            started = Some(watch.clone());
            Members {
                peers: HashMap::new(),
                watch,
            }
        });
        let new = members
            .peers
            .insert(peer.id(), (peer.clone(), connection))
            .is_none();
        (started, new)
    }

    /// `peer`'s connection closed: it leaves `group`, and a group left with no connection
    /// stops being watched.
    fn leave(&self, group: &str, peer: &Peer) {
        let mut groups = self.lock();
        let Some(members) = groups.get_mut(group) else {
            return;
        };
        members.peers.remove(&peer.id());
        if members.peers.is_empty() {
            members.watch.cancel();
            groups.remove(group);
        }
    }

    /// The open connections of `group`, in the order they joined it.
    pub(super) fn peers(&self, group: &str) -> Vec<Peer> {
        self.joined(group)
            .into_iter()
            .map(|(peer, _)| peer)
            .collect()
    }

    /// Who is at the other end of each open connection of `group`, in the order they joined.
    pub(super) fn connections(&self, group: &str) -> Vec<Connection> {
        self.joined(group)
            .into_iter()
            .map(|(_, connection)| connection)
            .collect()
    }

    fn joined(&self, group: &str) -> Vec<(Peer, Connection)> {
        let mut joined: Vec<(Peer, Connection)> = self
            .lock()
            .get(group)
            .map(|members| members.peers.values().cloned().collect())
            .unwrap_or_default();
        joined.sort_by_key(|(peer, _)| peer.id());
        joined
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Members>> {
        self.groups
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Follows `peer` (described by `connection`) as a connection of `group` in `groups`: if the
/// group was not watched yet, spawns its watch, `watch_once` run again and again until the
/// group's last connection closes; and forgets `peer` when its connection closes.
pub(super) fn follow<W, Fut>(
    groups: &Arc<PeerGroups>,
    group: &str,
    peer: &Peer,
    connection: Connection,
    watch_once: W,
) where
    W: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let (watch, new) = groups.join(group, peer, connection);
    if let Some(watch) = watch {
        let group = group.to_owned();
        tokio::spawn(async move { run_watch(&group, watch, watch_once).await });
    }
    if new {
        let groups = groups.clone();
        let (group, peer) = (group.to_owned(), peer.clone());
        tokio::spawn(async move {
            peer.closed().await;
            groups.leave(&group, &peer);
        });
    }
}

/// Runs `watch_once` until `watch` is cancelled, reopening it when it ends or breaks.
async fn run_watch<W, Fut>(group: &str, watch: CancellationToken, watch_once: W)
where
    W: Fn() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let mut pause = WATCH_RETRY_PAUSE_MIN;
    loop {
        let watched = tokio::select! {
            () = watch.cancelled() => return,
            watched = watch_once() => watched,
        };
        match watched {
            Ok(()) => pause = WATCH_RETRY_PAUSE_MIN,
            Err(error) => {
                tracing::debug!(group, %error, "a 4.x group's watch broke; reopening");
                pause = (pause * 2).min(WATCH_RETRY_PAUSE_MAX);
            }
        }
        tokio::select! {
            () = watch.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> Peer {
        Peer::detached("127.0.0.1:1".parse().expect("addr"))
    }

    fn connection(client_id: &str) -> Connection {
        Connection {
            client_addr: "127.0.0.1:1".into(),
            client_id: client_id.into(),
            language: "JAVA".into(),
            version: 409,
        }
    }

    #[test]
    fn a_group_is_watched_from_its_first_connection_to_its_last() {
        let groups = PeerGroups::default();
        let (one, two) = (peer(), peer());
        let (watch, new) = groups.join("G", &one, connection("one"));
        let watch = watch.expect("the first connection starts the watch");
        assert!(new);
        let (again, new) = groups.join("G", &one, connection("one"));
        assert!(again.is_none() && !new, "a heartbeat again");
        let (again, new) = groups.join("G", &two, connection("two"));
        assert!(again.is_none() && new);
        assert_eq!(
            groups.peers("G").iter().map(Peer::id).collect::<Vec<_>>(),
            [one.id(), two.id()]
        );
        assert_eq!(
            groups.connections("G"),
            [connection("one"), connection("two")]
        );
        groups.leave("G", &one);
        assert!(!watch.is_cancelled(), "a connection is left");
        groups.leave("G", &two);
        assert!(watch.is_cancelled(), "the last one closed");
        assert!(groups.peers("G").is_empty());
        assert!(
            groups.join("G", &one, connection("one")).0.is_some(),
            "a new watch for a new connection"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_broken_watch_is_reopened_after_a_doubling_pause_until_its_group_is_left() {
        let (opened, mut opens) = tokio::sync::mpsc::unbounded_channel();
        let watch = CancellationToken::new();
        let running = tokio::spawn(run_watch("G", watch.clone(), move || {
            let _ = opened.send(tokio::time::Instant::now());
            async { Err::<(), _>("broken".to_owned()) }
        }));
        let mut at = Vec::new();
        while at.len() < 7 {
            let open = tokio::time::timeout(Duration::from_secs(60), opens.recv())
                .await
                .expect("reopened in time")
                .expect("a run");
            at.push(open);
        }
        let pauses: Vec<u128> = at
            .windows(2)
            .map(|pair| (pair[1] - pair[0]).as_millis())
            .collect();
        assert_eq!(
            pauses,
            [200, 400, 800, 1600, 2000, 2000],
            "never a busy loop"
        );
        watch.cancel();
        running
            .await
            .expect("the watch ends once its group is left");
        assert!(opens.recv().await.is_none(), "and opens no more");
    }
}
