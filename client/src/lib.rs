//! rocketraft client SDK. Issues 3 and 6 build the producer and push consumer on top of
//! [`group::BrokerGroupClient`], today's building block: a leader-following connection to
//! one broker group. The crate also carries the append benchmark, `rocketraft-bench`.

pub mod group;
