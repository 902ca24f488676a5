//! Topic names: what a valid name is, and which names belong to the system.

pub use rocketraft_proto::names::DLQ_TOPIC_PREFIX;
pub use rocketraft_proto::names::RETRY_TOPIC_PREFIX;
pub use rocketraft_proto::names::SCHEDULE_TOPIC;
pub use rocketraft_proto::names::TIMER_TOPIC;
pub use rocketraft_proto::names::TRANSACTION_HALF_TOPIC;
pub use rocketraft_proto::names::TRANSACTION_OP_TOPIC;
/// Queues of a topic created by its first send (RocketMQ's `defaultTopicQueueNums`).
pub const AUTO_CREATED_QUEUE_COUNT: u32 = 4;
/// Queues one topic may have in one broker group.
pub const QUEUE_COUNT_MAX: u32 = 1024;

pub use rocketraft_proto::names::validate_group_name;
pub use rocketraft_proto::names::validate_topic_name;

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
