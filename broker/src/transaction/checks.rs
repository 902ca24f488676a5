//! `TransactionChecks`: the producers watching this node for check-backs, per producer group
//! (RocketMQ's producer channel table). Leader only, in memory: every change of this node's
//! role drops every watcher, which ends its stream, so producers find the new leader.
//!
//! A check-back goes to one live watcher of its group, in turn; with none, or with every
//! watcher's queue full, it is not sent, and the transaction is checked again later.

use std::collections::HashMap;
use std::sync::Mutex;

use rocketraft_proto::broker as pb;
use tokio::sync::mpsc;

/// Check-backs queued for one watcher at most.
pub const CHECKS_QUEUED_MAX: usize = 1024;
/// Watchers of one producer group at most.
pub const CHECK_WATCHERS_MAX: usize = 1024;

#[derive(Debug, Default)]
pub struct TransactionChecks {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// producer group -> (client id, its stream).
    watchers: HashMap<String, Vec<(String, mpsc::Sender<pb::TransactionCheck>)>>,
    /// Which watcher of a group gets its next check.
    turn: usize,
}

impl TransactionChecks {
    /// Registers `client_id` of `group` (replacing its earlier stream); `None` if the group
    /// has [`CHECK_WATCHERS_MAX`] watchers already.
    pub fn watch(
        &self,
        group: &str,
        client_id: &str,
    ) -> Option<mpsc::Receiver<pb::TransactionCheck>> {
        let mut state = self.lock();
        let watchers = state.watchers.entry(group.to_owned()).or_default();
        watchers.retain(|(id, sender)| id != client_id && !sender.is_closed());
        if watchers.len() >= CHECK_WATCHERS_MAX {
            return None;
        }
        let (sender, receiver) = mpsc::channel(CHECKS_QUEUED_MAX);
        watchers.push((client_id.to_owned(), sender));
        Some(receiver)
    }

    /// Sends `check` to one watcher of `group`; false if none took it.
    pub fn send(&self, group: &str, check: pb::TransactionCheck) -> bool {
        let mut state = self.lock();
        let turn = state.turn;
        state.turn = state.turn.wrapping_add(1);
        let Some(watchers) = state.watchers.get_mut(group) else {
            return false;
        };
        watchers.retain(|(_, sender)| !sender.is_closed());
        let count = watchers.len();
        (0..count).any(|i| {
            watchers[(turn + i) % count]
                .1
                .try_send(check.clone())
                .is_ok()
        })
    }

    /// Drops every watcher: this node's role changed.
    pub fn reset(&self) {
        self.lock().watchers.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(id: &str) -> pb::TransactionCheck {
        pb::TransactionCheck {
            message: None,
            msg_id: id.into(),
            ..pb::TransactionCheck::default()
        }
    }

    #[test]
    fn checks_go_to_the_group_s_live_watchers_in_turn() {
        let checks = TransactionChecks::default();
        assert!(!checks.send("g", check("a")), "nobody watches");
        let mut first = checks.watch("g", "p1").expect("watch");
        let mut second = checks.watch("g", "p2").expect("watch");
        assert!(checks.send("g", check("a")));
        assert!(checks.send("g", check("b")));
        let got = [first.try_recv(), second.try_recv()];
        assert!(got.iter().all(Result::is_ok), "one each: {got:?}");
        drop(second);
        assert!(checks.send("g", check("c")));
        assert_eq!(first.try_recv().expect("c").msg_id, "c");
        assert!(!checks.send("other", check("d")));
        checks.reset();
        assert!(first.try_recv().is_err());
        assert!(!checks.send("g", check("e")));
    }
}
