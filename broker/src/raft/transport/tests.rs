//! Tests of the Raft transport as a whole: `network`'s `PeerClient` calling `service`'s
//! `RaftService` of a real one-node group over real gRPC on 127.0.0.1, so both halves of
//! every RPC (encoding, status mapping, refusals) are exercised together.

use std::sync::Arc;
use std::time::Duration;

use openraft::RaftNetworkFactory;
use openraft::errors::RPCError;
use openraft::network::NetStreamAppend;
use openraft::network::NetVote;
use openraft::network::RPCOption;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::StreamAppendError;
use openraft::raft::VoteRequest;
use rocketraft_proto::raft as pb;
use rocketraft_proto::raft::raft_client::RaftClient;

use crate::config::COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER;
use crate::raft::transport::faults::FaultPlan;
use crate::raft::transport::network::NetworkFactory;
use crate::raft::transport::network::PeerClient;
use crate::raft::transport::network::UNREACHABLE_BACKOFF;
use crate::raft::transport::node_addr::NodeAddr;
use crate::raft::types::NodeId;
use crate::raft::types::TypeConfig;
use crate::raft::types::Vote;
use crate::test_node::OneNode;

/// The node id the tests' client speaks as; not a member of the group.
const STRANGER: NodeId = 9;
const RPC_TTL: Duration = Duration::from_secs(5);

async fn peer_client(addr: &str, faults: Option<Arc<FaultPlan>>) -> PeerClient {
    laid_out_peer_client(addr, faults, COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER).await
}

/// A client that stamps `commit_log_segment_bytes` as its CommitLog segment size.
async fn laid_out_peer_client(
    addr: &str,
    faults: Option<Arc<FaultPlan>>,
    commit_log_segment_bytes: u64,
) -> PeerClient {
    NetworkFactory::new(
        STRANGER,
        commit_log_segment_bytes,
        faults,
        crate::tls::PeerConnector::default(),
        tokio_util::sync::CancellationToken::new(),
    )
    .new_client(1, &NodeAddr::shared(addr))
    .await
}

fn stale_vote_request() -> VoteRequest<TypeConfig> {
    VoteRequest::new(Vote::new(0, STRANGER), None)
}

/// An empty append from a leader of term 0, which no node of a running group accepts.
fn stale_append_request() -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: Vote::new_committed(0, STRANGER),
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    }
}

#[tokio::test]
async fn a_stale_vote_is_answered_with_the_nodes_own_vote() {
    let group = OneNode::start().await;
    let mut client = peer_client(&group.addr().to_string(), None).await;

    let vote = client
        .vote(stale_vote_request(), RPCOption::new(RPC_TTL))
        .await
        .expect("vote answered");
    assert!(!vote.vote_granted, "a term-0 candidate must not be granted");
    assert!(vote.vote.leader_id().term >= 1, "answered {:?}", vote.vote);
    assert_eq!(vote.vote.leader_id().voted_for, 1);
    assert!(vote.last_log_id.is_some(), "the founding entries are named");

    let pre_vote = client
        .pre_vote(stale_vote_request(), RPCOption::new(RPC_TTL))
        .await
        .expect("pre-vote answered");
    assert!(!pre_vote.vote_granted);
    group.node.shutdown().await;
}

#[tokio::test]
async fn a_stale_append_stream_is_refused_with_the_higher_vote() {
    use futures::StreamExt;
    let group = OneNode::start().await;
    let mut client = peer_client(&group.addr().to_string(), None).await;
    let request = stale_append_request();

    let mut results = client
        .stream_append(futures::stream::iter([request]), RPCOption::new(RPC_TTL))
        .await
        .expect("stream opened");
    let first = tokio::time::timeout(RPC_TTL, results.next())
        .await
        .expect("answered in time")
        .expect("one result")
        .expect("not a transport error");
    match first {
        Err(StreamAppendError::HigherVote(vote)) => {
            assert_eq!(vote.leader_id().voted_for, 1);
        }
        other => panic!("expected HigherVote, got {other:?}"),
    }
    drop(results);
    group.node.shutdown().await;
}

