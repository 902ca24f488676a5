//! `Telemetry`: the stream each 5.x client keeps open. The client sends its settings; the
//! server answers with status OK and the settings it must use: the retry backoff, the
//! request timeout, for a producer the largest body it may send (the Node.js client throws
//! without a backoff policy and a non-zero body limit), and for a consumer its group's
//! delivery attempts and whether it is FIFO, as the brokers serving its topics have them.
//! While the stream is open, the server's commands to the client (transaction check-backs)
//! go down it.

use std::sync::Arc;
use std::time::Duration;

use rocketraft_client::brokers::Brokers;
use rocketraft_proto::broker as broker_pb;
use tokio_util::sync::CancellationToken;
use tonic::Streaming;

use crate::clients::Clients;
use crate::clients::CommandSender;
use crate::pb;
use crate::pb::telemetry_command::Command;
use crate::send::MESSAGE_BODY_BYTES_MAX;
use crate::status;
use rocketraft_domain::limits::POP_INVISIBLE_MS_MIN;
use rocketraft_domain::limits::RETRY_MAX_TIMES_DEFAULT;

/// Attempts of a producer's send, the first included, before it gives up.
pub const CLIENT_ATTEMPTS_MAX: i32 = 3;
/// Deliveries of a message to a consumer group, the first included, before it goes to the
/// group's dead-letter topic, as consumers of a group no broker has a config for are told:
/// the default group's (its retries and the first).
pub const DELIVERY_ATTEMPTS_MAX: i32 = RETRY_MAX_TIMES_DEFAULT as i32 + 1;
/// How long the lookup of a consumer group's settings may take, over every broker group
/// asked; then the consumer gets the defaults. Well inside the 6 s the official Java client
/// waits for its first settings (it fails to start, until restarted, after that).
const GROUP_QUERY_TIMEOUT: Duration = Duration::from_secs(2);
/// A client's first backoff between attempts; each next one is `BACKOFF_MULTIPLIER` times
/// longer, up to `BACKOFF_MAX`.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(10);
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);
pub const BACKOFF_MULTIPLIER: f32 = 2.0;
/// How long a client waits for the answer to one call (the SDK's send deadline).
pub const REQUEST_TIMEOUT: Duration = rocketraft_client::producer::SEND_TIMEOUT_DEFAULT;
/// How long a consumer's receive may wait for messages, if it does not say.
pub const LONG_POLLING_TIMEOUT: Duration = Duration::from_secs(20);
/// Messages one receive returns at most, if the consumer does not say.
pub const RECEIVE_BATCH_SIZE: i32 = 32;

/// Serves one client's stream until it ends or `shutdown`: answers its settings and keeps it
/// registered with `clients`, with the topics it publishes.
pub async fn serve_stream(
    client_id: Option<String>,
    mut commands: Streaming<pb::TelemetryCommand>,
    answers: CommandSender,
    clients: Arc<Clients>,
    brokers: Arc<Brokers>,
    consumer_retry_delays: Arc<[Duration]>,
    shutdown: CancellationToken,
) {
    let registration = clients.open(client_id, answers.clone());
    loop {
        let command = tokio::select! {
            () = shutdown.cancelled() => return,
            command = commands.message() => command,
        };
        let command = match command {
            Ok(Some(command)) => command,
            Ok(None) => return,
            Err(error) => {
                tracing::debug!(%error, "telemetry stream ended");
                return;
            }
        };
        let mut group = None;
        if let Some(Command::Settings(settings)) = &command.command {
            match &settings.pub_sub {
                Some(pb::settings::PubSub::Publishing(publishing)) => {
                    registration.publishes(publishing.topics.iter().map(|topic| topic.name.clone()))
                }
                Some(pb::settings::PubSub::Subscription(subscription)) => {
                    group = group_settings(&brokers, subscription).await;
                }
                None => {}
            }
        }
        if let Some(answer) = answer(command, group, &consumer_retry_delays)
            && answers.send(Ok(answer)).await.is_err()
        {
            return;
        }
    }
}

