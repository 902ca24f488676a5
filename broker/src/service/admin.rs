//! Admin writes of the broker API: create, update and delete topics, upsert subscription
//! groups, prepare the replacement of a node's disk, transfer leadership, change the
//! group's membership.
//!
//! Invariant: only the leader accepts them; it validates each request at the edge and
//! replicates it as one command, and the call returns once the command is applied, so a
//! config the caller was told about survives any failover.

use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::metadata::GroupConfig;
use crate::metadata::PERM_READ;
use crate::metadata::PERM_WRITE;
use crate::metadata::TopicConfig;
use crate::metadata::TopicMessageType;
use crate::raft::control::membership::MembershipChange;
use crate::raft::control::membership::MembershipError;
use crate::raft::control::membership::change_membership;
use crate::raft::control::propose::linearizable_read;
use crate::raft::control::propose::propose;
use crate::raft::control::role::TransferError;
use crate::raft::control::role::transfer_leadership;
use crate::raft::control::setup::Rejoin;
use crate::raft::control::setup::SetupError;
use crate::raft::control::setup::allow_empty_rejoin;
use crate::raft::transport::node_addr::NodeAddr;
use crate::service::BrokerService;
use crate::state_machine::command::Command;
use crate::topic::GROUP_QUEUES_MAX;
use crate::topic::QUEUE_COUNT_MAX;
use crate::topic::is_system_topic;
use crate::topic::queues_of;
use crate::topic::validate_group_name;
use crate::topic::validate_topic_name;

