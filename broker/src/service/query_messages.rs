//! `QueryMessages`: find stored messages by message id or key through the store's index
//! (what `mqadmin query-msg` asks). Any node answers from its committed data.

use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::service::BrokerService;
use crate::service::pulled::HostText;
use crate::service::pulled::to_pulled;

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
        let store = self.group.store();
        let mut hosts = HostText::default();
        let messages = store
            .query_by_key(key)?
            .iter()
            .map(|view| {
                to_pulled(
                    view,
                    view.queue_offset(),
                    view.physical_offset(),
                    &mut hosts,
                )
            })
            .collect::<Result<_, _>>()?;
        Ok(pb::QueryMessagesResponse { messages })
    }
}
