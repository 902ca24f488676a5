//! Pop consumption (RocketMQ 5.x's): a consumer pops messages from a queue, each becomes
//! invisible for a while, and comes back unless it is acked in time. [`state`]: the group's
//! replicated pop state (next offsets, messages in flight and their invisibility);
//! [`turns`]: pops of one queue taking turns. The broker API's `Pop` and `ChangePopped` are
//! [`crate::service`]'s.
//!
//! Invariant: a popped message is delivered again once its invisible time ends unacked, on
//! this leader or, after a failover, from the group's committed offsets.

pub mod state;
pub mod turns;
