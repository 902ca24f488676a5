//! The `code` of a remoting command: what a request asks for, or how a response went.
//!
//! Codes are plain `i32` constants, not enums: a client may send any code, and an unknown one
//! must still reach the dispatcher, which answers it with
//! [`response::REQUEST_CODE_NOT_SUPPORTED`]. The values are RocketMQ 4.9.x's
//! (`RequestCode`, `ResponseCode`, `RemotingSysResponseCode`) and are never changed: clients
//! compiled against them are the reason this crate exists.

/// Request codes: what a request asks for.
pub mod request {
    /// Send one message, v1 header (C++, Java with `sendSmartMsg=false`).
    pub const SEND_MESSAGE: i32 = 10;
    /// Pull messages from a queue.
    pub const PULL_MESSAGE: i32 = 11;
    /// Messages of a topic by key.
    pub const QUERY_MESSAGE: i32 = 12;
    /// A group's committed offset of a queue.
    pub const QUERY_CONSUMER_OFFSET: i32 = 14;
    /// Commit a group's offset of a queue (usually oneway).
    pub const UPDATE_CONSUMER_OFFSET: i32 = 15;
    /// Create or update a topic on a broker.
    pub const UPDATE_AND_CREATE_TOPIC: i32 = 17;
    /// Every topic config of a broker.
    pub const GET_ALL_TOPIC_CONFIG: i32 = 21;
    /// A broker's configuration.
    pub const GET_BROKER_CONFIG: i32 = 26;
    /// A broker's runtime statistics (`mqadmin clusterList`).
    pub const GET_BROKER_RUNTIME_INFO: i32 = 28;
    /// The offset of a queue at a timestamp.
    pub const SEARCH_OFFSET_BY_TIMESTAMP: i32 = 29;
    /// The next offset of a queue.
    pub const GET_MAX_OFFSET: i32 = 30;
    /// The first offset of a queue.
    pub const GET_MIN_OFFSET: i32 = 31;
    /// The store time of a queue's first message.
    pub const GET_EARLIEST_MSG_STORETIME: i32 = 32;
    /// One stored message by commit log offset.
    pub const VIEW_MESSAGE_BY_ID: i32 = 33;
    /// A client's producers and consumers, every 30 s.
    pub const HEART_BEAT: i32 = 34;
    /// A client leaves.
    pub const UNREGISTER_CLIENT: i32 = 35;
    /// A consumer gives a message back for a later retry.
    pub const CONSUMER_SEND_MSG_BACK: i32 = 36;
    /// Commit or roll back a half message (oneway).
    pub const END_TRANSACTION: i32 = 37;
    /// The client ids of a consumer group.
    pub const GET_CONSUMER_LIST_BY_GROUP: i32 = 38;
    /// Broker to producer: what became of this half message? (oneway)
    pub const CHECK_TRANSACTION_STATE: i32 = 39;
    /// Broker to consumer: the group's members changed, rebalance (oneway).
    pub const NOTIFY_CONSUMER_IDS_CHANGED: i32 = 40;
    /// Lock queues for an orderly consumer.
    pub const LOCK_BATCH_MQ: i32 = 41;
    /// Unlock queues (sometimes oneway).
    pub const UNLOCK_BATCH_MQ: i32 = 42;
    /// Check a non-TAG subscription before a push consumer starts.
    pub const CHECK_CLIENT_CONFIG: i32 = 46;
    /// Store a key-value config on the nameserver.
    pub const PUT_KV_CONFIG: i32 = 100;
    /// Read a key-value config from the nameserver.
    pub const GET_KV_CONFIG: i32 = 101;
    /// A broker registers with a nameserver.
    pub const REGISTER_BROKER: i32 = 103;
    /// A topic's route.
    pub const GET_ROUTEINFO_BY_TOPIC: i32 = 105;
    /// The brokers of every cluster.
    pub const GET_BROKER_CLUSTER_INFO: i32 = 106;
    /// Create or update a subscription group.
    pub const UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: i32 = 200;
    /// Every subscription group config of a broker.
    pub const GET_ALL_SUBSCRIPTIONGROUP_CONFIG: i32 = 201;
    /// Min and max offsets of a topic's queues on a broker.
    pub const GET_TOPIC_STATS_INFO: i32 = 202;
    /// The connections of a consumer group.
    pub const GET_CONSUMER_CONNECTION_LIST: i32 = 203;
    /// The connections of a producer group.
    pub const GET_PRODUCER_CONNECTION_LIST: i32 = 204;
    /// Every topic the nameserver knows.
    pub const GET_ALL_TOPIC_LIST_FROM_NAMESERVER: i32 = 206;
    /// A consumer group's progress per queue.
    pub const GET_CONSUME_STATS: i32 = 208;
    /// Delete a topic from a broker.
    pub const DELETE_TOPIC_IN_BROKER: i32 = 215;
    /// Delete a topic from a nameserver.
    pub const DELETE_TOPIC_IN_NAMESRV: i32 = 216;
    /// Broker to consumer: reset the group's offsets.
    pub const RESET_CONSUMER_CLIENT_OFFSET: i32 = 220;
    /// Broker to consumer: its offsets.
    pub const GET_CONSUMER_STATUS_FROM_CLIENT: i32 = 221;
    /// The topics of a cluster.
    pub const GET_TOPICS_BY_CLUSTER: i32 = 224;
    /// The consumer groups of a topic.
    pub const QUERY_TOPIC_CONSUME_BY_WHO: i32 = 300;
    /// A consumer's running state (admin to broker, then broker to client).
    pub const GET_CONSUMER_RUNNING_INFO: i32 = 307;
    /// Have a consumer consume one message now.
    pub const CONSUME_MESSAGE_DIRECTLY: i32 = 309;
    /// Send one message, v2 header with one-letter keys (Java default, ali-ons).
    pub const SEND_MESSAGE_V2: i32 = 310;
    /// A broker's statistics by name and key.
    pub const VIEW_BROKER_STATS_DATA: i32 = 315;
    /// A broker's consume statistics.
    pub const GET_BROKER_CONSUME_STATS: i32 = 317;
    /// Send a batch, v2 header.
    pub const SEND_BATCH_MESSAGE: i32 = 320;
    /// Every producer a broker knows.
    pub const GET_ALL_PRODUCER_INFO: i32 = 328;
}

