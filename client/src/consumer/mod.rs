//! The push consumer: an application subscribes topics with tag expressions and
//! gets a listener called with the messages; the consumer pulls, rebalances and commits
//! offsets itself.
//!
//! - [`rebalance`]: which queues this client owns (allocate averagely, or all when
//!   broadcasting), and starting/stopping their pull loops;
//! - [`pull_loop`]: one long-polling loop per owned queue, with flow control;
//! - [`consume`]: the listener, called concurrently with batches;
//! - [`consume_orderly`]: an orderly listener, called with one batch of a queue at a time
//!   while this client holds the queue's lock ([`queue_lock`]);
//! - [`process_queue`]: one queue's local buffer, which defines its committable offset;
//! - [`consume_from`]: where a group without a committed offset starts;
//! - [`offset_store`]: committed offsets, on the brokers or in a local file;
//! - [`membership`]: heartbeats and membership watches; [`allocate`]: the allocation
//!   strategy; [`listener`]: the application's side. Calls to group leaders go through
//!   [`crate::brokers`].
//!
//! Delivery is at least once: a message is consumed again only if a client died or a queue
//! moved before its offset was committed; the committed offset never passes a message the
//! listener has not consumed.

mod allocate;
mod consume;
pub(crate) mod consume_from;
mod consume_orderly;
pub mod listener;
mod member_view;
mod membership;
mod offset_store;
mod process_queue;
mod pull_loop;
mod queue_lock;
mod rebalance;
mod send_back;

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use rocketraft_domain::names::validate_group_name;
use rocketraft_domain::names::validate_topic_name;
use tokio::sync::Notify;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::brokers::Brokers;
use crate::brokers::CallError;
use crate::connector::ClientTls;
use crate::connector::Connector;
pub use crate::consumer::allocate::allocate_averagely;
pub use crate::consumer::consume_from::ConsumeFrom;
pub use crate::consumer::listener::ConsumeContext;
pub use crate::consumer::listener::ConsumeOrderlyContext;
pub use crate::consumer::listener::ConsumeOrderlyResult;
pub use crate::consumer::listener::ConsumeResult;
use crate::consumer::listener::Listener;
pub use crate::consumer::listener::MessageListener;
pub use crate::consumer::listener::MessageListenerOrderly;
use crate::consumer::listener::SUSPEND_TIME_MAX;
use crate::consumer::listener::SUSPEND_TIME_MIN;
use crate::consumer::offset_store::OffsetBackend;
use crate::consumer::offset_store::OffsetStore;
use crate::consumer::process_queue::ProcessQueue;
use crate::consumer::rebalance::Assignment;
use crate::consumer::rebalance::run_rebalance_loop;
use crate::message::RETRY_TOPIC_PREFIX;
use crate::route::MessageQueue;
use crate::route::ROUTE_TTL_DEFAULT;
use crate::route::RouteCache;
use crate::route::RouteError;
use crate::subscription::Subscription;
use crate::unique_id::UniqueIdGenerator;

