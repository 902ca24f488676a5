//! The producer: sends messages to the writable queues of a topic across broker groups,
//! following routes from the nameservers.
//!
//! - Concurrent single sends to one queue share one `Send` request ([`SendLanes`]): under
//!   load a producer pays one RPC per batch, and a lone send still leaves at once.
//! - Queues are chosen round-robin over every group's write queues, or by a key's hash for
//!   ordered sends (same key, same queue, in send order).
//! - A send is retried (default 2 more times) after `NOT_LEADER`, an unavailable node, a
//!   transport failure or a group's `DISK_FULL`. Each attempt gets an equal share of the remaining deadline on one
//!   group, where [`Brokers`] follows leader hints and finds a new leader among the group's
//!   nodes with a growing pause; a failed attempt refreshes the route and prefers another
//!   group. Ordered sends stay on their queue.
//! - Invariant: a send reported OK is committed by a majority of its group. With the default
//!   3 s deadline an attempt gets 1 s, less than the broker's 2 s commit timeout, so a slow
//!   commit is sent again before its outcome is known. A retry therefore asks the leader to
//!   deduplicate (`SendRequest.deduplicate`): it stores a message only if the topic does not
//!   hold its `UNIQ_KEY` yet in that group. A retry that moves to another broker group
//!   (because the first failed) can still store a second copy there: at least once.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use rocketraft_domain::names::validate_group_name;
use rocketraft_domain::names::validate_topic_name;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common::ResponseCode;

use crate::brokers::Brokers;
use crate::brokers::CallError;
use crate::connector::ClientTls;
use crate::connector::Connector;
use crate::end_lanes::EndLanes;
use crate::error::ProducerError;
use crate::message::Message;
use crate::message::property::PGROUP;
use crate::message::property::TRAN_MSG;
use crate::message::property::UNIQ_KEY;
use crate::route::ROUTE_TTL_DEFAULT;
use crate::route::RouteCache;
use crate::route::RouteError;
use crate::route::TopicRoute;
use crate::send_lanes::SendLanes;
use crate::send_lanes::send_request;
use crate::transaction::CHECKS_ANSWERING_MAX;
use crate::transaction::CheckWatch;
use crate::transaction::END_TIMEOUT;
use crate::transaction::LocalTransactionState;
use crate::transaction::TransactionChecker;
use crate::transaction::TransactionEnd;
use crate::transaction::end_transaction;
use crate::transaction::run_check_watch;
use crate::unique_id::UniqueIdGenerator;
use rocketraft_domain::time::now_ms;
use tokio_util::sync::CancellationToken;

/// How long a send may take, all retries included.
pub const SEND_TIMEOUT_DEFAULT: Duration = Duration::from_secs(3);
/// Retries after the first attempt.
pub const SEND_RETRIES_DEFAULT: u32 = 2;

/// Where one sent message was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendResult {
    /// The message's `UNIQ_KEY`.
    pub msg_id: String,
    pub topic: String,
    pub group: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
    /// RocketMQ's offset message id (store host and commitlog offset).
    pub offset_msg_id: String,
}

pub struct ProducerBuilder {
    nameservers: Vec<String>,
    group: String,
    send_timeout: Duration,
    retries: u32,
    route_ttl: Duration,
    connector: Connector,
    checker: Option<Arc<dyn TransactionChecker>>,
    topics: Vec<String>,
}

impl ProducerBuilder {
    /// Answers the broker's check-backs of this producer group's unresolved transactions
    /// (see [`Producer::send_in_transaction`]); the producer watches every broker group it
    /// knows, those of [`ProducerBuilder::topics`] from the start. Build it inside a tokio
    /// runtime; the watch stops when the last clone of the producer is dropped.
    pub fn transaction_checker(mut self, checker: impl TransactionChecker) -> ProducerBuilder {
        self.checker = Some(Arc::new(checker));
        self
    }

    /// Topics this producer sends to, whose routes it looks up at once (RocketMQ 5's
    /// `setTopics`): a restarted transactional producer answers check-backs from their broker
    /// groups before it sends anything.
    pub fn topics(
        mut self,
        topics: impl IntoIterator<Item = impl Into<String>>,
    ) -> ProducerBuilder {
        self.topics = topics.into_iter().map(Into::into).collect();
        self
    }

