//! What a topic's [`TopicMessageType`] means where it is read: a type not said is `Mixed`
//! (every type), and its name is RocketMQ's (`FIFO`, `MIXED`, ...).

use rocketraft_proto::common::TopicMessageType;

/// How a [`TopicMessageType`] read off the wire is understood.
pub trait TopicTypeMeaning {
    /// The type a route or registration means: `Unspecified` (a broker that keeps no types)
    /// is `Mixed`.
    fn or_mixed(self) -> TopicMessageType;
    /// RocketMQ's name of the type (its `message.type` attribute's value).
    fn name(self) -> &'static str;
}

impl TopicTypeMeaning for TopicMessageType {
    fn or_mixed(self) -> TopicMessageType {
        match self {
            TopicMessageType::Unspecified => TopicMessageType::Mixed,
            said => said,
        }
    }

    fn name(self) -> &'static str {
        let name = self.as_str_name();
        name.strip_prefix("TOPIC_MESSAGE_TYPE_").unwrap_or(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsaid_is_mixed_and_names_are_rocketmqs() {
        assert_eq!(
            TopicMessageType::Unspecified.or_mixed(),
            TopicMessageType::Mixed
        );
        assert_eq!(TopicMessageType::Fifo.or_mixed(), TopicMessageType::Fifo);
        assert_eq!(TopicMessageType::Fifo.name(), "FIFO");
        assert_eq!(TopicMessageType::Transaction.name(), "TRANSACTION");
    }
}
