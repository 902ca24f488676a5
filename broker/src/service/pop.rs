//! `Pop` and `ChangePopped`: pop consumption on the leader (RocketMQ 5.x's consumers, through
//! the 5.x endpoint), over the replicated [`crate::pop::state`].
//!
//! A pop names one queue or, as RocketMQ 5.x's proxy does, any queue of the topic
//! (`POP_ANY_QUEUE`): then it tries the readable queues in turn, each queue's pop a commit of
//! its own, until it has its count or the response's byte budget is spent, and an empty one
//! waits on all of them.
//!
//! A pop of a queue takes first the group's in-flight messages whose invisibility ended
//! (delivered again, one attempt more; past the group's last attempt, `retry_max_times + 1`,
//! moved to `%DLQ%<group>` in the same entry instead), then fresh ones past the group's pop
//! offset, filtered
//! like a pull (a tag subscription also checks the tag string, so what a pop returns matches
//! exactly), and proposes them as one `Pop` entry; it returns what that entry delivered, so
//! a message is never handed out by a pop that did not commit. Pops of one queue take turns
//! on the leader, so they do not undo each other's compare-and-set. An orderly (FIFO) group's
//! queue delivers nothing new while messages of it are in flight, and delivers again only
//! its oldest in-flight messages that are due. An empty pop waits
//! (long polling) for a message to arrive or an invisibility to end.
//!
//! Acks and invisibility changes go through Raft as one `PopChange` entry per request; a
//! consumer giving up on a message (`dead_letter`) is one `PopDeadLetter` entry: the ack and
//! the copy in `%DLQ%<group>` land together or not at all.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use rocketraft_domain::limits::POP_BATCH_COUNT_MAX;
use rocketraft_domain::limits::POP_CHANGE_INVISIBLE_MS_MIN as CHANGE_INVISIBLE_MS_MIN;
use rocketraft_domain::limits::POP_INVISIBLE_MS_MAX as INVISIBLE_MS_MAX;
use rocketraft_domain::limits::POP_INVISIBLE_MS_MIN as INVISIBLE_MS_MIN;
use rocketraft_domain::limits::PULL_RESPONSE_BYTES_MAX;
use rocketraft_domain::property_keys::TAGS;
use rocketraft_proto::POP_ANY_QUEUE;
use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::pop::state::InFlight;
use crate::pop::state::POP_IN_FLIGHT_MAX;
use crate::pop::state::Pop;
use crate::pop::state::PopChange;
use crate::pop::state::PopChangeOutcome;
use crate::pop::state::PopQueueKey;
use crate::raft::control::propose::propose;
use crate::service::BrokerService;
use crate::service::long_poll::LongPoll;
use crate::service::long_poll::Woken;
use crate::service::pull::ByteBudget;
use crate::service::pull::Filter;
use crate::service::pull::PULL_SCAN_UNITS_MAX;
use crate::service::pull::pick_units;
use crate::service::pull::validate_read;
use crate::service::pulled::HostText;
use crate::service::pulled::to_pulled;
use crate::service::send_back::into_dead_letter;
use crate::service::system_topics::DLQ_QUEUE_COUNT;
use crate::service::system_topics::dlq_topic;
use crate::state_machine::command::Command;
use crate::state_machine::command::CommandResult;
use crate::store::CheckedBlock;
use crate::store::CqUnit;
use crate::store::MessageStore;
use crate::store::record::MessageRecord;
use crate::topic::validate_group_name;
use crate::topic::validate_topic_name;

/// Changes one `ChangePopped` carries at most.
pub const POP_CHANGES_MAX: usize = 1024;
/// A due in-flight message: its queue offset and the deliveries it had.
type Due = (i64, u32);

/// Times a pop proposes again after its entry found the queue moved (a pop of an earlier
/// leader, or an ack of a message it meant to deliver again) before it answers empty.
const POP_CONFLICT_RETRIES: usize = 3;