pub use rocketraft_domain::limits::RETRY_MAX_TIMES_DEFAULT;
pub use rocketraft_domain::limits::RETRY_MAX_TIMES_MAX;
/// Retry queues of a group by default.
pub const RETRY_QUEUE_COUNT_DEFAULT: u32 = 1;
/// How long a leadership transfer may take before it is reported as failed.
pub const TRANSFER_LEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl BrokerService {
    pub(super) async fn handle_create_topic(
        &self,
        request: pb::CreateTopicRequest,
    ) -> Result<(), BrokerError> {
        let message_type = topic_message_type(request.message_type)?;
        let topic = topic_config(request)?;
        self.ensure_room_for(&topic)?;
        self.replicate(Command::UpsertTypedTopic {
            topic,
            message_type,
        })
        .await
    }

    pub(super) async fn handle_delete_topic(
        &self,
        request: pb::DeleteTopicRequest,
    ) -> Result<(), BrokerError> {
        validate_user_topic(&request.topic)?;
        if !self.group.metadata().topics.contains_key(&request.topic) {
            return Err(BrokerError::TopicNotExist(request.topic));
        }
        self.replicate(Command::DeleteTopic {
            name: request.topic,
        })
        .await
    }

    pub(super) async fn handle_upsert_group(
        &self,
        request: pb::UpsertGroupRequest,
    ) -> Result<(), BrokerError> {
        validate_group_name(&request.group).map_err(BrokerError::BadRequest)?;
        let retry_max_times = match request.retry_max_times {
            0 => RETRY_MAX_TIMES_DEFAULT,
            times if times <= RETRY_MAX_TIMES_MAX => times,
            times => {
                return Err(BrokerError::BadRequest(format!(
                    "retry_max_times is at most {RETRY_MAX_TIMES_MAX}, got {times}"
                )));
            }
        };
        let retry_queue_count = match request.retry_queue_count {
            0 => RETRY_QUEUE_COUNT_DEFAULT,
            count => queue_count("retry_queue_count", count)?,
        };
        let group = GroupConfig {
            name: request.group,
            retry_max_times,
            retry_queue_count,
        };
        let name = group.name.clone();
        self.replicate(Command::UpsertGroup(group)).await?;
        self.replicate(Command::SetPopOrderly {
            group: name,
            orderly: request.consume_orderly,
        })
        .await
    }

    /// `group`'s settings here, as replicated (read on the leader after a quorum check).
    pub(super) async fn handle_query_group(
        &self,
        group: &str,
    ) -> Result<Option<pb::GroupSettings>, BrokerError> {
        validate_group_name(group).map_err(BrokerError::BadRequest)?;
        linearizable_read(&self.raft).await?;
        let metadata = self.group.metadata();
        Ok(metadata.groups.get(group).map(|config| pb::GroupSettings {
            retry_max_times: config.retry_max_times,
            retry_queue_count: config.retry_queue_count,
            consume_orderly: metadata.pops.is_orderly(group),
        }))
    }

    pub(super) async fn handle_prepare_node_replacement(
        &self,
        node_id: u64,
    ) -> Result<Rejoin, BrokerError> {
        self.ensure_leader()?;
        let rejoin =
            allow_empty_rejoin(&self.raft, node_id)
                .await
                .map_err(|error| match error {
                    SetupError::Stopped(fatal) => BrokerError::RaftStopped(fatal),
                    error => BrokerError::NodeReplacement(error),
                })?;
        tracing::warn!(
            node_id,
            leader_last_log_index = rejoin.last_log_index,
            "node may rejoin with a shorter log (a replaced disk or a repaired log)"
        );
        Ok(rejoin)
    }

    pub(super) async fn handle_transfer_leader(
        &self,
        to: u64,
    ) -> Result<pb::TransferLeaderResponse, BrokerError> {
        self.ensure_leader()?;
        tracing::info!(to, "transferring leadership");
        let term = transfer_leadership(&self.raft, to, TRANSFER_LEADER_TIMEOUT)
            .await
            .map_err(|error| match error {
                // Name the new leader, as any other NOT_LEADER answer does.
                TransferError::NotLeader => BrokerError::from(
                    crate::raft::control::propose::ensure_leader(&self.raft)
                        .err()
                        .unwrap_or(crate::raft::control::propose::ProposeError::NotLeader {
                            leader_addr: None,
                        }),
                ),
                error => BrokerError::Transfer(error),
            })?;
        Ok(pb::TransferLeaderResponse {
            leader_id: to,
            term,
        })
    }

    pub(super) async fn handle_change_membership(
        &self,
        request: pb::ChangeMembershipRequest,
    ) -> Result<pb::ChangeMembershipResponse, BrokerError> {
        self.ensure_leader()?;
        let add = match request.add_node_id {
            0 => None,
            id => Some((id, added_node_addr(&request)?)),
        };
        let change = MembershipChange {
            add,
            remove: request.remove_node_ids.into_iter().collect(),
        };
        let outcome = change_membership(&self.raft, change)
            .await
            .map_err(|error| match error {
                // Name the leader, as any other NOT_LEADER answer does.
                MembershipError::NotLeader => match self.ensure_leader() {
                    Err(not_leader) => not_leader,
                    Ok(()) => BrokerError::Membership(error),
                },
                error => BrokerError::Membership(error),
            })?;
        Ok(pb::ChangeMembershipResponse {
            voters: outcome
                .voters
                .into_iter()
                .map(|(id, addr)| (id, addr.api))
                .collect(),
            catch_up_ms: outcome.catch_up.as_millis() as u64,
            change_ms: outcome.change.as_millis() as u64,
        })
    }

    /// Creates `topic` with `queue_count` read and write queues, as a first send does when
    /// auto-creation is on, or a consumer group's first retry or dead letter. Concurrent
    /// creations of one topic are harmless (an upsert).
    pub(super) async fn auto_create_topic(
        &self,
        topic: &str,
        queue_count: u32,
    ) -> Result<TopicConfig, BrokerError> {
        let config = TopicConfig {
            name: topic.to_owned(),
            read_queue_count: queue_count,
            write_queue_count: queue_count,
            perm: PERM_READ | PERM_WRITE,
        };
        self.ensure_room_for(&config)?;
        tracing::info!(topic, queue_count, "creating topic on demand");
        self.replicate(Command::UpsertTopic(config.clone())).await?;
        Ok(config)
    }

    /// Refuses a topic config that would take the group's queues past [`GROUP_QUEUES_MAX`]
    /// (a topic updated in place counts only its change).
    fn ensure_room_for(&self, topic: &TopicConfig) -> Result<(), BrokerError> {
        let metadata = self.group.metadata();
        let held: u64 = metadata
            .topics
            .values()
            .filter(|held| held.name != topic.name)
            .map(|held| u64::from(queues_of(held.read_queue_count, held.write_queue_count)))
            .sum();
        let asked = queues_of(topic.read_queue_count, topic.write_queue_count);
        if held + u64::from(asked) > u64::from(GROUP_QUEUES_MAX) {
            return Err(BrokerError::LimitExceeded(format!(
                "topic {} with {asked} queues would take this broker group past \
                 {GROUP_QUEUES_MAX} queues (its topics hold {held}): delete topics or \
                 spread them over more broker groups",
                topic.name
            )));
        }
        Ok(())
    }

    /// Proposes `command` as the leader and waits until it is applied.
    pub(super) async fn replicate(&self, command: Command) -> Result<(), BrokerError> {
        self.ensure_leader()?;
        let applied = propose(&self.raft, command).await?;
        applied.await?;
        Ok(())
    }
}

