//! `Clock`: the time a broker's business logic reads, as an input. Deliver times of delay
//! levels and timers, transaction check-backs, pop invisibility and queue locks all read
//! it, never the system clock directly, so a test can hold time still and move it on at
//! will ([`ManualClock`]) while the network, disks and Raft run on real time.
//!
//! Invariant: a manual clock never goes back, and every sleeper whose deadline the clock
//! reaches is woken when it does.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// The clock of a node: the system's, or a manual one a test moves.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    manual: Option<Arc<ManualTime>>,
}

#[derive(Debug)]
struct ManualTime {
    /// Milliseconds since the Unix epoch; sleepers watch it.
    now_ms: watch::Sender<i64>,
    /// The monotonic instant that `started_ms` maps to.
    started_at: Instant,
    started_ms: i64,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// Now, in milliseconds since the Unix epoch (0 if the system clock is before it).
    pub fn now_ms(&self) -> i64 {
        match &self.manual {
            None => crate::time::now_ms(),
            Some(manual) => *manual.now_ms.borrow(),
        }
    }

    /// Now, on a monotonic scale, for expiries measured in durations (queue locks,
    /// heartbeats): the system's monotonic clock, or the manual clock's time since it
    /// started, added to the instant it started at.
    pub fn instant(&self) -> Instant {
        match &self.manual {
            None => Instant::now(),
            Some(manual) => {
                let elapsed_ms = (*manual.now_ms.borrow() - manual.started_ms).max(0);
                manual.started_at + Duration::from_millis(elapsed_ms as u64)
            }
        }
    }

    /// Sleeps until the clock reads `at_ms` or later.
    pub async fn sleep_until_ms(&self, at_ms: i64) {
        match &self.manual {
            None => {
                let ahead_ms = at_ms.saturating_sub(crate::time::now_ms()).max(0);
                tokio::time::sleep(Duration::from_millis(ahead_ms as u64)).await;
            }
            Some(manual) => {
                let mut now_ms = manual.now_ms.subscribe();
                // The sender lives as long as `manual`, which this borrow keeps alive.
                let _reached = now_ms.wait_for(|now_ms| *now_ms >= at_ms).await;
            }
        }
    }
}

/// A clock that stands still until a test moves it on; every [`Clock`] it hands out reads
/// the same time.
#[derive(Clone, Debug)]
pub struct ManualClock {
    time: Arc<ManualTime>,
}

impl ManualClock {
    /// A manual clock reading `start_ms`.
    pub fn starting_at(start_ms: i64) -> ManualClock {
        let (now_ms, _) = watch::channel(start_ms);
        ManualClock {
            time: Arc::new(ManualTime {
                now_ms,
                started_at: Instant::now(),
                started_ms: start_ms,
            }),
        }
    }

    /// A manual clock reading the system's time now.
    pub fn starting_now() -> ManualClock {
        ManualClock::starting_at(crate::time::now_ms())
    }

    /// The clock to give a node.
    pub fn clock(&self) -> Clock {
        Clock {
            manual: Some(self.time.clone()),
        }
    }

    /// What the clock reads.
    pub fn now_ms(&self) -> i64 {
        *self.time.now_ms.borrow()
    }

    /// Moves the clock on by `by`, waking every sleeper whose deadline it reaches.
    pub fn advance(&self, by: Duration) {
        let by_ms = by.as_millis().min(i64::MAX as u128) as i64;
        self.time
            .now_ms
            .send_modify(|now_ms| *now_ms = now_ms.saturating_add(by_ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_clock_wakes_exactly_the_sleepers_it_reaches() {
        let manual = ManualClock::starting_at(1_000);
        let clock = manual.clock();
        let early = tokio::spawn({
            let clock = clock.clone();
            async move { clock.sleep_until_ms(1_500).await }
        });
        let late = tokio::spawn({
            let clock = clock.clone();
            async move { clock.sleep_until_ms(3_000).await }
        });
        let started = clock.instant();
        manual.advance(Duration::from_millis(500));
        early
            .await
            .expect("the sleeper due at 1 500 wakes at 1 500");
        assert!(!late.is_finished());
        assert_eq!(clock.now_ms(), 1_500);
        assert_eq!(clock.instant() - started, Duration::from_millis(500));
        manual.advance(Duration::from_millis(1_500));
        late.await.expect("the sleeper due at 3 000 wakes at 3 000");
    }

    #[tokio::test]
    async fn a_sleep_until_a_time_passed_already_returns_at_once() {
        let manual = ManualClock::starting_at(5_000);
        manual.clock().sleep_until_ms(4_000).await;
        Clock::system().sleep_until_ms(0).await;
    }
}
