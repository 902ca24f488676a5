//! Topic routes from the nameservers, cached: which broker groups serve a topic, their
//! queues, nodes and leaders. A route is refreshed when it is older than its time to live,
//! and at once when a call hits `NOT_LEADER` or a dead node. Concurrent lookups of one topic
//! share one query, asked of every nameserver side by side ([`crate::nameservers`]), and each
//! nameserver is reached over one reused connection, pinged while a query waits on it. Ages
//! are read from tokio's clock, so tests can pause and advance it.

use rocketraft_domain::topic_type::TopicTypeMeaning;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use rocketraft_domain::perm::PERM_READ;
use rocketraft_domain::perm::PERM_WRITE;
use rocketraft_proto::common::ResponseCode;
use rocketraft_proto::common::TopicMessageType;
use rocketraft_proto::nameserver as pb;
use rocketraft_proto::nameserver::name_server_client::NameServerClient;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::connector::Connector;
use crate::nameservers::Refusal;
use crate::nameservers::Unanswered;
use crate::nameservers::ask_side_by_side;

/// How long a cached route is used before it is fetched again (RocketMQ's default).
pub const ROUTE_TTL_DEFAULT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("no broker group serves topic {topic:?} (create it first, or enable auto-creation)")]
    NoRoute { topic: String },
    #[error("no nameserver answered: {last_error}")]
    NameserversUnavailable { last_error: String },
}

/// One queue of a topic in one broker group. The order (topic, group, queue id) is the
/// order rebalancing allocates in.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct MessageQueue {
    pub topic: String,
    pub group: String,
    pub queue_id: i32,
}

impl std::fmt::Display for MessageQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}#{}", self.topic, self.group, self.queue_id)
    }
}

/// One broker group's part of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupQueues {
    pub group: String,
    pub leader: Option<SocketAddr>,
    /// Every live node of the group.
    pub nodes: Vec<SocketAddr>,
    pub read_queue_count: u32,
    pub write_queue_count: u32,
    pub perm: u32,
    /// What the topic takes in this group (never `Unspecified`: a group that says nothing
    /// takes every type, `Mixed`).
    pub message_type: TopicMessageType,
}

/// A group's rank for a key in rendezvous (highest random weight) hashing: the group name's
/// stable hash mixed with the key's (splitmix64's finalizer), so every producer ranks alike.
fn rendezvous_score(key_hash: u64, group: &str) -> (u64, &str) {
    let mut x = key_hash ^ rocketraft_domain::stable_hash::fnv1a_64(group.as_bytes());
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31), group)
}

#[derive(Debug, Clone)]
pub struct TopicRoute {
    pub topic: String,
    /// Every group serving the topic, ordered by name.
    pub groups: Vec<GroupQueues>,
    fetched_at: Instant,
}

impl TopicRoute {
    /// A route fetched now; its groups are kept ordered by name.
    pub fn new(topic: String, mut groups: Vec<GroupQueues>) -> TopicRoute {
        groups.sort_by(|a, b| a.group.cmp(&b.group));
        TopicRoute {
            topic,
            groups,
            fetched_at: Instant::now(),
        }
    }

    /// How many writable queues the topic has over all groups.
    pub fn write_queue_count(&self) -> usize {
        self.writable_groups()
            .map(|(_, group)| group.write_queue_count as usize)
            .sum()
    }

    /// The `n`-th writable (group index, queue id), in a fixed order: the groups by name,
    /// each group's queues by id. Computed, not listed, so a send allocates nothing for it.
    pub fn write_queue(&self, mut n: usize) -> Option<(usize, i32)> {
        for (index, group) in self.writable_groups() {
            let count = group.write_queue_count as usize;
            if n < count {
                return Some((index, n as i32));
            }
            n -= count;
        }
        None
    }

    /// The (group index, queue id) a keyed send with `key_hash` goes to: among the writable
    /// groups with write queues, the one rendezvous hashing ranks first for the key, and in
    /// it queue `key_hash % write queues`. A key stays on its queue as long as its group is
    /// in the route with the same write queue count, whatever other groups join or leave;
    /// a group that joins or leaves moves only the keys it takes or held.
    pub fn keyed_queue(&self, key_hash: u64) -> Option<(usize, i32)> {
        let (index, group) = self
            .writable_groups()
            .filter(|(_, group)| group.write_queue_count > 0)
            .max_by_key(|(_, group)| rendezvous_score(key_hash, &group.group))?;
        Some((
            index,
            (key_hash % u64::from(group.write_queue_count)) as i32,
        ))
    }

    fn writable_groups(&self) -> impl Iterator<Item = (usize, &GroupQueues)> {
        self.groups
            .iter()
            .enumerate()
            .filter(|(_, group)| group.perm & PERM_WRITE != 0)
    }