/// How often a client heartbeats its broker groups (RocketMQ's default).
pub const HEARTBEAT_INTERVAL_DEFAULT: Duration = Duration::from_secs(30);
/// How often a client rebalances without being told to.
pub const REBALANCE_INTERVAL_DEFAULT: Duration = Duration::from_secs(20);
/// How often consumed offsets are committed.
pub const PERSIST_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);
/// How long an empty pull is held by the broker (its maximum).
pub const PULL_HOLD_DEFAULT: Duration = Duration::from_secs(15);
/// The longest hold a pull may ask for (the broker's limit).
pub const PULL_HOLD_MAX: Duration = Duration::from_secs(15);
/// Messages one pull asks for. RocketMQ's default is 32; a pull answers with what is there
/// at once (it never waits to fill a batch), so a larger batch costs nothing at low load and
/// under load takes an eighth of the pull requests: W1's drain went from 489-522k to
/// 578-664k msg/s, the brokers' CPU from 1.7-1.8 to 1.5 us per message. A queue's buffer
/// ([`QUEUE_BUFFER_COUNT_DEFAULT`]) still bounds what a consumer holds.
pub const PULL_BATCH_SIZE_DEFAULT: u32 = 256;
/// The most messages one pull may ask for (the broker's limit).
pub const PULL_BATCH_SIZE_MAX: u32 = 1024;
/// A queue's buffer holds at most this many messages before pulling pauses.
pub const QUEUE_BUFFER_COUNT_DEFAULT: usize = 1000;
/// A queue's buffer holds at most this many body bytes before pulling pauses.
pub const QUEUE_BUFFER_BYTES_DEFAULT: usize = 100 * 1024 * 1024;
/// Batches the listener may work on at once.
pub const CONSUME_CONCURRENCY_DEFAULT: usize = 20;
/// Messages per listener call.
pub const CONSUME_BATCH_MAX_SIZE_DEFAULT: usize = 1;
/// The most messages per listener call.
pub const CONSUME_BATCH_MAX_SIZE_MAX: usize = 1024;
/// A listener call that takes longer counts as failed (RocketMQ's default).
pub const CONSUME_TIMEOUT_DEFAULT: Duration = Duration::from_secs(15 * 60);
/// The most reconsumes a consumer may allow (the broker's limit).
pub const MAX_RECONSUME_TIMES_MAX: u32 = rocketraft_domain::limits::RETRY_MAX_TIMES_MAX;
/// Topics one consumer may subscribe at most (a heartbeat carries them all).
pub const SUBSCRIPTIONS_MAX: usize = 1024;
/// Orderly: how long a queue pauses after a suspended batch (RocketMQ's default).
pub const SUSPEND_CURRENT_QUEUE_TIME_DEFAULT: Duration = Duration::from_secs(1);
/// Orderly: how often held queue locks are renewed (RocketMQ's default); never less often
/// than two thirds of how long the broker says a lock stays valid.
pub const LOCK_RENEW_INTERVAL_DEFAULT: Duration = Duration::from_secs(20);
/// Orderly: the maximum reconsume count until a broker says the group's.
const GROUP_MAX_RECONSUME_TIMES_DEFAULT: u32 = rocketraft_domain::limits::RETRY_MAX_TIMES_DEFAULT;

#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error("invalid consumer configuration: {0}")]
    InvalidConfig(String),
    #[error("invalid subscription: {0}")]
    InvalidSubscription(String),
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("no broker group serves topic {topic:?}")]
    NoBrokerGroup { topic: String },
    #[error("offset file {path:?}: {reason}")]
    OffsetFile { path: PathBuf, reason: String },
}

/// How a group's members share messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageModel {
    /// Each message goes to one member of the group; offsets live on the brokers.
    Clustering,
    /// Each member gets every message; each keeps its offsets in a local file.
    Broadcasting,
}

/// A push consumer's settings; see the builder's methods.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub nameservers: Vec<String>,
    pub group: String,
    /// topic -> subscription.
    pub subscriptions: BTreeMap<String, Subscription>,
    pub message_model: MessageModel,
    pub consume_from: ConsumeFrom,
    pub consume_concurrency: usize,
    pub consume_batch_max_size: usize,
    pub consume_timeout: Duration,
    pub pull_batch_size: u32,
    pub pull_hold: Duration,
    pub queue_buffer_count: usize,
    pub queue_buffer_bytes: usize,
    pub heartbeat_interval: Duration,
    pub rebalance_interval: Duration,
    pub persist_interval: Duration,
    pub route_ttl: Duration,
    /// Broadcasting only: where this client's offset file lives.
    pub offset_dir: PathBuf,
    /// Distinguishes clients of one process; part of the client id.
    pub instance_name: String,
    /// Reconsumes before the dead-letter topic; `None`: the group's setting on the broker.
    pub max_reconsume_times: Option<u32>,
    /// How connections to the brokers are opened (plain or TLS).
    pub connector: Connector,
    /// Orderly: how long a queue pauses after a suspended batch, unless the listener says.
    pub suspend_current_queue_time: Duration,
    /// Orderly: how often held queue locks are renewed.
    pub lock_renew_interval: Duration,
}

pub struct PushConsumerBuilder {
    config: ConsumerConfig,
    errors: Vec<String>,
}

impl PushConsumerBuilder {
    /// Subscribes `topic` with `"*"` or `"TagA || TagB"`.
    pub fn subscribe(self, topic: &str, expression: &str) -> PushConsumerBuilder {
        self.subscribe_parsed(topic, Subscription::parse(expression))
    }

