//! `QueryMessages`: find stored messages by message id or key through the store's index
//! (what `mqadmin query-msg` asks). Any node answers from its committed data.

use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::service::BrokerService;
use crate::service::pull::to_pulled;

/// Characters of a query key at most.
pub const QUERY_KEY_LEN_MAX: usize = 1024;

impl BrokerService {
    pub(super) fn handle_query_messages(
        &self,
        key: &str,
    ) -> Result<pb::QueryMessagesResponse, BrokerError> {
        if key.trim().is_empty() || key.len() > QUERY_KEY_LEN_MAX {
            return Err(BrokerError::BadRequest(format!(
                "a query key has 1 to {QUERY_KEY_LEN_MAX} characters"
            )));
        }
        let messages = self
            .group
            .store()
            .query_by_key(key)
            .map_err(BrokerError::Store)?
            .into_iter()
            .map(|record| {
                let (queue_offset, commit_log_offset) =
                    (record.queue_offset, record.physical_offset);
                to_pulled(record, queue_offset, commit_log_offset)
            })
            .collect();
        Ok(pb::QueryMessagesResponse { messages })
    }
}
