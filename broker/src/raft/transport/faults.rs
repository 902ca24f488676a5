//! Fault injection for the Raft transport: drop, delay, partition and heal, decided by a
//! seeded generator so a failing test replays exactly by its printed seed.
//!
//! Production nodes run without a [`FaultPlan`]; tests hand one to every node of a group and
//! drive it while the real gRPC transport carries the traffic. A node started with
//! `enable_fault_injection` (drills only) has its own plan, driven by the `InjectFault` RPC:
//! isolated, it drops its outgoing Raft RPCs and refuses incoming ones; blackholed, it also
//! answers nothing, to peers or clients, until healed: every call to it hangs as calls to a
//! host that dropped off the network do (see [`FaultPlan::blackhole`]).

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use crate::raft::types::NodeId;
use crate::seeded_rng::SeededRng;

/// What happens to one Raft RPC on the link `from -> to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Deliver,
    /// Deliver after the delay.
    Delay(Duration),
    /// Fail the RPC as if the peer were unreachable.
    Drop,
}

#[derive(Debug, Default)]
struct Faults {
    /// Nodes cut off from everyone outside their own side.
    isolated: BTreeSet<NodeId>,
    /// Isolated nodes that answer nothing either: calls to them hang until the heal.
    blackholed: BTreeSet<NodeId>,
    /// Probability in parts per million that an RPC is dropped.
    drop_ppm: u32,
    delay_max: Duration,
    /// Every delivered RPC waits at least this long (a slow network or a slow peer).
    delay_min: Duration,
    rng: SeededRng,
}

/// The faults currently injected into a group's Raft traffic.
#[derive(Debug)]
pub struct FaultPlan {
    faults: Mutex<Faults>,
    /// Bumped by every heal, so calls held by a blackhole wake.
    heals: tokio::sync::watch::Sender<u64>,
}

impl FaultPlan {
    pub fn new(seed: u64) -> FaultPlan {
        tracing::info!(seed, "raft fault plan (replay with this seed)");
        FaultPlan {
            faults: Mutex::new(Faults {
                rng: SeededRng::new(seed),
                ..Faults::default()
            }),
            heals: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Cuts `node` off: RPCs from or to it fail until [`Self::heal`].
    pub fn isolate(&self, node: NodeId) {
        self.with(|faults| faults.isolated.insert(node));
    }

    /// Cuts `node` off as a host that dropped off the network is: its outgoing Raft RPCs are
    /// dropped (they fail after their timeout), and every call to it, from peers or clients,
    /// gets no answer until [`Self::heal`] (the node's servers hold them, see
    /// [`Self::held_while_blackholed`]).
    pub fn blackhole(&self, node: NodeId) {
        self.with(|faults| {
            faults.isolated.insert(node);
            faults.blackholed.insert(node)
        });
    }

    /// Whether `node` answers nothing now.
    pub fn is_blackholed(&self, node: NodeId) -> bool {
        self.with(|faults| faults.blackholed.contains(&node))
    }

    /// Returns once `node` is not blackholed (at once if it is not): a call that reached it
    /// while it was gets its answer only after the heal, as one over a link that came back.
    pub async fn held_while_blackholed(&self, node: NodeId) {
        let mut heals = self.heals.subscribe();
        while self.is_blackholed(node) {
            if heals.changed().await.is_err() {
                return;
            }
        }
    }

    /// Drops each RPC with probability `drop_ppm / 1_000_000` and delays the others by up to
    /// `delay_max`.
    pub fn set_lossy(&self, drop_ppm: u32, delay_max: Duration) {
        self.with(|faults| {
            faults.drop_ppm = drop_ppm.min(1_000_000);
            faults.delay_max = delay_max;
        });
    }

    /// Delays every RPC by exactly `delay` (on top of [`Self::set_lossy`]'s), e.g. so that
    /// commits take longer than a client's attempt.
    pub fn set_delay(&self, delay: Duration) {
        self.with(|faults| faults.delay_min = delay);
    }

    /// Whether `node` is cut off now.
    pub fn is_isolated(&self, node: NodeId) -> bool {
        self.with(|faults| faults.isolated.contains(&node))
    }

    /// Removes every fault.
    pub fn heal(&self) {
        self.with(|faults| {
            faults.isolated.clear();
            faults.blackholed.clear();
            faults.drop_ppm = 0;
            faults.delay_max = Duration::ZERO;
            faults.delay_min = Duration::ZERO;
        });
        self.heals.send_modify(|heals| *heals += 1);
    }

    pub fn verdict(&self, from: NodeId, to: NodeId) -> Verdict {
        self.with(|faults| {
            if faults.isolated.contains(&from) != faults.isolated.contains(&to) {
                return Verdict::Drop;
            }
            if faults.drop_ppm > 0 && faults.rng.chance_ppm(faults.drop_ppm) {
                return Verdict::Drop;
            }
            let delay_max_us = faults.delay_max.as_micros() as u64;
            let random = Duration::from_micros(faults.rng.below(delay_max_us));
            match faults.delay_min + random {
                Duration::ZERO => Verdict::Deliver,
                delay => Verdict::Delay(delay),
            }
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut Faults) -> T) -> T {
        let mut faults = self
            .faults
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut faults)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_verdicts() {
        let verdicts = |seed| {
            let plan = FaultPlan::new(seed);
            plan.set_lossy(300_000, Duration::from_millis(5));
            (0..64).map(|_| plan.verdict(1, 2)).collect::<Vec<_>>()
        };
        assert_eq!(verdicts(42), verdicts(42));
        assert_ne!(verdicts(42), verdicts(43));
        assert!(verdicts(42).contains(&Verdict::Drop));
    }

    #[tokio::test(start_paused = true)]
    async fn a_blackholed_node_holds_calls_until_the_heal() {
        let plan = std::sync::Arc::new(FaultPlan::new(1));
        plan.blackhole(2);
        assert_eq!(
            plan.verdict(2, 1),
            Verdict::Drop,
            "its own RPCs are dropped"
        );
        assert!(plan.is_blackholed(2) && !plan.is_blackholed(1));
        plan.held_while_blackholed(1).await;
        let mut held = tokio::spawn({
            let plan = plan.clone();
            async move { plan.held_while_blackholed(2).await }
        });
        // Paused time: the timeout elapses as soon as nothing else can run.
        let answered = tokio::time::timeout(Duration::from_secs(60), &mut held).await;
        assert!(answered.is_err(), "a call to it gets no answer");
        plan.heal();
        held.await.expect("released by the heal");
        assert_eq!(plan.verdict(2, 1), Verdict::Deliver);
    }

    #[test]
    fn isolation_cuts_only_links_across_the_partition() {
        let plan = FaultPlan::new(1);
        plan.isolate(3);
        assert_eq!(plan.verdict(1, 3), Verdict::Drop);
        assert_eq!(plan.verdict(3, 2), Verdict::Drop);
        assert_eq!(plan.verdict(1, 2), Verdict::Deliver);
        plan.heal();
        assert_eq!(plan.verdict(1, 3), Verdict::Deliver);
    }
}