impl BrokerService {
    pub(super) async fn handle_pop(
        &self,
        request: pb::PopRequest,
    ) -> Result<pb::PopResponse, BrokerError> {
        let filter = validate_pop(&request)?;
        self.ensure_leader()?;
        let queues = self.queues_to_pop(&request.topic, request.queue_id)?;
        let terms = PopTerms {
            filter: &filter,
            invisible_ms: request.invisible_ms,
            // Deliveries before a message goes to the dead-letter topic: the first and the
            // group's retries.
            attempts_max: self.group_config(&request.group).await?.retry_max_times + 1,
        };
        // `POP_ANY_QUEUE` watches every queue of the topic.
        let mut poll = LongPoll::begin(self, &request.topic, request.queue_id, request.max_wait_ms);
        loop {
            poll.look();
            let messages = self.pop_queues(&request, &queues, &terms).await?;
            if !messages.is_empty() || request.max_wait_ms == 0 {
                return Ok(pb::PopResponse { messages });
            }
            let now = self.clock.now_ms();
            let revival = {
                let metadata = self.group.metadata();
                queues
                    .iter()
                    .filter_map(|&queue_id| {
                        let key = pop_key(&request, queue_id);
                        metadata.pops.next_revival_ms(&key, now)
                    })
                    .min()
            };
            // An end of invisibility wakes the pop too.
            if poll.wait(self, "pop", revival).await? == Woken::Ended {
                return Ok(pb::PopResponse::default());
            }
            self.ensure_leader()?;
        }
    }

    /// The queues a pop of `queue_id` tries, in order: that one, or for `POP_ANY_QUEUE`
    /// every readable queue of `topic`, starting one further than the previous such pop
    /// started, so consumers of a topic spread over its queues.
    fn queues_to_pop(&self, topic: &str, queue_id: i32) -> Result<Vec<i32>, BrokerError> {
        let read_queue_count = self.readable_queue_count(topic, queue_id)?;
        if queue_id != POP_ANY_QUEUE {
            return Ok(vec![queue_id]);
        }
        let first = self.pop_rotation.fetch_add(1, Ordering::Relaxed) % read_queue_count;
        Ok((first..read_queue_count)
            .chain(0..first)
            .map(|queue_id| queue_id as i32)
            .collect())
    }

    /// Pops `queues` in turn until the request's count or the response's byte budget is
    /// reached; what each queue's pop delivered is committed.
    async fn pop_queues(
        &self,
        request: &pb::PopRequest,
        queues: &[i32],
        terms: &PopTerms<'_>,
    ) -> Result<Vec<pb::PoppedMessage>, BrokerError> {
        let max = request.max_messages as usize;
        let mut budget = ByteBudget::new(PULL_RESPONSE_BYTES_MAX);
        let mut messages = Vec::new();
        for &queue_id in queues {
            let key = pop_key(request, queue_id);
            let popped = {
                let _turn = self.pop_turns.take(&key).await;
                self.pop_once(&key, terms, max - messages.len(), &mut budget)
                    .await
            };
            match popped {
                Ok(popped) => messages.extend(popped),
                // What earlier queues delivered is in flight already: hand it over.
                Err(error) if !messages.is_empty() => {
                    tracing::warn!(
                        group = key.group,
                        topic = key.topic,
                        queue_id,
                        %error,
                        "a pop of one more queue failed; answering with what the others gave"
                    );
                    break;
                }
                Err(error) => return Err(error),
            }
            if messages.len() >= max || budget.is_spent() {
                break;
            }
        }
        Ok(messages)
    }

    /// One pop of one queue: what is due and fresh, up to `max` messages within `budget`,
    /// proposed and committed.
    async fn pop_once(
        &self,
        key: &PopQueueKey,
        terms: &PopTerms<'_>,
        max: usize,
        budget: &mut ByteBudget,
    ) -> Result<Vec<pb::PoppedMessage>, BrokerError> {
        for _ in 0..POP_CONFLICT_RETRIES {
            let now = self.clock.now_ms();
            let mut planned_budget = *budget;
            let PopPlan {
                pop,
                dead_letters,
                dead_lettered,
            } = self.plan_pop(key, terms, max, now, &mut planned_budget)?;
            if pop.revived.is_empty()
                && pop.fresh.is_empty()
                && pop.dead.is_empty()
                && pop.next_offset == pop.from_offset
            {
                return Ok(Vec::new());
            }
            if dead_lettered > 0 {
                self.system_topic(&dlq_topic(&key.group), DLQ_QUEUE_COUNT)
                    .await?;
                tracing::info!(
                    group = key.group,
                    topic = key.topic,
                    queue_id = key.queue_id,
                    count = dead_lettered,
                    attempts_max = terms.attempts_max,
                    "popped messages past their last attempt moved to the dead-letter topic"
                );
            }
            let invisible_until_ms = pop.invisible_until_ms;
            let applied = propose(&self.raft, Command::Pop { pop, dead_letters })
                .await?
                .await?;
            let CommandResult::Popped { delivered, receipt } = applied else {
                return Err(BrokerError::Internal(format!(
                    "a Pop entry applied as {applied:?}"
                )));
            };
            let Some(delivered) = delivered else {
                continue;
            };
            *budget = planned_budget;
            return self.popped_messages(key, &delivered, receipt, invisible_until_ms);
        }
        Ok(Vec::new())
    }