    /// Connects to the brokers over TLS, verifying them against `tls`'s CA.
    pub fn tls(mut self, tls: ClientTls) -> ProducerBuilder {
        self.connector = Connector::tls(tls);
        self
    }

    pub fn send_timeout(mut self, timeout: Duration) -> ProducerBuilder {
        self.send_timeout = timeout;
        self
    }

    pub fn retries(mut self, retries: u32) -> ProducerBuilder {
        self.retries = retries;
        self
    }

    pub fn route_ttl(mut self, ttl: Duration) -> ProducerBuilder {
        self.route_ttl = ttl;
        self
    }

    pub fn build(self) -> Result<Producer, ProducerError> {
        validate_group_name(&self.group).map_err(ProducerError::InvalidRequest)?;
        if self.nameservers.is_empty() {
            return Err(ProducerError::InvalidRequest(
                "a producer needs at least one nameserver".into(),
            ));
        }
        // Ids name the address this client reaches its cluster from.
        let ids = UniqueIdGenerator::toward(&self.nameservers);
        let brokers = Arc::new(Brokers::new(
            RouteCache::with_connector(self.nameservers, self.route_ttl, self.connector.clone()),
            self.connector,
        ));
        let ends = Arc::new(EndLanes::new(brokers.clone(), END_TIMEOUT));
        let check_stop = match self.checker {
            None => None,
            Some(checker) => {
                let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
                    ProducerError::InvalidRequest(
                        "a producer with a transaction checker is built inside a tokio runtime"
                            .into(),
                    )
                })?;
                let stop = CancellationToken::new();
                let watch = CheckWatch {
                    brokers: brokers.clone(),
                    ends: ends.clone(),
                    producer_group: self.group.clone(),
                    client_id: format!("{}@{}", self.group, ids.next_id()),
                    checker,
                    topics: self.topics,
                    stop: stop.clone(),
                    answering: Arc::new(Semaphore::new(CHECKS_ANSWERING_MAX)),
                };
                runtime.spawn(run_check_watch(Arc::new(watch)));
                Some(stop)
            }
        };
        Ok(Producer {
            inner: Arc::new(Inner {
                check_stop,
                group: self.group,
                lanes: SendLanes::new(brokers.clone()),
                ends,
                brokers,
                ids,
                next_queue: AtomicUsize::new(0),
                send_timeout: self.send_timeout,
                retries: self.retries,
            }),
        })
    }
}

/// A producer; cheap to clone, and many sends may be in flight at once.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

struct Inner {
    group: String,
    brokers: Arc<Brokers>,
    lanes: SendLanes,
    ends: Arc<EndLanes>,
    ids: UniqueIdGenerator,
    next_queue: AtomicUsize,
    send_timeout: Duration,
    retries: u32,
    /// Stops the check-back watch of a producer with a transaction checker.
    check_stop: Option<CancellationToken>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(stop) = &self.check_stop {
            stop.cancel();
        }
    }
}

/// A transactional send: where its half message went, what the local transaction said, and
/// how the transaction ended on the broker (`None`: not ended yet; a check-back will).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionSendResult {
    pub send: SendResult,
    pub local_state: LocalTransactionState,
    pub end: Option<TransactionEnd>,
}

/// How a send picks its queue.
#[derive(Clone, Copy)]
enum Choice {
    RoundRobin,
    /// A key's hash: the same queue every time, never moved to another group.
    Keyed(u64),
}

impl Producer {
    pub fn builder(nameservers: Vec<String>, group: impl Into<String>) -> ProducerBuilder {
        ProducerBuilder {
            nameservers,
            group: group.into(),
            send_timeout: SEND_TIMEOUT_DEFAULT,
            retries: SEND_RETRIES_DEFAULT,
            route_ttl: ROUTE_TTL_DEFAULT,
            connector: Connector::plain(),
            checker: None,
            topics: Vec::new(),
        }
    }

    pub fn group(&self) -> &str {
        &self.inner.group
    }

    /// The broker groups this producer reaches, with its route cache and leader tracking:
    /// for a component that also calls brokers itself and should share what this producer
    /// learned (the RocketMQ 5.x endpoint).
    pub fn brokers(&self) -> &Arc<Brokers> {
        &self.inner.brokers
    }

    /// `topic`'s route as this producer sends by it (cached, refreshed after failures).
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>, ProducerError> {
        Ok(self.inner.brokers.route(topic).await?)
    }

