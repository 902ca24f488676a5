//! ConsumeQueue units a read found wrong (a unit pointing at a record that is not its
//! message, or at bytes that are no record), waiting for the scrubber to check the CommitLog
//! around them now rather than on its next paced pass.
//!
//! Invariants: at most [`SUSPECTS_MAX`] units wait, each once; a report beyond that is dropped
//! (the paced pass still finds it), so a flood of failing reads costs bounded memory.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::Notify;

/// Suspect units kept waiting at most.
pub const SUSPECTS_MAX: usize = 64;

/// A unit a read found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuspectUnit {
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: i64,
}

#[derive(Debug, Default)]
pub struct SuspectUnits {
    waiting: Mutex<VecDeque<SuspectUnit>>,
    reported: Notify,
}

impl SuspectUnits {
    /// Reports `unit`; false if it was dropped (the queue is full).
    pub fn report(&self, unit: SuspectUnit) -> bool {
        {
            let mut waiting = self.lock();
            if !waiting.contains(&unit) {
                if waiting.len() >= SUSPECTS_MAX {
                    return false;
                }
                waiting.push_back(unit);
            }
        }
        self.reported.notify_one();
        true
    }

    /// The unit reported first, if any waits.
    pub fn take(&self) -> Option<SuspectUnit> {
        self.lock().pop_front()
    }

    /// Returns once a unit was reported (at once if one was since the last wait).
    pub async fn reported(&self) {
        self.reported.notified().await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<SuspectUnit>> {
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(queue_offset: i64) -> SuspectUnit {
        SuspectUnit {
            topic: "t".into(),
            queue_id: 0,
            queue_offset,
        }
    }

    #[tokio::test]
    async fn units_wait_once_each_up_to_the_limit() {
        let suspects = SuspectUnits::default();
        assert!(suspects.report(unit(0)));
        assert!(
            suspects.report(unit(0)),
            "reported again: still waiting once"
        );
        suspects.reported().await;
        for offset in 1..SUSPECTS_MAX as i64 {
            assert!(suspects.report(unit(offset)));
        }
        assert!(
            !suspects.report(unit(SUSPECTS_MAX as i64)),
            "one past the limit"
        );
        assert_eq!(suspects.take(), Some(unit(0)));
        assert!(suspects.report(unit(SUSPECTS_MAX as i64)), "room again");
        let mut taken = 1;
        while suspects.take().is_some() {
            taken += 1;
        }
        assert_eq!(taken, SUSPECTS_MAX + 1);
    }
}
