//! Topic names: what a valid name is, and which names belong to the system.

pub use rocketraft_domain::names::DLQ_TOPIC_PREFIX;
pub use rocketraft_domain::names::RETRY_TOPIC_PREFIX;
pub use rocketraft_domain::names::SCHEDULE_TOPIC;
pub use rocketraft_domain::names::TIMER_TOPIC;
pub use rocketraft_domain::names::TRANSACTION_HALF_TOPIC;
pub use rocketraft_domain::names::TRANSACTION_OP_TOPIC;
/// Queues of a topic created by its first send (RocketMQ's `defaultTopicQueueNums`).
pub const AUTO_CREATED_QUEUE_COUNT: u32 = 4;
/// Queues one topic may have in one broker group.
pub const QUEUE_COUNT_MAX: u32 = 1024;
/// Queues all of one broker group's topics may have together (a topic counts the larger of
/// its read and write queue counts). What bounds it: every queue that holds a message keeps
/// two memory mappings open on every node (its file and its checksums), and Linux gives a
/// process `vm.max_map_count` of them, 65,530 by default; this leaves room for the rest of
/// the process. A node warns at start when the host's setting is short of it (see
/// [`mappings_needed`]). It also bounds a leader's registration with the nameservers, which
/// names every topic ([`rocketraft_domain::limits::REGISTRATION_BYTES_MAX`]).
pub const GROUP_QUEUES_MAX: u32 = 30_000;
/// Mappings a node keeps besides its queues': CommitLog, index and Raft log segments, the
/// program's own and its threads' stacks.
const MAPPINGS_BESIDES_QUEUES: u64 = 4096;

/// The memory mappings `nodes` nodes in one process need with every queue holding messages.
pub fn mappings_needed(nodes: u64) -> u64 {
    nodes * (2 * u64::from(GROUP_QUEUES_MAX) + MAPPINGS_BESIDES_QUEUES)
}

/// Where Linux says how many memory mappings a process may hold.
const MAX_MAP_COUNT_PATH: &str = "/proc/sys/vm/max_map_count";

/// Warns when this host lets a process hold fewer memory mappings than a node needs to fill
/// [`GROUP_QUEUES_MAX`] queues; the node still starts (most groups hold far fewer), and a
/// queue file that cannot be mapped later fails with an error naming the setting.
pub fn warn_if_mappings_short() {
    let Ok(text) = std::fs::read_to_string(MAX_MAP_COUNT_PATH) else {
        return;
    };
    let Ok(max_map_count) = text.trim().parse::<u64>() else {
        return;
    };
    let needed = mappings_needed(1);
    if max_map_count < needed {
        tracing::warn!(
            max_map_count,
            needed,
            "vm.max_map_count lets this process map fewer files than a node needs for \
             {GROUP_QUEUES_MAX} queues holding messages (two mappings each); raise it with \
             `sysctl -w vm.max_map_count={needed}` (several nodes in one process add up)"
        );
    }
}

/// Queues a topic counts against [`GROUP_QUEUES_MAX`].
pub fn queues_of(read_queue_count: u32, write_queue_count: u32) -> u32 {
    read_queue_count.max(write_queue_count)
}

pub use rocketraft_domain::names::validate_group_name;
pub use rocketraft_domain::names::validate_topic_name;

/// True for topics that only the broker writes to directly.
pub fn is_system_topic(name: &str) -> bool {
    name == SCHEDULE_TOPIC
        || name == TIMER_TOPIC
        || name == TRANSACTION_HALF_TOPIC
        || name == TRANSACTION_OP_TOPIC
        || name.starts_with(RETRY_TOPIC_PREFIX)
        || name.starts_with(DLQ_TOPIC_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_of_the_largest_size_fits_the_default_mapping_limit_and_a_registration() {
        assert!(mappings_needed(1) <= 65_530);
        let topic_bytes = rocketraft_domain::names::NAME_LEN_MAX as u64 + 32;
        assert!(
            u64::from(GROUP_QUEUES_MAX) * topic_bytes
                <= rocketraft_domain::limits::REGISTRATION_BYTES_MAX as u64
        );
    }

    #[test]
    fn system_topics() {
        assert!(is_system_topic(SCHEDULE_TOPIC));
        assert!(is_system_topic(TIMER_TOPIC));
        assert!(is_system_topic(TRANSACTION_HALF_TOPIC));
        assert!(is_system_topic(TRANSACTION_OP_TOPIC));
        assert!(is_system_topic("%RETRY%g"));
        assert!(is_system_topic("%DLQ%g"));
        assert!(!is_system_topic("orders"));
    }
}
