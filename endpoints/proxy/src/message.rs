//! A stored rocketraft message in the 5.x form, as server commands carry it: the system
//! properties back out of the rocketraft properties `send.rs` stored them in.

use rocketraft_client::message::MessageExt;
use rocketraft_domain::property_keys::BORN_HOST;
use rocketraft_domain::property_keys::REAL_TOPIC;
use rocketraft_domain::property_keys::SHARDING_KEY;
use rocketraft_domain::property_keys::SYSTEM_KEYS;
use rocketraft_domain::property_keys::TIMER_DELIVER_MS;

use crate::pb;

/// `message` as a 5.x message of type `kind`, under the topic it was sent to.
pub fn to_v5(message: &MessageExt, kind: pb::MessageType) -> pb::Message {
    let property = |key: &str| message.properties.get(key);
    let topic = property(REAL_TOPIC).unwrap_or(&message.topic).to_owned();
    let user_properties = message
        .properties
        .iter()
        .filter(|(key, _)| !SYSTEM_KEYS.contains(key))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
    let system_properties = pb::SystemProperties {
        tag: message.tags.clone(),
        keys: message.keys.clone(),
        message_id: message.msg_id.clone(),
        body_digest: Some(body_digest(&message.body)),
        body_encoding: pb::Encoding::Identity as i32,
        message_type: kind as i32,
        born_timestamp: Some(timestamp(message.born_timestamp_ms)),
        born_host: property(BORN_HOST).unwrap_or(&message.born_host).to_owned(),
        store_timestamp: Some(timestamp(message.store_timestamp_ms)),
        store_host: message.store_host.clone(),
        delivery_timestamp: property(TIMER_DELIVER_MS)
            .and_then(|ms| ms.parse().ok())
            .map(timestamp),
        receipt_handle: None,
        queue_id: message.queue_id,
        queue_offset: Some(message.queue_offset),
        invisible_duration: None,
        delivery_attempt: None,
        message_group: property(SHARDING_KEY).map(str::to_owned),
        trace_context: None,
        orphaned_transaction_recovery_duration: None,
        dead_letter_queue: None,
    };
    pb::Message {
        topic: Some(pb::Resource {
            resource_namespace: String::new(),
            name: topic,
        }),
        user_properties,
        system_properties: Some(system_properties),
        body: message.body.clone(),
    }
}

/// The body's SHA1 in uppercase hex, the digest every official client verifies alike (they
/// disagree on CRC32's format).
fn body_digest(body: &[u8]) -> pb::Digest {
    pb::Digest {
        r#type: pb::DigestType::Sha1 as i32,
        checksum: sha1_smol::Sha1::from(body)
            .digest()
            .to_string()
            .to_uppercase(),
    }
}

/// A time in ms since the epoch as a protobuf timestamp.
pub fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// A protobuf timestamp in ms since the epoch.
pub fn to_ms(timestamp: &prost_types::Timestamp) -> i64 {
    timestamp
        .seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(timestamp.nanos / 1_000_000))
}

/// Seconds since the epoch from which a delivery timestamp's `seconds` field must hold
/// milliseconds instead (the year 5138): the Python client 5.1.2 writes the time it was given
/// into `seconds` unconverted, and its apps give milliseconds, the unit it reads back.
const SECONDS_THAT_ARE_MILLISECONDS: i64 = 100_000_000_000;

/// A message's delivery time in epoch milliseconds. A timestamp whose `seconds` are only
/// plausible as milliseconds (and carry no nanoseconds) is read as milliseconds: such a time
/// is millennia past any delay a broker accepts, so this only turns a sure refusal into what
/// the client meant.
pub fn delivery_ms(timestamp: &prost_types::Timestamp) -> i64 {
    if timestamp.seconds >= SECONDS_THAT_ARE_MILLISECONDS && timestamp.nanos == 0 {
        timestamp.seconds
    } else {
        to_ms(timestamp)
    }
}

#[cfg(test)]
mod tests {
    use rocketraft_domain::property_keys::TRAN_MSG;
    use rocketraft_domain::property_keys::UNIQ_KEY;

    use super::*;

    #[test]
    fn system_properties_come_back_out_of_the_stored_ones() {
        let stored = MessageExt {
            topic: "RMQ_SYS_TRANS_HALF_TOPIC".into(),
            msg_id: "ID1".into(),
            tags: Some("TagA".into()),
            keys: vec!["k1".into()],
            body: "body".into(),
            born_timestamp_ms: 1_700_000_000_123,
            born_host: "10.0.0.1:5000".into(),
            properties: [
                (REAL_TOPIC, "Orders"),
                (UNIQ_KEY, "ID1"),
                (TRAN_MSG, "true"),
                (BORN_HOST, "app-host"),
                ("shop", "north"),
            ]
            .into_iter()
            .collect(),
            ..MessageExt::default()
        };
        let v5 = to_v5(&stored, pb::MessageType::Transaction);
        assert_eq!(v5.topic.expect("a topic").name, "Orders");
        assert_eq!(
            v5.user_properties.into_iter().collect::<Vec<_>>(),
            [("shop".to_owned(), "north".to_owned())]
        );
        let system = v5.system_properties.expect("system properties");
        assert_eq!(system.message_id, "ID1");
        assert_eq!(system.tag.as_deref(), Some("TagA"));
        assert_eq!(system.born_host, "app-host");
        assert_eq!(
            to_ms(&system.born_timestamp.expect("born")),
            1_700_000_000_123
        );
        assert_eq!(system.message_type(), pb::MessageType::Transaction);
        let digest = system.body_digest.expect("a body digest");
        assert_eq!(digest.r#type(), pb::DigestType::Sha1);
        // SHA1("body"), as the clients compute it: uppercase hex.
        assert_eq!(digest.checksum, "02083F4579E08A612425C0C1A17EE47ADD783B94");
    }

    #[test]
    fn timestamps_round_trip_before_and_after_the_epoch() {
        for ms in [0, 1, 999, 1_000, 1_700_000_000_123, -1, -1_001] {
            assert_eq!(to_ms(&timestamp(ms)), ms, "{ms}");
        }
    }

    #[test]
    fn a_delivery_time_only_plausible_as_milliseconds_is_read_so() {
        let at = |seconds, nanos| delivery_ms(&prost_types::Timestamp { seconds, nanos });
        assert_eq!(at(1_764_000_000, 250_000_000), 1_764_000_000_250, "seconds");
        assert_eq!(
            at(SECONDS_THAT_ARE_MILLISECONDS - 1, 0),
            (SECONDS_THAT_ARE_MILLISECONDS - 1) * 1000,
            "the last second read as seconds"
        );
        assert_eq!(
            at(SECONDS_THAT_ARE_MILLISECONDS, 0),
            SECONDS_THAT_ARE_MILLISECONDS,
            "milliseconds in the seconds field"
        );
        assert_eq!(at(1_764_000_000_250, 0), 1_764_000_000_250);
        assert_eq!(
            at(1_764_000_000_250, 1),
            1_764_000_000_250_000,
            "with nanoseconds it is seconds: far past any delay"
        );
    }
}
