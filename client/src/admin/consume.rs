//! `mqadmin consume`: read a topic as a consumer group, for inspection and drills.
//!
//! It pulls every queue of the topic from the group's committed offsets (or `from` where
//! there are none) and, so that handed-back messages come back, the group's retry topic from
//! its first offset; it commits how far it read when done. With `reconsume_later = N` it
//! refuses each message while its reconsume count is below `N`, handing it back with
//! `SendMessageBack` as a push consumer would, and reports that delivery too.
//!
//! A leader change under way does not end it: a call the old leader refuses as retryable
//! (not the leader, cut off from its quorum, gone) is made again on the group's new leader,
//! from the offset of the first message not yet handled, until the deadline (commits get
//! [`LEADER_CHANGE_WAIT`] more).

use std::time::Duration;

use rocketraft_proto::broker as broker_pb;
use rocketraft_proto::broker::broker_client::BrokerClient;
use serde::Serialize;
use tonic::transport::Channel;

use crate::admin::Admin;
use crate::admin::AdminError;
use crate::admin::ConsumeFrom;
use crate::consumer::consume_from::start_offset;
use crate::group::BrokerGroupClient;
use crate::group::is_retryable;
use crate::message::DLQ_TOPIC_PREFIX;
use crate::message::MessageExt;
use crate::message::RETRY_TOPIC_PREFIX;
use crate::subscription::Subscription;

/// Messages pulled per queue and round.
const CONSUME_PULL_BATCH: u32 = 32;
/// How long a pull waits for messages when a round found none.
const CONSUME_PULL_WAIT_MS: u32 = 200;
/// How long the final commits keep following a leader change of their group.
const LEADER_CHANGE_WAIT: Duration = Duration::from_secs(5);
/// Pause before asking a group for its leader again after a retryable refusal.
const LEADER_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What to read and how.
#[derive(Debug, Clone)]
pub struct ConsumeRequest {
    pub topic: String,
    pub consumer_group: String,
    pub subscription: Subscription,
    /// Where a queue without a committed offset starts.
    pub from: ConsumeFrom,
    /// Stop after this many consumed (not refused) messages.
    pub count: usize,
    pub timeout: Duration,
    /// Refuse each message while its reconsume count is below this.
    pub reconsume_later: i32,
}

/// What became of a message `mqadmin` printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryResult {
    Consumed,
    /// Refused and handed back (`consume --reconsume-later`).
    ReconsumeLater,
    /// Suspended by an orderly consumer (`consume --orderly --reconsume-later`): it comes
    /// again, before anything after it in its queue.
    Suspended,
    /// Found by `query-msg`, not consumed.
    Stored,
}

/// One delivery, as `mqadmin consume` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConsumedMessage {
    pub topic: String,
    pub group: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub msg_id: String,
    pub tags: Option<String>,
    pub keys: Option<String>,
    pub body: String,
    pub reconsume_times: i32,
    pub born_timestamp_ms: i64,
    pub store_timestamp_ms: i64,
    pub result: DeliveryResult,
}

/// Every delivery so far, and how many were consumed (not refused).
#[derive(Default)]
struct Delivered {
    all: Vec<ConsumedMessage>,
    consumed: usize,
}

/// One queue being read.
struct Cursor {
    group: String,
    nodes: BrokerGroupClient,
    /// The group's leader, as last found.
    client: BrokerClient<Channel>,
    topic: String,
    queue_id: i32,
    offset: i64,
}