    /// Sends one message and waits until a majority of its group has it. Concurrent sends to
    /// one queue share a request ([`SendLanes`]). The message's id (`UNIQ_KEY`) is made here
    /// unless it carries one as a property already.
    pub async fn send(&self, message: Message) -> Result<SendResult, ProducerError> {
        self.send_one(message, Choice::RoundRobin, &SendOptions::default())
            .await
    }

    /// [`Producer::send`] with `options`: the queue an order key hashes to (as
    /// [`Producer::send_ordered`]), and the born time and host of a message this producer
    /// forwards for another client. Shares a request with concurrent sends as `send` does.
    pub async fn send_with(
        &self,
        message: Message,
        options: SendOptions,
    ) -> Result<SendResult, ProducerError> {
        self.send_one(message, options.choice(), &options).await
    }

    /// Sends to the queue `key` hashes to, so messages with one key stay in order. The queue
    /// depends only on the key and the topic's groups and write queue counts (a stable hash
    /// and rendezvous hashing, [`TopicRoute::keyed_queue`]), so every producer, of any build,
    /// picks the same one, and a group leaving or joining the route moves only its own keys.
    pub async fn send_ordered(
        &self,
        message: Message,
        key: &str,
    ) -> Result<SendResult, ProducerError> {
        self.send_one(message, keyed(key), &SendOptions::default())
            .await
    }

    /// Sends `message` as a transaction's half message, invisible to consumers; runs
    /// `execute` (the local transaction) with where it was stored; then commits the message
    /// (visible, after its delay or timer if it has one, counted from the commit) or rolls
    /// it back, as `execute` says. With [`LocalTransactionState::Unknown`], or if ending it
    /// fails, the broker checks the transaction back with this producer group's
    /// [`TransactionChecker`] later (after 6 s by default, then every minute, 15 times).
    pub async fn send_in_transaction<F, Fut>(
        &self,
        message: Message,
        execute: F,
    ) -> Result<TransactionSendResult, ProducerError>
    where
        F: FnOnce(SendResult) -> Fut,
        Fut: Future<Output = LocalTransactionState>,
    {
        let half = message
            .with_property(TRAN_MSG, "true")
            .with_property(PGROUP, self.inner.group.clone());
        let send = self.send(half).await?;
        let local_state = execute(send.clone()).await;
        let ended = self
            .end_transaction(
                &send.group,
                &send.msg_id,
                send.commit_log_offset,
                local_state,
                false,
            )
            .await;
        let end = match ended {
            Ok(end) => end,
            Err(error) => {
                tracing::warn!(msg_id = send.msg_id, %error, "ending the transaction failed; the broker will check it back");
                None
            }
        };
        Ok(TransactionSendResult {
            send,
            local_state,
            end,
        })
    }

    /// Ends the transaction of half message `msg_id`, sent by this producer group and stored
    /// at `commit_log_offset` in broker group `group`, with `state` (an answer to a check-back
    /// if `from_check`): `None` for [`LocalTransactionState::Unknown`] (nothing is sent, the
    /// broker checks back later), else how the transaction ended (by this end or an earlier
    /// one). For a half message sent outside [`Producer::send_in_transaction`]: with
    /// `TRAN_MSG=true` and this producer's group as `PGROUP`.
    pub async fn end_transaction(
        &self,
        group: &str,
        msg_id: &str,
        commit_log_offset: i64,
        state: LocalTransactionState,
        from_check: bool,
    ) -> Result<Option<TransactionEnd>, CallError> {
        end_transaction(
            &self.inner.ends,
            &self.inner.group,
            group,
            msg_id,
            commit_log_offset,
            state,
            from_check,
        )
        .await
    }

    /// Sends messages of one topic together, to one queue, in one Raft entry.
    pub async fn send_batch(
        &self,
        messages: Vec<Message>,
    ) -> Result<Vec<SendResult>, ProducerError> {
        self.send_batch_with(messages, SendOptions::default()).await
    }

