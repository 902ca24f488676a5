//! A client's way to the broker groups: topic routes from the nameservers, and calls to a
//! group's leader by group name that follow leader changes (producer and consumer alike).
//!
//! A group's leader comes from its route, from a `NOT_LEADER` hint, or, when neither is
//! known (the leader died), from asking the group's nodes; calls are retried with a growing
//! pause until their deadline, so a leaderless group is waited out without a busy loop.
//!
//! A leader that could not be reached is suspected for a while: the route and the followers
//! keep naming it until a new leader is elected, and a paused process accepts connections
//! but never answers, so second-hand reports of it are ignored until it answers itself.
//! Pauses and suspicions run on tokio's clock, so tests can pause and advance it.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use rocketraft_proto::broker::broker_client::BrokerClient;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::clients::BrokerClients;
use crate::connector::Connector;
use crate::group::BrokerGroupClient;
use crate::group::is_retryable;
use crate::route::RouteCache;
use crate::route::RouteError;
use crate::route::TopicRoute;

/// First pause between attempts while a group has no reachable leader; it doubles up to
/// [`RETRY_PAUSE_MAX`].
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(50);
/// Small, so a caller notices a new leader soon after its election (failover time is
/// measured to the first acknowledged send); each attempt costs a round of small requests.
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(100);
/// How long an unreachable leader stays suspected.
const SUSPECT_FOR: Duration = Duration::from_secs(5);

/// Why a call to a group's leader failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The leader refused the request itself; retrying cannot help.
    #[error("broker group {group} refused: {status}")]
    Rejected {
        group: String,
        status: tonic::Status,
    },
    #[error("broker group {group} had no reachable leader within {timeout:?}: {last_error}")]
    Unavailable {
        group: String,
        timeout: Duration,
        last_error: String,
    },
}

#[derive(Debug, Default, Clone)]
struct GroupNodes {
    leader: Option<SocketAddr>,
    nodes: Vec<SocketAddr>,
    /// A leader that could not be reached, and until when it is suspected.
    suspect: Option<(SocketAddr, Instant)>,
}

impl GroupNodes {
    fn is_suspect(&self, addr: SocketAddr) -> bool {
        self.suspect
            .is_some_and(|(suspect, until)| suspect == addr && Instant::now() < until)
    }
}

pub struct Brokers {
    routes: RouteCache,
    clients: BrokerClients,
    groups: Mutex<HashMap<String, GroupNodes>>,
    /// The route each topic's nodes and leaders were last learned from, so a cached route
    /// is learned once, not on every call.
    learned: Mutex<HashMap<String, Arc<TopicRoute>>>,
}

impl Brokers {
    /// Calls groups found through `routes`, connecting to their nodes through `connector`.
    pub fn new(routes: RouteCache, connector: Connector) -> Brokers {
        Brokers {
            routes,
            clients: BrokerClients::new(connector),
            groups: Mutex::new(HashMap::new()),
            learned: Mutex::new(HashMap::new()),
        }
    }

    /// The route of `topic` (cached); learns its groups' nodes and leaders.
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>, RouteError> {
        let route = self.routes.route(topic).await?;
        let fresh = {
            let mut learned = self
                .learned
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match learned.get(topic) {
                Some(seen) if Arc::ptr_eq(seen, &route) => false,
                _ => {
                    learned.insert(topic.to_owned(), route.clone());
                    true
                }
            }
        };
        if fresh {
            self.learn(&route);
        }
        Ok(route)
    }

    /// The route of `topic`, fetched again.
    pub async fn refresh(&self, topic: &str) -> Result<Arc<TopicRoute>, RouteError> {
        let route = self.routes.refresh(topic).await?;
        self.learn(&route);
        Ok(route)
    }

    /// Every broker group seen in a route so far, sorted.
    pub fn known_groups(&self) -> Vec<String> {
        let mut groups: Vec<String> = self.lock().keys().cloned().collect();
        groups.sort();
        groups
    }

