//! Topic names: what a valid name is, and which names belong to the system.

use crate::store::record::TOPIC_NAME_LEN_MAX;

/// The topic that holds delayed messages, one queue per delay level (DESIGN §5).
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// Prefix of a consumer group's retry topic: `%RETRY%<group>`.
pub const RETRY_TOPIC_PREFIX: &str = "%RETRY%";
/// Prefix of a consumer group's dead-letter topic: `%DLQ%<group>`.
pub const DLQ_TOPIC_PREFIX: &str = "%DLQ%";
/// Queues of a topic created by its first send (RocketMQ's `defaultTopicQueueNums`).
pub const AUTO_CREATED_QUEUE_COUNT: u32 = 4;
/// Queues one topic may have in one broker group.
pub const QUEUE_COUNT_MAX: u32 = 1024;

/// Checks a topic name: 1 to [`TOPIC_NAME_LEN_MAX`] characters of `[A-Za-z0-9_%|-]`.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    validate_name("topic", name)
}

/// Checks a consumer or producer group name, by the same rule as topic names (a group
/// names its `%RETRY%` and `%DLQ%` topics).
pub fn validate_group_name(name: &str) -> Result<(), String> {
    validate_name("group", name)
}

fn validate_name(kind: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("the {kind} name is empty"));
    }
    if name.len() > TOPIC_NAME_LEN_MAX {
        return Err(format!(
            "the {kind} name has {} characters, at most {TOPIC_NAME_LEN_MAX} are allowed",
            name.len()
        ));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '%' | '|' | '-')))
    {
        Some(bad) => Err(format!(
            "the {kind} name {name:?} contains {bad:?}; allowed are A-Z a-z 0-9 _ % | -"
        )),
        None => Ok(()),
    }
}

/// True for topics that only the broker writes to directly.
pub fn is_system_topic(name: &str) -> bool {
    name == SCHEDULE_TOPIC
        || name.starts_with(RETRY_TOPIC_PREFIX)
        || name.starts_with(DLQ_TOPIC_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_at_the_length_limit() {
        assert!(validate_topic_name(&"a".repeat(TOPIC_NAME_LEN_MAX)).is_ok());
        let too_long =
            validate_topic_name(&"a".repeat(TOPIC_NAME_LEN_MAX + 1)).expect_err("too long");
        assert!(too_long.contains("at most 127"), "{too_long}");
        assert!(validate_topic_name("").is_err());
    }

    #[test]
    fn allowed_and_rejected_characters() {
        assert!(validate_topic_name("Order_Topic-1|%x").is_ok());
        for bad in ["a b", "a.b", "a/b", "topic\u{e9}"] {
            assert!(validate_topic_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn system_topics() {
        assert!(is_system_topic(SCHEDULE_TOPIC));
        assert!(is_system_topic("%RETRY%g"));
        assert!(is_system_topic("%DLQ%g"));
        assert!(!is_system_topic("orders"));
    }
}