/// The addresses of the node a `ChangeMembership` adds: `add_addr` for the broker API, and
/// for Raft `add_raft_addr`, or `add_addr` too when it is empty.
fn added_node_addr(request: &pb::ChangeMembershipRequest) -> Result<NodeAddr, BrokerError> {
    let encoded = match request.add_raft_addr.as_str() {
        "" => request.add_addr.clone(),
        raft => NodeAddr::split(&request.add_addr, raft).to_string(),
    };
    encoded
        .parse()
        .map_err(|error| BrokerError::Membership(MembershipError::BadAddress(error)))
}

fn validate_user_topic(topic: &str) -> Result<(), BrokerError> {
    validate_topic_name(topic).map_err(BrokerError::TopicIllegal)?;
    if is_system_topic(topic) {
        return Err(BrokerError::TopicIllegal(format!(
            "{topic} is a system topic"
        )));
    }
    Ok(())
}

fn queue_count(field: &str, count: u32) -> Result<u32, BrokerError> {
    if count == 0 || count > QUEUE_COUNT_MAX {
        return Err(BrokerError::BadRequest(format!(
            "{field} must be 1 to {QUEUE_COUNT_MAX}, got {count}"
        )));
    }
    Ok(count)
}

/// The topic config a create request asks for, checked.
fn topic_config(request: pb::CreateTopicRequest) -> Result<TopicConfig, BrokerError> {
    validate_user_topic(&request.topic)?;
    let perm = match request.perm {
        0 => PERM_READ | PERM_WRITE,
        perm if perm & !(PERM_READ | PERM_WRITE) == 0 => perm,
        perm => {
            return Err(BrokerError::BadRequest(format!(
                "perm {perm} has bits other than read (4) and write (2)"
            )));
        }
    };
    Ok(TopicConfig {
        name: request.topic,
        read_queue_count: queue_count("read_queue_count", request.read_queue_count)?,
        write_queue_count: queue_count("write_queue_count", request.write_queue_count)?,
        perm,
    })
}

/// The type a create names (`None`: keep the topic's), or why it is no type.
fn topic_message_type(value: i32) -> Result<Option<TopicMessageType>, BrokerError> {
    match (value, TopicMessageType::from_wire(value)) {
        (0, _) => Ok(None),
        (_, Some(kind)) => Ok(Some(kind)),
        (_, None) => Err(BrokerError::BadRequest(format!(
            "message_type {value} is not a topic message type"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(queues: u32, perm: u32) -> pb::CreateTopicRequest {
        pb::CreateTopicRequest {
            topic: "Orders".into(),
            read_queue_count: queues,
            write_queue_count: queues,
            perm,
            message_type: 0,
        }
    }

    #[test]
    fn a_message_type_is_one_the_protocol_names() {
        assert_eq!(topic_message_type(0).ok(), Some(None));
        assert_eq!(
            topic_message_type(rocketraft_proto::common::TopicMessageType::Transaction as i32).ok(),
            Some(Some(TopicMessageType::Transaction))
        );
        assert!(topic_message_type(6).is_err());
        assert!(topic_message_type(-1).is_err());
    }

    #[test]
    fn queue_counts_at_the_limits() {
        assert!(topic_config(request(1, 0)).is_ok());
        assert!(topic_config(request(QUEUE_COUNT_MAX, 0)).is_ok());
        assert!(topic_config(request(0, 0)).is_err());
        assert!(topic_config(request(QUEUE_COUNT_MAX + 1, 0)).is_err());
    }

    #[test]
    fn perm_defaults_to_read_write_and_rejects_unknown_bits() {
        assert_eq!(topic_config(request(4, 0)).map(|t| t.perm).ok(), Some(6));
        assert_eq!(topic_config(request(4, 4)).map(|t| t.perm).ok(), Some(4));
        assert!(topic_config(request(4, 1)).is_err());
    }

    #[test]
    fn system_topics_cannot_be_created() {
        for name in ["SCHEDULE_TOPIC_XXXX", "%RETRY%g", "%DLQ%g"] {
            let mut system = request(4, 0);
            system.topic = name.into();
            assert!(
                matches!(topic_config(system), Err(BrokerError::TopicIllegal(_))),
                "{name}"
            );
        }
    }
}
