//! The server side of the Raft transport: hands RPCs from the group's other nodes to the local
//! `Raft`, and receives snapshots into a staging file before installing them.
//!
//! This service must only be reachable by the nodes of the group.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use futures::Stream;
use futures::StreamExt;
use openraft::raft::VoteRequest;
use rocketraft_proto::raft as pb;
use rocketraft_proto::raft::raft_server::Raft as RaftRpc;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;
use tonic::Request;
use tonic::Response;
use tonic::Status;
use tonic::Streaming;

use crate::group_state::GroupState;
use crate::raft::codec;
use crate::raft::log::repair::RepairState;
use crate::raft::transport::faults::FaultPlan;
use crate::raft::transport::network::SnapshotHeader;
use crate::raft::types::NodeId;
use crate::raft::types::Raft;
use crate::raft::types::Snapshot;
use crate::raft::types::TypeConfig;
use crate::raft::types::Vote;
use crate::state_machine::snapshot::CommitLogSource;
use crate::state_machine::snapshot::SnapshotData;
use crate::store::scrub::RECORD_OR_FILLER_BYTES_MAX;

pub struct RaftService {
    raft: Raft,
    group: Arc<GroupState>,
    /// Received snapshot bytes are staged here until installed.
    staging_dir: PathBuf,
    staged_count: AtomicU64,
    /// Ends long-lived replication streams when the node stops, so a graceful server
    /// shutdown does not wait on a peer that keeps its stream open.
    shutdown: CancellationToken,
    /// Injected faults: while this node is isolated, it refuses Raft RPCs.
    faults: Option<(NodeId, Arc<FaultPlan>)>,
    /// While its damaged log is repaired, the node refuses votes, and replication until the
    /// leader accepted its shorter log.
    repair: Arc<RepairState>,
}

impl RaftService {
    pub fn new(
        raft: Raft,
        group: Arc<GroupState>,
        staging_dir: PathBuf,
        shutdown: CancellationToken,
        faults: Option<(NodeId, Arc<FaultPlan>)>,
        repair: Arc<RepairState>,
    ) -> RaftService {
        RaftService {
            raft,
            group,
            staging_dir,
            staged_count: AtomicU64::new(0),
            shutdown,
            faults,
            repair,
        }
    }

    fn refuse_vote_if_repairing(&self) -> Result<(), Status> {
        match self.repair.refuses_votes() {
            Some(reason) => Err(Status::unavailable(format!("not voting: {reason}"))),
            None => Ok(()),
        }
    }

    fn refuse_vote_for_if_repairing(&self, rpc: &VoteRequest<TypeConfig>) -> Result<(), Status> {
        match self.repair.refuses_vote_for(rpc.last_log_id.as_ref()) {
            Some(reason) => Err(Status::unavailable(format!("not voting: {reason}"))),
            None => Ok(()),
        }
    }

    fn refuse_replication_if_repairing(&self) -> Result<(), Status> {
        match self.repair.refuses_replication() {
            Some(reason) => Err(Status::unavailable(reason)),
            None => Ok(()),
        }
    }

    fn isolated(&self) -> bool {
        self.faults
            .as_ref()
            .is_some_and(|(node, faults)| faults.is_isolated(*node))
    }

    /// Fails the RPC while fault injection cuts this node off; while it blackholes the node,
    /// holds the RPC unanswered until the heal first (the caller gave up by then).
    async fn refuse_if_isolated(&self) -> Result<(), Status> {
        if let Some((node, faults)) = &self.faults {
            faults.held_while_blackholed(*node).await;
        }
        if self.isolated() {
            return Err(Status::unavailable(
                "fault injection: this node is partitioned from its group",
            ));
        }
        Ok(())
    }

