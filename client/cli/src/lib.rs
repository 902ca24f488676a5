//! rocketraft operator tools, apart from the SDK so that an app embedding
//! `rocketraft-client` compiles none of them: [`drill`] runs failover drills against a local
//! cluster of real processes.
//!
//! Binaries: `mqadmin` (admin CLI, and `mqadmin drill`) and `rocketraft-bench` (the W1
//! benchmark).

pub mod drill;
