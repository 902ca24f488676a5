//! The consumer registry of a broker group's leader: which clients of each
//! consumer group are alive, from their heartbeats, and what each subscribes to.
//!
//! It is leader-only, in memory and not replicated: after a failover clients heartbeat the
//! new leader, which rebuilds it. Each member keeps its own subscription, so members that
//! disagree are detected (RocketMQ lets them silently overwrite each other). Every change of
//! a group's membership is published as a [`MembershipEvent`], so its clients rebalance at
//! once. Time is an input of the registry (tokio's clock, so tests can pause it); only the
//! expiry task reads it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

/// A member is dropped after this long without a heartbeat (RocketMQ's default).
pub const CLIENT_EXPIRY_DEFAULT: Duration = Duration::from_secs(120);
/// Subscriptions one heartbeat may carry at most.
pub const HEARTBEAT_SUBSCRIPTIONS_MAX: usize = 1024;
/// Members the registry holds at most, over all groups, so heartbeats with ever new client ids
/// cannot grow the leader's memory without bound; known members always refresh.
pub const CONSUMER_MEMBERS_MAX: usize = 65_536;

/// A heartbeat from a new member found the registry full.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the consumer registry holds its maximum of {max} members (CONSUMER_MEMBERS_MAX)")]
pub struct RegistryFull {
    pub max: usize,
}

/// Membership events buffered for slow watchers; one that falls behind is told every group
/// may have changed.
const MEMBERSHIP_EVENTS_BUFFERED: usize = 1024;

/// topic -> subscription expression.
pub type Subscriptions = BTreeMap<String, Expression>;

/// A subscription expression as its consumer gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expression {
    /// `TAG` or `SQL92` (`rocketraft_domain::sql_filter::EXPRESSION_TYPE_*`).
    pub kind: String,
    pub text: String,
}

/// Who a member is, as its heartbeats describe it (its address, language, version and
/// consume settings), for operators' views of its group.
pub type ClientInfo = rocketraft_proto::broker::ClientInfo;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub client_id: String,
    pub subscriptions: Subscriptions,
    pub client: ClientInfo,
    pub idle: Duration,
}

#[derive(Debug)]
struct Entry {
    subscriptions: Subscriptions,
    client: ClientInfo,
    last_seen: Instant,
}

/// What watchers of the registry are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipEvent {
    /// A member joined or left this group.
    GroupChanged(String),
    /// This node stopped leading: the registry is empty until it leads again.
    LeadershipLost,
}

#[derive(Debug)]
pub struct ConsumerRegistry {
    /// group -> client id -> entry.
    groups: Mutex<BTreeMap<String, BTreeMap<String, Entry>>>,
    events: broadcast::Sender<MembershipEvent>,
}

impl Default for ConsumerRegistry {
    fn default() -> Self {
        ConsumerRegistry {
            groups: Mutex::default(),
            events: broadcast::channel(MEMBERSHIP_EVENTS_BUFFERED).0,
        }
    }
}

impl ConsumerRegistry {
    /// Records a member's heartbeat; a new member is refused once the registry holds
    /// [`CONSUMER_MEMBERS_MAX`].
    pub fn heartbeat(
        &self,
        group: &str,
        client_id: &str,
        subscriptions: Subscriptions,
        client: ClientInfo,
        now: Instant,
    ) -> Result<(), RegistryFull> {
        let entry = Entry {
            subscriptions,
            client,
            last_seen: now,
        };
        {
            let mut groups = self.lock();
            if let Some(known) = groups
                .get_mut(group)
                .and_then(|members| members.get_mut(client_id))
            {
                *known = entry;
                return Ok(());
            }
            let held: usize = groups.values().map(BTreeMap::len).sum();
            if held >= CONSUMER_MEMBERS_MAX {
                return Err(RegistryFull {
                    max: CONSUMER_MEMBERS_MAX,
                });
            }
            groups
                .entry(group.to_owned())
                .or_default()
                .insert(client_id.to_owned(), entry);
        }
        tracing::info!(group, client_id, "consumer joined");
        self.publish(MembershipEvent::GroupChanged(group.to_owned()));
        Ok(())
    }

    /// Removes a member that leaves gracefully; false if it was not a member.
    pub fn unregister(&self, group: &str, client_id: &str) -> bool {
        let left = {
            let mut groups = self.lock();
            let left = groups
                .get_mut(group)
                .is_some_and(|members| members.remove(client_id).is_some());
            groups.retain(|_, members| !members.is_empty());
            left
        };
        if left {
            tracing::info!(group, client_id, "consumer left");
            self.publish(MembershipEvent::GroupChanged(group.to_owned()));
        }
        left
    }

