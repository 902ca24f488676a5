//! rocketraft client SDK.
//!
//! - [`producer`]: sending messages across broker groups by topic route;
//! - [`message`]: the message type and its core properties; [`unique_id`]: `UNIQ_KEY`s;
//! - [`route`]: topic routes from the nameservers, cached;
//! - [`group`]: a leader-following connection to one broker group (tools and tests);
//! - [`error`]: what can go wrong, in the application's terms.
//!
//! The crate also carries the append benchmark, `rocketraft-bench`.

pub mod error;
pub mod group;
pub mod message;
pub mod producer;
pub mod route;
pub mod unique_id;
