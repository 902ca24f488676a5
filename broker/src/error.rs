//! Errors of the broker API and their one wire code each (`ResponseCode` in the proto).
//!
//! A failed call is a `tonic::Status` whose metadata carries the numeric code
//! (`rr-code`) and, for `NOT_LEADER`, the leader's address (`rr-leader-addr`), so clients
//! can branch on the code instead of parsing messages.

use rocketraft_proto::common::ResponseCode;

use openraft::errors::Fatal;

use crate::raft::control::membership::MembershipError;
use crate::raft::control::propose::ProposeError;
use crate::raft::control::propose::Undecided;
use crate::raft::control::role::TransferError;
use crate::raft::control::setup::SetupError;
use crate::raft::types::TypeConfig;
use crate::store::StoreError;

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
    #[error("the write was not committed within {timeout:?}; it may still commit")]
    CommitTimeout { timeout: std::time::Duration },
    #[error("the write's outcome is unknown; it may still commit")]
    Undecided(#[source] Undecided),
    #[error("the store failed")]
    Store(#[from] StoreError),
    #[error("broker unavailable: {0}")]
    Unavailable(String),
    #[error("raft stopped on this node")]
    RaftStopped(#[source] Fatal<TypeConfig>),
    #[error("leadership transfer failed")]
    Transfer(#[source] TransferError),
    #[error("the node may not be replaced")]
    NodeReplacement(#[source] SetupError),
    #[error("membership change refused")]
    Membership(#[source] MembershipError),
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    #[error(
        "the leader's disk is past its full mark (retention.disk_full_ratio): sends are \
         refused until retention frees space; pulls go on"
    )]
    DiskFull,
    /// A broker invariant failed: a bug, named in the message.
    #[error("internal error: {0}")]
    Internal(String),
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
            ProposeError::Unknown(undecided) => BrokerError::Undecided(undecided),
            ProposeError::Stopped(fatal) => BrokerError::RaftStopped(fatal),
        }
    }
}

impl BrokerError {
    /// A message refused for `reason` (`MESSAGE_ILLEGAL`).
    pub fn illegal(reason: impl std::fmt::Display) -> BrokerError {
        BrokerError::MessageIllegal(reason.to_string())
    }

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
            BrokerError::CommitTimeout { .. } | BrokerError::Undecided(_) => {
                ResponseCode::ReplicationTimeout
            }
            BrokerError::Store(_) => ResponseCode::StoreError,
            BrokerError::Unavailable(_) | BrokerError::RaftStopped(_) => {
                ResponseCode::ServiceUnavailable
            }
            BrokerError::Transfer(TransferError::NotAVoter(_)) => ResponseCode::BadRequest,
            BrokerError::Transfer(TransferError::NotLeader) => ResponseCode::NotLeader,
            BrokerError::Transfer(_) => ResponseCode::ServiceUnavailable,
            BrokerError::NodeReplacement(_) => ResponseCode::BadRequest,
            BrokerError::Membership(error) => match error {
                MembershipError::NotLeader => ResponseCode::NotLeader,
                MembershipError::CatchUpTimeout { .. } => ResponseCode::ReplicationTimeout,
                MembershipError::Raft(_) => ResponseCode::ServiceUnavailable,
                _ => ResponseCode::BadRequest,
            },
            BrokerError::LimitExceeded(_) => ResponseCode::LimitExceeded,
            BrokerError::DiskFull => ResponseCode::DiskFull,
            BrokerError::Internal(_) => ResponseCode::InternalError,
        }
    }

    fn grpc_code(&self) -> tonic::Code {
        match self.code() {
            ResponseCode::NotLeader | ResponseCode::ServiceUnavailable => tonic::Code::Unavailable,
            ResponseCode::TopicNotExist
            | ResponseCode::SubscriptionGroupNotExist
            | ResponseCode::MessageNotFound => tonic::Code::NotFound,
            ResponseCode::NoPermission => tonic::Code::PermissionDenied,
            ResponseCode::MessageIllegal
            | ResponseCode::TopicIllegal
            | ResponseCode::QueueIllegal
            | ResponseCode::BadRequest => tonic::Code::InvalidArgument,
            ResponseCode::ReplicationTimeout => tonic::Code::DeadlineExceeded,
            ResponseCode::LimitExceeded | ResponseCode::DiskFull => tonic::Code::ResourceExhausted,
            _ => tonic::Code::Internal,
        }
    }
}

impl From<BrokerError> for tonic::Status {
    /// The message is the whole chain of causes, so a client sees why, not only what.
    fn from(error: BrokerError) -> Self {
        let leader_addr = match &error {
            BrokerError::NotLeader { leader_addr } => leader_addr.as_deref(),
            _ => None,
        };
        rocketraft_proto::error_status(
            error.grpc_code(),
            error.code(),
            rocketraft_proto::error_chain(&error),
            leader_addr,
        )
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

    #[test]
    fn a_store_failure_tells_the_client_its_cause() {
        let status: tonic::Status = BrokerError::from(StoreError::OffsetOutOfRange {
            offset: -5,
            min: 0,
            max: 10,
        })
        .into();
        assert_eq!(status.code(), tonic::Code::Internal);
        assert_eq!(
            rocketraft_proto::response_code(&status),
            Some(ResponseCode::StoreError)
        );
        assert_eq!(
            status.message(),
            "the store failed: offset -5 out of range [0, 10]"
        );
    }
}