impl Admin {
    /// Reads as `request.consumer_group` until `count` messages were consumed or the timeout
    /// passes; returns every delivery (refused ones included) and commits how far it read.
    pub async fn consume(
        &self,
        request: &ConsumeRequest,
    ) -> Result<Vec<ConsumedMessage>, AdminError> {
        let deadline = tokio::time::Instant::now() + request.timeout;
        let retry_topic = format!("{RETRY_TOPIC_PREFIX}{}", request.consumer_group);
        let mut cursors = self.cursors(request, &request.topic, request.from).await?;
        let mut retry_cursors_open = false;
        let mut delivered = Delivered::default();
        let mut wait_ms = 0;
        while delivered.consumed < request.count && tokio::time::Instant::now() < deadline {
            if !retry_cursors_open {
                match self
                    .cursors(request, &retry_topic, ConsumeFrom::First)
                    .await
                {
                    Ok(retry) => {
                        cursors.extend(retry);
                        retry_cursors_open = true;
                    }
                    Err(AdminError::NoRoute(_)) => {}
                    Err(error) => return Err(error),
                }
            }
            let mut found_any = false;
            for cursor in &mut cursors {
                let before = cursor.offset;
                let done = match self
                    .read_once(request, cursor, wait_ms, &mut delivered)
                    .await
                {
                    Ok(done) => done,
                    Err(error) => {
                        cursor.follow_leader(error, deadline).await?;
                        false
                    }
                };
                found_any |= cursor.offset > before;
                if done {
                    break;
                }
            }
            wait_ms = if found_any { 0 } else { CONSUME_PULL_WAIT_MS };
        }
        let commits_deadline = tokio::time::Instant::now() + LEADER_CHANGE_WAIT;
        for cursor in &mut cursors {
            while let Err(error) = cursor.commit(&request.consumer_group).await {
                cursor.follow_leader(error, commits_deadline).await?;
            }
        }
        Ok(delivered.all)
    }

    /// One pull of `cursor`'s queue; true once `count` messages were consumed.
    async fn read_once(
        &self,
        request: &ConsumeRequest,
        cursor: &mut Cursor,
        wait_ms: u32,
        delivered: &mut Delivered,
    ) -> Result<bool, AdminError> {
        let refused = |status| AdminError::Refused {
            group: cursor.group.clone(),
            status,
        };
        let retry = cursor.topic.starts_with(RETRY_TOPIC_PREFIX);
        let pull = broker_pb::PullRequest {
            group: request.consumer_group.clone(),
            topic: cursor.topic.clone(),
            queue_id: cursor.queue_id,
            queue_offset: cursor.offset,
            max_messages: CONSUME_PULL_BATCH,
            // The retry topic holds every tag the group refused.
            tags: if retry {
                Vec::new()
            } else {
                request.subscription.tags()
            },
            max_wait_ms: wait_ms,
            sql: if retry {
                String::new()
            } else {
                request.subscription.sql_text()
            },
            stored_records: false,
        };
        let response = cursor
            .client
            .pull(pull)
            .await
            .map_err(refused)?
            .into_inner();
        for pulled in response.messages {
            if delivered.consumed >= request.count {
                return Ok(true);
            }
            let message = MessageExt::from_pulled(pulled, &cursor.group);
            let next_offset = message.queue_offset + 1;
            if !retry && !request.subscription.matches(&message) {
                cursor.offset = next_offset;
                continue;
            }
            let result = if message.reconsume_times < request.reconsume_later {
                let back = broker_pb::SendMessageBackRequest {
                    group: request.consumer_group.clone(),
                    commit_log_offset: message.commit_log_offset,
                    delay_level: 0,
                    max_reconsume_times: 0,
                    deduplicate: false,
                };
                // The cursor's client is the group leader's, where send-back must go.
                cursor
                    .client
                    .send_message_back(back)
                    .await
                    .map_err(refused)?;
                DeliveryResult::ReconsumeLater
            } else {
                delivered.consumed += 1;
                DeliveryResult::Consumed
            };
            delivered.all.push(ConsumedMessage::new(message, result));
            // Only now: a hand-back that failed is made again from this message.
            cursor.offset = next_offset;
        }
        // Units the broker skipped by hash need no second look.
        cursor.offset = cursor.offset.max(response.next_offset);
        Ok(delivered.consumed >= request.count)
    }