    /// Subscribes `topic` with a SQL92 filter on message properties (RocketMQ's
    /// `MessageSelector.bySql`), such as `"TAGS IN ('A', 'B') AND price > 10"`; the broker
    /// selects the messages, and the client checks them again.
    pub fn subscribe_sql(self, topic: &str, expression: &str) -> PushConsumerBuilder {
        self.subscribe_parsed(topic, Subscription::sql(expression))
    }

    /// Subscribes `topic` with a subscription parsed already.
    pub fn subscribe_with(self, topic: &str, subscription: Subscription) -> PushConsumerBuilder {
        self.subscribe_parsed(topic, Ok(subscription))
    }

    fn subscribe_parsed(
        mut self,
        topic: &str,
        subscription: Result<Subscription, String>,
    ) -> PushConsumerBuilder {
        if let Err(error) = validate_topic_name(topic) {
            self.errors.push(error);
        }
        match subscription {
            Ok(subscription) => {
                self.config
                    .subscriptions
                    .insert(topic.to_owned(), subscription);
            }
            Err(error) => self.errors.push(error),
        }
        self
    }

    pub fn message_model(mut self, model: MessageModel) -> PushConsumerBuilder {
        self.config.message_model = model;
        self
    }

    pub fn consume_from(mut self, from: ConsumeFrom) -> PushConsumerBuilder {
        self.config.consume_from = from;
        self
    }

    pub fn consume_concurrency(mut self, batches: usize) -> PushConsumerBuilder {
        self.config.consume_concurrency = batches;
        self
    }

    pub fn consume_batch_max_size(mut self, messages: usize) -> PushConsumerBuilder {
        self.config.consume_batch_max_size = messages;
        self
    }

    pub fn consume_timeout(mut self, timeout: Duration) -> PushConsumerBuilder {
        self.config.consume_timeout = timeout;
        self
    }

    pub fn pull_batch_size(mut self, messages: u32) -> PushConsumerBuilder {
        self.config.pull_batch_size = messages;
        self
    }

    pub fn pull_hold(mut self, hold: Duration) -> PushConsumerBuilder {
        self.config.pull_hold = hold;
        self
    }

    /// Pulling a queue pauses while its buffer holds `count` messages or `bytes` bytes.
    pub fn queue_buffer(mut self, count: usize, bytes: usize) -> PushConsumerBuilder {
        self.config.queue_buffer_count = count;
        self.config.queue_buffer_bytes = bytes;
        self
    }

    pub fn heartbeat_interval(mut self, interval: Duration) -> PushConsumerBuilder {
        self.config.heartbeat_interval = interval;
        self
    }

    pub fn rebalance_interval(mut self, interval: Duration) -> PushConsumerBuilder {
        self.config.rebalance_interval = interval;
        self
    }

    pub fn persist_interval(mut self, interval: Duration) -> PushConsumerBuilder {
        self.config.persist_interval = interval;
        self
    }

    pub fn route_ttl(mut self, ttl: Duration) -> PushConsumerBuilder {
        self.config.route_ttl = ttl;
        self
    }

    pub fn offset_dir(mut self, dir: impl Into<PathBuf>) -> PushConsumerBuilder {
        self.config.offset_dir = dir.into();
        self
    }

    /// Reconsumes of a message before it goes to `%DLQ%<group>` (default: the group's
    /// setting on the broker, 16 unless changed).
    pub fn max_reconsume_times(mut self, times: u32) -> PushConsumerBuilder {
        self.config.max_reconsume_times = Some(times);
        self
    }

    /// Orderly: how long a queue pauses after a suspended batch, unless the listener sets
    /// it in its context (10 ms to 30 s).
    pub fn suspend_current_queue_time(mut self, suspend: Duration) -> PushConsumerBuilder {
        self.config.suspend_current_queue_time = suspend;
        self
    }

    /// Orderly: how often held queue locks are renewed.
    pub fn lock_renew_interval(mut self, interval: Duration) -> PushConsumerBuilder {
        self.config.lock_renew_interval = interval;
        self
    }

    /// Connects to the brokers over TLS, verifying them against `tls`'s CA.
    pub fn tls(mut self, tls: ClientTls) -> PushConsumerBuilder {
        self.config.connector = Connector::tls(tls);
        self
    }