    /// The results of a replication stream whose requests arrive as `payloads` (each the
    /// bincode of an `AppendEntriesRequest`, which its entries' records become slices of).
    /// An undecodable or failed item ends the stream, so requests and results stay paired;
    /// so does an injected partition (a blackhole holds the stream until the heal first).
    pub(crate) async fn append_stream(
        &self,
        payloads: impl Stream<Item = Result<bytes::Bytes, Status>> + Send + 'static,
    ) -> Result<ResultStream, Status> {
        self.refuse_if_isolated().await?;
        self.refuse_replication_if_repairing()?;
        let faults = self.faults.clone();
        let requests = payloads.scan((), move |_, item| {
            let faults = faults.clone();
            async move {
                if let Some((node, faults)) = &faults {
                    faults.held_while_blackholed(*node).await;
                    if faults.is_isolated(*node) {
                        return None;
                    }
                }
                item.inspect_err(|status| tracing::debug!(%status, "replication stream closed"))
                    .ok()
                    .and_then(|received| {
                        codec::decode_shared("append entries", &received)
                            .inspect_err(
                                |error| tracing::warn!(%error, "undecodable append entries"),
                            )
                            .ok()
                    })
            }
        });
        let requests = Box::pin(requests);
        let results = self
            .raft
            .stream_append(requests)
            .map(|result| match result {
                Ok(result) => encode("stream append result", &result),
                Err(fatal) => Err(internal(fatal)),
            });
        let results = results.take_until(self.shutdown.clone().cancelled_owned());
        Ok(Box::pin(results))
    }

    async fn receive_snapshot(
        &self,
        mut chunks: Streaming<pb::SnapshotChunk>,
    ) -> Result<pb::RaftPayload, Status> {
        use pb::snapshot_chunk::Chunk;
        let header = match next_chunk(&mut chunks).await? {
            Chunk::Header(header) => {
                codec::decode::<SnapshotHeader>("snapshot header", &header).map_err(invalid)?
            }
            _ => {
                return Err(Status::invalid_argument(
                    "a snapshot must start with its header",
                ));
            }
        };
        tokio::fs::create_dir_all(&self.staging_dir)
            .await
            .map_err(internal)?;
        let path = self.staging_dir.join(format!(
            "snapshot-{}.staged",
            self.staged_count.fetch_add(1, Ordering::Relaxed)
        ));
        let mut file = tokio::fs::File::create(&path).await.map_err(internal)?;
        let vote = loop {
            match next_chunk(&mut chunks).await {
                Ok(Chunk::CommitLogBytes(bytes)) => {
                    file.write_all(&bytes).await.map_err(internal)?
                }
                Ok(Chunk::Vote(vote)) => {
                    break codec::decode::<Vote>("vote", &vote).map_err(invalid)?;
                }
                Ok(Chunk::Header(_)) => {
                    return Err(Status::invalid_argument("a second snapshot header"));
                }
                Err(status) => {
                    drop(file);
                    let _ = tokio::fs::remove_file(&path).await;
                    return Err(status);
                }
            }
        };
        file.sync_all().await.map_err(internal)?;
        let snapshot = Snapshot {
            meta: header.state.meta.clone(),
            snapshot: SnapshotData {
                state: header.state,
                commit_log: CommitLogSource::Staged {
                    path,
                    start_offset: header.start_offset,
                },
            },
        };
        let response = self
            .raft
            .install_full_snapshot(vote, snapshot)
            .await
            .map_err(internal)?;
        encode("snapshot response", &response)
    }
}

async fn next_chunk(
    chunks: &mut Streaming<pb::SnapshotChunk>,
) -> Result<pb::snapshot_chunk::Chunk, Status> {
    chunks
        .message()
        .await?
        .and_then(|chunk| chunk.chunk)
        .ok_or_else(|| Status::invalid_argument("snapshot stream ended early"))
}

fn invalid(error: impl std::fmt::Display) -> Status {
    Status::invalid_argument(error.to_string())
}

pub(crate) fn internal(error: impl std::fmt::Display) -> Status {
    Status::internal(error.to_string())
}

fn encode<T: serde::Serialize>(what: &'static str, value: &T) -> Result<pb::RaftPayload, Status> {
    Ok(pb::RaftPayload {
        data: codec::encode(what, value).map_err(internal)?.into(),
    })
}

