//! `ReadConsumeQueue`: the raw units of one queue, from any node (reads see applied entries
//! only, so a follower may lag but never shows an uncommitted message).

use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::service::BrokerService;
use crate::topic::validate_topic_name;

/// Units returned by one `ReadConsumeQueue` call at most.
pub const READ_CONSUME_QUEUE_UNITS_MAX: u32 = 4096;

impl BrokerService {
    pub(super) fn handle_read_consume_queue(
        &self,
        request: pb::ReadConsumeQueueRequest,
    ) -> Result<pb::ReadConsumeQueueResponse, BrokerError> {
        validate_topic_name(&request.topic).map_err(BrokerError::TopicIllegal)?;
        if request.max_units == 0 || request.max_units > READ_CONSUME_QUEUE_UNITS_MAX {
            return Err(BrokerError::BadRequest(format!(
                "max_units must be 1 to {READ_CONSUME_QUEUE_UNITS_MAX}, got {}",
                request.max_units
            )));
        }
        let store = self.group.store();
        let (min_queue_offset, max_queue_offset) =
            store.consume_queue_offsets(&request.topic, request.queue_id);
        let units = store
            .read_consume_queue(
                &request.topic,
                request.queue_id,
                request.from_queue_offset,
                request.max_units as usize,
            )
            .into_iter()
            .map(|unit| pb::ConsumeQueueUnit {
                commit_log_offset: unit.commit_log_offset,
                size: unit.size,
                tags_code: unit.tags_code,
            })
            .collect();
        Ok(pb::ReadConsumeQueueResponse {
            units,
            min_queue_offset,
            max_queue_offset,
        })
    }
}
