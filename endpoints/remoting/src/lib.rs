//! RocketMQ 4.x's remoting protocol on the wire, so that apps written for the 4.x clients
//! (Java, Go, C++, ali-ons for Node.js) can reach rocketraft unmodified. This crate is the
//! wire layer, a connection's service, and the handlers behind it; it holds no state of its
//! own.
//!
//! # Layout
//!
//! - [`RemotingCodec`] (`frame`): frames to [`RemotingCommand`]s and back, for
//!   `tokio_util::codec::Framed`, capped at [`FRAME_BYTES_MAX`]. A decode error closes the
//!   connection.
//! - [`RemotingCommand`] (`command`): one request or response, and
//!   [`RemotingCommand::response_to`], which answers as a 4.9.8 Java broker does.
//! - `json_header`, `binary_header`: the two header forms, JSON (decoded leniently, as the
//!   clients write it) and ROCKETMQ (decoded through checked lengths only).
//! - [`ExtFields`] (`ext`): the header class fields, with typed reads whose errors name the
//!   field and the value.
//! - [`codes`]: request and response codes; [`LanguageCode`] (`language`).
//! - `object_keyed`: maps keyed by objects, as fastjson writes them for Java admin tools.
//! - [`connection`]: one connection served, its requests answered concurrently by a
//!   [`connection::Handler`].
//! - [`nameserver`]: the nameserver's 4.x requests, answered from its route registry.
//! - [`broker`]: a broker node's 4.x requests, carried to its group's leader through the SDK.
//!
//! The protocol as its clients speak it is described in
//! `docs/research/rocketmq-4x-remoting.md`.

mod binary_header;
pub mod broker;
pub mod codes;
mod command;
pub mod connection;
mod ext;
mod frame;
mod json_header;
mod language;
pub mod nameserver;
mod object_keyed;

pub use binary_header::{BinaryEncodeError, BinaryHeaderError};
pub use command::{BROKER_VERSION, FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand, SerializeType};
pub use ext::{BAD_VALUE_SHOWN_CHARS_MAX, ExtFieldError, ExtFields};
pub use frame::{DecodeError, EncodeError, FRAME_BYTES_MAX, FRAME_FIRST_BYTE, RemotingCodec};
pub use language::LanguageCode;