    /// The pop this leader proposes now for `key`: due messages first, then fresh matching
    /// ones, `max` in all, within the in-flight limit and `budget`; due messages past their
    /// last attempt go to the dead-letter topic instead (with their copies, encoded).
    fn plan_pop(
        &self,
        key: &PopQueueKey,
        terms: &PopTerms<'_>,
        max: usize,
        now: i64,
        budget: &mut ByteBudget,
    ) -> Result<PopPlan, BrokerError> {
        // The metadata first, then the store: never both locks at once.
        // An orderly group's queue delivers again only its oldest in-flight messages that are
        // due (never one after a message still invisible), and nothing new while any is in
        // flight.
        let (known_next, due, in_flight, orderly) = {
            let metadata = self.group.metadata();
            let orderly = metadata.pops.is_orderly(&key.group);
            match metadata.pops.queue(key) {
                Some(queue) => {
                    let is_due = |message: &InFlight| message.invisible_until_ms <= now;
                    let due: Vec<Due> = if orderly {
                        queue
                            .in_flight
                            .iter()
                            .take_while(|(_, message)| is_due(message))
                            .map(|(offset, message)| (*offset, message.attempt))
                            .collect()
                    } else {
                        queue
                            .in_flight
                            .iter()
                            .filter(|(_, message)| is_due(message))
                            .map(|(offset, message)| (*offset, message.attempt))
                            .collect()
                    };
                    (Some(queue.next_offset), due, queue.in_flight.len(), orderly)
                }
                None => (None, Vec::new(), 0, orderly),
            }
        };
        let store = self.group.store();
        let (min_offset, max_offset) = store.consume_queue_offsets(&key.topic, key.queue_id);
        let from_offset = known_next.unwrap_or(min_offset);
        // A due message retention deleted can no longer be delivered: it leaves flight with
        // the dead ones, without a copy (an orderly queue would otherwise wait for it forever).
        let (gone, due): (Vec<Due>, Vec<Due>) = due
            .into_iter()
            .partition(|(offset, _)| *offset < min_offset);
        if !gone.is_empty() {
            tracing::warn!(
                group = key.group,
                topic = key.topic,
                queue_id = key.queue_id,
                count = gone.len(),
                first_offset = gone[0].0,
                "popped messages retention deleted before they were acked leave flight undelivered"
            );
        }
        let mut dead: Vec<Due> = Vec::new();
        let mut revived: Vec<i64> = Vec::new();
        for (offset, attempt) in due {
            if dead.len() + revived.len() >= max {
                break;
            }
            if attempt >= terms.attempts_max {
                dead.push((offset, attempt));
                continue;
            }
            let size = store
                .consume_queue_units(&key.topic, key.queue_id, offset)
                .next()
                .map_or(0, |unit| unit.size);
            if !budget.take(size) {
                break;
            }
            revived.push(offset);
        }
        let mut dead_letters = Vec::new();
        for &(offset, attempt) in &dead {
            let Some(unit) = store
                .consume_queue_units(&key.topic, key.queue_id, offset)
                .next()
            else {
                continue;
            };
            self.dead_letter_copy(
                &store,
                &key.group,
                unit.commit_log_offset,
                attempt,
                terms.attempts_max,
            )?
            .encode_into(&mut dead_letters)
            .map_err(BrokerError::illegal)?;
        }
        let dead_lettered = dead.len();
        let dead: Vec<i64> = gone
            .iter()
            .chain(&dead)
            .map(|(offset, _)| *offset)
            .collect();
        // The in-flight limit counts the gone messages (the entry's check runs before they
        // leave); the orderly wait does not.
        let room = if orderly && in_flight > gone.len() {
            0
        } else {
            (max - revived.len()).min(POP_IN_FLIGHT_MAX - in_flight)
        };
        let scan_from = from_offset.max(min_offset);
        let (fresh, next_offset) = if room == 0 || scan_from >= max_offset {
            (Vec::new(), from_offset.max(scan_from))
        } else {
            let units = store
                .consume_queue_units(&key.topic, key.queue_id, scan_from)
                .take(PULL_SCAN_UNITS_MAX);
            let checked = CheckedBlock::default();
            let read = |queue_offset, unit: &CqUnit| {
                self.read_message(
                    &store,
                    &key.topic,
                    key.queue_id,
                    queue_offset,
                    unit,
                    &checked,
                )
            };
            let (picked, next_offset) =
                pick_units(units, scan_from, room, budget, |offset, unit| {
                    let matches = match terms.filter {
                        Filter::All => true,
                        Filter::Tags { codes, names } => {
                            codes.contains(&unit.tags_code) && {
                                let view = read(offset, unit)?;
                                view.property(TAGS)?.is_some_and(|tag| names.contains(tag))
                            }
                        }
                        Filter::Sql(sql) => {
                            let view = read(offset, unit)?;
                            sql.matches(|name| view.property(name).ok().flatten())
                        }
                    };
                    Ok::<_, BrokerError>(matches.then_some(()))
                })?;
            (
                picked.into_iter().map(|(offset, _, ())| offset).collect(),
                next_offset,
            )
        };
        let pop = Pop {
            key: key.clone(),
            from_offset,
            next_offset,
            fresh,
            revived,
            dead,
            now_ms: now,
            invisible_until_ms: now.saturating_add(terms.invisible_ms as i64),
        };
        Ok(PopPlan {
            pop,
            dead_letters: dead_letters.into(),
            dead_lettered,
        })
    }