#[tokio::test]
async fn a_peer_with_another_commit_log_segment_size_is_refused_every_rpc() {
    use futures::StreamExt;
    let group = OneNode::start().await;
    let addr = group.addr().to_string();
    let mut client =
        laid_out_peer_client(&addr, None, COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER * 2).await;
    let says_why = |error: &RPCError<TypeConfig>| {
        let text = error.to_string();
        assert!(
            matches!(error, RPCError::Unreachable(_)),
            "left alone a while, as an unreachable peer: {error:?}"
        );
        assert!(
            text.contains("commit_log_segment_bytes")
                && text.contains(&COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER.to_string())
                && text.contains(&(COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER * 2).to_string()),
            "{text}"
        );
    };

    let refused = client
        .vote(stale_vote_request(), RPCOption::new(RPC_TTL))
        .await
        .expect_err("a vote from a node laid out otherwise");
    says_why(&refused);
    let request = stale_append_request();
    let refused = match client
        .stream_append(futures::stream::iter([request]), RPCOption::new(RPC_TTL))
        .await
    {
        Err(error) => error,
        Ok(mut results) => tokio::time::timeout(RPC_TTL, results.next())
            .await
            .expect("answered in time")
            .expect("one result")
            .expect_err("a replication stream from a node laid out otherwise"),
    };
    says_why(&refused);

    let mut same = peer_client(&addr, None).await;
    same.vote(stale_vote_request(), RPCOption::new(RPC_TTL))
        .await
        .expect("a peer laid out alike is answered");
    group.node.shutdown().await;
}

#[tokio::test]
async fn an_isolated_node_refuses_rpcs_and_its_peer_sees_it_unreachable() {
    let group = OneNode::start().await;
    group.faults.isolate(1);
    // The client has no faults of its own: the refusal comes from the server.
    let mut client = peer_client(&group.addr().to_string(), None).await;

    let error = client
        .vote(stale_vote_request(), RPCOption::new(RPC_TTL))
        .await
        .expect_err("refused while isolated");
    assert!(
        matches!(&error, RPCError::Unreachable(_)),
        "an unavailable peer is unreachable, not a network error: {error:?}"
    );
    assert!(error.to_string().contains("partitioned"), "{error}");
    // A refused replication stream: its status comes in the response headers.
    let stale_append = stale_append_request();
    let error = client
        .stream_append(
            futures::stream::iter([stale_append]),
            RPCOption::new(RPC_TTL),
        )
        .await
        .err()
        .expect("stream refused while isolated");
    assert!(matches!(&error, RPCError::Unreachable(_)), "{error:?}");
    assert!(error.to_string().contains("partitioned"), "{error}");

    group.faults.heal();
    client
        .vote(stale_vote_request(), RPCOption::new(RPC_TTL))
        .await
        .expect("answered once healed");
    group.node.shutdown().await;
}

#[tokio::test]
async fn a_snapshot_stream_without_its_header_is_refused_and_installs_nothing() {
    use pb::snapshot_chunk::Chunk;
    let group = OneNode::start().await;
    let mut raw = RaftClient::connect(format!("http://{}", group.addr()))
        .await
        .expect("connect");
    let end_before = group.node.group().store().commit_log_max_offset();

    let headless = futures::stream::iter([pb::SnapshotChunk {
        chunk: Some(Chunk::CommitLogBytes(vec![1, 2, 3].into())),
    }]);
    let status = raw.install_snapshot(headless).await.expect_err("no header");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("header"), "{status}");

    let garbage_header = futures::stream::iter([pb::SnapshotChunk {
        chunk: Some(Chunk::Header(vec![0xff; 3].into())),
    }]);
    let status = raw
        .install_snapshot(garbage_header)
        .await
        .expect_err("undecodable header");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);

    assert_eq!(
        group.node.group().store().commit_log_max_offset(),
        end_before
    );
    group.node.shutdown().await;
}

