//! `RemotingCommand`: one request or response of RocketMQ 4.x's remoting protocol, as the
//! frame codec decodes and encodes it, and how a response answers a request.
//!
//! Invariant: a response built by [`RemotingCommand::response_to`] carries its request's
//! `opaque` (the client matches replies by it) and its request's serialize type (ali-ons and
//! the C++ client read only JSON replies, so a reply always speaks as it was spoken to).

use bytes::Bytes;

use crate::ext::ExtFields;
use crate::language::LanguageCode;

/// The `version` every reply carries: `MQVersion.Version.V4_9_8.ordinal()`, the broker
/// version a client records from its HEART_BEAT reply. Java consumers refuse SQL92 pulls from
/// a broker below V4_1_0_SNAPSHOT (232), and count one that sends no version as 0.
pub const BROKER_VERSION: i32 = 409;

/// `flag` bit 0 (`RPC_TYPE`): set on a response, clear on a request.
pub const FLAG_RESPONSE: i32 = 1 << 0;
/// `flag` bit 1 (`RPC_ONEWAY`): the sender expects no reply.
pub const FLAG_ONEWAY: i32 = 1 << 1;

/// How a command's header is written: the high byte of a frame's second int.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SerializeType {
    /// 0: fastjson's text of the command; what every 4.x client sends by default.
    #[default]
    Json,
    /// 1: RocketMQ's binary header (Java with `rocketmq.serialize.type=ROCKETMQ`, Go option).
    RocketMq,
}

impl SerializeType {
    /// The type byte of a frame.
    pub(crate) fn byte(self) -> u8 {
        match self {
            SerializeType::Json => 0,
            SerializeType::RocketMq => 1,
        }
    }

    /// The type a frame's type byte names, if any.
    pub(crate) fn from_byte(byte: u8) -> Option<SerializeType> {
        match byte {
            0 => Some(SerializeType::Json),
            1 => Some(SerializeType::RocketMq),
            _ => None,
        }
    }
}

/// One remoting command: a request (client to server, or a broker's callback to a client) or
/// a response. Field names are RocketMQ's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemotingCommand {
    /// What a request asks for ([`crate::codes::request`]) or how a response went
    /// ([`crate::codes::response`]). An `i16` in a ROCKETMQ header.
    pub code: i32,
    /// The sender's language.
    pub language: LanguageCode,
    /// The sender's RocketMQ version ordinal (e.g. 121 for ali-ons, 317 for Go v2). An `i16` in
    /// a ROCKETMQ header.
    pub version: i32,
    /// The sender's request id; a response echoes its request's. Any value, negative included.
    pub opaque: i32,
    /// [`FLAG_RESPONSE`] and [`FLAG_ONEWAY`] bits.
    pub flag: i32,
    /// Text for people; on an error response, why.
    pub remark: Option<String>,
    /// The fields of the command's header class.
    pub ext_fields: ExtFields,
    /// The body (message bytes, or JSON for admin and heartbeat data).
    pub body: Bytes,
    /// How the header was (or is to be) written.
    pub serialize_type: SerializeType,
}

impl RemotingCommand {
    /// Whether this is a response (flag bit 0).
    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }

    /// Whether the sender expects no reply (flag bit 1).
    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    /// A response to `request` with `code` and `remark`, no fields and no body: it echoes the
    /// request's `opaque` and serialize type, and says `JAVA` and [`BROKER_VERSION`], as a
    /// Java broker's `createResponseCommand` does.
    pub fn response_to(
        request: &RemotingCommand,
        code: i32,
        remark: Option<String>,
    ) -> RemotingCommand {
        RemotingCommand {
            code,
            language: LanguageCode::Java,
            version: BROKER_VERSION,
            opaque: request.opaque,
            flag: FLAG_RESPONSE,
            remark,
            ext_fields: ExtFields::new(),
            body: Bytes::new(),
            serialize_type: request.serialize_type,
        }
    }

    /// The answer to a code this server does not serve, worded as a Java server words it.
    pub fn not_supported(request: &RemotingCommand) -> RemotingCommand {
        RemotingCommand::response_to(
            request,
            crate::codes::response::REQUEST_CODE_NOT_SUPPORTED,
            Some(format!(" request type {} not supported", request.code)),
        )
    }

    /// A `SYSTEM_ERROR` answer saying why.
    pub fn system_error(request: &RemotingCommand, why: impl std::fmt::Display) -> RemotingCommand {
        RemotingCommand::response_to(
            request,
            crate::codes::response::SYSTEM_ERROR,
            Some(why.to_string()),
        )
    }

    /// A `SUCCESS` answer carrying `body`.
    pub fn success(request: &RemotingCommand, body: impl Into<Bytes>) -> RemotingCommand {
        RemotingCommand {
            body: body.into(),
            ..RemotingCommand::response_to(request, crate::codes::response::SUCCESS, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::{request, response};

    #[test]
    fn flag_bits_tell_responses_and_oneway_requests() {
        let mut command = RemotingCommand::default();
        assert!(!command.is_response() && !command.is_oneway());
        command.flag = FLAG_ONEWAY;
        assert!(!command.is_response() && command.is_oneway());
        command.flag = FLAG_RESPONSE;
        assert!(command.is_response() && !command.is_oneway());
        command.flag = -1;
        assert!(command.is_response() && command.is_oneway());
    }

    #[test]
    fn a_response_echoes_opaque_and_serialize_type_and_names_the_broker() {
        let mut fields = ExtFields::new();
        fields.insert("topic", "T");
        let request = RemotingCommand {
            code: request::GET_ROUTEINFO_BY_TOPIC,
            language: LanguageCode::Go,
            version: 317,
            opaque: -42,
            flag: FLAG_ONEWAY,
            remark: Some(String::new()),
            ext_fields: fields,
            body: Bytes::from_static(b"request body"),
            serialize_type: SerializeType::RocketMq,
        };

        let reply = RemotingCommand::response_to(
            &request,
            response::TOPIC_NOT_EXIST,
            Some("No topic route info in name server for the topic: T".into()),
        );

        assert_eq!(reply.code, response::TOPIC_NOT_EXIST);
        assert_eq!(reply.opaque, -42);
        assert_eq!(reply.flag, FLAG_RESPONSE);
        assert!(reply.is_response() && !reply.is_oneway());
        assert_eq!(reply.serialize_type, SerializeType::RocketMq);
        assert_eq!(reply.language, LanguageCode::Java);
        assert_eq!(reply.version, 409, "V4_9_8: clients gate features on it");
        assert_eq!(reply.ext_fields, ExtFields::new());
        assert!(reply.body.is_empty());
    }
}
