//! RocketMQ 4.x's remoting protocol on the wire, so that apps written for the 4.x clients
//! (Java, Go, C++, ali-ons for Node.js) can reach rocketraft unmodified. This crate is the
//! wire layer only: frames, headers and codes. It holds no connection, handler or state.
//!
//! # Layout
//!
//! - [`ExtFields`] (`ext`): the header class fields, with typed reads whose errors name the
//!   field and the value.
//! - [`codes`]: request and response codes.
//!
//! The protocol as its clients speak it is described in
//! `docs/research/rocketmq-4x-remoting.md`.

pub mod codes;
mod ext;

pub use ext::{BAD_VALUE_SHOWN_CHARS_MAX, ExtFieldError, ExtFields};
