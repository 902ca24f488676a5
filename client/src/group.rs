//! A connection to one broker group that follows its leader.
//!
//! Writes go to the leader; a node that is not the leader answers `NOT_LEADER`, and a dead
//! node does not answer at all. Both mean "find the leader again and retry": the leader is
//! the one of the highest term any node reports, since an isolated old leader still
//! believes it leads, but only in an older term. Retrying a send may store it twice (at
//! least once delivery); an acknowledged send is never lost.

use std::net::SocketAddr;
use std::time::Duration;

use rocketraft_proto::broker as pb;
use rocketraft_proto::broker::broker_client::BrokerClient;
use rocketraft_proto::common::ResponseCode;

use crate::connector::Connector;
use tonic::transport::Channel;

/// Messages up to the broker's 4 MiB body limit plus framing must fit a gRPC message.
pub const GRPC_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Pause between attempts while a group has no reachable leader.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// How long a node may take to report its status while the leader is being looked for (a
/// paused process accepts connections but never answers).
const STATUS_TIMEOUT: Duration = Duration::from_millis(500);
/// How long the leader search waits for the remaining nodes once a majority answered without
/// a leader speaking for itself: a live node answers within it; a paused former leader, which
/// the majority still names until it elects another, would otherwise hold the search for the
/// whole [`STATUS_TIMEOUT`], and the caller's next search soon after the election finds the
/// new one.
const AFTER_MAJORITY_WAIT: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error("no gRPC endpoint for {addr}: {reason}")]
    Endpoint { addr: SocketAddr, reason: String },
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("no node of the group knows a leader")]
    NoLeader,
    #[error("the broker rejected the request: {0}")]
    Rejected(#[source] tonic::Status),
    #[error("no leader accepted the request within {timeout:?}; last error: {last_error}")]
    Timeout {
        timeout: Duration,
        last_error: String,
    },
}

/// Connects to one broker node's API over plain HTTP/2 (tools and tests; the SDK's clients
/// connect through their [`Connector`]).
pub async fn connect(addr: SocketAddr) -> Result<BrokerClient<Channel>, GroupError> {
    Connector::plain().connect(addr).await
}

/// Who leads a group, as its nodes report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderReport {
    pub addr: SocketAddr,
    pub term: u64,
    /// The leader itself answered (it is alive), rather than a follower naming it.
    pub answered_itself: bool,
}

#[derive(Debug, Clone)]
pub struct BrokerGroupClient {
    nodes: Vec<SocketAddr>,
    connector: Connector,
}

impl BrokerGroupClient {
    /// A client of the group whose nodes listen on `nodes`, over plain HTTP/2.
    pub fn new(nodes: Vec<SocketAddr>) -> BrokerGroupClient {
        BrokerGroupClient::with_connector(nodes, Connector::plain())
    }

    /// A client of the group whose nodes listen on `nodes`, connecting through `connector`.
    pub fn with_connector(nodes: Vec<SocketAddr>, connector: Connector) -> BrokerGroupClient {
        BrokerGroupClient { nodes, connector }
    }

    pub async fn node_status(
        &self,
        addr: SocketAddr,
    ) -> Result<pb::NodeStatusResponse, GroupError> {
        let mut client = self.connector.connect(addr).await?;
        let response = client
            .node_status(pb::NodeStatusRequest {})
            .await
            .map_err(GroupError::Rejected)?;
        Ok(response.into_inner())
    }

    /// The address of the leader of the highest term any reachable node reports; the nodes
    /// are asked at once, each for at most a short while.
    pub async fn find_leader(&self) -> Option<SocketAddr> {
        self.find_leader_report().await.map(|report| report.addr)
    }

