//! The route registry: which nodes each broker group has, which of them leads, and which
//! topics each group serves.
//!
//! Invariants: a group's leader is its live node registered as leader with the highest
//! term (an isolated old leader may still register, but only with an older term), and only
//! while no live node registered a higher term: a route names a leader only with that
//! leader's own term, and during an election (a node voted in a newer term, whose leader has
//! not registered yet) names none, so clients ask the nodes instead of a deposed or vanished
//! leader (with pre-vote, a node's term rises only when a majority would elect); a group's
//! topics come from the registration of its leader of the highest term seen; a node is live
//! while its last registration is younger than the expiry; a group is routed to the live
//! nodes in the membership its leader of the highest term registered (all live nodes before
//! one did). Time is passed in, never read.

use rocketraft_proto::common::TopicMessageType;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::time::Duration;
use std::time::Instant;

use rocketraft_domain::perm::PERM_READ_WRITE;
use rocketraft_proto::nameserver as pb;

#[derive(Debug, Clone)]
struct NodeEntry {
    cluster: String,
    addr: String,
    role: pb::Role,
    term: u64,
    last_seen: Instant,
}

#[derive(Debug, Default)]
struct GroupEntry {
    nodes: BTreeMap<u64, NodeEntry>,
    topics: BTreeMap<String, pb::TopicConfig>,
    /// Term of the leader whose topic configs `topics` holds.
    topics_term: u64,
    /// Queues of a topic the group creates on first send; 0 if it does not.
    auto_create_queue_count: u32,
    /// The Raft membership the leader of term `members_term` registered; empty: none yet.
    members: BTreeSet<u64>,
    members_term: u64,
}

impl GroupEntry {
    /// The highest term any live node registered.
    fn term(&self) -> u64 {
        self.nodes.values().map(|node| node.term).max().unwrap_or(0)
    }

    /// The leader of the group's current term, if it registered.
    fn leader(&self) -> Option<(u64, &NodeEntry)> {
        let term = self.term();
        self.nodes
            .iter()
            .find(|(_, node)| node.role == pb::Role::Leader && node.term == term)
            .map(|(id, node)| (*id, node))
    }

    fn route(&self, group: &str) -> pb::GroupRoute {
        let leader = self.leader();
        let term = self.term();
        let listed = |id: &u64| self.members.is_empty() || self.members.contains(id);
        pb::GroupRoute {
            cluster: self
                .nodes
                .values()
                .next()
                .map(|node| node.cluster.clone())
                .unwrap_or_default(),
            group: group.to_owned(),
            nodes: self
                .nodes
                .iter()
                .filter(|(id, _)| listed(id))
                .map(|(id, node)| (*id, node.addr.clone()))
                .collect(),
            leader_id: leader.map(|(id, _)| id),
            leader_addr: leader
                .map(|(_, node)| node.addr.clone())
                .unwrap_or_default(),
            term,
            current_node_ids: self
                .nodes
                .iter()
                .filter(|(id, node)| listed(id) && node.term == term)
                .map(|(id, _)| *id)
                .collect(),
        }
    }
}

#[derive(Debug, Default)]
pub struct RouteRegistry {
    groups: BTreeMap<String, GroupEntry>,
}

impl RouteRegistry {
    /// Records a node's registration at `now`.
    pub fn register(&mut self, registration: pb::RegisterBrokerRequest, now: Instant) {
        let role = registration.role();
        let group = self.groups.entry(registration.group.clone()).or_default();
        group.auto_create_queue_count = registration.auto_create_queue_count;
        if role == pb::Role::Leader && registration.term >= group.topics_term {
            group.topics = registration
                .topics
                .into_iter()
                .map(|topic| (topic.name.clone(), topic))
                .collect();
            group.topics_term = registration.term;
        }
        if role == pb::Role::Leader
            && registration.term >= group.members_term
            && !registration.members.is_empty()
        {
            group.members = registration.members.iter().copied().collect();
            group.members_term = registration.term;
        }
        let node = NodeEntry {
            cluster: registration.cluster,
            addr: registration.addr,
            role,
            term: registration.term,
            last_seen: now,
        };
        group.nodes.insert(registration.node_id, node);
    }

