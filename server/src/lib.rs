//! The composition root: a broker node wired with its endpoints, as the `broker` binary runs
//! it (`broker dev` included), and the nameserver with its own. The broker library knows no endpoint, no SDK and no
//! nameserver; this crate is the one place that knows them all.
//!
//! - [`config`]: a node's config file, split between the broker and each endpoint;
//! - [`node`]: a running node and its endpoints, started and stopped in order;
//! - [`nameserver`]: a nameserver with RocketMQ 4.x remoting on its port (the `nameserver`
//!   binary, and `broker dev`'s).

pub mod config;
pub mod nameserver;
pub mod node;

pub use config::ServerConfig;
pub use node::Node;
pub use node::NodeStartError;