/// The settings of `subscription`'s group in the first broker group serving one of its
/// topics that has a config for it; `None` (consumers get the defaults) if none has, or none
/// answered within `GROUP_QUERY_TIMEOUT`.
async fn group_settings(
    brokers: &Brokers,
    subscription: &pb::Subscription,
) -> Option<broker_pb::GroupSettings> {
    let lookup = find_group_settings(brokers, subscription);
    match tokio::time::timeout(GROUP_QUERY_TIMEOUT, lookup).await {
        Ok(found) => found,
        Err(_elapsed) => {
            tracing::warn!(
                group = ?subscription.group,
                "consumer group settings unknown in time; the consumer gets the defaults"
            );
            None
        }
    }
}

async fn find_group_settings(
    brokers: &Brokers,
    subscription: &pb::Subscription,
) -> Option<broker_pb::GroupSettings> {
    let group = subscription.group.as_ref()?.name.clone();
    let topics = subscription
        .subscriptions
        .iter()
        .filter_map(|entry| entry.topic.as_ref());
    for topic in topics {
        let Ok(route) = brokers.route(&topic.name).await else {
            continue;
        };
        for queues in &route.groups {
            let request = broker_pb::QueryGroupRequest {
                group: group.clone(),
            };
            let answer = brokers
                .on_leader(&queues.group, GROUP_QUERY_TIMEOUT, |mut client, _repeat| {
                    let request = request.clone();
                    async move { Ok(client.query_group(request).await?.into_inner()) }
                })
                .await;
            match answer {
                Ok(answer) if answer.settings.is_some() => return answer.settings,
                Ok(_none) => {}
                Err(error) => tracing::debug!(group, %error, "consumer group settings unknown"),
            }
        }
    }
    None
}

/// The answer to a client's command, if it needs one; `group`: the settings of a
/// consumer's group, if known; `retry_delays`: how long a consumer leaves a message it failed
/// to consume invisible, by attempt.
pub fn answer(
    command: pb::TelemetryCommand,
    group: Option<broker_pb::GroupSettings>,
    retry_delays: &[Duration],
) -> Option<pb::TelemetryCommand> {
    match command.command {
        Some(Command::Settings(settings)) => Some(pb::TelemetryCommand {
            status: status::ok(),
            command: Some(Command::Settings(server_settings(
                settings,
                group,
                retry_delays,
            ))),
        }),
        // A result the client reports, or nothing: no answer.
        _ => None,
    }
}

/// The settings a client must use, given what it sent (and its group's, for a consumer).
fn server_settings(
    client: pb::Settings,
    group: Option<broker_pb::GroupSettings>,
    retry_delays: &[Duration],
) -> pb::Settings {
    let pub_sub = match client.pub_sub {
        Some(pb::settings::PubSub::Publishing(publishing)) => {
            Some(pb::settings::PubSub::Publishing(pb::Publishing {
                topics: publishing.topics,
                max_body_size: MESSAGE_BODY_BYTES_MAX as i32,
                validate_message_type: true,
            }))
        }
        Some(pb::settings::PubSub::Subscription(subscription)) => {
            Some(pb::settings::PubSub::Subscription(pb::Subscription {
                group: subscription.group,
                subscriptions: subscription.subscriptions,
                fifo: Some(match &group {
                    Some(group) => group.consume_orderly,
                    None => subscription.fifo.unwrap_or(false),
                }),
                receive_batch_size: Some(RECEIVE_BATCH_SIZE),
                long_polling_timeout: Some(duration(LONG_POLLING_TIMEOUT)),
            }))
        }
        None => None,
    };
    let backoff_policy = match (&pub_sub, group) {
        (Some(pb::settings::PubSub::Subscription(_)), group) => pb::RetryPolicy {
            max_attempts: group.map_or(DELIVERY_ATTEMPTS_MAX, |group| {
                i32::try_from(group.retry_max_times + 1).unwrap_or(i32::MAX)
            }),
            strategy: Some(consumer_backoff(retry_delays)),
        },
        _ => pb::RetryPolicy {
            max_attempts: CLIENT_ATTEMPTS_MAX,
            strategy: Some(pb::retry_policy::Strategy::ExponentialBackoff(
                pb::ExponentialBackoff {
                    initial: Some(duration(BACKOFF_INITIAL)),
                    max: Some(duration(BACKOFF_MAX)),
                    multiplier: BACKOFF_MULTIPLIER,
                },
            )),
        },
    };
    pb::Settings {
        client_type: client.client_type,
        access_point: client.access_point,
        backoff_policy: Some(backoff_policy),
        request_timeout: Some(duration(REQUEST_TIMEOUT)),
        pub_sub,
        user_agent: client.user_agent,
        metric: Some(pb::Metric {
            on: false,
            endpoints: None,
        }),
    }
}

