//! `Pull`: messages of one queue from an offset, filtered by the subscription's tags hash
//! codes or by its SQL92 filter on each message's properties, with long polling.
//!
//! Any node serves pulls: the store holds only committed, applied messages, so a follower
//! may lag but never shows a message the group could lose. An empty pull waits until a
//! message is applied to its queue (or its wait runs out) and then looks again, except on a
//! leader cut off from its quorum: nothing new can commit there, so an empty pull is refused
//! (`SERVICE_UNAVAILABLE`) and a held one ends, and the client looks for the current leader.
//!
//! An offset past a queue's end is corrected (`OFFSET_ILLEGAL`, with the end as the next
//! offset) only by a leader that has applied an entry of its own term: only its store is
//! known to hold everything committed. Any other node answers `NO_NEW_MESSAGE` at the
//! consumer's own offset and holds the pull until its queue reaches it.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use rocketraft_domain::limits::PULL_RESPONSE_BYTES_MAX;
use rocketraft_domain::sql_filter::SqlFilter;
use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::raft::control::lease::Leadership;
use crate::raft::control::role::is_ready_leader;
use crate::scrub::suspects::SuspectUnit;
use crate::service::BrokerService;
use crate::service::long_poll::LongPoll;
use crate::service::long_poll::Woken;
use crate::service::pulled::HostText;
use crate::service::pulled::to_pulled;
use crate::store::CheckedBlock;
use crate::store::CqUnit;
use crate::store::MessageStore;
use crate::store::RecordView;
use crate::store::StoreError;
use crate::topic::validate_group_name;
use crate::topic::validate_topic_name;
use rocketraft_domain::tags_code::tags_code;

/// Messages one pull returns at most.
pub const PULL_BATCH_COUNT_MAX: u32 = 1024;
/// Consume-queue units one pull scans at most while filtering, so a pull whose tags match
/// nothing returns `NO_MATCHED_MESSAGE` promptly instead of scanning a whole queue.
pub const PULL_SCAN_UNITS_MAX: usize = 4096;
/// How long an empty pull may be held (RocketMQ's long-polling default).
pub const PULL_HOLD_MS_MAX: u32 = rocketraft_domain::limits::LONG_POLLING_MS_MAX;
/// Pulls a node holds open at once by default (`pull_holds_max`): a held pull costs a task
/// and an HTTP/2 stream, so clients cannot make a node hold an unbounded number.
pub const PULL_HOLDS_MAX_DEFAULT: usize = 10_000;
/// The subscription expression that takes every message.
const SUBSCRIBE_ALL: &str = "*";

/// Which messages of the queue a pull (or a pop) takes.
pub(super) enum Filter {
    All,
    /// Messages whose tags hash code is one of these (a pull), and whose tag is one of the
    /// names (a pop checks the string too).
    Tags {
        codes: HashSet<i64>,
        names: HashSet<String>,
    },
    /// Messages whose properties the filter selects.
    Sql(SqlFilter),
}

impl Filter {
    /// The filter of a subscription by `tags` or by `sql` (one of them, or neither: all).
    pub(super) fn parse(tags: &[String], sql: &str) -> Result<Filter, BrokerError> {
        if tags.iter().any(|tag| tag.trim().is_empty()) {
            return Err(BrokerError::BadRequest(
                "a subscription tag is empty".into(),
            ));
        }
        if !sql.is_empty() {
            if !tags.is_empty() {
                return Err(BrokerError::BadRequest(
                    "a subscription filters by tags or by SQL92, not both (use TAGS IN (...) in \
                     the SQL)"
                        .into(),
                ));
            }
            let sql = SqlFilter::parse(sql)
                .map_err(|error| BrokerError::BadRequest(format!("{sql:?}: {error}")))?;
            return Ok(Filter::Sql(sql));
        }
        if tags.is_empty() || tags.iter().any(|tag| tag == SUBSCRIBE_ALL) {
            return Ok(Filter::All);
        }
        Ok(Filter::Tags {
            codes: tags.iter().map(|tag| tags_code(tag)).collect(),
            names: tags.iter().cloned().collect(),
        })
    }
}

