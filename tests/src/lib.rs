//! Multi-node test harness.
