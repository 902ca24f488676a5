//! rocketraft broker node: the on-disk message store (and, later, the Raft layer and gRPC API).
pub mod store;
