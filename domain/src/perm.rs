//! RocketMQ's permission bits of a topic's queues in a broker group, as the broker stores
//! them and the nameserver and clients read them from routes.

/// The topic's queues in the group may be read.
pub const PERM_READ: u32 = 4;
/// The topic's queues in the group may be written.
pub const PERM_WRITE: u32 = 2;
/// Both: what a topic gets unless created otherwise.
pub const PERM_READ_WRITE: u32 = PERM_READ | PERM_WRITE;
