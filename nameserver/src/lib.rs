//! rocketraft nameserver: the stateless route registry.
//!
//! Broker nodes register with every nameserver on start, periodically and at once on a role
//! change; a node not heard from within the expiry is dropped. Clients ask which broker
//! groups serve a topic and who leads each group. Nothing is stored on disk and nameservers
//! do not talk to each other: after a restart the registry refills from registrations.
//!
//! - [`registry`]: the registry itself, with time as an input; [`metrics`]: what it counts;
//! - [`service`]: its gRPC service; [`server`]: serving it and expiring nodes;
//! - [`settings`]: the binary's config file and flags.
//!
//! The process around it (config files, logging, connection limits, the metrics endpoint)
//! is `rocketraft-server-kit`'s, shared with the broker.

pub mod metrics;
pub mod registry;
pub mod server;
pub mod service;
pub mod settings;
