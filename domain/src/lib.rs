//! The rules rocketraft's broker, SDK and endpoints share, in one place so that a client and
//! a broker never disagree on them: what a valid name is, the limits of the broker API, the
//! message property keys and their codec, SQL92 filters, topic permissions and types, the
//! stable hash, the tags code consumers filter by, wall-clock time, and the shared secrets' format. No I/O: every function here
//! is a pure rule over its arguments (except [`process`], which reads the process's CPU time,
//! and [`time`] and [`clock`], which read the clock).

pub mod clock;
pub mod limits;
pub mod names;
pub mod perm;
pub mod process;
pub mod properties;
pub mod property_keys;
pub mod secrets;
pub mod send_queues;
pub mod sql_filter;
pub mod stable_hash;
pub mod tags_code;
pub mod time;
pub mod topic_type;
pub mod xorshift;
