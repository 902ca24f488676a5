//! rocketraft operator tools, apart from the SDK so that an app embedding
//! `rocketraft-client` compiles none of them: [`drill`] runs failover drills against a local
//! cluster of real processes; [`access`] lets the tools into a cluster with an admin token or
//! TLS; [`remoting_producer`] sends as a 4.x producer does, for the benchmark.
//!
//! Binaries: `mqadmin` (admin CLI, and `mqadmin drill`), `rocketraft-bench` (the W1
//! benchmark) and `rocketraft-scale` (many topics, queues and groups).

pub mod access;
pub mod drill;
pub mod remoting_producer;
