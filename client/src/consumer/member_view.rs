//! The member list a rebalance acts on.
//!
//! A broker group's new leader learns its consumers anew from their heartbeats, so for a
//! moment after a failover its list lacks members that are alive. Acting on that list would
//! hand their queues to others while they still consume them: every message in flight there
//! would be consumed twice. So a list from another leader than the last one keeps, for
//! [`SOURCE_SETTLE`], the members the last leader listed; a list from the same leader is taken
//! as it is (a member missing there did leave, or expire).
//!
//! Invariant: outside the settle window the view is exactly what the broker listed.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

/// How long a new leader's list is completed with the previous leader's: every live member
/// re-heartbeats a new leader when its membership watch reopens (at most
/// `WATCH_RETRY_PAUSE_MAX`, 2 s, after the old one broke).
pub const SOURCE_SETTLE: Duration = Duration::from_secs(3);

/// Which leader answered: the broker group and its leader's address, if known.
pub type Source = (String, Option<SocketAddr>);

#[derive(Debug, Default)]
pub struct MemberView {
    source: Option<Source>,
    /// When the source last changed, and the members known before it did.
    settling: Option<(Instant, BTreeSet<String>)>,
    last: BTreeSet<String>,
}

impl MemberView {
    /// Takes `listed` from `source` at `now`; returns the members to allocate among, sorted,
    /// and whether they are still settling (the round should come again soon).
    pub fn update(
        &mut self,
        source: Source,
        listed: Vec<String>,
        now: Instant,
    ) -> (Vec<String>, bool) {
        let listed: BTreeSet<String> = listed.into_iter().collect();
        if self.source.as_ref() != Some(&source) {
            if self.source.is_some() {
                // A source that changes again while settling keeps what was known before.
                let mut before = self.last.clone();
                if let Some((_, earlier)) = self.settling.take() {
                    before.extend(earlier);
                }
                self.settling = Some((now, before));
            }
            self.source = Some(source);
        }
        self.last = listed.clone();
        match &self.settling {
            Some((since, before)) if now.duration_since(*since) < SOURCE_SETTLE => {
                (listed.union(before).cloned().collect(), true)
            }
            _ => {
                self.settling = None;
                (listed.into_iter().collect(), false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    fn source(leader: u16) -> Source {
        (
            "broker-a".to_owned(),
            Some(SocketAddr::from(([127, 0, 0, 1], leader))),
        )
    }

    #[test]
    fn the_same_leader_is_believed_at_once() {
        let mut view = MemberView::default();
        let now = Instant::now();
        assert_eq!(
            view.update(source(1), names(&["c1", "c2"]), now),
            (names(&["c1", "c2"]), false)
        );
        assert_eq!(
            view.update(source(1), names(&["c2"]), now),
            (names(&["c2"]), false)
        );
    }

    #[test]
    fn a_new_leader_missing_members_is_completed_until_it_settles() {
        let mut view = MemberView::default();
        let start = Instant::now();
        view.update(source(1), names(&["c1", "c2", "c3"]), start);
        let failover = start + Duration::from_secs(10);
        assert_eq!(
            view.update(source(2), names(&["c1"]), failover),
            (names(&["c1", "c2", "c3"]), true)
        );
        // A member new to the group counts at once.
        assert_eq!(
            view.update(
                source(2),
                names(&["c1", "c4"]),
                failover + Duration::from_secs(1)
            ),
            (names(&["c1", "c2", "c3", "c4"]), true)
        );
        let settled = failover + SOURCE_SETTLE;
        let just_before = settled - Duration::from_millis(1);
        assert!(view.update(source(2), names(&["c1", "c4"]), just_before).1);
        assert_eq!(
            view.update(source(2), names(&["c1", "c4"]), settled),
            (names(&["c1", "c4"]), false)
        );
    }

    #[test]
    fn a_second_failover_while_settling_keeps_what_was_known_before_the_first() {
        let mut view = MemberView::default();
        let start = Instant::now();
        view.update(source(1), names(&["c1", "c2"]), start);
        view.update(source(2), names(&["c1"]), start + Duration::from_secs(1));
        assert_eq!(
            view.update(source(3), Vec::new(), start + Duration::from_secs(2)),
            (names(&["c1", "c2"]), true)
        );
    }
}
