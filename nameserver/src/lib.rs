//! rocketraft nameserver: the stateless route registry.
//!
//! Broker nodes register with every nameserver on start, periodically and at once on a role
//! change; a node not heard from within the expiry is dropped. Clients ask which broker
//! groups serve a topic and who leads each group. Nothing is stored on disk and nameservers
//! do not talk to each other: after a restart the registry refills from registrations.
//!
//! - [`registry`]: the registry itself, with time as an input; [`metrics`]: what it counts;
//! - [`service`]: its gRPC service; [`server`]: serving it and expiring nodes;
//! - [`settings`]: the binary's config file and flags; [`config_file`]: TOML config files
//!   with errors that name their key, [`logging`], [`connection_limit`],
//!   [`metrics_endpoint`] (the Prometheus scrape endpoint) and [`process_metrics`] (all the
//!   broker's too).

pub mod config_file;
pub mod connection_limit;
pub mod logging;
pub mod metrics;
pub mod metrics_endpoint;
pub mod process_metrics;
pub mod registry;
pub mod server;
pub mod service;
pub mod settings;
