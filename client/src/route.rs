//! Topic routes from the nameservers, cached: which broker groups serve a topic, their
//! write queues and their leaders. A route is refreshed when it is older than its time to
//! live, and at once when a send hits `NOT_LEADER` or a dead node.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use rocketraft_proto::nameserver as pb;
use rocketraft_proto::nameserver::name_server_client::NameServerClient;

use crate::error::ProducerError;

/// How long a cached route is used before it is fetched again (RocketMQ's default).
pub const ROUTE_TTL_DEFAULT: Duration = Duration::from_secs(30);
/// How long one nameserver query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(3);
/// RocketMQ permission bit: the topic's queues in a group may be written.
const PERM_WRITE: u32 = 2;

/// One broker group's part of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupQueues {
    pub group: String,
    pub leader: Option<SocketAddr>,
    pub write_queue_count: u32,
}

#[derive(Debug, Clone)]
pub struct TopicRoute {
    /// Groups whose queues of the topic are writable, ordered by name.
    pub groups: Vec<GroupQueues>,
    fetched_at: Instant,
}

impl TopicRoute {
    /// Every writable (group index, queue id), in a fixed order.
    pub fn write_queues(&self) -> Vec<(usize, i32)> {
        self.groups
            .iter()
            .enumerate()
            .flat_map(|(index, group)| {
                (0..group.write_queue_count as i32).map(move |queue| (index, queue))
            })
            .collect()
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
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>, ProducerError> {
        let cached = self.lock().get(topic).cloned();
        match cached {
            Some(route) if route.fetched_at.elapsed() < self.ttl => Ok(route),
            _ => self.refresh(topic).await,
        }
    }

    /// Fetches `topic`'s route from the first nameserver that answers.
    pub async fn refresh(&self, topic: &str) -> Result<Arc<TopicRoute>, ProducerError> {
        let mut last_error = String::from("no nameserver configured");
        for nameserver in &self.nameservers {
            match query(nameserver, topic).await {
                Ok(route) => {
                    let route = Arc::new(route);
                    self.lock().insert(topic.to_owned(), route.clone());
                    return Ok(route);
                }
                Err(QueryError::NotFound) => {
                    return Err(ProducerError::NoRoute {
                        topic: topic.to_owned(),
                    });
                }
                Err(QueryError::Failed(error)) => last_error = format!("{nameserver}: {error}"),
            }
        }
        Err(ProducerError::NameserversUnavailable { last_error })
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
        .filter(|queues| queues.perm & PERM_WRITE != 0 && queues.write_queue_count > 0)
        .map(|queues| GroupQueues {
            group: queues.group.clone(),
            leader: route
                .groups
                .iter()
                .find(|group| group.group == queues.group)
                .and_then(|group| group.leader_addr.parse().ok()),
            write_queue_count: queues.write_queue_count,
        })
        .collect();
    groups.sort_by(|a, b| a.group.cmp(&b.group));
    TopicRoute {
        groups,
        fetched_at: Instant::now(),
    }
}
