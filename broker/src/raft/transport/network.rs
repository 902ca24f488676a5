//! The client side of the Raft transport: one cached tonic channel per peer, deadlines from
//! openraft's `RPCOption`, pipelined replication over one bidi stream, and snapshots that
//! ship only the CommitLog bytes the peer lacks.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use futures::StreamExt;
use openraft::RaftNetworkFactory;
use openraft::base::BoxFuture;
use openraft::base::BoxStream;
use openraft::errors::NetworkError;
use openraft::errors::RPCError;
use openraft::errors::ReplicationClosed;
use openraft::errors::StreamingError;
use openraft::errors::Unreachable;
use openraft::network::Backoff;
use openraft::network::NetBackoff;
use openraft::network::NetSnapshot;
use openraft::network::NetStreamAppend;
use openraft::network::NetTransferLeader;
use openraft::network::NetVote;
use openraft::network::RPCOption;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::SnapshotResponse;
use openraft::raft::StreamAppendResult;
use openraft::raft::TransferLeaderRequest;
use openraft::raft::TransferLeaderResponse;
use openraft::raft::VoteRequest;
use openraft::raft::VoteResponse;
use rocketraft_proto::raft as pb;
use rocketraft_proto::raft::raft_client::RaftClient;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tonic::codec::Streaming;
use tonic::codegen::Service;
use tonic::codegen::http;

use crate::raft::codec;
use crate::raft::log::layout_check::Stamped;
use crate::raft::transport::append_codec::AppendBody;
use crate::raft::transport::append_codec::PayloadDecoder;
use crate::raft::transport::append_codec::STREAM_APPEND_PATH;
use crate::raft::transport::faults::FaultPlan;
use crate::raft::transport::faults::Verdict;
use crate::raft::transport::node_addr::NodeAddr;
use crate::raft::transport::stalled_stream::until_stalled;
use crate::raft::types::NodeId;
use crate::raft::types::Snapshot;
use crate::raft::types::TypeConfig;
use crate::raft::types::Vote;
use crate::state_machine::snapshot::CommitLogSource;
use crate::state_machine::snapshot::SNAPSHOT_CHUNK_BYTES;
use crate::state_machine::snapshot::SnapshotState;
use crate::tls::PeerConnector;

/// gRPC messages between nodes may carry a batch of messages near the 4 MiB body maximum
/// plus framing; tonic's 4 MiB default would reject them.
pub const RAFT_GRPC_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// How long an unreachable peer is left alone before the next attempt.
pub(crate) const UNREACHABLE_BACKOFF: Duration = Duration::from_millis(200);

/// Creates per-peer clients; channels are cached by address and reconnect by themselves.
#[derive(Clone)]
pub struct NetworkFactory {
    node_id: NodeId,
    /// This node's CommitLog segment size, stamped on every request (`layout_check`).
    commit_log_segment_bytes: u64,
    channels: Arc<DashMap<String, Stamped>>,
    faults: Option<Arc<FaultPlan>>,
    connector: PeerConnector,
    /// Cancelled when the node stops: from then on no RPC leaves it.
    stopped: CancellationToken,
}

impl NetworkFactory {
    /// The clients of node `node_id`, which sends nothing once `stopped` is cancelled:
    /// openraft does not join its replication tasks at shutdown, and one still running
    /// would otherwise replicate for a node that has stopped.
    pub fn new(
        node_id: NodeId,
        commit_log_segment_bytes: u64,
        faults: Option<Arc<FaultPlan>>,
        connector: PeerConnector,
        stopped: CancellationToken,
    ) -> NetworkFactory {
        NetworkFactory {
            node_id,
            commit_log_segment_bytes,
            channels: Arc::new(DashMap::new()),
            faults,
            connector,
            stopped,
        }
    }

    fn channel(&self, addr: &str) -> Result<Stamped, String> {
        if let Some(channel) = self.channels.get(addr) {
            return Ok(channel.clone());
        }
        let channel = Stamped::new(
            self.connector.endpoint(addr)?.connect_lazy(),
            self.commit_log_segment_bytes,
        );
        self.channels.insert(addr.to_owned(), channel.clone());
        Ok(channel)
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddr) -> PeerClient {
        PeerClient {
            from: self.node_id,
            target,
            channel: self.channel(&node.raft),
            faults: self.faults.clone(),
            stopped: self.stopped.clone(),
            next_stream_at: None,
        }
    }
}

