//! Where a consumer group without a committed offset for a queue starts reading it, and
//! the broker calls that find that offset (shared by the push consumer and `mqadmin
//! consume`).

use rocketraft_proto::broker as pb;
use rocketraft_proto::broker::broker_client::BrokerClient;
use tonic::transport::Channel;

/// Where a group with no committed offset for a queue starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeFrom {
    /// The oldest message still stored.
    First,
    /// After the newest message (only what is sent from now on).
    Last,
    /// The first message stored at or after this time (ms since the epoch).
    Timestamp(i64),
}

impl std::str::FromStr for ConsumeFrom {
    type Err = String;

    /// `first`, `last` or `timestamp:MS`.
    fn from_str(text: &str) -> Result<ConsumeFrom, String> {
        match text {
            "first" => Ok(ConsumeFrom::First),
            "last" => Ok(ConsumeFrom::Last),
            other => other
                .strip_prefix("timestamp:")
                .and_then(|ms| ms.parse().ok())
                .map(ConsumeFrom::Timestamp)
                .ok_or_else(|| {
                    format!("{other:?}: expected first, last or timestamp:MS (ms since the epoch)")
                }),
        }
    }
}

/// The offset of `topic`/`queue_id` that `from` names, asked of the node behind `client`.
pub(crate) async fn start_offset(
    client: &mut BrokerClient<Channel>,
    topic: &str,
    queue_id: i32,
    from: ConsumeFrom,
) -> Result<i64, tonic::Status> {
    if let ConsumeFrom::Timestamp(timestamp_ms) = from {
        let request = pb::SearchOffsetRequest {
            topic: topic.to_owned(),
            queue_id,
            timestamp_ms,
        };
        return Ok(client.search_offset(request).await?.into_inner().offset);
    }
    let request = pb::ReadConsumeQueueRequest {
        topic: topic.to_owned(),
        queue_id,
        from_queue_offset: 0,
        max_units: 1,
    };
    let bounds = client.read_consume_queue(request).await?.into_inner();
    Ok(if from == ConsumeFrom::First {
        bounds.min_queue_offset
    } else {
        bounds.max_queue_offset
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consume_from_parses_its_three_forms() {
        assert_eq!("first".parse(), Ok(ConsumeFrom::First));
        assert_eq!("last".parse(), Ok(ConsumeFrom::Last));
        assert_eq!("timestamp:1700".parse(), Ok(ConsumeFrom::Timestamp(1700)));
        for bad in ["", "First", "timestamp:", "timestamp:x", "yesterday"] {
            assert!(bad.parse::<ConsumeFrom>().is_err(), "{bad:?}");
        }
    }
}
