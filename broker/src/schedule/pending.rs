//! What the schedule queues still owe: the CommitLog offset of the oldest entry any of them
//! has not delivered, checked or passed over yet. Such an entry is an acknowledged message
//! that is not in its topic yet (a delayed message, a timer on its hop, a half message
//! awaiting its end), so retention must keep it whatever its age (`crate::retention`).
//!
//! Invariant: the answer comes from this replica's applied progress, which never runs ahead
//! of the leader's, so a follower keeps at least what the leader keeps.

use crate::group_state::GroupState;
use crate::schedule::service::progress_key;
use crate::topic::SCHEDULE_TOPIC;
use crate::topic::TIMER_TOPIC;
use crate::topic::TRANSACTION_HALF_TOPIC;

/// The topics whose queues the schedule service works through.
const SCHEDULE_TOPICS: [&str; 3] = [SCHEDULE_TOPIC, TIMER_TOPIC, TRANSACTION_HALF_TOPIC];

/// The CommitLog offset of the oldest entry a schedule queue of `group` still owes, or
/// `None` when every one is worked through.
pub fn oldest_pending_offset(group: &GroupState) -> Option<u64> {
    let queues: Vec<(&str, i32)> = {
        let store = group.store();
        SCHEDULE_TOPICS
            .iter()
            .flat_map(|topic| {
                store
                    .queue_ids(topic)
                    .map(move |queue_id| (*topic, queue_id))
            })
            .collect()
    };
    // Progress is read before the queues: should it move on meanwhile, an older entry is
    // kept, never a newer one lost.
    let progress: Vec<i64> = {
        let metadata = group.metadata();
        queues
            .iter()
            .map(|(topic, queue_id)| {
                progress_key(topic, *queue_id).map_or(0, |key| metadata.schedule_progress(key))
            })
            .collect()
    };
    let store = group.store();
    queues
        .iter()
        .zip(progress)
        .filter_map(|((topic, queue_id), next)| {
            let head = store.consume_queue_units(topic, *queue_id, next).next()?;
            u64::try_from(head.commit_log_offset).ok()
        })
        .min()
}