/// The connection of this node to one peer.
pub struct PeerClient {
    from: NodeId,
    target: NodeId,
    /// `Err` if the peer's address cannot be used at all.
    channel: Result<Stamped, String>,
    faults: Option<Arc<FaultPlan>>,
    stopped: CancellationToken,
    /// Set when a replication stream could not be opened (the peer is unreachable): the next
    /// one waits until then. openraft's backoff paces only the requests of an open stream,
    /// so without this a leader retried a refused connection (a killed follower) in a loop
    /// and spent more than a core on it.
    next_stream_at: Option<tokio::time::Instant>,
}

impl PeerClient {
    fn channel(&self) -> Result<Stamped, RPCError<TypeConfig>> {
        self.channel
            .clone()
            .map_err(|reason| RPCError::Unreachable(Unreachable::from_string(reason)))
    }

    fn client(&self) -> Result<RaftClient<Stamped>, RPCError<TypeConfig>> {
        Ok(RaftClient::new(self.channel()?)
            .max_decoding_message_size(RAFT_GRPC_MESSAGE_BYTES_MAX)
            .max_encoding_message_size(RAFT_GRPC_MESSAGE_BYTES_MAX))
    }

    /// Lets one RPC leave, or not: `Err` once this node has stopped, or if injected faults
    /// drop it. A dropped RPC fails after `ttl`, as a lost packet would surface as a
    /// timeout; failing at once would make openraft retry in a hot loop no real network
    /// produces.
    async fn pass_faults(&self, ttl: Duration) -> Result<(), Unreachable<TypeConfig>> {
        if self.stopped.is_cancelled() {
            return Err(node_stopped());
        }
        let verdict = self
            .faults
            .as_ref()
            .map_or(Verdict::Deliver, |f| f.verdict(self.from, self.target));
        match verdict {
            Verdict::Deliver => Ok(()),
            Verdict::Delay(delay) => {
                tokio::time::sleep(delay).await;
                Ok(())
            }
            Verdict::Drop => {
                tokio::time::sleep(ttl).await;
                Err(Unreachable::from_string(format!(
                    "fault injection dropped rpc {} -> {}",
                    self.from, self.target
                )))
            }
        }
    }

