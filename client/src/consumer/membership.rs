//! A consumer's membership in its group: heartbeats to every broker group leader that
//! serves a subscribed topic, and one watch stream per broker group whose events (a member
//! joined or left) trigger a rebalance at once.
//!
//! A watch that breaks (the leader died or stepped down) is reopened on the group's new
//! leader, after a heartbeat to it, so a new leader learns this member without waiting for
//! the heartbeat interval; every (re)opened watch also triggers a rebalance.

use std::sync::Arc;
use std::time::Duration;

use rocketraft_proto::broker as pb;

use crate::brokers::CallError;
use crate::consumer::ConsumeFrom;
use crate::consumer::ConsumerConfig;
use crate::consumer::ConsumerError;
use crate::consumer::MessageModel;
use crate::consumer::Shared;

/// How long one heartbeat may take, retries included.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause before a broken watch is reopened; doubles up to [`WATCH_RETRY_PAUSE_MAX`].
const WATCH_RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);
const WATCH_RETRY_PAUSE_MAX: Duration = Duration::from_secs(2);

/// How this consumer describes itself to operators, in RocketMQ's terms; the broker fills in
/// the address it sees.
fn client_info(config: &ConsumerConfig) -> pb::ClientInfo {
    pb::ClientInfo {
        language: "RUST".to_owned(),
        message_model: match config.message_model {
            MessageModel::Clustering => "CLUSTERING",
            MessageModel::Broadcasting => "BROADCASTING",
        }
        .to_owned(),
        consume_type: "CONSUME_PASSIVELY".to_owned(),
        consume_from_where: match config.consume_from {
            ConsumeFrom::First => "CONSUME_FROM_FIRST_OFFSET",
            ConsumeFrom::Last => "CONSUME_FROM_LAST_OFFSET",
            ConsumeFrom::Timestamp(_) => "CONSUME_FROM_TIMESTAMP",
        }
        .to_owned(),
        ..pb::ClientInfo::default()
    }
}

/// Tells `group`'s leader this client is alive, with all its subscriptions.
pub async fn heartbeat(shared: &Shared, group: &str) -> Result<(), ConsumerError> {
    let request = pb::HeartbeatRequest {
        client_id: shared.client_id.clone(),
        group: shared.config.group.clone(),
        subscriptions: shared
            .config
            .subscriptions
            .iter()
            .map(|(topic, subscription)| {
                let (expression, expression_type) = subscription.expression();
                pb::SubscriptionData {
                    topic: topic.clone(),
                    expression,
                    expression_type: expression_type.to_owned(),
                }
            })
            .collect(),
        client: Some(client_info(&shared.config)),
    };
    shared
        .brokers
        .on_leader(group, HEARTBEAT_TIMEOUT, |mut client, _repeat| {
            let request = request.clone();
            async move { client.heartbeat(request).await.map(|_| ()) }
        })
        .await
        .map_err(ConsumerError::from)
}

/// Leaves the consumer group on `group`'s leader (graceful shutdown).
pub async fn unregister(shared: &Shared, group: &str) -> Result<(), ConsumerError> {
    let request = pb::UnregisterConsumerRequest {
        client_id: shared.client_id.clone(),
        group: shared.config.group.clone(),
    };
    shared
        .brokers
        .on_leader(group, HEARTBEAT_TIMEOUT, |mut client, _repeat| {
            let request = request.clone();
            async move { client.unregister_consumer(request).await.map(|_| ()) }
        })
        .await
        .map_err(ConsumerError::from)
}

/// Heartbeats every known broker group each `heartbeat_interval`.
pub async fn run_heartbeats(shared: Arc<Shared>) {
    loop {
        tokio::select! {
            () = shared.shutdown.cancelled() => return,
            () = tokio::time::sleep(shared.config.heartbeat_interval) => {}
        }
        for group in shared.brokers.known_groups() {
            if let Err(error) = heartbeat(&shared, &group).await {
                tracing::warn!(group, %error, "heartbeat failed");
            }
        }
    }
}

/// Watches the membership of this consumer group on broker group `group` until shutdown.
pub async fn run_membership_watch(shared: Arc<Shared>, group: String) {
    let mut pause = WATCH_RETRY_PAUSE_MIN;
    loop {
        let watched = tokio::select! {
            () = shared.shutdown.cancelled() => return,
            watched = watch_once(&shared, &group) => watched,
        };
        match watched {
            Ok(()) => pause = WATCH_RETRY_PAUSE_MIN,
            Err(error) => {
                tracing::debug!(group, %error, "membership watch broke; reopening");
                pause = (pause * 2).min(WATCH_RETRY_PAUSE_MAX);
            }
        }
        tokio::select! {
            () = shared.shutdown.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// Heartbeats, opens the watch and turns its events into rebalances until it ends.
async fn watch_once(shared: &Shared, group: &str) -> Result<(), ConsumerError> {
    heartbeat(shared, group).await?;
    let request = pb::WatchConsumersRequest {
        group: shared.config.group.clone(),
    };
    let mut events = shared
        .brokers
        .on_leader(group, HEARTBEAT_TIMEOUT, |mut client, _repeat| {
            let request = request.clone();
            async move { Ok(client.watch_consumers(request).await?.into_inner()) }
        })
        .await?;
    let watched_leader = shared.brokers.known_leader(group);
    shared.rebalance_now.notify_one();
    loop {
        let event = tokio::select! {
            event = events.message() => event,
            () = tokio::time::sleep(shared.config.heartbeat_interval) => {
                // A leader cut off from its group keeps the stream open; move to the leader
                // the routes name now.
                if shared.brokers.known_leader(group) != watched_leader {
                    return Ok(());
                }
                continue;
            }
        };
        match event {
            Ok(Some(_changed)) => shared.rebalance_now.notify_one(),
            Ok(None) => return Ok(()),
            Err(status) => {
                shared.brokers.leader_failed(group, &status);
                return Err(CallError::Rejected {
                    group: group.to_owned(),
                    status,
                }
                .into());
            }
        }
    }
}