    /// [`Producer::send_batch`] with `options`: the queue an order key hashes to, and the
    /// born time and host of messages this producer forwards for another client.
    pub async fn send_batch_with(
        &self,
        messages: Vec<Message>,
        options: SendOptions,
    ) -> Result<Vec<SendResult>, ProducerError> {
        let Some(first) = messages.first() else {
            return Err(ProducerError::InvalidRequest(
                "a batch holds at least one message".into(),
            ));
        };
        if messages.iter().any(|message| message.topic != first.topic) {
            return Err(ProducerError::InvalidRequest(
                "a batch goes to one topic".into(),
            ));
        }
        let topic = first.topic.clone();
        let inner = &self.inner;
        let ids: Vec<String> = messages
            .iter()
            .map(|message| unique_id(message, &inner.ids))
            .collect();
        let choice = options.choice();
        let born_host = options
            .born_host
            .map_or_else(String::new, |host| host.to_string());
        let wire: Vec<_> = messages
            .iter()
            .zip(&ids)
            .map(|(message, id)| message.to_wire(id))
            .collect();
        let (group, results) = self
            .deliver(&topic, choice, |group, queue_id, attempt| {
                let request = pb::SendRequest {
                    topic: topic.clone(),
                    queue_id,
                    messages: wire.clone(),
                    born_timestamp_ms: options.born_timestamp_ms.unwrap_or_else(now_ms),
                    born_host: born_host.clone(),
                    deduplicate: attempt.retry,
                    queue_ids: Vec::new(),
                };
                let deadline = attempt.deadline;
                async move {
                    let response =
                        send_request(&inner.brokers, group.name(), &request, deadline).await?;
                    Ok((group, response.results))
                }
            })
            .await?;
        if results.len() != ids.len() {
            return Err(ProducerError::InvalidRequest(format!(
                "the broker returned {} results for {} messages",
                results.len(),
                ids.len()
            )));
        }
        Ok(results
            .into_iter()
            .zip(ids)
            .map(|(result, id)| to_result(result, id, &topic, group.name()))
            .collect())
    }

    /// Sends without waiting for the outcome; a failure is only logged.
    pub fn send_oneway(&self, message: Message) {
        let producer = self.clone();
        tokio::spawn(async move {
            if let Err(error) = producer.send(message).await {
                tracing::warn!(%error, "one-way send failed");
            }
        });
    }

    /// Sends one message through its queue's send lane; `options` give its born time and
    /// host, if not now and this producer (the queue is `choice`).
    async fn send_one(
        &self,
        message: Message,
        choice: Choice,
        options: &SendOptions,
    ) -> Result<SendResult, ProducerError> {
        let inner = &self.inner;
        let id = unique_id(&message, &inner.ids);
        let mut wire = message.to_wire(&id);
        wire.born_timestamp_ms = options.born_timestamp_ms.unwrap_or(0);
        if let Some(host) = options.born_host {
            wire.born_host = host.to_string();
        }
        let topic = message.topic;
        let (group, result) = self
            .deliver(&topic, choice, |group, queue_id, attempt| {
                let wire = wire.clone();
                let topic = &topic;
                async move {
                    let result = inner
                        .lanes
                        .send(group.name(), topic, queue_id, wire, attempt)
                        .await?;
                    Ok((group, result))
                }
            })
            .await?;
        Ok(to_result(result, id, &topic, group.name()))
    }

