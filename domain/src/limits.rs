//! Limits of the broker API that clients and brokers share, so a client can shape its
//! requests to what a broker accepts (the broker enforces them at the edge).

/// Messages in one `Send` at most.
pub const SEND_BATCH_COUNT_MAX: usize = 1024;
/// Sum of the bodies of one `Send` at most (RocketMQ's batch limit).
pub const SEND_BATCH_BODY_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Sum of the encoded properties of one `Send` at most (one message's may be up to 32 KiB).
pub const SEND_BATCH_PROPERTIES_BYTES_MAX: usize = 1024 * 1024;
/// The longest "ip:port" text a born host can be (an IPv6 address with a scope id).
pub const BORN_HOST_TEXT_BYTES_MAX: usize = 64;
/// Bytes one message of a `Send` adds besides its body and properties, at most: its topic
/// name, its own born host, the protobuf framing of its fields and its entry in `queue_ids`
/// (a varint of at most 10 bytes).
const SEND_MESSAGE_OVERHEAD_BYTES_MAX: usize =
    crate::names::NAME_LEN_MAX + BORN_HOST_TEXT_BYTES_MAX + 48 + 10;
/// The largest `Send` request a broker decodes: a batch with every limit above at its maximum,
/// plus the request's own fields. A larger request is refused by the transport before it is
/// read whole, so a client cannot make a broker buffer more than this per request.
pub const SEND_REQUEST_BYTES_MAX: usize = SEND_BATCH_BODY_BYTES_MAX
    + SEND_BATCH_PROPERTIES_BYTES_MAX
    + SEND_BATCH_COUNT_MAX * SEND_MESSAGE_OVERHEAD_BYTES_MAX
    + 1024;
/// Stored bytes of the messages one `Pull` returns at most, unless its first message alone is
/// larger: a pull always returns at least one message, so a response stays below
/// `max(PULL_RESPONSE_BYTES_MAX, largest message)` plus framing, far under the transport limit.
pub const PULL_RESPONSE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Messages one pop (a 5.x receive) returns at most (RocketMQ's receive batch limit).
pub const POP_BATCH_COUNT_MAX: u32 = 32;
/// The shortest invisible time a pop may ask for. RocketMQ asks for 10 s at least;
/// rocketraft allows shorter, for consumers (and tests) that retry fast.
pub const POP_INVISIBLE_MS_MIN: u64 = 1_000;
/// The shortest invisible time a change of a popped message may ask for: 1 ms makes it
/// visible again at once (a nack; RocketMQ's proxy takes a change of 0 for it). A change of 0
/// is an ack.
pub const POP_CHANGE_INVISIBLE_MS_MIN: u64 = 1;
/// The longest invisible time a pop or a change of one may ask for (RocketMQ's limit).
pub const POP_INVISIBLE_MS_MAX: u64 = 12 * 3600 * 1000;
/// How long an empty pull or pop may be held at most (long polling).
pub const LONG_POLLING_MS_MAX: u32 = 15_000;

/// Reconsumes of a group's message before it goes to the group's dead-letter topic, unless
/// the group is configured otherwise (RocketMQ's default).
pub const RETRY_MAX_TIMES_DEFAULT: u32 = 16;
/// The most reconsumes a group or a consumer may configure.
pub const RETRY_MAX_TIMES_MAX: u32 = 64;

/// Ends one `EndTransactions` request carries at most.
pub const END_TRANSACTIONS_MAX: usize = 1024;

/// Queues one `LockQueues` or `UnlockQueues` request names at most; a client with more
/// queues in one broker group splits its requests.
pub const LOCK_QUEUES_MAX: usize = 1024;

/// The largest registration a nameserver takes: a leader names every topic of its group, up
/// to the broker's group queue limit of them (a topic holds at least one queue), each at most
/// a name of [`crate::names::NAME_LEN_MAX`] bytes and its counts.
pub const REGISTRATION_BYTES_MAX: usize = 8 * 1024 * 1024;

/// The largest HTTP/2 frame every rocketraft endpoint (broker server, SDK and peer channels)
/// accepts, in place of the protocol's 16 KiB default. The sender writes one frame per
/// syscall, so a 4 MiB pull response or a replication stream under load took 256 writes per
/// MiB; measured under W1 with 256 KiB frames the three brokers spent about 0.5 µs less CPU
/// per message. Larger frames gained nothing more.
pub const HTTP2_FRAME_BYTES_MAX: u32 = 256 * 1024;
