//! rocketraft client SDK.
//!
//! - [`producer`]: sending messages across broker groups by topic route;
//! - [`consumer`]: the push consumer (rebalance, long-polling pull loops, offsets);
//! - [`message`]: the message type and its core properties; [`properties`]: a received
//!   message's properties, read in place; [`unique_id`]: `UNIQ_KEY`s;
//! - [`send_lanes`]: concurrent sends to one queue share a request; [`end_lanes`]: so do
//!   concurrent transaction ends to one broker group ([`transaction`]);
//! - [`route`]: topic routes from the nameservers, cached; [`nameservers`]: questions asked
//!   of every nameserver side by side; [`subscription`]: tag expressions;
//! - [`group`]: a leader-following connection to one broker group (tools and tests);
//! - [`brokers`]: leader-following calls to broker groups; [`clients`]: cached connections;
//!   [`connector`]: how connections are opened (plain or TLS);
//! - [`admin`]: cluster administration (what `mqadmin` does);
//! - [`error`]: what can go wrong, in the application's terms.
//!
//! The tools (`mqadmin`, `rocketraft-bench`, the failover drill) live in `rocketraft-cli`
//! (`client/cli`), so an app that embeds this crate compiles none of them.

pub mod admin;
pub mod brokers;
pub mod clients;
pub mod connector;
pub mod consumer;
pub mod end_lanes;
pub mod error;
pub mod group;
pub mod message;
pub mod nameservers;
pub mod producer;
pub mod properties;
pub mod route;
pub mod send_lanes;
pub mod subscription;
pub mod transaction;
pub mod unique_id;
