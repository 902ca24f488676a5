//! Limits of the broker API that clients and brokers share, so a client can shape its
//! requests to what a broker accepts (the broker enforces them at the edge).

/// Messages in one `Send` at most.
pub const SEND_BATCH_COUNT_MAX: usize = 1024;
/// Sum of the bodies of one `Send` at most (RocketMQ's batch limit).
pub const SEND_BATCH_BODY_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Stored bytes of the messages one `Pull` returns at most, unless its first message alone is
/// larger: a pull always returns at least one message, so a response stays below
/// `max(PULL_RESPONSE_BYTES_MAX, largest message)` plus framing, far under the transport limit.
pub const PULL_RESPONSE_BYTES_MAX: usize = 4 * 1024 * 1024;
