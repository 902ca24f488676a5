//! The drill's verdict, shared with the tests: given every acknowledged send and every
//! consumed message, what was lost, what came twice, and where a queue disagrees with what
//! was acknowledged.
//!
//! - lost: acknowledged, never consumed;
//! - duplicates: consumed more than once (deliveries the consumer refused on purpose, to
//!   drive retries, are not consumptions); of these, stored twice: consumed from more than
//!   one position, so the cluster holds two copies (the rest are redeliveries of one copy,
//!   whose consumption was not committed before a fault);
//! - order violations: an acknowledged position (group, queue, offset) that holds another
//!   message than the one acknowledged there, or that was acknowledged twice. Retried and
//!   delayed messages are checked by id only, since they are stored again elsewhere.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashMap;

use serde::Serialize;

/// A send the cluster acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    pub msg_id: String,
    pub group: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    /// Delayed sends are parked elsewhere first; their position is not the final one.
    pub delayed: bool,
}

/// A message the consumer took (returned `Success` for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    pub msg_id: String,
    pub group: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub reconsume_times: i32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub acknowledged: usize,
    pub consumed_unique: usize,
    pub lost: usize,
    pub duplicates: usize,
    /// Messages consumed from more than one position: stored twice.
    pub stored_twice: usize,
    pub order_violations: usize,
    /// Up to 10 lost ids, to start an investigation.
    pub lost_examples: Vec<String>,
    /// Up to 10 ids stored twice, each with the reconsume counts it was consumed at.
    pub stored_twice_examples: Vec<(String, Vec<i32>)>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.lost == 0 && self.order_violations == 0
    }
}

pub fn check(acked: &[Acked], consumed: &[Consumed]) -> Verdict {
    let mut times_consumed: HashMap<&str, usize> = HashMap::new();
    for message in consumed {
        *times_consumed.entry(&message.msg_id).or_default() += 1;
    }
    let mut lost_examples = Vec::new();
    let mut lost = 0;
    for send in acked {
        if !times_consumed.contains_key(send.msg_id.as_str()) {
            lost += 1;
            if lost_examples.len() < 10 {
                lost_examples.push(send.msg_id.clone());
            }
        }
    }
    let duplicates = times_consumed.values().map(|times| times - 1).sum();
    let mut positions: BTreeMap<&str, BTreeSet<(&str, i32, i64, i32)>> = BTreeMap::new();
    for message in consumed {
        positions.entry(&message.msg_id).or_default().insert((
            &message.group,
            message.queue_id,
            message.queue_offset,
            message.reconsume_times,
        ));
    }
    let twice: Vec<_> = positions
        .iter()
        .filter(|(_, seen)| seen.len() > 1)
        .collect();
    let stored_twice = twice.len();
    let stored_twice_examples = twice
        .iter()
        .take(10)
        .map(|(id, seen)| {
            let reconsumes = seen.iter().map(|position| position.3).collect();
            (id.to_string(), reconsumes)
        })
        .collect();

    // What the consumer saw at each first-time (not retried) position.
    let mut at_position: HashMap<(&str, i32, i64), &str> = HashMap::new();
    for message in consumed.iter().filter(|m| m.reconsume_times == 0) {
        at_position.insert(
            (&message.group, message.queue_id, message.queue_offset),
            &message.msg_id,
        );
    }
    let mut acked_at: BTreeMap<(&str, i32, i64), usize> = BTreeMap::new();
    let mut order_violations = 0;
    for send in acked.iter().filter(|send| !send.delayed) {
        let position = (send.group.as_str(), send.queue_id, send.queue_offset);
        *acked_at.entry(position).or_default() += 1;
        if at_position
            .get(&position)
            .is_some_and(|found| *found != send.msg_id)
        {
            order_violations += 1;
        }
    }
    order_violations += acked_at.values().filter(|count| **count > 1).count();
    Verdict {
        acknowledged: acked.len(),
        consumed_unique: times_consumed.len(),
        lost,
        duplicates,
        stored_twice,
        order_violations,
        lost_examples,
        stored_twice_examples,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acked(id: &str, queue_offset: i64) -> Acked {
        Acked {
            msg_id: id.into(),
            group: "a".into(),
            queue_id: 0,
            queue_offset,
            delayed: false,
        }
    }

    fn consumed(id: &str, queue_offset: i64) -> Consumed {
        Consumed {
            msg_id: id.into(),
            group: "a".into(),
            queue_id: 0,
            queue_offset,
            reconsume_times: 0,
        }
    }

    #[test]
    fn a_clean_run_passes() {
        let verdict = check(
            &[acked("1", 0), acked("2", 1)],
            &[consumed("2", 1), consumed("1", 0)],
        );
        assert!(verdict.passed());
        assert_eq!(
            (verdict.lost, verdict.duplicates, verdict.consumed_unique),
            (0, 0, 2)
        );
    }

    #[test]
    fn loss_duplicates_and_overwritten_positions_are_counted() {
        let verdict = check(
            &[acked("1", 0), acked("2", 1), acked("3", 2), acked("4", 2)],
            // "1" twice; "2" never; position 2 holds "3" though "4" was acknowledged there
            // too; an unacknowledged message (a retried send's first copy) is fine.
            &[
                consumed("1", 0),
                consumed("1", 0),
                consumed("3", 2),
                consumed("4", 5),
                consumed("x", 7),
            ],
        );
        assert_eq!(verdict.lost, 1);
        assert_eq!(verdict.lost_examples, ["2"]);
        assert_eq!(verdict.duplicates, 1);
        assert_eq!(verdict.stored_twice, 0, "1 came twice from one position");
        assert_eq!(
            verdict.order_violations, 2,
            "position 2: held by 3, acked twice"
        );
        assert!(!verdict.passed());
    }

    #[test]
    fn a_message_consumed_from_two_positions_was_stored_twice() {
        let verdict = check(&[acked("1", 0)], &[consumed("1", 0), consumed("1", 4)]);
        assert_eq!((verdict.duplicates, verdict.stored_twice), (1, 1));
    }

    #[test]
    fn retried_and_delayed_messages_count_by_id() {
        let mut delayed = acked("d", 0);
        delayed.delayed = true;
        let mut retried = consumed("r", 3);
        retried.reconsume_times = 1;
        let verdict = check(&[delayed, acked("r", 1)], &[consumed("d", 9), retried]);
        assert!(verdict.passed(), "{verdict:?}");
    }
}
