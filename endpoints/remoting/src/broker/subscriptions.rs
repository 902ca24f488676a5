//! The subscriptions 4.x consumer groups registered by heartbeat, as this node's pulls read
//! them. A 4.x pull names no filter of its own unless it sets `PullSysFlag` SUBSCRIPTION: the
//! broker filters it by its group's registered subscription of the topic, and refuses it
//! (`SUBSCRIPTION_NOT_EXIST`) while there is none.
//!
//! A consumer heartbeats every broker of its routes, followers included, so a node learns its
//! groups' subscriptions from the heartbeats it passes to the leader. A pull that finds none
//! here, or one older than the pull's `subVersion`, asks the leader's consumer registry
//! (`ListConsumers`) and keeps the answer under that version: a consumer's heartbeat carries a
//! changed subscription to every broker before its pulls use it.
//!
//! Invariant: at most [`SUBSCRIPTIONS_KNOWN_MAX`] entries are kept; past that the table is
//! emptied and refilled from heartbeats and the leader, so it never grows without bound.

use std::collections::HashMap;
use std::sync::Mutex;

use rocketraft_client::subscription::Subscription;
use rocketraft_domain::sql_filter::EXPRESSION_TYPE_SQL92;
use rocketraft_proto::broker as pb;

/// (consumer group, topic) pairs whose subscription a node keeps at most.
pub const SUBSCRIPTIONS_KNOWN_MAX: usize = 65_536;

/// A registered subscription and the `subVersion` it was registered under.
#[derive(Debug, Clone)]
struct Known {
    subscription: pb::SubscriptionData,
    sub_version: i64,
}

/// The subscriptions known to this node, by (consumer group, topic).
#[derive(Debug, Default)]
pub(super) struct Subscriptions {
    known: Mutex<HashMap<(String, String), Known>>,
}

impl Subscriptions {
    /// Records that `group` subscribes as `subscription` says, from version `sub_version`
    /// on; an older version than the one known is ignored.
    pub(super) fn learn(&self, group: &str, subscription: pb::SubscriptionData, sub_version: i64) {
        let mut known = self.lock();
        let key = (group.to_owned(), subscription.topic.clone());
        if known
            .get(&key)
            .is_some_and(|held| held.sub_version > sub_version)
        {
            return;
        }
        if known.len() >= SUBSCRIPTIONS_KNOWN_MAX && !known.contains_key(&key) {
            known.clear();
        }
        known.insert(
            key,
            Known {
                subscription,
                sub_version,
            },
        );
    }

    /// `group`'s subscription of `topic`, if one of at least `sub_version` is known.
    pub(super) fn find(
        &self,
        group: &str,
        topic: &str,
        sub_version: i64,
    ) -> Option<pb::SubscriptionData> {
        self.lock()
            .get(&(group.to_owned(), topic.to_owned()))
            .filter(|held| held.sub_version >= sub_version)
            .map(|held| held.subscription.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Known>> {
        self.known
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A pull's filter: the tags to match by hash, or a SQL92 expression (neither: every message).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct PullFilter {
    pub tags: Vec<String>,
    pub sql: String,
}

/// The filter of a 4.x subscription: `expression_type` `SQL92` (any case) takes `expression`
/// as SQL92, anything else (`TAG`, or none) as a tag expression (`*`, empty, or
/// `TagA || TagB`); a tag expression with an empty tag is an error saying so.
pub(super) fn pull_filter(expression_type: &str, expression: &str) -> Result<PullFilter, String> {
    if expression_type.eq_ignore_ascii_case(EXPRESSION_TYPE_SQL92) {
        return Ok(PullFilter {
            tags: Vec::new(),
            sql: expression.to_owned(),
        });
    }
    if expression.trim().is_empty() {
        return Ok(PullFilter::default());
    }
    Subscription::parse(expression).map(|subscription| PullFilter {
        tags: subscription.tags(),
        sql: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscription(topic: &str, expression: &str) -> pb::SubscriptionData {
        pb::SubscriptionData {
            topic: topic.into(),
            expression: expression.into(),
            expression_type: "TAG".into(),
        }
    }

    #[test]
    fn a_subscription_is_found_from_its_version_on() {
        let known = Subscriptions::default();
        known.learn("G", subscription("T", "TagA"), 5);
        assert_eq!(
            known.find("G", "T", 5).map(|s| s.expression).as_deref(),
            Some("TagA")
        );
        assert_eq!(
            known.find("G", "T", 4).map(|s| s.expression).as_deref(),
            Some("TagA")
        );
        assert!(
            known.find("G", "T", 6).is_none(),
            "a pull's newer version asks again"
        );
        assert!(known.find("G", "U", 0).is_none());
        assert!(known.find("H", "T", 0).is_none());
    }

    #[test]
    fn an_older_heartbeat_does_not_replace_a_newer_subscription() {
        let known = Subscriptions::default();
        known.learn("G", subscription("T", "TagB"), 7);
        known.learn("G", subscription("T", "TagA"), 5);
        assert_eq!(
            known.find("G", "T", 0).map(|s| s.expression).as_deref(),
            Some("TagB")
        );
        known.learn("G", subscription("T", "TagC"), 7);
        assert_eq!(
            known.find("G", "T", 0).map(|s| s.expression).as_deref(),
            Some("TagC")
        );
    }

    #[test]
    fn the_table_is_emptied_when_one_more_would_pass_its_maximum() {
        let known = Subscriptions::default();
        for n in 0..SUBSCRIPTIONS_KNOWN_MAX {
            known.learn(&format!("G{n}"), subscription("T", "*"), 1);
        }
        known.learn("G0", subscription("T", "TagA"), 2);
        assert_eq!(
            known.lock().len(),
            SUBSCRIPTIONS_KNOWN_MAX,
            "a known key replaces"
        );
        known.learn("new", subscription("T", "*"), 1);
        assert_eq!(known.lock().len(), 1);
        assert!(known.find("new", "T", 0).is_some());
    }

    #[test]
    fn expressions_become_pull_filters() {
        let tags = |list: &[&str]| list.iter().map(|tag| (*tag).to_owned()).collect::<Vec<_>>();
        assert_eq!(pull_filter("TAG", "*"), Ok(PullFilter::default()));
        assert_eq!(pull_filter("", ""), Ok(PullFilter::default()));
        assert_eq!(
            pull_filter("TAG", "TagA || TagB").map(|filter| filter.tags),
            Ok(tags(&["TagA", "TagB"]))
        );
        assert_eq!(
            pull_filter("sql92", "a > 1"),
            Ok(PullFilter {
                tags: Vec::new(),
                sql: "a > 1".into()
            })
        );
        let empty_tag = pull_filter("TAG", "TagA ||").expect_err("an empty tag");
        assert!(empty_tag.contains("empty tag"), "{empty_tag}");
    }
}
