//! The topics and configs the broker creates on demand for consumer groups: a group's
//! subscription config (on its first heartbeat, if auto-creation is on), its
//! `%RETRY%<group>` topic (with the group's retry queue count) and its `%DLQ%<group>` topic
//! (one queue, readable by an explicit consumer).

use crate::error::BrokerError;
use crate::metadata::GroupConfig;
use crate::metadata::PERM_WRITE;
use crate::metadata::TopicConfig;
use crate::service::BrokerService;
use crate::service::admin::RETRY_MAX_TIMES_DEFAULT;
use crate::service::admin::RETRY_QUEUE_COUNT_DEFAULT;
use crate::state_machine::command::Command;
use crate::topic::DLQ_TOPIC_PREFIX;
use crate::topic::RETRY_TOPIC_PREFIX;

/// Queues of a dead-letter topic (RocketMQ's).
pub const DLQ_QUEUE_COUNT: u32 = 1;

pub fn retry_topic(group: &str) -> String {
    format!("{RETRY_TOPIC_PREFIX}{group}")
}

pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_TOPIC_PREFIX}{group}")
}

/// The defaults a group without a config gets.
pub fn default_group_config(group: &str) -> GroupConfig {
    GroupConfig {
        name: group.to_owned(),
        retry_max_times: RETRY_MAX_TIMES_DEFAULT,
        retry_queue_count: RETRY_QUEUE_COUNT_DEFAULT,
    }
}

impl BrokerService {
    /// `group`'s config; created with defaults if it has none and auto-creation is on.
    pub(super) async fn group_config(&self, group: &str) -> Result<GroupConfig, BrokerError> {
        if let Some(config) = self.group.metadata().groups.get(group).cloned() {
            return Ok(config);
        }
        if !self.auto_create_group {
            return Err(BrokerError::GroupNotExist(group.to_owned()));
        }
        let config = default_group_config(group);
        tracing::info!(group, "auto-creating consumer group config");
        self.replicate(Command::UpsertGroup(config.clone())).await?;
        Ok(config)
    }

    /// `group`'s config, or the defaults if it has none (nothing is created).
    pub(super) fn group_config_or_default(&self, group: &str) -> GroupConfig {
        self.group
            .metadata()
            .groups
            .get(group)
            .cloned()
            .unwrap_or_else(|| default_group_config(group))
    }

    /// The config of system topic `topic`, created with `queue_count` queues if missing.
    /// Fails with `NO_PERMISSION` if an existing one is not writable.
    pub(super) async fn system_topic(
        &self,
        topic: &str,
        queue_count: u32,
    ) -> Result<TopicConfig, BrokerError> {
        let existing = self.group.metadata().topics.get(topic).cloned();
        let config = match existing {
            Some(config) => config,
            None => self.auto_create_topic(topic, queue_count).await?,
        };
        if config.perm & PERM_WRITE == 0 || config.write_queue_count == 0 {
            return Err(BrokerError::NoPermission(format!(
                "{topic} is not writable (perm {})",
                config.perm
            )));
        }
        Ok(config)
    }
}
