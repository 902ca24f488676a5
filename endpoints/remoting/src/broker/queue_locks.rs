//! `LOCK_BATCH_MQ` and `UNLOCK_BATCH_MQ`: a 4.x orderly consumer's queue locks, held by the
//! group leader's lock table, so one member of a group consumes a queue at a time.
//!
//! The body names queues as `MessageQueue` objects (`brokerName`, `queueId`, `topic`); a lock
//! reply lists those the member holds now (`lockOKMQSet`), as the objects it was sent.
//!
//! Invariant: a 4.x lock never claims to renew. A 4.x client cannot say which queues it held
//! before (it asks for every queue it was given), so after a leader change the new leader
//! grants its locks only once its grace period ends, as for any member it has not heard
//! from: a queue is never consumed by two members at once.

use bytes::Bytes;
use rocketraft_proto::broker as pb;
use serde::Deserialize;
use serde::Serialize;

use super::Answered;
use super::BrokerHandler;
use crate::command::RemotingCommand;

/// `MessageQueue`, as 4.x clients write it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct MessageQueue {
    topic: String,
    broker_name: String,
    queue_id: i32,
}

/// `LockBatchRequestBody` and `UnlockBatchRequestBody`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueueLockBody {
    consumer_group: String,
    client_id: String,
    #[serde(default)]
    mq_set: Vec<MessageQueue>,
}

/// `LockBatchResponseBody`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct LockedQueues {
    #[serde(rename = "lockOKMQSet")]
    lock_ok_mq_set: Vec<MessageQueue>,
}

impl BrokerHandler {
    pub(super) async fn lock_queues(&self, request: &RemotingCommand) -> Answered {
        let body = lock_body(request)?;
        let lock = pb::LockQueuesRequest {
            group: body.consumer_group,
            client_id: body.client_id,
            queues: queue_refs(&body.mq_set),
            held: Vec::new(),
        };
        let locked = self
            .on_leader(request, |mut client, _| {
                let lock = lock.clone();
                async move { client.lock_queues(lock).await }
            })
            .await?
            .locked;
        let reply = LockedQueues {
            lock_ok_mq_set: body
                .mq_set
                .into_iter()
                .filter(|queue| {
                    locked
                        .iter()
                        .any(|held| held.topic == queue.topic && held.queue_id == queue.queue_id)
                })
                .collect(),
        };
        serde_json::to_vec(&reply)
            .map(|body| RemotingCommand::success(request, body))
            .map_err(|error| Box::new(RemotingCommand::system_error(request, error)))
    }

    pub(super) async fn unlock_queues(&self, request: &RemotingCommand) -> Answered {
        let body = lock_body(request)?;
        let unlock = pb::UnlockQueuesRequest {
            group: body.consumer_group,
            client_id: body.client_id,
            queues: queue_refs(&body.mq_set),
        };
        self.on_leader(request, |mut client, _| {
            let unlock = unlock.clone();
            async move { client.unlock_queues(unlock).await }
        })
        .await?;
        Ok(RemotingCommand::success(request, Bytes::new()))
    }
}

/// The body of a lock or unlock request; one that is not that JSON is answered saying why.
fn lock_body(request: &RemotingCommand) -> Answered<QueueLockBody> {
    serde_json::from_slice(&request.body).map_err(|error| {
        Box::new(RemotingCommand::system_error(
            request,
            format!("the body is not a LockBatchRequestBody: {error}"),
        ))
    })
}

/// The queues of this group `queues` names (each names its broker group by `brokerName`,
/// and a 4.x client sends a group's queues to that group only).
fn queue_refs(queues: &[MessageQueue]) -> Vec<pb::QueueRef> {
    queues
        .iter()
        .map(|queue| pb::QueueRef {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_java_lock_body_reads_its_queues_and_the_reply_names_them_back() {
        let body = r#"{"clientId":"10.0.0.1@1","consumerGroup":"G","mqSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"},{"brokerName":"broker-a","queueId":3,"topic":"T"}]}"#;
        let lock: QueueLockBody = serde_json::from_str(body).expect("lock body");
        assert_eq!(
            (lock.consumer_group.as_str(), lock.client_id.as_str()),
            ("G", "10.0.0.1@1")
        );
        let refs = queue_refs(&lock.mq_set);
        assert_eq!(refs.iter().map(|q| q.queue_id).collect::<Vec<_>>(), [0, 3]);
        let reply = LockedQueues {
            lock_ok_mq_set: lock.mq_set[1..].to_vec(),
        };
        assert_eq!(
            serde_json::to_string(&reply).expect("json"),
            r#"{"lockOKMQSet":[{"topic":"T","brokerName":"broker-a","queueId":3}]}"#
        );
    }
}
