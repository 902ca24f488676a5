//! `PulledMessage`s built from records read in place: what pulls and key queries answer.
//!
//! A message's body and properties are copied from the CommitLog as they are stored (the
//! properties stay in their encoded form; the client reads them), so building one decodes
//! nothing but its fixed fields and hosts. Host text is shared by the messages of one
//! answer ([`HostText`]): a response's messages mostly come from a few producers and one
//! store host.

use std::net::SocketAddr;

use bytes::Bytes;
use rocketraft_proto::broker as pb;

use crate::error::BrokerError;
use crate::store::StoreError;
use crate::store::record::RecordView;

/// The text of the hosts met while building one answer.
#[derive(Debug, Default)]
pub(super) struct HostText {
    known: Vec<(SocketAddr, String)>,
}

impl HostText {
    /// Hosts remembered at most; any further host is formatted each time it appears.
    const KNOWN_MAX: usize = 16;

    fn text(&mut self, host: SocketAddr) -> String {
        if let Some((_, text)) = self.known.iter().find(|(known, _)| *known == host) {
            return text.clone();
        }
        let text = host.to_string();
        if self.known.len() < Self::KNOWN_MAX {
            self.known.push((host, text.clone()));
        }
        text
    }
}

/// The message of `view`, stored at `commit_log_offset` and at `queue_offset` of its queue.
pub(super) fn to_pulled(
    view: &RecordView<'_>,
    queue_offset: i64,
    commit_log_offset: i64,
    hosts: &mut HostText,
) -> Result<pb::PulledMessage, BrokerError> {
    let corrupt = |source| StoreError::Corrupt {
        offset: commit_log_offset as u64,
        source,
    };
    Ok(pb::PulledMessage {
        topic: view.topic().to_owned(),
        queue_id: view.queue_id(),
        queue_offset,
        commit_log_offset,
        body: Bytes::copy_from_slice(view.body()),
        properties: Bytes::copy_from_slice(view.properties_bytes()),
        flag: view.flag(),
        reconsume_times: view.reconsume_times(),
        born_timestamp_ms: view.born_timestamp_ms(),
        store_timestamp_ms: view.store_timestamp_ms(),
        born_host: hosts.text(view.born_host().map_err(corrupt)?),
        store_host: hosts.text(view.store_host().map_err(corrupt)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::RecordView;
    use crate::store::record::tests::sample;

    #[test]
    fn a_pulled_message_carries_the_record_as_stored() {
        let mut record = sample("T", 3, b"body");
        record.properties.insert("TAGS", "TagA").expect("insert");
        record.reconsume_times = 2;
        let bytes = record.encode().expect("encode");
        let view = RecordView::parse(&bytes).expect("parse");
        let mut hosts = HostText::default();
        let pulled = to_pulled(&view, 7, 4096, &mut hosts).expect("pulled");
        assert_eq!(
            (pulled.topic.as_str(), pulled.queue_id, pulled.queue_offset),
            ("T", 3, 7)
        );
        assert_eq!(pulled.commit_log_offset, 4096);
        assert_eq!(&pulled.body[..], b"body");
        assert_eq!(&pulled.properties[..], view.properties_bytes());
        assert_eq!(pulled.reconsume_times, 2);
        assert_eq!(pulled.born_timestamp_ms, record.born_timestamp_ms);
        assert_eq!(pulled.store_timestamp_ms, record.store_timestamp_ms);
        assert_eq!(pulled.born_host, record.born_host.to_string());
        assert_eq!(pulled.store_host, record.store_host.to_string());
        assert_eq!(hosts.known.len(), 2, "{:?}", hosts.known);
    }

    #[test]
    fn host_text_is_formatted_once_per_host() {
        let mut hosts = HostText::default();
        let a: SocketAddr = "10.0.0.1:1".parse().expect("addr");
        assert_eq!(hosts.text(a), "10.0.0.1:1");
        assert_eq!(hosts.text(a), "10.0.0.1:1");
        for port in 0..HostText::KNOWN_MAX as u16 + 4 {
            let host = SocketAddr::from(([10, 0, 0, 2], port));
            assert_eq!(hosts.text(host), host.to_string());
        }
        assert_eq!(hosts.known.len(), HostText::KNOWN_MAX);
    }
}
