//! Errors of the client SDK: each says what went wrong in the application's terms.

use rocketraft_proto::common::ResponseCode;

use crate::route::RouteError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ProducerError {
    #[error("no broker group serves topic {topic:?} (create it first, or enable auto-creation)")]
    NoRoute { topic: String },
    #[error("topic {topic:?} does not exist in broker group {group}")]
    TopicNotExist { topic: String, group: String },
    #[error("message rejected: {0}")]
    MessageIllegal(String),
    #[error("topic rejected: {0}")]
    TopicIllegal(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("no nameserver answered: {last_error}")]
    NameserversUnavailable { last_error: String },
    #[error("no broker group accepted the send after {attempts} attempts: {last_error}")]
    AllGroupsUnavailable { attempts: u32, last_error: String },
}

impl ProducerError {
    /// The error for a broker's rejection that retrying cannot fix.
    pub(crate) fn from_rejection(
        status: &tonic::Status,
        topic: &str,
        group: &str,
    ) -> ProducerError {
        match rocketraft_proto::response_code(status) {
            Some(ResponseCode::TopicNotExist) => ProducerError::TopicNotExist {
                topic: topic.to_owned(),
                group: group.to_owned(),
            },
            Some(ResponseCode::MessageIllegal) => {
                ProducerError::MessageIllegal(status.message().to_owned())
            }
            Some(ResponseCode::TopicIllegal) => {
                ProducerError::TopicIllegal(status.message().to_owned())
            }
            _ => ProducerError::InvalidRequest(status.message().to_owned()),
        }
    }
}

impl From<RouteError> for ProducerError {
    fn from(error: RouteError) -> Self {
        match error {
            RouteError::NoRoute { topic } => ProducerError::NoRoute { topic },
            RouteError::NameserversUnavailable { last_error } => {
                ProducerError::NameserversUnavailable { last_error }
            }
        }
    }
}