    /// Every readable queue, sorted.
    pub fn read_queues(&self) -> Vec<MessageQueue> {
        let mut queues: Vec<MessageQueue> = self
            .groups
            .iter()
            .filter(|group| group.perm & PERM_READ != 0)
            .flat_map(|group| {
                (0..group.read_queue_count as i32).map(|queue_id| MessageQueue {
                    topic: self.topic.clone(),
                    group: group.group.clone(),
                    queue_id,
                })
            })
            .collect();
        queues.sort();
        queues
    }
}

pub struct RouteCache {
    nameservers: Vec<String>,
    ttl: Duration,
    /// Fresh routes, for the common case: a lookup that takes no async lock.
    routes: Mutex<HashMap<String, Arc<TopicRoute>>>,
    /// Per topic, the last query and what it returned. Its lock is held across a query, so
    /// callers that need the same topic at the same time wait for one query instead of each
    /// sending their own (a producer starting with hundreds of sends in flight, or a route
    /// expiring under load, would otherwise open a connection per send and overflow the
    /// nameserver's accept queue: every dropped SYN costs a second).
    queries: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Query>>>>>,
    /// One channel per nameserver, opened on first use and reused; it reconnects by itself.
    channels: std::sync::OnceLock<Vec<Channel>>,
    connector: Connector,
}

/// One route query: when it was sent and answered, and its outcome.
struct Query {
    sent_at: Instant,
    done_at: Instant,
    result: Result<Arc<TopicRoute>, RouteError>,
}

impl RouteCache {
    pub fn new(nameservers: Vec<String>, ttl: Duration) -> RouteCache {
        RouteCache::with_connector(nameservers, ttl, Connector::plain())
    }

    /// A cache that reaches the nameservers through `connector` (plain or TLS).
    pub fn with_connector(
        nameservers: Vec<String>,
        ttl: Duration,
        connector: Connector,
    ) -> RouteCache {
        RouteCache {
            nameservers,
            ttl,
            routes: Mutex::new(HashMap::new()),
            queries: Mutex::new(HashMap::new()),
            channels: std::sync::OnceLock::new(),
            connector,
        }
    }

    /// The cached route of `topic`, fetched if missing or stale. A failed lookup is shared
    /// only with callers that waited for it, never cached.
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>, RouteError> {
        let cached = lock(&self.routes).get(topic).cloned();
        if let Some(route) = cached
            && route.fetched_at.elapsed() < self.ttl
        {
            return Ok(route);
        }
        let called_at = Instant::now();
        // Boxed: the query's future is large and rarely needed, and every send awaits this.
        Box::pin(self.shared_query(topic, |query| match query.result {
            Ok(_) => query.sent_at.elapsed() < self.ttl,
            Err(_) => query.done_at >= called_at,
        }))
        .await
    }

    /// Fetches `topic`'s route again: the outcome of a query sent after this call began.
    pub async fn refresh(&self, topic: &str) -> Result<Arc<TopicRoute>, RouteError> {
        let called_at = Instant::now();
        Box::pin(self.shared_query(topic, |query| query.sent_at >= called_at)).await
    }

    /// The outcome of the last query for `topic` if `usable` accepts it (it may have finished
    /// while this caller waited for the topic's query lock), else of a new query.
    async fn shared_query(
        &self,
        topic: &str,
        usable: impl Fn(&Query) -> bool,
    ) -> Result<Arc<TopicRoute>, RouteError> {
        let slot = lock(&self.queries)
            .entry(topic.to_owned())
            .or_default()
            .clone();
        let mut last = slot.lock().await;
        if let Some(query) = last.as_ref().filter(|query| usable(query)) {
            return query.result.clone();
        }
        let sent_at = Instant::now();
        let result = self.query(topic).await;
        if let Ok(route) = &result {
            lock(&self.routes).insert(topic.to_owned(), route.clone());
        }
        *last = Some(Query {
            sent_at,
            done_at: Instant::now(),
            result: result.clone(),
        });
        result
    }

    /// Asks the nameservers side by side; the first that knows the topic answers.
    async fn query(&self, topic: &str) -> Result<Arc<TopicRoute>, RouteError> {
        let channels = self.channels()?;
        let answer = ask_side_by_side(&self.nameservers, |index| {
            query(channels[index].clone(), topic)
        })
        .await;
        match answer {
            Ok(route) => Ok(Arc::new(route)),
            Err(Unanswered::NotFound(())) => Err(RouteError::NoRoute {
                topic: topic.to_owned(),
            }),
            Err(Unanswered::Failed(last_error)) => {
                Err(RouteError::NameserversUnavailable { last_error })
            }
        }
    }