/// Response codes: how a request went.
pub mod response {
    /// Done.
    pub const SUCCESS: i32 = 0;
    /// Failed; the remark says why. Java producers retry it on another queue.
    pub const SYSTEM_ERROR: i32 = 1;
    /// Overloaded or refused; try later.
    pub const SYSTEM_BUSY: i32 = 2;
    /// Unknown request code (answered even to a oneway request).
    pub const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;
    /// A transaction failed.
    pub const TRANSACTION_FAILED: i32 = 4;
    /// Sent, but not flushed in time.
    pub const FLUSH_DISK_TIMEOUT: i32 = 10;
    /// Sent, but no slave to replicate to.
    pub const SLAVE_NOT_AVAILABLE: i32 = 11;
    /// Sent, but not replicated in time.
    pub const FLUSH_SLAVE_TIMEOUT: i32 = 12;
    /// The message breaks a rule (size, properties).
    pub const MESSAGE_ILLEGAL: i32 = 13;
    /// The broker cannot serve this now (e.g. not writable).
    pub const SERVICE_NOT_AVAILABLE: i32 = 14;
    /// The client's version is not supported.
    pub const VERSION_NOT_SUPPORTED: i32 = 15;
    /// The topic or group does not permit this.
    pub const NO_PERMISSION: i32 = 16;
    /// No such topic.
    pub const TOPIC_NOT_EXIST: i32 = 17;
    /// The topic exists already.
    pub const TOPIC_EXIST_ALREADY: i32 = 18;
    /// Pull: no new message (the client maps it to NO_NEW_MSG).
    pub const PULL_NOT_FOUND: i32 = 19;
    /// Pull: everything scanned was filtered out; pull again at once.
    pub const PULL_RETRY_IMMEDIATELY: i32 = 20;
    /// Pull: the offset is out of range; continue at `nextBeginOffset`.
    pub const PULL_OFFSET_MOVED: i32 = 21;
    /// Nothing found (no committed offset, no such key).
    pub const QUERY_NOT_FOUND: i32 = 22;
    /// The subscription expression does not parse.
    pub const SUBSCRIPTION_PARSE_FAILED: i32 = 23;
    /// The group is not subscribed to the topic.
    pub const SUBSCRIPTION_NOT_EXIST: i32 = 24;
    /// The broker's copy of the subscription is older than the client's.
    pub const SUBSCRIPTION_NOT_LATEST: i32 = 25;
    /// No such subscription group.
    pub const SUBSCRIPTION_GROUP_NOT_EXIST: i32 = 26;
    /// Class filter data missing.
    pub const FILTER_DATA_NOT_EXIST: i32 = 27;
    /// Class filter data outdated.
    pub const FILTER_DATA_NOT_LATEST: i32 = 28;
    /// Transaction check answer: commit.
    pub const TRANSACTION_SHOULD_COMMIT: i32 = 200;
    /// Transaction check answer: roll back.
    pub const TRANSACTION_SHOULD_ROLLBACK: i32 = 201;
    /// Transaction check answer: unknown yet (RocketMQ's spelling).
    pub const TRANSACTION_STATE_UNKNOW: i32 = 202;
    /// Transaction check: wrong producer group.
    pub const TRANSACTION_STATE_GROUP_WRONG: i32 = 203;
    /// Unit mode: no buyer id (retried by Java producers).
    pub const NO_BUYER_ID: i32 = 204;
    /// Unit mode: not in this unit (retried by Java producers).
    pub const NOT_IN_CURRENT_UNIT: i32 = 205;
    /// The consumer group has no live member.
    pub const CONSUMER_NOT_ONLINE: i32 = 206;
    /// Consuming directly timed out.
    pub const CONSUME_MSG_TIMEOUT: i32 = 207;
    /// No message.
    pub const NO_MESSAGE: i32 = 208;
    /// Flow control; a pulling client retries after 20 ms.
    pub const FLOW_CONTROL: i32 = 215;
}
