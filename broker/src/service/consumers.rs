//! `Heartbeat` and `ListConsumers`: the leader's consumer registry, fed by heartbeats.

use std::time::Instant;

use rocketraft_proto::broker as pb;

use crate::consumer_registry::HEARTBEAT_SUBSCRIPTIONS_MAX;
use crate::consumer_registry::Subscriptions;
use crate::error::BrokerError;
use crate::service::BrokerService;
use crate::topic::validate_group_name;
use crate::topic::validate_topic_name;

/// Characters of a client id at most.
pub const CLIENT_ID_LEN_MAX: usize = 255;

impl BrokerService {
    pub(super) fn handle_heartbeat(
        &self,
        request: pb::HeartbeatRequest,
    ) -> Result<(), BrokerError> {
        self.ensure_leader()?;
        validate_group_name(&request.group).map_err(BrokerError::BadRequest)?;
        if request.client_id.is_empty() || request.client_id.len() > CLIENT_ID_LEN_MAX {
            return Err(BrokerError::BadRequest(format!(
                "a client id has 1 to {CLIENT_ID_LEN_MAX} characters"
            )));
        }
        if request.subscriptions.len() > HEARTBEAT_SUBSCRIPTIONS_MAX {
            return Err(BrokerError::BadRequest(format!(
                "a heartbeat carries at most {HEARTBEAT_SUBSCRIPTIONS_MAX} subscriptions"
            )));
        }
        let mut subscriptions = Subscriptions::new();
        for subscription in request.subscriptions {
            validate_topic_name(&subscription.topic).map_err(BrokerError::TopicIllegal)?;
            subscriptions.insert(subscription.topic, subscription.expression);
        }
        self.consumers.heartbeat(
            &request.group,
            &request.client_id,
            subscriptions,
            Instant::now(),
        );
        Ok(())
    }

    pub(super) fn handle_list_consumers(
        &self,
        group: &str,
    ) -> Result<pb::ListConsumersResponse, BrokerError> {
        self.ensure_leader()?;
        validate_group_name(group).map_err(BrokerError::BadRequest)?;
        let members = self
            .consumers
            .members(group, Instant::now())
            .into_iter()
            .map(|member| pb::ConsumerMember {
                client_id: member.client_id,
                subscriptions: member
                    .subscriptions
                    .into_iter()
                    .map(|(topic, expression)| pb::SubscriptionData { topic, expression })
                    .collect(),
                idle_ms: member.idle.as_millis() as u64,
            })
            .collect();
        Ok(pb::ListConsumersResponse {
            members,
            subscriptions_consistent: self.consumers.subscriptions_consistent(group),
        })
    }
}