    /// Runs `attempt` on a queue of `topic` until it succeeds, is refused, or the retries or
    /// the send timeout run out; a failed attempt refreshes the route and prefers another
    /// broker group. `attempt` gets the group (a share of the route, no copy of its name),
    /// the queue id and the [`Attempt`].
    async fn deliver<T, F, Fut>(
        &self,
        topic: &str,
        choice: Choice,
        mut attempt: F,
    ) -> Result<T, ProducerError>
    where
        F: FnMut(RouteGroup, i32, Attempt) -> Fut,
        Fut: Future<Output = Result<T, CallError>>,
    {
        let inner = &self.inner;
        validate_topic_name(topic).map_err(ProducerError::TopicIllegal)?;
        let deadline = Instant::now() + inner.send_timeout;
        let mut avoid_group: Option<String> = None;
        let mut last_error = None;
        let attempts = inner.retries + 1;
        let mut route = inner.brokers.route(topic).await?;
        let mut attempts_made = 0;
        for attempt_index in 0..attempts {
            if attempt_index > 0 {
                // A fresher route, if the nameservers give one before the send's deadline;
                // otherwise the retry goes by the route known (the groups' leaders are found
                // by asking their nodes when the route's is suspected).
                match tokio::time::timeout_at(deadline, inner.brokers.refresh(topic)).await {
                    Ok(Ok(fresh)) => route = fresh,
                    Ok(Err(error @ RouteError::NoRoute { .. })) => return Err(error.into()),
                    Ok(Err(error @ RouteError::NameserversUnavailable { .. })) => {
                        tracing::debug!(%error, "retrying by the route known");
                    }
                    Err(_elapsed) => {}
                }
            }
            let (group_index, queue_id) =
                pick_queue(&route, choice, avoid_group.as_deref(), &inner.next_queue).ok_or_else(
                    || ProducerError::NoRoute {
                        topic: topic.to_owned(),
                    },
                )?;
            let name = &route.groups[group_index].group;
            let group = RouteGroup {
                route: route.clone(),
                index: group_index,
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            let this_attempt = Attempt {
                deadline: Instant::now() + remaining / (attempts - attempt_index),
                retry: attempt_index > 0,
            };
            attempts_made += 1;
            match attempt(group, queue_id, this_attempt).await {
                Ok(value) => return Ok(value),
                // This group's disk is full; another group may take the message.
                Err(CallError::Rejected { status, .. })
                    if rocketraft_proto::response_code(&status) == Some(ResponseCode::DiskFull) =>
                {
                    last_error = Some(format!("{name}: {}", status.message()));
                }
                Err(CallError::Rejected { status, .. }) => {
                    return Err(ProducerError::from_rejection(&status, topic, name));
                }
                Err(CallError::Unavailable {
                    last_error: error, ..
                }) => last_error = Some(format!("{name}: {error}")),
            }
            avoid_group = Some(name.clone());
        }
        Err(ProducerError::AllGroupsUnavailable {
            attempts: attempts_made,
            last_error: last_error
                .unwrap_or_else(|| "the send timed out before its first attempt".to_owned()),
        })
    }
}

/// How [`Producer::send_with`] and [`Producer::send_batch_with`] send; the default is what
/// `send` and `send_batch` do.
#[derive(Debug, Clone, Default)]
pub struct SendOptions {
    /// Send to the queue this key hashes to (as [`Producer::send_ordered`]), not round-robin.
    pub order_key: Option<String>,
    /// When the messages were born; default: now.
    pub born_timestamp_ms: Option<i64>,
    /// Where they were born; default: this producer's address as the broker sees it.
    pub born_host: Option<SocketAddr>,
}

impl SendOptions {
    fn choice(&self) -> Choice {
        self.order_key.as_deref().map_or(Choice::RoundRobin, keyed)
    }
}

/// The queue choice of messages ordered by `key`.
fn keyed(key: &str) -> Choice {
    Choice::Keyed(rocketraft_domain::stable_hash::fnv1a_64(key.as_bytes()))
}

/// A message's `UNIQ_KEY`: the one it carries as a property (a producer that made its own
/// id, as RocketMQ's clients keep one already set), else a new one.
fn unique_id(message: &Message, ids: &UniqueIdGenerator) -> String {
    match message.properties.get(UNIQ_KEY) {
        Some(id) => id.clone(),
        None => ids.next_id(),
    }
}

/// One attempt of a send.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempt {
    pub deadline: Instant,
    /// An earlier attempt may have stored the messages: the leader stores each only if its
    /// topic does not hold its `UNIQ_KEY` yet (`SendRequest.deduplicate`).
    pub retry: bool,
}

/// The queue to send to: round-robin over all write queues, skipping `avoid_group` while
/// another group has queues; or the queue a key hashes to.
fn pick_queue(
    route: &TopicRoute,
    choice: Choice,
    avoid_group: Option<&str>,
    next_queue: &AtomicUsize,
) -> Option<(usize, i32)> {
    let count = route.write_queue_count();
    if count == 0 {
        return None;
    }
    match choice {
        Choice::Keyed(hash) => route.keyed_queue(hash),
        Choice::RoundRobin => {
            let start = next_queue.fetch_add(1, Ordering::Relaxed);
            (0..count)
                .filter_map(|step| route.write_queue((start + step) % count))
                .find(|(group, _)| Some(route.groups[*group].group.as_str()) != avoid_group)
                .or_else(|| route.write_queue(start % count))
        }
    }
}

/// A broker group of a topic's route, as a send attempt gets it: a share of the route and
/// the group's place in it, so an attempt copies no group name.
struct RouteGroup {
    route: Arc<TopicRoute>,
    index: usize,
}

impl RouteGroup {
    pub fn name(&self) -> &str {
        &self.route.groups[self.index].group
    }
}