    /// The copy for `group`'s dead-letter topic of the message at `commit_log_offset`,
    /// delivered `attempts` times.
    fn dead_letter_copy(
        &self,
        store: &MessageStore,
        group: &str,
        commit_log_offset: i64,
        attempts: u32,
        attempts_max: u32,
    ) -> Result<MessageRecord, BrokerError> {
        let original = store.read_message(commit_log_offset)?;
        let mut copy = self.redelivery_copy(
            &original,
            commit_log_offset,
            attempts as i32,
            attempts_max as i32 - 1,
        )?;
        into_dead_letter(&mut copy, group);
        Ok(copy)
    }

    /// The messages a committed pop delivered, read from the store.
    fn popped_messages(
        &self,
        key: &PopQueueKey,
        delivered: &[(i64, u32)],
        receipt: u64,
        invisible_until_ms: i64,
    ) -> Result<Vec<pb::PoppedMessage>, BrokerError> {
        let store = self.group.store();
        let (min_offset, _) = store.consume_queue_offsets(&key.topic, key.queue_id);
        let mut hosts = HostText::default();
        let mut messages = Vec::with_capacity(delivered.len());
        let checked = CheckedBlock::default();
        for &(queue_offset, attempt) in delivered {
            let unit = (queue_offset >= min_offset)
                .then(|| {
                    store
                        .consume_queue_units(&key.topic, key.queue_id, queue_offset)
                        .next()
                })
                .flatten();
            let Some(unit) = unit else {
                tracing::warn!(
                    group = key.group,
                    topic = key.topic,
                    queue_id = key.queue_id,
                    queue_offset,
                    "a popped message is no longer kept (retention deleted it)"
                );
                continue;
            };
            // A wrong unit (reported to the scrubber) leaves its message in flight: it comes
            // back once its invisible time ends, by then repaired.
            let read = self.read_message(
                &store,
                &key.topic,
                key.queue_id,
                queue_offset,
                &unit,
                &checked,
            );
            let Ok(view) = read else {
                continue;
            };
            messages.push(pb::PoppedMessage {
                message: Some(to_pulled(
                    &view,
                    queue_offset,
                    unit.commit_log_offset,
                    &mut hosts,
                )?),
                attempt,
                receipt,
                invisible_until_ms,
            });
        }
        Ok(messages)
    }