    fn channels(&self) -> Result<&[Channel], RouteError> {
        if let Some(channels) = self.channels.get() {
            return Ok(channels);
        }
        let channels = self
            .nameservers
            .iter()
            .map(|nameserver| {
                self.connector
                    .nameserver_endpoint(nameserver)
                    .map(|endpoint| endpoint.connect_lazy())
                    .map_err(|last_error| RouteError::NameserversUnavailable { last_error })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self.channels.get_or_init(|| channels))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn query(channel: Channel, topic: &str) -> Result<TopicRoute, Refusal<()>> {
    let request = pb::GetTopicRouteRequest {
        topic: topic.to_owned(),
    };
    match NameServerClient::new(channel)
        .get_topic_route(request)
        .await
    {
        Ok(response) => Ok(to_route(response.into_inner())),
        Err(status)
            if rocketraft_proto::response_code(&status)
                == Some(ResponseCode::TopicRouteNotExist) =>
        {
            Err(Refusal::NotFound(()))
        }
        Err(status) => Err(Refusal::Failed(status.to_string())),
    }
}

fn to_route(route: pb::TopicRoute) -> TopicRoute {
    let groups: Vec<GroupQueues> = route
        .queues
        .iter()
        .map(|queues| {
            let group = route
                .groups
                .iter()
                .find(|group| group.group == queues.group);
            GroupQueues {
                group: queues.group.clone(),
                leader: group.and_then(|group| group.leader_addr.parse().ok()),
                nodes: group.map_or_else(Vec::new, |group| {
                    group
                        .nodes
                        .values()
                        .filter_map(|addr| addr.parse().ok())
                        .collect()
                }),
                read_queue_count: queues.read_queue_count,
                write_queue_count: queues.write_queue_count,
                perm: queues.perm,
                message_type: queues.message_type().or_mixed(),
            }
        })
        .collect();
    TopicRoute::new(route.topic, groups)
}

/// A group of a test route: no nodes, as many read as write queues.
#[cfg(test)]
pub(crate) fn test_group(name: &str, write_queue_count: u32, perm: u32) -> GroupQueues {
    GroupQueues {
        group: name.into(),
        leader: None,
        nodes: Vec::new(),
        read_queue_count: write_queue_count,
        write_queue_count,
        perm,
        message_type: TopicMessageType::Mixed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_queues_skip_read_only_groups_and_end_at_the_count() {
        let route = TopicRoute::new(
            "T".into(),
            vec![
                test_group("a", 2, PERM_READ | PERM_WRITE),
                test_group("b", 3, PERM_READ),
                test_group("c", 1, PERM_WRITE),
            ],
        );
        assert_eq!(route.write_queue_count(), 3);
        let queues: Vec<_> = (0..4).map(|n| route.write_queue(n)).collect();
        assert_eq!(queues, [Some((0, 0)), Some((0, 1)), Some((2, 0)), None]);
    }

    /// A nameserver on port 0 that routes topic `T` to group `broker-a` led by `leader`.
    async fn nameserver_routing_t(leader: SocketAddr) -> rocketraft_nameserver::server::NameServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let nameserver =
            rocketraft_nameserver::server::NameServer::start_on(listener, Default::default())
                .expect("nameserver");
        NameServerClient::connect(format!("http://{}", nameserver.addr()))
            .await
            .expect("connect")
            .register_broker(pb::RegisterBrokerRequest {
                cluster: "C".into(),
                group: "broker-a".into(),
                node_id: 1,
                addr: leader.to_string(),
                role: pb::Role::Leader.into(),
                term: 1,
                topics: vec![pb::TopicConfig {
                    name: "T".into(),
                    read_queue_count: 4,
                    write_queue_count: 4,
                    perm: PERM_READ | PERM_WRITE,
                    ..Default::default()
                }],
                auto_create_queue_count: 0,
                members: vec![1],
            })
            .await
            .expect("register");
        nameserver
    }

    /// The cache answers from memory for exactly its time to live, then asks again (here
    /// nobody, so the lookup fails instead of serving the stale route). Time is paused once
    /// the nameserver is gone, and advanced from the route's age then, so the boundary is
    /// exact.
    #[tokio::test]
    async fn a_route_is_served_from_cache_for_its_ttl_and_asked_for_again_after() {
        let leader: SocketAddr = "127.0.0.1:10911".parse().expect("addr");
        let nameserver = nameserver_routing_t(leader).await;
        let ttl = Duration::from_secs(30);
        let cache = RouteCache::new(vec![nameserver.addr().to_string()], ttl);
        let first = cache.route("T").await.expect("route");
        assert_eq!(first.groups[0].leader, Some(leader));
        assert_eq!(first.write_queue_count(), 4);
        nameserver.shutdown().await;
        tokio::time::pause();
        // The shutdown took real time (up to its grace period, on a loaded machine).
        let remaining = ttl - first.fetched_at.elapsed();

        tokio::time::advance(remaining - Duration::from_millis(1)).await;
        let cached = cache.route("T").await.expect("still cached");
        assert!(Arc::ptr_eq(&first, &cached), "served from the cache");

        tokio::time::advance(Duration::from_millis(1)).await;
        let error = cache.route("T").await.expect_err("expired and asked again");
        assert!(
            matches!(error, RouteError::NameserversUnavailable { .. }),
            "{error}"
        );
    }
}
