//! What both rocketraft servers, the broker node and the nameserver, run on. Nothing here
//! knows a message, a topic or Raft: only the process around a server.
//!
//! - [`config_file`]: TOML config files whose errors name their key;
//! - [`logging`]: text or JSON log lines;
//! - [`connection_limit`]: a listener that serves a bounded number of connections;
//! - [`metrics_endpoint`]: the Prometheus scrape endpoint; [`process_metrics`]: CPU, memory
//!   and file descriptors of the process;
//! - [`graceful_stop`]: stopping a gRPC server within a bounded grace;
//! - [`side_protocol`]: a second protocol on a gRPC server's port, told by its first byte.

pub mod config_file;
pub mod connection_limit;
pub mod graceful_stop;
pub mod logging;
pub mod metrics_endpoint;
pub mod process_metrics;
pub mod side_protocol;