impl BrokerService {
    pub(super) async fn handle_pull(
        &self,
        request: pb::PullRequest,
    ) -> Result<pb::PullResponse, BrokerError> {
        self.pull_requests.fetch_add(1, Ordering::Relaxed);
        let filter = validate_pull(&request)?;
        let mut poll = LongPoll::begin(self, &request.topic, request.queue_id, request.max_wait_ms);
        loop {
            let cut_off = poll.look() == Leadership::LeadingWithoutQuorum;
            let reading = std::time::Instant::now();
            let (response, served) = self.read_queue(&request, &filter)?;
            self.metrics.pulled(
                &request.topic,
                served.messages,
                served.body_bytes,
                reading.elapsed(),
            );
            if response.status != pb::PullStatus::NoNewMessage as i32 || request.max_wait_ms == 0 {
                return Ok(response);
            }
            if cut_off {
                // Nothing new can commit here; the group may have a new leader already.
                return Err(BrokerError::Unavailable(
                    "this node leads but no quorum acknowledged it within its lease; the group \
                     may have elected another leader"
                        .into(),
                ));
            }
            if poll.wait(self, "pull", None).await? == Woken::Ended {
                return Ok(response);
            }
        }
    }

    /// One look at the queue: the pull's answer, and what it served.
    fn read_queue(
        &self,
        request: &pb::PullRequest,
        filter: &Filter,
    ) -> Result<(pb::PullResponse, Served), BrokerError> {
        let store = self.group.store();
        let (min_offset, max_offset) =
            store.consume_queue_offsets(&request.topic, request.queue_id);
        let empty = |status: pb::PullStatus, next_offset| {
            let response = pb::PullResponse {
                status: status as i32,
                next_offset,
                min_offset,
                max_offset,
                ..pb::PullResponse::default()
            };
            Ok((response, Served::default()))
        };
        if request.queue_offset > max_offset && !is_ready_leader(&self.raft) {
            // An offset the consumer may have taken from a node that applied more: a
            // follower lags, and a new or restarted leader applies its predecessors' entries
            // only after it leads. Moving the consumer back would deliver those messages
            // twice and regress its committed offset, so it keeps its offset and the pull
            // waits for the queue to reach it. Only a ready leader corrects it.
            return empty(pb::PullStatus::NoNewMessage, request.queue_offset);
        }
        if request.queue_offset < min_offset || request.queue_offset > max_offset {
            let nearest = request.queue_offset.clamp(min_offset, max_offset);
            return empty(pb::PullStatus::OffsetIllegal, nearest);
        }
        if request.queue_offset == max_offset {
            return empty(pb::PullStatus::NoNewMessage, max_offset);
        }
        let units = store
            .consume_queue_units(&request.topic, request.queue_id, request.queue_offset)
            .take(PULL_SCAN_UNITS_MAX);
        let checked = CheckedBlock::default();
        let (picked, next_offset) = pick_units(
            units,
            request.queue_offset,
            request.max_messages as usize,
            &mut ByteBudget::new(PULL_RESPONSE_BYTES_MAX),
            // A SQL92 filter reads the record to decide; the view it read is kept for the
            // message, so a selected record is read (and its CRC checked) once.
            |queue_offset, unit| match filter {
                Filter::All => Ok::<_, BrokerError>(Some(None)),
                Filter::Tags { codes, .. } => Ok(codes.contains(&unit.tags_code).then_some(None)),
                Filter::Sql(sql) => {
                    let view = self.read_message(
                        &store,
                        &request.topic,
                        request.queue_id,
                        queue_offset,
                        unit,
                        &checked,
                    )?;
                    let selected = sql.matches(|name| view.property(name).ok().flatten());
                    Ok(selected.then_some(Some(view)))
                }
            },
        )?;
        let (mut messages, mut stored_records) = if request.stored_records {
            let bytes = picked
                .iter()
                .map(|(_, unit, _)| usize::try_from(unit.size).unwrap_or(0))
                .sum();
            (Vec::new(), Vec::with_capacity(bytes))
        } else {
            (Vec::with_capacity(picked.len()), Vec::new())
        };
        let mut served = Served::default();
        let mut next_offset = next_offset;
        let mut hosts = HostText::default();
        for (queue_offset, unit, view) in picked {
            let view = match view {
                Some(view) => view,
                None => match self.read_message(
                    &store,
                    &request.topic,
                    request.queue_id,
                    queue_offset,
                    &unit,
                    &checked,
                ) {
                    Ok(view) => view,
                    // What comes before a wrong unit is delivered; the next pull starts at it.
                    Err(_) if served.messages > 0 => {
                        next_offset = queue_offset;
                        break;
                    }
                    Err(error) => return Err(error.into()),
                },
            };
            served.messages += 1;
            served.body_bytes += view.body().len();
            if request.stored_records {
                stored_records.extend_from_slice(view.bytes());
            } else {
                messages.push(to_pulled(
                    &view,
                    queue_offset,
                    unit.commit_log_offset,
                    &mut hosts,
                )?);
            }
        }
        let status = if served.messages == 0 {
            pb::PullStatus::NoMatchedMessage
        } else {
            pb::PullStatus::Found
        };
        let response = pb::PullResponse {
            status: status as i32,
            messages,
            stored_records: stored_records.into(),
            next_offset,
            min_offset,
            max_offset,
        };
        Ok((response, served))
    }
}

