//! Errors of the broker API and their one wire code each (`ResponseCode` in the proto).
//!
//! A failed call is a `tonic::Status` whose metadata carries the numeric code
//! (`rr-code`) and, for `NOT_LEADER`, the leader's address (`rr-leader-addr`), so clients
//! can branch on the code instead of parsing messages.

use rocketraft_proto::LEADER_ADDR_HEADER;
use rocketraft_proto::RESPONSE_CODE_HEADER;
use rocketraft_proto::common::ResponseCode;

use crate::raft::propose::ProposeError;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("this node is not the leader of its broker group{}", leader_hint(.leader_addr))]
    NotLeader { leader_addr: Option<String> },
    #[error("message rejected: {0}")]
    MessageIllegal(String),
    #[error("topic rejected: {0}")]
    TopicIllegal(String),
    #[error("topic {0:?} does not exist in this broker group")]
    TopicNotExist(String),
    #[error("consumer group {0:?} does not exist in this broker group")]
    GroupNotExist(String),
    #[error("no message at CommitLog offset {0}")]
    MessageNotFound(i64),
    #[error("no permission: {0}")]
    NoPermission(String),
    #[error("queue id {queue_id} rejected: {reason}")]
    QueueIllegal { queue_id: i32, reason: String },
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("the write was not confirmed by a quorum: {0}")]
    ReplicationFailed(String),
    #[error("store error: {0}")]
    Store(String),
    #[error("broker unavailable: {0}")]
    Unavailable(String),
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
}

fn leader_hint(leader_addr: &Option<String>) -> String {
    leader_addr.as_ref().map_or_else(
        || "; no leader is known yet".to_owned(),
        |addr| format!("; the leader is {addr}"),
    )
}

impl From<ProposeError> for BrokerError {
    fn from(error: ProposeError) -> Self {
        match error {
            ProposeError::NotLeader { leader_addr } => BrokerError::NotLeader { leader_addr },
            ProposeError::Unknown(reason) => BrokerError::ReplicationFailed(reason),
            ProposeError::Stopped(reason) => BrokerError::Unavailable(reason),
        }
    }
}

impl BrokerError {
    pub fn code(&self) -> ResponseCode {
        match self {
            BrokerError::NotLeader { .. } => ResponseCode::NotLeader,
            BrokerError::MessageIllegal(_) => ResponseCode::MessageIllegal,
            BrokerError::TopicIllegal(_) => ResponseCode::TopicIllegal,
            BrokerError::TopicNotExist(_) => ResponseCode::TopicNotExist,
            BrokerError::GroupNotExist(_) => ResponseCode::SubscriptionGroupNotExist,
            BrokerError::MessageNotFound(_) => ResponseCode::MessageNotFound,
            BrokerError::NoPermission(_) => ResponseCode::NoPermission,
            BrokerError::QueueIllegal { .. } => ResponseCode::QueueIllegal,
            BrokerError::BadRequest(_) => ResponseCode::BadRequest,
            BrokerError::ReplicationFailed(_) => ResponseCode::ReplicationTimeout,
            BrokerError::Store(_) => ResponseCode::StoreError,
            BrokerError::Unavailable(_) => ResponseCode::ServiceUnavailable,
            BrokerError::LimitExceeded(_) => ResponseCode::LimitExceeded,
        }
    }

    fn grpc_code(&self) -> tonic::Code {
        match self {
            BrokerError::NotLeader { .. } | BrokerError::Unavailable(_) => tonic::Code::Unavailable,
            BrokerError::TopicNotExist(_)
            | BrokerError::GroupNotExist(_)
            | BrokerError::MessageNotFound(_) => tonic::Code::NotFound,
            BrokerError::NoPermission(_) => tonic::Code::PermissionDenied,
            BrokerError::MessageIllegal(_)
            | BrokerError::TopicIllegal(_)
            | BrokerError::QueueIllegal { .. }
            | BrokerError::BadRequest(_) => tonic::Code::InvalidArgument,
            BrokerError::ReplicationFailed(_) => tonic::Code::DeadlineExceeded,
            BrokerError::Store(_) => tonic::Code::Internal,
            BrokerError::LimitExceeded(_) => tonic::Code::ResourceExhausted,
        }
    }
}

impl From<BrokerError> for tonic::Status {
    fn from(error: BrokerError) -> Self {
        let mut status = tonic::Status::new(error.grpc_code(), error.to_string());
        let metadata = status.metadata_mut();
        metadata.insert(RESPONSE_CODE_HEADER, (error.code() as i32).into());
        if let BrokerError::NotLeader {
            leader_addr: Some(addr),
        } = &error
            && let Ok(value) = addr.parse()
        {
            metadata.insert(LEADER_ADDR_HEADER, value);
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_leader_status_carries_code_and_leader() {
        let status: tonic::Status = BrokerError::NotLeader {
            leader_addr: Some("127.0.0.1:7".into()),
        }
        .into();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(
            rocketraft_proto::response_code(&status),
            Some(ResponseCode::NotLeader)
        );
        assert_eq!(rocketraft_proto::leader_addr(&status), Some("127.0.0.1:7"));
        assert!(status.message().contains("the leader is 127.0.0.1:7"));
    }
}
