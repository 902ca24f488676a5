//! Consumer offsets: commits go through Raft as one `CommitOffsets` entry per request (a
//! client batches its queues), queries are linearizable reads on the leader, so neither a
//! failover nor a lagging follower can rewind a group.

use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::metadata::QueueOffset;
use crate::raft::control::propose::linearizable_read;
use crate::raft::control::propose::propose;
use crate::service::BrokerService;
use crate::state_machine::command::Command;
use crate::topic::validate_group_name;
use crate::topic::validate_topic_name;

/// Queue offsets one commit carries at most.
pub const COMMIT_OFFSETS_MAX: usize = 4096;

impl BrokerService {
    pub(super) async fn handle_commit_offsets(
        &self,
        request: pb::CommitOffsetsRequest,
    ) -> Result<(), BrokerError> {
        validate_group_name(&request.group).map_err(BrokerError::BadRequest)?;
        if request.offsets.is_empty() || request.offsets.len() > COMMIT_OFFSETS_MAX {
            return Err(BrokerError::BadRequest(format!(
                "a commit carries 1 to {COMMIT_OFFSETS_MAX} offsets, got {}",
                request.offsets.len()
            )));
        }
        let mut offsets = Vec::with_capacity(request.offsets.len());
        for entry in request.offsets {
            validate_topic_name(&entry.topic).map_err(BrokerError::TopicIllegal)?;
            if entry.queue_id < 0 || entry.offset < 0 {
                return Err(BrokerError::BadRequest(format!(
                    "queue {} offset {} of {}: neither may be negative",
                    entry.queue_id, entry.offset, entry.topic
                )));
            }
            offsets.push(QueueOffset {
                topic: entry.topic,
                queue_id: entry.queue_id,
                offset: entry.offset,
            });
        }
        self.ensure_leader()?;
        let applied = propose(
            &self.raft,
            Command::CommitOffsets {
                group: request.group,
                offsets,
            },
        )
        .await?;
        applied.await?;
        Ok(())
    }

    pub(super) async fn handle_query_offset(
        &self,
        request: pb::QueryOffsetRequest,
    ) -> Result<Option<i64>, BrokerError> {
        validate_group_name(&request.group).map_err(BrokerError::BadRequest)?;
        validate_topic_name(&request.topic).map_err(BrokerError::TopicIllegal)?;
        linearizable_read(&self.raft).await?;
        Ok(self
            .group
            .metadata()
            .consumer_offset(&request.group, &request.topic, request.queue_id))
    }
}