/// The messages one look at a queue served, and their bodies' bytes.
#[derive(Debug, Default, Clone, Copy)]
struct Served {
    messages: usize,
    body_bytes: usize,
}

impl BrokerService {
    /// The message at `queue_offset` of `topic`/`queue_id`, whose unit is `unit`, checked to be
    /// that message with its CommitLog blocks intact ([`MessageStore::read_served_view`];
    /// `checked` is this read's last checked block); a unit that points at anything else, or
    /// a damaged block, is reported to the scrubber, which repairs it from the group at once.
    pub(super) fn read_message<'s>(
        &self,
        store: &'s MessageStore,
        topic: &str,
        queue_id: i32,
        queue_offset: i64,
        unit: &CqUnit,
        checked: &CheckedBlock,
    ) -> Result<RecordView<'s>, StoreError> {
        store
            .read_served_view(topic, queue_id, queue_offset, unit, checked)
            .inspect_err(|error| {
                tracing::error!(%error, "a read found a wrong ConsumeQueue unit, record or CommitLog block");
                let suspect = SuspectUnit {
                    topic: topic.to_owned(),
                    queue_id,
                    queue_offset,
                };
                if !self.scrub.suspects.report(suspect) {
                    tracing::warn!("too many suspect units wait: left to the scrubber's pass");
                }
            })
    }
}

/// Picked units (queue offset, unit, what `keep` said) and the next pull's offset.
type Picked<V> = (Vec<(i64, CqUnit, V)>, i64);

/// The stored bytes a response may carry: up to its maximum, except that the response's first
/// message is taken whatever its size, so a queue never stalls behind a large message.
#[derive(Clone, Copy, Debug)]
pub(super) struct ByteBudget {
    taken: usize,
    max: usize,
}

impl ByteBudget {
    pub(super) fn new(max: usize) -> ByteBudget {
        ByteBudget { taken: 0, max }
    }

    /// Takes a message of `size` stored bytes if it fits; false (nothing taken) if not.
    pub(super) fn take(&mut self, size: i32) -> bool {
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        if self.taken > 0 && self.taken.saturating_add(size) > self.max {
            return false;
        }
        self.taken = self.taken.saturating_add(size);
        true
    }

    /// No further message fits.
    pub(super) fn is_spent(&self) -> bool {
        self.taken >= self.max
    }
}