    /// Runs `call` against the leader of `group` until it succeeds, fails for good, or
    /// `timeout` passes. `call` is told whether it is a repeat: an earlier call was made and
    /// may have taken effect though it failed (a write then asks the leader to deduplicate).
    pub async fn on_leader<T, F, Fut>(
        &self,
        group: &str,
        timeout: Duration,
        call: F,
    ) -> Result<T, CallError>
    where
        F: Fn(BrokerClient<Channel>, bool) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let deadline = Instant::now() + timeout;
        let mut pause = RETRY_PAUSE_MIN;
        let mut called = false;
        loop {
            let last_error = match self.leader(group).await {
                None => "no node knows a leader".to_owned(),
                Some(leader) => match self.clients.get(leader).await {
                    Err(error) => {
                        self.suspect_leader(group);
                        error.to_string()
                    }
                    Ok(client) => match call(client, std::mem::replace(&mut called, true)).await {
                        Ok(value) => return Ok(value),
                        Err(status) if is_retryable(&status) => {
                            self.leader_failed(group, &status);
                            status.to_string()
                        }
                        Err(status) => {
                            return Err(CallError::Rejected {
                                group: group.to_owned(),
                                status,
                            });
                        }
                    },
                },
            };
            if Instant::now() + pause >= deadline {
                return Err(CallError::Unavailable {
                    group: group.to_owned(),
                    timeout,
                    last_error,
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_PAUSE_MAX);
        }
    }

    /// Makes `group` known by its `nodes` before any route names it (an endpoint served on a
    /// node of the group serves it from the start); its leader is found on the first call. A
    /// route naming the group later replaces these nodes.
    pub fn know_group(&self, group: &str, nodes: Vec<SocketAddr>) {
        let mut groups = self.lock();
        let known = groups.entry(group.to_owned()).or_default();
        if known.nodes.is_empty() {
            known.nodes = nodes;
        }
    }

    /// The leader of `group` calls go to now, if one is known.
    pub fn known_leader(&self, group: &str) -> Option<SocketAddr> {
        self.lock().get(group).and_then(|known| known.leader)
    }

    /// A call to `group`'s leader failed with `status`: follow its leader hint, or suspect
    /// the leader and find it again on the next call. A hint naming a suspected leader is
    /// hearsay (a follower names a vanished leader until it votes for another) and is not
    /// followed: the call goes to whoever the nodes report next.
    pub fn leader_failed(&self, group: &str, status: &tonic::Status) {
        let hint = rocketraft_proto::leader_addr(status)
            .and_then(|hint| hint.parse().ok())
            .filter(|hint| {
                !self
                    .lock()
                    .get(group)
                    .is_some_and(|known| known.is_suspect(*hint))
            });
        match hint {
            Some(hint) => self.set_leader(group, Some(hint)),
            None => self.suspect_leader(group),
        }
    }

    /// The known leader of `group`, or the one its nodes report.
    async fn leader(&self, group: &str) -> Option<SocketAddr> {
        // The common case, a known leader, copies nothing.
        let nodes = {
            let groups = self.lock();
            let known = groups.get(group)?;
            if known.leader.is_some() {
                return known.leader;
            }
            known.nodes.clone()
        };
        let report = BrokerGroupClient::with_connector(nodes, self.clients.connector().clone())
            .find_leader_report()
            .await?;
        // Followers name a dead or paused leader until they elect a new one.
        let suspect = self
            .lock()
            .get(group)
            .is_some_and(|known| known.is_suspect(report.addr));
        if suspect && !report.answered_itself {
            return None;
        }
        self.set_leader(group, Some(report.addr));
        Some(report.addr)
    }

    fn learn(&self, route: &TopicRoute) {
        let mut groups = self.lock();
        for group in &route.groups {
            let known = groups.entry(group.group.clone()).or_default();
            known.nodes.clone_from(&group.nodes);
            // The nameserver names the leader of the highest term it heard of; a wrong one
            // is corrected by the next NOT_LEADER hint.
            if let Some(leader) = group.leader
                && !known.is_suspect(leader)
            {
                known.leader = Some(leader);
            }
        }
    }

    fn set_leader(&self, group: &str, leader: Option<SocketAddr>) {
        self.lock().entry(group.to_owned()).or_default().leader = leader;
    }

    /// The current leader of `group` could not be reached: look for another.
    fn suspect_leader(&self, group: &str) {
        let mut groups = self.lock();
        let known = groups.entry(group.to_owned()).or_default();
        if let Some(leader) = known.leader.take() {
            known.suspect = Some((leader, Instant::now() + SUSPECT_FOR));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, GroupNodes>> {
        self.groups
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use rocketraft_domain::perm::PERM_READ;
    use rocketraft_domain::perm::PERM_WRITE;
    use rocketraft_proto::common::ResponseCode;

    use super::*;
    use crate::route::test_group;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// A route of topic `T` in which `group` has nodes 1..=3 (ports 1001..=1003), led by
    /// `leader`.
    fn route(group: &str, leader: Option<SocketAddr>) -> TopicRoute {
        let mut queues = test_group(group, 4, PERM_READ | PERM_WRITE);
        queues.leader = leader;
        queues.nodes = vec![addr(1001), addr(1002), addr(1003)];
        TopicRoute::new("T".into(), vec![queues])
    }

    /// A client that knows no nameserver: these tests feed it routes themselves.
    fn brokers() -> Brokers {
        Brokers::new(
            RouteCache::new(Vec::new(), Duration::from_secs(30)),
            Connector::plain(),
        )
    }

    fn not_leader(hint: Option<SocketAddr>) -> tonic::Status {
        let hint = hint.map(|addr| addr.to_string());
        rocketraft_proto::error_status(
            tonic::Code::FailedPrecondition,
            ResponseCode::NotLeader,
            "not the leader".into(),
            hint.as_deref(),
        )
    }

    #[test]
    fn a_route_names_the_leader_and_a_not_leader_hint_moves_it() {
        let brokers = brokers();
        brokers.learn(&route("broker-b", Some(addr(1002))));
        brokers.learn(&route("broker-a", Some(addr(1001))));
        assert_eq!(brokers.known_groups(), ["broker-a", "broker-b"]);
        assert_eq!(brokers.known_leader("broker-a"), Some(addr(1001)));

        brokers.leader_failed("broker-a", &not_leader(Some(addr(1003))));
        assert_eq!(brokers.known_leader("broker-a"), Some(addr(1003)));
        assert_eq!(brokers.known_leader("broker-b"), Some(addr(1002)));
    }

    /// A leader that failed without naming another is suspected: routes that still name it
    /// are not believed until `SUSPECT_FOR` has passed.
    #[tokio::test(start_paused = true)]
    async fn a_leader_that_failed_is_not_learned_again_until_its_suspicion_ends() {
        let brokers = brokers();
        let stale = route("broker-a", Some(addr(1001)));
        brokers.learn(&stale);

        brokers.leader_failed(
            "broker-a",
            &tonic::Status::unavailable("connection refused"),
        );
        assert_eq!(brokers.known_leader("broker-a"), None);
        brokers.learn(&stale);
        assert_eq!(brokers.known_leader("broker-a"), None, "still suspected");

        tokio::time::advance(SUSPECT_FOR - Duration::from_millis(1)).await;
        brokers.learn(&stale);
        assert_eq!(
            brokers.known_leader("broker-a"),
            None,
            "suspected to the end"
        );

        tokio::time::advance(Duration::from_millis(1)).await;
        brokers.learn(&stale);
        assert_eq!(brokers.known_leader("broker-a"), Some(addr(1001)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hint_naming_a_suspected_leader_is_not_followed() {
        let brokers = brokers();
        brokers.learn(&route("broker-a", Some(addr(1001))));
        brokers.leader_failed("broker-a", &tonic::Status::cancelled("Timeout expired"));
        assert_eq!(brokers.known_leader("broker-a"), None);
        // A follower that has not voted yet still names the vanished leader.
        brokers.leader_failed("broker-a", &not_leader(Some(addr(1001))));
        assert_eq!(
            brokers.known_leader("broker-a"),
            None,
            "hearsay of a suspect"
        );
        brokers.leader_failed("broker-a", &not_leader(Some(addr(1002))));
        assert_eq!(brokers.known_leader("broker-a"), Some(addr(1002)));
    }

    #[test]
    fn a_suspected_leader_does_not_hide_a_new_one() {
        let brokers = brokers();
        brokers.learn(&route("broker-a", Some(addr(1001))));
        brokers.leader_failed("broker-a", &tonic::Status::unavailable("gone"));

        brokers.learn(&route("broker-a", Some(addr(1002))));
        assert_eq!(brokers.known_leader("broker-a"), Some(addr(1002)));
    }

    /// With no node to ask, a call waits with growing pauses (50, 100, 100… ms) and gives up
    /// before its deadline rather than after it, naming why; the call itself never runs.
    #[tokio::test(start_paused = true)]
    async fn a_call_to_a_group_nobody_knows_gives_up_within_its_deadline() {
        let brokers = brokers();
        let timeout = Duration::from_secs(1);
        let started = Instant::now();

        let result: Result<(), CallError> = brokers
            .on_leader("broker-z", timeout, |_, _| async {
                panic!("no leader, so no call")
            })
            .await;

        let waited = started.elapsed();
        match result {
            Err(CallError::Unavailable {
                group, last_error, ..
            }) => {
                assert_eq!(group, "broker-z");
                assert_eq!(last_error, "no node knows a leader");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        // 50 + 9 x 100 ms: one more pause would have passed the deadline.
        assert_eq!(waited, Duration::from_millis(950));
    }
}
