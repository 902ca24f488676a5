//! `Heartbeat`, `UnregisterConsumer`, `ListConsumers` and `WatchConsumers`: the leader's
//! consumer registry, fed by heartbeats, and its membership events.
//!
//! Invariant: only the leader answers (a follower says `NOT_LEADER`). The registry is not
//! replicated: after a failover the new leader knows a consumer from its next heartbeat,
//! which the client sends at once when its calls hit the new leader.

use std::pin::Pin;

use futures::Stream;
use rocketraft_domain::sql_filter::EXPRESSION_TYPE_SQL92;
use rocketraft_domain::sql_filter::EXPRESSION_TYPE_TAG;
use rocketraft_domain::sql_filter::SqlFilter;
use rocketraft_proto::broker as pb;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::consumer_registry::Expression;
use crate::consumer_registry::HEARTBEAT_SUBSCRIPTIONS_MAX;
use crate::consumer_registry::MembershipEvent;
use crate::consumer_registry::Subscriptions;
use crate::error::BrokerError;
use crate::service::BrokerService;
use crate::service::system_topics::retry_topic;
use crate::topic::validate_group_name;
use crate::topic::validate_topic_name;

/// A subscription's expression, checked: a SQL92 filter must parse, so a consumer learns of
/// a bad one when it starts, not from its pulls.
fn validate_expression(subscription: &pb::SubscriptionData) -> Result<Expression, BrokerError> {
    let kind = match subscription.expression_type.as_str() {
        "" | EXPRESSION_TYPE_TAG => EXPRESSION_TYPE_TAG,
        EXPRESSION_TYPE_SQL92 => {
            SqlFilter::parse(&subscription.expression).map_err(|error| {
                BrokerError::BadRequest(format!(
                    "subscription to {}: {:?}: {error}",
                    subscription.topic, subscription.expression
                ))
            })?;
            EXPRESSION_TYPE_SQL92
        }
        other => {
            return Err(BrokerError::BadRequest(format!(
                "subscription to {}: expression type {other:?} is not \
                 {EXPRESSION_TYPE_TAG} or {EXPRESSION_TYPE_SQL92}",
                subscription.topic
            )));
        }
    };
    Ok(Expression {
        kind: kind.to_owned(),
        text: subscription.expression.clone(),
    })
}

/// Characters of a client id at most.
pub const CLIENT_ID_LEN_MAX: usize = 255;

impl BrokerService {
    /// Records a member's heartbeat; a group seen for the first time gets its config (with
    /// defaults) if auto-creation is on, as RocketMQ does, and a member that subscribes to
    /// its group's `%RETRY%<group>` gets that topic, so the nameserver routes it.
    pub(super) async fn handle_heartbeat(
        &self,
        request: pb::HeartbeatRequest,
        peer: Option<std::net::SocketAddr>,
    ) -> Result<(), BrokerError> {
        self.ensure_leader()?;
        validate_group_name(&request.group).map_err(BrokerError::BadRequest)?;
        validate_client_id(&request.client_id)?;
        let mut client = request.client.unwrap_or_default();
        validate_client_info(&client)?;
        if client.addr.is_empty() {
            client.addr = peer.map(|addr| addr.to_string()).unwrap_or_default();
        }
        if request.subscriptions.len() > HEARTBEAT_SUBSCRIPTIONS_MAX {
            return Err(BrokerError::BadRequest(format!(
                "a heartbeat carries at most {HEARTBEAT_SUBSCRIPTIONS_MAX} subscriptions"
            )));
        }
        let mut subscriptions = Subscriptions::new();
        for subscription in request.subscriptions {
            validate_topic_name(&subscription.topic).map_err(BrokerError::TopicIllegal)?;
            let expression = validate_expression(&subscription)?;
            subscriptions.insert(subscription.topic, expression);
        }
        let known = self.group.metadata().groups.contains_key(&request.group);
        if !known && self.auto_create_group {
            self.group_config(&request.group).await?;
        }
        let retry = retry_topic(&request.group);
        if subscriptions.contains_key(&retry) && !self.group.metadata().topics.contains_key(&retry)
        {
            // A 4.x consumer finds its retry topic through the nameserver, as any topic.
            let config = self.group_config_or_default(&request.group);
            self.system_topic(&retry, config.retry_queue_count).await?;
        }
        self.consumers
            .heartbeat(
                &request.group,
                &request.client_id,
                subscriptions,
                client,
                Instant::now(),
            )
            .map_err(|full| BrokerError::LimitExceeded(full.to_string()))
    }

