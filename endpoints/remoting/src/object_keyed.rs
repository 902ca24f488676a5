//! Maps keyed by objects, written as fastjson writes a Java `HashMap<MessageQueue, V>`: each
//! key an inline JSON object, `{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`.
//!
//! That is not JSON, but it is what Java admin tools (mqadmin, rocketmq-dashboard,
//! rocketmq-exporter) parse `TopicStatsTable` and `ConsumeStats` from, and the only form that
//! gives them a `MessageQueue` back: a string key cannot become one. Invariant: keys and values
//! are written by serde_json, compact, with their fields in declaration order (declare them
//! sorted, as fastjson sorts them).

use serde::Serialize;

/// RocketMQ's `MessageQueue`, as a map key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueue {
    pub broker_name: String,
    pub queue_id: i32,
    pub topic: String,
}

/// `entries` as one object-keyed map.
pub fn object_keyed_map<K: Serialize, V: Serialize>(
    entries: &[(K, V)],
) -> Result<String, serde_json::Error> {
    let mut out = String::from("{");
    for (index, (key, value)) in entries.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(key)?);
        out.push(':');
        out.push_str(&serde_json::to_string(value)?);
    }
    out.push('}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Offsets {
        max_offset: i64,
        min_offset: i64,
    }

    #[test]
    fn keys_are_inline_objects_with_sorted_fields() {
        let queue = |queue_id| MessageQueue {
            broker_name: "broker-a".into(),
            queue_id,
            topic: "T".into(),
        };
        let map = object_keyed_map(&[
            (
                queue(0),
                Offsets {
                    max_offset: 5,
                    min_offset: 0,
                },
            ),
            (
                queue(1),
                Offsets {
                    max_offset: 7,
                    min_offset: 2,
                },
            ),
        ])
        .expect("written");
        assert_eq!(
            map,
            r#"{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"maxOffset":5,"minOffset":0},{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"maxOffset":7,"minOffset":2}}"#
        );
        assert_eq!(
            object_keyed_map::<MessageQueue, Offsets>(&[]).expect("empty"),
            "{}"
        );
    }

    #[test]
    fn names_with_quotes_stay_escaped_inside_keys() {
        let key = MessageQueue {
            broker_name: "b\"x".into(),
            queue_id: -1,
            topic: "T".into(),
        };
        let map = object_keyed_map(&[(key, 1)]).expect("written");
        assert_eq!(map, r#"{{"brokerName":"b\"x","queueId":-1,"topic":"T"}:1}"#);
    }
}