    /// Membership events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<MembershipEvent> {
        self.events.subscribe()
    }

    fn publish(&self, event: MembershipEvent) {
        // No watcher is not an error.
        let _ = self.events.send(event);
    }

    /// Drops members silent for `expiry`; returns the groups whose membership changed.
    pub fn expire(&self, now: Instant, expiry: Duration) -> Vec<String> {
        let mut changed = Vec::new();
        let mut groups = self.lock();
        for (group, members) in groups.iter_mut() {
            let before = members.len();
            members.retain(|client_id, entry| {
                let live = now.saturating_duration_since(entry.last_seen) < expiry;
                if !live {
                    tracing::info!(group = %group, client_id = %client_id, "consumer expired");
                }
                live
            });
            if members.len() != before {
                changed.push(group.clone());
            }
        }
        groups.retain(|_, members| !members.is_empty());
        drop(groups);
        for group in &changed {
            self.publish(MembershipEvent::GroupChanged(group.clone()));
        }
        changed
    }

    /// The live members of `group`, sorted by client id.
    pub fn members(&self, group: &str, now: Instant) -> Vec<Member> {
        let groups = self.lock();
        let Some(members) = groups.get(group) else {
            return Vec::new();
        };
        members
            .iter()
            .map(|(client_id, entry)| Member {
                client_id: client_id.clone(),
                subscriptions: entry.subscriptions.clone(),
                client: entry.client.clone(),
                idle: now.saturating_duration_since(entry.last_seen),
            })
            .collect()
    }

    /// The groups with a live member that subscribes to `topic`, sorted.
    pub fn groups_subscribing(&self, topic: &str) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, members)| {
                members
                    .values()
                    .any(|entry| entry.subscriptions.contains_key(topic))
            })
            .map(|(group, _)| group.clone())
            .collect()
    }

    /// True when every member of `group` subscribes to the same topics with the same
    /// expressions.
    pub fn subscriptions_consistent(&self, group: &str) -> bool {
        let groups = self.lock();
        let Some(members) = groups.get(group) else {
            return true;
        };
        let mut subscriptions = members.values().map(|entry| &entry.subscriptions);
        let first = subscriptions.next();
        subscriptions.all(|other| Some(other) == first)
    }

    /// Forgets everyone: this node stopped leading.
    pub fn clear(&self) {
        self.lock().clear();
        self.publish(MembershipEvent::LeadershipLost);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, BTreeMap<String, Entry>>> {
        self.groups
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Expires silent members a few times per expiry period, and forgets everyone when this
/// node stops leading (the next leader rebuilds from heartbeats).
pub async fn run_consumer_registry(
    raft: crate::raft::types::Raft,
    registry: std::sync::Arc<ConsumerRegistry>,
    expiry: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = expire_silent_members(&registry, expiry) => {}
        () = forget_when_leadership_ends(crate::raft::control::role::RoleWatch::new(&raft), &registry) => {}
    }
}

/// Drops members silent for `expiry`, looking every quarter of it: a member is gone at most
/// `expiry * 5 / 4` after its last heartbeat. Never returns.
async fn expire_silent_members(registry: &ConsumerRegistry, expiry: Duration) {
    let period = (expiry / 4).max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(period).await;
        registry.expire(Instant::now(), expiry);
    }
}