/// The units a pull from `first_offset` returns, with their queue offsets and what `keep`
/// said of them (given each unit's queue offset), and the offset the next pull starts at: units in order, skipping those
/// `keep` refuses (`None`), until `max_messages` are taken or the next one does not fit
/// `budget`. Units are taken from `units` only as long as the pull may still take one.
pub(super) fn pick_units<V, E>(
    units: impl IntoIterator<Item = CqUnit>,
    first_offset: i64,
    max_messages: usize,
    budget: &mut ByteBudget,
    mut keep: impl FnMut(i64, &CqUnit) -> Result<Option<V>, E>,
) -> Result<Picked<V>, E> {
    let mut picked = Vec::new();
    let mut next_offset = first_offset;
    let mut units = units.into_iter();
    while picked.len() < max_messages {
        let Some(unit) = units.next() else {
            break;
        };
        let Some(kept) = keep(next_offset, &unit)? else {
            next_offset += 1;
            continue;
        };
        if !budget.take(unit.size) {
            break;
        }
        picked.push((next_offset, unit, kept));
        next_offset += 1;
    }
    Ok((picked, next_offset))
}

/// Checks a pull and returns the filter it asks for.
fn validate_pull(request: &pb::PullRequest) -> Result<Filter, BrokerError> {
    validate_read(
        &request.topic,
        &request.group,
        (request.max_messages, PULL_BATCH_COUNT_MAX),
        request.max_wait_ms,
    )?;
    Filter::parse(&request.tags, &request.sql)
}

