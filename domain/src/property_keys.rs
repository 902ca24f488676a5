//! The message property keys brokers and clients read or write, in RocketMQ's spellings: one
//! definition, so a producer and the broker never disagree on a name, and so every system
//! key, the broker's own included, is known where application properties are checked.

/// Message tag, used for filtering (its hash is the ConsumeQueue tags code).
pub const TAGS: &str = "TAGS";
/// User message keys, separated by spaces; indexed for `query-msg`.
pub const KEYS: &str = "KEYS";
/// Client-generated unique message id; indexed for `query-msg`.
pub const UNIQ_KEY: &str = "UNIQ_KEY";
/// Delay level of a delayed message.
pub const DELAY: &str = "DELAY";
/// Original topic of a delayed, timer, half or retried message (set by the broker).
pub const REAL_TOPIC: &str = "REAL_TOPIC";
/// Original queue id of a delayed, timer or half message (set by the broker).
pub const REAL_QID: &str = "REAL_QID";
/// Retry topic of a message sent back by a consumer.
pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
/// Id of the message a retry copy was made from.
pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
/// Reconsume count of a retry copy.
pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
/// Maximum reconsume count before the message goes to the dead-letter topic.
pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
/// A timer message's deliver time, in ms since the epoch (RocketMQ 5; what the broker
/// stores for every timer).
pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
/// A timer message's delay from its send, in seconds (the broker turns it into
/// `TIMER_DELIVER_MS`).
pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
/// A timer message's delay from its send, in ms (the broker turns it into
/// `TIMER_DELIVER_MS`).
pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
/// Every timer property, in this order.
pub const TIMER_KEYS: [&str; 3] = [TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS];
/// `"true"` on a half message of a transaction, as the producer sends it.
pub const TRAN_MSG: &str = "TRAN_MSG";
/// The producer group a half message's check-backs go to.
pub const PGROUP: &str = "PGROUP";
/// Set by the broker: how many check-backs a stored copy of a half message has had.
pub const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
/// Set by the broker on a check-back copy: the CommitLog offset of the half message as sent.
/// The transaction's op record can only come after it, so that is where lookups start.
pub const TRAN_HALF_OFFSET: &str = "TRAN_HALF_OFFSET";
/// Set by the broker: when a parked (delayed or timer) message is due, in ms since the epoch.
pub const SCHEDULE_DELIVER_MS: &str = "SCHEDULE_DELIVER_MS";
/// The message group of a 5.x FIFO message (RocketMQ's sharding key): messages of one group
/// go to one queue, in order.
pub const SHARDING_KEY: &str = "__SHARDINGKEY";
/// Where a 5.x client says it sent the message from (its host name); the record's born host
/// is the address its connection came from.
pub const BORN_HOST: &str = "__BORNHOST";

/// Every property name above: set by producers, the SDK or the broker for what they mean, so
/// an application property may not take one of these names.
pub const SYSTEM_KEYS: [&str; 20] = [
    TAGS,
    KEYS,
    UNIQ_KEY,
    DELAY,
    REAL_TOPIC,
    REAL_QID,
    RETRY_TOPIC,
    ORIGIN_MESSAGE_ID,
    RECONSUME_TIME,
    MAX_RECONSUME_TIMES,
    TIMER_DELIVER_MS,
    TIMER_DELAY_SEC,
    TIMER_DELAY_MS,
    TRAN_MSG,
    PGROUP,
    TRANSACTION_CHECK_TIMES,
    TRAN_HALF_OFFSET,
    SCHEDULE_DELIVER_MS,
    SHARDING_KEY,
    BORN_HOST,
];