    pub fn instance_name(mut self, name: impl Into<String>) -> PushConsumerBuilder {
        self.config.instance_name = name.into();
        self
    }

    /// Starts consuming with `listener`, called concurrently. Fails only on invalid
    /// settings; a cluster that is not reachable yet is retried in the background.
    pub async fn start(
        self,
        listener: impl MessageListener,
    ) -> Result<PushConsumer, ConsumerError> {
        self.start_with(Listener::Concurrently(Arc::new(listener)))
            .await
    }

    /// Starts consuming in order with `listener` (RocketMQ's `MessageListenerOrderly`): each
    /// queue is consumed by one member of the group at a time, the one holding its lock on
    /// the broker, one batch at a time in queue order. Messages of one sharding key sent
    /// with `Producer::send_ordered` arrive in the order they were sent.
    pub async fn start_orderly(
        self,
        listener: impl MessageListenerOrderly,
    ) -> Result<PushConsumer, ConsumerError> {
        self.start_with(Listener::Orderly(Arc::new(listener))).await
    }

    async fn start_with(self, listener: Listener) -> Result<PushConsumer, ConsumerError> {
        if let Some(error) = self.errors.first() {
            return Err(ConsumerError::InvalidSubscription(error.clone()));
        }
        let mut config = self.config;
        validate(&config)?;
        if config.message_model == MessageModel::Clustering {
            // Messages handed back come through the group's retry topic.
            config
                .subscriptions
                .insert(retry_topic(&config.group), Subscription::All);
        }
        let client_id = format!(
            "{}@{}",
            config.instance_name,
            UniqueIdGenerator::new().next_id()
        );
        let backend = match config.message_model {
            MessageModel::Clustering => OffsetBackend::Broker {
                consumer_group: config.group.clone(),
            },
            MessageModel::Broadcasting => OffsetBackend::LocalFile {
                path: config
                    .offset_dir
                    .join(&config.instance_name)
                    .join(&config.group)
                    .join("offsets.json"),
            },
        };
        let shared = Arc::new(Shared {
            brokers: Brokers::new(
                RouteCache::with_connector(
                    config.nameservers.clone(),
                    config.route_ttl,
                    config.connector.clone(),
                ),
                config.connector.clone(),
            ),
            offsets: OffsetStore::open(backend)?,
            consume_permits: Arc::new(Semaphore::new(config.consume_concurrency)),
            listener,
            group_max_reconsume_times: std::sync::Mutex::default(),
            lock_valid_ms: AtomicU64::new(0),
            client_id,
            rebalance_now: Notify::new(),
            shutdown: CancellationToken::new(),
            consume_tasks: TaskTracker::new(),
            assigned: std::sync::Mutex::default(),
            releasing: std::sync::Mutex::default(),
            lock_calls: tokio::sync::Mutex::default(),
            config,
        });
        tracing::info!(
            client_id = shared.client_id,
            group = shared.config.group,
            "push consumer starting"
        );
        let rebalancer = tokio::spawn(run_rebalance_loop(shared.clone(), Assignment::default()));
        tokio::spawn(membership::run_heartbeats(shared.clone()));
        tokio::spawn(run_offset_persister(shared.clone()));
        if shared.holds_locks() {
            tokio::spawn(queue_lock::run_lock_renewal(shared.clone()));
        }
        Ok(PushConsumer { shared, rebalancer })
    }
}