/// Checks what a pull or a pop names, its batch (1 to the limit) and its wait.
pub(super) fn validate_read(
    topic: &str,
    group: &str,
    (max_messages, batch_max): (u32, u32),
    max_wait_ms: u32,
) -> Result<(), BrokerError> {
    validate_topic_name(topic).map_err(BrokerError::TopicIllegal)?;
    validate_group_name(group).map_err(BrokerError::BadRequest)?;
    if max_messages == 0 || max_messages > batch_max {
        return Err(BrokerError::BadRequest(format!(
            "max_messages must be 1 to {batch_max}, got {max_messages}"
        )));
    }
    if max_wait_ms > PULL_HOLD_MS_MAX {
        return Err(BrokerError::BadRequest(format!(
            "max_wait_ms is at most {PULL_HOLD_MS_MAX}, got {max_wait_ms}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(max_messages: u32, max_wait_ms: u32, tags: &[&str]) -> pb::PullRequest {
        pb::PullRequest {
            group: "g".into(),
            topic: "t".into(),
            queue_id: 0,
            queue_offset: 0,
            max_messages,
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            max_wait_ms,
            sql: String::new(),
            stored_records: false,
        }
    }

    fn units(sizes: &[i32], tags_code: i64) -> Vec<CqUnit> {
        sizes
            .iter()
            .map(|size| CqUnit {
                commit_log_offset: 0,
                size: *size,
                tags_code,
            })
            .collect()
    }

    /// `pick_units` keeping every unit, or those with a wanted tags code.
    fn pick(
        units: impl IntoIterator<Item = CqUnit>,
        first_offset: i64,
        max_messages: usize,
        bytes_max: usize,
        wanted: Option<&HashSet<i64>>,
    ) -> Picked<()> {
        let keep = |_, unit: &CqUnit| {
            let kept = wanted.is_none_or(|codes| codes.contains(&unit.tags_code));
            Ok::<_, std::convert::Infallible>(kept.then_some(()))
        };
        match pick_units(
            units,
            first_offset,
            max_messages,
            &mut ByteBudget::new(bytes_max),
            keep,
        ) {
            Ok(picked) => picked,
        }
    }

    fn offsets(picked: &[(i64, CqUnit, ())]) -> Vec<i64> {
        picked.iter().map(|(offset, _, ())| *offset).collect()
    }

    #[test]
    fn a_pull_stops_at_the_byte_budget_but_returns_at_least_one_message() {
        let queue = units(&[400, 300, 300, 200], 1);
        let (picked, next) = pick(queue.iter().copied(), 10, 32, 1000, None);
        assert_eq!(
            (offsets(&picked), next),
            (vec![10, 11, 12], 13),
            "exactly the budget"
        );
        let (picked, next) = pick(queue.iter().copied(), 10, 32, 999, None);
        assert_eq!(
            (offsets(&picked), next),
            (vec![10, 11], 12),
            "one byte short"
        );
        let (picked, next) = pick(units(&[5000, 10], 1), 0, 32, 1000, None);
        assert_eq!(
            (offsets(&picked), next),
            (vec![0], 1),
            "a large message alone"
        );
        let (picked, next) = pick(queue.iter().copied(), 0, 2, usize::MAX, None);
        assert_eq!((offsets(&picked), next), (vec![0, 1], 2), "the count limit");
    }

    #[test]
    fn a_budget_takes_its_first_message_whatever_its_size_and_then_only_what_fits() {
        let mut budget = ByteBudget::new(1000);
        assert!(budget.take(5000), "a response's first message");
        assert!(budget.is_spent());
        let mut budget = ByteBudget::new(1000);
        assert!(budget.take(600));
        assert!(!budget.take(401), "one byte past the budget");
        assert!(!budget.is_spent());
        let keep_all = |_, _: &CqUnit| Ok::<_, std::convert::Infallible>(Some(()));
        let Ok((picked, next)) = pick_units(units(&[500, 400], 1), 3, 32, &mut budget, keep_all);
        assert_eq!(
            (offsets(&picked), next),
            (Vec::<i64>::new(), 3),
            "a budget holding messages of an earlier queue takes no large one"
        );
        assert!(budget.take(400), "exactly the budget");
        assert!(budget.is_spent());
    }

    #[test]
    fn a_pull_reads_no_unit_beyond_what_it_takes() {
        let mut read = 0;
        let queue = units(&[10; 100], 1).into_iter().inspect(|_| read += 1);
        let (picked, next) = pick(queue, 0, 4, usize::MAX, None);
        assert_eq!((picked.len(), next, read), (4, 4, 4), "the count limit");
        let mut read = 0;
        let queue = units(&[10; 100], 1).into_iter().inspect(|_| read += 1);
        let (picked, next) = pick(queue, 0, 32, 25, None);
        assert_eq!((picked.len(), next, read), (2, 2, 3), "the byte budget");
    }

    #[test]
    fn skipped_tags_cost_no_budget_and_move_the_next_offset() {
        let mut queue = units(&[900], 7);
        queue.extend(units(&[100, 100], 1));
        let wanted = HashSet::from([1]);
        let (picked, next) = pick(queue.iter().copied(), 0, 32, 200, Some(&wanted));
        assert_eq!((offsets(&picked), next), (vec![1, 2], 3));
        let (picked, next) = pick(units(&[5, 5], 7), 4, 32, 200, Some(&wanted));
        assert_eq!((picked.len(), next), (0, 6));
    }

    #[test]
    fn limits_at_the_boundary() {
        assert!(validate_pull(&request(PULL_BATCH_COUNT_MAX, PULL_HOLD_MS_MAX, &[])).is_ok());
        assert!(validate_pull(&request(PULL_BATCH_COUNT_MAX + 1, 0, &[])).is_err());
        assert!(validate_pull(&request(0, 0, &[])).is_err());
        assert!(validate_pull(&request(1, PULL_HOLD_MS_MAX + 1, &[])).is_err());
        assert!(validate_pull(&request(1, 0, &["TagA", " "])).is_err());
    }

    #[test]
    fn a_sql_filter_is_parsed_and_refused_with_its_error() {
        let with_sql = |sql: &str, tags: &[&str]| pb::PullRequest {
            sql: sql.into(),
            ..request(1, 0, tags)
        };
        assert!(matches!(
            validate_pull(&with_sql("a > 5 AND TAGS IN ('A')", &[])),
            Ok(Filter::Sql(_))
        ));
        let Err(BrokerError::BadRequest(reason)) = validate_pull(&with_sql("a >", &[])) else {
            panic!("bad SQL is a bad request");
        };
        assert!(reason.contains("at byte 3"), "{reason}");
        assert!(
            validate_pull(&with_sql("a > 5", &["TagA"])).is_err(),
            "SQL and tags"
        );
    }
}