    pub(super) async fn handle_change_popped(
        &self,
        request: pb::ChangePoppedRequest,
    ) -> Result<pb::ChangePoppedResponse, BrokerError> {
        validate_group_name(&request.group).map_err(BrokerError::BadRequest)?;
        validate_topic_name(&request.topic).map_err(BrokerError::TopicIllegal)?;
        if request.changes.is_empty() || request.changes.len() > POP_CHANGES_MAX {
            return Err(BrokerError::BadRequest(format!(
                "a change carries 1 to {POP_CHANGES_MAX} messages, got {}",
                request.changes.len()
            )));
        }
        let now = self.clock.now_ms();
        let mut changes = Vec::with_capacity(request.changes.len());
        for change in &request.changes {
            let invisible_until_ms = match change.invisible_ms {
                0 => None,
                ms => {
                    validate_invisible_ms(ms, CHANGE_INVISIBLE_MS_MIN)?;
                    Some(now.saturating_add(ms as i64))
                }
            };
            changes.push(PopChange {
                queue_offset: change.queue_offset,
                receipt: change.receipt,
                invisible_until_ms,
            });
        }
        self.ensure_leader()?;
        let dead_letter = request.changes.iter().any(|change| change.dead_letter);
        if dead_letter && request.changes.len() > 1 {
            return Err(BrokerError::BadRequest(
                "a change that dead-letters a message goes alone".into(),
            ));
        }
        let key = PopQueueKey {
            group: request.group,
            topic: request.topic,
            queue_id: request.queue_id,
        };
        let command = if dead_letter {
            let change = PopChange {
                invisible_until_ms: None,
                ..changes[0]
            };
            Command::PopDeadLetter {
                record: self.dead_letter_record(&key, &change).await?,
                key,
                change,
                now_ms: now,
            }
        } else {
            Command::PopChange {
                key,
                changes: changes.clone(),
                now_ms: now,
            }
        };
        let applied = propose(&self.raft, command).await?.await?;
        let CommandResult::PopChanged(outcomes) = applied else {
            return Err(BrokerError::Internal(format!(
                "a PopChange entry applied as {applied:?}"
            )));
        };
        let results = outcomes
            .into_iter()
            .zip(changes)
            .map(|(outcome, change)| {
                let (outcome, receipt) = match outcome {
                    PopChangeOutcome::Done { receipt } => (pb::ChangeOutcome::ChangeDone, receipt),
                    PopChangeOutcome::NotInFlight => (pb::ChangeOutcome::ChangeNotInFlight, 0),
                    PopChangeOutcome::StaleReceipt => (pb::ChangeOutcome::ChangeStaleReceipt, 0),
                    PopChangeOutcome::Expired => (pb::ChangeOutcome::ChangeExpired, 0),
                };
                pb::ChangeResult {
                    outcome: outcome as i32,
                    receipt,
                    invisible_until_ms: change.invisible_until_ms.unwrap_or(0),
                }
            })
            .collect();
        Ok(pb::ChangePoppedResponse { results })
    }

    /// The dead-letter copy of the in-flight message `change` names (the change applies only
    /// if it is still in flight with that receipt, so a copy of another message is never
    /// stored).
    async fn dead_letter_record(
        &self,
        key: &PopQueueKey,
        change: &PopChange,
    ) -> Result<Bytes, BrokerError> {
        let attempts_max = self.group_config(&key.group).await?.retry_max_times + 1;
        let attempts = self
            .group
            .metadata()
            .pops
            .queue(key)
            .and_then(|queue| queue.in_flight.get(&change.queue_offset))
            .map_or(1, |message| message.attempt);
        self.system_topic(&dlq_topic(&key.group), DLQ_QUEUE_COUNT)
            .await?;
        let store = self.group.store();
        let (min_offset, _) = store.consume_queue_offsets(&key.topic, key.queue_id);
        let unit = (change.queue_offset >= min_offset)
            .then(|| {
                store
                    .consume_queue_units(&key.topic, key.queue_id, change.queue_offset)
                    .next()
            })
            .flatten()
            .ok_or_else(|| {
                BrokerError::BadRequest(format!(
                    "{}#{} holds no message at {}",
                    key.topic, key.queue_id, change.queue_offset
                ))
            })?;
        let mut record = Vec::new();
        self.dead_letter_copy(
            &store,
            &key.group,
            unit.commit_log_offset,
            attempts,
            attempts_max,
        )?
        .encode_into(&mut record)
        .map_err(BrokerError::illegal)?;
        Ok(record.into())
    }