/// A consumer's nack backoff: attempt n leaves the message invisible for the n-th delay (the
/// last one after that), never shorter than a pop's shortest invisible time.
fn consumer_backoff(retry_delays: &[Duration]) -> pb::retry_policy::Strategy {
    let shortest = Duration::from_millis(POP_INVISIBLE_MS_MIN);
    pb::retry_policy::Strategy::CustomizedBackoff(pb::CustomizedBackoff {
        next: retry_delays
            .iter()
            .map(|delay| duration((*delay).max(shortest)))
            .collect(),
    })
}

fn duration(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: duration.as_secs() as i64,
        nanos: duration.subsec_nanos() as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_producer_gets_a_backoff_policy_and_a_body_limit() {
        let command = pb::TelemetryCommand {
            status: None,
            command: Some(Command::Settings(pb::Settings {
                client_type: Some(pb::ClientType::Producer as i32),
                pub_sub: Some(pb::settings::PubSub::Publishing(pb::Publishing::default())),
                ..pb::Settings::default()
            })),
        };
        let answer = answer(command, None, &[]).expect("settings are answered");
        assert_eq!(answer.status.expect("a status").code(), pb::Code::Ok);
        let Some(Command::Settings(settings)) = answer.command else {
            panic!("the answer holds settings");
        };
        let policy = settings.backoff_policy.expect("a backoff policy");
        assert_eq!(policy.max_attempts, CLIENT_ATTEMPTS_MAX);
        assert!(matches!(
            policy.strategy,
            Some(pb::retry_policy::Strategy::ExponentialBackoff(_))
        ));
        let Some(pb::settings::PubSub::Publishing(publishing)) = settings.pub_sub else {
            panic!("a producer's settings hold publishing");
        };
        assert_eq!(publishing.max_body_size as usize, MESSAGE_BODY_BYTES_MAX);
    }

    #[test]
    fn a_consumer_is_told_its_groups_attempts_and_whether_it_is_fifo() {
        let consumer = |fifo| pb::TelemetryCommand {
            status: None,
            command: Some(Command::Settings(pb::Settings {
                client_type: Some(pb::ClientType::SimpleConsumer as i32),
                pub_sub: Some(pb::settings::PubSub::Subscription(pb::Subscription {
                    fifo: Some(fifo),
                    ..pb::Subscription::default()
                })),
                ..pb::Settings::default()
            })),
        };
        let delays = [Duration::from_millis(100), Duration::from_secs(5)];
        let told = |command, group| {
            let Some(Command::Settings(settings)) = answer(command, group, &delays)?.command else {
                return None;
            };
            let Some(pb::settings::PubSub::Subscription(subscription)) = settings.pub_sub else {
                return None;
            };
            Some((settings.backoff_policy?.max_attempts, subscription.fifo?))
        };
        let orderly = broker_pb::GroupSettings {
            retry_max_times: 3,
            retry_queue_count: 1,
            consume_orderly: true,
        };
        assert_eq!(told(consumer(false), Some(orderly)), Some((4, true)));
        let concurrent = broker_pb::GroupSettings {
            consume_orderly: false,
            ..orderly
        };
        assert_eq!(told(consumer(true), Some(concurrent)), Some((4, false)));
        assert_eq!(
            told(consumer(true), None),
            Some((DELIVERY_ATTEMPTS_MAX, true)),
            "a group no broker knows: the defaults, and what the client asked"
        );
        let Some(Command::Settings(settings)) =
            answer(consumer(false), None, &delays).and_then(|answer| answer.command)
        else {
            panic!("settings are answered");
        };
        let strategy = settings.backoff_policy.and_then(|policy| policy.strategy);
        let Some(pb::retry_policy::Strategy::CustomizedBackoff(backoff)) = strategy else {
            panic!("consumers nack by the delay levels: {strategy:?}");
        };
        assert_eq!(
            backoff.next,
            vec![
                duration(Duration::from_secs(1)),
                duration(Duration::from_secs(5))
            ],
            "never shorter than a pop's shortest invisible time"
        );
    }

    #[test]
    fn a_command_that_is_no_settings_gets_no_answer() {
        assert!(answer(pb::TelemetryCommand::default(), None, &[]).is_none());
    }
}