fn to_result(result: pb::SendResult, msg_id: String, topic: &str, group: &str) -> SendResult {
    SendResult {
        msg_id,
        topic: topic.to_owned(),
        group: group.to_owned(),
        queue_id: result.queue_id,
        queue_offset: result.queue_offset,
        commit_log_offset: result.commit_log_offset,
        offset_msg_id: result.offset_msg_id,
    }
}

#[cfg(test)]
mod tests {
    use rocketraft_domain::perm::PERM_READ_WRITE;

    use super::*;
    use crate::route::test_group;

    fn route(groups: &[(&str, u32)]) -> TopicRoute {
        let groups = groups
            .iter()
            .map(|(name, queues)| test_group(name, *queues, PERM_READ_WRITE))
            .collect();
        TopicRoute::new("T".into(), groups)
    }

    #[test]
    fn a_message_keeps_the_unique_id_it_carries() {
        let ids = UniqueIdGenerator::new();
        let own = Message::new("T", "b").with_property(UNIQ_KEY, "made-by-the-app");
        assert_eq!(unique_id(&own, &ids), "made-by-the-app");
        let plain = Message::new("T", "b");
        assert_ne!(unique_id(&plain, &ids), unique_id(&plain, &ids), "new ids");
    }

    #[test]
    fn round_robin_visits_every_write_queue_once_per_cycle() {
        let route = route(&[("a", 2), ("b", 3)]);
        let next = AtomicUsize::new(0);
        let picked: Vec<_> = (0..10)
            .map(|_| pick_queue(&route, Choice::RoundRobin, None, &next))
            .collect();
        let cycle = [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)].map(Some);
        assert_eq!(picked[..5], cycle);
        assert_eq!(picked[5..], cycle);
    }

    #[test]
    fn a_retry_avoids_the_failed_group_while_another_has_queues() {
        let route = route(&[("a", 2), ("b", 1)]);
        let next = AtomicUsize::new(0);
        for _ in 0..6 {
            let (group, _) =
                pick_queue(&route, Choice::RoundRobin, Some("a"), &next).expect("a queue");
            assert_eq!(route.groups[group].group, "b");
        }
        let only_a = self::route(&[("a", 2)]);
        assert_eq!(
            pick_queue(&only_a, Choice::RoundRobin, Some("a"), &next).map(|(g, _)| g),
            Some(0),
            "the failed group is used when it is the only one"
        );
    }

    #[test]
    fn a_key_always_picks_the_same_queue() {
        let route = route(&[("a", 2), ("b", 3)]);
        let next = AtomicUsize::new(0);
        let first = pick_queue(&route, Choice::Keyed(7), Some("b"), &next);
        for _ in 0..5 {
            assert_eq!(
                pick_queue(&route, Choice::Keyed(7), None, &next),
                first,
                "ordered sends stay on their queue, whatever failed before"
            );
        }
        assert!(first.is_some());
        assert_eq!(
            pick_queue(&self::route(&[]), Choice::Keyed(7), None, &next),
            None
        );
    }

    /// The queue of each key, as (group name, queue id).
    fn placements(route: &TopicRoute, keys: u64) -> Vec<(String, i32)> {
        let next = AtomicUsize::new(0);
        (0..keys)
            .map(|key| {
                let hash = rocketraft_domain::stable_hash::fnv1a_64(&key.to_be_bytes());
                let (group, queue) =
                    pick_queue(route, Choice::Keyed(hash), None, &next).expect("a queue");
                (route.groups[group].group.clone(), queue)
            })
            .collect()
    }

    #[test]
    fn keys_stay_on_their_queue_when_other_groups_leave_or_join() {
        let all = placements(&route(&[("a", 4), ("b", 4), ("c", 8)]), 3000);
        for group in ["a", "b", "c"] {
            let share = all.iter().filter(|(g, _)| g == group).count();
            assert!(
                (700..=1300).contains(&share),
                "{group} takes {share} of 3000 keys"
            );
        }
        let without_b = placements(&route(&[("a", 4), ("c", 8)]), 3000);
        for (before, after) in all.iter().zip(&without_b) {
            if before.0 != "b" {
                assert_eq!(before, after, "a key of a or c stays when b leaves");
            }
        }
        let with_d = placements(&route(&[("a", 4), ("b", 4), ("c", 8), ("d", 4)]), 3000);
        for (before, after) in all.iter().zip(&with_d) {
            assert!(before == after || after.0 == "d", "only keys d takes move");
        }
    }
}
