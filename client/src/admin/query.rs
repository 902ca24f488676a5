//! `mqadmin query-msg`: find messages by message id or key in every broker group.

use rocketraft_proto::broker as broker_pb;

use crate::admin::Admin;
use crate::admin::AdminError;
use crate::admin::ConsumedMessage;
use crate::admin::DeliveryResult;
use crate::message::MessageExt;

impl Admin {
    /// Messages whose id (`UNIQ_KEY`) or one of whose keys is `key`, from every broker
    /// group's leader (newest first within a group).
    pub async fn query_messages(&self, key: &str) -> Result<Vec<ConsumedMessage>, AdminError> {
        let mut found = Vec::new();
        for route in self.cluster_info().await?.groups {
            let request = broker_pb::QueryMessagesRequest {
                key: key.to_owned(),
                ..broker_pb::QueryMessagesRequest::default()
            };
            let response = self
                .group_leader(&route.group)
                .await?
                .query_messages(request)
                .await
                .map_err(|status| AdminError::Refused {
                    group: route.group.clone(),
                    status,
                })?;
            found.extend(response.into_inner().messages.into_iter().map(|message| {
                ConsumedMessage::new(
                    MessageExt::from_pulled(message, &route.group),
                    DeliveryResult::Stored,
                )
            }));
        }
        Ok(found)
    }
}
