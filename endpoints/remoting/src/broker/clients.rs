//! The client registry's 4.x requests: `HEART_BEAT` (a client's consumer groups and their
//! subscriptions, as `HeartbeatData` JSON), `UNREGISTER_CLIENT` and
//! `GET_CONSUMER_LIST_BY_GROUP`, on the group leader's consumer registry.
//!
//! Invariant: a heartbeat's reply carries [`crate::BROKER_VERSION`] (every reply does): the
//! Java consumer records it as the broker's version and refuses SQL92 pulls from a broker
//! below 4.1.

use serde::Deserialize;
use serde::Serialize;

use bytes::Bytes;
use rocketraft_proto::broker as pb;

use super::Answered;
use super::BrokerHandler;
use super::json_reply;
use super::peer_groups::Connection;
use super::read;
use crate::codes::response;
use crate::command::RemotingCommand;
use crate::connection::Peer;

/// `HeartbeatData`, the parts a broker reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeartbeatData {
    #[serde(rename = "clientID")]
    client_id: String,
    #[serde(default)]
    consumer_data_set: Vec<ConsumerData>,
    #[serde(default)]
    producer_data_set: Vec<ProducerData>,
}

/// `ProducerData`: one producer group of the client.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProducerData {
    group_name: String,
}

/// `ConsumerData`: one consumer group of the client.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConsumerData {
    group_name: String,
    #[serde(default)]
    subscription_data_set: Vec<SubscriptionData>,
    /// The group's settings, which only describe the client to admin tools: Java writes
    /// each as its enum name, the C++ client as its ordinal ([`enum_name`]).
    #[serde(default)]
    consume_type: Option<serde_json::Value>,
    #[serde(default)]
    message_model: Option<serde_json::Value>,
    #[serde(default)]
    consume_from_where: Option<serde_json::Value>,
}

/// `ConsumeType`'s names, in ordinal order.
const CONSUME_TYPES: &[&str] = &["CONSUME_ACTIVELY", "CONSUME_PASSIVELY"];
/// `MessageModel`'s names, in ordinal order.
const MESSAGE_MODELS: &[&str] = &["BROADCASTING", "CLUSTERING"];
/// `ConsumeFromWhere`'s names, in ordinal order.
const CONSUME_FROM_WHERE: &[&str] = &[
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
];

/// An enum field as Java writes it (its name) or as the C++ client does (its ordinal in
/// `names`); an unknown ordinal is its number's text, anything else empty. Never an error:
/// a heartbeat is not refused over a field that only describes its client.
fn enum_name(value: Option<serde_json::Value>, names: &[&str]) -> String {
    match value {
        Some(serde_json::Value::String(name)) => name,
        Some(serde_json::Value::Number(number)) => number
            .as_u64()
            .and_then(|ordinal| names.get(usize::try_from(ordinal).ok()?))
            .map_or_else(|| number.to_string(), |name| (*name).to_owned()),
        _ => String::new(),
    }
}

/// `SubscriptionData`: a topic and its filter (`TAG`, the default, or `SQL92`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SubscriptionData {
    topic: String,
    #[serde(default)]
    sub_string: String,
    #[serde(default)]
    expression_type: Option<String>,
    /// When the client last changed the subscription (its pulls carry it): a number from
    /// Java, a string from the C++ client.
    #[serde(default, deserialize_with = "number_or_text")]
    sub_version: i64,
}

/// An `i64` written as a JSON number or as a string of one.
fn number_or_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrText {
        Number(i64),
        Text(String),
    }
    match NumberOrText::deserialize(deserializer)? {
        NumberOrText::Number(number) => Ok(number),
        NumberOrText::Text(text) => text
            .trim()
            .parse()
            .map_err(|_| serde::de::Error::custom(format!("{text:?} is not a whole number"))),
    }
}

/// `GetConsumerListByGroupResponseBody`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConsumerIdList {
    consumer_id_list: Vec<String>,
}