    async fn unary<Req, Resp, Fut>(
        &self,
        request: &Req,
        option: &RPCOption,
        call: impl FnOnce(RaftClient<Stamped>, tonic::Request<pb::RaftPayload>) -> Fut,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        Fut: Future<Output = Result<tonic::Response<pb::RaftPayload>, tonic::Status>>,
    {
        self.pass_faults(option.hard_ttl()).await?;
        let data = codec::encode("raft request", request)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let mut grpc_request = tonic::Request::new(pb::RaftPayload { data: data.into() });
        grpc_request.set_timeout(option.hard_ttl());
        let response = tokio::time::timeout(option.hard_ttl(), call(self.client()?, grpc_request))
            .await
            .map_err(|_| {
                RPCError::Network(NetworkError::from_string(format!(
                    "rpc to {} timed out",
                    self.target
                )))
            })?
            .map_err(status_to_rpc_error)?;
        codec::decode("raft response", &response.into_inner().data)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))
    }

    async fn send_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        self.pass_faults(option.hard_ttl()).await?;
        let mut client = self.client()?;
        let end = client
            .commit_log_end(pb::CommitLogEndRequest {})
            .await
            .map_err(|status| StreamingError::from(status_to_rpc_error_network(status)))?
            .into_inner()
            .end_offset;
        let state = snapshot.snapshot.state;
        let CommitLogSource::Store(group) = snapshot.snapshot.commit_log else {
            return Err(StreamingError::Network(NetworkError::from_string(
                "only a live store can be sent",
            )));
        };
        // From where the receiver's CommitLog ends, or, if retention deleted that part here,
        // from the first offset this node still holds (the receiver starts over there).
        let start_offset = end
            .min(state.commit_log_end)
            .max(group.store().commit_log_min_offset());
        let header = codec::encode(
            "snapshot header",
            &SnapshotHeader {
                state: state.clone(),
                start_offset,
            },
        )
        .map_err(|e| NetworkError::new(&e))?;
        let vote = codec::encode("vote", &vote).map_err(|e| NetworkError::new(&e))?;
        let commit_log_end = state.commit_log_end;
        // The body outlives this call (hyper streams it from a task of its own) and openraft
        // does not join replication: so the body holds the store weakly and reads nothing
        // once this node has stopped, and a restarted node owns its data dir alone.
        let group = Arc::downgrade(&group);
        let stopped = self.stopped.clone();
        let chunks = futures::stream::iter(std::iter::once(Ok(pb::snapshot_chunk::Chunk::Header(
            header.into(),
        ))))
        .chain(futures::stream::unfold(start_offset, move |offset| {
            let group = match group.upgrade() {
                Some(group) if !stopped.is_cancelled() => Ok(group),
                _ => Err("this node has stopped".to_owned()),
            };
            async move {
                if offset >= commit_log_end {
                    return None;
                }
                let group = match group {
                    Ok(group) => group,
                    Err(reason) => return Some((Err(reason), commit_log_end)),
                };
                let want = (commit_log_end - offset).min(SNAPSHOT_CHUNK_BYTES as i64) as usize;
                match group.store().read_commit_log(offset, want) {
                    Ok(bytes) if !bytes.is_empty() => {
                        let next = offset + bytes.len() as i64;
                        Some((
                            Ok(pb::snapshot_chunk::Chunk::CommitLogBytes(bytes.into())),
                            next,
                        ))
                    }
                    Ok(_) => Some((
                        Err(format!("CommitLog has no bytes at {offset}")),
                        commit_log_end,
                    )),
                    Err(error) => Some((Err(error.to_string()), commit_log_end)),
                }
            }
        }))
        .chain(futures::stream::iter(std::iter::once(Ok(
            pb::snapshot_chunk::Chunk::Vote(vote.into()),
        ))))
        .take_while(|chunk| {
            if let Err(reason) = chunk {
                tracing::error!(%reason, "aborting snapshot transfer");
            }
            futures::future::ready(chunk.is_ok())
        })
        .filter_map(|chunk| {
            futures::future::ready(chunk.ok().map(|c| pb::SnapshotChunk { chunk: Some(c) }))
        });
        let mut request = tonic::Request::new(chunks);
        request.set_timeout(option.hard_ttl());
        let response = client
            .install_snapshot(request)
            .await
            .map_err(|s| StreamingError::from(status_to_rpc_error_network(s)))?;
        codec::decode("snapshot response", &response.into_inner().data)
            .map_err(|e| StreamingError::Network(NetworkError::new(&e)))
    }
}

/// The first chunk of a snapshot transfer.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct SnapshotHeader {
    pub state: SnapshotState,
    /// CommitLog offset of the first byte that follows.
    pub start_offset: i64,
}

/// Unavailable, or refused as configured (`layout_check`): openraft leaves the peer alone a
/// while before trying again.
fn status_to_rpc_error(status: tonic::Status) -> RPCError<TypeConfig> {
    match status.code() {
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::FailedPrecondition => {
            RPCError::Unreachable(Unreachable::new(&status))
        }
        _ => RPCError::Network(NetworkError::new(&status)),
    }
}

fn status_to_rpc_error_network(status: tonic::Status) -> NetworkError<TypeConfig> {
    NetworkError::new(&status)
}

impl NetVote<TypeConfig> for PeerClient {
    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.unary(&rpc, &option, |mut client, request| async move {
            client.vote(request).await
        })
        .await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.unary(&rpc, &option, |mut client, request| async move {
            client.pre_vote(request).await
        })
        .await
    }
}

impl NetTransferLeader<TypeConfig> for PeerClient {
    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.unary(&rpc, &option, |mut client, request| async move {
            client.transfer_leader(request).await
        })
        .await
    }
}

impl NetBackoff<TypeConfig> for PeerClient {
    fn backoff(&self) -> Option<Backoff> {
        Some(Backoff::new(std::iter::repeat(UNREACHABLE_BACKOFF)))
    }
}

impl NetSnapshot<TypeConfig> for PeerClient {
    type SnapshotData = crate::state_machine::snapshot::SnapshotData;

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            result = self.send_snapshot(vote, snapshot, option) => result,
        }
    }
}