    /// A cursor per queue of `topic`, at the group's committed offset or where `from` says.
    async fn cursors(
        &self,
        request: &ConsumeRequest,
        topic: &str,
        from: ConsumeFrom,
    ) -> Result<Vec<Cursor>, AdminError> {
        let route = self.topic_route(topic).await?;
        let mut cursors = Vec::new();
        for queues in &route.queues {
            let Some(group_route) = route.groups.iter().find(|g| g.group == queues.group) else {
                continue;
            };
            let refused = |status| AdminError::Refused {
                group: queues.group.clone(),
                status,
            };
            let nodes = self.group_client(group_route);
            let leader = nodes.leader().await.map_err(|source| AdminError::Group {
                group: queues.group.clone(),
                source,
            })?;
            for queue_id in 0..queues.read_queue_count as i32 {
                let mut client = leader.clone();
                let query = broker_pb::QueryOffsetRequest {
                    group: request.consumer_group.clone(),
                    topic: topic.to_owned(),
                    queue_id,
                };
                let committed = client
                    .query_offset(query)
                    .await
                    .map_err(refused)?
                    .into_inner()
                    .offset;
                let offset = match committed {
                    Some(offset) => offset,
                    None => start_offset(&mut client, topic, queue_id, from)
                        .await
                        .map_err(refused)?,
                };
                cursors.push(Cursor {
                    group: queues.group.clone(),
                    nodes: nodes.clone(),
                    client,
                    topic: topic.to_owned(),
                    queue_id,
                    offset,
                });
            }
        }
        Ok(cursors)
    }
}

impl Cursor {
    /// Commits how far this cursor read.
    async fn commit(&mut self, consumer_group: &str) -> Result<(), AdminError> {
        let commit = broker_pb::CommitOffsetsRequest {
            group: consumer_group.to_owned(),
            offsets: vec![broker_pb::QueueOffsetEntry {
                topic: self.topic.clone(),
                queue_id: self.queue_id,
                offset: self.offset,
            }],
        };
        self.client
            .commit_offsets(commit)
            .await
            .map_err(|status| AdminError::Refused {
                group: self.group.clone(),
                status,
            })?;
        Ok(())
    }

    /// After `error`, connects to the group's leader again if the refusal was retryable
    /// and `give_up_at` has not passed; otherwise returns `error`.
    async fn follow_leader(
        &mut self,
        error: AdminError,
        give_up_at: tokio::time::Instant,
    ) -> Result<(), AdminError> {
        let AdminError::Refused { status, .. } = &error else {
            return Err(error);
        };
        if !is_retryable(status) || tokio::time::Instant::now() >= give_up_at {
            return Err(error);
        }
        tracing::info!(group = %self.group, %status, "following a leader change");
        tokio::time::sleep(LEADER_RETRY_PAUSE).await;
        // No leader yet is the next round's concern; the deadline bounds the rounds.
        if let Ok(client) = self.nodes.leader().await {
            self.client = client;
        }
        Ok(())
    }
}

impl Admin {
    /// Up to `count` messages of `%DLQ%<group>` in every broker group, oldest first; nothing
    /// is committed.
    pub async fn dlq_list(
        &self,
        consumer_group: &str,
        count: usize,
    ) -> Result<Vec<ConsumedMessage>, AdminError> {
        let request = ConsumeRequest {
            topic: format!("{DLQ_TOPIC_PREFIX}{consumer_group}"),
            consumer_group: consumer_group.to_owned(),
            subscription: Subscription::All,
            from: ConsumeFrom::First,
            count,
            timeout: Duration::ZERO,
            reconsume_later: 0,
        };
        let mut listed = Delivered::default();
        for mut cursor in self
            .cursors(&request, &request.topic, ConsumeFrom::First)
            .await?
        {
            // Peek from the start, whatever the group committed.
            cursor.offset = start_offset(
                &mut cursor.client,
                &request.topic,
                cursor.queue_id,
                ConsumeFrom::First,
            )
            .await
            .map_err(|status| AdminError::Refused {
                group: cursor.group.clone(),
                status,
            })?;
            loop {
                let before = cursor.offset;
                if self
                    .read_once(&request, &mut cursor, 0, &mut listed)
                    .await?
                    || cursor.offset == before
                {
                    break;
                }
            }
        }
        Ok(listed.all)
    }
}

impl ConsumedMessage {
    /// How `mqadmin` prints `message` with what became of it.
    pub fn new(message: MessageExt, result: DeliveryResult) -> ConsumedMessage {
        ConsumedMessage {
            keys: (!message.keys.is_empty()).then(|| message.keys.join(" ")),
            msg_id: message.msg_id,
            tags: message.tags,
            topic: message.topic,
            group: message.group,
            queue_id: message.queue_id,
            queue_offset: message.queue_offset,
            body: String::from_utf8_lossy(&message.body).into_owned(),
            reconsume_times: message.reconsume_times,
            born_timestamp_ms: message.born_timestamp_ms,
            store_timestamp_ms: message.store_timestamp_ms,
            result,
        }
    }
}