    /// Drops the nodes not heard from within `expiry` before `now`, and groups left empty.
    /// Returns how many nodes were dropped.
    pub fn expire(&mut self, now: Instant, expiry: Duration) -> usize {
        let mut dropped = 0;
        for (group_name, group) in &mut self.groups {
            group.nodes.retain(|node_id, node| {
                let live = now.saturating_duration_since(node.last_seen) < expiry;
                if !live {
                    tracing::info!(group = %group_name, node_id, addr = %node.addr, "broker node expired");
                    dropped += 1;
                }
                live
            });
        }
        self.groups.retain(|_, group| !group.nodes.is_empty());
        dropped
    }

    /// The groups serving `topic`; for a topic no group has, the groups that create topics
    /// on first send (RocketMQ's `TBW102` route); `None` if neither exists.
    pub fn topic_route(&self, topic: &str) -> Option<pb::TopicRoute> {
        let mut route = pb::TopicRoute {
            topic: topic.to_owned(),
            ..Default::default()
        };
        for (name, group) in &self.groups {
            if let Some(config) = group.topics.get(topic) {
                route.queues.push(pb::QueueData {
                    group: name.clone(),
                    read_queue_count: config.read_queue_count,
                    write_queue_count: config.write_queue_count,
                    perm: config.perm,
                    message_type: config.message_type,
                });
                route.groups.push(group.route(name));
            }
        }
        if route.groups.is_empty() {
            for (name, group) in self
                .groups
                .iter()
                .filter(|(_, group)| group.auto_create_queue_count > 0)
            {
                route.queues.push(pb::QueueData {
                    group: name.clone(),
                    read_queue_count: group.auto_create_queue_count,
                    write_queue_count: group.auto_create_queue_count,
                    perm: PERM_READ_WRITE,
                    message_type: TopicMessageType::Mixed as i32,
                });
                route.groups.push(group.route(name));
            }
        }
        (!route.groups.is_empty()).then_some(route)
    }

    pub fn cluster_info(&self) -> pb::ClusterInfo {
        pb::ClusterInfo {
            groups: self
                .groups
                .iter()
                .map(|(name, group)| group.route(name))
                .collect(),
        }
    }