impl NetStreamAppend<TypeConfig> for PeerClient {
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<
        's,
        Result<
            BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>,
            RPCError<TypeConfig>,
        >,
    >
    where
        S: futures::Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
    {
        Box::pin(async move {
            if let Some(at) = self.next_stream_at.take() {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = self.stopped.cancelled() => return Err(node_stopped().into()),
                }
            }
            let opened = self.open_append_stream(input, option).await;
            if let Err(RPCError::Unreachable(_)) = &opened {
                self.next_stream_at = Some(tokio::time::Instant::now() + UNREACHABLE_BACKOFF);
            }
            opened.map(|results| results as BoxStream<'s, _>)
        })
    }
}

impl PeerClient {
    /// Opens a replication stream carrying `input`'s requests; its answers, in order.
    async fn open_append_stream<S>(
        &mut self,
        input: S,
        option: RPCOption,
    ) -> Result<AppendResults, RPCError<TypeConfig>>
    where
        S: futures::Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
    {
        self.pass_faults(option.hard_ttl()).await?;
        let mut channel = self.channel()?;
        let (from, target, faults) = (self.from, self.target, self.faults.clone());
        let stopped = self.stopped.clone();
        // A dropped request ends the stream: openraft sees it close and retries. So does the
        // node's stop.
        let requests = until_stalled(input)
            .then(move |request| {
                let (faults, stopped) = (faults.clone(), stopped.clone());
                async move {
                    if stopped.is_cancelled() {
                        return None;
                    }
                    let verdict = faults
                        .as_ref()
                        .map_or(Verdict::Deliver, |f| f.verdict(from, target));
                    match verdict {
                        Verdict::Drop => return None,
                        Verdict::Delay(delay) => tokio::time::sleep(delay).await,
                        Verdict::Deliver => {}
                    }
                    Some(request)
                }
            })
            .take_while(|request| futures::future::ready(request.is_some()))
            .filter_map(futures::future::ready);
        let unreachable = |error: tonic::transport::Error| {
            RPCError::Unreachable(Unreachable::from_string(format!(
                "raft channel to {target}: {error}"
            )))
        };
        futures::future::poll_fn(|cx| channel.poll_ready(cx))
            .await
            .map_err(unreachable)?;
        let request = streaming_request(AppendBody::new(requests, RAFT_GRPC_MESSAGE_BYTES_MAX))
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let response = channel.call(request).await.map_err(unreachable)?;
        let results = results_of(response).map_err(status_to_rpc_error)?;
        let results = results.map(|item| {
            let payload = item.map_err(status_to_rpc_error)?;
            codec::decode::<StreamAppendResult<TypeConfig>>("stream append result", &payload.data)
                .map_err(|e| RPCError::Network(NetworkError::new(&e)))
        });
        Ok(Box::pin(results))
    }
}

/// Why a stopped node sends nothing.
fn node_stopped() -> Unreachable<TypeConfig> {
    Unreachable::from_string("this node has stopped")
}

/// The answers of one replication stream.
type AppendResults =
    BoxStream<'static, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>;

/// The HTTP/2 request of a `Raft.StreamAppend` call, as tonic's client would make it.
fn streaming_request(body: AppendBody) -> http::Result<http::Request<tonic::body::Body>> {
    http::Request::builder()
        .method(http::Method::POST)
        .uri(STREAM_APPEND_PATH)
        .version(http::Version::HTTP_2)
        .header(http::header::TE, "trailers")
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .body(tonic::body::Body::new(body))
}

/// The stream of results of a `Raft.StreamAppend` call, or the status it was refused with.
fn results_of(
    response: http::Response<tonic::body::Body>,
) -> Result<Streaming<pb::RaftPayload>, tonic::Status> {
    // A refusal carries its status in the headers ("trailers-only").
    let status = tonic::Status::from_header_map(response.headers());
    if let Some(status) = status.as_ref().filter(|s| s.code() != tonic::Code::Ok) {
        return Err(status.clone());
    }
    let status_code = response.status();
    let body = response.into_body();
    Ok(match status {
        Some(_) => Streaming::new_empty(PayloadDecoder::default(), body),
        None => Streaming::new_response(
            PayloadDecoder::default(),
            body,
            status_code,
            None,
            Some(RAFT_GRPC_MESSAGE_BYTES_MAX),
        ),
    })
}