    /// `topic`'s read queue count here; fails unless the topic exists with a readable queue
    /// `queue_id` (or, for `POP_ANY_QUEUE`, any readable queue).
    fn readable_queue_count(&self, topic: &str, queue_id: i32) -> Result<usize, BrokerError> {
        let metadata = self.group.metadata();
        let Some(config) = metadata.topics.get(topic) else {
            return Err(BrokerError::TopicNotExist(topic.to_owned()));
        };
        let count = config.read_queue_count as i32;
        let readable = if queue_id == POP_ANY_QUEUE {
            count > 0
        } else {
            (0..count).contains(&queue_id)
        };
        if !readable {
            return Err(BrokerError::QueueIllegal {
                queue_id,
                reason: format!("{topic} has {count} read queues here"),
            });
        }
        Ok(count as usize)
    }
}

/// What a pop asks of every queue it tries.
struct PopTerms<'a> {
    filter: &'a Filter,
    invisible_ms: u64,
    /// Deliveries before a message goes to the dead-letter topic.
    attempts_max: u32,
}

/// A pop of one queue, as planned: the entry, the dead-letter copies it carries (encoded)
/// and their count.
struct PopPlan {
    pop: Pop,
    dead_letters: Bytes,
    dead_lettered: usize,
}

/// `request`'s group and topic, queue `queue_id`.
fn pop_key(request: &pb::PopRequest, queue_id: i32) -> PopQueueKey {
    PopQueueKey {
        group: request.group.clone(),
        topic: request.topic.clone(),
        queue_id,
    }
}

/// Checks a pop and returns the filter it asks for.
fn validate_pop(request: &pb::PopRequest) -> Result<Filter, BrokerError> {
    validate_read(
        &request.topic,
        &request.group,
        (request.max_messages, POP_BATCH_COUNT_MAX),
        request.max_wait_ms,
    )?;
    validate_invisible_ms(request.invisible_ms, INVISIBLE_MS_MIN)?;
    Filter::parse(&request.tags, &request.sql)
}

/// An invisible time of `min` (a pop's, or a change's) to [`INVISIBLE_MS_MAX`] ms.
fn validate_invisible_ms(ms: u64, min: u64) -> Result<(), BrokerError> {
    if !(min..=INVISIBLE_MS_MAX).contains(&ms) {
        return Err(BrokerError::BadRequest(format!(
            "an invisible time is {min} to {INVISIBLE_MS_MAX} ms, got {ms}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::pull::PULL_HOLD_MS_MAX;

    fn request(max_messages: u32, invisible_ms: u64, max_wait_ms: u32) -> pb::PopRequest {
        pb::PopRequest {
            group: "g".into(),
            topic: "t".into(),
            queue_id: 0,
            max_messages,
            invisible_ms,
            tags: Vec::new(),
            sql: String::new(),
            max_wait_ms,
        }
    }

    #[test]
    fn limits_at_the_boundary() {
        assert!(
            validate_pop(&request(
                POP_BATCH_COUNT_MAX,
                INVISIBLE_MS_MIN,
                PULL_HOLD_MS_MAX
            ))
            .is_ok()
        );
        assert!(validate_pop(&request(1, INVISIBLE_MS_MAX, 0)).is_ok());
        assert!(validate_pop(&request(POP_BATCH_COUNT_MAX + 1, INVISIBLE_MS_MIN, 0)).is_err());
        assert!(validate_pop(&request(0, INVISIBLE_MS_MIN, 0)).is_err());
        assert!(validate_pop(&request(1, INVISIBLE_MS_MIN - 1, 0)).is_err());
        assert!(validate_pop(&request(1, INVISIBLE_MS_MAX + 1, 0)).is_err());
        assert!(validate_pop(&request(1, INVISIBLE_MS_MIN, PULL_HOLD_MS_MAX + 1)).is_err());
    }

    #[test]
    fn a_change_may_ask_for_less_than_a_pop() {
        assert!(validate_invisible_ms(CHANGE_INVISIBLE_MS_MIN, CHANGE_INVISIBLE_MS_MIN).is_ok());
        assert!(validate_invisible_ms(INVISIBLE_MS_MAX, CHANGE_INVISIBLE_MS_MIN).is_ok());
        assert!(validate_invisible_ms(INVISIBLE_MS_MAX + 1, CHANGE_INVISIBLE_MS_MIN).is_err());
        assert!(validate_invisible_ms(CHANGE_INVISIBLE_MS_MIN, INVISIBLE_MS_MIN).is_err());
    }
}
