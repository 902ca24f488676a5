//! Allocate averagely (RocketMQ's default strategy): every client of a group sorts the
//! group's queues and client ids the same way and takes its contiguous share, so all clients
//! agree on who consumes which queue without talking to each other. The first
//! `queues % clients` clients take one queue more than the rest.

use crate::route::MessageQueue;

/// The queues of `all` (sorted) that `me` consumes among `clients` (sorted); none if `me` is
/// not among them.
pub fn allocate_averagely(all: &[MessageQueue], clients: &[String], me: &str) -> Vec<MessageQueue> {
    let Some(index) = clients.iter().position(|client| client == me) else {
        return Vec::new();
    };
    if all.is_empty() {
        return Vec::new();
    }
    let (queues, members) = (all.len(), clients.len());
    let remainder = queues % members;
    let share = if queues <= members {
        1
    } else if remainder > 0 && index < remainder {
        queues / members + 1
    } else {
        queues / members
    };
    let start = if remainder > 0 && index < remainder {
        index * share
    } else {
        index * share + remainder
    };
    let count = share.min(queues.saturating_sub(start));
    (0..count)
        .map(|i| all[(start + i) % queues].clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(n: i32) -> Vec<MessageQueue> {
        let mut queues: Vec<MessageQueue> = (0..n)
            .map(|queue_id| MessageQueue {
                topic: "t".into(),
                group: if queue_id % 2 == 0 { "a" } else { "b" }.into(),
                queue_id: queue_id / 2,
            })
            .collect();
        queues.sort();
        queues
    }

    fn clients(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i}")).collect()
    }

    /// Every queue goes to exactly one client, shares differ by at most one.
    fn check_partition(queue_count: i32, client_count: usize) {
        let all = queues(queue_count);
        let ids = clients(client_count);
        let shares: Vec<Vec<MessageQueue>> = ids
            .iter()
            .map(|me| allocate_averagely(&all, &ids, me))
            .collect();
        let mut taken: Vec<MessageQueue> = shares.iter().flatten().cloned().collect();
        taken.sort();
        assert_eq!(taken, all, "{queue_count} queues, {client_count} clients");
        let sizes: Vec<usize> = shares.iter().map(Vec::len).collect();
        let (min, max) = (sizes.iter().min(), sizes.iter().max());
        assert!(
            max.zip(min).is_some_and(|(max, min)| max - min <= 1),
            "{sizes:?}"
        );
    }

    #[test]
    fn every_queue_has_one_owner_and_shares_are_even() {
        for queue_count in 0..=17 {
            for client_count in 1..=6 {
                check_partition(queue_count, client_count);
            }
        }
    }

    #[test]
    fn contiguous_shares_in_sorted_order() {
        let all = queues(8);
        let ids = clients(3);
        assert_eq!(allocate_averagely(&all, &ids, "c0"), all[0..3]);
        assert_eq!(allocate_averagely(&all, &ids, "c1"), all[3..6]);
        assert_eq!(allocate_averagely(&all, &ids, "c2"), all[6..8]);
        assert!(allocate_averagely(&all, &ids, "stranger").is_empty());
    }
}
