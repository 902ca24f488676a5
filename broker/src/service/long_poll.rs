//! The long poll a pull and a pop share. A request that found nothing waits, holding one of
//! the node's `pull_holds_max` permits, until a message arrives in the queue it watches,
//! this node's leadership changes, a wake-up time passes on the node's clock (a pop's next
//! end of invisibility), or its `max_wait_ms` ends.
//!
//! Invariant: [`LongPoll::look`] marks the queue's and the leadership's versions seen before
//! the request reads, so a change between the read and the wait still wakes the wait.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::watch;
use tokio::time::Instant;

use super::BrokerService;
use crate::error::BrokerError;
use crate::raft::control::lease::Leadership;

/// Why a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Woken {
    /// Something may have changed: read again.
    LookAgain,
    /// `max_wait_ms` ended, or the node is stopping: answer with what the last read found.
    Ended,
}

/// One request's long poll, from its first read to its answer.
pub(super) struct LongPoll {
    deadline: Instant,
    arrivals: watch::Receiver<u64>,
    leadership: watch::Receiver<Leadership>,
    /// Taken before the first wait, released with the request.
    hold: Option<OwnedSemaphorePermit>,
}

impl LongPoll {
    /// A long poll of `topic`'s `queue_id` (for a pop, possibly every queue of the topic)
    /// lasting at most `max_wait_ms` from now.
    pub(super) fn begin(
        service: &BrokerService,
        topic: &str,
        queue_id: i32,
        max_wait_ms: u32,
    ) -> LongPoll {
        LongPoll {
            deadline: Instant::now() + Duration::from_millis(u64::from(max_wait_ms)),
            arrivals: service.group.watch_queue(topic, queue_id),
            leadership: service.leadership.clone(),
            hold: None,
        }
    }

    /// Marks what the request is about to read as seen; returns this node's leadership.
    pub(super) fn look(&mut self) -> Leadership {
        self.arrivals.borrow_and_update();
        *self.leadership.borrow_and_update()
    }

    /// Waits for a reason to read again. `wake_at_ms`, on the node's clock, ends the wait
    /// early. Refuses, as `doing` ("pull", "pop"), when the node holds `pull_holds_max`
    /// requests open already.
    pub(super) async fn wait(
        &mut self,
        service: &BrokerService,
        doing: &str,
        wake_at_ms: Option<i64>,
    ) -> Result<Woken, BrokerError> {
        if self.hold.is_none() {
            let permit = Arc::clone(&service.pull_holds)
                .try_acquire_owned()
                .map_err(|_| {
                    BrokerError::LimitExceeded(format!(
                        "this node holds {} pulls and pops open already (pull_holds_max); \
                         {doing} again later",
                        service.pull_holds_max
                    ))
                })?;
            self.hold = Some(permit);
        }
        let woken_up = async {
            match wake_at_ms {
                Some(at_ms) => service.clock.sleep_until_ms(at_ms).await,
                None => std::future::pending().await,
            }
        };
        let changed = async {
            tokio::select! {
                arrived = self.arrivals.changed() => arrived,
                changed = self.leadership.changed() => changed,
            }
        };
        tokio::select! {
            changed = changed => Ok(match changed {
                Ok(()) => Woken::LookAgain,
                // The node is stopping.
                Err(_) => Woken::Ended,
            }),
            () = woken_up => Ok(Woken::LookAgain),
            () = tokio::time::sleep_until(self.deadline) => Ok(Woken::Ended),
        }
    }
}