#[tokio::test]
async fn a_peer_that_does_not_listen_is_unreachable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let mut client = peer_client(&addr.to_string(), None).await;

    let error = client
        .vote(stale_vote_request(), RPCOption::new(RPC_TTL))
        .await
        .expect_err("nobody listens");
    assert!(matches!(error, RPCError::Unreachable(_)), "{error:?}");
}

/// A killed follower refuses connections at once: each failed stream must not be followed by
/// the next at once (openraft's backoff paces only an open stream's requests), or the leader
/// spins on it.
#[tokio::test]
async fn a_replication_stream_to_a_refusing_peer_is_retried_no_sooner_than_the_backoff() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let mut client = peer_client(&addr.to_string(), None).await;
    let request = stale_append_request;
    let mut open_stream = async || {
        client
            .stream_append(futures::stream::iter([request()]), RPCOption::new(RPC_TTL))
            .await
            .map(|_| ())
    };

    let first = open_stream().await.expect_err("nobody listens");
    assert!(matches!(first, RPCError::Unreachable(_)), "{first:?}");
    let failed_at = std::time::Instant::now();
    let second = open_stream().await.expect_err("still nobody");
    assert!(matches!(second, RPCError::Unreachable(_)), "{second:?}");
    assert!(
        failed_at.elapsed() >= UNREACHABLE_BACKOFF,
        "retried after {:?}",
        failed_at.elapsed()
    );
}

/// openraft does not join its replication tasks at shutdown: one still running must not
/// replicate for a node that has stopped (seen: it caught up a follower 120 ms after its
/// node's shutdown returned).
#[tokio::test]
async fn a_stopped_node_sends_no_rpc() {
    let group = OneNode::start().await;
    let stopped = tokio_util::sync::CancellationToken::new();
    let mut client = NetworkFactory::new(
        STRANGER,
        COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER,
        None,
        crate::tls::PeerConnector::default(),
        stopped.clone(),
    )
    .new_client(1, &NodeAddr::shared(group.addr().to_string()))
    .await;
    client
        .vote(stale_vote_request(), RPCOption::new(RPC_TTL))
        .await
        .expect("answered while the node runs");

    stopped.cancel();
    let vote = client
        .vote(stale_vote_request(), RPCOption::new(RPC_TTL))
        .await
        .expect_err("sent after the stop");
    assert!(vote.to_string().contains("has stopped"), "{vote}");
    let stream = client
        .stream_append(
            futures::stream::iter([stale_append_request()]),
            RPCOption::new(RPC_TTL),
        )
        .await
        .map(|_| ())
        .expect_err("opened after the stop");
    assert!(matches!(stream, RPCError::Unreachable(_)), "{stream:?}");
    group.node.shutdown().await;
}

#[tokio::test]
async fn an_address_that_is_no_uri_is_unreachable_and_named() {
    let mut client = peer_client("not an address\n", None).await;

    let error = client
        .vote(stale_vote_request(), RPCOption::new(RPC_TTL))
        .await
        .expect_err("bad address");
    assert!(matches!(error, RPCError::Unreachable(_)), "{error:?}");
    assert!(error.to_string().contains("bad peer address"), "{error}");
}

/// A dropped RPC fails when its deadline would have passed, as a lost packet does, not at
/// once (which would make openraft retry in a hot loop). Paused time: no I/O happens.
#[tokio::test(start_paused = true)]
async fn a_dropped_rpc_fails_after_its_deadline_not_at_once() {
    let faults = Arc::new(FaultPlan::new(1));
    faults.isolate(STRANGER);
    let mut client = peer_client("127.0.0.1:1", Some(faults)).await;
    let ttl = Duration::from_millis(700);

    let started = tokio::time::Instant::now();
    let error = client
        .vote(stale_vote_request(), RPCOption::new(ttl))
        .await
        .expect_err("dropped");
    assert_eq!(started.elapsed(), ttl);
    assert!(matches!(error, RPCError::Unreachable(_)), "{error:?}");
    assert!(error.to_string().contains("dropped"), "{error}");
}
