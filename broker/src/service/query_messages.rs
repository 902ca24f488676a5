//! `QueryMessages`: find stored messages by message id or key through the store's index
//! (what `mqadmin query-msg` and a 4.x `QUERY_MESSAGE` ask), narrowed to a topic and a store
//! time range; and `ViewMessage`: the message at one CommitLog offset (a 4.x offset message
//! id names one). Any node answers from its committed data.

use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::service::BrokerService;
use crate::service::pulled::HostText;
use crate::service::pulled::to_pulled;
use crate::store::QUERY_BY_KEY_RESULTS_MAX;

/// Characters of a query key at most.
pub const QUERY_KEY_LEN_MAX: usize = 1024;

impl BrokerService {
    pub(super) fn handle_query_messages(
        &self,
        request: &pb::QueryMessagesRequest,
    ) -> Result<pb::QueryMessagesResponse, BrokerError> {
        let key = &request.key;
        if key.trim().is_empty() || key.len() > QUERY_KEY_LEN_MAX {
            return Err(BrokerError::BadRequest(format!(
                "a query key has 1 to {QUERY_KEY_LEN_MAX} characters"
            )));
        }
        let end = match request.end_timestamp_ms {
            0 => i64::MAX,
            end => end,
        };
        if request.begin_timestamp_ms >= end {
            return Err(BrokerError::BadRequest(format!(
                "the store time range [{}, {}) is empty",
                request.begin_timestamp_ms, request.end_timestamp_ms
            )));
        }
        let max = match request.max_messages as usize {
            0 => QUERY_BY_KEY_RESULTS_MAX,
            max => max.min(QUERY_BY_KEY_RESULTS_MAX),
        };
        let store = self.group.store();
        let found = store.query_by_key_where(key, max, |view| {
            (request.topic.is_empty() || view.topic() == request.topic)
                && (request.begin_timestamp_ms..end).contains(&view.store_timestamp_ms())
        })?;
        let (newest_store_timestamp_ms, newest_commit_log_offset) =
            found.first().map_or((0, 0), |view| {
                (view.store_timestamp_ms(), view.physical_offset())
            });
        if request.stored_records {
            let mut stored_records = Vec::with_capacity(found.iter().map(|v| v.total_size()).sum());
            for view in &found {
                stored_records.extend_from_slice(view.bytes());
            }
            return Ok(pb::QueryMessagesResponse {
                messages: Vec::new(),
                stored_records: stored_records.into(),
                newest_store_timestamp_ms,
                newest_commit_log_offset,
            });
        }
        let mut hosts = HostText::default();
        let messages = found
            .iter()
            .map(|view| {
                to_pulled(
                    view,
                    view.queue_offset(),
                    view.physical_offset(),
                    &mut hosts,
                )
            })
            .collect::<Result<_, _>>()?;
        Ok(pb::QueryMessagesResponse {
            messages,
            stored_records: Default::default(),
            newest_store_timestamp_ms,
            newest_commit_log_offset,
        })
    }

    /// The stored record at `commit_log_offset`; `MESSAGE_NOT_FOUND` when no message starts
    /// there (retention deleted it, it is not written yet, or the offset is inside a record).
    pub(super) fn handle_view_message(
        &self,
        commit_log_offset: i64,
    ) -> Result<pb::ViewMessageResponse, BrokerError> {
        let store = self.group.store();
        let in_range = (store.commit_log_min_offset()..store.commit_log_max_offset())
            .contains(&commit_log_offset);
        let view = in_range
            .then(|| store.read_view(commit_log_offset).ok())
            .flatten()
            .filter(|view| view.physical_offset() == commit_log_offset)
            .ok_or(BrokerError::MessageNotFound(commit_log_offset))?;
        Ok(pb::ViewMessageResponse {
            stored_record: bytes::Bytes::copy_from_slice(view.bytes()),
        })
    }
}
