//! Topic routes from the nameservers, cached: which broker groups serve a topic, their
//! queues, nodes and leaders. A route is refreshed when it is older than its time to live,
//! and at once when a call hits `NOT_LEADER` or a dead node.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use rocketraft_proto::nameserver as pb;
use rocketraft_proto::nameserver::name_server_client::NameServerClient;

/// How long a cached route is used before it is fetched again (RocketMQ's default).
pub const ROUTE_TTL_DEFAULT: Duration = Duration::from_secs(30);
/// How long one nameserver query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(3);
/// RocketMQ permission bit: the topic's queues in a group may be written.
const PERM_WRITE: u32 = 2;
/// RocketMQ permission bit: the topic's queues in a group may be read.
const PERM_READ: u32 = 4;

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
}

#[derive(Debug, Clone)]
pub struct TopicRoute {
    pub topic: String,
    /// Every group serving the topic, ordered by name.
    pub groups: Vec<GroupQueues>,
    fetched_at: Instant,
}

impl TopicRoute {
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
    routes: Mutex<HashMap<String, Arc<TopicRoute>>>,
}

impl RouteCache {
    pub fn new(nameservers: Vec<String>, ttl: Duration) -> RouteCache {
        RouteCache {
            nameservers,
            ttl,
            routes: Mutex::new(HashMap::new()),
        }
    }

    /// The cached route of `topic`, fetched if missing or stale.
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>, RouteError> {
        let cached = self.lock().get(topic).cloned();
        match cached {
            Some(route) if route.fetched_at.elapsed() < self.ttl => Ok(route),
            _ => self.refresh(topic).await,
        }
    }

    /// Fetches `topic`'s route from the first nameserver that answers.
    pub async fn refresh(&self, topic: &str) -> Result<Arc<TopicRoute>, RouteError> {
        let mut last_error = String::from("no nameserver configured");
        for nameserver in &self.nameservers {
            match query(nameserver, topic).await {
                Ok(route) => {
                    let route = Arc::new(route);
                    self.lock().insert(topic.to_owned(), route.clone());
                    return Ok(route);
                }
                Err(QueryError::NotFound) => {
                    return Err(RouteError::NoRoute {
                        topic: topic.to_owned(),
                    });
                }
                Err(QueryError::Failed(error)) => last_error = format!("{nameserver}: {error}"),
            }
        }
        Err(RouteError::NameserversUnavailable { last_error })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<TopicRoute>>> {
        self.routes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

enum QueryError {
    NotFound,
    Failed(String),
}

async fn query(nameserver: &str, topic: &str) -> Result<TopicRoute, QueryError> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{nameserver}"))
        .map_err(|error| QueryError::Failed(error.to_string()))?
        .connect_timeout(QUERY_TIMEOUT)
        .timeout(QUERY_TIMEOUT);
    let channel = endpoint
        .connect()
        .await
        .map_err(|error| QueryError::Failed(error.to_string()))?;
    let request = pb::GetTopicRouteRequest {
        topic: topic.to_owned(),
    };
    match NameServerClient::new(channel)
        .get_topic_route(request)
        .await
    {
        Ok(response) => Ok(to_route(response.into_inner())),
        Err(status) if status.code() == tonic::Code::NotFound => Err(QueryError::NotFound),
        Err(status) => Err(QueryError::Failed(status.to_string())),
    }
}

fn to_route(route: pb::TopicRoute) -> TopicRoute {
    let mut groups: Vec<GroupQueues> = route
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
            }
        })
        .collect();
    groups.sort_by(|a, b| a.group.cmp(&b.group));
    TopicRoute {
        topic: route.topic,
        groups,
        fetched_at: Instant::now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, write_queue_count: u32, perm: u32) -> GroupQueues {
        GroupQueues {
            group: name.into(),
            leader: None,
            nodes: Vec::new(),
            read_queue_count: write_queue_count,
            write_queue_count,
            perm,
        }
    }

    #[test]
    fn write_queues_skip_read_only_groups_and_end_at_the_count() {
        let route = TopicRoute {
            topic: "T".into(),
            groups: vec![
                group("a", 2, PERM_READ | PERM_WRITE),
                group("b", 3, PERM_READ),
                group("c", 1, PERM_WRITE),
            ],
            fetched_at: Instant::now(),
        };
        assert_eq!(route.write_queue_count(), 3);
        let queues: Vec<_> = (0..4).map(|n| route.write_queue(n)).collect();
        assert_eq!(queues, [Some((0, 0)), Some((0, 1)), Some((2, 0)), None]);
    }
}
