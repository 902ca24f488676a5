//! `SendMessageBack`: a consumer could not consume a message; the leader stores
//! a copy that comes back later.
//!
//! The copy keeps the message's body, properties and unique id, and adds `RETRY_TOPIC` (the
//! original topic, kept if already set) and `ORIGIN_MESSAGE_ID` (kept if already set); its
//! reconsume count is the original's plus one. It goes to `%RETRY%<group>`, delayed by the
//! level asked for or `3 + reconsume times`, unless the original's count already reached the
//! maximum (the request's, else the group's) or the level asked is negative: then it goes to
//! `%DLQ%<group>` at once.

use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::schedule::delayed::park;
use crate::service::BrokerService;
use crate::service::admin::RETRY_MAX_TIMES_MAX;
use crate::service::send::offset_msg_id;
use crate::service::system_topics::DLQ_QUEUE_COUNT;
use crate::service::system_topics::dlq_topic;
use crate::service::system_topics::retry_topic;
use crate::store::properties::DELAY;
use crate::store::properties::MAX_RECONSUME_TIMES;
use crate::store::properties::ORIGIN_MESSAGE_ID;
use crate::store::properties::RETRY_TOPIC;
use crate::store::properties::UNIQ_KEY;
use crate::store::record::MessageRecord;
use crate::topic::RETRY_TOPIC_PREFIX;
use crate::topic::validate_group_name;
use rocketraft_domain::names::RETRY_DELAY_LEVEL_BASE;

impl BrokerService {
    pub(super) async fn handle_send_message_back(
        &self,
        request: pb::SendMessageBackRequest,
    ) -> Result<pb::SendMessageBackResponse, BrokerError> {
        self.ensure_leader()?;
        self.ensure_disk_has_room()?;
        validate_group_name(&request.group).map_err(BrokerError::BadRequest)?;
        if !(0..=RETRY_MAX_TIMES_MAX as i32).contains(&request.max_reconsume_times) {
            return Err(BrokerError::BadRequest(format!(
                "max_reconsume_times must be 0 (the group's) to {RETRY_MAX_TIMES_MAX}, got {}",
                request.max_reconsume_times
            )));
        }
        let config = self.group_config(&request.group).await?;
        let original = self
            .group
            .store()
            .read_message(request.commit_log_offset)
            .map_err(|_| BrokerError::MessageNotFound(request.commit_log_offset))?;
        let times = original.reconsume_times;
        let max = match request.max_reconsume_times {
            0 => config.retry_max_times as i32,
            max => max,
        };
        let mut copy =
            self.redelivery_copy(&original, request.commit_log_offset, times + 1, max)?;
        let dead_lettered = times >= max || request.delay_level < 0;
        if dead_lettered {
            into_dead_letter(&mut copy, &request.group);
            self.system_topic(&copy.topic, DLQ_QUEUE_COUNT).await?;
            tracing::info!(
                group = request.group,
                times,
                max,
                "message moved to the dead-letter topic"
            );
        } else {
            copy.topic = retry_topic(&request.group);
            let retry = self
                .system_topic(&copy.topic, config.retry_queue_count)
                .await?;
            copy.queue_id = request
                .commit_log_offset
                .rem_euclid(i64::from(retry.write_queue_count)) as i32;
            let level = match request.delay_level {
                0 => RETRY_DELAY_LEVEL_BASE + times,
                level => level,
            };
            let level = self.delay_levels.clamp(level.max(1) as u32).unwrap_or(1);
            park(&mut copy, level, &self.delay_levels).map_err(BrokerError::illegal)?;
        }
        let topic = if dead_lettered {
            copy.topic.clone()
        } else {
            retry_topic(&request.group)
        };
        let encoded = copy.encode().map_err(BrokerError::illegal)?;
        // Each hand-back is a copy with a higher reconsume count; a repeated call for the same
        // one is deduplicated by the message's UNIQ_KEY and that count.
        let appended = self.commit_records(encoded, 1, request.deduplicate).await?;
        self.metrics
            .sent_back(usize::from(!dead_lettered), usize::from(dead_lettered));
        Ok(pb::SendMessageBackResponse {
            topic,
            reconsume_times: times + 1,
            dead_lettered,
            commit_log_offset: appended
                .first()
                .map_or(-1, |message| message.commit_log_offset),
        })
    }

    /// A copy of `original` (stored at `commit_log_offset`) to deliver again: it names the
    /// topic and message it came from (`RETRY_TOPIC`, `ORIGIN_MESSAGE_ID`, each kept if set)
    /// and the most reconsumes allowed, counts `reconsume_times`, and is stored now.
    pub(super) fn redelivery_copy(
        &self,
        original: &MessageRecord,
        commit_log_offset: i64,
        reconsume_times: i32,
        max_reconsume_times: i32,
    ) -> Result<MessageRecord, BrokerError> {
        let mut copy = original.clone();
        let properties = &mut copy.properties;
        if properties.get(RETRY_TOPIC).is_none() && !original.topic.starts_with(RETRY_TOPIC_PREFIX)
        {
            properties
                .insert(RETRY_TOPIC, original.topic.clone())
                .map_err(BrokerError::illegal)?;
        }
        if properties.get(ORIGIN_MESSAGE_ID).is_none() {
            let origin = properties.get(UNIQ_KEY).map_or_else(
                || offset_msg_id(self.store_host, commit_log_offset),
                str::to_owned,
            );
            properties
                .insert(ORIGIN_MESSAGE_ID, origin)
                .map_err(BrokerError::illegal)?;
        }
        properties
            .insert(MAX_RECONSUME_TIMES, max_reconsume_times.to_string())
            .map_err(BrokerError::illegal)?;
        copy.reconsume_times = reconsume_times;
        copy.store_timestamp_ms = self.clock.now_ms();
        copy.queue_offset = 0;
        copy.physical_offset = 0;
        Ok(copy)
    }
}

/// Sends `copy` to `group`'s dead-letter topic (queue 0), undelayed.
pub(super) fn into_dead_letter(copy: &mut MessageRecord, group: &str) {
    copy.topic = dlq_topic(group);
    copy.queue_id = 0;
    copy.properties.remove(DELAY);
}
