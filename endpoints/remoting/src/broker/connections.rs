//! Who is connected, as admin tools ask it: a consumer group's members with their
//! subscriptions (`GET_CONSUMER_CONNECTION_LIST`, from the leader's registry, so SDK and 5.x
//! members are listed too) and a producer group's 4.x connections to this node
//! (`GET_PRODUCER_CONNECTION_LIST`).
//!
//! Invariant: producers are known only from their 4.x heartbeats, which go to the node a
//! producer's route names as broker id 0 (the leader); the SDK's producers and 5.x clients
//! send none, so they are not listed.

use std::collections::BTreeMap;

use rocketraft_domain::tags_code::tags_code;
use rocketraft_proto::broker as pb;
use serde::Serialize;

use super::Answered;
use super::BrokerHandler;
use super::json_reply;
use super::peer_groups::Connection;
use super::read;
use super::subscriptions::pull_filter;
use crate::codes::response;
use crate::command::RemotingCommand;

/// `ConsumerConnection`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConsumerConnection {
    connection_set: Vec<Connection>,
    consume_from_where: String,
    consume_type: String,
    message_model: String,
    subscription_table: BTreeMap<String, SubscriptionData>,
}

/// `SubscriptionData` as a broker reports it (`subVersion` is the client's and not kept).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SubscriptionData {
    class_filter_mode: bool,
    code_set: Vec<i32>,
    expression_type: String,
    sub_string: String,
    tags_set: Vec<String>,
    topic: String,
}

/// `ProducerConnection`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ProducerConnection {
    connection_set: Vec<Connection>,
}

impl BrokerHandler {
    /// The live members of a consumer group, their settings and subscriptions;
    /// `CONSUMER_NOT_ONLINE` when it has none.
    pub(super) async fn consumer_connections(&self, request: &RemotingCommand) -> Answered {
        let group = read(request, |fields| fields.required_str("consumerGroup"))?;
        let members = self.members(request, group).await?;
        if members.is_empty() {
            return Err(Box::new(RemotingCommand::response_to(
                request,
                response::CONSUMER_NOT_ONLINE,
                Some(format!("the consumer group[{group}] not online")),
            )));
        }
        json_reply(request, &consumer_connection(members))
    }

    /// The 4.x connections of a producer group to this node; `SYSTEM_ERROR` when it has none.
    pub(super) async fn producer_connections(&self, request: &RemotingCommand) -> Answered {
        let group = read(request, |fields| fields.required_str("producerGroup"))?;
        let connection_set = self.producers.connections(group);
        if connection_set.is_empty() {
            return Err(Box::new(RemotingCommand::response_to(
                request,
                response::SYSTEM_ERROR,
                Some(format!(
                    "the producer group[{group}] has no 4.x connection to this node"
                )),
            )));
        }
        json_reply(request, &ProducerConnection { connection_set })
    }
}

/// The `ConsumerConnection` of a group's members: each member's connection, the group's
/// settings as its first member that states them says, and the union of their subscriptions.
fn consumer_connection(members: Vec<pb::ConsumerMember>) -> ConsumerConnection {
    let mut connection = ConsumerConnection {
        connection_set: Vec::with_capacity(members.len()),
        consume_from_where: String::new(),
        consume_type: String::new(),
        message_model: String::new(),
        subscription_table: BTreeMap::new(),
    };
    for member in members {
        let client = member.client.unwrap_or_default();
        for (setting, stated) in [
            (
                &mut connection.consume_from_where,
                &client.consume_from_where,
            ),
            (&mut connection.consume_type, &client.consume_type),
            (&mut connection.message_model, &client.message_model),
        ] {
            if setting.is_empty() {
                setting.clone_from(stated);
            }
        }
        for subscription in member.subscriptions {
            connection
                .subscription_table
                .entry(subscription.topic.clone())
                .or_insert_with(|| subscription_data(subscription));
        }
        connection.connection_set.push(Connection {
            client_addr: client.addr,
            client_id: member.client_id,
            language: client.language,
            version: client.version,
        });
    }
    connection
}

/// A registered subscription as 4.x `SubscriptionData`, its tags and their hash codes spelt
/// out (none for `*` or SQL92).
fn subscription_data(subscription: pb::SubscriptionData) -> SubscriptionData {
    let tags_set = pull_filter(&subscription.expression_type, &subscription.expression)
        .map(|filter| filter.tags)
        .unwrap_or_default();
    SubscriptionData {
        class_filter_mode: false,
        code_set: tags_set.iter().map(|tag| tags_code(tag) as i32).collect(),
        expression_type: if subscription.expression_type.is_empty() {
            "TAG".to_owned()
        } else {
            subscription.expression_type
        },
        sub_string: subscription.expression,
        tags_set,
        topic: subscription.topic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(client_id: &str, expression: &str, model: &str) -> pb::ConsumerMember {
        pb::ConsumerMember {
            client_id: client_id.into(),
            subscriptions: vec![pb::SubscriptionData {
                topic: "T".into(),
                expression: expression.into(),
                expression_type: String::new(),
            }],
            idle_ms: 0,
            client: Some(pb::ClientInfo {
                addr: format!("10.0.0.1:{}", client_id.len()),
                language: "JAVA".into(),
                version: 409,
                message_model: model.into(),
                ..pb::ClientInfo::default()
            }),
        }
    }

    #[test]
    fn a_group_lists_each_member_and_spells_out_its_tags() {
        let connection = consumer_connection(vec![
            member("a", "TagA || TagB", ""),
            member("bb", "*", "CLUSTERING"),
        ]);
        let json = serde_json::to_string(&connection).expect("json");
        assert_eq!(
            json,
            concat!(
                r#"{"connectionSet":[{"clientAddr":"10.0.0.1:1","clientId":"a","language":"JAVA","version":409},"#,
                r#"{"clientAddr":"10.0.0.1:2","clientId":"bb","language":"JAVA","version":409}],"#,
                r#""consumeFromWhere":"","consumeType":"","messageModel":"CLUSTERING","#,
                r#""subscriptionTable":{"T":{"classFilterMode":false,"codeSet":[2598919,2598920],"#,
                r#""expressionType":"TAG","subString":"TagA || TagB","tagsSet":["TagA","TagB"],"topic":"T"}}}"#
            )
        );
    }
}
