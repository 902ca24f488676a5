//! The 5.x protocol's result codes: every response carries a `Status` (code and reason), and
//! the clients read the code, not the gRPC status, to decide whether to retry.

use rocketraft_client::error::ProducerError;

use crate::pb;
use crate::pb::Code;

/// The status of a call that did what it was asked.
pub fn ok() -> Option<pb::Status> {
    status(Code::Ok, "OK")
}

/// A status with `code` and a reason for people.
pub fn status(code: Code, message: impl Into<String>) -> Option<pb::Status> {
    Some(pb::Status {
        code: code as i32,
        message: message.into(),
    })
}

/// The code and reason of a send the SDK could not complete.
pub fn of_send_error(error: &ProducerError) -> Option<pb::Status> {
    let code = match error {
        ProducerError::NoRoute { .. } | ProducerError::TopicNotExist { .. } => Code::TopicNotFound,
        ProducerError::TopicIllegal(_) => Code::IllegalTopic,
        ProducerError::MessageIllegal(_) | ProducerError::InvalidRequest(_) => Code::BadRequest,
        // The client backs off and tries again.
        ProducerError::NameserversUnavailable { .. }
        | ProducerError::AllGroupsUnavailable { .. } => Code::HaNotAvailable,
    };
    status(code, error.to_string())
}
