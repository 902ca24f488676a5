//! `LockQueues` and `UnlockQueues`: the leader's queue locks for orderly consumers
//! ([`crate::queue_locks`]). Only a leader whose lease holds answers: a leader cut off from
//! its quorum may have a successor granting the same queues.

use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::queue_locks::LOCK_QUEUES_MAX;
use crate::queue_locks::QueueId;
use crate::raft::control::lease::Leadership;
use crate::service::BrokerService;
use crate::service::consumers::validate_client_id;
use crate::topic::validate_group_name;
use crate::topic::validate_topic_name;

impl BrokerService {
    pub(super) fn handle_lock_queues(
        &self,
        request: pb::LockQueuesRequest,
    ) -> Result<pb::LockQueuesResponse, BrokerError> {
        self.ensure_leading_with_lease()?;
        validate_member(&request.group, &request.client_id)?;
        let wanted = queue_ids(request.queues)?;
        let held = queue_ids(request.held)?;
        let locked = self.queue_locks.lock(
            &request.group,
            &request.client_id,
            &wanted,
            &held,
            self.clock.instant(),
        );
        Ok(pb::LockQueuesResponse {
            locked: locked
                .into_iter()
                .map(|queue| pb::QueueRef {
                    topic: queue.topic,
                    queue_id: queue.queue_id,
                })
                .collect(),
            valid_ms: self.queue_locks.grace().as_millis() as u64,
            max_reconsume_times: self.group_config_or_default(&request.group).retry_max_times,
        })
    }

    pub(super) fn handle_unlock_queues(
        &self,
        request: pb::UnlockQueuesRequest,
    ) -> Result<(), BrokerError> {
        self.ensure_leader()?;
        validate_member(&request.group, &request.client_id)?;
        let queues = queue_ids(request.queues)?;
        self.queue_locks
            .unlock(&request.group, &request.client_id, &queues);
        Ok(())
    }

    fn ensure_leading_with_lease(&self) -> Result<(), BrokerError> {
        self.ensure_leader()?;
        if *self.leadership.borrow() != Leadership::Leading {
            return Err(BrokerError::Unavailable(
                "this node leads but no quorum acknowledged it within its lease; queue locks \
                 are granted only by a leader sure of its quorum"
                    .into(),
            ));
        }
        Ok(())
    }
}

fn validate_member(group: &str, client_id: &str) -> Result<(), BrokerError> {
    validate_group_name(group).map_err(BrokerError::BadRequest)?;
    validate_client_id(client_id)
}

fn queue_ids(queues: Vec<pb::QueueRef>) -> Result<Vec<QueueId>, BrokerError> {
    if queues.len() > LOCK_QUEUES_MAX {
        return Err(BrokerError::BadRequest(format!(
            "a lock request names at most {LOCK_QUEUES_MAX} queues, got {}",
            queues.len()
        )));
    }
    queues
        .into_iter()
        .map(|queue| {
            validate_topic_name(&queue.topic).map_err(BrokerError::TopicIllegal)?;
            if queue.queue_id < 0 {
                return Err(BrokerError::BadRequest(format!(
                    "queue id {} of {} is negative",
                    queue.queue_id, queue.topic
                )));
            }
            Ok(QueueId {
                topic: queue.topic,
                queue_id: queue.queue_id,
            })
        })
        .collect()
}