fn decode<T: serde::de::DeserializeOwned>(
    what: &'static str,
    request: Request<pb::RaftPayload>,
) -> Result<T, Status> {
    codec::decode(what, &request.into_inner().data).map_err(invalid)
}

pub(crate) type ResultStream = Pin<Box<dyn Stream<Item = Result<pb::RaftPayload, Status>> + Send>>;

#[tonic::async_trait]
impl RaftRpc for RaftService {
    async fn append_entries(
        &self,
        request: Request<pb::RaftPayload>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        self.refuse_if_isolated().await?;
        self.refuse_replication_if_repairing()?;
        let rpc = decode("append entries", request)?;
        let response = self.raft.append_entries(rpc).await.map_err(internal)?;
        Ok(Response::new(encode("append entries response", &response)?))
    }

    type StreamAppendStream = ResultStream;

    /// Never reached: the node's server routes `StreamAppend` to `append_route`, which reads
    /// the requests without tonic's decoder. Refusing here makes a server that routed it to
    /// the generated service fail loudly instead of replicating with an extra copy.
    async fn stream_append(
        &self,
        _request: Request<Streaming<pb::RaftPayload>>,
    ) -> Result<Response<Self::StreamAppendStream>, Status> {
        Err(Status::unimplemented(
            "StreamAppend is served by the node's append route",
        ))
    }

    async fn vote(
        &self,
        request: Request<pb::RaftPayload>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        self.refuse_if_isolated().await?;
        let rpc = decode("vote", request)?;
        self.refuse_vote_for_if_repairing(&rpc)?;
        let response = self.raft.vote(rpc).await.map_err(internal)?;
        Ok(Response::new(encode("vote response", &response)?))
    }

    async fn pre_vote(
        &self,
        request: Request<pb::RaftPayload>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        self.refuse_if_isolated().await?;
        let rpc = decode("pre-vote", request)?;
        self.refuse_vote_for_if_repairing(&rpc)?;
        let response = self.raft.pre_vote(rpc).await.map_err(internal)?;
        Ok(Response::new(encode("pre-vote response", &response)?))
    }

    async fn transfer_leader(
        &self,
        request: Request<pb::RaftPayload>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        self.refuse_if_isolated().await?;
        self.refuse_vote_if_repairing()?;
        let rpc = decode("transfer leader", request)?;
        let response = self
            .raft
            .handle_transfer_leader(rpc)
            .await
            .map_err(internal)?;
        Ok(Response::new(encode(
            "transfer leader response",
            &response,
        )?))
    }

    async fn commit_log_end(
        &self,
        _request: Request<pb::CommitLogEndRequest>,
    ) -> Result<Response<pb::CommitLogEndResponse>, Status> {
        Ok(Response::new(pb::CommitLogEndResponse {
            end_offset: self.group.store().commit_log_max_offset(),
        }))
    }

    async fn read_commit_log(
        &self,
        request: Request<pb::ReadCommitLogRequest>,
    ) -> Result<Response<pb::ReadCommitLogResponse>, Status> {
        self.refuse_if_isolated().await?;
        let request = request.into_inner();
        let max_bytes = (request.max_bytes as usize).min(RECORD_OR_FILLER_BYTES_MAX);
        let store = self.group.store();
        let data = store
            .read_commit_log(request.offset, max_bytes)
            .map_err(|error| Status::out_of_range(rocketraft_proto::error_chain(&error)))?;
        Ok(Response::new(pb::ReadCommitLogResponse {
            data: data.into(),
            end_offset: store.commit_log_max_offset(),
        }))
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<pb::SnapshotChunk>>,
    ) -> Result<Response<pb::RaftPayload>, Status> {
        self.refuse_if_isolated().await?;
        self.refuse_replication_if_repairing()?;
        Ok(Response::new(
            self.receive_snapshot(request.into_inner()).await?,
        ))
    }
}