impl BrokerHandler {
    /// Registers each consumer group of the heartbeat with the leader, learns its
    /// subscriptions for this node's pulls, and follows `peer` as one of its connections
    /// (for its membership notices); follows `peer` as a connection of each producer group
    /// (for its transaction check-backs).
    pub(super) async fn heartbeat(&self, request: &RemotingCommand, peer: &Peer) -> Answered {
        let heartbeat: HeartbeatData = serde_json::from_slice(&request.body).map_err(|error| {
            Box::new(RemotingCommand::system_error(
                request,
                format!("the heartbeat's body is not HeartbeatData: {error}"),
            ))
        })?;
        let connection = Connection {
            client_addr: peer.addr().to_string(),
            client_id: heartbeat.client_id.clone(),
            language: request.language.name().to_owned(),
            version: request.version,
        };
        for producer in &heartbeat.producer_data_set {
            self.follow_producer(&producer.group_name, peer, connection.clone());
        }
        for consumer in heartbeat.consumer_data_set {
            let (subscriptions, versions): (Vec<_>, Vec<_>) = consumer
                .subscription_data_set
                .into_iter()
                .map(|subscription| {
                    let data = pb::SubscriptionData {
                        topic: subscription.topic,
                        expression: subscription.sub_string,
                        expression_type: subscription.expression_type.unwrap_or_default(),
                    };
                    (data, subscription.sub_version)
                })
                .unzip();
            let beat = pb::HeartbeatRequest {
                client_id: heartbeat.client_id.clone(),
                group: consumer.group_name,
                subscriptions,
                client: Some(pb::ClientInfo {
                    addr: connection.client_addr.clone(),
                    language: connection.language.clone(),
                    version: connection.version,
                    message_model: enum_name(consumer.message_model, MESSAGE_MODELS),
                    consume_type: enum_name(consumer.consume_type, CONSUME_TYPES),
                    consume_from_where: enum_name(consumer.consume_from_where, CONSUME_FROM_WHERE),
                }),
            };
            self.on_leader(request, |mut client, _| {
                let beat = beat.clone();
                async move { client.heartbeat(beat).await }
            })
            .await?;
            self.follow_consumer(&beat.group, peer, connection.clone());
            for (subscription, sub_version) in beat.subscriptions.into_iter().zip(versions) {
                self.subscriptions
                    .learn(&beat.group, subscription, sub_version);
            }
        }
        Ok(RemotingCommand::success(request, Bytes::new()))
    }

    /// Removes the client from its consumer group; a producer group's unregistration has
    /// nothing to remove.
    pub(super) async fn unregister(&self, request: &RemotingCommand) -> Answered {
        let (client_id, group) = read(request, |fields| {
            let group = fields
                .get("consumerGroup")
                .filter(|group| !group.is_empty());
            Ok((fields.required_str("clientID")?, group))
        })?;
        if let Some(group) = group {
            let leave = pb::UnregisterConsumerRequest {
                client_id: client_id.to_owned(),
                group: group.to_owned(),
            };
            self.on_leader(request, |mut client, _| {
                let leave = leave.clone();
                async move { client.unregister_consumer(leave).await }
            })
            .await?;
        }
        Ok(RemotingCommand::success(request, Bytes::new()))
    }

    /// The live members of consumer `group` in the leader's registry, sorted by client id.
    pub(super) async fn members(
        &self,
        request: &RemotingCommand,
        group: &str,
    ) -> Answered<Vec<pb::ConsumerMember>> {
        let list = pb::ListConsumersRequest {
            group: group.to_owned(),
        };
        let listed = self
            .on_leader(request, |mut client, _| {
                let list = list.clone();
                async move { client.list_consumers(list).await }
            })
            .await?;
        Ok(listed.members)
    }