/// Clears the registry whenever leadership ends; returns once Raft has stopped.
async fn forget_when_leadership_ends(
    mut roles: crate::raft::control::role::RoleWatch,
    registry: &ConsumerRegistry,
) {
    let mut role = roles.current();
    while let Some(changed) = roles.changed_from(role).await {
        if role.is_leader && !changed.is_leader {
            registry.clear();
        }
        role = changed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscription(topic: &str, expression: &str) -> Subscriptions {
        let expression = Expression {
            kind: "TAG".into(),
            text: expression.to_owned(),
        };
        [(topic.to_owned(), expression)].into()
    }

    /// The expiry task looks every quarter of `expiry` and drops a member idle for `expiry`
    /// or more, once per change; a member that keeps heartbeating stays. Paused time: the
    /// instants below are exact.
    #[tokio::test(start_paused = true)]
    async fn the_expiry_task_drops_silent_members_at_its_first_look_past_expiry() {
        let expiry = Duration::from_secs(120);
        let look = expiry / 4;
        let registry = std::sync::Arc::new(ConsumerRegistry::default());
        let members = || -> Vec<String> {
            registry
                .members("G", Instant::now())
                .into_iter()
                .map(|member| member.client_id)
                .collect()
        };
        let heartbeat = |client_id: &str| {
            registry
                .heartbeat(
                    "G",
                    client_id,
                    subscription("T", "*"),
                    ClientInfo::default(),
                    Instant::now(),
                )
                .expect("heartbeat");
        };
        let task = tokio::spawn({
            let registry = registry.clone();
            async move { expire_silent_members(&registry, expiry).await }
        });
        // Lets the expiry task take its look at this instant first.
        let pass = |duration| async move {
            tokio::time::sleep(duration).await;
            tokio::task::yield_now().await;
        };

        heartbeat("alive");
        heartbeat("early");
        pass(Duration::from_secs(10)).await;
        heartbeat("late");
        let mut events = registry.subscribe();
        // Looks at 30, 60, 90 and 120 s; "alive" heartbeats just after each.
        pass(look - Duration::from_secs(10)).await;
        heartbeat("alive");
        for _ in 0..3 {
            pass(look).await;
            heartbeat("alive");
        }
        assert_eq!(members(), ["alive", "late"], "early was idle exactly 120 s");
        assert_eq!(
            events.try_recv().ok(),
            Some(MembershipEvent::GroupChanged("G".into()))
        );
        assert!(events.try_recv().is_err(), "one event per change");

        pass(look).await;
        assert_eq!(
            members(),
            ["alive"],
            "late was idle 140 s at the look at 150 s"
        );
        task.abort();
    }

    #[test]
    fn members_expire_and_disagreements_are_seen() {
        let start = Instant::now();
        let registry = ConsumerRegistry::default();
        let mut events = registry.subscribe();
        for _ in 0..2 {
            registry
                .heartbeat(
                    "g",
                    "c2",
                    subscription("t", "A"),
                    ClientInfo::default(),
                    start,
                )
                .expect("heartbeat");
        }
        registry
            .heartbeat(
                "g",
                "c1",
                subscription("t", "A"),
                ClientInfo::default(),
                start + Duration::from_secs(50),
            )
            .expect("heartbeat");
        assert!(registry.subscriptions_consistent("g"));
        let ids: Vec<String> = registry
            .members("g", start)
            .into_iter()
            .map(|m| m.client_id)
            .collect();
        assert_eq!(ids, ["c1", "c2"], "sorted by client id");

        registry
            .heartbeat(
                "g",
                "c3",
                subscription("t", "B"),
                ClientInfo::default(),
                start + Duration::from_secs(60),
            )
            .expect("heartbeat");
        assert!(!registry.subscriptions_consistent("g"));

        let expiry = Duration::from_secs(100);
        assert!(
            registry
                .expire(start + Duration::from_secs(99), expiry)
                .is_empty()
        );
        assert_eq!(
            registry.expire(start + Duration::from_secs(100), expiry),
            ["g"]
        );
        assert_eq!(
            registry
                .members("g", start + Duration::from_secs(100))
                .len(),
            2
        );
        assert!(registry.unregister("g", "c1"));
        assert!(!registry.unregister("g", "c1"), "already gone");
        registry.clear();
        assert!(registry.members("g", start).is_empty());

        let changed = MembershipEvent::GroupChanged("g".into());
        let mut seen = Vec::new();
        while let Ok(event) = events.try_recv() {
            seen.push(event);
        }
        assert_eq!(
            seen,
            [
                changed.clone(), // c2 joined; its second heartbeat is no change
                changed.clone(), // c1 joined
                changed.clone(), // c3 joined
                changed.clone(), // c2 expired
                changed,         // c1 left
                MembershipEvent::LeadershipLost,
            ]
        );
    }

    #[test]
    fn a_full_registry_refuses_new_members_and_still_refreshes_known_ones() {
        let registry = ConsumerRegistry::default();
        let now = Instant::now();
        for i in 0..CONSUMER_MEMBERS_MAX {
            registry
                .heartbeat(
                    &format!("g{}", i % 7),
                    &format!("c{i}"),
                    Subscriptions::new(),
                    ClientInfo::default(),
                    now,
                )
                .expect("below the maximum");
        }
        assert_eq!(
            registry.heartbeat(
                "g0",
                "one-more",
                Subscriptions::new(),
                ClientInfo::default(),
                now
            ),
            Err(RegistryFull {
                max: CONSUMER_MEMBERS_MAX
            })
        );
        registry
            .heartbeat("g0", "c0", Subscriptions::new(), ClientInfo::default(), now)
            .expect("a known member refreshes");
        assert!(registry.unregister("g1", "c1"));
        registry
            .heartbeat(
                "g0",
                "one-more",
                Subscriptions::new(),
                ClientInfo::default(),
                now,
            )
            .expect("room again");
    }

    #[test]
    fn members_keep_their_client_info_and_topics_name_their_groups() {
        let registry = ConsumerRegistry::default();
        let now = Instant::now();
        let client = ClientInfo {
            addr: "10.0.0.1:5000".into(),
            language: "JAVA".into(),
            version: 409,
            ..ClientInfo::default()
        };
        registry
            .heartbeat("b", "c1", subscription("T", "*"), client.clone(), now)
            .expect("heartbeat");
        registry
            .heartbeat(
                "a",
                "c2",
                subscription("T", "*"),
                ClientInfo::default(),
                now,
            )
            .expect("heartbeat");
        registry
            .heartbeat(
                "c",
                "c3",
                subscription("U", "*"),
                ClientInfo::default(),
                now,
            )
            .expect("heartbeat");
        assert_eq!(registry.members("b", now)[0].client, client);
        assert_eq!(registry.groups_subscribing("T"), ["a", "b"]);
        assert!(registry.groups_subscribing("V").is_empty());
    }
}
