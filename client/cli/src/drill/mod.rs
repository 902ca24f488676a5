//! Failover drills: start a local cluster of real processes, run a producer and a
//! push consumer through scheduled faults, and check that nothing acknowledged was lost.
//!
//! - [`cluster`]: the processes (nameserver, 3-node broker groups) and the faults done to them;
//! - [`runner`]: the workload, the fault schedule and the monitor;
//! - [`checker`]: loss, duplicates and order violations from what was acknowledged and
//!   consumed (shared with the tests); [`report`]: the outcome as text or JSON.

pub mod checker;
pub mod cluster;
pub mod report;
pub mod runner;