fn validate(config: &ConsumerConfig) -> Result<(), ConsumerError> {
    let invalid = |reason: String| Err(ConsumerError::InvalidConfig(reason));
    validate_group_name(&config.group).map_err(ConsumerError::InvalidConfig)?;
    if config.nameservers.is_empty() {
        return invalid("a consumer needs at least one nameserver".into());
    }
    if config.subscriptions.is_empty() {
        return Err(ConsumerError::InvalidSubscription(
            "subscribe to at least one topic before starting".into(),
        ));
    }
    if config.subscriptions.len() > SUBSCRIPTIONS_MAX {
        return Err(ConsumerError::InvalidSubscription(format!(
            "at most {SUBSCRIPTIONS_MAX} topics per consumer"
        )));
    }
    if config
        .max_reconsume_times
        .is_some_and(|times| times > MAX_RECONSUME_TIMES_MAX)
    {
        return invalid(format!(
            "max_reconsume_times is at most {MAX_RECONSUME_TIMES_MAX}"
        ));
    }
    if config.consume_concurrency == 0 {
        return invalid("consume_concurrency must be at least 1".into());
    }
    if !(1..=CONSUME_BATCH_MAX_SIZE_MAX).contains(&config.consume_batch_max_size) {
        return invalid(format!(
            "consume_batch_max_size must be 1 to {CONSUME_BATCH_MAX_SIZE_MAX}"
        ));
    }
    if !(1..=PULL_BATCH_SIZE_MAX).contains(&config.pull_batch_size) {
        return invalid(format!(
            "pull_batch_size must be 1 to {PULL_BATCH_SIZE_MAX}"
        ));
    }
    if config.pull_hold > PULL_HOLD_MAX {
        return invalid(format!("pull_hold is at most {PULL_HOLD_MAX:?}"));
    }
    if config.queue_buffer_count == 0 || config.queue_buffer_bytes == 0 {
        return invalid("a queue buffer holds at least one message and one byte".into());
    }
    for (name, interval) in [
        ("heartbeat_interval", config.heartbeat_interval),
        ("rebalance_interval", config.rebalance_interval),
        ("persist_interval", config.persist_interval),
        ("consume_timeout", config.consume_timeout),
        ("lock_renew_interval", config.lock_renew_interval),
    ] {
        if interval.is_zero() {
            return invalid(format!("{name} must be more than zero"));
        }
    }
    if !(SUSPEND_TIME_MIN..=SUSPEND_TIME_MAX).contains(&config.suspend_current_queue_time) {
        return invalid(format!(
            "suspend_current_queue_time must be {SUSPEND_TIME_MIN:?} to {SUSPEND_TIME_MAX:?}"
        ));
    }
    if config.instance_name.is_empty()
        || !config
            .instance_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return invalid(format!(
            "instance_name {:?} must be non-empty [A-Za-z0-9_.-]",
            config.instance_name
        ));
    }
    Ok(())
}

/// What the consumer's tasks share.
struct Shared {
    config: ConsumerConfig,
    client_id: String,
    brokers: Brokers,
    offsets: OffsetStore,
    listener: Listener,
    /// Orderly: the consumer group's maximum reconsume count in each broker group, as that
    /// group's leader last said (a group's config lives in each broker group).
    group_max_reconsume_times: std::sync::Mutex<HashMap<String, u32>>,
    /// Orderly: how long a lock grant stays valid, as the broker last said (0: not yet).
    lock_valid_ms: AtomicU64,
    consume_permits: Arc<Semaphore>,
    /// Set when a membership watch reports a change.
    rebalance_now: Notify,
    shutdown: CancellationToken,
    /// Listener calls in flight, waited for on shutdown.
    consume_tasks: TaskTracker,
    /// The queues the last rebalance assigned, sorted, for [`PushConsumer::assigned_queues`]
    /// and the lock renewal.
    assigned: std::sync::Mutex<Vec<(MessageQueue, Arc<ProcessQueue>)>>,
    /// Orderly: queues moved away whose last batch still runs (their locks are renewed).
    releasing: std::sync::Mutex<Vec<(MessageQueue, Arc<ProcessQueue>)>>,
    /// Orderly: held by a lock renewal from its snapshot of the queues to its last grant,
    /// and by every unlock, so a renewal in flight never locks again a queue just unlocked.
    lock_calls: tokio::sync::Mutex<()>,
}

impl Shared {
    /// This group's retry topic.
    fn retry_topic(&self) -> String {
        retry_topic(&self.config.group)
    }

    /// Orderly: the consumer group's maximum reconsume count in broker group `group`.
    fn group_max_reconsume_times(&self, group: &str) -> u32 {
        self.group_max_reconsume_times
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(group)
            .copied()
            .unwrap_or(GROUP_MAX_RECONSUME_TIMES_DEFAULT)
    }

    fn set_group_max_reconsume_times(&self, group: &str, times: u32) {
        let mut known = self
            .group_max_reconsume_times
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if known.get(group) != Some(&times) {
            known.insert(group.to_owned(), times);
        }
    }

    /// Whether this consumer locks its queues: orderly clustering consumers do.
    fn holds_locks(&self) -> bool {
        self.listener.is_orderly() && self.config.message_model == MessageModel::Clustering
    }