    pub(super) fn handle_unregister_consumer(
        &self,
        request: pb::UnregisterConsumerRequest,
    ) -> Result<(), BrokerError> {
        self.ensure_leader()?;
        validate_group_name(&request.group).map_err(BrokerError::BadRequest)?;
        validate_client_id(&request.client_id)?;
        self.consumers
            .unregister(&request.group, &request.client_id);
        Ok(())
    }

    /// Membership changes of one group, until this node stops leading. A watcher that fell
    /// behind is told the group changed (it rebalances, which is always safe).
    pub(super) fn handle_watch_consumers(
        &self,
        group: String,
    ) -> Result<MembershipStream, BrokerError> {
        validate_group_name(&group).map_err(BrokerError::BadRequest)?;
        // Subscribe before checking the role, so a leadership loss in between is seen.
        let events = self.consumers.subscribe();
        self.ensure_leader()?;
        let raft = self.raft.clone();
        let stream = futures::stream::unfold(Some(events), move |events| {
            let group = group.clone();
            let raft = raft.clone();
            async move {
                let mut events = events?;
                loop {
                    let changed = match events.recv().await {
                        Ok(MembershipEvent::GroupChanged(changed)) => changed == group,
                        Err(RecvError::Lagged(_)) => true,
                        // The registry reports a lost leadership once the role watch saw
                        // it; the Raft metrics `ensure_leader` reads may lag behind, so the
                        // answer is NOT_LEADER either way (naming the new leader if known).
                        Ok(MembershipEvent::LeadershipLost) => {
                            let not_leader = crate::raft::control::propose::ensure_leader(&raft)
                                .err()
                                .map_or(
                                    BrokerError::NotLeader { leader_addr: None },
                                    BrokerError::from,
                                );
                            return Some((Err(not_leader.into()), None));
                        }
                        Err(RecvError::Closed) => {
                            let reset =
                                BrokerError::Unavailable("the consumer registry was reset".into());
                            return Some((Err(reset.into()), None));
                        }
                    };
                    if changed {
                        let event = pb::ConsumerGroupChanged {
                            group: group.clone(),
                        };
                        return Some((Ok(event), Some(events)));
                    }
                }
            }
        });
        Ok(Box::pin(stream))
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
                    .map(|(topic, expression)| pb::SubscriptionData {
                        topic,
                        expression: expression.text,
                        expression_type: expression.kind,
                    })
                    .collect(),
                idle_ms: member.idle.as_millis() as u64,
                client: Some(member.client),
            })
            .collect();
        Ok(pb::ListConsumersResponse {
            members,
            subscriptions_consistent: self.consumers.subscriptions_consistent(group),
        })
    }
}

/// The stream `WatchConsumers` answers with.
pub type MembershipStream =
    Pin<Box<dyn Stream<Item = Result<pb::ConsumerGroupChanged, tonic::Status>> + Send>>;

/// Characters of each text field of a heartbeat's [`pb::ClientInfo`] at most.
pub const CLIENT_INFO_FIELD_LEN_MAX: usize = 255;

/// A heartbeat's description of its client: short texts only, as the registry keeps them.
fn validate_client_info(client: &pb::ClientInfo) -> Result<(), BrokerError> {
    let fields = [
        ("addr", &client.addr),
        ("language", &client.language),
        ("message_model", &client.message_model),
        ("consume_type", &client.consume_type),
        ("consume_from_where", &client.consume_from_where),
    ];
    match fields
        .into_iter()
        .find(|(_, text)| text.len() > CLIENT_INFO_FIELD_LEN_MAX)
    {
        Some((name, _)) => Err(BrokerError::BadRequest(format!(
            "a heartbeat's client {name} has at most {CLIENT_INFO_FIELD_LEN_MAX} characters"
        ))),
        None => Ok(()),
    }
}

pub(super) fn validate_client_id(client_id: &str) -> Result<(), BrokerError> {
    if client_id.is_empty() || client_id.len() > CLIENT_ID_LEN_MAX {
        return Err(BrokerError::BadRequest(format!(
            "a client id has 1 to {CLIENT_ID_LEN_MAX} characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_s_client_info_fields_are_at_most_their_maximum() {
        let at_max = "x".repeat(CLIENT_INFO_FIELD_LEN_MAX);
        let client = pb::ClientInfo {
            addr: at_max.clone(),
            language: at_max.clone(),
            message_model: at_max.clone(),
            consume_type: at_max.clone(),
            consume_from_where: at_max,
            version: i32::MAX,
        };
        validate_client_info(&client).expect("every field at its maximum");
        let over = pb::ClientInfo {
            consume_type: "x".repeat(CLIENT_INFO_FIELD_LEN_MAX + 1),
            ..client
        };
        let refused = validate_client_info(&over).expect_err("one past it");
        assert!(
            refused.to_string().contains("consume_type has at most 255"),
            "{refused}"
        );
    }
}