    /// The live members of a consumer group, sorted as rebalancing sorts them.
    pub(super) async fn consumer_list(&self, request: &RemotingCommand) -> Answered {
        let group = read(request, |fields| fields.required_str("consumerGroup"))?;
        let members = self.members(request, group).await?;
        if members.is_empty() {
            return Err(Box::new(RemotingCommand::response_to(
                request,
                response::SYSTEM_ERROR,
                Some(format!("no consumer for this group, {group}")),
            )));
        }
        let list = ConsumerIdList {
            consumer_id_list: members.into_iter().map(|member| member.client_id).collect(),
        };
        json_reply(request, &list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_java_heartbeat_reads_its_groups_and_subscriptions() {
        let body = r#"{"clientID":"10.0.0.1@12345#1","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"G","messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG","subString":"TagA","subVersion":1700000000000,"tagsSet":["TagA"],"topic":"T"},{"topic":"%RETRY%G","subString":"*"}],"unitMode":false}],"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}"#;
        let heartbeat: HeartbeatData = serde_json::from_str(body).expect("heartbeat");
        assert_eq!(heartbeat.client_id, "10.0.0.1@12345#1");
        let group = &heartbeat.consumer_data_set[0];
        assert_eq!(group.group_name, "G");
        let topics: Vec<(&str, &str)> = group
            .subscription_data_set
            .iter()
            .map(|s| (s.topic.as_str(), s.sub_string.as_str()))
            .collect();
        assert_eq!(topics, [("T", "TagA"), ("%RETRY%G", "*")]);
        assert_eq!(
            group.subscription_data_set[0].expression_type.as_deref(),
            Some("TAG")
        );
    }

    #[test]
    fn a_cpp_heartbeat_writes_its_settings_as_ordinals() {
        let body = r#"{"clientID":"c","consumerDataSet":[{"consumeFromWhere":4,"consumeType":1,"groupName":"G","messageModel":1,"subscriptionDataSet":[]}]}"#;
        let heartbeat: HeartbeatData = serde_json::from_str(body).expect("heartbeat");
        let [group] = <[ConsumerData; 1]>::try_from(heartbeat.consumer_data_set).expect("one");
        assert_eq!(
            enum_name(group.consume_from_where, CONSUME_FROM_WHERE),
            "CONSUME_FROM_FIRST_OFFSET"
        );
        assert_eq!(
            enum_name(group.consume_type, CONSUME_TYPES),
            "CONSUME_PASSIVELY"
        );
        assert_eq!(enum_name(group.message_model, MESSAGE_MODELS), "CLUSTERING");
        let java = Some(serde_json::json!("BROADCASTING"));
        assert_eq!(enum_name(java, MESSAGE_MODELS), "BROADCASTING");
        let unknown = Some(serde_json::json!(9));
        assert_eq!(enum_name(unknown, MESSAGE_MODELS), "9");
        assert_eq!(enum_name(Some(serde_json::json!([1])), MESSAGE_MODELS), "");
    }

    #[test]
    fn a_cpp_heartbeat_writes_its_sub_version_as_text() {
        let body = r#"{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"topic":"T","subString":"*","subVersion":"1796679621671"}]}]}"#;
        let heartbeat: HeartbeatData = serde_json::from_str(body).expect("heartbeat");
        let subscription = &heartbeat.consumer_data_set[0].subscription_data_set[0];
        assert_eq!(subscription.sub_version, 1_796_679_621_671);
        let bad = body.replace("1796679621671", "soon");
        let error = serde_json::from_str::<HeartbeatData>(&bad).expect_err("not a number");
        assert!(
            error.to_string().contains("\"soon\" is not a whole number"),
            "{error}"
        );
    }

    #[test]
    fn a_producer_heartbeat_has_no_consumer_group() {
        let body = r#"{"clientID":"c","producerDataSet":[{"groupName":"P"}]}"#;
        let heartbeat: HeartbeatData = serde_json::from_str(body).expect("heartbeat");
        assert!(heartbeat.consumer_data_set.is_empty());
        assert_eq!(heartbeat.producer_data_set[0].group_name, "P");
    }
}