    fn assigned_processes(&self) -> Vec<(MessageQueue, Arc<ProcessQueue>)> {
        self.assigned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Orderly: the queues whose locks this client must keep: those it consumes and those
    /// whose last batch after a release still runs.
    fn locked_processes(&self) -> Vec<(MessageQueue, Arc<ProcessQueue>)> {
        let mut locked: Vec<_> = self
            .assigned_processes()
            .into_iter()
            .filter(|(_, process)| !process.is_dropped())
            .collect();
        locked.extend(
            self.releasing
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .iter()
                .filter(|(_, process)| !process.is_unlocked())
                .cloned(),
        );
        locked
    }

    /// Sleeps `duration`, or less if `process` is dropped or the consumer shuts down.
    async fn pause(&self, process: &ProcessQueue, duration: Duration) {
        tokio::select! {
            () = tokio::time::sleep(duration) => {}
            () = process.dropped() => {}
            () = self.shutdown.cancelled() => {}
        }
    }
}

fn retry_topic(group: &str) -> String {
    format!("{RETRY_TOPIC_PREFIX}{group}")
}

/// A running push consumer. Call [`PushConsumer::shutdown`] to stop it gracefully.
pub struct PushConsumer {
    shared: Arc<Shared>,
    rebalancer: JoinHandle<Assignment>,
}

impl PushConsumer {
    pub fn builder(nameservers: Vec<String>, group: impl Into<String>) -> PushConsumerBuilder {
        PushConsumerBuilder {
            config: ConsumerConfig {
                nameservers,
                group: group.into(),
                subscriptions: BTreeMap::new(),
                message_model: MessageModel::Clustering,
                consume_from: ConsumeFrom::Last,
                consume_concurrency: CONSUME_CONCURRENCY_DEFAULT,
                consume_batch_max_size: CONSUME_BATCH_MAX_SIZE_DEFAULT,
                consume_timeout: CONSUME_TIMEOUT_DEFAULT,
                pull_batch_size: PULL_BATCH_SIZE_DEFAULT,
                pull_hold: PULL_HOLD_DEFAULT,
                queue_buffer_count: QUEUE_BUFFER_COUNT_DEFAULT,
                queue_buffer_bytes: QUEUE_BUFFER_BYTES_DEFAULT,
                heartbeat_interval: HEARTBEAT_INTERVAL_DEFAULT,
                rebalance_interval: REBALANCE_INTERVAL_DEFAULT,
                persist_interval: PERSIST_INTERVAL_DEFAULT,
                route_ttl: ROUTE_TTL_DEFAULT,
                offset_dir: PathBuf::from(".rocketraft_offsets"),
                instance_name: "DEFAULT".into(),
                max_reconsume_times: None,
                connector: Connector::plain(),
                suspend_current_queue_time: SUSPEND_CURRENT_QUEUE_TIME_DEFAULT,
                lock_renew_interval: LOCK_RENEW_INTERVAL_DEFAULT,
            },
            errors: Vec::new(),
        }
    }

    /// This client's id in its group.
    pub fn client_id(&self) -> &str {
        &self.shared.client_id
    }

    /// The queues this client consumes now, sorted.
    pub fn assigned_queues(&self) -> Vec<MessageQueue> {
        self.shared
            .assigned_processes()
            .into_iter()
            .map(|(queue, _)| queue)
            .collect()
    }

