//! `SearchOffset`: where a queue's messages stored at or after a time begin (what a consumer
//! group that starts "from timestamp" reads first). Any node answers from committed data.

use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::service::BrokerService;
use crate::topic::validate_topic_name;

impl BrokerService {
    pub(super) fn handle_search_offset(
        &self,
        request: pb::SearchOffsetRequest,
    ) -> Result<i64, BrokerError> {
        validate_topic_name(&request.topic).map_err(BrokerError::TopicIllegal)?;
        self.group
            .store()
            .search_offset_by_time(&request.topic, request.queue_id, request.timestamp_ms)
            .map_err(BrokerError::Store)
    }
}
