//! Names shared by brokers and clients: what a valid topic or group name is, so a client can
//! refuse a bad name with the same words the broker would use.

/// The topic that holds delayed messages, one queue per delay level (RocketMQ's name;
/// `XXXX` is part of it, not a placeholder).
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// The topic that holds timer messages until they are due, one queue per hop length of the
/// timer wheel (RocketMQ 5's name).
pub const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";
/// The topic that holds half messages of transactions not yet ended, invisible to consumers
/// (RocketMQ's name).
pub const TRANSACTION_HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// The topic that records how each transaction ended (RocketMQ's name).
pub const TRANSACTION_OP_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
/// Prefix of a consumer group's retry topic: `%RETRY%<group>`.
pub const RETRY_TOPIC_PREFIX: &str = "%RETRY%";
/// Prefix of a consumer group's dead-letter topic: `%DLQ%<group>`.
pub const DLQ_TOPIC_PREFIX: &str = "%DLQ%";
/// A retry waits delay level `RETRY_DELAY_LEVEL_BASE + reconsume times` unless a level is
/// asked for (RocketMQ's rule: the first retry waits 10 s at the default levels). The broker's
/// `SendMessageBack` and the client's fallback apply the same rule.
pub const RETRY_DELAY_LEVEL_BASE: i32 = 3;

/// Characters in a topic or group name at most (RocketMQ: the record's 1-byte topic length).
pub const NAME_LEN_MAX: usize = 127;

/// Checks a topic name: 1 to [`NAME_LEN_MAX`] characters of `[A-Za-z0-9_%|-]`.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    validate_name("topic", name)
}

/// Checks a consumer or producer group name, by the same rule as topic names (a group
/// names its `%RETRY%` and `%DLQ%` topics).
pub fn validate_group_name(name: &str) -> Result<(), String> {
    validate_name("group", name)
}

/// Whether `c` may appear in a topic or group name: `[A-Za-z0-9_%|-]`. Topics name
/// directories on the brokers, so nothing else is allowed.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '%' | '|' | '-')
}

fn validate_name(kind: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("the {kind} name is empty"));
    }
    if name.len() > NAME_LEN_MAX {
        return Err(format!(
            "the {kind} name has {} characters, at most {NAME_LEN_MAX} are allowed",
            name.len()
        ));
    }
    match name.chars().find(|c| !is_name_char(*c)) {
        Some(bad) => Err(format!(
            "the {kind} name {name:?} contains {bad:?}; allowed are A-Z a-z 0-9 _ % | -"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_at_the_length_limit() {
        assert!(validate_topic_name(&"a".repeat(NAME_LEN_MAX)).is_ok());
        let too_long = validate_topic_name(&"a".repeat(NAME_LEN_MAX + 1)).expect_err("too long");
        assert!(too_long.contains("at most 127"), "{too_long}");
        assert!(validate_topic_name("").is_err());
        assert!(validate_group_name(&"g".repeat(NAME_LEN_MAX + 1)).is_err());
    }

    #[test]
    fn allowed_and_rejected_characters() {
        assert!(validate_topic_name("Order_Topic-1|%x").is_ok());
        for bad in ["a b", "a.b", "a/b", "topic\u{e9}"] {
            assert!(validate_topic_name(bad).is_err(), "{bad}");
        }
    }
}
