//! Whether this node leads with a live quorum: it is the leader, and a quorum of its group
//! acknowledged it within the leader lease (a group of one is its own quorum). A leader cut
//! off from its group keeps believing it leads until it hears of a higher term; this watch
//! tells it, within a quarter of the lease, that nobody has followed it for a whole lease, so
//! it can stop holding pulls for messages it can no longer commit.
//!
//! One task per node reads openraft's metrics every quarter lease and publishes changes only,
//! so any number of waiters cost nothing between changes.

use std::time::Duration;

use openraft::Instant;
use openraft::ServerState;
use openraft::async_runtime::watch::WatchReceiver;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::raft::types::Raft;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    NotLeading,
    Leading,
    /// Leading, but no quorum acknowledged this node within the lease: it is cut off, and
    /// the rest of the group may have elected another leader.
    LeadingWithoutQuorum,
}

/// This node's leadership now.
pub fn leadership(raft: &Raft, lease: Duration) -> Leadership {
    let metrics = raft.metrics();
    let metrics = metrics.borrow_watched();
    if metrics.state != ServerState::Leader {
        return Leadership::NotLeading;
    }
    let alone = metrics.membership_config.membership().voter_ids().count() == 1;
    let acknowledged = metrics
        .last_quorum_acked
        .as_ref()
        .is_some_and(|acked| acked.elapsed() < lease);
    if alone || acknowledged {
        Leadership::Leading
    } else {
        Leadership::LeadingWithoutQuorum
    }
}

/// Publishes this node's [`Leadership`] on `watch` whenever it changes, until `shutdown`.
pub async fn run_leadership_watch(
    raft: Raft,
    lease: Duration,
    watch: watch::Sender<Leadership>,
    shutdown: CancellationToken,
) {
    let period = (lease / 4).max(Duration::from_millis(10));
    loop {
        let now = leadership(&raft, lease);
        watch.send_if_modified(|current| {
            let changed = *current != now;
            *current = now;
            changed
        });
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
    }
}