    /// Stops pulling, waits for listener calls in flight, commits offsets and leaves the
    /// group, so the other members take its queues over at once.
    pub async fn shutdown(self) {
        let shared = self.shared;
        shared.shutdown.cancel();
        let assignment = self.rebalancer.await.unwrap_or_default();
        shared.consume_tasks.close();
        shared.consume_tasks.wait().await;
        for (queue, process) in &assignment.queues {
            // A dropped queue lost its lock: its offset was forgotten.
            if !process.is_dropped() {
                shared.offsets.update(queue, process.commit_offset());
            }
            process.drop_queue();
        }
        let committed = shared.offsets.persist_all(&shared.brokers).await;
        if let Err(error) = &committed {
            tracing::warn!(%error, "offsets not committed at shutdown");
        }
        // Unlocked only once committed: the next owner must not start from an older offset.
        if shared.holds_locks() && committed.is_ok() {
            for (queue, process) in assignment.queues.iter().chain(&assignment.releasing) {
                if let Err(error) = queue_lock::unlock(&shared, queue, Some(process)).await {
                    tracing::warn!(%queue, %error, "queue lock not released at shutdown; it expires");
                }
            }
        }
        if shared.config.message_model == MessageModel::Clustering {
            for group in shared.brokers.known_groups() {
                if let Err(error) = membership::unregister(&shared, &group).await {
                    tracing::warn!(group, %error, "could not leave the group");
                }
            }
        }
        tracing::info!(client_id = shared.client_id, "push consumer stopped");
    }
}

/// Commits moved offsets every `persist_interval`.
async fn run_offset_persister(shared: Arc<Shared>) {
    loop {
        tokio::select! {
            () = shared.shutdown.cancelled() => return,
            () = tokio::time::sleep(shared.config.persist_interval) => {}
        }
        if let Err(error) = shared.offsets.persist_all(&shared.brokers).await {
            tracing::warn!(%error, "committing offsets failed; retrying next round");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid config for group "g" subscribing "t".
    fn config() -> ConsumerConfig {
        PushConsumer::builder(vec!["127.0.0.1:9876".into()], "g")
            .subscribe("t", "*")
            .config
    }

    fn check(change: impl FnOnce(&mut ConsumerConfig)) -> Result<(), ConsumerError> {
        let mut config = config();
        change(&mut config);
        validate(&config)
    }

    #[test]
    fn limits_at_max_and_max_plus_one() {
        assert!(check(|_| {}).is_ok());
        assert!(check(|c| c.max_reconsume_times = Some(MAX_RECONSUME_TIMES_MAX)).is_ok());
        assert!(check(|c| c.max_reconsume_times = Some(MAX_RECONSUME_TIMES_MAX + 1)).is_err());
        assert!(check(|c| c.consume_batch_max_size = CONSUME_BATCH_MAX_SIZE_MAX).is_ok());
        assert!(check(|c| c.consume_batch_max_size = CONSUME_BATCH_MAX_SIZE_MAX + 1).is_err());
        assert!(check(|c| c.consume_batch_max_size = 0).is_err());
        assert!(check(|c| c.pull_batch_size = PULL_BATCH_SIZE_MAX).is_ok());
        assert!(check(|c| c.pull_batch_size = PULL_BATCH_SIZE_MAX + 1).is_err());
        assert!(check(|c| c.pull_hold = PULL_HOLD_MAX).is_ok());
        assert!(check(|c| c.pull_hold = PULL_HOLD_MAX + Duration::from_millis(1)).is_err());
        assert!(check(|c| c.consume_concurrency = 0).is_err());
        assert!(check(|c| c.queue_buffer_count = 0).is_err());
        assert!(check(|c| c.queue_buffer_bytes = 0).is_err());
        assert!(check(|c| c.persist_interval = Duration::ZERO).is_err());
        assert!(check(|c| c.instance_name = "a b".into()).is_err());
        let millis = Duration::from_millis(1);
        assert!(check(|c| c.suspend_current_queue_time = SUSPEND_TIME_MAX).is_ok());
        assert!(check(|c| c.suspend_current_queue_time = SUSPEND_TIME_MAX + millis).is_err());
        assert!(check(|c| c.suspend_current_queue_time = SUSPEND_TIME_MIN).is_ok());
        assert!(check(|c| c.suspend_current_queue_time = SUSPEND_TIME_MIN - millis).is_err());
        assert!(check(|c| c.lock_renew_interval = Duration::ZERO).is_err());
        assert!(check(|c| c.nameservers.clear()).is_err());
        let topics = |n: usize| -> BTreeMap<String, Subscription> {
            (0..n)
                .map(|i| (format!("t{i}"), Subscription::All))
                .collect()
        };
        assert!(check(|c| c.subscriptions = topics(SUBSCRIPTIONS_MAX)).is_ok());
        assert!(matches!(
            check(|c| c.subscriptions = topics(SUBSCRIPTIONS_MAX + 1)),
            Err(ConsumerError::InvalidSubscription(_))
        ));
        assert!(matches!(
            check(|c| c.subscriptions.clear()),
            Err(ConsumerError::InvalidSubscription(_))
        ));
    }
}
