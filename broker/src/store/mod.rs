//! The on-disk message store (work in progress: later commits add the remaining modules).
pub mod error;
pub mod properties;
pub mod tags;
pub mod record;
pub mod mapped_file;
pub mod commit_log;
pub mod consume_queue;
pub mod index;
pub mod checkpoint;