    /// [`Self::find_leader`], saying whether the leader answered for itself. Asks every node
    /// at once and stops waiting once a majority answered and the best report is a leader
    /// speaking for itself, or [`AFTER_MAJORITY_WAIT`] after a majority answered: a paused
    /// node never answers, and waiting out its timeout would delay every failover by it.
    pub async fn find_leader_report(&self) -> Option<LeaderReport> {
        use futures::StreamExt;
        let mut asked: futures::stream::FuturesUnordered<_> = self
            .nodes
            .iter()
            .map(|addr| async move {
                tokio::time::timeout(STATUS_TIMEOUT, self.node_status(*addr))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|status| (*addr, status))
            })
            .collect();
        let majority = self.nodes.len() / 2 + 1;
        let mut answered = 0;
        let mut best: Option<LeaderReport> = None;
        // Set once a majority answered without a leader speaking for itself.
        let mut wait_until = None;
        loop {
            let next = asked.next();
            let answer = match wait_until {
                None => next.await,
                Some(until) => tokio::time::timeout_at(until, next).await.ok().flatten(),
            };
            let Some(answer) = answer else {
                break;
            };
            let Some((addr, status)) = answer else {
                continue;
            };
            answered += 1;
            let leads = status.role == "leader";
            let leader = if leads {
                Some(addr)
            } else {
                status.leader_addr.parse().ok()
            };
            // A higher term wins; in the same term, the leader's own word beats hearsay.
            let better = |best: LeaderReport| {
                status.term > best.term
                    || (status.term == best.term && leads && !best.answered_itself)
            };
            if let Some(leader) = leader
                && best.is_none_or(better)
            {
                best = Some(LeaderReport {
                    addr: leader,
                    term: status.term,
                    answered_itself: leads,
                });
            }
            if answered >= majority {
                if best.is_some_and(|best| best.answered_itself) {
                    break;
                }
                wait_until.get_or_insert_with(|| tokio::time::Instant::now() + AFTER_MAJORITY_WAIT);
            }
        }
        best
    }

    /// A connection to the current leader.
    pub async fn leader(&self) -> Result<BrokerClient<Channel>, GroupError> {
        let leader = self.find_leader().await.ok_or(GroupError::NoLeader)?;
        self.connector.connect(leader).await
    }

    /// Sends to the leader, following leader changes until `timeout`. A rejection of the
    /// request itself (a message over a limit, a bad topic) returns at once.
    pub async fn send(
        &self,
        request: pb::SendRequest,
        timeout: Duration,
    ) -> Result<pb::SendResponse, GroupError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let last_error = match self.find_leader().await {
                None => "no node knows a leader".to_owned(),
                Some(leader) => match self.connector.connect(leader).await {
                    Ok(mut client) => match client.send(request.clone()).await {
                        Ok(response) => return Ok(response.into_inner()),
                        Err(status) if is_retryable(&status) => status.to_string(),
                        Err(status) => return Err(GroupError::Rejected(status)),
                    },
                    Err(error) => error.to_string(),
                },
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(GroupError::Timeout {
                    timeout,
                    last_error,
                });
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}

/// Whether a failed call may succeed on the (possibly new) leader: the broker said it is not
/// the leader, could not confirm replication, or is unavailable; or the call failed in
/// transport (the node died mid-call), when its outcome is unknown.
pub fn is_retryable(status: &tonic::Status) -> bool {
    match rocketraft_proto::response_code(status) {
        Some(code) => matches!(
            code,
            ResponseCode::NotLeader
                | ResponseCode::ReplicationTimeout
                | ResponseCode::ServiceUnavailable
        ),
        None => matches!(
            status.code(),
            tonic::Code::Unavailable
                | tonic::Code::Unknown
                | tonic::Code::Cancelled
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Aborted
        ),
    }
}

#[cfg(test)]
mod tests {
    use rocketraft_proto::RESPONSE_CODE_HEADER;

    use super::*;

    fn with_code(status: tonic::Code, code: ResponseCode) -> tonic::Status {
        let mut status = tonic::Status::new(status, "x");
        status
            .metadata_mut()
            .insert(RESPONSE_CODE_HEADER, (code as i32).into());
        status
    }

    #[test]
    fn retry_follows_the_broker_code_then_the_transport() {
        assert!(is_retryable(&with_code(
            tonic::Code::Unavailable,
            ResponseCode::NotLeader
        )));
        assert!(is_retryable(&with_code(
            tonic::Code::DeadlineExceeded,
            ResponseCode::ReplicationTimeout
        )));
        assert!(!is_retryable(&with_code(
            tonic::Code::InvalidArgument,
            ResponseCode::MessageIllegal
        )));
        assert!(!is_retryable(&with_code(
            tonic::Code::InvalidArgument,
            ResponseCode::TopicIllegal
        )));
        assert!(is_retryable(&tonic::Status::unknown(
            "transport error: broken pipe"
        )));
        assert!(is_retryable(&tonic::Status::unavailable(
            "connection refused"
        )));
        assert!(!is_retryable(&tonic::Status::invalid_argument("bad")));
    }
}
