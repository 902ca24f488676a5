//! The admin tools' 4.x topic listings: every topic config of the broker group
//! (`GET_ALL_TOPIC_CONFIG`, the dashboard's topic page) and the consumer groups of a topic
//! (`QUERY_TOPIC_CONSUME_BY_WHO`, `mqadmin topicList -c` and the exporter), both read on the
//! leader.

use std::collections::BTreeMap;

use rocketraft_domain::perm::PERM_READ_WRITE;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common::TopicMessageType;
use serde::Serialize;

use super::Answered;
use super::BrokerHandler;
use super::json_reply;
use super::read;
use crate::command::RemotingCommand;

/// `TopicConfigSerializeWrapper`, without the `dataVersion` a broker group does not keep.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TopicConfigTable {
    topic_config_table: BTreeMap<String, TopicConfig>,
}

/// `TopicConfig`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TopicConfig {
    order: bool,
    perm: u32,
    read_queue_nums: u32,
    topic_filter_type: &'static str,
    topic_name: String,
    topic_sys_flag: u32,
    write_queue_nums: u32,
}

/// `GroupList`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GroupList {
    group_list: Vec<String>,
}

impl BrokerHandler {
    pub(super) async fn all_topic_configs(&self, request: &RemotingCommand) -> Answered {
        let listed = self
            .on_leader(request, |mut client, _| async move {
                client.list_topics(pb::ListTopicsRequest {}).await
            })
            .await?;
        let topic_config_table = listed
            .topics
            .into_iter()
            .map(|topic| (topic.name.clone(), topic_config(topic)))
            .collect();
        json_reply(request, &TopicConfigTable { topic_config_table })
    }

    pub(super) async fn topic_consumers(&self, request: &RemotingCommand) -> Answered {
        let consumers = read(request, |fields| {
            Ok(pb::TopicConsumersRequest {
                topic: fields.required_str("topic")?.to_owned(),
            })
        })?;
        let found = self
            .on_leader(request, |mut client, _| {
                let consumers = consumers.clone();
                async move { client.topic_consumers(consumers).await }
            })
            .await?;
        json_reply(
            request,
            &GroupList {
                group_list: found.groups,
            },
        )
    }
}

/// A topic's config in 4.x terms: its permissions (read 4, write 2, as RocketMQ's), and
/// `order` for a FIFO topic.
fn topic_config(topic: pb::TopicInfo) -> TopicConfig {
    TopicConfig {
        order: topic.message_type() == TopicMessageType::Fifo,
        perm: topic.perm & PERM_READ_WRITE,
        read_queue_nums: topic.read_queue_count,
        topic_filter_type: "SINGLE_TAG",
        topic_name: topic.name,
        topic_sys_flag: 0,
        write_queue_nums: topic.write_queue_count,
    }
}