    pub fn topic_list(&self) -> pb::TopicList {
        let mut topics: Vec<String> = self
            .groups
            .values()
            .flat_map(|group| group.topics.keys().cloned())
            .collect();
        topics.sort_unstable();
        topics.dedup();
        pb::TopicList { topics }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(
        node_id: u64,
        role: pb::Role,
        term: u64,
        topics: &[&str],
    ) -> pb::RegisterBrokerRequest {
        pb::RegisterBrokerRequest {
            cluster: "c".into(),
            group: "broker-a".into(),
            node_id,
            addr: format!("127.0.0.1:{}", 10_000 + node_id),
            role: role as i32,
            term,
            auto_create_queue_count: 0,
            topics: topics
                .iter()
                .map(|name| pb::TopicConfig {
                    name: (*name).into(),
                    read_queue_count: 4,
                    write_queue_count: 4,
                    perm: PERM_READ_WRITE,
                    ..Default::default()
                })
                .collect(),
            members: Vec::new(),
        }
    }

    #[test]
    fn only_the_leaders_members_are_routed() {
        let now = Instant::now();
        let mut registry = RouteRegistry::default();
        for id in 1..=3 {
            registry.register(registration(id, pb::Role::Follower, 1, &[]), now);
        }
        let routed = |registry: &RouteRegistry| -> Vec<u64> {
            let routed: BTreeSet<u64> = registry.cluster_info().groups[0]
                .nodes
                .keys()
                .copied()
                .collect();
            routed.into_iter().collect()
        };
        assert_eq!(
            routed(&registry),
            [1, 2, 3],
            "no membership known yet: every live node"
        );
        // Node 3 was removed; it still runs and registers as a follower.
        let mut leader = registration(1, pb::Role::Leader, 2, &[]);
        leader.members = vec![1, 2, 4];
        registry.register(leader, now);
        registry.register(registration(4, pb::Role::Follower, 2, &[]), now);
        assert_eq!(routed(&registry), [1, 2, 4]);
        // An old leader's membership does not override a newer one's.
        let mut stale = registration(3, pb::Role::Leader, 1, &[]);
        stale.members = vec![1, 2, 3];
        registry.register(stale, now);
        assert_eq!(routed(&registry), [1, 2, 4]);
    }

    #[test]
    fn the_leader_of_the_highest_term_leads_and_owns_the_topics() {
        let now = Instant::now();
        let mut registry = RouteRegistry::default();
        registry.register(registration(1, pb::Role::Leader, 1, &["old"]), now);
        registry.register(registration(2, pb::Role::Leader, 2, &["new"]), now);
        // The deposed leader registers again, still believing it leads term 1.
        registry.register(registration(1, pb::Role::Leader, 1, &["old"]), now);
        registry.register(registration(3, pb::Role::Follower, 2, &["ignored"]), now);
        let info = registry.cluster_info();
        assert_eq!(info.groups.len(), 1);
        assert_eq!(info.groups[0].leader_id, Some(2));
        assert_eq!(info.groups[0].nodes.len(), 3);
        assert!(registry.topic_route("old").is_none());
        assert!(registry.topic_route("ignored").is_none());
        let route = registry.topic_route("new").expect("route");
        assert_eq!(route.groups[0].leader_addr, "127.0.0.1:10002");
        assert_eq!(route.queues[0].write_queue_count, 4);
        assert_eq!(registry.topic_list().topics, vec!["new".to_owned()]);
    }

    #[test]
    fn a_leader_is_routed_only_with_its_own_term() {
        let now = Instant::now();
        let mut registry = RouteRegistry::default();
        registry.register(registration(1, pb::Role::Leader, 1, &["t"]), now);
        registry.register(registration(2, pb::Role::Follower, 1, &[]), now);
        let group = |registry: &RouteRegistry| registry.cluster_info().groups[0].clone();
        assert_eq!(
            (group(&registry).leader_id, group(&registry).term),
            (Some(1), 1)
        );
        assert_eq!(group(&registry).current_node_ids, [1, 2]);
        // Node 1's host vanished; node 2 voted in term 2, whose leader has not registered.
        registry.register(registration(2, pb::Role::Follower, 2, &[]), now);
        let electing = group(&registry);
        assert_eq!((electing.leader_id, electing.term), (None, 2));
        assert!(electing.leader_addr.is_empty(), "{electing:?}");
        let route = registry.topic_route("t").expect("the topics stay routed");
        assert_eq!(route.groups[0].leader_id, None);
        registry.register(registration(2, pb::Role::Leader, 2, &["t"]), now);
        let elected = group(&registry);
        assert_eq!((elected.leader_id, elected.term), (Some(2), 2));
        assert_eq!(elected.leader_addr, "127.0.0.1:10002");
        assert_eq!(elected.nodes.len(), 2, "node 1 stays until it expires");
        assert_eq!(elected.current_node_ids, [2], "node 1 has not seen term 2");
    }

    #[test]
    fn unknown_topics_route_to_groups_that_create_on_first_send() {
        let now = Instant::now();
        let mut registry = RouteRegistry::default();
        registry.register(registration(1, pb::Role::Leader, 1, &["known"]), now);
        assert!(registry.topic_route("fresh").is_none());
        let mut auto = registration(1, pb::Role::Leader, 1, &["known"]);
        auto.auto_create_queue_count = 4;
        registry.register(auto, now);
        let route = registry.topic_route("fresh").expect("an auto-create route");
        assert_eq!(
            (route.queues[0].write_queue_count, route.queues[0].perm),
            (4, 6)
        );
        assert_eq!(
            registry.topic_route("known").expect("route").queues[0].write_queue_count,
            4
        );
        assert_eq!(
            registry.topic_list().topics,
            vec!["known".to_owned()],
            "not listed as a topic"
        );
    }

    #[test]
    fn silent_nodes_expire_and_empty_groups_go() {
        let start = Instant::now();
        let expiry = Duration::from_secs(120);
        let mut registry = RouteRegistry::default();
        registry.register(registration(1, pb::Role::Leader, 1, &["t"]), start);
        registry.register(
            registration(2, pb::Role::Follower, 1, &[]),
            start + Duration::from_secs(100),
        );
        assert_eq!(
            registry.expire(start + expiry - Duration::from_millis(1), expiry),
            0
        );
        assert_eq!(registry.expire(start + expiry, expiry), 1);
        let info = registry.cluster_info();
        assert_eq!(
            info.groups[0].nodes.keys().copied().collect::<Vec<_>>(),
            vec![2]
        );
        assert_eq!(info.groups[0].leader_id, None, "the leader expired");
        assert_eq!(registry.expire(start + Duration::from_secs(300), expiry), 1);
        assert!(registry.cluster_info().groups.is_empty());
        assert!(registry.topic_route("t").is_none());
    }
}
